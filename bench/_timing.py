"""Shared timing helper for the benchmark scripts in this folder."""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np


def median_ms(fn: Callable[[], object], repeat: int = 20) -> float:
    """Median wall-clock milliseconds of ``fn()`` over ``repeat`` runs, after one warm-up call."""
    fn()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return round(1000 * float(np.median(times)), 3)
