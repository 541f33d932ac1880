"""Minimum Bayes-risk decoding (Smith & Smith 2007 §4; Smith & Eisner 2008 §6).

The MBR tree under expected attachment accuracy is the tree that maximises the *sum of arc
marginals* (not their logs): the maximum spanning arborescence, or Eisner's Viterbi for projective
models, run on the marginal matrix.
"""

from __future__ import annotations

import numpy as np

from engine.kernels.eisner import eisner_viterbi
from engine.kernels.exact import TreeConstraint
from engine.kernels.mst import max_spanning_arborescence


def best_tree(scores: np.ndarray, constraint: TreeConstraint) -> np.ndarray:
    """Heads (n+1,) of the tree maximising the sum of ``scores[h, m]`` over its arcs."""
    if constraint.projective:
        return eisner_viterbi(scores, single_root=constraint.single_root)
    return max_spanning_arborescence(scores, single_root=constraint.single_root)


def mbr_decode(marginals: np.ndarray, constraint: TreeConstraint) -> np.ndarray:
    """Heads (n+1,) of the MBR tree under arc marginals (n+1, n+1)."""
    scores = np.array(marginals, dtype=np.float64)
    n1 = scores.shape[0]
    scores[:, 0] = -np.inf
    scores[np.arange(n1), np.arange(n1)] = -np.inf
    return best_tree(scores, constraint)
