"""A fast subset of the OpInfo oracle (ms_aten/testing/opinfo.py) for CI.

Each test runs one OpInfo sample, named by its OpInfo key and its position among that OpInfo's
in-scope samples, through ms_aten in PYNATIVE and GRAPH mode and compares it with torch eager:
in float32, the forward for about 40 common ops and the gradient for about 20; in a few other
dtypes, the checks of that dtype (the gradient in float64 too). The full sweep is
scripts/opinfo_report.py.
"""
from __future__ import annotations

import pytest
import torch

from ms_aten.testing import opinfo as oracle

# OpInfo key -> how many of its leading in-scope samples are checked.
FORWARD = {
    "add": 2, "sub": 1, "mul": 2, "div.no_rounding_mode": 1, "pow": 1, "clamp": 2, "where": 1,
    "abs": 1, "exp": 1, "log": 1, "sqrt": 1, "sigmoid": 1, "tanh": 1, "nn.functional.relu": 1,
    "nn.functional.gelu": 1, "nn.functional.leaky_relu": 1, "softmax": 2, "log_softmax": 1,
    "sum": 2, "mean": 2, "amax": 1, "argmax": 1, "max.reduction_with_dim": 2, "cumsum": 1,
    "sort": 2, "topk": 1, "mm": 1, "bmm": 1, "addmm": 2, "nn.functional.conv2d": 2,
    "nn.functional.layer_norm": 1, "nn.functional.embedding": 1, "cat": 2, "stack": 1,
    "transpose": 1, "permute": 1, "index_select": 1, "gather": 1, "masked_fill": 1,
    "nonzero": 1, "masked_select": 1, "unique": 2,  # value-dependent shapes
}
GRADIENT = {
    "add": 1, "mul": 1, "pow": 1, "clamp": 1, "sigmoid": 1, "tanh": 1, "nn.functional.gelu": 1,
    "softmax": 1, "sum": 1, "mean": 1, "max.reduction_with_dim": 1, "sort": 1, "mm": 1,
    "addmm": 1, "nn.functional.conv2d": 1, "nn.functional.layer_norm": 1, "cat": 1, "gather": 1,
    "masked_select": 1,
}

# (OpInfo key, dtype) -> how many of its leading in-scope samples get that dtype's checks.
# int32 sums to int64 and integer division floors; float64 has tighter tolerances.
DTYPED = {
    ("sum", torch.int32): 1, ("div.floor_rounding", torch.int64): 1,
    ("mul", torch.float64): 1, ("softmax", torch.float64): 1,
}


def _params(table: dict[str, int]) -> list:
    return [pytest.param(key, i, id=f"{key}-{i}") for key, n in table.items() for i in range(n)]


def _assert_passes(key: str, position: int, checks: tuple[str, ...],
                   dtype: torch.dtype = torch.float32) -> None:
    cases = oracle.in_scope_cases(key, dtype)
    assert position < len(cases), f"{key} has only {len(cases)} in-scope {dtype} samples"
    result = oracle.check_case(cases[position], checks)
    assert result.scope is None, f"{key} sample {result.index} went out of scope: {result.scope}"
    assert set(result.checks) == set(checks), f"checks run: {sorted(result.checks)}"
    failures = {name: f"{outcome.status}: {outcome.reason}"
                for name, outcome in result.checks.items() if outcome.status != oracle.PASS}
    assert not failures, f"{result.aten} (sample {result.index} of {key}, {dtype}): {failures}"


@pytest.mark.parametrize("key, position", _params(FORWARD))
def test_forward(key: str, position: int) -> None:
    _assert_passes(key, position, oracle.FORWARD_CHECKS)


@pytest.mark.parametrize("key, position", _params(GRADIENT))
def test_gradient(key: str, position: int) -> None:
    _assert_passes(key, position, oracle.GRAD_CHECKS)


@pytest.mark.parametrize("key, dtype, position", [
    pytest.param(key, dtype, i, id=f"{key}-{oracle.dtype_name(dtype)}-{i}")
    for (key, dtype), n in DTYPED.items() for i in range(n)])
def test_dtype(key: str, dtype: torch.dtype, position: int) -> None:
    _assert_passes(key, position, oracle.checks_for(dtype), dtype)
