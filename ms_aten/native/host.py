"""How the host CPU runs ms_aten's kernels: ms_aten asks for MindSpore's blocking host run.

MindSpore's host pipeline. MindSpore 2.10 hands every op and graph run to queue threads and
waits for them in a busy loop (AsyncRQueue::Wait), while idle queue workers spin in
sched_yield loops. On a CPU those spinning threads take the cores that the kernels (ATen's
OpenMP team, MindSpore's thread pool) need, and each kernel that waits for a core loses a
scheduler slice (benchmarks/results/models/profile/profile.md: medium GPT-2's forward and
backward took 292 ms that way and 116 ms without, for the same 95 ms of ATen work). With
MS_DEV_HOST_BLOCKING_RUN=1, MindSpore runs each task on the thread that asks for it. MindSpore
reads the variable once, at its first task, so ms_aten sets it at import, before any op runs,
unless the user set it (to any value) or the device is not the CPU, where the asynchronous
launch lets the host run ahead of the device.

OpenMP needs nothing of the kind: ms_aten's ATen work runs on one thread of its own, one OpenMP
team (csrc/launch/launch_thread.h), and OMP_WAIT_POLICY is left to the user.
"""
from __future__ import annotations

import os

import mindspore as ms

ENV = "MS_DEV_HOST_BLOCKING_RUN"


def on_cpu() -> bool:
    return ms.get_context("device_target") == "CPU"


def request_blocking_run() -> None:
    """Sets MS_DEV_HOST_BLOCKING_RUN=1 for the CPU, unless the user chose."""
    if ENV not in os.environ and on_cpu():
        os.environ[ENV] = "1"
