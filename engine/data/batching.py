"""Group sentences into batches of equal length, so that every kernel runs batched without padding."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

import numpy as np


def length_batches(lengths: Sequence[int], max_batch: int, max_arcs: int = 1 << 17) -> list[np.ndarray]:
    """Indices grouped by length, each group at most ``max_batch`` sentences and about ``max_arcs``
    candidate arcs (so long sentences come in small batches), in order of first appearance."""
    groups: dict[int, list[int]] = defaultdict(list)
    for i, n in enumerate(lengths):
        groups[int(n)].append(i)
    out: list[np.ndarray] = []
    for n, idx in groups.items():
        size = max(1, min(max_batch, max_arcs // ((n + 1) ** 2)))
        out.extend(np.array(idx[i : i + size]) for i in range(0, len(idx), size))
    return out
