"""Fine-tune a (tiny, randomly initialised) HuggingFace GPT-2 in MindSpore through ms_aten.module.

    python examples/finetune_gpt2.py [--steps 150] [--mode graph|pynative] [--plot FILE.png]

The whole GPT2LMHeadModel forward runs as one ms_aten kernel; its weights are MindSpore
Parameters trained by MindSpore's nn.Adam in a jitted GRAPH-mode step, beside the same model
trained by torch.optim.Adam from the same weights and data. At the end the MindSpore-trained
weights go back into the torch model (`cell.torch_state_dict()`), which then scores the data
as the MindSpore cell does.
"""
from __future__ import annotations

import argparse
import copy

import mindspore as ms
import numpy as np
import torch
import transformers
from mindspore import nn, ops

import ms_aten
from ms_aten import to_ms

VOCAB, SEQ, BATCH, LR = 64, 16, 8, 1e-3


def make_model(seed: int = 0) -> transformers.GPT2LMHeadModel:
    torch.manual_seed(seed)
    config = transformers.GPT2Config(
        vocab_size=VOCAB, n_positions=SEQ, n_embd=64, n_layer=2, n_head=4, use_cache=False,
        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=0, eos_token_id=0)
    return transformers.GPT2LMHeadModel(config)


def make_data(seed: int = 0) -> torch.Tensor:
    """Sequences that count up from a random start by a random stride (mod VOCAB): a pattern
    a small LM learns in a few hundred steps."""
    rng = np.random.default_rng(seed)
    start = rng.integers(0, VOCAB, (BATCH, 1))
    stride = rng.integers(1, 4, (BATCH, 1))
    return torch.from_numpy((start + stride * np.arange(SEQ + 1)) % VOCAB)


class LanguageModelLoss(nn.Cell):
    """Next-token cross entropy over the ms_aten GPT-2's logits, in MindSpore."""

    def __init__(self, model: nn.Cell):
        super().__init__()
        self.model = model

    def construct(self, tokens, targets):
        logits = self.model(input_ids=tokens)["logits"]
        return ops.cross_entropy(logits.reshape(-1, VOCAB), targets.reshape(-1))


def torch_loss(model: torch.nn.Module, data: torch.Tensor) -> torch.Tensor:
    logits = model(data[:, :-1]).logits
    return torch.nn.functional.cross_entropy(logits.reshape(-1, VOCAB), data[:, 1:].reshape(-1))


def torch_losses(model: torch.nn.Module, data: torch.Tensor, steps: int) -> list[float]:
    optimizer = torch.optim.Adam(model.parameters(), lr=LR)
    losses = []
    for _ in range(steps):
        optimizer.zero_grad()
        loss = torch_loss(model, data)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


def mindspore_losses(cell: ms_aten.TorchModule, data: torch.Tensor, steps: int,
                     mode: str) -> list[float]:
    optimizer = nn.Adam(cell.trainable_params(), learning_rate=LR)
    grad_fn = ms.value_and_grad(LanguageModelLoss(cell), None, optimizer.parameters)

    def step(tokens, targets):
        loss, grads = grad_fn(tokens, targets)
        optimizer(grads)
        return loss

    if mode == "graph":
        step = ms.jit(step)
    tokens, targets = to_ms(data[:, :-1]), to_ms(data[:, 1:])
    return [float(step(tokens, targets).asnumpy()) for _ in range(steps)]


def plot(path: str, bridged: list[float], reference: list[float]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.plot(reference, label="PyTorch (torch.optim.Adam)", linewidth=3, alpha=0.5)
    ax.plot(bridged, label="MindSpore nn.Adam + ms_aten.module", linestyle="--")
    ax.set_xlabel("step")
    ax.set_ylabel("next-token cross entropy")
    ax.set_title("Fine-tuning a 2-layer GPT-2, same init and data")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv: list[str] | None = None) -> tuple[list[float], list[float]]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--mode", choices=("graph", "pynative"), default="graph")
    parser.add_argument("--plot", help="write the loss curves to this PNG")
    args = parser.parse_args(argv)
    ms.set_device("CPU")
    ms.set_context(mode=ms.GRAPH_MODE if args.mode == "graph" else ms.PYNATIVE_MODE)
    model, data = make_model(), make_data()
    reference_model = copy.deepcopy(model)
    cell = ms_aten.module(model, kwargs={"input_ids": data[:, :-1]})
    bridged = mindspore_losses(cell, data, args.steps, args.mode)
    reference = torch_losses(reference_model, data, args.steps)
    gap = max(abs(b - r) / abs(r) for b, r in zip(bridged, reference, strict=True))
    print(f"{args.mode}: {cell.program.n_nodes} ATen ops in one kernel; loss {bridged[0]:.4f} -> "
          f"{bridged[-1]:.4f} in {args.steps} steps (torch: {reference[0]:.4f} -> "
          f"{reference[-1]:.4f}); largest relative gap {gap:.2e}")
    # Back to PyTorch: the MindSpore-trained weights, scored by torch.
    model.load_state_dict(cell.torch_state_dict())
    with torch.no_grad():
        print(f"torch model with the MindSpore-trained weights: loss "
              f"{torch_loss(model, data).item():.4f}")
    if args.plot:
        plot(args.plot, bridged, reference)
    return bridged, reference


if __name__ == "__main__":
    main()
