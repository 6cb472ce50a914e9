"""The captured-program cache on disk: what ms_aten derives from a capture (a module's, a
function's), stored without the weights, so that a later process with the same model skips
torch.export, the decompositions and ms_aten's own passes (docs/capture_cache.md).

An entry is a folder `<root>/<model>/<key>/` (`<model>`: a digest of the module's and the Cell's
classes; `<key>`: the digest of the key's parts, key.py) holding `program.json` (the program
spec, its signature, the outputs' structure, the custom Functions it applies), `parts.json` (the
parts of its key, so that a miss can say which part differs) and compile/cache.py's seal: each
file's size and checksum, checked before the entry is used. It is written whole in a staging
folder `<key>.<pid>.tmp` and renamed into place; one process at a time captures a key, under a
file lock (filelock) that the others wait on, then read what it stored. A folder that cannot be
written (read only, a full disk) is no error: the capture goes on without storing.
"""
from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import shutil
import sys
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from filelock import FileLock, Timeout
from torch.utils import _pytree as pytree

from ..base import Compiled, Signature
from ..capture import autograd_functions, nodes
from ..capture.structure import Node
from ..compile import cache
from ..compile.compiled import register_cached
from ..lowering.program import Program
from .key import Describer, Parts, Uncacheable, digest, resolve

# The folder of the cache, or one of OFF to store nothing.
CACHE_ENV = "MS_ATEN_PROGRAM_CACHE"
OFF = frozenset({"0", "off", "false", "no"})
# A comma-separated list of what ms_aten logs to stderr; "cache": each hit, miss and why.
LOG_ENV = "MS_ATEN_LOG"
LOG = logging.getLogger("ms_aten.cache")
# Bumped when what an entry holds changes.
FORMAT = "1"
PROGRAM = "program.json"
PARTS = "parts.json"
# How long a process waits for another that captures the same model (then captures too).
LOCK_WAIT_S = 1800.0
# The Function node's key in a program spec (lowering/program.py's `n` lines).
_FUNCTION_KEY = re.compile(r"( call ms_aten_autograd::function \S+ \d+ i)(\d+)(?= )")


class CaptureCacheWarning(UserWarning):
    """A stored capture was damaged (a partial copy, a changed file): it was removed and the
    model captured again."""


@dataclass
class Stored:
    """What a capture gives a Cell, as stored: its program, the outputs' structure, the
    strictness that captured it and the counts a subclass's passes made (CausalLM's
    grouped_attentions)."""

    program: Program
    nodes: tuple[Node, ...]
    strict: bool
    counts: dict[str, int] = field(default_factory=dict)


def directory() -> Path | None:
    """The cache's folder: $MS_ATEN_PROGRAM_CACHE, else ~/.cache/ms_aten/programs (beside the
    compile cache's ~/.cache/ms_aten/compiled); None when that variable turns it off."""
    value = os.environ.get(CACHE_ENV, "")
    if value.strip().lower() in OFF:
        return None
    return Path(value) if value else Path.home() / ".cache" / "ms_aten" / "programs"


def captured(name: str, parts: Callable[[], Parts], capture: Callable[[], Stored]
             ) -> tuple[Stored, str]:
    """The stored capture whose key `parts` gives, or `capture()`'s, stored for the next
    process; and what the cache did: "hit", "stored", "off", or why it did not store."""
    _log_to_stderr()
    root = directory()
    if root is None:
        return capture(), "off"
    try:
        described = parts()
    except Exception as why:  # noqa: BLE001  (Uncacheable, or a value no description expects)
        text = str(why) if isinstance(why, Uncacheable) else \
            f"its key cannot be made ({type(why).__name__}: {why})"
        LOG.info("ms_aten: %s: not cached: %s", name, text)
        return capture(), f"not cached: {text}"
    key = digest(described)
    folder = root / digest([described["model"]]) / key
    with _locked(folder) as writable:
        found = _load(folder, name, described)
        if found is not None:
            LOG.info("ms_aten: %s: capture cache hit (%s)", name, folder)
            return found, "hit"
        _explain_miss(folder, name, described)
        result, warned = _warning(capture)
        if warned:  # so that every process gives the warning
            LOG.info("ms_aten: %s: not stored: the capture warned", name)
            return result, "not stored: the capture warned"
        if not writable:
            LOG.info("ms_aten: %s: not stored: %s cannot be written", name, folder.parent)
            return result, "not stored: the folder cannot be written"
        return result, _save(folder, name, described, result)


def _warning(capture: Callable[[], Stored]) -> tuple[Stored, bool]:
    """capture(), and whether it gave one of ms_aten's warnings (a CompileWarning, a pattern
    that matched nothing): those are given again, from where they were given."""
    given: list[warnings.WarningMessage] = []
    try:
        with warnings.catch_warnings(record=True) as given:
            result = capture()
    finally:
        for w in given:
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno,
                                   source=w.source)
    return result, any(str(w.message).startswith("ms_aten:") for w in given)


@contextlib.contextmanager
def _locked(folder: Path) -> Iterator[bool]:
    """Holds the key's lock (waits for a process capturing it); whether the folder can be
    written."""
    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
        lock = FileLock(f"{folder}.lock", timeout=LOCK_WAIT_S)
        lock.acquire()
    except (OSError, Timeout) as error:
        LOG.info("ms_aten: the capture cache's lock %s.lock is not held (%s)", folder, error)
        yield False
        return
    try:
        yield os.access(folder.parent, os.W_OK)
    finally:
        lock.release()


def _load(folder: Path, name: str, described: Parts) -> Stored | None:
    if not folder.exists():
        return None
    try:
        cache.read(folder)
        entry = json.loads((folder / PROGRAM).read_text())
        if entry.get("format") != FORMAT:
            raise cache.Damaged(f"its format is {entry.get('format')!r}, not {FORMAT}")
        stored = _decode(entry)
    except (cache.Damaged, KeyError, TypeError, ValueError) as damage:
        warnings.warn(f"ms_aten: {name}: the capture cache's entry {folder} is damaged "
                      f"({damage}); it is captured again", CaptureCacheWarning, stacklevel=5)
        cache.discard(folder)
        return None
    try:
        stored = _functions_from(entry, stored)
    except Uncacheable as why:
        LOG.info("ms_aten: %s: capture cache miss: %s", name, why)
        return None
    compiled = stored.program.compiled
    if compiled is not None:
        start = time.perf_counter()
        if not register_cached(compiled, name):
            LOG.info("ms_aten: %s: capture cache miss: its compiled library %s is gone", name,
                     compiled.path)
            return None
        stored.program = _replace(stored.program, compiled=Compiled(
            compiled.key, compiled.path, compiled.training, True, time.perf_counter() - start))
    return stored


def _save(folder: Path, name: str, described: Parts, stored: Stored) -> str:
    try:
        entry = _encode(stored)
    except Uncacheable as why:
        LOG.info("ms_aten: %s: not stored: %s", name, why)
        return f"not stored: {why}"
    staging = folder.with_name(f"{folder.name}.{os.getpid()}.tmp")
    try:
        # Under the lock: another process's staging folder for this key is one it left.
        for left in folder.parent.glob(f"{folder.name}.*.tmp"):
            shutil.rmtree(left, ignore_errors=True)
        staging.mkdir()
        (staging / PROGRAM).write_text(json.dumps(entry))
        (staging / PARTS).write_text(json.dumps(described, indent=0, sort_keys=True))
        cache.seal(staging, [f"ms_aten program cache {FORMAT}"])
        if folder.exists():  # one whose Functions' code changed (_functions_from)
            cache.discard(folder)
        staging.rename(folder)
    except OSError as error:
        shutil.rmtree(staging, ignore_errors=True)
        LOG.info("ms_aten: %s: not stored in %s: %s", name, folder, error)
        return f"not stored: {error}"
    LOG.info("ms_aten: %s: capture stored in %s", name, folder)
    return "stored"


def _explain_miss(folder: Path, name: str, described: Parts) -> None:
    """Logs which parts of the key differ from those of the model's nearest stored entry."""
    if not LOG.isEnabledFor(logging.INFO):
        return
    nearest: list[str] | None = None
    try:
        others = [p / PARTS for p in folder.parent.iterdir() if p.is_dir() and p != folder]
    except OSError:
        others = []
    for path in others:
        try:
            theirs = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        differ = _differences(described, theirs)
        if nearest is None or len(differ) < len(nearest):
            nearest = differ
    if nearest is None:
        LOG.info("ms_aten: %s: capture cache miss: no entry for this model", name)
    else:
        LOG.info("ms_aten: %s: capture cache miss: differs from a stored entry in %s", name,
                 "; ".join(nearest[:8]) + (f"; and {len(nearest) - 8} more"
                                            if len(nearest) > 8 else ""))


def _differences(mine: Parts, theirs: Parts) -> list[str]:
    found = []
    for part in sorted(set(mine) | set(theirs)):
        a, b = mine.get(part, {}), theirs.get(part, {})
        names = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
        if names:
            found.append(f"{part} ({', '.join(names[:4])}{', ...' if len(names) > 4 else ''})")
    return found


def _encode(stored: Stored) -> dict[str, Any]:
    program = stored.program
    # A region's key names Python of this process (capture/nodes.py), freed with its Cell.
    if "ms_aten_opaque::" in program.spec:
        raise Uncacheable("it runs opaque torch calls, whose Python a stored capture does not "
                          "keep")
    compiled = program.compiled
    return {
        "format": FORMAT,
        "program": {
            "name": program.name, "spec": program.spec, "vjp_spec": program.vjp_spec,
            "n_weights": program.n_weights,
            "shapes": program.signature.shapes, "dtypes": _dtypes(program.signature.dtypes),
            "input_names": program.input_names, "output_shapes": program.output_shapes,
            "output_dtypes": _dtypes(program.output_dtypes), "mutations": program.mutations,
            "written": program.written, "reinplaced": program.reinplaced,
            "random": program.random, "n_nodes": program.n_nodes, "replaced": program.replaced,
            "compiled": None if compiled is None else
            [compiled.key, str(compiled.path), compiled.training]},
        "nodes": stored.nodes, "strict": stored.strict, "counts": stored.counts,
        "functions": _functions_of(program)}


def _decode(entry: dict[str, Any]) -> Stored:
    p = entry["program"]
    compiled = p["compiled"]
    program = Program(
        name=p["name"], spec=p["spec"], vjp_spec=p["vjp_spec"], n_weights=int(p["n_weights"]),
        signature=Signature(_shapes(p["shapes"]), _torch_dtypes(p["dtypes"])),
        input_names=tuple(p["input_names"]), output_shapes=_shapes(p["output_shapes"]),
        output_dtypes=_torch_dtypes(p["output_dtypes"]), mutations=tuple(p["mutations"]),
        written=tuple(p["written"]), reinplaced=tuple(p["reinplaced"]),
        random=bool(p["random"]), n_nodes=int(p["n_nodes"]), replaced=int(p["replaced"]),
        compiled=None if compiled is None else
        Compiled(compiled[0], Path(compiled[1]), bool(compiled[2]), True, 0.0))
    # MindSpore's graphs read the output structure as constant tuples (structure.build).
    nodes = tuple((str(kind), tuple(keys), tuple(children))
                  for kind, keys, children in entry["nodes"])
    return Stored(program, nodes, bool(entry["strict"]),
                  {k: int(v) for k, v in entry["counts"].items()})


def _shapes(shapes: list[list[int | None]]) -> tuple[tuple[int | None, ...], ...]:
    return tuple(tuple(None if n is None else int(n) for n in s) for s in shapes)


def _dtypes(values: tuple[torch.dtype, ...]) -> list[str]:
    return [str(d).removeprefix("torch.") for d in values]


def _torch_dtypes(names: list[str]) -> tuple[torch.dtype, ...]:
    found = tuple(getattr(torch, n, None) for n in names)
    if not all(isinstance(d, torch.dtype) for d in found):
        raise ValueError(f"unknown dtypes among {names}")
    return found  # type: ignore[return-value]


def _replace(program: Program, **changes: Any) -> Program:
    from dataclasses import replace
    return replace(program, **changes)


def _functions_of(program: Program) -> dict[str, Any]:
    """The custom Functions the program's nodes apply, by their keys in this process: each
    class by name, with its code's description, its arguments' structure and constants, the
    autocast it runs under and whether it draws random numbers."""
    keys = sorted({int(m.group(2)) for m in _FUNCTION_KEY.finditer(
        f"{program.spec}\n{program.vjp_spec}")})
    functions = {}
    for key in keys:
        found = autograd_functions.stored(key)
        if found is None:
            raise Uncacheable(f"a torch.autograd.Function of the program (node {key}) ran on "
                              f"zeros for its output shapes, which a stored capture does not keep")
        applied, random = found
        cls = applied.cls
        if resolve(cls.__module__, cls.__qualname__) is not cls:
            raise Uncacheable(f"torch.autograd.Function {cls.__qualname__} is not the class "
                              f"its name finds in {cls.__module__}")
        if not all(c is None or type(c) in (bool, int, float, str) for c in applied.constants):
            raise Uncacheable(f"torch.autograd.Function {cls.__qualname__} is applied to "
                              f"arguments other than tensors, numbers and strings")
        functions[str(key)] = {
            "module": cls.__module__, "qualname": cls.__qualname__,
            "code": Describer().cls(cls), "spec": pytree.treespec_dumps(applied.spec),
            "constants": list(applied.constants), "tensor_leaves": list(applied.tensor_leaves),
            "autocast": [[device, str(dtype).removeprefix("torch.")]
                         for device, dtype in applied.autocast],
            "random": random}
    return functions


def _functions_from(entry: dict[str, Any], stored: Stored) -> Stored:
    """The stored program with its Function nodes keyed in this process (and owned by it, as a
    capture's program owns its nodes): each Function found by name, its code as it was stored
    (Uncacheable naming it otherwise)."""
    functions = entry["functions"]
    if not functions:
        return stored
    keys: dict[str, int] = {}
    for old, f in functions.items():
        cls = resolve(f["module"], f["qualname"])
        if Describer().cls(cls) != f["code"]:
            raise Uncacheable(f"the code of torch.autograd.Function {f['qualname']} changed")
        applied = autograd_functions.Applied(
            cls, pytree.treespec_loads(f["spec"]), tuple(f["constants"]),
            tuple(f["tensor_leaves"]),
            tuple((device, getattr(torch, dtype)) for device, dtype in f["autocast"]))
        keys[old] = autograd_functions.apply_as_node(applied, f["random"])

    def rekey(text: str) -> str:
        return _FUNCTION_KEY.sub(lambda m: m.group(1) + str(keys[m.group(2)]), text)

    program = stored.program
    stored.program = _replace(program, spec=rekey(program.spec),
                              vjp_spec=rekey(program.vjp_spec))
    nodes.own_keys(stored.program, list(keys.values()))
    return stored


_logging_set = False


def _log_to_stderr() -> None:
    """MS_ATEN_LOG=cache: the cache's messages on stderr (logging's "ms_aten.cache" logger
    gives them to any handler the application sets up)."""
    global _logging_set
    if _logging_set:
        return
    _logging_set = True
    wanted = {w.strip() for w in os.environ.get(LOG_ENV, "").split(",")}
    if "cache" in wanted:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(message)s"))
        LOG.addHandler(handler)
        LOG.setLevel(logging.INFO)
