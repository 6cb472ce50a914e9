"""A compiled torch extension in the torch_npu tutorial's shape (examples/custom_extension:
TORCH_LIBRARY ops with CPU, Meta and Autograd kernels, built with ms_aten.build and loaded with
torch.ops.load_library) through ms_aten.op and ms_aten.module, and replace= putting its fused
quantize kernel in place of the subgraph it fuses; against torch eager and autograd."""
from __future__ import annotations

import copy
import time
import warnings
from pathlib import Path
from types import SimpleNamespace

import mindspore as ms
import pytest
import torch

import ms_aten
from ms_aten.build import build

from common import as_tuple, assert_same, load_example, randn, run, set_mode, to_ms, torch_grads

pytestmark = pytest.mark.slow  # compiles two extensions, ≈40 s on 2 idle cores

NO_META = Path(__file__).parent / "extensions" / "no_meta.cpp"


@pytest.fixture(scope="session")
def ext(tmp_path_factory):
    """The example (examples/custom_extension/example.py) with its myops extension built and
    loaded, and tests/extensions/no_meta.cpp's op with no Meta kernel loaded too."""
    out = tmp_path_factory.mktemp("extensions")
    example = load_example("custom_extension/example")
    start = time.perf_counter()
    library = example.myops.build(out)
    built = time.perf_counter()
    no_meta = build(NO_META, out / "no_meta.so")
    print(f"built myops in {built - start:.0f} s, no_meta in {time.perf_counter() - built:.0f} s")
    example.myops.load(library)
    torch.ops.load_library(str(no_meta))
    return SimpleNamespace(example=example, myops=example.myops, library=library)


def weighted_sum_grads(ext, f, inputs, weight, mode, **grad_args):
    """MindSpore's gradients of sum(f(*inputs) * weight), and how many times the extension's
    backward kernels ran to give them."""
    set_mode(mode)
    before = ext.myops.backward_calls()
    grads = ms.grad(ext.example.WeightedSum(f), **grad_args)(*to_ms((*inputs, weight)))
    # asnumpy waits for the launches, before the count is read (PYNATIVE is asynchronous)
    grads = [torch.from_numpy(g.asnumpy()) for g in as_tuple(grads)]
    return grads, ext.myops.backward_calls() - before


def test_my_op_forward_and_gradients_match_torch(mode, ext):
    x, gate, weight = randn(5, 7), randn(5, 7), randn(5, 7)
    op = ms_aten.op("myops::my_op")
    assert_same(run(op, to_ms((x, gate)), mode), x * torch.sigmoid(gate), rtol=1e-6, atol=1e-6)
    grads, runs = weighted_sum_grads(ext, op, (x, gate), weight, mode, grad_position=(0, 1))
    expected = torch_grads(lambda a, b: a * torch.sigmoid(b), (x, gate), [weight])
    for got, want in zip(grads, expected, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)
    assert runs == 1  # the gradient came from the extension's my_op_backward kernel


def test_my_op_errors_name_the_op_and_later_calls_work(mode, ext):
    with pytest.raises(RuntimeError, match=r"myops::my_op: the tensors must have one shape and "
                                           r"dtype, got Float\[2, 3\] and Float\[3, 2\]"):
        run(ms_aten.op("myops::my_op"), to_ms((randn(2, 3), randn(3, 2))), mode)
    x = randn(3)
    assert_same(run(ms_aten.op("myops::my_op"), to_ms((x, x)), mode), x * torch.sigmoid(x),
                rtol=1e-6, atol=1e-6)


def model_gradients(ext, cell, x, weight, mode):
    return weighted_sum_grads(ext, cell, (x,), weight, mode, grad_position=None,
                              weights=cell.trainable_params())


def torch_weight_grads(model, x, weight) -> list[torch.Tensor]:
    model.zero_grad()
    (model(x) * weight).sum().backward()
    return [p.grad for p in model.parameters()]  # the Cell's Parameters come in this order


def test_module_calling_my_op_matches_torch(mode, ext):
    torch.manual_seed(0)
    model = ext.myops.GatedMLP()
    x, weight = randn(6, 16), randn(6, 4)
    cell = ms_aten.module(model, (x,))
    assert_same(run(cell, to_ms((x,)), mode), model(x).detach(), rtol=1e-6, atol=1e-6)
    grads, runs = model_gradients(ext, cell, x, weight, mode)
    for got, want in zip(grads, torch_weight_grads(model, x, weight), strict=True):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    assert runs == 1


def test_a_model_calling_my_op_compiles_with_its_kernels_inside(mode, ext, tmp_path_factory):
    """compile=True: AOTInductor calls the extension's kernels from the compiled code (its CPU
    kernel forward, its backward kernel in the compiled backward), and the gradients are
    torch's."""
    torch.manual_seed(0)
    model = ext.myops.GatedMLP()
    x, weight = randn(6, 16), randn(6, 4)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ms_aten.CompileWarning)
        cell = ms_aten.module(model, (x,), compile={
            "cache_dir": str(tmp_path_factory.getbasetemp() / "compiled_myops")})
    assert cell.program.compiled.training and cell.program.n_nodes == 1
    assert_same(run(cell, to_ms((x,)), mode), model(x).detach(), rtol=1e-6, atol=1e-6)
    grads, runs = model_gradients(ext, cell, x, weight, mode)
    for got, want in zip(grads, torch_weight_grads(model, x, weight), strict=True):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    assert runs == 1


def test_replace_puts_the_fused_kernel_in_place_of_the_quantize_subgraph(mode, ext):
    """The model keeps mul -> add -> round -> clamp in its source; the program runs
    myops::quantize instead, and its gradients are the kernel's straight-through estimator
    (round's own gradient is zero), as torch gives for the model with the kernel written in."""
    torch.manual_seed(0)
    myops = ext.myops
    model = myops.QuantizedMLP()
    x, weight = randn(6, 16) * 30, randn(6, 4)  # some values reach the clamp
    cell = ms_aten.module(model, (x,), replace=[(myops.quantize, myops.fused_quantize)])
    assert cell.program.replaced == 1
    assert "call myops::quantize" in cell.program.spec
    assert "call aten::round" not in cell.program.spec
    assert_same(run(cell, to_ms((x,)), mode), model(x).detach())
    fused = copy.deepcopy(model)
    fused.step = myops.fused_quantize
    grads, runs = model_gradients(ext, cell, x, weight, mode)
    expected = torch_weight_grads(fused, x, weight)
    assert expected[0].abs().sum() > 0  # fc1 learns through the estimator, not through round
    for got, want in zip(grads, expected, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    assert runs == 1


def test_function_replace_with_the_fused_kernel_in_every_capture(mode, ext):
    myops = ext.myops

    def two_steps(x):
        return myops.quantize(x) * 2 + myops.quantize(x * 3)

    def with_kernel(x):
        return myops.fused_quantize(x) * 2 + myops.fused_quantize(x * 3)

    op = ms_aten.function(two_steps, (randn(4, 8),),
                          replace=[(myops.quantize, myops.fused_quantize)])
    for x in (randn(4, 8) * 10, randn(3, 2) * 10):  # the second shape is captured again
        assert_same(run(op, to_ms((x,)), mode), two_steps(x))
        weight = randn(*x.shape)
        grads, runs = weighted_sum_grads(ext, op, (x,), weight, mode, grad_position=0)
        torch.testing.assert_close(grads[0], torch_grads(with_kernel, (x,), [weight])[0])
        assert runs == 2
    assert [p.replaced for p in op.primitive.programs.values()] == [2, 2]


def test_op_without_a_meta_kernel_says_what_to_register(mode, ext):
    message = (r"op 'ms_aten_no_meta::twice' has no Meta kernel or fake implementation.*"
               r"TORCH_LIBRARY_IMPL\(ms_aten_no_meta, Meta, m\) \{ m.impl\(\"twice\", .*"
               r"@torch.library.register_fake\(\"ms_aten_no_meta::twice\"\)")
    with pytest.raises(ms_aten.ShapeInferenceError, match="ms_aten.op: " + message):
        ms_aten.op("ms_aten_no_meta::twice")

    class Twice(torch.nn.Module):
        def forward(self, x):
            return torch.ops.ms_aten_no_meta.twice(x) + 1

    with pytest.raises(ms_aten.CaptureError, match="cannot capture Twice: " + message):
        ms_aten.module(Twice(), (randn(3),))
    x = randn(3)  # the process lives, and the extension's ops still run
    assert_same(run(ms_aten.op("myops::my_op"), to_ms((x, x)), mode), x * torch.sigmoid(x),
                rtol=1e-6, atol=1e-6)


def test_the_example_script_runs_within_its_tolerance(mode, ext):
    gaps = ext.example.main(["--mode", mode, "--library", str(ext.library)])
    assert len(gaps) == 6 and max(gaps.values()) <= ext.example.TOLERANCE
