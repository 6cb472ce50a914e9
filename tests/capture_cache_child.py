"""One process of tests/test_capture_cache.py: makes the Cells the scenarios named in argv ask
for, checks each against torch, and prints one JSON line per scenario: what the capture cache
did, how many times torch.export ran, and the largest difference from torch's results.

Run as `python capture_cache_child.py graph mlp,decode,...`; the cache's folder comes from
$MS_ATEN_PROGRAM_CACHE, the changing module (`changing.py`) from PYTHONPATH.
"""
from __future__ import annotations

import copy
import json
import sys
import warnings

import mindspore as ms
import numpy as np
import torch
import transformers
from mindspore import nn

import ms_aten
from ms_aten import to_ms

ms.set_device("CPU")
EXPORTS = [0]
_EXPORT = torch.export.export


def _counting_export(*args, **kwargs):
    EXPORTS[0] += 1
    return _EXPORT(*args, **kwargs)


torch.export.export = _counting_export  # counts the captures; every one still runs torch's


class Mlp(torch.nn.Module):
    """Linear -> BatchNorm (in its own mode) -> Dropout -> Linear; `scale` read by forward."""

    def __init__(self, width: int = 6, scale: float = 1.0) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(4, width)
        self.norm = torch.nn.BatchNorm1d(width)
        self.drop = torch.nn.Dropout(0.0)
        self.out = torch.nn.Linear(width, 3)
        self.scale = scale

    def forward(self, x):
        return self.out(self.drop(torch.relu(self.norm(self.fc(x))))) * self.scale


class Pair(torch.nn.Module):
    """Inputs in a dict, outputs in a dict."""

    def __init__(self) -> None:
        super().__init__()
        self.a = torch.nn.Linear(4, 3)

    def forward(self, inputs):
        return {"sum": self.a(inputs["x"]) + inputs["y"], "x": self.a(inputs["x"])}


X = torch.randn(5, 4, generator=torch.Generator().manual_seed(1))


def mlp(**changes) -> torch.nn.Module:
    torch.manual_seed(0)
    net = Mlp(**changes)
    with torch.no_grad():
        net.norm.running_mean.uniform_(-0.5, 0.5)
    net.train()
    net.norm.eval()  # mixed modes: the model trains, its BatchNorm is frozen
    return net


class Summed(nn.Cell):
    def __init__(self, net):
        super().__init__()
        self.net = net

    def construct(self, x):
        return (self.net(x) * ms.Tensor(np.arange(3, dtype=np.float32))).sum()


class SummedPair(nn.Cell):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def construct(self, x, y):
        return (self.fn(x, y) * ms.Tensor(np.arange(4, dtype=np.float32))).sum()


def _torch_grads(net: torch.nn.Module, x: torch.Tensor):
    x = x.clone().requires_grad_(True)
    net.zero_grad()
    value = (net(x) * torch.arange(3.0)).sum()
    value.backward()
    return value.item(), {n: p.grad.clone() for n, p in net.named_parameters()}, x.grad


def check_gradients(net: torch.nn.Module, cell, x: torch.Tensor) -> float:
    """The largest difference of the value, the input's and every parameter's gradient."""
    reference = copy.deepcopy(net)
    value, (dx, grads) = ms.value_and_grad(Summed(cell), 0, cell.trainable_params())(to_ms(x))
    want, want_grads, want_dx = _torch_grads(reference, x)
    diffs = [abs(float(value) - want), float(np.abs(dx.asnumpy() - want_dx.numpy()).max())]
    for grad, param in zip(grads, cell.trainable_params(), strict=True):
        want_grad = want_grads[param.name.removeprefix("net.")].numpy()
        diffs.append(float(np.abs(grad.asnumpy() - want_grad).max()))
    return max(diffs)


def forward_diff(net: torch.nn.Module, cell, *inputs: torch.Tensor) -> float:
    reference = copy.deepcopy(net)
    got = cell(*(to_ms(x) for x in inputs))
    want = reference(*inputs)
    return float(np.abs(got.asnumpy() - want.detach().numpy()).max())


def function_diff(fn, cell, x: torch.Tensor, y: torch.Tensor) -> float:
    """The largest difference of a function Cell's value and both inputs' gradients."""
    value, grads = ms.value_and_grad(SummedPair(cell), (0, 1))(to_ms(x), to_ms(y))
    x, y = x.clone().requires_grad_(True), y.clone().requires_grad_(True)
    want = (fn(x, y) * torch.arange(4.0)).sum()
    want.backward()
    return max(abs(float(value) - want.item()),
               *(float(np.abs(g.asnumpy() - w.grad.numpy()).max())
                 for g, w in zip(grads, (x, y), strict=True)))


def gpt2(**changes) -> transformers.PreTrainedModel:
    torch.manual_seed(0)
    config = transformers.GPT2Config(vocab_size=50, n_positions=32, n_embd=16, n_layer=2,
                                     n_head=2, bos_token_id=None, eos_token_id=None,
                                     **changes)
    return transformers.GPT2LMHeadModel(config).eval()


def decode(model) -> float:
    """Greedy tokens of causal_lm + generate against model.generate: the number that differ."""
    prompt = torch.randint(0, 50, (1, 5), generator=torch.Generator().manual_seed(2))
    lm = ms_aten.causal_lm(model, max_cache_len=12)
    got = ms_aten.generate(lm, prompt.numpy(), max_new_tokens=4).asnumpy()
    with torch.no_grad():
        want = model.generate(prompt, max_new_tokens=4, do_sample=False, pad_token_id=0).numpy()
    return float((got != want).sum()) + 1000 * (got.shape != want.shape), lm


def scenario(name: str):
    """(cell, the largest difference from torch) for a scenario."""
    import changing  # the test edits its source between processes

    if name == "mlp":  # mixed train/eval modes, forward and gradients
        net = mlp()
        cell = ms_aten.module(copy.deepcopy(net), (X,))
        return cell, check_gradients(net, cell, X)
    if name == "mlp-eval":  # another mode tree of the same model
        net = mlp()
        net.norm.train()
        cell = ms_aten.module(copy.deepcopy(net), (X,))
        return cell, check_gradients(net, cell, X)
    if name == "mlp-width":  # a parameter's shape
        net = mlp(width=7)
        return ms_aten.module(copy.deepcopy(net), (X,)), 0.0
    if name == "mlp-wide":  # a model no other scenario stores
        net = mlp(width=9)
        cell = ms_aten.module(copy.deepcopy(net), (X,))
        return cell, forward_diff(net, cell, X)
    if name == "mlp-scale":  # a non-tensor attribute forward reads
        net = mlp(scale=2.0)
        cell = ms_aten.module(copy.deepcopy(net), (X,))
        return cell, forward_diff(net, cell, X)
    if name == "mlp-double":  # a dtype
        net = mlp().double()
        cell = ms_aten.module(copy.deepcopy(net), (X.double(),))
        return cell, forward_diff(net, cell, X.double())
    if name == "mlp-shape":  # the inputs' shapes
        net = mlp()
        return ms_aten.module(copy.deepcopy(net), (X[:3].clone(),)), 0.0
    if name in ("dynamic", "dynamic-range"):  # a dynamic dim, and another range of it
        net = mlp()
        net.eval()
        batch = torch.export.Dim("batch", min=2, max=16 if name == "dynamic" else 32)
        cell = ms_aten.module(copy.deepcopy(net), (X,), dynamic_shapes=({0: batch},))
        other = torch.randn(9, 4, generator=torch.Generator().manual_seed(3))
        return cell, max(forward_diff(net, cell, X), forward_diff(net, cell, other))
    if name == "pair":  # inputs in a dict
        torch.manual_seed(0)
        net = Pair()
        inputs = {"x": X, "y": torch.ones(5, 3)}
        cell = ms_aten.module(copy.deepcopy(net), (inputs,))
        got = cell({"x": to_ms(X), "y": to_ms(torch.ones(5, 3))})
        want = net(inputs)
        return cell, max(float(np.abs(got[k].asnumpy() - want[k].detach().numpy()).max())
                         for k in want)
    if name == "pair-structure":  # the same module, the input structure another
        torch.manual_seed(0)
        net = Pair()
        inputs = {"x": X, "y": torch.ones(5, 3), "z": torch.ones(1)}
        return ms_aten.module(copy.deepcopy(net), (inputs,)), 0.0
    if name == "compiled":  # compile=True, eval mode
        net = mlp().eval()
        cell = ms_aten.module(copy.deepcopy(net), (X,), compile=True)
        assert cell.program.compiled is not None
        return cell, forward_diff(net, cell, X)
    if name == "changing":  # a module's code and a Function's backward, from changing.py
        torch.manual_seed(0)
        net = changing.Net()
        cell = ms_aten.module(copy.deepcopy(net), (X,))
        return cell, check_gradients(net, cell, X)
    if name in ("function", "function-closure"):  # ms_aten.function; a closure's tensor
        offset = torch.zeros(4) if name == "function" else torch.ones(4)

        def fn(x, y):
            return changing.function(x, y) + offset

        y = torch.linspace(-1, 1, 4)
        cell = ms_aten.function(fn, (X, y))
        return cell, function_diff(fn, cell, X, y)
    if name == "decode":  # causal_lm's tokens against model.generate
        diff, lm = decode(gpt2())
        return lm, diff
    if name == "decode-config":  # a config field
        diff, lm = decode(gpt2(layer_norm_epsilon=1e-3))
        return lm, diff
    raise ValueError(name)


def main() -> None:
    ms.set_context(mode=ms.GRAPH_MODE if sys.argv[1] == "graph" else ms.PYNATIVE_MODE)
    for name in sys.argv[2].split(","):
        before = EXPORTS[0]
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", ms_aten.CaptureCacheWarning)
            cell, diff = scenario(name)
        damaged = [str(w.message) for w in caught
                   if issubclass(w.category, ms_aten.CaptureCacheWarning)]
        print(json.dumps({"scenario": name, "cache": cell.capture_cache,
                          "exports": EXPORTS[0] - before, "diff": diff, "damaged": damaged}),
              flush=True)


if __name__ == "__main__":
    main()
