"""ATen's work for ms_aten runs on one thread of its own (csrc/launch/launch_thread.h),
"ms_aten launch", whatever thread MindSpore launches from and whatever the import order, so ATen
has one OpenMP team (its workers inherit the thread's name); work too small to split runs inline
on the caller's thread. Checked in fresh processes by where the CPU time goes, thread by thread."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import ms_aten

from common import run_fresh, to_ms

# A program's forward and backward in GRAPH and PYNATIVE mode, then many small single ops: the
# CPU seconds each phase spent on the threads named "ms_aten launch" and on all threads.
WORK = """
import json, os, sys, time
if sys.argv[1] == "torch first":
    import torch, ms_aten
else:
    import ms_aten, torch
import mindspore as ms
sys.path.insert(0, sys.argv[2])  # tests/, for loss_cell
from loss_cell import SumOf

# CPU seconds of the live threads named "ms_aten launch", of every live thread, and of the
# process (threads that ended included: the launch thread's workers end when it gives its team
# back).
def cpu_seconds():
    launch = live = 0.0
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/comm") as comm, \
                    open(f"/proc/self/task/{tid}/schedstat") as schedstat:
                name, seconds = comm.read().strip(), int(schedstat.read().split()[0]) / 1e9
        except (FileNotFoundError, ProcessLookupError):  # a thread that ended meanwhile
            continue
        live += seconds
        launch += seconds if name == "ms_aten launch" else 0.0
    return launch, live, time.process_time()

ms.set_device("CPU")
width = 1024
model = torch.nn.Sequential(torch.nn.Linear(width, width), torch.nn.ReLU(),
                            torch.nn.Linear(width, width))
example = torch.randn(512, width)
cells = {mode: ms_aten.module(model, (example,)) for mode in ("GRAPH", "PYNATIVE")}
x = ms_aten.to_ms(example)
small = ms_aten.to_ms(torch.randn(16, 16))
mul = ms_aten.op("mul.Tensor")
spent = {}
for mode in ("GRAPH", "PYNATIVE"):
    ms.set_context(mode=getattr(ms, mode + "_MODE"))
    grad = ms.grad(SumOf(cells[mode]))
    grad(x).asnumpy()  # compiled (GRAPH) and warm
    before = cpu_seconds()
    for _ in range(10):
        grad(x).asnumpy()
    after = cpu_seconds()
    launch, live, total = (a - b for a, b in zip(after, before))
    spent[mode] = [launch + total - live, total]  # the threads that ended were the workers
time.sleep(0.5)  # the launch thread has given its team back
before = cpu_seconds()
for _ in range(2000):
    mul(small, small)
mul(small, small).asnumpy()
after = cpu_seconds()
spent["small ops"] = [a - b for a, b in zip(after[:2], before[:2])]
print(json.dumps(spent))
"""


def cpu_seconds_by_phase(order: str, folder: Path) -> dict[str, list[float]]:
    """{phase: [CPU seconds on the launch thread and its OpenMP workers, on all threads]}."""
    script = folder / "work.py"  # MindSpore compiles Cells from source files only
    script.write_text(WORK)
    tests = str(Path(__file__).parent)
    out = run_fresh([str(script), order, tests], unset=("OMP_WAIT_POLICY",), timeout=600)
    return json.loads(out.strip().splitlines()[-1])


@pytest.mark.parametrize("order", ["torch first", "ms_aten first"])
def test_work_to_split_runs_on_the_launch_thread_and_small_work_inline(order, tmp_path):
    spent = cpu_seconds_by_phase(order, tmp_path)
    for mode in ("GRAPH", "PYNATIVE"):
        launch, total = spent[mode]
        assert total > 0.25, spent  # 20 GFLOP of matmuls: about 0.5 s of CPU on 2 cores
        assert launch > 0.8 * total, spent  # the rest: MindSpore's and Python's own work
    launch, total = spent["small ops"]
    assert launch < 0.05 * total, spent


def test_import_leaves_openmp_s_wait_policy_alone():
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    done = subprocess.run(
        [sys.executable, "-c", "import os, ms_aten; print(os.environ.get('OMP_WAIT_POLICY'))"],
        env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "None"


def test_an_error_on_the_launch_thread_reaches_the_caller_and_the_next_launch_works(mode):
    # An index past the end passes shape inference and fails in ATen's kernel, on the launch
    # thread for a tensor this large.
    index_select = ms_aten.op("index_select", dim=0)
    x = torch.randn(512, 512)
    with pytest.raises(RuntimeError, match=r"ms_aten: aten::index_select: index out of range"):
        index_select(to_ms(x), to_ms(torch.tensor([3, 600]))).asnumpy()
    good = torch.tensor([3, 500])
    np.testing.assert_array_equal(index_select(to_ms(x), to_ms(good)).asnumpy(),
                                  x.index_select(0, good).numpy())


# torch's parallel work on the main thread (a model's construction) gives it an OpenMP team;
# after a capture, its workers are gone; the next parallel torch op on the thread starts a team
# again and computes as before.
TEAM = """
import os, sys, time
import torch
torch.set_num_threads(2)
import ms_aten

def threads():
    return set(os.listdir("/proc/self/task"))

x = torch.randn(2048, 2048)
before = threads()
expected = x @ x  # a parallel region on this thread: its team starts
workers = threads() - before
model = torch.nn.Linear(64, 64)
cell = ms_aten.module(model, (torch.randn(4, 64),))
time.sleep(0.2)  # a released worker ends after the call returns
left = workers & threads()
again = x @ x
print(len(workers), len(left), bool(torch.equal(again, expected)))
"""


def test_a_capture_releases_its_thread_s_idle_openmp_team():
    out = run_fresh(["-c", TEAM], unset=("OMP_WAIT_POLICY", "OMP_NUM_THREADS"), timeout=300)
    started, left, same = out.split()[-3:]
    assert int(started) >= 1  # the team's worker, with 2 threads
    assert int(left) == 0 and same == "True", out


# Work too small to split whose ATen loop still asks for threads: _fused_adam_ splits over its
# tensors (grain 0), 8 of 64 x 64 here. Inline on MindSpore's thread, it must open no OpenMP
# team there (a team's workers are new threads, named as the thread that opened it).
SMALL_LOOP = """
import os, sys, time
import torch, ms_aten
import mindspore as ms
from mindspore import Parameter
ms.set_device("CPU")
ms.set_context(mode=getattr(ms, sys.argv[1] + "_MODE"))

def threads():
    return set(os.listdir("/proc/self/task"))

@ms.jit
def warm(a):
    return a + 1
warm(ms.Tensor(1.0)).asnumpy()  # MindSpore's own graph threads start here
params = [Parameter(ms_aten.to_ms(torch.randn(64, 64)), name=f"p{i}") for i in range(8)]
adam = ms_aten.optim.Adam(params, lr=1e-3)
grads = tuple(ms_aten.to_ms(torch.randn(64, 64)) for _ in range(8))
before = threads()
for _ in range(3):
    adam(grads)
params[0].asnumpy()
time.sleep(0.2)
print(len(threads() - before))
"""


@pytest.mark.parametrize("mode_name", ["GRAPH", "PYNATIVE"])
def test_small_work_with_a_parallel_loop_opens_no_team_on_mindspore_s_thread(mode_name, tmp_path):
    script = tmp_path / "small_loop.py"  # MindSpore compiles functions from source files only
    script.write_text(SMALL_LOOP)
    out = run_fresh([str(script), mode_name], unset=("OMP_WAIT_POLICY", "OMP_NUM_THREADS"),
                    timeout=300)
    assert out.split()[-1] == "0", out


# A program whose every tensor is below ATen's grain size runs with ATen held to the launch
# thread (csrc/program/program.h, too_small_to_split): its forward and backward open no OpenMP
# team, though layer_norm splits its rows with grain 1; the same model over more rows does.
SMALL_PROGRAM = """
import sys
import torch, ms_aten
import mindspore as ms
sys.path.insert(0, sys.argv[2])  # tests/, for loss_cell and common
from common import launch_thread_ids
from loss_cell import SumOf
ms.set_device("CPU")
ms.set_context(mode=getattr(ms, sys.argv[1] + "_MODE"))

model = torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.LayerNorm(32))
counts = []
for rows in (8, 4096):  # 256 elements at most, then 131,072
    example = torch.randn(rows, 32)
    grad = ms.grad(SumOf(ms_aten.module(model, (example,))))
    most = 0  # read after each step: an idle launch thread gives its team back
    for _ in range(20):
        grad(ms_aten.to_ms(example)).asnumpy()
        most = max(most, len(launch_thread_ids()))
    counts.append(most)
print(*counts)
"""


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="ATen opens no team on one core")
@pytest.mark.parametrize("mode_name", ["GRAPH", "PYNATIVE"])
def test_a_program_too_small_to_split_opens_no_team(mode_name, tmp_path):
    script = tmp_path / "small_program.py"  # MindSpore compiles Cells from source files only
    script.write_text(SMALL_PROGRAM)
    out = run_fresh([str(script), mode_name, str(Path(__file__).parent)],
                    unset=("OMP_WAIT_POLICY", "OMP_NUM_THREADS", "MS_ATEN_NUM_THREADS"),
                    timeout=300)
    small, large = map(int, out.split()[-2:])
    assert small == 1, out  # the launch thread alone
    assert large > 1, out  # and its workers, once the rows are many


# After a launch the launch thread waits a little for the next one, then gives its OpenMP team
# back (csrc/launch/launch_thread.cpp): idle, libgomp's workers would spin on the cores
# MindSpore's own kernels need between ms_aten's launches (its optimizer, its loss).
# Launches back to back keep the team; a launch after the pause starts one again.
IDLE_TEAM = """
import sys, time
import numpy as np
import torch, ms_aten
import mindspore as ms
sys.path.insert(0, sys.argv[2])  # tests/, for common
from common import launch_thread_ids
ms.set_device("CPU")
ms.set_context(mode=getattr(ms, sys.argv[1] + "_MODE"))

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.ReLU(), torch.nn.Linear(256, 256))
example = torch.randn(512, 256)
cell = ms_aten.module(model, (example,))
x = ms_aten.to_ms(example)
seen = []
for _ in range(20):
    cell(x).asnumpy()
    seen.append(launch_thread_ids())
time.sleep(0.2)
idle = launch_thread_ids()
again = []
for _ in range(5):
    out = cell(x).asnumpy()
    again.append(launch_thread_ids())
paced = []  # launches a little further apart than the shortest wait, as a decoding loop's
for _ in range(30):
    time.sleep(0.0006)
    cell(x).asnumpy()
    paced.append(launch_thread_ids())
with torch.no_grad():
    same = np.allclose(out, model(example).numpy(), rtol=1e-5, atol=1e-5)
print(max(map(len, seen)), len(set().union(*seen)), len(idle), max(map(len, again)),
      len(set().union(*paced)), same)
"""


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="ATen opens no team on one core")
@pytest.mark.parametrize("mode_name", ["GRAPH", "PYNATIVE"])
def test_an_idle_launch_thread_gives_its_team_back(mode_name, tmp_path):
    out = run_fresh(["-c", IDLE_TEAM, mode_name, str(Path(__file__).parent)],
                    unset=("OMP_WAIT_POLICY", "OMP_NUM_THREADS", "MS_ATEN_NUM_THREADS"),
                    timeout=300)
    most, ever, idle, again, paced, same = out.split()[-6:]
    team = int(most) - 1  # the launch thread's workers
    assert team >= 1, out
    # 20 launches back to back: the same workers, but for the restarts the wait's rule allows
    # while it grows past the rests between launches (a new team every launch would be
    # 1 + 20 * team threads). It doubles after two releases in a row that bought nothing, from
    # 0.5 to 8 ms: two restarts at each of 4 waits, 8 at most. Where the rest between launches
    # (this loop's Python) is under 0.5 ms there are none; on a slower VM, where its /proc walk
    # alone took 0.3-0.6 ms, 5 and 6 restarts were seen.
    assert int(ever) <= 1 + (1 + 8) * team, out
    assert int(idle) == 1, out  # the launch thread alone
    assert int(again) == 1 + team and same == "True", out
    # 30 launches 0.6 ms apart: once two releases in a row have bought nothing (the rest
    # between launches is a sleep, no CPU used), the launch thread waits longer, and the team
    # stays (a team a launch would be 1 + 30 * team).
    assert int(paced) <= 1 + 10 * team, out
