"""Shared timing helper for the benchmark scripts in this folder."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

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


def best_of(fn: Callable[[], object], repeat: int = 3) -> float:
    """The fastest of ``repeat`` wall-clock timings of ``fn()``, in seconds (no warm-up: the first run counts)."""
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def byte_compile(root: Path) -> None:
    """Write the bytecode of the checkout ``root``'s ``engine`` and ``service`` before whole commands are timed,
    as pip does when it installs the package (and the Docker image has) and as Python does on a first import.
    Without it, on a machine that sets ``PYTHONDONTWRITEBYTECODE`` (the development machine does) and an
    editable install, every timed command compiled the engine's modules from source: 0.2-0.3 s each time
    (`en_ewt-o1` on a 20-sentence file, 3 runs each, 2026-11-26: 1.40-1.60 s from source, 1.19-1.29 s compiled)."""
    packages = [str(root / name) for name in ("engine", "service") if (root / name).is_dir()]
    if packages:
        subprocess.run([sys.executable, "-m", "compileall", "-q", *packages], check=True, stdout=subprocess.DEVNULL)
