"""Data-parallel training of a network made of ms_aten ops: 2 CPU workers under msrun, GRAPH mode.

    bash scripts/run_distributed.sh      # msrun --worker_num=2 ... examples/data_parallel.py

Each worker trains the same two-layer network (ms_aten.op("mm"), "add.Tensor", "gelu",
"mse_loss") on its half of every batch: MindSpore's data parallelism (mccl backend,
ParallelMode.DATA_PARALLEL) with nn.DistributedGradReducer averaging the gradients. Then:
  - both ranks' final weights must be identical (gathered with AllGather, compared exactly);
  - and equal, within RTOL/ATOL, to one process training the same network on the full batches
    (this script without msrun, which rank 0 runs as a child process).
Then the same for a torch model captured with ms_aten.module whose forward holds a part
torch.export refuses (a tensor hook that scales a gradient: an opaque torch call), trained in
both modes, against torch eager training the torch model on the full batches (rank 0, in
process).
Rank 0 prints a line with OK; any failed check raises, so msrun exits non-zero.
Run alone (no msrun), the script is that single process: it trains on the full batches and,
with --save, writes the final weights to an .npz file.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path

import mindspore as ms
import numpy as np
import torch
from mindspore import Parameter, Tensor, nn, ops
from mindspore.communication import get_group_size, get_rank, init

import ms_aten

BATCH, FEATURES, HIDDEN = 16, 8, 32  # BATCH: the global batch, split between the ranks
STEPS, LR = 30, 0.1
# Averaging two half-batch gradients differs from the full-batch gradient by float32 rounding;
# over STEPS steps the weights stay this close.
RTOL, ATOL = 1e-5, 1e-6


class Net(nn.Cell):
    """loss = mse_loss(gelu(x @ w1 + b1) @ w2, target), every op an ms_aten op."""

    def __init__(self, weights: dict[str, np.ndarray]):
        super().__init__()
        self.w1 = Parameter(Tensor(weights["w1"]), "w1")
        self.b1 = Parameter(Tensor(weights["b1"]), "b1")
        self.w2 = Parameter(Tensor(weights["w2"]), "w2")
        self.mm = ms_aten.op("mm")
        self.add = ms_aten.op("add.Tensor")
        self.gelu = ms_aten.op("gelu")
        self.loss = ms_aten.op("mse_loss")

    def construct(self, x, target):
        hidden = self.gelu(self.add(self.mm(x, self.w1), self.b1))
        return self.loss(self.mm(hidden, self.w2), target)


class NoReduce(nn.Cell):
    """The single process's stand-in for DistributedGradReducer."""

    def construct(self, grads):
        return grads


class TrainStep(nn.Cell):
    """One SGD step: loss and gradients, the gradients reduced across ranks, the update."""

    def __init__(self, net: Net, reducer: nn.Cell):
        super().__init__()
        self.optimizer = nn.SGD(net.trainable_params(), learning_rate=LR)
        self.grad_fn = ms.value_and_grad(net, None, self.optimizer.parameters)
        self.reducer = reducer

    def construct(self, x, target):
        loss, grads = self.grad_fn(x, target)
        self.optimizer(self.reducer(grads))
        return loss


class Gather(nn.Cell):
    """Every rank's tensor, stacked along dim 0, on every rank."""

    def __init__(self):
        super().__init__()
        self.all_gather = ops.AllGather()

    def construct(self, x):
        return self.all_gather(x)


def problem() -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray]:
    """Initial weights and STEPS global batches (inputs, targets), the same in every process."""
    rng = np.random.default_rng(0)
    weights = {"w1": rng.standard_normal((FEATURES, HIDDEN)) / np.sqrt(FEATURES),
               "b1": np.zeros(HIDDEN), "w2": rng.standard_normal((HIDDEN, 1)) / np.sqrt(HIDDEN)}
    x = rng.standard_normal((STEPS, BATCH, FEATURES))
    target = np.sin(x.sum(-1, keepdims=True))
    return ({k: v.astype(np.float32) for k, v in weights.items()}, x.astype(np.float32),
            target.astype(np.float32))


def train(rank: int, ranks: int) -> tuple[np.ndarray, list[float]]:
    """Trains on this rank's share of each batch; the final weights, flat, and the losses."""
    weights, x, target = problem()
    net = Net(weights)
    params = net.trainable_params()
    reducer = (nn.DistributedGradReducer(params, mean=True, degree=ranks) if ranks > 1
               else NoReduce())
    step = TrainStep(net, reducer)
    share = slice(rank * BATCH // ranks, (rank + 1) * BATCH // ranks)
    losses = [float(step(Tensor(x[i, share]), Tensor(target[i, share])).asnumpy())
              for i in range(STEPS)]
    flat = np.concatenate([p.asnumpy().ravel() for p in net.trainable_params()])
    return flat, losses


class Scaled(torch.nn.Module):
    """A part torch.export refuses: a hook that triples the gradient reaching its linear."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(FEATURES, HIDDEN)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        z = self.lin(h)
        z.register_hook(lambda g: g * 3)
        return torch.tanh(z)


class HookedNet(torch.nn.Module):
    """A Gaussian's negative log-likelihood of the target, its mean and variance from
    head(part(pre(x))): two opaque torch calls in the program, `part` (its hook) and `nll`
    (GaussianNLLLoss, whose check of the variances torch.export refuses: a branch on values)."""

    def __init__(self) -> None:
        super().__init__()
        self.pre = torch.nn.Linear(FEATURES, FEATURES)
        self.part = Scaled()
        self.head = torch.nn.Linear(HIDDEN, 2)
        self.nll = torch.nn.GaussianNLLLoss()

    def forward(self, x: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        mean, raw = self.head(self.part(self.pre(x))).unbind(-1)
        return self.nll(mean, target[:, 0], torch.nn.functional.softplus(raw) + 0.1)


MODULE_STEPS = 5


def train_module(rank: int, ranks: int, mode: int) -> np.ndarray:
    """HookedNet captured by ms_aten.module, MODULE_STEPS SGD steps on this rank's share of each
    batch in `mode`; its final weights, flat, in torch's order."""
    ms.set_context(mode=mode)
    _, x, target = problem()
    torch.manual_seed(0)
    share = slice(rank * BATCH // ranks, (rank + 1) * BATCH // ranks)
    example = (torch.from_numpy(x[0, share]), torch.from_numpy(target[0, share]))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cell = ms_aten.module(HookedNet(), example)
    regions = [str(w.message) for w in caught if issubclass(w.category, ms_aten.OpaqueWarning)]
    if not (any("HookedNet.part" in r for r in regions) and
            any("HookedNet.nll" in r for r in regions)):
        raise SystemExit(f"HookedNet.part and .nll should run as opaque torch calls: {regions}")
    params = cell.trainable_params()
    reducer = (nn.DistributedGradReducer(params, mean=True, degree=ranks) if ranks > 1
               else NoReduce())
    step = TrainStep(cell, reducer)
    for i in range(MODULE_STEPS):
        step(Tensor(x[i, share]), Tensor(target[i, share]))
    return np.concatenate([v.numpy().ravel() for v in cell.torch_state_dict().values()])


def torch_module_weights() -> np.ndarray:
    """HookedNet trained by torch eager on the full batches, as train_module trains it."""
    _, x, target = problem()
    torch.manual_seed(0)
    net = HookedNet()
    optimizer = torch.optim.SGD(net.parameters(), lr=LR)
    for i in range(MODULE_STEPS):
        optimizer.zero_grad()
        net(torch.from_numpy(x[i]), torch.from_numpy(target[i])).backward()
        optimizer.step()
    return np.concatenate([v.detach().numpy().ravel() for v in net.state_dict().values()])


def single_process_weights() -> np.ndarray:
    """This script without msrun, in a child process: the full-batch weights."""
    # The msrun variables would make the child join the cluster.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MS_", "RANK_"))}
    with tempfile.TemporaryDirectory() as tmp:
        saved = Path(tmp) / "weights.npz"
        subprocess.run([sys.executable, __file__, "--save", str(saved)], env=env, check=True,
                       stdout=subprocess.DEVNULL, timeout=600)
        return np.load(saved)["weights"]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--save", type=Path, help="(single process) write the final weights here")
    args = parser.parse_args(argv)
    ms.set_context(mode=ms.GRAPH_MODE)
    ms.set_device("CPU")

    if "MS_WORKER_NUM" not in os.environ:  # not under msrun: the full-batch reference
        weights, losses = train(0, 1)
        print(f"single process: loss {losses[0]:.4f} -> {losses[-1]:.4f}")
        if args.save:
            np.savez(args.save, weights=weights)
        return

    init("mccl")
    rank, ranks = get_rank(), get_group_size()
    ms.set_auto_parallel_context(parallel_mode=ms.ParallelMode.DATA_PARALLEL,
                                 gradients_mean=True, device_num=ranks)
    weights, losses = train(rank, ranks)
    print(f"rank {rank}/{ranks}: loss {losses[0]:.4f} -> {losses[-1]:.4f}")

    gathered = Gather()(Tensor(weights[None])).asnumpy()
    if not all(np.array_equal(gathered[0], w) for w in gathered[1:]):
        raise SystemExit(f"rank {rank}: the ranks' weights differ, by up to "
                         f"{np.abs(gathered - gathered[0]).max():.3g}")
    if rank == 0:
        reference = single_process_weights()
        gap = np.abs(weights - reference).max()
        if not np.allclose(weights, reference, rtol=RTOL, atol=ATOL):
            raise SystemExit(f"data-parallel weights differ from the single process's by {gap:.3g}"
                             f" (rtol {RTOL}, atol {ATOL})")

    # A model with opaque regions: each rank's gradients averaged, in both modes.
    expected = torch_module_weights() if rank == 0 else None
    gaps = []
    for mode, name in ((ms.GRAPH_MODE, "GRAPH"), (ms.PYNATIVE_MODE, "PYNATIVE")):
        trained = train_module(rank, ranks, mode)
        ms.set_context(mode=ms.GRAPH_MODE)
        gathered = Gather()(Tensor(trained[None])).asnumpy()
        if not all(np.array_equal(gathered[0], w) for w in gathered[1:]):
            raise SystemExit(f"rank {rank}: HookedNet's weights differ between the ranks "
                             f"({name}), by up to {np.abs(gathered - gathered[0]).max():.3g}")
        if expected is not None:
            gaps.append(np.abs(trained - expected).max())
            if not np.allclose(trained, expected, rtol=RTOL, atol=ATOL):
                raise SystemExit(f"HookedNet's data-parallel weights ({name}) differ from torch "
                                 f"eager's on the full batches by {gaps[-1]:.3g}")
    if rank == 0:
        print(f"OK: {ranks} ranks' weights identical after {STEPS} steps, and within rtol "
              f"{RTOL}, atol {ATOL} of one process on the full batches (largest gap {gap:.2g}); "
              f"with two opaque regions, {MODULE_STEPS} steps in GRAPH and PYNATIVE mode within "
              f"them of torch eager (largest gap {max(gaps):.2g})")


if __name__ == "__main__":
    main()
