"""replace= of ms_aten.function and ms_aten.module: which subgraphs match, what is put in their
place, and the errors; against torch eager. tests/test_custom_extension.py replaces a pattern
with a compiled kernel and checks gradients through the kernel's own backward."""
from __future__ import annotations

import warnings

import pytest
import torch

import ms_aten

from common import MODES, assert_same, randn, run, to_ms


def quantize(x):
    """The Torch-AIE tutorial's quantize step: mul, add, round, clamp."""
    return torch.clamp(torch.round(x * 12.5 + 3.0), -128, 127)


def quantize_hardtanh(x):
    """The same values through other ops (hardtanh for clamp): its nodes show in the program."""
    return torch.nn.functional.hardtanh(torch.round(x * 12.5 + 3.0), -128.0, 127.0)


def two_quantizes(x):
    return quantize(x) * 2 + quantize(x * 3)


X = randn(4, 16) * 8  # some values reach the clamp


def replaced_function(fn, x=X, replace=((quantize, quantize_hardtanh),)):
    with warnings.catch_warnings():
        warnings.filterwarnings("error", "ms_aten: .* matches nothing")  # it should match
        return ms_aten.function(fn, (x,), replace=list(replace))


@pytest.mark.parametrize("mode", MODES)
def test_each_match_is_replaced_and_the_outputs_stay(mode):
    op = replaced_function(two_quantizes)
    assert op.program.replaced == 2
    assert "clamp" not in op.program.spec and op.program.spec.count("hardtanh") == 2
    assert_same(run(op, to_ms((X,)), mode), two_quantizes(X))


@pytest.mark.parametrize("mode", MODES)
def test_other_input_shapes_are_captured_again_with_the_replacements(mode):
    op = replaced_function(two_quantizes)
    for x in (randn(3, 5) * 8, X):
        assert_same(run(op, to_ms((x,)), mode), two_quantizes(x))
    assert len(op.primitive.programs) == 2
    assert [p.replaced for p in op.primitive.programs.values()] == [2, 2]


def test_a_pattern_with_two_outputs():
    def min_and_max(x):
        return x.amin(-1), x.amax(-1)

    def fused(x):
        low, high = torch.aminmax(x, dim=-1)
        return low, high

    def spread(x):
        return (x.amax(-1) - x.amin(-1)) * 2

    op = replaced_function(spread, replace=[(min_and_max, fused)])
    assert op.program.replaced == 1 and "aminmax" in op.program.spec
    assert_same(run(op, to_ms((X,)), "graph"), spread(X))


class Quantized(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(16, 8)
        self.drop = torch.nn.Dropout(0.5)

    def forward(self, x):
        return quantize(self.drop(self.fc(x)))


def test_module_replaces_in_each_captured_mode():
    model = Quantized().eval()
    cell = ms_aten.module(model, (X,), replace=[(quantize, quantize_hardtanh)])
    assert cell.program.replaced == 1
    assert_same(run(cell, to_ms((X,)), "graph"), model(X).detach())
    cell.set_train(True)  # another capture, with dropout: the replacement applies there too
    assert cell.program.random and cell.program.replaced == 1


@pytest.mark.parametrize("fn", [
    lambda x: torch.clamp(torch.round(x * 12.5 + 4.0), -128, 127),  # another literal
    lambda x: torch.clamp(torch.round(x * 12.5 + 3.0), -128.0, 127.0),  # floats for ints
], ids=["another literal", "a float for an int"])
def test_a_pattern_matches_equal_literals_of_the_same_type_only(fn):
    with pytest.warns(UserWarning, match=r"replace \(quantize -> quantize_hardtanh\) matches "
                                         r"nothing.*aten.mul.Tensor, aten.add.Tensor"):
        op = ms_aten.function(fn, (X,), replace=[(quantize, quantize_hardtanh)])
    assert op.program.replaced == 0
    assert_same(run(op, to_ms((X,)), "graph"), fn(X))


def test_an_intermediate_used_outside_the_match_keeps_it_from_matching():
    def shared(x):
        scaled = x * 12.5 + 3.0
        return torch.clamp(torch.round(scaled), -128, 127) + scaled

    with pytest.warns(UserWarning, match="matches nothing"):
        op = ms_aten.function(shared, (X,), replace=[(quantize, quantize_hardtanh)])
    assert op.program.replaced == 0
    assert_same(run(op, to_ms((X,)), "graph"), shared(X))


@pytest.mark.parametrize("replacement, message", [
    (lambda x: (quantize(x), x), r"the replacement returns 2 outputs, the pattern 1"),
    (lambda x: quantize(x)[:2], r"output 0 of the replacement is float32\[2, 16\], the "
                                r"pattern's \(node 'clamp'\) is float32\[4, 16\]"),
    (lambda x: quantize(x).double(), r"output 0 of the replacement is float64\[4, 16\], the "
                                     r"pattern's \(node 'clamp'\) is float32\[4, 16\]"),
])
def test_a_replacement_with_other_outputs_is_an_error_at_capture(replacement, message):
    with pytest.raises(ms_aten.CaptureError, match=r"two_quantizes: replace \(quantize -> "
                                                    r"<lambda>\): " + message):
        ms_aten.function(two_quantizes, (X,), replace=[(quantize, replacement)])
    assert replaced_function(two_quantizes).program.replaced == 2  # later captures work


def test_pattern_example_inputs_for_shape_dependent_patterns():
    def last_two_swapped_softmax(x):
        return x.transpose(1, 2).softmax(-1)

    def fused(x):
        return torch.softmax(x.transpose(1, 2), -1) * 1.0

    x = randn(2, 3, 4)
    with pytest.raises(ms_aten.CaptureError, match=r"captured on float32\[2, 3\]: give example "
                                                    r"inputs"):
        ms_aten.function(last_two_swapped_softmax, (x,),
                         replace=[(last_two_swapped_softmax, fused)])
    op = ms_aten.function(last_two_swapped_softmax, (x,),
                          replace=[(last_two_swapped_softmax, fused, (x,))])
    assert op.program.replaced == 1 and "mul" in op.program.spec
    assert_same(run(op, to_ms((x,)), "graph"), last_two_swapped_softmax(x))


@pytest.mark.parametrize("replace, error, message", [
    ((quantize, quantize_hardtanh), TypeError, "a list of \\(pattern, replacement\\) tuples"),
    ([(quantize,)], TypeError, r"replace\[0\] must be \(pattern, replacement\)"),
    ([(quantize, "fused")], TypeError, r"replace\[0\] must be"),
    ([(quantize, quantize_hardtanh, [X])], TypeError, "example_inputs must be a tuple"),
    ([(lambda *xs: xs[0] * 2, quantize)], TypeError, "cannot tell how many inputs"),
    ([(lambda x: x * torch.tensor(2.0), quantize)], ms_aten.CaptureError,
     "the pattern holds tensor constants"),
    ([(quantize, lambda x: quantize(x) * torch.tensor(1.0))], ms_aten.CaptureError,
     "the replacement holds tensor constants"),
    ([(lambda x, y: x * 2, quantize)], ms_aten.CaptureError, "does not use its input number 2"),
    ([(lambda x: x, quantize)], ms_aten.CaptureError, "holds no op to match"),
    ([(quantize, lambda x, y: x)], ms_aten.CaptureError,
     "cannot capture two_quantizes: replace .*: the replacement: TypeError"),
])
def test_bad_replace_arguments_are_refused_by_name(replace, error, message):
    with pytest.raises(error, match=message):
        ms_aten.function(two_quantizes, (X,), replace=replace)
