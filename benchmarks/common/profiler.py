"""torch's profiler on every thread, as the profiling scripts use it over ms_aten's launches.

Imports torch, and not MindSpore; workers.py, which the torch-only workers import, imports
neither, so this is a module of its own.
"""
from __future__ import annotations

import torch
from torch.profiler import ProfilerActivity, profile


def profile_all_threads(*, record_shapes: bool = False) -> profile:
    """torch's CPU profiler, to enter with `with`, recording the events of every thread
    (`prof.events()`, `prof.key_averages()` after it exits); record_shapes as torch's."""
    # ms_aten's launches run in MindSpore's threads and on ms_aten's launch thread, not the one
    # that starts the profiler, which is all that torch records by default; recording the others
    # is only in torch's private experimental config (profile_all_threads, torch 2.13).
    config = torch._C._profiler._ExperimentalConfig(profile_all_threads=True)
    return profile(activities=[ProfilerActivity.CPU], record_shapes=record_shapes,
                   experimental_config=config)
