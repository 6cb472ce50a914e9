"""MindSpore's own workflows around a captured model, against torch: ms.grad on the Cell itself,
mixed precision (amp O1/O2/O3, build_train_network) against torch.autocast, checkpoints
through a fresh process, repr, and no warning of torch's own printed by a capture."""
from __future__ import annotations

import copy
import warnings

import mindspore as ms
import numpy as np
import pytest
import torch
from mindspore import amp, nn, ops

import ms_aten
from ms_aten import to_ms

from common import MODES, run_fresh, set_mode

X = torch.randn(32, 8, generator=torch.Generator().manual_seed(0))
Y = (X.sum(1, keepdim=True) > 0).float()


def mlp() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.LayerNorm(16), torch.nn.GELU(),
                               torch.nn.Linear(16, 1))


@pytest.mark.parametrize("mode", list(MODES))
def test_ms_grad_directly_on_a_module_or_a_function_cell(mode):
    module = mlp()
    set_mode(mode)
    cell = ms_aten.module(copy.deepcopy(module), (X,))
    function = ms_aten.function(lambda x: (x.tanh() * x).sum(), (X,))
    x = X.clone().requires_grad_(True)
    module(x).sum().backward()
    # ms.grad sums a non-scalar output's gradient, as torch's backward of .sum() does.
    np.testing.assert_allclose(ms.grad(cell)(to_ms(X)).asnumpy(), x.grad.numpy(), rtol=1e-5,
                               atol=1e-6)
    x.grad = None
    (x.tanh() * x).sum().backward()
    np.testing.assert_allclose(ms.grad(function)(to_ms(X)).asnumpy(), x.grad.numpy(), rtol=1e-5,
                               atol=1e-6)


class MSELoss(nn.Cell):
    def __init__(self, net):
        super().__init__()
        self.net = net

    def construct(self, x, y):
        return ops.mse_loss(self.net(x).astype(ms.float32), y)


def torch_autocast_losses(dtype: torch.dtype | None, steps: int) -> list[float]:
    module = mlp()
    optimizer = torch.optim.SGD(module.parameters(), lr=0.1)
    losses = []
    for _ in range(steps):
        optimizer.zero_grad()
        with torch.autocast("cpu", dtype=dtype or torch.float32, enabled=dtype is not None):
            out = module(X)
        loss = torch.nn.functional.mse_loss(out.float(), Y)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


# (route, MindSpore dtype, mode). MindSpore's own CPU kernels lack bfloat16 for the loss's
# Square in PYNATIVE, and build_train_network takes float16 only.
AMP = [("O1", ms.float16, "pynative"), ("O2", ms.float16, "graph"), ("O2", ms.bfloat16, "graph"),
       ("O3", ms.float16, "pynative"), ("O3", ms.bfloat16, "graph"), ("alone_O3", ms.float16,
                                                                       "graph"),
       ("build_train_network_O2", ms.float16, "graph"),
       ("build_train_network_O2", ms.float16, "pynative")]


@pytest.mark.parametrize("route, dtype, mode", AMP, ids=[f"{r}-{d}-{m}" for r, d, m in AMP])
def test_mixed_precision_trains_as_torch_autocast(route, dtype, mode, tmp_path, monkeypatch):
    """O2 and O3 (and to_float) run the program under torch.autocast of their dtype, the
    weights float32; O1 casts MindSpore's own listed ops, so the program stays float32."""
    monkeypatch.chdir(tmp_path)  # O1's rewrite writes the networks it makes to the working folder
    set_mode(mode)
    cell = ms_aten.module(mlp(), (X,))
    optimizer = nn.SGD(cell.trainable_params(), learning_rate=0.1, loss_scale=128.0)
    if route.startswith("build"):
        step = amp.build_train_network(
            cell, optimizer, nn.MSELoss(), level="O2",
            loss_scale_manager=amp.FixedLossScaleManager(128.0, drop_overflow_update=False))
    else:
        net = (MSELoss(amp.auto_mixed_precision(cell, "O3", dtype=dtype)) if route == "alone_O3"
               else amp.auto_mixed_precision(MSELoss(cell), route, dtype=dtype))
        step = nn.TrainOneStepCell(net, optimizer, sens=128.0)
    losses = [float(step(to_ms(X), to_ms(Y))) for _ in range(5)]
    want = {ms.float16: torch.float16, ms.bfloat16: torch.bfloat16}[dtype]
    assert cell._autocast == (None if route == "O1" else want)
    assert all(p.dtype == ms.float32 for p in cell.trainable_params())  # master weights
    expected = torch_autocast_losses(None if route == "O1" else want, 5)
    np.testing.assert_allclose(losses, expected, rtol=2e-3)
    assert expected[-1] < expected[0]


CHECKPOINT = """
import sys, warnings, mindspore as ms, torch, ms_aten
from mindspore import nn, ops
ms.set_context(mode=ms.GRAPH_MODE)
warnings.simplefilter("error", FutureWarning)
folder, seed = sys.argv[1], int(sys.argv[2])
x = torch.randn(32, 8, generator=torch.Generator().manual_seed(0))
y = x.sum(1, keepdim=True)

class Loss(nn.Cell):
    def __init__(self, net):
        super().__init__()
        self.net = net
    def construct(self, x, y):
        return ops.mse_loss(self.net(x), y)

def make():
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.BatchNorm1d(16),
                                torch.nn.Linear(16, 1))
    cell = ms_aten.module(model, (x,))
    step = nn.TrainOneStepCell(Loss(cell), ms_aten.optim.Adam(cell.trainable_params(), lr=0.01))
    return model, cell, step

for wrapped in (False, True):
    model, cell, step = make()
    target, path = (step, f"{folder}/step.ckpt") if wrapped else (cell, f"{folder}/cell.ckpt")
    if seed == 0:
        for _ in range(3):
            step(ms_aten.to_ms(x), ms_aten.to_ms(y))
        ms.save_checkpoint(target, path)
    else:
        print(wrapped, "not loaded:", ms.load_param_into_net(target, ms.load_checkpoint(path)))
    model.load_state_dict(cell.torch_state_dict())
    print(wrapped, "torch:", [round(v, 6) for v in model.eval()(x)[:3, 0].tolist()])
    if wrapped:  # the optimizer's state came along: the next steps are the same
        print("losses:", [round(float(step(ms_aten.to_ms(x), ms_aten.to_ms(y))), 6)
                          for _ in range(2)])
"""


def test_a_checkpoint_round_trips_through_a_fresh_process(tmp_path):
    """save_checkpoint of the Cell alone, and of its training step with ms_aten.optim.Adam's
    state; load_param_into_net in a new process whose model has other weights: every name
    loads, with no warning, training goes on as it would have, and the weights go back to
    torch."""
    script = tmp_path / "checkpoint.py"
    script.write_text(CHECKPOINT)
    saved = run_fresh([str(script), str(tmp_path), "0"])
    loaded = run_fresh([str(script), str(tmp_path), "1"])
    assert loaded.count("not loaded: ([], [])") == 2
    results = [[t for t in out.splitlines() if "losses:" in t or "torch:" in t]
               for out in (saved, loaded)]
    assert len(results[0]) == 3 and results[0] == results[1]


def test_repr_shows_the_inputs_the_modes_and_the_torch_module():
    module = mlp().train()
    module[1].eval()
    set_mode("pynative")
    text = repr(ms_aten.module(module, (X,)))
    assert text.startswith("TorchModule(\n  inputs: input: float32[32, 8]\n  runs: ")
    assert "mode: train (1: eval)" in text
    assert "(1): LayerNorm((16,), eps=1e-05" in text


def test_a_capture_prints_no_warning_of_torch_s_own():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ms_aten.module(mlp(), (X,))
    assert not [w for w in caught if issubclass(w.category, FutureWarning)], \
        [str(w.message) for w in caught]
