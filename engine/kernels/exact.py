"""Exact first-order inference dispatch: Matrix-Tree (non-projective) or Eisner (projective)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from engine.kernels.eisner import eisner_marginals
from engine.kernels.matrix_tree import matrix_tree_marginals

TREE_KINDS = ("nonprojective", "projective")
ROOT_MODES = ("single", "multi")


@dataclass(frozen=True)
class TreeConstraint:
    """Which trees the model ranges over: ``tree`` in TREE_KINDS, ``root`` in ROOT_MODES."""

    tree: str = "nonprojective"
    root: str = "single"

    def __post_init__(self) -> None:
        if self.tree not in TREE_KINDS:
            raise ValueError(f"tree must be one of {TREE_KINDS}, got {self.tree!r}")
        if self.root not in ROOT_MODES:
            raise ValueError(f"root must be one of {ROOT_MODES}, got {self.root!r}")

    @property
    def projective(self) -> bool:
        return self.tree == "projective"

    @property
    def single_root(self) -> bool:
        return self.root == "single"


def exact_marginals(scores: np.ndarray, constraint: TreeConstraint) -> tuple[np.ndarray, np.ndarray]:
    """``(log Z (B,), marginals (B, n+1, n+1))`` for a batch of same-length score matrices."""
    if not constraint.projective:
        log_z, marg = matrix_tree_marginals(scores, single_root=constraint.single_root)
        return np.asarray(log_z), marg
    log_z = np.empty(len(scores))
    marg = np.empty_like(scores)
    for b, s in enumerate(scores):
        log_z[b], marg[b] = eisner_marginals(s, single_root=constraint.single_root)
    return log_z, marg
