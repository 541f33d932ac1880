"""Brute-force enumeration of dependency trees: the test oracle for every exact algorithm.

Enumerates all ``(n + 1) ** n`` head assignments and keeps the trees. Only meant for ``n <= 7``.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

MAX_BRUTE_FORCE_WORDS = 7


def enumerate_trees(n: int, *, single_root: bool, projective: bool) -> np.ndarray:
    """All dependency trees over ``n`` words.

    Returns an int array of shape ``(T, n + 1)``; row ``t`` holds the heads of tree ``t`` with
    ``heads[:, 0] == -1`` (ROOT has no head).
    """
    if not 1 <= n <= MAX_BRUTE_FORCE_WORDS:
        raise ValueError(f"brute force enumerates 1..{MAX_BRUTE_FORCE_WORDS} words, got n={n}")
    cand = np.array(list(itertools.product(range(n + 1), repeat=n)), dtype=np.int64)  # (A, n)
    words = np.arange(1, n + 1)
    cand = cand[(cand != words).all(axis=1)]  # no self loops
    heads = np.concatenate([np.zeros((len(cand), 1), dtype=np.int64), cand], axis=1)
    # Follow head pointers n times: every word of a tree reaches ROOT (head of ROOT is ROOT here).
    cur = np.tile(np.arange(n + 1), (len(heads), 1))
    for _ in range(n):
        cur = np.take_along_axis(heads, cur, axis=1)
    keep = (cur == 0).all(axis=1)
    if single_root:
        keep &= (heads[:, 1:] == 0).sum(axis=1) == 1
    heads = heads[keep]
    if projective:
        heads = heads[[is_projective(h) for h in heads]]
    heads[:, 0] = -1
    return heads


def is_projective(heads: np.ndarray) -> bool:
    """True when no two arcs cross (ROOT at position 0 takes part like any head)."""
    arcs = [(min(h, m), max(h, m)) for m, h in enumerate(heads) if m > 0]
    for (l1, r1), (l2, r2) in itertools.combinations(arcs, 2):
        if l1 < l2 < r1 < r2 or l2 < l1 < r2 < r1:
            return False
    return True


def tree_scores(scores: np.ndarray, trees: np.ndarray) -> np.ndarray:
    """Sum of arc scores of each tree: ``scores`` (n+1, n+1), ``trees`` (T, n+1) -> (T,)."""
    n = scores.shape[0] - 1
    m = np.arange(1, n + 1)
    return scores[trees[:, 1:], m].sum(axis=1)


@dataclass(frozen=True)
class BruteForce:
    """Exact distribution over trees by enumeration: log Z, marginals, best tree, all tree scores."""

    log_partition: float
    marginals: np.ndarray  # (n+1, n+1), marginals[h, m] = p(head of m is h)
    best_heads: np.ndarray  # (n+1,)
    trees: np.ndarray  # (T, n+1)
    log_probs: np.ndarray  # (T,)


def brute_force(scores: np.ndarray, *, single_root: bool, projective: bool) -> BruteForce:
    """Enumerate every tree under log-potentials ``scores[h, m]``."""
    from scipy.special import logsumexp  # here: only enumeration (tests) uses it, parsing does not

    scores = np.asarray(scores, dtype=np.float64)
    n = scores.shape[0] - 1
    trees = enumerate_trees(n, single_root=single_root, projective=projective)
    s = tree_scores(scores, trees)
    log_z = float(logsumexp(s))
    with np.errstate(invalid="ignore"):  # no tree at all: log_z = -inf
        log_p = s - log_z
    p = np.exp(log_p)
    marg = np.zeros((n + 1, n + 1))
    for m in range(1, n + 1):
        np.add.at(marg[:, m], trees[:, m], p)
    best = trees[int(np.argmax(s))].copy()
    return BruteForce(log_z, marg, best, trees, log_p)
