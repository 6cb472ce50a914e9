"""The large blocks ATen frees on ms_aten's launch thread are reused by the next launches
(csrc/launch/launch_allocator.h): a program whose intermediates glibc would map anew every call
(blocks above its 32 MiB mmap threshold) page-faults them once, not at every call; the cache's
limit holds; ms_aten.empty_cache() gives the blocks back. Each case in a fresh process, since
the launch thread reads MS_ATEN_CPU_CACHE_MB when it starts."""
from __future__ import annotations

import json

import pytest

from common import run_fresh, start_fresh

MIB = 1 << 20
# 20M floats: each of the program's two intermediates is 80 MiB, above any mmap threshold.
WORK = """
import json, resource, sys
import numpy as np
import torch, ms_aten
import mindspore as ms
ms.set_device("CPU")
ms.set_context(mode=getattr(ms, sys.argv[1] + "_MODE"))
x = np.random.default_rng(0).standard_normal(20 << 20, dtype=np.float32)
double_plus_one = ms_aten.function(lambda t: (t * 2 + 1).sum(), (torch.from_numpy(x),))
mx = ms.Tensor(x)
want = float((x.astype(np.float64) * 2 + 1).sum())
for _ in range(2):  # compiled (GRAPH) and warm
    double_plus_one(mx).asnumpy()
faults = []
for _ in range(4):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    got = float(double_plus_one(mx).asnumpy())
    faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
    assert abs(got - want) <= 1e-4 * abs(want) + 1.0, (got, want)
cached = ms_aten.cached_bytes()
ms_aten.empty_cache()
emptied = ms_aten.cached_bytes()
after_emptying = float(double_plus_one(mx).asnumpy())
assert abs(after_emptying - want) <= 1e-4 * abs(want) + 1.0
print(json.dumps({"faults": faults, "cached": cached, "emptied": emptied,
                  "refilled": ms_aten.cached_bytes()}))
"""


def run(tmp_path, mode: str, limit_mb: str | None) -> dict:
    script = tmp_path / "work.py"
    script.write_text(WORK)
    env = {} if limit_mb is None else {"MS_ATEN_CPU_CACHE_MB": limit_mb}
    out = run_fresh([str(script), mode], unset=("MS_ATEN_CPU_CACHE_MB",), timeout=300, env=env)
    return json.loads(out.strip().splitlines()[-1])


@pytest.mark.parametrize("mode", ["GRAPH", "PYNATIVE"])
def test_a_launch_reuses_the_blocks_the_last_one_freed(mode, tmp_path):
    cached = run(tmp_path, mode, None)
    pages = 80 * MIB // 4096
    # Without the cache each call maps both 80 MiB intermediates anew (checked below).
    assert max(cached["faults"]) < pages // 10, cached
    assert cached["cached"] >= 80 * MIB, cached
    assert cached["emptied"] == 0, cached
    assert cached["refilled"] >= 80 * MIB, cached

    uncached = run(tmp_path, mode, "0")
    assert min(uncached["faults"]) > pages, uncached
    assert uncached["cached"] == uncached["refilled"] == 0, uncached


def test_the_cache_holds_no_more_than_its_limit(tmp_path):
    # Room for one 80 MiB block, not for both that a call frees.
    limited = run(tmp_path, "PYNATIVE", "100")
    assert 80 * MIB <= limited["cached"] <= 100 * MIB, limited


def test_a_limit_that_is_not_a_number_is_refused_at_import():
    done = start_fresh(["-c", "import ms_aten"], timeout=120,
                       env={"MS_ATEN_CPU_CACHE_MB": "lots"})
    assert done.returncode != 0
    assert "MS_ATEN_CPU_CACHE_MB='lots'" in done.stderr, done.stderr[-2000:]


@pytest.mark.parametrize("value", [str(2**43), "9" * 20])
def test_a_limit_too_large_for_the_library_is_refused(monkeypatch, value):
    # Shifted to bytes, 2**43 MiB overflows the library's int64 limit (which turned the cache
    # off), and a 20-digit value overflows its parse (which fell back to the default).
    from ms_aten.native import memory

    monkeypatch.setenv("MS_ATEN_CPU_CACHE_MB", value)
    with pytest.raises(ValueError, match=f"MS_ATEN_CPU_CACHE_MB='{value}'.* to {2**43 - 1}"):
        memory.check_environment()
    monkeypatch.setenv("MS_ATEN_CPU_CACHE_MB", str(2**43 - 1))
    memory.check_environment()
