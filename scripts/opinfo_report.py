"""Sweeps PyTorch's OpInfo database through ms_aten and writes docs/opinfo.md and .json.

    .venv/bin/python scripts/opinfo_report.py                 # full float32 sweep (over an hour)
    .venv/bin/python scripts/opinfo_report.py --dtypes all --dtype-cap 2  # and every other dtype
    .venv/bin/python scripts/opinfo_report.py --only add cat  # a few OpInfos
    .venv/bin/python scripts/opinfo_report.py --update cat    # re-sweep some into the json
    .venv/bin/python scripts/opinfo_report.py --merge other.json  # add another sweep's results
    .venv/bin/python scripts/opinfo_report.py --render        # markdown from the saved json

The measurement itself (scope criterion, comparison, gradient check) is ms_aten/testing/opinfo.py;
this script runs it in a worker process over every OpInfo in each dtype asked for (float32 by
default; `--cap` in-scope samples per OpInfo in float32, `--dtype-cap` in the others), saves
every sample's outcome as json and summarizes them as markdown. ms_aten is worked on while
sweeps run, so a sweep first copies the ms_aten package (the oracle included) to a temporary
directory and runs that copy.

An update re-sweeps OpInfos in the dtypes of the json (or those of --dtypes) and replaces their
samples of those dtypes. Two sweeps can run at once into different --out files, float32 in one
and the other dtypes in the other, say; --merge then puts the second one's results into the
first one's json, replacing the (OpInfo, dtype) pairs it holds.
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
from collections.abc import Callable
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

SAVE_EVERY_S = 60  # the json is saved this often during a sweep (it grows to megabytes)


def run_sweep(keys: list[str], caps: dict[str, int], timeout: float, json_path: Path,
              data: dict, record: dict) -> None:
    """Sweeps `keys` in the dtypes of `caps` (name: cap) into `data`, replacing what it held
    for those (OpInfo, dtype) pairs, saving the json every SAVE_EVERY_S seconds and at the
    end; the sweep's duration goes to `record` (the meta, or an update's entry)."""
    _replace(data, {(key, dtype) for key in keys for dtype in caps}, [])
    started = last_save = time.time()
    current, done = None, 0
    dtype_caps = [(oracle.dtype_named(name), cap) for name, cap in caps.items()]
    for item in oracle.sweep(keys, dtype_caps, sample_timeout=timeout):
        if item.opinfo != current:
            done += current is not None
            current = item.opinfo
            print(f"[{done + 1}/{len(keys)} {time.time() - started:7.0f}s] {current}", flush=True)
            if time.time() - last_save > SAVE_EVERY_S:
                _save(data, json_path)
                last_save = time.time()
        if isinstance(item, oracle.OpInfoSkipped):
            data["opinfos_skipped"].append(asdict(item))
        else:
            data["samples"].append(_sample_json(item))
        record["duration_s"] = round(time.time() - started)
    _save(data, json_path)


def _replace(data: dict, pairs: set[tuple[str, str]], other: list[dict]) -> None:
    """Drops `data`'s results for these (OpInfo, dtype) pairs, then adds `other`'s results
    (samples and OpInfoSkipped records, told apart by their fields)."""
    for name in ("opinfos_skipped", "samples"):
        data[name] = [s for s in data[name] if (s["opinfo"], s["dtype"]) not in pairs]
    for item in other:
        data["samples" if "index" in item else "opinfos_skipped"].append(item)


def merge(data: dict, other: dict) -> None:
    """Puts another sweep's results into `data`, replacing the (OpInfo, dtype) pairs it holds;
    its meta becomes an update entry (and its own updates follow it)."""
    items = other["opinfos_skipped"] + other["samples"]
    _replace(data, {(s["opinfo"], s["dtype"]) for s in items}, items)
    meta = other["meta"]
    data["meta"]["dtypes"].update(meta["dtypes"])
    keys = list(dict.fromkeys(s["opinfo"] for s in items))
    data["meta"]["updates"] += [{"opinfos": keys, "dtypes": meta["dtypes"], "merged": True,
                                 "snapshot_sha1": meta["snapshot_sha1"], "date": meta["date"],
                                 "duration_s": meta["duration_s"]}] + meta["updates"]


def _meta(caps: dict[str, int], timeout: float, version: str) -> dict:
    import mindspore
    import torch
    return {"torch": torch.__version__, "mindspore": mindspore.__version__,
            "snapshot_sha1": version, "opinfos": len(oracle.opinfos()), "dtypes": caps,
            "dtypes_lacking": oracle.lacking_dtype_support(), "sample_timeout_s": timeout,
            "max_elements": oracle.MAX_ELEMENTS, "date": _now(), "duration_s": 0, "updates": []}


def _now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def _sample_json(result: oracle.SampleResult) -> dict:
    record = asdict(result)
    record["seconds"] = round(result.seconds, 3)
    return record


def _save(data: dict, path: Path) -> None:
    """The meta indented, then one line per record: compact, and a diff shows samples."""
    def rows(items: list[dict]) -> str:
        return ",\n".join(json.dumps(item, separators=(",", ":")) for item in items)

    path.parent.mkdir(parents=True, exist_ok=True)
    text = (f'{{"meta": {json.dumps(data["meta"], indent=1)},\n'
            f'"opinfos_skipped": [\n{rows(data["opinfos_skipped"])}\n],\n'
            f'"samples": [\n{rows(data["samples"])}\n]}}\n')
    temporary = path.with_suffix(".json.tmp")
    temporary.write_text(text)
    temporary.replace(path)  # a sweep killed while saving leaves the last whole file


def parse_caps(text: str | None, cap: int, dtype_cap: int) -> dict[str, int] | None:
    """--dtypes ('float32,int64' or 'all') as {name: cap}, float32 first, then in the order of
    ms_aten's dtype table; None if not given."""
    if text is None:
        return None
    names = ([oracle.dtype_name(d) for d in oracle.DTYPES] if text == "all"
             else [name.strip() for name in text.split(",") if name.strip()])
    try:
        for name in names:
            oracle.dtype_named(name)
    except ValueError as error:
        raise SystemExit(f"--dtypes: {error}") from None
    order = [oracle.dtype_name(d) for d in oracle.DTYPES]
    names = sorted(set(names), key=lambda name: (name != "float32", order.index(name)))
    return {name: cap if name == "float32" else dtype_cap for name in names}


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
                          ("it passes", "an argument of a dtype MindSpore lacks"),
                          ("it returns", "a result of a dtype MindSpore lacks"),
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
    text = re.sub(r"-?N([-+]Nj)?", "N", text)  # signs, and complex numbers as one number
    return text.strip()[:110]


def _percent(part: int, whole: int) -> str:
    return f"{100 * part / whole:.1f}%" if whole else "n/a"


def _counts(samples: list[dict], check: str) -> tuple[int, Counter]:
    """(samples the check applies to, their statuses counted)."""
    counts = Counter(s["checks"][check]["status"] for s in samples if check in s["checks"])
    return counts[oracle.PASS] + counts[oracle.MISMATCH] + counts[oracle.ERROR], counts


def _by_aten(samples: list[dict], check: str) -> tuple[int, int]:
    """(overloads with a checked sample, overloads whose every checked sample passes)."""
    statuses = defaultdict(set)
    for sample in samples:
        outcome = sample["checks"].get(check)
        if outcome and outcome["status"] != oracle.SKIPPED:
            statuses[sample["aten"]].add(outcome["status"])
    return len(statuses), sum(s == {oracle.PASS} for s in statuses.values())


def _by_dtype(samples: list[dict], order: dict[str, int]) -> dict[str, list[dict]]:
    """Samples by dtype, in the order of the meta's dtypes."""
    groups: dict[str, list[dict]] = {dtype: [] for dtype in order}
    for sample in samples:
        groups.setdefault(sample["dtype"], []).append(sample)
    return groups


def render(data: dict) -> str:
    samples = data["samples"]
    checked = [s for s in samples if s["scope"] is None]
    lines = _header(data) + _scope_section(data, samples, checked)
    lines += _results_section(checked, data["meta"]["dtypes"])
    for kind, checks in (("Forward", oracle.FORWARD_CHECKS), ("Gradient", oracle.GRAD_CHECKS)):
        lines += _failures_section(kind, checks, checked, data["meta"]["dtypes"])
    return "\n".join(lines) + "\n"


LISTED_KEYS = 40  # an update of more OpInfos names its first and last (the json has them all)


def _update_line(update: dict, opinfos: int) -> str:
    keys = update["opinfos"]
    listed = (f"all {opinfos} OpInfos" if len(keys) >= opinfos else
              f"{len(keys)} OpInfos: " + ", ".join(f"`{key}`" for key in keys)
              if len(keys) <= LISTED_KEYS else
              f"{len(keys)} OpInfos (`{keys[0]}` … `{keys[-1]}`, all named in the json)")
    verb = "Swept at the same time and merged" if update.get("merged") else "Re-swept"
    note = f" ({update['note']})" if update.get("note") else ""  # added by hand to the json
    return (f"{verb} on {update['date']} (copy sha1 `{update['snapshot_sha1']}`; "
            f"{update['duration_s'] / 60:.0f} min), in {', '.join(update['dtypes'])}: "
            f"{listed}{note}.")


def _tolerance_text(dtypes: dict[str, int]) -> str:
    """The default assert_close tolerances of the swept dtypes, dtypes sharing them together."""
    groups: dict[tuple[float, float], list[str]] = defaultdict(list)
    for name in dtypes:
        groups[oracle.tolerances(oracle.dtype_named(name))].append(name)
    return "; ".join(f"{'/'.join(names)}: " + ("exact" if (rtol, atol) == (0, 0) else
                                                f"rtol {rtol:g}, atol {atol:g}")
                     for (rtol, atol), names in groups.items())


def _header(data: dict) -> list[str]:
    meta = data["meta"]
    caps = "; ".join(f"{name}: {f'at most {cap}' if cap else 'all'}"
                     for name, cap in meta["dtypes"].items())
    lacking = ", ".join(f"{name} ({n})" for name, n in meta["dtypes_lacking"].items())
    grad_dtypes = " and ".join(map(oracle.dtype_name, oracle.GRAD_DTYPES))
    return [
        "# ATen coverage of ms_aten, measured with PyTorch's OpInfo database",
        "",
        f"Generated by `scripts/opinfo_report.py` on {meta['date']} (torch {meta['torch']}, "
        f"MindSpore {meta['mindspore']}, CPU; a copy of ms_aten and the oracle taken at the "
        f"start, sha1 `{meta['snapshot_sha1']}`; sweep time {meta['duration_s'] / 60:.0f} min). "
        "Machine-readable: `docs/opinfo.json`.",
        *(_update_line(update, meta["opinfos"]) for update in meta["updates"]),
        "",
        "## How it was measured",
        "",
        f"- Every OpInfo of `torch.testing._internal.common_methods_invocations.op_db` "
        f"({meta['opinfos']}) gives its CPU sample inputs in each dtype swept that it supports "
        f"on CPU: {', '.join(meta['dtypes'])}.",
        "- Each sample's call runs (autograd off) under a TorchDispatchMode that records the "
        "ATen OpOverloads it reaches. **In scope**: exactly one OpOverload call in total, which "
        "writes none of its inputs, returns only `Tensor`/`Tensor[]`, takes no sparse tensor, "
        "runs on compact copies of its inputs and neither takes nor returns a dtype MindSpore "
        "lacks (the exact criterion is the docstring of `ms_aten/testing/opinfo.py`).",
        "- The recorded call is split by its schema (Tensor-typed arguments are call-time "
        "inputs, the rest `ms_aten.op` constants), run through `ms_aten.op('ns::name.overload', "
        "...)` in PYNATIVE mode and in GRAPH mode (inside an `nn.Cell`) on MindSpore copies of "
        "the data, and compared with torch eager on the same overload and data: "
        "`torch.testing.assert_close` default tolerances per dtype "
        f"({_tolerance_text(meta['dtypes'])}), dtypes and shapes exact. Random ops are "
        "reseeded before each run; where torch itself is not reproducible (uninitialized "
        "memory) only shapes and dtypes are compared.",
        "- **Gradient**: for OpInfos supporting autograd whose torch reference has a derivative, "
        "`ms.grad` of sum_i sum(out_i * w_i) (floating outputs, fixed random cotangents w_i) "
        "with respect to the inputs the sample marks `requires_grad`, against "
        f"`torch.autograd.grad`, both modes; in {grad_dtypes} only (samples of the other "
        "dtypes are drawn without `requires_grad`).",
        f"- Per sample: tensors over {meta['max_elements']:.0e} elements are skipped; a worker "
        f"process runs the checks and is restarted after a crash or {meta['sample_timeout_s']:.0f}"
        " s without progress (the check in flight is a fail-error). In-scope samples checked "
        f"per OpInfo and dtype, evenly spread: {caps}.",
        "- Not swept: the dtypes MindSpore lacks, which ms_aten cannot hand to it (OpInfos "
        f"supporting them on CPU): {lacking or 'none'}.",
        "",
    ]


def _in_scope(sample: dict) -> bool:
    return sample["scope"] is None or sample["scope"].startswith("over the cap")


def _scope_section(data: dict, samples: list[dict], checked: list[dict]) -> list[str]:
    in_scope = [s for s in samples if _in_scope(s)]
    reasons = Counter(scope_category(s["scope"]) for s in samples if s["scope"] is not None)
    skipped = Counter(s["reason"].split(" (")[0] for s in data["opinfos_skipped"])
    lines = [
        "## Scope", "",
        f"- OpInfos: {data['meta']['opinfos']}; with at least one in-scope sample: "
        f"{len({s['opinfo'] for s in in_scope})}.",
        f"- Samples: {len(samples)}; in scope: {len(in_scope)}; checked: {len(checked)} "
        f"(distinct ATen overloads: {len({s['aten'] for s in checked})}).",
        "", "| dtype | cap | OpInfos with samples | samples | in scope | checked | overloads |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    caps = data["meta"]["dtypes"]
    for dtype, group in _by_dtype(samples, caps).items():
        checked_here = [s for s in group if s["scope"] is None]
        lines.append(
            f"| {dtype} | {caps[dtype] or 'all'} | {len({s['opinfo'] for s in group})} "
            f"| {len(group)} | {sum(map(_in_scope, group))} | {len(checked_here)} "
            f"| {len({s['aten'] for s in checked_here})} |")
    lines += ["", "| out of scope | samples |", "|---|---:|"]
    lines += [f"| {reason} | {n} |" for reason, n in reasons.most_common()]
    lines += [f"| whole OpInfo in a dtype: {reason} | {n} (OpInfo, dtype) pairs |"
              for reason, n in skipped.most_common()]
    return lines + [""]


def _sample_cell(samples: list[dict], check: str) -> str:
    applies, counts = _counts(samples, check)
    if not applies:
        return "–"
    return f"{counts[oracle.PASS]}/{applies} ({_percent(counts[oracle.PASS], applies)})"


def _overload_cell(samples: list[dict], check: str) -> str:
    n_aten, n_pass = _by_aten(samples, check)
    return f"{n_pass}/{n_aten} ({_percent(n_pass, n_aten)})" if n_aten else "–"


def _dtype_table(checked: list[dict], dtypes: dict[str, int],
                 cell: Callable[[list[dict], str], str]) -> list[str]:
    """One row per dtype, one column per check."""
    lines = ["| dtype | " + " | ".join(oracle.CHECKS) + " |",
             "|---|" + "---:|" * len(oracle.CHECKS)]
    for dtype, group in _by_dtype(checked, dtypes).items():
        lines.append(f"| {dtype} | " + " | ".join(cell(group, c) for c in oracle.CHECKS) + " |")
    return lines + [""]


def _results_section(checked: list[dict], dtypes: dict[str, int]) -> list[str]:
    lines = ["## Results", "",
             "All dtypes together: per sample (pass % of the samples the check applies to), and "
             "per ATen overload (an overload passes when all its checked samples, of every dtype, "
             "pass).", "",
             "| check | applies | pass | mismatch | error | pass % | overloads passing |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for check in oracle.CHECKS:
        applies, counts = _counts(checked, check)
        lines.append(f"| {check} | {applies} | {counts[oracle.PASS]} | {counts[oracle.MISMATCH]} "
                     f"| {counts[oracle.ERROR]} | {_percent(counts[oracle.PASS], applies)} "
                     f"| {_overload_cell(checked, check)} |")
    skipped = Counter(s["checks"][c]["reason"].split(" (")[0] for s in checked
                      for c in oracle.GRAD_CHECKS[:1]
                      if s["checks"].get(c, {}).get("status") == oracle.SKIPPED)
    lines += ["", "Gradient check not applicable: " + ("; ".join(
        f"{reason}: {n}" for reason, n in skipped.most_common()) or "none") + ".", ""]
    if len(dtypes) > 1:
        lines += ["Per dtype, samples passing / samples the check applies to:", ""]
        lines += _dtype_table(checked, dtypes, _sample_cell)
        lines += ["Per dtype, overloads passing every checked sample of the dtype / overloads "
                  "checked:", ""]
        lines += _dtype_table(checked, dtypes, _overload_cell)
    return lines


def _failures_section(kind: str, checks: tuple[str, ...], checked: list[dict],
                      dtypes: dict[str, int]) -> list[str]:
    """Failing overloads grouped by failure kind: failing samples per dtype and mode, then the
    overloads with their modes (and their dtypes, unless all they were checked in) and an
    example reason."""
    failing: dict[str, dict[str, list[dict]]] = defaultdict(lambda: defaultdict(list))
    examples: dict[str, str] = {}
    tried: dict[str, set[str]] = defaultdict(set)  # overload -> dtypes with a checked sample
    for sample in checked:
        for check in checks:
            outcome = sample["checks"].get(check)
            if outcome and outcome["status"] != oracle.SKIPPED:
                tried[sample["aten"]].add(sample["dtype"])
            if outcome and outcome["status"] in (oracle.MISMATCH, oracle.ERROR):
                category = f"{outcome['status']}: {failure_category(outcome['reason'])}"
                failing[category][sample["aten"]].append({**sample, "check": check})
                examples.setdefault(category, outcome["reason"])
    lines = [f"## {kind} failures, grouped", ""]
    if not failing:
        return lines + ["None.", ""]
    columns = [d for d in dtypes if any(f["dtype"] == d for ops in failing.values()
                                         for fs in ops.values() for f in fs)]
    lines += [f"{sum(map(len, failing.values()))} (overload, failure kind) pairs. Failing "
              "samples per dtype, PYNATIVE/GRAPH:", "",
              "| failure | overloads | " + " | ".join(columns) + " |",
              "|---|---:|" + "---:|" * len(columns)]
    ordered = sorted(failing.items(), key=lambda item: -len(item[1]))
    for index, (category, ops) in enumerate(ordered, 1):
        found = Counter((f["dtype"], f["check"]) for fs in ops.values() for f in fs)
        cells = [f"{found[d, checks[0]]}/{found[d, checks[1]]}"
                 if found[d, checks[0]] + found[d, checks[1]] else "" for d in columns]
        lines.append(f"| {index}. {category} | {len(ops)} | " + " | ".join(cells) + " |")
    lines += ["", "The overloads, with the modes they fail in and, where they do not fail in "
              "every dtype they were checked in, the dtypes:", ""]
    for index, (category, ops) in enumerate(ordered, 1):
        shown = ", ".join(f"`{op}` [{_where(fs, tried[op], dtypes)}]"
                          for op, fs in sorted(ops.items()))
        lines += [f"{index}. **{category}** ({len(ops)} overloads). Example: "
                  f"{examples[category]}", f"   - {shown}"]
    return lines + [""]


def _where(failures: list[dict], tried: set[str], dtypes: dict[str, int]) -> str:
    modes = "/".join(sorted({f["check"].split("/")[1] for f in failures}))
    failed = {f["dtype"] for f in failures}
    if failed == tried:
        return modes
    return f"{modes}: " + ", ".join(d for d in dtypes if d in failed)


def main() -> None:
    global oracle
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", help="OpInfo keys to sweep (default: all)")
    parser.add_argument("--update", nargs="+", metavar="KEY",
                        help="re-sweep these OpInfos into the existing json (after a fix), in "
                             "its dtypes or those of --dtypes")
    parser.add_argument("--merge", type=Path, metavar="JSON",
                        help="put another sweep's results into the existing json")
    parser.add_argument("--dtypes", metavar="NAMES",
                        help="comma-separated dtypes to sweep, or 'all' (every dtype MindSpore "
                             "has); default float32 (an update: the json's dtypes)")
    parser.add_argument("--cap", type=int, default=20,
                        help="in-scope float32 samples checked per OpInfo (0: all; default 20)")
    parser.add_argument("--dtype-cap", type=int, default=3,
                        help="in-scope samples checked per OpInfo in each other dtype "
                             "(0: all; default 3)")
    parser.add_argument("--timeout", type=float, default=120.0,
                        help="seconds without progress before a sample counts as hung")
    parser.add_argument("--render", action="store_true", help="only re-render the markdown")
    parser.add_argument("--out", type=Path, default=DOCS / "opinfo",
                        help="output path without suffix (.json and .md are written)")
    args = parser.parse_args()
    json_path, md_path = args.out.with_suffix(".json"), args.out.with_suffix(".md")
    os.environ.setdefault("GLOG_v", "3")  # MindSpore logs errors only, here and in workers
    sweeping = not (args.render or args.merge)
    with tempfile.TemporaryDirectory(prefix="opinfo_snapshot_") as copy:
        version = snapshot(Path(copy)) if sweeping else ""
        oracle = importlib.import_module("ms_aten.testing.opinfo")  # after the copy
        caps = parse_caps(args.dtypes, args.cap, args.dtype_cap)
        if not sweeping or args.update:
            data = json.loads(json_path.read_text())
        if args.merge:
            merge(data, json.loads(args.merge.read_text()))
            _save(data, json_path)
        elif args.update:
            smoke_test()
            known = data["meta"]["dtypes"]
            caps = {name: known.get(name, cap) for name, cap in (caps or known).items()}
            known.update(caps)
            update = {"opinfos": args.update, "dtypes": caps, "snapshot_sha1": version,
                      "date": _now(), "duration_s": 0}
            data["meta"]["updates"].append(update)
            run_sweep(args.update, caps, args.timeout, json_path, data, update)
        elif sweeping:
            smoke_test()
            caps = caps or {"float32": args.cap}
            data = {"meta": _meta(caps, args.timeout, version), "opinfos_skipped": [],
                    "samples": []}
            keys = args.only or list(oracle.opinfos())
            run_sweep(keys, caps, args.timeout, json_path, data, data["meta"])
    md_path.write_text(render(data))
    print(f"wrote {md_path} and {json_path}")


if __name__ == "__main__":
    main()
