"""Greedy decoding with a (tiny, randomly initialised) HuggingFace GPT-2 through ms_aten.module,
captured once with a dynamic sequence length.

    python examples/generate_gpt2.py [--mode graph|pynative] [--prompt 8] [--tokens 40]

Each step feeds the whole sequence so far (no KV cache), so every step has a new length: the
module is captured with torch.export's dynamic_shapes, and one program (and, in GRAPH mode, one
compiled graph) serves every length. The tokens must equal torch's greedy decoding of the same
model; the script prints both and the time per generated token.
"""
from __future__ import annotations

import argparse
import time

import mindspore as ms
import torch
import transformers
from mindspore import ops
from torch.export import Dim

import ms_aten

VOCAB, MAX_LENGTH = 100, 64


def make_model(seed: int = 0) -> transformers.GPT2LMHeadModel:
    torch.manual_seed(seed)
    config = transformers.GPT2Config(
        vocab_size=VOCAB, n_positions=MAX_LENGTH, n_embd=32, n_layer=2, n_head=2, use_cache=False,
        bos_token_id=0, eos_token_id=0)
    return transformers.GPT2LMHeadModel(config).eval()


def torch_greedy(model: torch.nn.Module, prompt: torch.Tensor, steps: int) -> torch.Tensor:
    tokens = prompt
    with torch.no_grad():
        for _ in range(steps):
            next_token = model(tokens).logits[:, -1].argmax(-1, keepdim=True)
            tokens = torch.cat([tokens, next_token], dim=1)
    return tokens


def ms_greedy(cell: ms_aten.TorchModule, prompt: ms.Tensor, steps: int) -> tuple[ms.Tensor, float]:
    """The tokens, and the seconds per step after the first (which compiles in GRAPH mode)."""
    tokens = prompt
    start = 0.0
    for step in range(steps):
        if step == 1:
            start = time.perf_counter()
        logits = cell(input_ids=tokens)["logits"]  # the model's own call; its fields by name
        next_token = ops.argmax(logits[:, -1], dim=-1, keepdim=True)
        tokens = ops.concat([tokens, next_token.astype(tokens.dtype)], axis=1)
    tokens.asnumpy()  # wait for the last step
    return tokens, (time.perf_counter() - start) / max(steps - 1, 1)


def main(argv: list[str] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Decodes with ms_aten and with torch; the two token sequences (they must be equal)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mode", choices=["graph", "pynative"], default="graph")
    parser.add_argument("--prompt", type=int, default=8, help="prompt length")
    parser.add_argument("--tokens", type=int, default=40, help="length to generate up to")
    args = parser.parse_args(argv)
    ms.set_context(mode=ms.GRAPH_MODE if args.mode == "graph" else ms.PYNATIVE_MODE)

    model = make_model()
    prompt = torch.randint(1, VOCAB, (2, args.prompt), generator=torch.Generator().manual_seed(1))
    start = time.perf_counter()
    seq = Dim("seq", min=2, max=MAX_LENGTH)
    cell = ms_aten.module(model, kwargs={"input_ids": prompt},
                          dynamic_shapes={"input_ids": {1: seq}})
    captured = time.perf_counter() - start

    steps = args.tokens - args.prompt
    start = time.perf_counter()
    tokens, per_step = ms_greedy(cell, ms_aten.to_ms(prompt), steps)
    total = time.perf_counter() - start
    expected = torch_greedy(model, prompt, steps)
    got = ms_aten.to_torch(tokens)
    print(f"ms_aten ({args.mode}): {got[0].tolist()}")
    print(f"torch eager:     {expected[0].tolist()}")
    print(f"capture {captured:.2f} s; {steps} steps in {total:.2f} s, "
          f"{per_step * 1e3:.2f} ms per token after the first")
    if not torch.equal(got, expected):
        raise SystemExit("the tokens differ from torch's greedy decoding")
    print("tokens equal torch's")
    return got, expected


if __name__ == "__main__":
    main()
