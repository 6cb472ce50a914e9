"""Sweeps PyTorch's OpInfo database through ms_aten and writes docs/opinfo.md and .json.

    .venv/bin/python scripts/opinfo_report.py                 # full sweep (about an hour)
    .venv/bin/python scripts/opinfo_report.py --only add cat  # a few OpInfos
    .venv/bin/python scripts/opinfo_report.py --update cat    # re-sweep some into the json
    .venv/bin/python scripts/opinfo_report.py --render        # markdown from the saved json

The measurement itself (scope criterion, comparison, gradient check) is ms_aten/testing/opinfo.py;
this script runs it in a worker process over every OpInfo, saves every sample's outcome as json
after each OpInfo, and summarizes them as markdown. ms_aten is worked on while sweeps run, so a
sweep first copies the ms_aten package (the oracle included) to a temporary directory and runs
that copy.
"""
from __future__ import annotations

import argparse
import hashlib
import importlib
import json
import os
import re
import shutil
import sys
import tempfile
import time
from collections import Counter, defaultdict
from dataclasses import asdict
from datetime import datetime, timezone
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"

oracle: ModuleType  # ms_aten.testing.opinfo, imported by main() once ms_aten is in place


def snapshot(target: Path) -> str:
    """Copies the ms_aten package, the oracle included, into `target`, first on sys.path
    (which the sweep's worker processes inherit); returns a short hash of the copied files.
    It is edited while sweeps run; a sweep measures one version."""
    shutil.copytree(ROOT / "ms_aten", target / "ms_aten",
                    ignore=shutil.ignore_patterns("__pycache__"))
    sys.path.insert(0, str(target))
    digest = hashlib.sha1()
    for path in sorted(p for p in target.rglob("*") if p.is_file()):
        digest.update(path.relative_to(target).as_posix().encode() + path.read_bytes())
    return digest.hexdigest()[:12]


def smoke_test() -> None:
    """SystemExit if ms_aten cannot run aten::add (a half-rebuilt package, say)."""
    result = oracle.check_case(oracle.in_scope_cases("add")[0])
    failed = {n: o.reason for n, o in result.checks.items() if o.status != oracle.PASS}
    if failed:
        raise SystemExit(f"ms_aten fails its smoke test (aten::add), not sweeping: {failed}")


# ---------------------------------------------------------------------------------------------
# Running


def run_sweep(keys: list[str], cap: int, timeout: float, json_path: Path, data: dict,
              record: dict) -> None:
    """Sweeps `keys` into `data`, replacing what it held for them and saving the json after
    each OpInfo; the sweep's duration goes to `record` (the meta, or an update's entry)."""
    swept = set(keys)
    data["opinfos_skipped"] = [s for s in data["opinfos_skipped"] if s["opinfo"] not in swept]
    data["samples"] = [s for s in data["samples"] if s["opinfo"] not in swept]
    started = time.time()
    current, done = None, 0
    for item in oracle.sweep(keys, cap=cap, sample_timeout=timeout):
        if item.opinfo != current:
            if current is not None:
                done += 1
                _save(data, json_path)
            current = item.opinfo
            print(f"[{done + 1}/{len(keys)} {time.time() - started:7.0f}s] {current}", flush=True)
        if isinstance(item, oracle.OpInfoSkipped):
            data["opinfos_skipped"].append(asdict(item))
        else:
            data["samples"].append(_sample_json(item))
        record["duration_s"] = round(time.time() - started)
    _save(data, json_path)


def _meta(cap: int, timeout: float, version: str) -> dict:
    import mindspore
    import torch
    return {"torch": torch.__version__, "mindspore": mindspore.__version__,
            "snapshot_sha1": version, "opinfos": len(oracle.opinfos()), "cap": cap,
            "sample_timeout_s": timeout, "max_elements": oracle.MAX_ELEMENTS, "date": _now(),
            "duration_s": 0, "updates": []}


def _now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def _sample_json(result: oracle.SampleResult) -> dict:
    record = asdict(result)
    record["seconds"] = round(result.seconds, 3)
    return record


def _save(data: dict, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1) + "\n")


# ---------------------------------------------------------------------------------------------
# Summarizing


def scope_category(reason: str) -> str:
    """Out-of-scope reasons without their op names and counts."""
    for prefix, label in (("reaches no", "reaches no ATen op"),
                          ("reaches", "reaches several ATen ops"),
                          ("its op writes", "its one op writes its inputs"),
                          ("its op returns", "its one op returns non-tensors"),
                          ("the sample raises", "the sample raises in torch"),
                          ("it raises in torch", "the op raises in torch on compact copies"),
                          ("it passes a sparse", "a sparse tensor argument"),
                          ("it returns a sparse", "a sparse tensor result"),
                          ("over the cap", "over the per-OpInfo cap (not checked)"),
                          ("over ", "too large")):
        if reason.startswith(prefix):
            return label
    return reason


def failure_category(reason: str) -> str:
    """A failure reason reduced to its kind: op names, numbers and shapes stripped."""
    text = re.sub(r"ms_aten(?: op|\.op)\('?[\w:.]+'?\)?:? ?", "", reason)
    text = re.sub(r"\b\w+::\w+(\.\w*)?", "‹op›", text)
    text = re.sub(r"'[^']*'", "'…'", text)
    text = re.sub(r"\[[^\]]*\]", "[…]", text)
    text = re.sub(r"\d+(\.\d+)?(e[-+]?\d+)?", "N", text)
    return text.strip()[:110]


def _percent(part: int, whole: int) -> str:
    return f"{100 * part / whole:.1f}%" if whole else "n/a"


def _by_aten(samples: list[dict], check: str) -> tuple[int, int]:
    """(overloads with a checked sample, overloads whose every checked sample passes)."""
    statuses = defaultdict(set)
    for sample in samples:
        outcome = sample["checks"].get(check)
        if outcome and outcome["status"] != oracle.SKIPPED:
            statuses[sample["aten"]].add(outcome["status"])
    return len(statuses), sum(s == {oracle.PASS} for s in statuses.values())


def render(data: dict) -> str:
    samples = data["samples"]
    checked = [s for s in samples if s["scope"] is None]
    lines = _header(data) + _scope_section(data, samples, checked)
    lines += _results_section(checked)
    for kind, checks in (("Forward", oracle.FORWARD_CHECKS), ("Gradient", oracle.GRAD_CHECKS)):
        lines += _failures_section(kind, checks, checked)
    return "\n".join(lines) + "\n"


def _header(data: dict) -> list[str]:
    meta = data["meta"]
    cap = f"at most {meta['cap']} evenly spread" if meta["cap"] else "all"
    return [
        "# ATen coverage of ms_aten, measured with PyTorch's OpInfo database",
        "",
        f"Generated by `scripts/opinfo_report.py` on {meta['date']} (torch {meta['torch']}, "
        f"MindSpore {meta['mindspore']}, CPU; a copy of ms_aten and the oracle taken at the "
        f"start, sha1 `{meta['snapshot_sha1']}`; sweep time {meta['duration_s'] / 60:.0f} min). "
        "Machine-readable: `docs/opinfo.json`.",
        *(f"Re-swept on {u['date']} (copy sha1 `{u['snapshot_sha1']}`), {len(u['opinfos'])} "
          f"OpInfos: " + ", ".join(f"`{key}`" for key in u["opinfos"]) + "."
          for u in meta.get("updates", [])),
        "",
        "## How it was measured",
        "",
        f"- Every OpInfo of `torch.testing._internal.common_methods_invocations.op_db` "
        f"({meta['opinfos']}) gives its float32 CPU sample inputs.",
        "- Each sample's call runs (autograd off) under a TorchDispatchMode that records the "
        "ATen OpOverloads it reaches. **In scope**: exactly one OpOverload call in total, which "
        "writes none of its inputs, returns only `Tensor`/`Tensor[]`, takes no sparse tensor "
        "and runs on compact copies of its inputs (the exact criterion is the docstring of "
        "`ms_aten/testing/opinfo.py`).",
        "- The recorded call is split by its schema (Tensor-typed arguments are call-time "
        "inputs, the rest `ms_aten.op` constants), run through `ms_aten.op('ns::name.overload', "
        "...)` in PYNATIVE mode and in GRAPH mode (inside an `nn.Cell`) on MindSpore copies of "
        "the data, and compared with torch eager on the same overload and data: "
        "`torch.testing.assert_close` default tolerances (float32: rtol 1.3e-6, atol 1e-5), "
        "dtypes and shapes exact. Random ops are reseeded before each run; where torch itself "
        "is not reproducible (uninitialized memory) only shapes and dtypes are compared.",
        "- **Gradient**: for OpInfos supporting autograd whose torch reference has a derivative, "
        "`ms.grad` of sum_i sum(out_i * w_i) (floating outputs, fixed random cotangents w_i) "
        "with respect to the inputs the sample marks `requires_grad`, against "
        "`torch.autograd.grad`, both modes.",
        f"- Per sample: tensors over {meta['max_elements']:.0e} elements are skipped; a worker "
        f"process runs the checks and is restarted after a crash or {meta['sample_timeout_s']:.0f}"
        f" s without progress (the check in flight is a fail-error). {cap.capitalize()} in-scope "
        "samples per OpInfo are checked.",
        "",
    ]


def _scope_section(data: dict, samples: list[dict], checked: list[dict]) -> list[str]:
    in_scope = [s for s in samples if s["scope"] is None or s["scope"].startswith("over the cap")]
    reasons = Counter(scope_category(s["scope"]) for s in samples if s["scope"] is not None)
    skipped = Counter(s["reason"].split(" (")[0] for s in data["opinfos_skipped"])
    lines = [
        "## Scope", "",
        f"- OpInfos: {data['meta']['opinfos']}; without float32 CPU samples or failing to "
        f"produce them: {len(data['opinfos_skipped'])}; with at least one in-scope sample: "
        f"{len({s['opinfo'] for s in in_scope})}.",
        f"- Samples: {len(samples)}; in scope: {len(in_scope)}; checked: {len(checked)} "
        f"(distinct ATen overloads: {len({s['aten'] for s in checked})}).",
        "", "| out of scope | samples |", "|---|---:|",
    ]
    lines += [f"| {reason} | {n} |" for reason, n in reasons.most_common()]
    lines += [f"| whole OpInfo: {reason} | {n} OpInfos |" for reason, n in skipped.most_common()]
    return lines + [""]


def _results_section(checked: list[dict]) -> list[str]:
    lines = ["## Results", "",
             "Per sample (pass % of the samples the check applies to), and per ATen overload "
             "(an overload passes when all its checked samples pass).", "",
             "| check | applies | pass | mismatch | error | pass % | overloads passing |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for check in oracle.CHECKS:
        counts = Counter(s["checks"][check]["status"] for s in checked if check in s["checks"])
        applies = counts[oracle.PASS] + counts[oracle.MISMATCH] + counts[oracle.ERROR]
        n_aten, n_pass = _by_aten(checked, check)
        lines.append(f"| {check} | {applies} | {counts[oracle.PASS]} | {counts[oracle.MISMATCH]} "
                     f"| {counts[oracle.ERROR]} | {_percent(counts[oracle.PASS], applies)} "
                     f"| {n_pass}/{n_aten} ({_percent(n_pass, n_aten)}) |")
    skipped = Counter(s["checks"][c]["reason"].split(" (")[0] for s in checked
                      for c in oracle.GRAD_CHECKS[:1]
                      if s["checks"].get(c, {}).get("status") == oracle.SKIPPED)
    lines += ["", "Gradient check not applicable: " +
              "; ".join(f"{reason}: {n}" for reason, n in skipped.most_common()) + ".", ""]
    return lines


def _failures_section(kind: str, checks: tuple[str, ...], checked: list[dict]) -> list[str]:
    """Failing overloads grouped by failure kind, with the modes and an example reason."""
    groups: dict[str, dict[str, set]] = defaultdict(lambda: defaultdict(set))
    examples: dict[str, str] = {}
    for sample in checked:
        for check in checks:
            outcome = sample["checks"].get(check)
            if outcome and outcome["status"] in (oracle.MISMATCH, oracle.ERROR):
                category = f"{outcome['status']}: {failure_category(outcome['reason'])}"
                groups[category][sample["aten"]].add(check.split("/")[1])
                examples.setdefault(category, outcome["reason"])
    lines = [f"## {kind} failures, grouped", ""]
    if not groups:
        return lines + ["None.", ""]
    lines += [f"{sum(map(len, groups.values()))} (overload, kind) failures; modes in brackets.", ""]
    for category, ops in sorted(groups.items(), key=lambda item: -len(item[1])):
        shown = ", ".join(f"`{op}` [{'/'.join(sorted(modes))}]"
                          for op, modes in sorted(ops.items()))
        lines += [f"- **{category}** ({len(ops)} overloads). Example: {examples[category]}",
                  f"  - {shown}"]
    return lines + [""]


def main() -> None:
    global oracle
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", help="OpInfo keys to sweep (default: all)")
    parser.add_argument("--update", nargs="+", metavar="KEY",
                        help="re-sweep these OpInfos into the existing json (after a fix)")
    parser.add_argument("--cap", type=int, default=20,
                        help="in-scope samples checked per OpInfo (0: all; default 20)")
    parser.add_argument("--timeout", type=float, default=120.0,
                        help="seconds without progress before a sample counts as hung")
    parser.add_argument("--render", action="store_true", help="only re-render the markdown")
    parser.add_argument("--out", type=Path, default=DOCS / "opinfo",
                        help="output path without suffix (.json and .md are written)")
    args = parser.parse_args()
    json_path, md_path = args.out.with_suffix(".json"), args.out.with_suffix(".md")
    os.environ.setdefault("GLOG_v", "3")  # MindSpore logs errors only, here and in workers
    with tempfile.TemporaryDirectory(prefix="opinfo_snapshot_") as copy:
        version = "" if args.render else snapshot(Path(copy))
        oracle = importlib.import_module("ms_aten.testing.opinfo")  # after the copy
        if args.render or args.update:
            data = json.loads(json_path.read_text())
        if args.update:
            smoke_test()
            update = {"opinfos": args.update, "snapshot_sha1": version, "date": _now()}
            data["meta"].setdefault("updates", []).append(update)
            run_sweep(args.update, data["meta"]["cap"], args.timeout, json_path, data, update)
        elif not args.render:
            smoke_test()
            data = {"meta": _meta(args.cap, args.timeout, version), "opinfos_skipped": [],
                    "samples": []}
            keys = args.only or list(oracle.opinfos())
            run_sweep(keys, args.cap, args.timeout, json_path, data, data["meta"])
    md_path.write_text(render(data))
    print(f"wrote {md_path} and {json_path}")


if __name__ == "__main__":
    main()
