"""The capture cache on disk (ms_aten/programs/stored/): a second process skips torch.export and
gives torch's results; each part of the key changed alone misses; a damaged entry is captured
again with a warning; two processes at once; a folder that cannot be written.

Each "process" is tests/capture_cache_child.py in a fresh Python, on a temporary cache folder
($MS_ATEN_PROGRAM_CACHE), batching several scenarios per process (MindSpore and torch take
seconds to import). The child checks each Cell against torch and reports what the cache did.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

CHILD = Path(__file__).with_name("capture_cache_child.py")
# A module, a custom Function and a function (ms_aten.function's) whose code the tests change
# between processes; the module's forward and the function reach their changing constants
# through a global helper too.
CHANGING = '''
import torch


def shift(x):
    return x + HELPER


def scaled(x):
    return torch.tanh(x) * FUNCTION


def function(x, y):
    return scaled(x) + y


class Scaled(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * 1.0

    @staticmethod
    def backward(ctx, grad):
        return grad * BACKWARD


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 3)

    def forward(self, x):
        return shift(Scaled.apply(self.fc(x)) * FORWARD)
'''
STORED = ["mlp", "mlp-eval", "dynamic", "pair", "compiled", "changing", "decode", "function"]
# Each changes one part of the key of a stored scenario.
CHANGED = ["mlp-width", "mlp-scale", "mlp-double", "mlp-shape", "dynamic-range",
           "pair-structure", "decode-config", "function-closure"]


def _write_changing(folder: Path, forward: str = "1.0", backward: str = "-1.0",
                    helper: str = "0.0", function: str = "1.0") -> None:
    (folder / "changing.py").write_text(
        CHANGING.replace("FORWARD", forward).replace("BACKWARD", backward)
        .replace("HELPER", helper).replace("FUNCTION", function))


def _run(folder: Path, scenarios: list[str], mode: str = "graph", wait: bool = True):
    env = {**os.environ, "MS_ATEN_PROGRAM_CACHE": str(folder / "programs"),
           "MS_ATEN_CACHE_DIR": str(folder / "compiled"), "MS_ATEN_LOG": "cache",
           "PYTHONPATH": os.pathsep.join([str(folder), os.environ.get("PYTHONPATH", "")])}
    process = subprocess.Popen([sys.executable, str(CHILD), mode, ",".join(scenarios)],
                               env=env, cwd=folder, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    return _results(process) if wait else process


def _results(process: subprocess.Popen) -> dict[str, dict]:
    out, err = process.communicate(timeout=600)
    assert process.returncode == 0, err[-4000:]
    results = {}
    for line in out.splitlines():
        if line.startswith("{"):
            result = json.loads(line)
            result["log"] = err
            name = result.pop("scenario")
            results[name if name not in results else f"{name}#2"] = result
    return results


@pytest.fixture(scope="module")
def stored(tmp_path_factory):
    """A cache filled by two processes at once, each capturing every scenario (the second to
    reach each key waits for the first, then reads what it stored)."""
    folder = tmp_path_factory.mktemp("capture_cache")
    _write_changing(folder)
    first, second = (_run(folder, STORED, wait=False) for _ in range(2))
    return folder, _results(first), _results(second)


def test_two_processes_at_once_capture_each_model_once(stored):
    _, first, second = stored
    for name in STORED:
        outcomes = sorted([first[name]["cache"], second[name]["cache"]])
        assert outcomes == ["hit", "stored"], (name, outcomes)
        hit = first[name] if first[name]["cache"] == "hit" else second[name]
        assert hit["exports"] == 0, name
        for result in (first[name], second[name]):
            assert result["diff"] < 1e-4, (name, result)


@pytest.mark.parametrize("mode", ["graph", "pynative"])
def test_a_later_process_hits_and_gives_torchs_results(stored, mode):
    folder, _, _ = stored
    later = _run(folder, STORED, mode)
    for name in STORED:
        # Forward, every gradient, decoding tokens equal to model.generate's.
        assert later[name]["cache"] == "hit", (name, later[name]["log"][-2000:])
        assert later[name]["exports"] == 0, name
        assert later[name]["diff"] < 1e-4, (name, later[name])
    assert "capture cache hit" in later["mlp"]["log"]


def test_each_part_of_the_key_changed_alone_misses(stored):
    folder, _, _ = stored
    # The module's code (a constant in forward) and the function's (in a function it calls),
    # then the Function's backward alone, then a global function the module's forward calls.
    _write_changing(folder, forward="2.0", function="3.0")
    changed = _run(folder, [*CHANGED, "changing", "function", "mlp"])
    _write_changing(folder, forward="2.0", backward="-3.0", function="3.0")
    backward = _run(folder, ["changing"])
    _write_changing(folder, forward="2.0", backward="-3.0", helper="0.5", function="3.0")
    helper = _run(folder, ["changing"])
    for name in CHANGED:
        assert changed[name]["cache"] == "stored", (name, changed[name]["cache"])
        assert changed[name]["exports"] >= 1, name
        assert changed[name]["diff"] < 1e-4, (name, changed[name])
    for result in (changed["changing"], changed["function"], backward["changing"],
                   helper["changing"]):
        assert result["cache"] == "stored" and result["diff"] < 1e-4, result
    assert changed["mlp"]["cache"] == "hit"  # the unchanged one still hits
    log = changed["mlp-width"]["log"]
    assert "capture cache miss: differs from a stored entry in" in log
    assert "weights (fc.bias, fc.weight, norm.bias, norm.running_mean, ...)" in log


def _entries_of(folder: Path, module: str) -> list[Path]:
    """Every stored entry of the module's class (the key's other tests store variants of it)."""
    found = [parts.parent for parts in (folder / "programs").glob("*/*/parts.json")
             if json.loads(parts.read_text())["model"].get("module", "").endswith(module)]
    assert found, f"no entry for {module}"
    return found


def test_a_damaged_entry_is_captured_again_with_a_warning(stored):
    folder, _, _ = stored
    entries = _entries_of(folder, ".Pair")
    for entry in entries:  # whichever the next capture of Pair reads
        program = entry / "program.json"
        program.write_bytes(program.read_bytes()[:100])  # a partial copy
    results = _run(folder, ["pair", "pair"])
    again = results["pair"]
    assert again["damaged"] and any(str(entry) in again["damaged"][0] for entry in entries)
    assert "is damaged (program.json has 100 bytes" in again["damaged"][0]
    assert again["cache"] == "stored" and again["diff"] < 1e-4
    assert results["pair#2"]["cache"] == "hit"  # the entry stored again


def _mounts_allowed() -> bool:
    try:
        return subprocess.run(["unshare", "-m", "mount", "-t", "tmpfs", "tmpfs", "/mnt"],
                              capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


# The child in a mount namespace of its own, with its cache folder mounted as the command
# before it says: read only, or a small file system that fills up.
NAMESPACED = ["unshare", "-m", "sh", "-c", '$0 "$1" && shift && exec "$@"']


@pytest.mark.skipif(not _mounts_allowed(), reason="needs unshare and mount (root)")
def test_a_read_only_folder_is_read_and_a_new_capture_goes_on(stored):
    folder, _, _ = stored
    cache = folder / "programs"
    results = _namespaced(folder, f"mount --bind -o ro {cache}", cache, ["mlp", "mlp-wide"])
    assert results["mlp"]["cache"] == "hit" and results["mlp"]["diff"] < 1e-4
    assert results["mlp-wide"]["cache"] == "not stored: the folder cannot be written"
    assert results["mlp-wide"]["diff"] < 1e-4


@pytest.mark.skipif(not _mounts_allowed(), reason="needs unshare and mount (root)")
def test_a_full_disk_captures_and_goes_on(stored, tmp_path):
    folder, _, _ = stored
    results = _namespaced(folder, "mount -t tmpfs -o size=8k tmpfs", tmp_path, ["mlp"])
    assert results["mlp"]["cache"].startswith("not stored: [Errno 28]"), results["mlp"]
    assert results["mlp"]["diff"] < 1e-4


def _namespaced(folder: Path, mount: str, cache: Path, scenarios: list[str]):
    env = {**os.environ, "MS_ATEN_PROGRAM_CACHE": str(cache),
           "MS_ATEN_CACHE_DIR": str(folder / "compiled"), "MS_ATEN_LOG": "cache",
           "PYTHONPATH": os.pathsep.join([str(folder), os.environ.get("PYTHONPATH", "")])}
    return _results(subprocess.Popen(
        [*NAMESPACED, mount, str(cache), sys.executable, str(CHILD), "graph",
         ",".join(scenarios)], env=env, cwd=folder, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True))
