"""Decoding with a static KV cache: a (tiny, randomly initialised) HuggingFace Llama with
grouped-query attention as one MindSpore Cell, greedy and top-k / top-p sampling.

    python examples/generate_kv_cache.py [--mode graph|pynative] [--prompt 8] [--new 24]

ms_aten.causal_lm captures the model over transformers' StaticCache once, with the sequence
length dynamic: one program runs the prompt (prefill) and each new token (decode), writing the
cache, held as non-trainable Parameters, at the positions it is given. ms_aten.generate is the
loop, with model.generate's argument names; in GRAPH mode the whole loop is one compiled graph.
`decode_by_hand` is the same greedy loop written out, for a loop of your own. The greedy tokens
must equal transformers' model.generate; the script prints them, a seeded sample, and the times.
"""
from __future__ import annotations

import argparse
import time

import mindspore as ms
import numpy as np
import torch
import transformers

import ms_aten

VOCAB = 128


def make_model(seed: int = 0) -> transformers.LlamaForCausalLM:
    torch.manual_seed(seed)
    config = transformers.LlamaConfig(
        vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
        initializer_range=0.3, bos_token_id=None, eos_token_id=None, pad_token_id=None)
    return transformers.LlamaForCausalLM(config).eval()


def decode_by_hand(lm: ms_aten.CausalLM, prompt: np.ndarray, new: int) -> np.ndarray:
    """Greedy decoding with the Cell alone: the prompt at positions 0..n-1, then each token at
    the next position. The cache needs no reset: the positions say what is valid."""
    length = prompt.shape[1]
    logits = lm(ms.Tensor(prompt), ms.Tensor(np.arange(length)), logits_to_keep=1)
    tokens = [prompt]
    for position in range(length, length + new):
        token = logits.asnumpy()[:, -1].argmax(-1)[:, None]
        tokens.append(token)
        if position < length + new - 1:  # the last token is not fed back
            logits = lm(ms.Tensor(token), ms.Tensor([position]))
    return np.concatenate(tokens, axis=1)


def main(argv: list[str] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Decodes with ms_aten and with transformers; the two greedy sequences (equal)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mode", choices=["graph", "pynative"], default="graph")
    parser.add_argument("--prompt", type=int, default=8, help="prompt length")
    parser.add_argument("--new", type=int, default=24, help="tokens to generate")
    args = parser.parse_args(argv)
    ms.set_context(mode=ms.GRAPH_MODE if args.mode == "graph" else ms.PYNATIVE_MODE)

    model = make_model()
    prompt = torch.randint(0, VOCAB, (1, args.prompt), generator=torch.Generator().manual_seed(1))
    start = time.perf_counter()
    lm = ms_aten.causal_lm(model, max_cache_len=args.prompt + args.new)
    print(f"capture {time.perf_counter() - start:.2f} s")

    ms_aten.generate(lm, prompt.numpy(), max_new_tokens=2)  # GRAPH mode compiles the loop here
    start = time.perf_counter()
    got = ms_aten.generate(lm, prompt.numpy(), max_new_tokens=args.new).asnumpy()
    seconds = time.perf_counter() - start
    with torch.no_grad():
        expected = model.generate(prompt, max_new_tokens=args.new, do_sample=False,
                                  pad_token_id=0).numpy()
    print(f"ms_aten ({args.mode}): {got[0].tolist()}")
    print(f"transformers:     {expected[0].tolist()}")
    print(f"{args.new} tokens in {seconds * 1e3:.1f} ms ({seconds / args.new * 1e3:.2f} ms each, "
          f"prefill included)")
    if not np.array_equal(got, expected):
        raise SystemExit("the tokens differ from transformers' greedy decoding")
    if not np.array_equal(decode_by_hand(lm, prompt.numpy(), args.new), expected):
        raise SystemExit("the hand-written loop's tokens differ from transformers'")

    sampled = ms_aten.generate(lm, prompt.numpy(), max_new_tokens=args.new, do_sample=True,
                               top_k=20, top_p=0.9, temperature=0.8, seed=0)
    print(f"sampled (seed 0): {sampled.asnumpy()[0].tolist()}")
    print("greedy tokens equal transformers'")
    return got, expected


if __name__ == "__main__":
    main()
