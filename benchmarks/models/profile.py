"""Where the time goes in ms_aten's whole-model routes: a per-phase breakdown from three real
profilers, each route in fresh processes. Writes
benchmarks/results/models/profile/profile_runs.{md,json} (profile.md reads them).

    .venv/bin/python -m benchmarks.models.profile          # GPT-2 tiny and medium, BERT medium
    .venv/bin/python -m benchmarks.models.profile --models gpt2-tiny --no-perf
    .venv/bin/python -m benchmarks.models.profile --ms-env MS_DEV_HOST_BLOCKING_RUN=1
    .venv/bin/python -m benchmarks.models.profile --compile training --routes \
        "GRAPH step ms_aten.optim.Adam"        # compile=: ms_aten's against torch.compile's

Per model and route (GRAPH mode, models/run.py's routes, ATen's default threads or --threads):
1. wall: the median of synchronized calls, no profiler attached.
2. torch's profiler inside the kernels: ms_aten's launches run in MindSpore's threads, which
   torch's profiler records with profile_all_threads=True; each launch is one event
   ("ms_aten launch: <name>", csrc/launch/kernel.cpp) whose children are the ATen ops it ran. A
   forward launch splits into its ATen ops and the bridge around them; a VJP launch into the
   zeroing of its gradient outputs, the recompute (the ops before autograd starts), autograd's
   backward and the gradient writes (autograd's AccumulateGrad into MindSpore's buffers); a
   single-op launch (the optimizer's fused kernel, an ms_aten.nn loss and its backward) is its
   op. The backward node by node: each autograd node's total, torch eager's against the VJP's.
3. MindSpore's Profiler: every kernel MindSpore launched (its own ops, and the Custom ops that
   are ms_aten's launches) with its duration; the wall time no kernel covers is MindSpore's
   scheduling and waiting.
4. perf (when it works here; --no-perf skips it): `perf record -e cpu-clock` on the worker
   while it loops, the CPU samples of all its threads by library and symbol, in buckets.
torch eager's own ATen time for the same forward, forward+backward and step (torch.optim.Adam)
comes from torch's profiler in a process that never imports MindSpore.
With --compile training, ms_aten's Cell is `ms_aten.module(..., compile={"training": True})`
(its forward and backward launches run AOTInductor's code; one compile per model, in a cache the
run shares, so every process after the first loads it) and torch's side is
`torch.compile(model)` beside torch eager (its first calls, which compile, are not profiled).
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from benchmarks.common import workers
from benchmarks.models.run import parse_env
from benchmarks.models.workloads import CONFIGS

ROUTES = ("GRAPH forward cell(x)", "GRAPH forward+backward",
          "GRAPH forward+backward, loss in the program", "GRAPH forward+backward, ms_aten.nn loss",
          "GRAPH step nn.Adam", "GRAPH step nn.Adam, ms_aten.nn loss",
          "GRAPH step ms_aten.optim.Adam", "GRAPH step ms_aten.optim.Adam, loss in the program",
          "GRAPH nn.Adam update alone",
          "GRAPH ms_aten.optim.Adam update alone")
LAUNCH = "ms_aten launch: "
BACKWARD = "autograd::engine::evaluate_function: "
WRITES = "torch::autograd::AccumulateGrad"
PERF_HZ = 1000
# perf buckets: (name, test on (comm, dso, symbol)), first match wins.
BUCKETS: tuple[tuple[str, Callable[[str, str, str], bool]], ...] = (
    ("ATen kernels (libtorch_cpu, MKL)", lambda c, d, s: d.startswith("libtorch_cpu")),
    ("OpenMP runtime (libgomp: barriers, spinning)", lambda c, d, s: d.startswith("libgomp")),
    ("ms_aten bridge (libms_aten)", lambda c, d, s: d.startswith("libms_aten")),
    ("MindSpore waiting: AsyncRQueue::Wait spin, sched_yield loops",
     lambda c, d, s: "AsyncRQueue::Wait" in s or "sched_yield" in s or "WorkerLoop" in s),
    ("MindSpore CPU kernels (Adam, AddN, ...)",
     lambda c, d, s: d.startswith(("libmindspore_cpu", "libnnacl", "libmindspore_ops"))),
    ("MindSpore runtime and framework, other", lambda c, d, s: d.startswith("libmindspore")),
    ("Python", lambda c, d, s: d.startswith("libpython")),
    ("kernel: scheduler, syscalls, page faults", lambda c, d, s: d == "[kernel.kallsyms]"),
    ("other (libc, allocator, ...)", lambda c, d, s: True),
)


def median_wall_ms(call: Callable[[], object], n: int) -> float:
    times = []
    for _ in range(n):
        start = time.perf_counter()
        call()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def aten_phases(events: list, calls: int) -> dict[str, dict[str, float]]:
    """ms per call of each launch kind's phases, from torch's profiler events."""
    phases: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for launch in (e for e in events if e.name.startswith(LAUNCH)):
        kids = sorted(launch.cpu_children, key=lambda k: k.time_range.start)
        total = launch.time_range.elapsed_us()
        spent = sum(k.time_range.elapsed_us() for k in kids)
        first = next((i for i, k in enumerate(kids) if k.name.startswith(BACKWARD)), None)
        name = launch.name[len(LAUNCH):]
        if name.startswith("aten::"):  # a single op: the optimizer's fused kernel, a loss
            kind, split = f"single op ({name})", {"ATen op": spent}
        elif first is None:
            kind, split = "forward kernel", {"ATen ops": spent}
        else:
            # The zeroing of gradient buffers, before the backward or (for those no gradient
            # reached) after it, and AccumulateGrad's writes into the buffers.
            before, after = kids[:first], kids[first:]
            zeroed = [sum(k.time_range.elapsed_us() for k in part if k.name == "aten::zero_")
                      for part in (before, after)]
            writes = sum(k.time_range.elapsed_us() for k in after if WRITES in k.name)
            kind = "VJP kernel"
            split = {"recompute": sum(k.time_range.elapsed_us() for k in before) - zeroed[0],
                     "autograd backward": sum(k.time_range.elapsed_us() for k in after)
                     - writes - zeroed[1],
                     "gradient writes (zeroing + AccumulateGrad)": sum(zeroed) + writes}
        phases[kind].update(split)
        phases[kind]["bridge (outside ATen ops)"] += total - spent
        phases[kind]["launch total"] += total
    return {kind: {k: v / calls / 1e3 for k, v in split.items()}
            for kind, split in phases.items()}


def op_totals(prof, calls: int) -> dict[str, list[float]]:
    """Per ATen op: [self ms per call, calls per call], the op-by-op view of a profile; per
    autograd node (BACKWARD + its name): [total ms per call, calls per call], the backward's
    node-by-node view."""
    return {e.key: [(e.self_cpu_time_total if e.key.startswith("aten::") else
                     e.cpu_time_total) / calls / 1e3, e.count / calls]
            for e in prof.key_averages() if e.key.startswith(("aten::", BACKWARD))}


def torch_profile(call: Callable[[], object], calls: int) -> tuple[dict, dict]:
    """The launches' phases and the ATen ops' totals, from torch's profiler on all threads."""
    from benchmarks.common.profiler import profile_all_threads

    with profile_all_threads() as prof:
        for _ in range(calls):
            call()
    return aten_phases(list(prof.events()), calls), op_totals(prof, calls)


def mindspore_profile(call: Callable[[], object], calls: int) -> dict:
    """ms per call of each MindSpore kernel type (Custom: ms_aten's launches), and the wall
    time no kernel covers."""
    import mindspore as ms
    from mindspore.profiler import ProfilerActivity

    folder = Path(tempfile.mkdtemp(prefix="ms_profile_"))
    try:
        with ms.profiler.profile(activities=[ProfilerActivity.CPU],
                                 on_trace_ready=ms.profiler.tensorboard_trace_handler(
                                     str(folder))) as prof:
            start = time.perf_counter()
            for _ in range(calls):
                call()
                prof.step()
            wall = (time.perf_counter() - start) * 1e3 / calls
        kernels: collections.Counter = collections.Counter()
        for path in folder.glob("*/FRAMEWORK/cpu_op_execute_timestamp_*.txt"):
            for line in path.read_text().splitlines():
                name, _, stamps = line.strip().split(";")
                kind = name.split("/")[-1].split("-op")[0]
                kernels[kind] += sum(float(s.split(",")[1]) for s in stamps.split())
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    per_call = {k: v / calls for k, v in kernels.most_common()}
    return {"wall with profiler": wall, "kernels": per_call,
            "not in any kernel (scheduling, waiting)": wall - sum(per_call.values())}


def perf_profile(call: Callable[[], object], seconds: float) -> dict | None:
    """CPU ms per call in each bucket, from perf's cpu-clock samples of this process; None
    (with why) when perf is missing or cannot record here."""
    perf = shutil.which("perf")
    if perf is None:
        return {"skipped": "perf is not installed (Debian: apt-get install linux-perf)"}
    data = Path(tempfile.mkdtemp(prefix="perf_")) / "perf.data"
    recorder = subprocess.Popen([perf, "record", "-e", "cpu-clock", "-F", str(PERF_HZ), "-p",
                                 str(os.getpid()), "-o", str(data)],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    time.sleep(0.5)  # perf attaches
    calls, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        call()
        calls += 1
    recorder.send_signal(signal.SIGINT)
    _, error = recorder.communicate(timeout=60)
    if recorder.returncode not in (0, -signal.SIGINT) or not data.is_file():
        return {"skipped": f"perf record failed: {error.decode()[-300:]}"}
    report = subprocess.run([perf, "report", "-i", str(data), "--no-children", "-g", "none",
                             "--sort", "comm,dso,sym", "--stdio", "-F", "sample,comm,dso,sym"],
                            capture_output=True, text=True, check=True).stdout
    shutil.rmtree(data.parent, ignore_errors=True)
    buckets: collections.Counter = collections.Counter()
    threads: collections.Counter = collections.Counter()
    for line in report.splitlines():
        parts = line.split(None, 3)
        if line.startswith("#") or len(parts) < 4 or not parts[0].isdigit():
            continue
        samples, comm, dso, symbol = int(parts[0]), parts[1], parts[2], parts[3]
        bucket = next(name for name, test in BUCKETS if test(comm, dso, symbol))
        buckets[bucket] += samples
        threads[comm] += samples
    ms_per_sample = 1e3 / PERF_HZ / calls
    return {"calls": calls, "wall per call": (time.perf_counter() - start) * 1e3 / calls,
            "cpu ms per call by bucket": {k: v * ms_per_sample for k, v in buckets.most_common()},
            "cpu ms per call by thread name": {k: v * ms_per_sample
                                               for k, v in threads.most_common()}}


def ms_aten_worker(model: str, route: str, use_perf: bool, compile_kind: str,
                   cache_dir: str | None, threads: int) -> dict:
    import mindspore as ms

    import ms_aten
    from benchmarks.common.timing import TimingConfig
    from benchmarks.models.worker_ms_aten import Bench
    from benchmarks.models.workloads import Task

    ms.set_device("CPU")
    if threads:
        ms_aten.set_num_threads(threads)
    bench = Bench(Task(model, "time", route, threads, TimingConfig(2, 1, 0.0), compile_kind,
                       cache_dir))
    route_obj = bench.routes()[route]
    route_obj.check(route_obj.call())
    for _ in range(3):
        route_obj.call()
    calls = 3 if "medium" in model else 10
    phases, ops = torch_profile(route_obj.call, calls)
    result = {"wall": median_wall_ms(route_obj.call, 2 * calls), "torch profiler": phases,
              "ATen ops": ops, "mindspore profiler": mindspore_profile(route_obj.call, calls)}
    if use_perf:
        result["perf"] = perf_profile(route_obj.call, 5.0)
    return result


def torch_worker(model: str, compiled: bool, threads: int) -> dict:
    """torch eager's (`compiled`: torch.compile's) forward, forward+backward and step with
    torch.optim.Adam: wall, and the ATen ops' own total (top-level ops only: what runs below
    Python)."""
    import torch

    from benchmarks.models.workloads import BETAS, EPS, LR, case, models

    if threads:
        torch.set_num_threads(threads)
    c = case(model)
    module, x, target = c.module, c.inputs[0], c.target
    run = torch.compile(module) if compiled else module
    optimizer = torch.optim.Adam(module.parameters(), lr=LR, betas=BETAS, eps=EPS)

    def forward() -> None:
        with torch.no_grad():
            run(x)

    def grad() -> None:
        module.zero_grad(set_to_none=False)
        models.torch_loss(c.loss, models.logits(run(x)), target).backward()

    def step() -> None:
        optimizer.zero_grad()
        models.torch_loss(c.loss, models.logits(run(x)), target).backward()
        optimizer.step()

    result = {}
    calls = 3 if "medium" in model else 10
    for name, call in (("forward", forward), ("forward+backward", grad), ("step", step)):
        for _ in range(3):  # torch.compile compiles at the first
            call()
        wall = median_wall_ms(call, 2 * calls)
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            for _ in range(calls):
                call()
        top = [e for e in prof.events() if e.cpu_parent is None and e.name.startswith(
            ("aten::", "autograd::engine", "Torch-Compiled Region", "## Call CompiledFxGraph",
             "Optimizer.step"))]
        result[name] = {"wall": wall, "ATen ops (top level)":
                        sum(e.time_range.elapsed_us() for e in top) / calls / 1e3,
                        "ATen ops": op_totals(prof, calls)}
    if "mindspore" in sys.modules:
        raise SystemExit("the torch worker imported MindSpore")
    return result


def fmt(ms: float) -> str:
    return f"{ms:.3g}" if ms else "–"


SPIN = "MindSpore waiting: AsyncRQueue::Wait spin, sched_yield loops"
ATEN = "ATen kernels (libtorch_cpu, MKL)"
COLUMNS = ("route", "wall", "forward kernel: ATen ops / bridge",
           "VJP kernel: recompute / autograd backward / gradient writes / bridge",
           "single-op launches (optimizer, ms_aten.nn loss)", "MindSpore's own kernels (Adam)",
           "MindSpore: no kernel running",
           "perf CPU: MindSpore spinning / ATen")


def route_row(route: str, r: dict) -> list[str]:
    """One route's phases, ms per call."""
    torch_phases = r["torch profiler"]
    forward = torch_phases.get("forward kernel", {})
    vjp = torch_phases.get("VJP kernel", {})
    single = sum(v["launch total"] for k, v in torch_phases.items() if k.startswith("single op"))
    kernels = r["mindspore profiler"]["kernels"]
    own = sum(v for k, v in kernels.items() if k != "Custom")
    perf = r.get("perf") or {}
    buckets = perf.get("cpu ms per call by bucket", {})
    return [route, fmt(r["wall"]),
            " / ".join(fmt(forward.get(k, 0)) for k in ("ATen ops", "bridge (outside ATen ops)")),
            " / ".join(fmt(vjp.get(k, 0)) for k in (
                "recompute", "autograd backward", "gradient writes (zeroing + AccumulateGrad)",
                "bridge (outside ATen ops)")),
            fmt(single), f"{fmt(own)} ({fmt(kernels.get('Adam', 0))})",
            fmt(r["mindspore profiler"]["not in any kernel (scheduling, waiting)"]),
            f"{fmt(buckets.get(SPIN, 0))} / {fmt(buckets.get(ATEN, 0))}" if buckets
            else perf.get("skipped", "–")]


def report(results: dict) -> str:
    """One table per model, ms per call: each route's phases (every profiler's figures are in
    profile_runs.json)."""
    lines = []
    for model, data in results.items():
        eager = data["torch eager"]
        lines += [f"## {model}", ""]
        for side in ("torch eager", "torch.compile"):
            if side in data:
                lines += [f"{side}, own process: " + "; ".join(
                    f"{what} {fmt(data[side][what]['wall'])} ms wall (ATen ops, autograd and "
                    f"compiled code {fmt(data[side][what]['ATen ops (top level)'])})"
                    for what in ("forward", "forward+backward", "step") if what in data[side])
                    + ".", ""]
        lines += [
                  "| " + " | ".join(COLUMNS) + " |", "|---|" + "---:|" * (len(COLUMNS) - 1)]
        lines += ["| " + " | ".join(route_row(route, r)) + " |"
                  for route, r in data["routes"].items()]
        lines += ["", *forward_ops(eager["forward"], data["routes"].get(ROUTES[0])), ""]
        for route in ROUTES[1:4]:
            lines += [*backward_nodes(eager["forward+backward"], route,
                                      data["routes"].get(route)), ""]
    return "\n".join(lines)


def backward_nodes(eager: dict, route: str, ours: dict | None, rows: int = 14) -> list[str]:
    """The backward node by node: each autograd node's total ms per call (its ATen ops
    included), torch eager's against the route's VJP kernel's."""
    if ours is None or "ATen ops" not in ours:
        return []
    theirs = {k: v for k, v in eager["ATen ops"].items() if k.startswith(BACKWARD)}
    mine = {k: v for k, v in ours["ATen ops"].items() if k.startswith(BACKWARD)}
    names = sorted(set(theirs) | set(mine),
                   key=lambda n: -max(theirs.get(n, [0])[0], mine.get(n, [0])[0]))
    total = [sum(v[0] for v in side.values()) for side in (theirs, mine)]
    lines = [f"The backward node by node, {route} (total ms per call, and calls per call; "
             f"all nodes: torch eager {fmt(total[0])}, ms_aten {fmt(total[1])}):", "",
             "| autograd node | torch eager | ms_aten VJP kernel |", "|---|---:|---:|"]
    for name in names[:rows]:
        cells = [f"{fmt(t[0])} (×{t[1]:.0f})" if (t := side.get(name)) else "–"
                 for side in (theirs, mine)]
        lines.append(f"| {name[len(BACKWARD):]} | {cells[0]} | {cells[1]} |")
    return lines


def forward_ops(eager: dict, ours: dict | None, rows: int = 10) -> list[str]:
    """The forward op by op, torch eager's ATen ops against the kernel's: self ms per call."""
    if ours is None or "ATen ops" not in ours or "ATen ops" not in eager:
        return []
    theirs, mine = eager["ATen ops"], ours["ATen ops"]
    names = sorted(set(theirs) | set(mine),
                   key=lambda n: -max(theirs.get(n, [0])[0], mine.get(n, [0])[0]))[:rows]
    lines = ["The forward op by op (self ms per call, and calls per forward):", "",
             "| ATen op | torch eager | ms_aten kernel |", "|---|---:|---:|"]
    for name in names:
        cells = [f"{fmt(t[0])} (×{t[1]:.0f})" if (t := side.get(name)) else "–"
                 for side in (theirs, mine)]
        lines.append(f"| {name} | {cells[0]} | {cells[1]} |")
    return lines


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="*", choices=list(CONFIGS),
                        default=["gpt2-tiny", "gpt2-medium", "bert-medium"])
    parser.add_argument("--routes", nargs="*", choices=ROUTES, default=list(ROUTES))
    parser.add_argument("--no-perf", action="store_true")
    parser.add_argument("--compile", choices=["none", "training"], default="none",
                        help="training: ms_aten compile={'training': True} against torch.compile")
    parser.add_argument("--cache-dir", help="ms_aten's compile cache (default: one for the run)")
    parser.add_argument("--threads", type=int, default=0,
                        help="ATen threads on both sides (0: ATen's default, one per core); 1 "
                             "keeps OpenMP's barriers out of a profile on a loaded machine")
    parser.add_argument("--out", type=Path, default=workers.RESULTS / "models" / "profile")
    parser.add_argument("--note", default="")
    parser.add_argument("--ms-env", nargs="*", default=[], metavar="KEY=VALUE",
                        help="environment for the ms_aten workers (a what-if); the results go "
                             "to profile_runs_<KEY>.{md,json}")
    parser.add_argument("--worker", choices=["torch", "ms_aten"], help=argparse.SUPPRESS)
    parser.add_argument("--model", help=argparse.SUPPRESS)
    parser.add_argument("--route", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    compiled = args.compile != "none"
    if args.worker == "torch":
        workers.emit(torch_worker(args.model, compiled, args.threads))
        return
    if args.worker == "ms_aten":
        workers.emit(ms_aten_worker(args.model, args.route, not args.no_perf, args.compile,
                                    args.cache_dir, args.threads))
        return
    load = os.getloadavg()
    ms_env = parse_env(args.ms_env)
    results = {}
    with tempfile.TemporaryDirectory(prefix="ms_aten_profile_cache_") as run_cache:
        cache = ["--compile", args.compile, "--cache-dir", args.cache_dir or run_cache,
                 "--threads", str(args.threads)]
        for model in args.models:
            print(f"{model}: torch eager", flush=True)
            results[model] = {"torch eager": workers.run(
                "benchmarks.models.profile",
                ["--worker", "torch", "--model", model, "--threads", str(args.threads)]),
                "routes": {}}
            if compiled:
                print(f"{model}: torch.compile", flush=True)
                results[model]["torch.compile"] = workers.run(
                    "benchmarks.models.profile",
                    ["--worker", "torch", "--model", model, "--compile", args.compile,
                     "--threads", str(args.threads)])
            for route in args.routes:
                print(f"{model}: {route}", flush=True)
                results[model]["routes"][route] = workers.run(
                    "benchmarks.models.profile",
                    ["--worker", "ms_aten", "--model", model, "--route", route, *cache]
                    + (["--no-perf"] if args.no_perf else []), ms_env)
    args.out.mkdir(parents=True, exist_ok=True)
    stem = "_".join(["profile_runs", *ms_env] + (["compiled"] if compiled else []))
    (args.out / f"{stem}.json").write_text(json.dumps(results, indent=1))
    table = report(results)
    print(table)
    method = __doc__.split("\n\n", 2)[2]
    started = tuple(round(x, 2) for x in load)
    (args.out / f"{stem}.md").write_text(
        f"# Where the time goes: per-phase profiles\n\n"
        f"`python -m benchmarks.models.profile {shlex.join(argv or sys.argv[1:])}` (load average "
        f"at start {started}" + (f"; the ms_aten workers ran with {ms_env}" if ms_env else "")
        + (f"; {args.note}" if args.note else "") + f")\n\n{method}\n{table}\n")


if __name__ == "__main__":
    main()
