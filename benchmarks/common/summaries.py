"""Results as summaries: every family writes one JSON file per benchmark cell,
benchmarks/results/<family>/<cell>.json (a cell: a model, a workload, a batch..., named for its
configuration), overwritten when the cell is run again (git keeps the history), and its report,
<family>/README.md, rewritten from every cell in that folder, each cell's section with its own
date, machine and load. A summary holds the figures the reports show: the run's record and
settings, the medians, the per-process figures, ratios and launch counts; checked outputs
(decoded tokens, a training's losses) as their sha256, not the values. Imports neither torch nor
MindSpore."""
from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable
from pathlib import Path

REPORT = "README.md"  # a family's report, beside its cells
SHA256_OF = "json.dumps(values, separators=(',', ':')) in UTF-8"  # what a summary's sha256 hashes


def sha256(values: object) -> str:
    """The hash a summary keeps of checked values (a list of tokens, rows of them, losses):
    sha256 of their compact JSON (SHA256_OF)."""
    return hashlib.sha256(json.dumps(values, separators=(",", ":")).encode()).hexdigest()


def checked(values: list) -> dict:
    """What a summary keeps of the values a run checked against (a list, or rows of lists): their
    hash, how it is computed, their length and how many distinct values they hold (per row),
    which is what the check could tell apart."""
    summary: dict = {"sha256": sha256(values), "sha256_of": SHA256_OF}
    if values and isinstance(values[0], list):
        return {**summary, "rows": len(values), "length": len(values[0]),
                "distinct_per_row": [len(set(row)) for row in values]}
    return {**summary, "length": len(values), "distinct": len(set(values))}


def dumps(value: object, indent: int = 0) -> str:
    """JSON for a summary: a dict or list that holds no dict on one line, any other one entry
    per line."""
    if not isinstance(value, (dict, list)) or not value or not _holds_dict(value):
        return json.dumps(value, ensure_ascii=False)
    pad = " " * (indent + 1)
    if isinstance(value, dict):
        items = [f"{pad}{json.dumps(k, ensure_ascii=False)}: {dumps(v, indent + 1)}"
                 for k, v in value.items()]
        return "{\n" + ",\n".join(items) + "\n" + " " * indent + "}"
    return "[\n" + ",\n".join(pad + dumps(v, indent + 1) for v in value) + "\n" + " " * indent + "]"


def _holds_dict(value: dict | list) -> bool:
    items = value.values() if isinstance(value, dict) else value
    return any(isinstance(v, dict) or (isinstance(v, list) and _holds_dict(v)) for v in items)


def write_cell(family_folder: Path, name: str, summary: dict) -> Path:
    """The cell's summary as <name>.json, replacing an earlier run's."""
    family_folder.mkdir(parents=True, exist_ok=True)
    path = family_folder / f"{name}.json"
    path.write_text(dumps(summary) + "\n")
    return path


def natural_key(name: str) -> list:
    """Sorts cell names with their numbers by value: b1, b4, b16."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name)]


def read_cells(family_folder: Path) -> dict[str, dict]:
    """Every cell summary in the folder, by name, in natural order."""
    paths = sorted(family_folder.glob("*.json"), key=lambda p: natural_key(p.stem))
    return {path.stem: json.loads(path.read_text()) for path in paths}


def machine_lines(meta: dict) -> str:
    """A cell's record of its run: when, where, the machine's load, the note."""
    date = meta.get("date") or "date not recorded"
    wall = f"; {meta['wall_s']:.0f} s" if meta.get("wall_s") is not None else ""
    lines = f"- {date}; {meta.get('host') or 'host not recorded'}{wall}\n"
    if meta.get("loadavg_start") is not None:
        lines += (f"- load average (1/5/15 min) at start {tuple(meta['loadavg_start'])}, at end "
                  f"{tuple(meta['loadavg_end'])}\n")
    return lines + (f"- note: {meta['note']}\n" if meta.get("note") else "")


def method(doc: str) -> str:
    """A driver's docstring from "Method:" to "Writes": its method, for the report."""
    return "Method:\n" + doc.split("Method:\n", 1)[1].split("\nWrites", 1)[0]


def write_report(family_folder: Path, title: str, intro: str,
                 section: Callable[[str, dict], str], outro: str = "") -> Path:
    """The family's report, README.md in its folder, rewritten from every cell summary there:
    `title`, `intro` (the method), then one section per cell, `section(name, summary)` under
    the cell's name, and `outro`."""
    cells = read_cells(family_folder)
    if not cells:  # --report-only on a folder no run wrote
        raise SystemExit(f"no cell summaries (<cell>.json) in {family_folder}")
    parts = [f"# {title}\n", f"One section per cell, each from its summary beside this page, "
             f"`<cell>.json` (the figures below; checked outputs such as decoded tokens as their "
             f"sha256, of {SHA256_OF}); a rerun of a cell rewrites its summary and this page.\n",
             intro.rstrip() + "\n"]
    parts += [f"## {name}\n\n{section(name, summary).strip()}\n" for name, summary in cells.items()]
    if outro:
        parts.append(outro.rstrip() + "\n")
    path = family_folder / REPORT
    path.write_text("\n".join(parts))
    return path
