"""Arc pruning with a first-order model (Gormley, Dredze & Eisner 2015 §5.1).

Keep, for each word, the heads whose first-order marginal is at least ``ratio`` times the best
head's marginal, at most ``max_heads`` of them. The second-order factor graph is then built over the
kept arcs only, which bounds the number of GRAND and SIB factors by O(n k^2) instead of O(n^3).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class PruneConfig:
    ratio: float = 1e-4
    max_heads: int = 10

    def __post_init__(self) -> None:
        if not 0.0 <= self.ratio <= 1.0 or self.max_heads < 1:
            raise ValueError("ratio must be in [0, 1] and max_heads >= 1")


def prune_arcs(marginals: np.ndarray, config: PruneConfig, keep: np.ndarray | None = None) -> np.ndarray:
    """Boolean (n+1, n+1) mask of kept arcs from first-order marginals (n+1, n+1).

    ``keep`` (n+1,) optional heads that must stay (e.g. gold heads during training)."""
    n1 = marginals.shape[0]
    marg = marginals.copy()
    marg[:, 0] = 0.0
    marg[np.arange(n1), np.arange(n1)] = 0.0
    best = marg.max(axis=0, keepdims=True)
    valid = marg >= config.ratio * best
    valid &= marg > 0
    if config.max_heads < n1:
        rank = np.argsort(np.argsort(-marg, axis=0, kind="stable"), axis=0, kind="stable")
        valid &= rank < config.max_heads
    # the best head always survives, so every word keeps at least one head
    top = marg[:, 1:].argmax(axis=0)
    valid[top, np.arange(1, n1)] = True
    if keep is not None:
        valid[keep[1:], np.arange(1, n1)] = True
    valid[:, 0] = False
    return valid
