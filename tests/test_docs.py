"""The documentation's programs run. A ```python block in README.md or docs/*.md right after the
line `<!-- test: run -->` is a complete program (docs/development.md, "Code blocks that are
programs"); each runs in a fresh process from the repository root, and one that sets a MindSpore
mode runs once in each mode. Unmarked blocks are fragments and are not run."""
from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
MARKER = "<!-- test: run -->"
# The pages whose topic is code a reader types in: each must hold at least one program.
MUST_HOLD_PROGRAMS = ("README.md", "docs/index.md", "docs/ops.md", "docs/porting.md",
                      "docs/dynamic_shapes.md", "docs/decoding.md", "docs/compile.md",
                      "docs/common_tasks.md")
MODE = re.compile(r"ms\.set_context\(mode=ms\.(GRAPH|PYNATIVE)_MODE\)")
TIME_LIMIT_S = 300  # the programs take seconds (tiny models); this only stops a hang


@dataclass(frozen=True)
class Program:
    page: str  # relative to the repository root
    line: int  # of the block's first line of code
    code: str


def parse(text: str, page: str) -> tuple[list[Program], list[int]]:
    """The marked programs of a page, and the lines of markers not followed by a Python block."""
    lines = text.splitlines()
    found, stray = [], []
    for i, line in enumerate(lines):
        if line.strip() != MARKER:
            continue
        if i + 1 >= len(lines) or lines[i + 1].strip() != "```python":
            stray.append(i + 1)
            continue
        end = next((j for j in range(i + 2, len(lines)) if lines[j].strip() == "```"), None)
        if end is None:
            stray.append(i + 1)
            continue
        found.append(Program(page, i + 3, "\n".join(lines[i + 2:end]) + "\n"))
    return found, stray


def page_programs(path: Path) -> tuple[list[Program], list[int]]:
    return parse(path.read_text(), path.relative_to(ROOT).as_posix())


def runs() -> list:
    """(program, mode) per run: both modes for a program that sets one, else its own. A program
    that a page repeats word for word (docs/index.md, the README's) runs once."""
    cases, seen = [], set()
    for path in PAGES:
        for program in page_programs(path)[0]:
            if program.code in seen:
                continue
            seen.add(program.code)
            modes = ("GRAPH", "PYNATIVE") if MODE.search(program.code) else (None,)
            where = f"{program.page}:{program.line}"
            cases += [pytest.param(program, mode, id=where + (f"-{mode}" if mode else ""))
                      for mode in modes]
    return cases


@pytest.mark.parametrize(("program", "mode"), runs())
def test_documented_program_runs(program: Program, mode: str | None, tmp_path: Path) -> None:
    code = program.code if mode is None else MODE.sub(f"ms.set_context(mode=ms.{mode}_MODE)",
                                                      program.code)
    # A file, not `python -c`: GRAPH mode compiles from the source it reads back. The repository
    # root first on the path, so the ms_aten imported is this checkout's.
    script = tmp_path / f"{Path(program.page).stem}_line{program.line}.py"
    script.write_text(code)
    path = os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])
    # compile=True's libraries go to the test's folder, not the user's cache.
    env = dict(os.environ, PYTHONPATH=path, MS_ATEN_CACHE_DIR=str(tmp_path / "compiled"))
    done = subprocess.run([sys.executable, str(script)], cwd=ROOT, capture_output=True, text=True,
                          timeout=TIME_LIMIT_S, env=env)
    assert done.returncode == 0, (f"{program.page}, the program at line {program.line} failed "
                                  f"(its line 1 is the page's line {program.line}):\n"
                                  f"{done.stdout[-2000:]}\n{done.stderr[-4000:]}")


@pytest.mark.parametrize("page", MUST_HOLD_PROGRAMS)
def test_page_holds_programs(page: str) -> None:
    programs, _ = page_programs(ROOT / page)
    assert programs, f"{page} holds no block marked {MARKER!r}: its examples are not tested"


@pytest.mark.parametrize("path", PAGES, ids=lambda path: path.relative_to(ROOT).as_posix())
def test_every_marker_opens_a_python_block(path: Path) -> None:
    _, stray = page_programs(path)
    assert not stray, f"{path.name}: {MARKER!r} on lines {stray} is not followed by a closed " \
                      "```python block, so nothing there is tested"


def test_only_marked_python_blocks_are_programs() -> None:
    text = "\n".join([
        "```python", "fragment()", "```",
        MARKER, "```python", "import a", "a.run()", "```",
        MARKER, "```bash", "echo no", "```",
        MARKER, "```python", "never_closed()",
    ])
    programs, stray = parse(text, "page.md")
    assert programs == [Program("page.md", 6, "import a\na.run()\n")]
    assert stray == [9, 13]


def _public_names(init: Path) -> set[str]:
    """The __all__ of a package's __init__.py, read from the source as mkdocstrings reads it."""
    tree = ast.parse(init.read_text())
    return set(next(ast.literal_eval(node.value) for node in tree.body
                    if isinstance(node, ast.Assign)
                    and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets)))


def test_api_reference_lists_every_public_name() -> None:
    """docs/api.md renders each name of ms_aten.__all__ and of its packages optim's and nn's,
    and nothing else: a name added to the package's face, or moved behind it, shows in the
    reference."""
    rendered = re.findall(r"^::: ms_aten\.([\w.]+)$", (ROOT / "docs" / "api.md").read_text(),
                          re.MULTILINE)
    packages = {"optim", "nn"}  # rendered name by name
    # __version__ is a string.
    assert {name for name in rendered if "." not in name} == \
        _public_names(ROOT / "ms_aten" / "__init__.py") - {"__version__", *packages}
    for package in packages:
        assert {name.removeprefix(f"{package}.") for name in rendered
                if name.startswith(f"{package}.")} == \
            _public_names(ROOT / "ms_aten" / package / "__init__.py")


def test_readme_is_a_front_page() -> None:
    """README.md stays a front page (issue 54): what it is, the capabilities, the two commands, a
    quick start per capability and a line per result; the reference lives in docs/."""
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= 200, f"README.md has {len(lines)} lines; move the detail into docs/"
