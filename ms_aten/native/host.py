"""How the host CPU runs ms_aten's kernels: ms_aten asks for MindSpore's blocking host run and
for OpenMP's active wait policy.

MindSpore's host pipeline. MindSpore 2.10 hands every op and graph run to queue threads and
waits for them in a busy loop (AsyncRQueue::Wait), while idle queue workers spin in
sched_yield loops. On a CPU those spinning threads take the cores that the kernels (ATen's
OpenMP team, MindSpore's thread pool) need, and each kernel that waits for a core loses a
scheduler slice (benchmarks/results/profile.md: medium GPT-2's forward and backward took
292 ms that way and 116 ms without, for the same 95 ms of ATen work). With
MS_DEV_HOST_BLOCKING_RUN=1, MindSpore runs each task on the thread that asks for it. MindSpore
reads the variable once, at its first task, so ms_aten sets it at import, before any op runs,
unless the user set it (to any value) or the device is not the CPU, where the asynchronous
launch lets the host run ahead of the device.

OpenMP's wait policy. ATen's CPU kernels split their work with OpenMP (libgomp). libgomp gives
each thread that opens a parallel region a team of its own: torch eager has one, ms_aten's
kernels run on MindSpore's threads and add more. Once libgomp manages more threads than the
machine has cores, it cuts its workers' spinning between regions to 100 spins (1,000 with
OMP_WAIT_POLICY=active) before they sleep, so with the default policy each parallel region
waits for a worker to wake up: medium GPT-2's jitted forward and backward took 73 ms that way
and 49 ms with OMP_WAIT_POLICY=active (torch eager 41 ms, the same with either policy;
README, "Whole models"). libgomp reads the variable when it is loaded, with torch, so ms_aten
sets it before it imports torch, unless the user set it or torch was imported already.
"""
from __future__ import annotations

import os
import sys

import mindspore as ms

ENV = "MS_DEV_HOST_BLOCKING_RUN"
OPENMP_WAIT = "OMP_WAIT_POLICY"


def on_cpu() -> bool:
    return ms.get_context("device_target") == "CPU"


def request_blocking_run() -> None:
    """Sets MS_DEV_HOST_BLOCKING_RUN=1 for the CPU, unless the user chose."""
    if ENV not in os.environ and on_cpu():
        os.environ[ENV] = "1"


def request_active_openmp_wait() -> None:
    """Sets OMP_WAIT_POLICY=active for the CPU, unless the user chose or torch (which loads
    libgomp) was imported already."""
    if OPENMP_WAIT not in os.environ and "torch" not in sys.modules and on_cpu():
        os.environ[OPENMP_WAIT] = "active"
