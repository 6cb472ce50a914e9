"""The op benchmark's MindSpore side: ms_aten, MindSpore's native CPU ops, a pyfunc Custom
calling torch through numpy, the seed-style hand-written AOT kernel and an empty AOT kernel
(MindSpore's own cost of a Custom op), all in this one process on the same data. ops/run.py starts
it; it prints one RESULT line of JSON (its cases, chains, thread study and dispatcher study,
without the ATen out= baselines, which ops/worker_torch.py times without MindSpore).

    .venv/bin/python -m benchmarks.ops.worker_ms_aten [--quick] [--ops relu,mm]

The seed AOT kernel is compiled once into benchmarks/.cache/ (about 45 s) and rebuilt only when
its source or ms_ext.h is newer; --quick never compiles it and skips that route when it is not
cached. The empty kernel needs no torch and is compiled with the system's c++ in a second, when
stale.
"""
from __future__ import annotations

import os

os.environ.setdefault("GLOG_v", "3")  # MindSpore logs errors only; must precede its import

import subprocess  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402
from dataclasses import asdict  # noqa: E402
from pathlib import Path  # noqa: E402

import mindspore as ms  # noqa: E402
import torch  # noqa: E402

import ms_aten  # noqa: E402
from benchmarks.common.workers import ROOT, emit  # noqa: E402
from benchmarks.ops.cases import by_name  # noqa: E402
from benchmarks.ops.plan import (  # noqa: E402
    DISPATCHER_OPS,
    DISPATCHER_SIZE,
    SEED,
    THREAD_COUNTS,
    Plan,
    plan_from_command_line,
)
from benchmarks.ops.results import MS_ATEN, NATIVE, OK, PYNATIVE, SEED_AOT, CaseResult  # noqa: E402
from benchmarks.ops.runner import Kernels, in_mode, is_family, run_case, run_chain  # noqa: E402

HERE = Path(__file__).resolve().parent
CACHE = ROOT / "benchmarks" / ".cache"
SEED_SOURCE = ROOT / "csrc" / "examples" / "leaky_relu.cpp"
SEED_DEPENDS = (SEED_SOURCE, ROOT / "csrc" / "boundary" / "ms_ext.h")
SEED_LIBRARY = CACHE / "leaky_relu_cpu.so"
EMPTY_SOURCE = HERE / "empty_kernel.cpp"
EMPTY_LIBRARY = CACHE / "empty_kernel.so"


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
    parts = []
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
    return [report_progress(run_case(case, size, plan.config(size), SEED, kernels))
            for case in by_name(plan.ops) for size in plan.sizes]


def run_chains(plan: Plan, kernels: Kernels) -> list[CaseResult]:
    return [report_progress(run_chain(case, "small", plan.small, SEED, plan.chain_length,
                                      kernels))
            for case in by_name(plan.ops) if case.chainable]


def run_threads(plan: Plan) -> list[CaseResult]:
    """ms_aten (both modes) with n ATen threads, n = 1 and 2: ms_aten.set_num_threads for its
    kernels, which run in MindSpore's threads, and torch.set_num_threads for torch's reference
    in this one."""
    original = torch.get_num_threads()
    results = []
    try:
        for case in by_name(plan.thread_ops):
            for count in THREAD_COUNTS:
                torch.set_num_threads(count)
                ms_aten.set_num_threads(count)
                results.append(report_progress(run_case(
                    case, plan.thread_size, plan.config(plan.thread_size), SEED,
                    select=is_family(MS_ATEN), threads=count)))
    finally:
        torch.set_num_threads(original)
        ms_aten.set_num_threads(0)
    return results


def run_dispatcher(plan: Plan, kernels: Kernels) -> list[CaseResult]:
    """PYNATIVE per-call cost on 8 elements: ms_aten vs the seed AOT kernel vs native ops."""
    select = in_mode(PYNATIVE, MS_ATEN, NATIVE, SEED_AOT)
    return [report_progress(run_case(case, DISPATCHER_SIZE, plan.dispatcher, SEED, kernels,
                                     select))
            for case in by_name(DISPATCHER_OPS)]


def main() -> None:
    plan = plan_from_command_line(__doc__.splitlines()[0])
    warnings.filterwarnings("ignore", message=".*not writable.*")  # pyfunc's read-only arrays
    warnings.filterwarnings("ignore", category=DeprecationWarning)
    seed_aot, seed_note = seed_kernel(plan.build_seed)
    kernels = Kernels(seed_aot, empty_kernel())
    result = {
        "cases": run_cases(plan, kernels), "chains": run_chains(plan, kernels),
        "threads": run_threads(plan), "dispatcher": run_dispatcher(plan, kernels),
        "seed_aot": seed_note,
        "threads_note": f"torch.get_num_threads()={torch.get_num_threads()} (interop "
                        f"{torch.get_num_interop_threads()}), MindSpore runtime_num_threads="
                        f"{ms.get_context('runtime_num_threads')}, OMP_NUM_THREADS="
                        f"{os.environ.get('OMP_NUM_THREADS', 'unset')}",
        "versions": f"mindspore {ms.__version__}, torch {torch.__version__}, "
                    f"ms_aten {ms_aten.__version__}"}
    for key in ("cases", "chains", "threads", "dispatcher"):
        result[key] = [asdict(case) for case in result[key]]
    emit(result)


if __name__ == "__main__":
    main()
