"""torch.export's `strict`, on ms_aten.module and ms_aten.function: None (the default) tries
non-strict, then strict; True or False forces one; when every try fails, the CaptureError gives
each reason."""
from __future__ import annotations

import copy

import pytest
import torch

import ms_aten

from common import assert_same, run, to_ms, to_torch


class _Store:
    """A plain object holding a tensor, as transformers' StaticCache holds its keys and
    values."""


class HeldCache(torch.nn.Module):
    """A buffer written in place through a plain object: non-strict export sees the tensor as a
    constant and its run_decompositions fails; strict export (TorchDynamo) tracks it as the
    buffer. A small twin of transformers' static KV cache."""

    def __init__(self) -> None:
        super().__init__()
        self.store = _Store()
        self.store.cache = torch.zeros(6, 3)
        self.register_buffer("cache", self.store.cache)

    def forward(self, x: torch.Tensor, position: torch.Tensor) -> torch.Tensor:
        self.store.cache.index_copy_(0, position, x)
        return self.store.cache * 2


def breaks_graph(x: torch.Tensor) -> torch.Tensor:
    torch._dynamo.graph_break()  # strict export refuses it; non-strict runs it as Python
    return x * 2


def test_a_module_only_strict_export_captures_falls_back_to_strict(mode):
    module = HeldCache()
    reference = copy.deepcopy(module)  # its store and buffer stay one tensor
    cell = ms_aten.module(module, (torch.randn(2, 3), torch.tensor([0, 1])))
    assert cell.program.mutations == ("cache",)
    for x, position in [(torch.randn(2, 3), torch.tensor([4, 1])),
                        (torch.randn(2, 3), torch.tensor([0, 5]))]:
        expected = reference(x, position)
        assert_same(to_torch(run(cell, to_ms((x, position)), mode)), expected)
    assert_same(to_torch(cell.weights[0].value()), reference.cache)


def test_strict_false_forces_non_strict_and_gives_its_reason():
    with pytest.raises(ms_aten.CaptureError,
                       match=r"cannot capture HeldCache: AssertionError: expected compiled_fn "
                             r"to be GraphModule") as error:
        ms_aten.module(HeldCache(), (torch.randn(2, 3), torch.tensor([0, 1])), strict=False)
    assert "strict:" not in str(error.value)  # one capture was tried
    ms_aten.module(HeldCache(), (torch.randn(2, 3), torch.tensor([0, 1])), strict=True)


def test_strict_true_forces_torchdynamo(mode):
    x = torch.randn(4)
    with pytest.raises(ms_aten.CaptureError,
                       match=r"cannot capture breaks_graph: Unsupported: Call to "
                             r"`torch._dynamo.graph_break\(\)`"):
        ms_aten.function(breaks_graph, (x,), strict=True)
    for strict in (None, False):  # non-strict captures it, first or alone
        assert_same(to_torch(run(ms_aten.function(breaks_graph, (x,), strict=strict),
                                 to_ms((x,)), mode)), x * 2)


def test_what_non_strict_refuses_for_a_value_runs_opaque_without_trying_strict():
    class DataDependent(torch.nn.Module):
        def forward(self, x):
            return x * 2 if x.sum() > 0 else x

    # strict refuses a value-dependent branch too ("Data-dependent branching"): not tried; the
    # forward runs as an opaque torch call (tests/test_opaque.py), its reason non-strict's.
    with pytest.warns(ms_aten.OpaqueWarning, match=r"(?s)DataDependent \(its whole forward\) "
                                                   r"runs as an opaque torch call.*"
                                                   r"GuardOnDataDependentSymNode"):
        ms_aten.module(DataDependent(), (torch.randn(3),))


class WritesThroughData(torch.nn.Module):
    """`h.data.clamp_()`: TorchDynamo traces `.data` of an intermediate as a constant of the
    program (its values at capture), on which torch 2.13's run_decompositions segfaults."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.lin(x)
        h.data.clamp_(-0.1, 0.1)
        return h * 2


def test_data_of_an_intermediate_is_refused_by_name_not_a_crash() -> None:
    with pytest.raises(ms_aten.CaptureError, match=r"became a constant of the program "
                                                    r"\(lifted_tensor_0\).*use `\.detach\(\)`"):
        ms_aten.module(WritesThroughData(), (torch.randn(3, 4),), strict=True)


def test_data_of_an_intermediate_runs_as_an_opaque_call_without_strict(mode) -> None:
    """strict=None: the forward runs as torch eager (an opaque call), `.data`'s write as torch's."""
    torch.manual_seed(0)
    module = WritesThroughData()
    x = torch.randn(3, 4)
    with pytest.warns(ms_aten.OpaqueWarning, match=r"WritesThroughData \(its whole forward\) "
                                                   r"runs as an opaque torch call.*lifted_tensor"):
        cell = ms_aten.module(module, (x,))
    assert_same(to_torch(run(cell, to_ms((x,)), mode)), module(x).detach())
