"""Writing the results: a run's summary, ops/<cell>.json (every figure), and its plots,
ops/<cell>.png; the family's report, ops/README.md (tables), from every cell's summary."""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (after choosing the Agg backend)

from benchmarks.common import summaries  # noqa: E402
from benchmarks.ops.results import (  # noqa: E402
    EMPTY_AOT,
    GRAPH,
    MS_ATEN,
    NATIVE,
    OK,
    PYFUNC,
    PYNATIVE,
    SEED_AOT,
    CaseResult,
    RouteResult,
    case_from_dict,
)

FAMILY = "ops"
PARTS = ("cases", "chains", "threads", "dispatcher")
WIN_MARGIN = 1.1  # smaller differences are within this machine's noise
COLUMNS = [(MS_ATEN, GRAPH), (MS_ATEN, PYNATIVE), (NATIVE, GRAPH), (NATIVE, PYNATIVE),
           (PYFUNC, GRAPH), (PYFUNC, PYNATIVE), (SEED_AOT, GRAPH), (SEED_AOT, PYNATIVE),
           (EMPTY_AOT, GRAPH), (EMPTY_AOT, PYNATIVE)]


@dataclass
class Report:
    meta: dict
    cases: list[CaseResult]
    chains: list[CaseResult]
    threads: list[CaseResult]
    dispatcher: list[CaseResult]


def pick(case: CaseResult, family: str, mode: str) -> RouteResult | None:
    """The route of `family` in `mode`; for natives the fastest one that is right, else the
    first (to show why it is missing)."""
    routes = [r for r in case.routes if r.family == family and r.mode == mode]
    good = [r for r in routes if r.status == OK]
    if good:
        return min(good, key=lambda r: r.median_us)
    return routes[0] if routes else None


def fmt_us(us: float) -> str:
    return f"{us:,.0f}" if us >= 100 else f"{us:.3g}"


def fmt_ratio(ratio: float) -> str:
    return f"×{ratio:,.0f}" if ratio >= 100 else f"×{ratio:.3g}"


def cell(route: RouteResult | None) -> str:
    if route is None:
        return ""
    if route.status != OK:
        return route.status
    return f"{fmt_us(route.median_us)} ({fmt_ratio(route.ratio)})"


def table(header: list[str], rows: Iterable[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return lines + ["| " + " | ".join(row) + " |" for row in rows]


def shapes(case: CaseResult) -> str:
    return " ".join("×".join(map(str, s)) or "scalar" for s in case.shapes)


def native_label(case: CaseResult) -> str:
    labels = [(r.impl if r and r.status == OK else "–") for r in
              (pick(case, NATIVE, GRAPH), pick(case, NATIVE, PYNATIVE))]
    return " / ".join(labels)


def main_table(cases: list[CaseResult]) -> list[str]:
    header = ["op", "size", "inputs", "ATen out= µs",
              *(f"{family} {mode}" for family, mode in COLUMNS), "native used (graph / pynative)"]
    rows = [[c.op, c.size, shapes(c), fmt_us(c.aten_out_us),
             *(cell(pick(c, family, mode)) for family, mode in COLUMNS), native_label(c)]
            for c in cases]
    return table(header, rows)


def per_native(route: RouteResult | None, native: RouteResult | None) -> str:
    if route and native and route.status == native.status == OK:
        return f"{route.median_us / native.median_us:.3g}"
    return "–"


def chain_table(chains: list[CaseResult]) -> list[str]:
    """ms_aten, the hand-written (seed) and the empty AOT kernel per op, each over native: the
    empty kernel's ratio is what MindSpore spends on any Custom op beyond a native one."""
    header = ["op", "inputs", "ATen out= µs (one call)", "ms_aten µs/op", "native µs/op",
              "native", "seed AOT µs/op", "empty AOT µs/op", "ms_aten / native",
              "seed AOT / native", "empty AOT / native"]
    rows = []
    for c in chains:
        ours, native = pick(c, MS_ATEN, GRAPH), pick(c, NATIVE, GRAPH)
        seed, empty = pick(c, SEED_AOT, GRAPH), pick(c, EMPTY_AOT, GRAPH)
        rows.append([c.op, shapes(c), fmt_us(c.aten_out_us), cell(ours), cell(native),
                     native.impl if native else "–", cell(seed), cell(empty),
                     per_native(ours, native), per_native(seed, native),
                     per_native(empty, native)])
    return table(header, rows)


def wins(cases: list[CaseResult], chains: list[CaseResult]) -> list[list[str]]:
    """Rows (op, size, where, ms_aten µs, native µs, native, speedup) where ms_aten is at
    least WIN_MARGIN faster than the fastest right native of the same mode, best first."""
    found = []
    for c, label in [*((c, "") for c in cases), *((c, f" chain of {c.chain_length}")
                                                   for c in chains)]:
        for mode in (GRAPH, PYNATIVE) if not label else (GRAPH,):
            ours, native = pick(c, MS_ATEN, mode), pick(c, NATIVE, mode)
            if ours and native and ours.status == native.status == OK \
                    and ours.median_us * WIN_MARGIN <= native.median_us:
                found.append((native.median_us / ours.median_us,
                              [c.op, c.size, mode + label, fmt_us(ours.median_us),
                               fmt_us(native.median_us), native.impl]))
    return [row + [f"×{speedup:.2f}"] for speedup, row in sorted(found, key=lambda f: -f[0])]


def size_label(case: CaseResult) -> str:
    return f"chain of {case.chain_length} ({case.size})" if case.chain_length else case.size


def failures(cases: list[CaseResult]) -> list[list[str]]:
    """One row per failing (op, route, reason), listing the sizes it failed at."""
    sizes: dict[tuple[str, ...], list[str]] = {}
    for c in cases:
        for r in c.routes:
            if r.status != OK:
                key = (c.op, r.family, r.impl, r.mode, r.status, r.note.replace("|", "/"))
                sizes.setdefault(key, []).append(size_label(c))
    return [[op, ", ".join(where), *rest] for (op, *rest), where in sizes.items()]


def thread_table(threads: list[CaseResult]) -> list[str]:
    by_key: dict[tuple[str, str], dict[int, float]] = {}
    for c in threads:
        by_key.setdefault((c.op, "ATen out="), {})[c.torch_threads] = c.aten_out_us
        for r in c.routes:
            if r.status == OK:
                by_key.setdefault((c.op, f"{r.family} {r.mode}"), {})[c.torch_threads] = \
                    r.median_us
    counts = sorted({c.torch_threads for c in threads})
    header = ["op", "route", *(f"{n} thread(s) µs" for n in counts),
              f"speedup {counts[0]}→{counts[-1]}"]
    rows = [[op, route, *(fmt_us(us[n]) if n in us else "–" for n in counts),
             f"×{us[counts[0]] / us[counts[-1]]:.2f}" if len(us) == len(counts) else "–"]
            for (op, route), us in by_key.items()]
    return table(header, rows)


def dispatcher_lines(dispatcher: list[CaseResult]) -> list[str]:
    """Per-call µs on 8 elements, and ms_aten's cost over the seed AOT kernel."""
    rows, leaky = [], {}
    for c in dispatcher:
        rows.append([c.op, shapes(c), "ATen out=", "eager", fmt_us(c.aten_out_us), ""])
        for r in c.routes:
            timed = r.status == OK
            rows.append([c.op, shapes(c), r.impl, r.mode,
                         fmt_us(r.median_us) if timed else r.status,
                         fmt_us(r.min_us) if timed else ""])
            if timed and c.op == "leaky_relu":
                leaky[r.family] = r
    lines = table(["op", "inputs", "route", "mode", "µs per call (median)", "min"], rows)
    if MS_ATEN in leaky and SEED_AOT in leaky:
        ours, seed = leaky[MS_ATEN], leaky[SEED_AOT]
        lines += ["", f"ms_aten − seed AOT kernel (leaky_relu, PYNATIVE): "
                      f"**{ours.median_us - seed.median_us:+.1f} µs per call** by medians, "
                      f"{ours.min_us - seed.min_us:+.1f} µs by minima. Both go through "
                      f"MindSpore's Custom aot launch, so this is ms_aten's own cost (its Python "
                      f"call path and the boxed dispatcher call), plus noise."]
    return lines


def header_lines(meta: dict) -> list[str]:
    lines = [f"- date: {meta['date']}; host: {meta['host']}",
             f"- versions: {meta['versions']}",
             f"- threads: {meta['threads']}",
             f"- load average (1/5/15 min) at start {tuple(meta['loadavg_start'])}, "
             f"at end {tuple(meta['loadavg_end'])}; wall time {meta['wall_s']:.0f} s"]
    if meta["quick"]:
        lines.append("- quick: a smoke run, not a measurement")
    if meta.get("note"):
        lines.append(f"- note: {meta['note']}")
    return lines + ["", meta["method"], ""]


def markdown(report: Report) -> str:
    """A run's section of the report: its record and method, then its tables."""
    lines = header_lines(report.meta)
    lines += ["### All routes: µs per call (×ratio to ATen out=, lower is faster)", "",
              *main_table(report.cases), ""]
    if report.chains:
        length = report.chains[0].chain_length
        lines += [f"### Per op inside one graph: a Cell chaining {length} calls, time/{length}",
                  "", *chain_table(report.chains), ""]
    lines += ["### Where ms_aten beats MindSpore's native CPU kernel, and by how much", "",
              "Against the fastest native equivalent that runs and is right, in the same mode; "
              f"listed from ×{WIN_MARGIN:g} on, as smaller differences are within this "
              "machine's noise.", "",
              *table(["op", "size", "mode", "ms_aten µs", "native µs", "native", "speedup"],
                     wins(report.cases, report.chains)), ""]
    lines += ["### Routes that are n/a or wrong (never timed)", "",
              *table(["op", "sizes", "family", "impl", "mode", "status", "reason"],
                     failures(report.cases + report.chains)), ""]
    if report.threads:
        lines += ["### torch threads (torch.set_num_threads) on elementwise ops and reductions",
                  "", *thread_table(report.threads), ""]
    if report.dispatcher:
        lines += ["### Dispatcher overhead: PYNATIVE per call on 8 elements", "",
                  *dispatcher_lines(report.dispatcher), ""]
    return "\n".join(lines)


COLORS = {"ATen out=": "0.35", "ms_aten graph": "tab:blue", "ms_aten pynative": "lightskyblue",
          "native graph": "tab:red", "native pynative": "lightsalmon",
          "pyfunc graph": "tab:purple", "pyfunc pynative": "plum",
          "ms_aten per op in a graph chain": "navy",
          "native per op in a graph chain": "darkred"}


def _bars(ax, ops: list[str], series: dict[str, list[float | None]]) -> None:
    """Grouped bars, one group per op; a missing value (n/a, wrong) leaves a gap."""
    width = 0.8 / max(len(series), 1)
    for i, (label, values) in enumerate(series.items()):
        xs = [j + i * width for j, v in enumerate(values) if v is not None]
        ax.bar(xs, [v for v in values if v is not None], width, label=label, color=COLORS[label])
    ax.set_xticks([j + 0.4 - width / 2 for j in range(len(ops))], ops, rotation=30, ha="right")
    ax.set_yscale("log")
    ax.legend(fontsize=7, ncol=3)
    ax.grid(axis="y", which="both", alpha=0.3)


def _value(route: RouteResult | None, attribute: str) -> float | None:
    return getattr(route, attribute) if route is not None and route.status == OK else None


def plot(report: Report, path: Path) -> None:
    sizes = {c.size for c in report.cases}
    big = "large" if "large" in sizes else "small"
    large = [c for c in report.cases if c.size == big]
    small = [c for c in report.cases if c.size == "small"]
    chains = {c.op: c for c in report.chains}
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(13, 10))
    _bars(top, [c.op for c in large], {
        f"{family} {mode}": [_value(pick(c, family, mode), "ratio") for c in large]
        for family, mode in COLUMNS[:6]})  # seed AOT: leaky_relu only
    top.axhline(1.0, color="black", linewidth=0.8)
    top.set_ylabel("time / ATen out= time (log)")
    top.set_title(f"{big} inputs: ratio to ATen eager out= (lower is faster)")
    series = {"ATen out=": [c.aten_out_us for c in small]}
    series.update({f"{family} {mode}": [_value(pick(c, family, mode), "median_us") for c in small]
                   for family, mode in COLUMNS[:4]})
    for family in (MS_ATEN, NATIVE):
        series[f"{family} per op in a graph chain"] = [
            _value(pick(chains[c.op], family, GRAPH), "median_us") if c.op in chains else None
            for c in small]
    _bars(bottom, [c.op for c in small], series)
    bottom.set_ylabel("µs per call (log)")
    bottom.set_title("small inputs: µs per call")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def from_summary(summary: dict) -> Report:
    """A run's Report from its summary (the JSON of asdict(Report))."""
    return Report(summary["meta"], *([case_from_dict(dict(case)) for case in summary[part]]
                                     for part in PARTS))


def cell_name(ops: tuple[str, ...], every_op: tuple[str, ...], quick: bool) -> str:
    """A run's cell, named for its ops: "all_ops" for all of them (`every_op`; "quick" for the
    quick run's), else the ops it ran, sorted, joined by "+" (quick_... for the quick run)."""
    chosen = "+".join(sorted(set(ops))) if set(ops) != set(every_op) else ""
    if quick:
        return "quick" + (f"_{chosen}" if chosen else "")
    return chosen or "all_ops"


def write_markdown(out: Path) -> Path:
    """ops/README.md under `out`, from every cell's summary there."""
    return summaries.write_report(
        out / FAMILY, "ms_aten op by op",
        "Each cell is a run of `python -m benchmarks.ops.run` over the ops it names (all_ops: "
        "all of them), with its own method (as it was at that run) and its plots, `<cell>.png`.",
        lambda name, summary: markdown(from_summary(summary)))


def write(report: Report, out: Path, name: str) -> list[Path]:
    """The run's summary <name>.json and plots <name>.png in ops/ under `out`, and the report,
    ops/README.md; returns their paths."""
    family = out / FAMILY
    cell = summaries.write_cell(family, name, asdict(report))
    plots = family / f"{name}.png"
    plot(report, plots)
    return [cell, plots, write_markdown(out)]
