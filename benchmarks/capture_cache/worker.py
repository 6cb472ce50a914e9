"""One process of the capture-cache benchmark (run.py): makes a model with random weights,
then times from the ms_aten call to its first result (`ms_aten.module` + the first forward, or
`ms_aten.causal_lm` + `generate` of 4 tokens), with the capture cache ($MS_ATEN_PROGRAM_CACHE)
as run.py left it; and where a capture's time went: torch.export, run_decompositions and
ms_aten's own (timed by wrapping torch's two calls and ms_aten's TorchModule._capture)."""
from __future__ import annotations

import argparse
import time

import torch
import transformers
from torch.export import ExportedProgram

from benchmarks.common import workers

# Random-weight models of known shapes: no download.
CONFIGS = {
    "gpt2-tiny": lambda: transformers.GPT2LMHeadModel(transformers.GPT2Config(
        n_embd=64, n_layer=2, n_head=2, vocab_size=1000, n_positions=128)),
    "gpt2-small": lambda: transformers.GPT2LMHeadModel(transformers.GPT2Config()),
    "qwen2-small": lambda: transformers.Qwen2ForCausalLM(transformers.Qwen2Config(
        hidden_size=128, intermediate_size=256, num_hidden_layers=4, num_attention_heads=4,
        num_key_value_heads=2, vocab_size=2000, tie_word_embeddings=True)),
    # Qwen2-0.5B's shapes (494 M parameters): for a quiet machine with 8 GiB free.
    "qwen2-0.5b": lambda: transformers.Qwen2ForCausalLM(transformers.Qwen2Config(
        hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14,
        num_key_value_heads=2, vocab_size=151936, tie_word_embeddings=True,
        max_position_embeddings=32768)),
}
PROMPT, NEW = 8, 4
SPENT = {"torch.export": 0.0, "run_decompositions": 0.0, "capture": 0.0}


def _timed(what: str, fn):
    def timed(*args, **kwargs):
        start = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            SPENT[what] += time.perf_counter() - start
    return timed


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", choices=sorted(CONFIGS), required=True)
    parser.add_argument("--route", choices=["module", "causal_lm"], required=True)
    args = parser.parse_args()
    import mindspore as ms

    import ms_aten
    from ms_aten.programs.module import TorchModule

    ms.set_device("CPU")
    ms.set_context(mode=ms.GRAPH_MODE)
    torch.export.export = _timed("torch.export", torch.export.export)
    ExportedProgram.run_decompositions = _timed(  # type: ignore[method-assign]
        "run_decompositions", ExportedProgram.run_decompositions)
    # The whole capture: the cache's key, the lock, torch's work and ms_aten's, the entry
    # stored (a first process); the key and the entry read (a second).
    TorchModule._capture = _timed("capture", TorchModule._capture)  # type: ignore
    torch.manual_seed(0)
    model = CONFIGS[args.model]().eval()
    prompt = torch.randint(0, model.config.vocab_size, (1, PROMPT),
                           generator=torch.Generator().manual_seed(1))
    start = time.perf_counter()
    if args.route == "module":
        cell = ms_aten.module(model, (prompt,), kwargs={"use_cache": False})
        logits = cell(ms_aten.to_ms(prompt))["logits"].asnumpy()
        seconds = time.perf_counter() - start
        with torch.no_grad():
            want = model(prompt, use_cache=False).logits.numpy()
        right = float(abs(logits - want).max()) < 1e-3
    else:
        cell = ms_aten.causal_lm(model, max_cache_len=PROMPT + NEW)
        tokens = ms_aten.generate(cell, prompt.numpy(), max_new_tokens=NEW).asnumpy()
        seconds = time.perf_counter() - start
        with torch.no_grad():
            want = model.generate(prompt, max_new_tokens=NEW, do_sample=False,
                                  pad_token_id=0).numpy()
        right = tokens.tolist() == want.tolist()
    workers.emit({"model": args.model, "route": args.route, "cache": cell.capture_cache,
                  "seconds": round(seconds, 3), "right": right,
                  **{f"{k}_s": round(v, 3) for k, v in SPENT.items()}})


if __name__ == "__main__":
    main()
