"""The relaxed controller's two passes over every candidate factor (Riedel & Smith 2010), compiled: the
separation round's gain screen (Prop. 1) and eta over the factors left out (Prop. 2).

Each pass reads a candidate family's two flat arc indices and weight per factor and the two link beliefs
they point at once, without building a float array over all O(n^3) candidates: the numpy form of the same
passes (``relaxed_gain.pair_feature_expectations``, ``gain_exceeds``, ``eta_bound``) gathers the beliefs
into a (2, F) array and multiplies and compares in several more passes.

- ``screen``: a mask of the candidates not in the graph that pass ``gain_exceeds``'s first bound, ``mu theta^2
  > limit``, with mu = b(L_a) b(L_b) computed as there (the same product, so the same doubles), written without
  a branch per factor; the second bound runs in numpy on those (about 12% on EWT dev), and eq. 3 on what is
  left (``relaxed_gain.eq3_exceeds``). The bounds only rule out candidates whose gain is at most half the
  threshold, so the factors selected are exactly those eq. 3 selects (tested against the numpy path).
- ``left_out_eta``: per sentence of a stack, the sum over the factors not in the graph of ``max(theta, 0) -
  theta mu`` (``eta_bound``'s terms, the same products), summed in factor order: equal to the numpy sums up to
  rounding (numpy sums pairwise).

Both are O(F) for F candidates (compiled with numba, cached on disk like the engine's other kernels,
``engine.compiled``). Measured on a stack of 22 sentences of 25 words (316,800 SIB candidates): the screen
with eq. 3 about 4 ns per candidate against 5.5 for the numpy path, eta about 2 ns.
"""

from __future__ import annotations

import numpy as np
from numba import njit  # type: ignore[import-untyped]

from engine.graph.pairwise import PairFamily
from engine.inference.relaxed_gain import first_limit

__all__ = ["left_out_eta", "screen"]


@njit(cache=True, nogil=True)
def _screen(beliefs: np.ndarray, ab: np.ndarray, theta: np.ndarray, active: np.ndarray, skip_active: bool,
            limit: float, out: np.ndarray) -> None:  # pragma: no cover (compiled)
    """``out[f]``: whether candidate ``f`` (not ``active[f]`` when ``skip_active``) has ``mu theta^2 > limit``
    with ``mu = b[a_f] b[b_f]``. Without a branch per factor (an unpredictable one costs more than the
    arithmetic): the mask is what ``np.flatnonzero`` reads next."""
    size = theta.shape[0]
    for f in range(size):
        t = theta[f]
        out[f] = beliefs[ab[f]] * beliefs[ab[size + f]] * (t * t) > limit
    if skip_active:
        for f in range(size):
            out[f] &= not active[f]


@njit(cache=True, nogil=True)
def _left_out(beliefs: np.ndarray, ab: np.ndarray, theta: np.ndarray, active: np.ndarray,
              bounds: np.ndarray, which: np.ndarray, out: np.ndarray) -> None:  # pragma: no cover (compiled)
    """Adds to ``out[j]``, for each sentence j with ``which[j]``, the sum over its factors ``bounds[j]:bounds[j +
    1]`` not ``active`` of ``max(theta, 0) - (b[a] b[b]) theta``."""
    size = theta.shape[0]
    for j in range(bounds.shape[0] - 1):
        if not which[j]:
            continue
        total = 0.0
        for f in range(bounds[j], bounds[j + 1]):
            if active[f]:
                continue
            t = theta[f]
            total += max(t, 0.0) - beliefs[ab[f]] * beliefs[ab[size + f]] * t
        out[j] += total


def screen(family: PairFamily, beliefs: np.ndarray, active: np.ndarray | None,
           epsilon: float) -> tuple[np.ndarray, np.ndarray]:
    """``(index, mu)``: the factors of ``family`` not ``active`` (all when None) that pass both bounds of
    ``relaxed_gain.gain_exceeds`` for the threshold ``epsilon > 0``, ascending, and their ``mu = b(L_a) b(L_b)``
    under the flat beliefs ``beliefs``; ``relaxed_gain.eq3_exceeds`` picks the selected ones. O(F)."""
    limit = first_limit(family.message_bound(), epsilon)  # max |theta| >= max theta: a valid (looser) bound
    passed = np.empty(family.size, dtype=np.bool_)
    mask = active if active is not None else passed
    _screen(beliefs, family._ab, family.theta, mask, active is not None, limit, passed)
    rest = np.flatnonzero(passed)
    mu = beliefs[family._a[rest]] * beliefs[family._b[rest]]  # the products the kernel compared
    theta = family.theta[rest]
    with np.errstate(over="ignore", invalid="ignore"):  # theta > 709: inf, and 0 * inf where mu = 0
        keep = mu * (np.expm1(theta) - theta) > 0.5 * epsilon  # the second bound of gain_exceeds
    return rest[keep], mu[keep]


def left_out_eta(family: PairFamily, beliefs: np.ndarray, active: np.ndarray, bounds: np.ndarray,
                 out: np.ndarray, which: np.ndarray | None = None) -> None:
    """Adds to ``out`` (one entry per sentence of the stack ``bounds``) Prop. 2's eta over the factors of
    ``family`` not ``active``, under the flat beliefs ``beliefs``; only for the sentences ``which`` (a mask;
    all by default). O(F) for their F factors."""
    every = np.ones(len(bounds) - 1, dtype=np.bool_) if which is None else which
    _left_out(beliefs, family._ab, family.theta, active, np.asarray(bounds, dtype=np.int64), every, out)
