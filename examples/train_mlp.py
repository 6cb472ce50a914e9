"""Train a small MindSpore MLP built from bridged ATen ops, next to the same network in PyTorch.

    python examples/train_mlp.py [--steps 300] [--mode graph|pynative] [--plot docs/train_mlp.png]

Both networks start from the same weights and see the same data; the script prints both loss
trajectories' largest relative gap and, with --plot, draws them.
"""
from __future__ import annotations

import argparse

import mindspore as ms
import numpy as np
import torch
import torch.nn.functional as F
from mindspore import Parameter, Tensor, nn

import ms_aten

IN, HIDDEN, OUT, BATCH, LR = 8, 32, 1, 64, 0.05


def make_data(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """A synthetic regression task: y = sin(x·a) + 0.5·(x·b)^2."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((BATCH, IN)).astype(np.float32)
    a, b = rng.standard_normal((IN,)), rng.standard_normal((IN,)) / 4
    y = (np.sin(x @ a) + 0.5 * (x @ b) ** 2).astype(np.float32)[:, None]
    return x, y


def make_weights(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed + 1)
    return {
        "w1": (rng.standard_normal((HIDDEN, IN)) / np.sqrt(IN)).astype(np.float32),
        "b1": np.zeros(HIDDEN, np.float32),
        "gamma": np.ones(HIDDEN, np.float32),
        "beta": np.zeros(HIDDEN, np.float32),
        "w2": (rng.standard_normal((OUT, HIDDEN)) / np.sqrt(HIDDEN)).astype(np.float32),
        "b2": np.zeros(OUT, np.float32),
    }


class BridgedMLP(nn.Cell):
    """linear -> gelu -> layer_norm -> linear, every op from ATen through ms_aten."""

    def __init__(self, weights: dict[str, np.ndarray]):
        super().__init__()
        self.w1 = Parameter(Tensor(weights["w1"]), "w1")
        self.b1 = Parameter(Tensor(weights["b1"]), "b1")
        self.gamma = Parameter(Tensor(weights["gamma"]), "gamma")
        self.beta = Parameter(Tensor(weights["beta"]), "beta")
        self.w2 = Parameter(Tensor(weights["w2"]), "w2")
        self.b2 = Parameter(Tensor(weights["b2"]), "b2")
        self.linear = ms_aten.op("linear")
        self.gelu = ms_aten.op("gelu")
        self.layer_norm = ms_aten.op("layer_norm", normalized_shape=[HIDDEN])
        self.mse = ms_aten.op("mse_loss")

    def construct(self, x, y):
        h = self.gelu(self.linear(x, self.w1, self.b1))
        h = self.layer_norm(h, self.gamma, self.beta)
        return self.mse(self.linear(h, self.w2, self.b2), y)


def torch_losses(weights: dict[str, np.ndarray], x: np.ndarray, y: np.ndarray,
                 steps: int) -> list[float]:
    params = {k: torch.tensor(v, requires_grad=True) for k, v in weights.items()}
    optimizer = torch.optim.SGD(params.values(), lr=LR)
    xt, yt = torch.from_numpy(x), torch.from_numpy(y)
    losses = []
    for _ in range(steps):
        h = F.gelu(F.linear(xt, params["w1"], params["b1"]))
        h = F.layer_norm(h, [HIDDEN], params["gamma"], params["beta"])
        loss = F.mse_loss(F.linear(h, params["w2"], params["b2"]), yt)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


def mindspore_losses(weights: dict[str, np.ndarray], x: np.ndarray, y: np.ndarray, steps: int,
                     mode: int) -> list[float]:
    ms.set_context(mode=mode)
    net = BridgedMLP(weights)
    optimizer = nn.SGD(net.trainable_params(), learning_rate=LR)
    grad_fn = ms.value_and_grad(net, None, optimizer.parameters)

    def step(xb, yb):
        loss, grads = grad_fn(xb, yb)
        optimizer(grads)
        return loss

    if mode == ms.GRAPH_MODE:
        step = ms.jit(step)
    xm, ym = Tensor(x), Tensor(y)
    return [float(step(xm, ym).asnumpy()) for _ in range(steps)]


def plot(path: str, bridged: list[float], reference: list[float]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.plot(reference, label="PyTorch eager", linewidth=3, alpha=0.5)
    ax.plot(bridged, label="MindSpore + ms_aten ops", linestyle="--")
    ax.set_xlabel("step")
    ax.set_ylabel("MSE loss")
    ax.set_yscale("log")
    ax.set_title("MLP (linear, gelu, layer_norm, mse_loss), same init and data")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv: list[str] | None = None) -> tuple[list[float], list[float]]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--mode", choices=("graph", "pynative"), default="graph")
    parser.add_argument("--plot", help="write the loss curves to this PNG")
    args = parser.parse_args(argv)
    ms.set_device("CPU")
    x, y = make_data()
    weights = make_weights()
    mode = ms.GRAPH_MODE if args.mode == "graph" else ms.PYNATIVE_MODE
    bridged = mindspore_losses(weights, x, y, args.steps, mode)
    reference = torch_losses(weights, x, y, args.steps)
    gap = max(abs(b - r) / abs(r) for b, r in zip(bridged, reference, strict=True))
    print(f"{args.mode}: loss {bridged[0]:.4f} -> {bridged[-1]:.4f} in {args.steps} steps "
          f"(torch: {reference[0]:.4f} -> {reference[-1]:.4f}); largest relative gap {gap:.2e}")
    if args.plot:
        plot(args.plot, bridged, reference)
    return bridged, reference


if __name__ == "__main__":
    main()
