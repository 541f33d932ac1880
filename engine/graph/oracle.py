"""Brute-force oracles for factor graphs over link variables (tests only; tiny n).

``assignment_marginals`` enumerates every assignment of the valid link variables (2^V of them);
``tree_marginals`` enumerates only the dependency trees (for graphs containing a TREE factor).
``arc_family_messages`` computes, by enumeration, the exact messages an arc-shaped family sends.
``tree_log_weights`` scores every tree under LINK and pairwise families at once (vectorised), for
oracles over many random models (relaxed inference, Riedel & Smith 2010).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import numpy as np

from engine.graph.family import FactorFamily
from engine.graph.hard import Link
from engine.graph.pairwise import PairFamily
from engine.graph.tree import Tree
from engine.kernels.brute_force import enumerate_trees

MAX_VARIABLES = 16


def all_assignments(valid: np.ndarray) -> np.ndarray:
    """Every boolean arc matrix over the valid arcs: (2^V, n+1, n+1)."""
    arcs = np.argwhere(valid)
    if len(arcs) > MAX_VARIABLES:
        raise ValueError(f"{len(arcs)} variables is too many to enumerate (max {MAX_VARIABLES})")
    bits = np.array(list(itertools.product([False, True], repeat=len(arcs))), dtype=bool)
    ys = np.zeros((len(bits), *valid.shape), dtype=bool)
    ys[:, arcs[:, 0], arcs[:, 1]] = bits
    return ys


def _marginals(ys: np.ndarray, log_w: np.ndarray) -> np.ndarray:
    from scipy.special import logsumexp  # here: only enumeration (tests) uses it, parsing does not

    p = np.exp(log_w - logsumexp(log_w))
    return np.tensordot(p, ys.astype(float), axes=1)


def assignment_marginals(families: Sequence[FactorFamily], valid: np.ndarray) -> np.ndarray:
    """Exact ``p(L[h, m] = true)`` of the factor graph by enumerating all assignments."""
    ys = all_assignments(valid)
    log_w = np.array([sum(f.log_potential(y) for f in families) for y in ys])
    return _marginals(ys, log_w)


def tree_marginals(families: Sequence[FactorFamily], n: int, *, single_root: bool, projective: bool) -> np.ndarray:
    """Exact marginals when the graph includes a TREE/PTREE factor: enumerate trees only."""
    trees = enumerate_trees(n, single_root=single_root, projective=projective)
    ys = np.zeros((len(trees), n + 1, n + 1), dtype=bool)
    for t, heads in enumerate(trees):
        ys[t, heads[1:], np.arange(1, n + 1)] = True
    log_w = np.array([sum(f.log_potential(y) for f in families) for y in ys])
    return _marginals(ys, log_w)


def tree_log_weights(families: Sequence[FactorFamily], n: int, *, single_root: bool,
                     projective: bool) -> tuple[np.ndarray, np.ndarray]:
    """Every tree as a boolean arc matrix (T, n+1, n+1) and its unnormalised log-weight (T,) under the
    LINK and pairwise families among ``families`` (a TREE/PTREE factor is implied by the enumeration;
    any other family is refused). Vectorised over trees: O(T (n^2 + F))."""
    trees = enumerate_trees(n, single_root=single_root, projective=projective)
    ys = np.zeros((len(trees), n + 1, n + 1), dtype=bool)
    ys[np.arange(len(trees))[:, None], trees[:, 1:], np.arange(1, n + 1)] = True
    flat = ys.reshape(len(trees), -1)
    log_w = np.zeros(len(trees))
    for f in families:
        if isinstance(f, Link):
            log_w += flat @ f.theta.reshape(-1)
        elif isinstance(f, PairFamily):
            on = flat[:, f._a] & flat[:, f._b]
            log_w += np.where(on, f.theta, 0.0).sum(axis=1)
        elif not isinstance(f, Tree):
            raise TypeError(f"tree_log_weights scores LINK and pairwise families only, not {f.name}")
    return ys, log_w


def arc_family_messages(family: FactorFamily, incoming: np.ndarray) -> np.ndarray:
    """Exact outgoing log-odds of an arc-shaped family whose factors have disjoint neighbourhoods."""
    from scipy.special import logsumexp  # here: only enumeration (tests) uses it, parsing does not

    valid = family.valid
    ys = all_assignments(valid)
    r = np.where(valid, incoming, 0.0)
    log_w = np.array([family.log_potential(y) for y in ys]) + (ys * r).sum(axis=(1, 2))
    out = np.zeros(valid.shape)
    for h, m in np.argwhere(valid):
        on = ys[:, h, m]
        out[h, m] = logsumexp(log_w[on]) - logsumexp(log_w[~on]) - r[h, m]
    return out
