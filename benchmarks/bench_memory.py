"""Peak memory of a whole-model backward: torch's forward+backward against ms_aten's program
VJP (which recomputes the forward under autograd), launched through the library's C API on the
same weights and data, in one process.

    .venv/bin/python benchmarks/bench_memory.py [--model gpt2-medium]

Each route runs once in a fresh process (freed memory stays with the allocator, so a route
measured after another would look free) after the same setup, and after a reset of the
process's peak resident size (Linux: writing 5 to /proc/self/clear_refs); its figure is the
peak during the route minus the resident size before it.
"""
from __future__ import annotations

import argparse
import ctypes
import gc
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

import models  # noqa: E402

import ms_aten  # noqa: E402
from ms_aten.native import library  # noqa: E402
from ms_aten.native.dtypes import spec_name  # noqa: E402

MODELS = {
    "gpt2-medium": lambda: models.gpt2(layers=4, hidden=256, heads=4, seq=128, vocab=1000),
    "bert-medium": lambda: models.bert(layers=4, hidden=256, heads=4, seq=128, vocab=1000),
}


def status_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise KeyError(field)


def peak_mib(fn: Callable[[], object]) -> float:
    """Peak resident memory added while fn runs, in MiB."""
    gc.collect()
    Path("/proc/self/clear_refs").write_text("5")
    before = status_kib("VmRSS")
    fn()
    return (status_kib("VmHWM") - before) / 1024


def launcher(spec: str, tensors: list[torch.Tensor]) -> Callable[[], None]:
    """A program kernel launched on torch tensors' buffers through ms_aten_kernel_launch."""
    lib = library.load()
    lib.ms_aten_kernel_create.restype = ctypes.c_void_p
    kernel = ctypes.c_void_p(lib.ms_aten_kernel_create(spec.encode(), None))
    n = len(tensors)
    params = (ctypes.c_void_p * n)(*[t.data_ptr() for t in tensors])
    ndims = (ctypes.c_int * n)(*[t.dim() for t in tensors])
    sizes = [(ctypes.c_int64 * max(t.dim(), 1))(*t.shape) for t in tensors]
    shapes = (ctypes.POINTER(ctypes.c_int64) * n)(
        *[ctypes.cast(s, ctypes.POINTER(ctypes.c_int64)) for s in sizes])
    names = (ctypes.c_char_p * n)(*[spec_name(t.dtype).encode() for t in tensors])
    error = ctypes.create_string_buffer(4096)

    def run() -> None:
        keep = (tensors, sizes)  # the buffers must outlive every launch
        if lib.ms_aten_kernel_launch(kernel, n, params, ndims, shapes, names, error, 4096):
            raise RuntimeError(error.value.decode())
        del keep

    return run


ROUTES = ("torch forward+backward", "ms_aten program VJP (recompute + backward)",
          "ms_aten program forward")


def measure(model: str, route: str) -> float:
    torch.manual_seed(0)
    case = MODELS[model]()
    module, x = case.module, case.inputs[0]
    program = ms_aten.module(module, case.inputs).program
    weights = [t.detach() for _, t in [*module.named_parameters(), *module.named_buffers()]]
    inputs = [*weights, x]
    outputs = [torch.empty(s, dtype=d)
               for s, d in zip(program.output_shapes, program.output_dtypes, strict=True)]
    rng = [torch.get_rng_state()] if program.random else []  # what a forward records
    cotangents = [torch.randn(s) for s in program.output_shapes]

    def torch_backward() -> None:
        models.logits(module(x)).backward(cotangents[0])

    run = {ROUTES[0]: torch_backward,
           ROUTES[1]: launcher(program.vjp_spec, inputs + cotangents + rng
                               + [torch.empty_like(t) for t in inputs]),
           ROUTES[2]: launcher(program.spec, inputs + outputs + rng)}[route]
    return peak_mib(run)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=list(MODELS), default="gpt2-medium")
    parser.add_argument("--route", choices=ROUTES, help="measure one route (a worker)")
    args = parser.parse_args(argv)
    if args.route:
        print(measure(args.model, args.route))
        return
    figures = []
    for route in ROUTES:
        done = subprocess.run([sys.executable, __file__, "--model", args.model, "--route", route],
                              capture_output=True, text=True, check=True)
        figures.append(f"{route} {float(done.stdout.split()[-1]):.1f}")
    print(f"{args.model}: peak memory added (MiB): " + ", ".join(figures))


if __name__ == "__main__":
    main()
