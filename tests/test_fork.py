"""A child process that fork() made after its parent launched uses ms_aten as the parent does
(csrc/launch/launch_thread.cpp, launch_allocator.cpp): a multiprocessing pool and a torch
DataLoader's workers call a Cell whose work runs on the launch thread, in both modes, and get
torch's answer. One fresh process, since the parent must have launched before it forks; every
wait has a time limit, so that a hang fails the test."""
from __future__ import annotations

import json

from common import run_fresh

WORK = """
import json, multiprocessing
import numpy as np, torch, mindspore as ms
import ms_aten
ms.set_device("CPU")
# 65,536 elements: past ATen's grain size, so the work runs on the launch thread.
x = np.random.default_rng(0).standard_normal((256, 256), dtype=np.float32)
fn = ms_aten.function(lambda t: torch.tanh(t) * 2, (torch.from_numpy(x),))

def error(i):
    return float(np.abs(fn(ms.Tensor(x + i)).asnumpy() - np.tanh(x + i) * 2).max())

class Errors(torch.utils.data.Dataset):
    def __len__(self):
        return 4

    def __getitem__(self, i):
        return torch.tensor(error(i))

found = {}
for mode in ("PYNATIVE", "GRAPH"):
    ms.set_context(mode=getattr(ms, mode + "_MODE"))
    parent = error(0)  # the parent launches first
    with multiprocessing.get_context("fork").Pool(2) as pool:
        pooled = pool.map_async(error, range(4)).get(timeout=60)
    loader = torch.utils.data.DataLoader(Errors(), batch_size=2, num_workers=2, timeout=60,
                                         multiprocessing_context="fork")
    loaded = [float(e) for batch in loader for e in batch]
    found[mode] = [parent, *pooled, *loaded, error(5)]
print(json.dumps(found))
"""


def test_forked_workers_call_a_cell_after_the_parent_launched():
    found = json.loads(run_fresh(["-c", WORK], timeout=240).strip().splitlines()[-1])
    for mode, errors in found.items():
        assert len(errors) == 10 and max(errors) < 1e-5, (mode, errors)
