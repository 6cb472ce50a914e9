"""Where one decode step of the batched decoding benchmark goes, beside the bound: torch's
profiler (every thread) over `ms_aten.generate` in GRAPH mode, for one cell.

    .venv/bin/python -m benchmarks.decode_batch.profile_step --model llama-0.5b \\
        --dtype float32 --batch 1 [--linear-kernel onednn] [--new-tokens 17]

The cell's model, prompts and Cell as decode_batch/worker_ms_aten.py makes them. After a
warm-up, the step unprofiled: (the best of 2 generations of --new-tokens - the best of 2 of
one token) / (new tokens - 1); then the same two generations profiled, their difference split
into the linears (aten::mm and addmm, mkldnn::_linear_pointwise), attention (the flash
kernel), the other ATen ops, and the launch's own time (ms_aten's bridge, outside any ATen op).
The profiler slows the small ops (compare the profiled step with the unprofiled one). The bound
as run.py gives it: the weights and the attended KV prefix read once at the bandwidth of a torch
copy of 1 GiB, measured in this process before and after (the better of the two).
"""
from __future__ import annotations

import argparse
import collections
import time

import mindspore as ms

import ms_aten
from benchmarks.common.profiler import profile_all_threads
from benchmarks.decode.workloads import static_cache_wrapper
from benchmarks.decode_batch.run import BANDWIDTH_MIB, bound
from benchmarks.decode_batch.worker_ms_aten import generator
from benchmarks.decode_batch.worker_torch import bandwidth_gb_s, facts
from benchmarks.decode_batch.workloads import DTYPES, FULL, MODELS, Generate, build, prompts

LINEARS = {"aten::mm", "aten::addmm", "mkldnn::_linear_pointwise"}
# Ops whose time is their children's (a linear's mm, attention's flash kernel).
WRAPPERS = {"aten::linear", "aten::matmul", "aten::scaled_dot_product_attention"}


def part(name: str) -> str | None:
    if name in LINEARS:
        return "linears"
    if name.startswith("aten::_scaled_dot_product_flash_attention"):
        return "attention"
    if name.startswith("ms_aten launch"):
        return "launch (bridge)"
    return None if name in WRAPPERS else "other ATen ops"


def profiled(generate: Generate, new: int) -> tuple[float, dict[str, float], dict[str, int]]:
    """A generation of `new` tokens under the profiler: its seconds, and per part its self CPU
    ms and calls."""
    with profile_all_threads() as prof:
        start = time.perf_counter()
        generate(new)
        wall = time.perf_counter() - start
    ms_by: dict[str, float] = collections.defaultdict(float)
    calls: collections.Counter[str] = collections.Counter()
    for event in prof.events():
        key = part(event.name)
        if key is not None:
            ms_by[key] += event.self_cpu_time_total / 1e3
            calls[key] += 1
    return wall, ms_by, calls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=list(MODELS), default="llama-0.5b")
    parser.add_argument("--dtype", choices=list(DTYPES), default="float32")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--linear-kernel", choices=("aten", "onednn"), default="aten")
    parser.add_argument("--new-tokens", type=int, default=17)
    args = parser.parse_args()
    new = args.new_tokens
    if new < 2:
        parser.error("--new-tokens must be at least 2 (the decode step is timed)")
    ms.set_device("CPU")
    model = build(args.model, args.dtype)
    ids, mask = prompts(FULL, args.batch, model.config.get_text_config().vocab_size)
    max_cache_len = ids.shape[1] + FULL.new_tokens
    cell = {"facts": facts(model, static_cache_wrapper(model, max_cache_len, args.batch)),
            "width": ids.shape[1]}
    lm = ms_aten.causal_lm(model, max_cache_len=max_cache_len, batch_size=args.batch,
                           linear_kernel=args.linear_kernel)
    ms.set_context(mode=ms.GRAPH_MODE)
    generate = generator(lm, ids, mask)
    generate(2)  # compiles the loop
    bandwidth = [bandwidth_gb_s(BANDWIDTH_MIB)]
    best = {1: float("inf"), new: float("inf")}
    for n in (1, new, 1, new):
        start = time.perf_counter()
        generate(n)
        best[n] = min(best[n], time.perf_counter() - start)
    step_ms = (best[new] - best[1]) / (new - 1) * 1e3
    wall_1, parts_1, calls_1 = profiled(generate, 1)
    wall_n, parts_n, calls_n = profiled(generate, new)
    bandwidth.append(bandwidth_gb_s(BANDWIDTH_MIB))
    bound_ms = bound(cell, max(bandwidth), new)["step_ms"]
    print(f"{args.model} {args.dtype} batch {args.batch}, linear_kernel={args.linear_kernel!r}: "
          f"bandwidth {bandwidth[0]:.1f} / {bandwidth[1]:.1f} GB/s, bound {bound_ms:.1f} ms")
    print(f"  step {step_ms:.1f} ms unprofiled (x{step_ms / bound_ms:.2f} the bound), "
          f"{(wall_n - wall_1) / (new - 1) * 1e3:.1f} ms profiled")
    for key in sorted(parts_n, key=lambda k: -parts_n[k]):
        per_step = (parts_n[key] - parts_1[key]) / (new - 1)
        print(f"  {key:16} {per_step:7.2f} ms a step (x{per_step / bound_ms:.2f} the bound), "
              f"{(calls_n[key] - calls_1[key]) / (new - 1):.0f} calls")


if __name__ == "__main__":
    main()
