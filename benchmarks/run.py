"""Benchmark ms_aten against ATen eager out=, MindSpore's native CPU ops, a pyfunc Custom calling
torch through numpy, the seed-style hand-written AOT kernel and an empty AOT kernel (MindSpore's
own cost of a Custom op), all in one process on the same data. Writes results.md, results.json
and speed.png.

    .venv/bin/python benchmarks/run.py                # full run, several minutes
    .venv/bin/python benchmarks/run.py --quick        # CI smoke: 3 ops, small inputs, < 60 s
    .venv/bin/python benchmarks/run.py --out DIR --note "what else ran on the machine"

The full run writes benchmarks/results/, --quick writes benchmarks/results/quick/. The seed AOT
kernel is compiled once into benchmarks/.cache/ (about 45 s) and rebuilt only when its source
or ms_ext.h is newer; --quick never compiles it and skips that route when it is not cached.
The empty kernel needs no torch and is compiled with the system's c++ in a second, when stale.
"""
from __future__ import annotations

import os

os.environ.setdefault("GLOG_v", "3")  # MindSpore logs errors only; must precede its import

import argparse  # noqa: E402
import datetime  # noqa: E402
import platform  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402
from dataclasses import dataclass, replace  # noqa: E402
from pathlib import Path  # noqa: E402

import mindspore as ms  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
from bench_ops import by_name  # noqa: E402
from bench_report import Report, write  # noqa: E402
from bench_routes import MS_ATEN, NATIVE, PYNATIVE, SEED_AOT  # noqa: E402
from bench_runner import OK, CaseResult, Kernels, in_mode, is_family, run_case, run_chain  # noqa: E402
from bench_timing import TimingConfig  # noqa: E402

import ms_aten  # noqa: E402

BENCH_DIR = Path(__file__).resolve().parent
ROOT = BENCH_DIR.parent
SEED_SOURCE = ROOT / "csrc" / "examples" / "leaky_relu.cpp"
SEED_DEPENDS = (SEED_SOURCE, ROOT / "csrc" / "boundary" / "ms_ext.h")
SEED_LIBRARY = BENCH_DIR / ".cache" / "leaky_relu_cpu.so"
EMPTY_SOURCE = BENCH_DIR / "empty_kernel.cpp"
EMPTY_LIBRARY = BENCH_DIR / ".cache" / "empty_kernel.so"
SEED = 0
THREAD_COUNTS = (1, 2)
ALL_OPS = ("relu", "leaky_relu", "gelu", "softmax", "layer_norm", "sum", "cumsum", "mm",
           "conv2d", "topk", "sort", "index_select", "embedding", "masked_select")
THREAD_OPS = ("relu", "leaky_relu", "gelu", "softmax", "layer_norm", "sum", "cumsum")
DISPATCHER_OPS = ("leaky_relu", "relu")


@dataclass(frozen=True)
class Plan:
    """What one run measures, and how hard."""

    ops: tuple[str, ...]
    sizes: tuple[str, ...]
    thread_ops: tuple[str, ...]
    thread_size: str
    chain_length: int
    small: TimingConfig
    large: TimingConfig
    dispatcher: TimingConfig
    build_seed: bool
    out: Path


FULL = Plan(ops=ALL_OPS, sizes=("small", "large"), thread_ops=THREAD_OPS, thread_size="large",
            chain_length=50, small=TimingConfig(warmup=5, repeats=11, target_s=0.1),
            large=TimingConfig(warmup=2, repeats=5, target_s=0.1),
            dispatcher=TimingConfig(warmup=50, repeats=21, target_s=0.2), build_seed=True,
            out=BENCH_DIR / "results")
QUICK = Plan(ops=("leaky_relu", "softmax", "topk"), sizes=("small",),
             thread_ops=("leaky_relu",), thread_size="small", chain_length=50,
             small=TimingConfig(warmup=1, repeats=3, target_s=0.01),
             large=TimingConfig(warmup=1, repeats=3, target_s=0.01),
             dispatcher=TimingConfig(warmup=2, repeats=5, target_s=0.01), build_seed=False,
             out=BENCH_DIR / "results" / "quick")

METHOD = """\
Method:
- Every route is first checked against torch (allclose; topk/sort indices by gathering); a
  route that fails or is wrong is listed as n/a or wrong and never timed.
- Timing: warm-up, then the median of {repeats} samples ({repeats_large} for large inputs),
  each K back-to-back calls plus one sync, divided by K; K is doubled until a sample lasts
  >= {target_ms:g} ms; a call slower than {slow_s:g} s is timed alone, {slow_repeats} times. Samples
  are taken round-robin over the routes of one mode (and the baseline), so that load drifts hit
  all alike.
- MindSpore's PYNATIVE mode launches CPU ops asynchronously: the sync is MindSpore's executor
  sync (no .asnumpy() copy), and PYNATIVE numbers are steady-state costs per call in a loop.
- Baseline: torch.ops.aten.<op>.out (for layer_norm and conv2d, the out= overload of their
  kernel: native_layer_norm.out, convolution.out) with preallocated outputs under
  torch.inference_mode, on the same data. Ratios are route time / baseline time.
- GRAPH routes: one nn.Cell per route, compiled once before timing. 'native' is the fastest
  right MindSpore equivalent in that mode (ops.* or mint.*; every candidate is in
  results.json). pyfunc: ops.Custom(func_type="pyfunc") calling the torch function through
  numpy. seed_aot: csrc/examples/leaky_relu.cpp built with `python -m ms_aten.build`
  ({seed_note}). empty_aot: benchmarks/empty_kernel.cpp, a Custom aot kernel that returns at
  once (not checked: it computes nothing): MindSpore's own cost of launching any Custom op.
"""


def seed_kernel(may_build: bool) -> tuple[Path | None, str]:
    """The seed AOT kernel's .so (cached; rebuilt when older than its sources) and how."""
    newest_source = max(path.stat().st_mtime for path in SEED_DEPENDS)
    if SEED_LIBRARY.is_file() and SEED_LIBRARY.stat().st_mtime >= newest_source:
        return SEED_LIBRARY, f"cached {SEED_LIBRARY.relative_to(ROOT)}"
    if not may_build:
        return None, "not cached, and --quick never compiles it: route skipped"
    from ms_aten.build import build
    SEED_LIBRARY.parent.mkdir(parents=True, exist_ok=True)
    print(f"building the seed AOT kernel into {SEED_LIBRARY} (about 45 s) ...", flush=True)
    build(SEED_SOURCE, SEED_LIBRARY)
    return SEED_LIBRARY, f"built {SEED_LIBRARY.relative_to(ROOT)}"


def empty_kernel() -> Path | None:
    """The empty AOT kernel's .so, compiled when missing or older than its source; None (route
    skipped, with a message) when no C++ compiler works."""
    if EMPTY_LIBRARY.is_file() and EMPTY_LIBRARY.stat().st_mtime >= EMPTY_SOURCE.stat().st_mtime:
        return EMPTY_LIBRARY
    EMPTY_LIBRARY.parent.mkdir(parents=True, exist_ok=True)
    command = ["c++", "-O2", "-shared", "-fPIC", str(EMPTY_SOURCE), "-o", str(EMPTY_LIBRARY)]
    try:
        subprocess.run(command, check=True, capture_output=True, text=True)
    except (OSError, subprocess.CalledProcessError) as error:
        print(f"cannot build {EMPTY_LIBRARY.name} ({error}); the empty_aot route is skipped")
        return None
    return EMPTY_LIBRARY


_STARTED = time.perf_counter()


def summary(result: CaseResult) -> str:
    parts = [f"ATen {result.aten_out_us:.1f}"]
    for route in result.routes:
        shown = f"{route.median_us:.1f}" if route.status == OK else route.status
        parts.append(f"{route.family}:{route.impl.split('(')[0]}/{route.mode} {shown}")
    label = f"chain{result.chain_length}" if result.chain_length else result.size
    elapsed = time.perf_counter() - _STARTED
    return f"[{elapsed:5.0f} s] {result.op:>12} {label:>8} t{result.torch_threads} µs: " + \
        "; ".join(parts)


def report_progress(result: CaseResult) -> CaseResult:
    print(summary(result), flush=True)
    for route in result.routes:
        if route.status != OK:
            print(f"    {route.status}: {route.impl} {route.mode}: {route.note}", flush=True)
    return result


def run_cases(plan: Plan, kernels: Kernels) -> list[CaseResult]:
    return [report_progress(run_case(case, size, plan.large if size == "large" else plan.small,
                                     SEED, kernels))
            for case in by_name(plan.ops) for size in plan.sizes]


def run_chains(plan: Plan, kernels: Kernels) -> list[CaseResult]:
    return [report_progress(run_chain(case, "small", plan.small, SEED, plan.chain_length,
                                      kernels))
            for case in by_name(plan.ops) if case.chainable]


def run_threads(plan: Plan) -> list[CaseResult]:
    """ATen out= and ms_aten (both modes) under torch.set_num_threads(n), n = 1 and 2."""
    config = plan.large if plan.thread_size == "large" else plan.small
    original = torch.get_num_threads()
    results = []
    try:
        for case in by_name(plan.thread_ops):
            for count in THREAD_COUNTS:
                torch.set_num_threads(count)
                results.append(report_progress(run_case(case, plan.thread_size, config, SEED,
                                                        select=is_family(MS_ATEN))))
    finally:
        torch.set_num_threads(original)
    return results


def run_dispatcher(plan: Plan, kernels: Kernels) -> list[CaseResult]:
    """PYNATIVE per-call cost on 8 elements: ms_aten vs the seed AOT kernel vs native ops."""
    select = in_mode(PYNATIVE, MS_ATEN, NATIVE, SEED_AOT)
    return [report_progress(run_case(case, "tiny", plan.dispatcher, SEED, kernels, select))
            for case in by_name(DISPATCHER_OPS)]


def metadata(plan: Plan, quick: bool, note: str, seed_note: str, load_start: tuple,
             started: float) -> dict:
    def rounded(load: tuple) -> tuple:
        return tuple(round(x, 2) for x in load)

    return {
        "quick": quick,
        "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "host": f"{platform.platform()}, {os.cpu_count()} CPUs",
        "versions": f"python {platform.python_version()}, mindspore {ms.__version__}, "
                    f"torch {torch.__version__}, numpy {np.__version__}, "
                    f"ms_aten {ms_aten.__version__}",
        "threads": f"torch.get_num_threads()={torch.get_num_threads()} (interop "
                   f"{torch.get_num_interop_threads()}), MindSpore runtime_num_threads="
                   f"{ms.get_context('runtime_num_threads')}, OMP_NUM_THREADS="
                   f"{os.environ.get('OMP_NUM_THREADS', 'unset')}; the thread study sets "
                   f"torch.set_num_threads to {' and '.join(map(str, THREAD_COUNTS))}",
        "loadavg_start": rounded(load_start),
        "loadavg_end": rounded(os.getloadavg()),
        "wall_s": time.time() - started,
        "seed_aot": seed_note,
        "timing": {"small": plan.small.__dict__, "large": plan.large.__dict__,
                   "dispatcher": plan.dispatcher.__dict__, "chain_length": plan.chain_length},
        "note": note,
        "method": METHOD.format(repeats=plan.small.repeats, repeats_large=plan.large.repeats,
                                target_ms=plan.small.target_s * 1e3, slow_s=plan.large.slow_s,
                                slow_repeats=plan.large.slow_repeats, seed_note=seed_note),
    }


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="CI smoke run: small, < 60 s")
    parser.add_argument("--out", type=Path, help="output folder (default: benchmarks/results, "
                                                 "or benchmarks/results/quick with --quick)")
    parser.add_argument("--note", default="", help="a line for the results header, e.g. "
                                                   "what else loaded the machine")
    parser.add_argument("--ops", help=f"comma-separated subset of {','.join(ALL_OPS)}")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    plan = QUICK if args.quick else FULL
    if args.ops:
        chosen = tuple(args.ops.split(","))
        plan = replace(plan, ops=chosen, thread_ops=tuple(o for o in plan.thread_ops
                                                          if o in chosen))
    warnings.filterwarnings("ignore", message=".*not writable.*")  # pyfunc's read-only arrays
    warnings.filterwarnings("ignore", category=DeprecationWarning)
    started, load_start = time.time(), os.getloadavg()
    seed_aot, seed_note = seed_kernel(plan.build_seed)
    kernels = Kernels(seed_aot, empty_kernel())
    cases = run_cases(plan, kernels)
    chains = run_chains(plan, kernels)
    threads = run_threads(plan)
    dispatcher = run_dispatcher(plan, kernels)
    meta = metadata(plan, args.quick, args.note, seed_note, load_start, started)
    for path in write(Report(meta, cases, chains, threads, dispatcher), args.out or plan.out):
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
