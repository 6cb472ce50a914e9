"""The compile cache's entries on disk (compiled.py): each written whole and sealed, checked
before anything in it is loaded, and the vector ISA its keys name remembered beside them.

An entry is a folder `<key>/` holding the compiled libraries and `model.txt`, the model's spec
(compiled.py) followed by a `file <path> <bytes> <sha256>` line for every other file in the
folder and a last line `sha256 <digest of the lines before it>`. A library that a partial copy
truncated, or whose code a disk error changed, would crash the process that loads it (SIGBUS,
SIGSEGV), and no exception can report that: `read` refuses such an entry before it is loaded.

An entry is built in a staging folder `<key>.<pid>.tmp` and renamed into place; a damaged
entry is renamed to `<key>.<pid>.damaged` before it is removed, so that no other process loads
it meanwhile. A process that died (a Ctrl-C, a kill) leaves its folder behind: `clean` removes
the ones whose process is gone.
"""
from __future__ import annotations

import hashlib
import os
import platform
import re
import shutil
from pathlib import Path

SPEC = "model.txt"
# A folder of a process at work on an entry: staging (tmp) or removing a damaged one.
_WORKING = re.compile(r"[0-9a-f]{32}\.(\d+)\.(tmp|damaged)")
_CHUNK = 1 << 20


class Damaged(Exception):
    """Why a cache entry cannot be loaded."""


def seal(folder: Path, spec_lines: list[str]) -> None:
    """Writes folder's model.txt: the spec, each other file's size and digest, and the digest
    of all that."""
    lines = list(spec_lines)
    for path in sorted(p for p in folder.rglob("*") if p.is_file() and p.name != SPEC):
        relative = path.relative_to(folder).as_posix()
        if " " in relative:
            raise ValueError(f"a compiled file's name has a space: {relative!r}")
        lines.append(f"file {relative} {path.stat().st_size} {_digest(path)}")
    text = "\n".join(lines)
    (folder / SPEC).write_text(f"{text}\nsha256 {hashlib.sha256(text.encode()).hexdigest()}")


def read(folder: Path) -> str:
    """The spec of the entry in `folder`, once the spec itself and every file it lists have
    been found whole (the sizes first: a truncated file is not read through); Damaged, naming
    what is wrong, otherwise."""
    try:
        text = (folder / SPEC).read_text()
    except FileNotFoundError:
        raise Damaged(f"{SPEC} is missing") from None
    except (OSError, UnicodeDecodeError) as error:
        raise Damaged(f"{SPEC} cannot be read ({error})") from None
    body, _, last = text.rpartition("\n")
    if not last.startswith("sha256 ") or \
            hashlib.sha256(body.encode()).hexdigest() != last.removeprefix("sha256 "):
        raise Damaged(f"{SPEC} does not match its checksum")
    spec: list[str] = []
    files: list[str] = []
    for line in body.splitlines():
        (files if line.startswith("file ") else spec).append(line)
    listed = [line.split(" ")[1:] for line in files]
    for relative, size, _ in listed:
        path = folder / relative
        actual = path.stat().st_size if path.is_file() else None
        if actual != int(size):
            raise Damaged(f"{relative} is missing" if actual is None else
                          f"{relative} has {actual} bytes, where {size} were written")
    for relative, _, digest in listed:
        if _digest(folder / relative) != digest:
            raise Damaged(f"{relative} does not match its checksum")
    return "\n".join(spec)


def discard(folder: Path) -> None:
    """Removes a damaged entry: renamed first, so that no other process loads it meanwhile
    (and one that renamed it first removes it)."""
    aside = folder.with_name(f"{folder.name}.{os.getpid()}.damaged")
    try:
        folder.rename(aside)
    except OSError:
        return
    shutil.rmtree(aside, ignore_errors=True)


def clean(root: Path) -> None:
    """Removes the folders that processes no longer running left in the cache (a compile
    interrupted, a process killed)."""
    try:
        names = [entry.name for entry in os.scandir(root) if entry.is_dir()]
    except OSError:
        return
    for name in names:
        match = _WORKING.fullmatch(name)
        if match and not _running(int(match.group(1))):
            shutil.rmtree(root / name, ignore_errors=True)


def remembered_isa(root: Path) -> str | None:
    """The vector ISA that compiled code is generated for on this CPU (Inductor's pick_vec_isa),
    as remember_isa kept it, or None. Inductor finds it by building a probe with the C++
    compiler, which a process that only loads cached entries may not have."""
    try:
        return _isa_file(root).read_text()
    except OSError:
        return None


def remember_isa(root: Path, isa: str) -> None:
    """Keeps pick_vec_isa's answer for remembered_isa, per torch version and CPU feature flags
    (best effort: a cache folder that cannot be written is no error here)."""
    path = _isa_file(root)
    staged = path.with_name(f"{path.name}.{os.getpid()}")
    try:
        root.mkdir(parents=True, exist_ok=True)
        staged.write_text(isa)
        staged.replace(path)
    except OSError:
        staged.unlink(missing_ok=True)


def _isa_file(root: Path) -> Path:
    import torch
    from torch._inductor import cpu_vec_isa

    text = " ".join([torch.__version__, platform.machine(), *cpu_vec_isa.x86_isa_checker()])
    return root / f"vec_isa.{hashlib.sha256(text.encode()).hexdigest()[:16]}.txt"


def _digest(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's
        return True
    return True
