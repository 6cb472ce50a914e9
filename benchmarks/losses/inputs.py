"""The benchmark's logits and class targets, the same in every process (numpy only)."""
from __future__ import annotations

import numpy as np


def inputs(rows: int, classes: int) -> tuple[np.ndarray, np.ndarray]:
    """(rows, classes) float32 logits and int32 class indices, from a fixed seed."""
    rng = np.random.default_rng(0)
    return (rng.standard_normal((rows, classes), dtype=np.float32),
            rng.integers(0, classes, rows).astype(np.int32))
