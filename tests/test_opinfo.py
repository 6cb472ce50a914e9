"""A fast subset of the OpInfo oracle (tests/opinfo_oracle.py) for CI.

Each test runs one float32 OpInfo sample, named by its OpInfo key and its position among that
OpInfo's in-scope samples, through ms_aten in PYNATIVE and GRAPH mode and compares it with
torch eager: the forward for about 30 common ops, the gradient for about 15. The full sweep is
scripts/opinfo_report.py.
"""
from __future__ import annotations

import pytest

import opinfo_oracle as oracle

# OpInfo key -> how many of its leading in-scope samples are checked.
FORWARD = {
}
GRADIENT = {
}


def _params(table: dict[str, int]) -> list:
    return [pytest.param(key, i, id=f"{key}-{i}") for key, n in table.items() for i in range(n)]


def _assert_passes(key: str, position: int, checks: tuple[str, ...]) -> None:
    cases = oracle.in_scope_cases(key)
    assert position < len(cases), f"{key} has only {len(cases)} in-scope samples"
    result = oracle.check_case(cases[position], checks)
    assert result.scope is None, f"{key} sample {result.index} went out of scope: {result.scope}"
    failures = {name: f"{outcome.status}: {outcome.reason}"
                for name, outcome in result.checks.items() if outcome.status != oracle.PASS}
    assert not failures, f"{result.aten} (sample {result.index} of {key}): {failures}"


@pytest.mark.parametrize("key, position", _params(FORWARD))
def test_forward(key: str, position: int) -> None:
    _assert_passes(key, position, oracle.FORWARD_CHECKS)


@pytest.mark.parametrize("key, position", _params(GRADIENT))
def test_gradient(key: str, position: int) -> None:
    _assert_passes(key, position, oracle.GRAD_CHECKS)
