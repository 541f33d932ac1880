"""A factor of the product grammar (Hall & Klein 2012, §3.2, eq. 1), and what inside-outside returns for it.

A factor ``f_m`` refines every label ``A`` into ``K_m(A)`` substates (a latent bit: 2; TOP: 1) and scores refined
rules with log weights (brief §1, notation): ``log_w[r, x, y, z]`` for ``A[x] -> B[y] C[z]``, ``log_u[u, x, y]``
for the unary ``A[x](top) -> B[y](bot)`` (identity unaries diagonal: a substate cannot switch on the way through
an identity, brief §5), ``log_e[i, t, x]`` for tag ``t[x]`` on word ``i`` (``theta . phi(t[x], w_i)``, one sentence).
Arrays are padded to ``K = max K_m(A)``; a padded substate has weight ``-inf`` (zero), so it never carries mass.

:func:`kronecker_product` is the exact product of two factors (brief §1.4): a ``K1 * K2``-state factor whose
weights are the products of theirs, the reference EP is measured against.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from engine.constituency.grammar import Grammar, IntArray

FloatArray = npt.NDArray[np.float64]

__all__ = ["Factor", "FactorMarginals", "kronecker_product", "make_factor", "split_counts", "substates",
           "unit_like"]


@dataclass(frozen=True)
class Factor:
    """Log weights of one factor for one sentence: ``log_w (R, K, K, K)``, ``log_u (U, K, K)``,
    ``log_e (n, L, K)`` (rows of non-tag labels unused)."""

    log_w: FloatArray
    log_u: FloatArray
    log_e: FloatArray

    @property
    def k(self) -> int:
        return int(self.log_w.shape[1])


@dataclass(frozen=True)
class FactorMarginals:
    """Inside-outside of one factor times an anchored grammar (brief §1.1).

    ``log_z``: log partition. Refined expected counts, the gradient of ``log_z`` with respect to the log weights:
    ``w_counts (R, K, K, K)``, ``u_counts (U, K, K)``, ``e_counts (n, L, K)``. Coarse anchored marginals, the
    gradient with respect to the anchored scores: ``mu_b`` per binary item, ``mu_u`` per unary item, ``mu_tag``
    per tag item; ``mu_bot[i, j, A]`` and ``mu_top[i, j, A]`` per labelled cell and layer.
    """

    log_z: float
    w_counts: FloatArray
    u_counts: FloatArray
    e_counts: FloatArray
    mu_b: FloatArray
    mu_u: FloatArray
    mu_tag: FloatArray
    mu_bot: FloatArray
    mu_top: FloatArray


def substates(grammar: Grammar, k: int, unsplit: tuple[str, ...] = ()) -> IntArray:
    """``K(A)`` per label: ``k`` for every label, 1 for TOP and for the labels named in ``unsplit``."""
    counts = np.full(grammar.n_labels, k, dtype=np.int64)
    counts[grammar.top] = 1
    for label in unsplit:
        counts[grammar.index[label]] = 1
    return counts


def make_factor(grammar: Grammar, log_w: FloatArray, log_u: FloatArray, log_e: FloatArray,
                counts: IntArray) -> Factor:
    """A factor from raw log weights padded to ``K = counts.max()``: weights of substates a label does not have
    (``x >= counts[A]``) and the off-diagonal weights of identity unaries become ``-inf``."""
    k = int(counts.max())
    live = np.arange(k)[None, :] < counts[:, None]  # (L, K)
    a, b, c = grammar.binary.T
    w_live = live[a][:, :, None, None] & live[b][:, None, :, None] & live[c][:, None, None, :]
    top, bot = grammar.unary.T
    u_live = live[top][:, :, None] & live[bot][:, None, :]
    u_live[top == bot] &= np.eye(k, dtype=bool)
    return Factor(np.where(w_live, log_w, -np.inf), np.where(u_live, log_u, -np.inf),
                  np.where(live[None, :, :], log_e, -np.inf))


def unit_like(factor: Factor) -> Factor:
    """The one-substate factor of weight 1 with ``factor``'s rules and sentence: inside-outside of it times an
    anchored grammar ``q`` is inside-outside of ``q`` alone (``log Z(q)``, its marginals)."""
    return Factor(np.zeros((len(factor.log_w), 1, 1, 1)), np.zeros((len(factor.log_u), 1, 1)),
                  np.zeros((*factor.log_e.shape[:2], 1)))


def kronecker_product(first: Factor, second: Factor) -> Factor:
    """The exact product of two factors (brief §1.4): substate ``(x1, x2)`` is ``x1 * K2 + x2`` and its weight
    the product of the two factors' weights, ``einsum('abc,def->adbecf')`` in log space (a sum)."""
    k1, k2 = first.k, second.k
    k = k1 * k2
    w = first.log_w[:, :, None, :, None, :, None] + second.log_w[:, None, :, None, :, None, :]
    u = first.log_u[:, :, None, :, None] + second.log_u[:, None, :, None, :]
    e = first.log_e[:, :, :, None] + second.log_e[:, :, None, :]
    return Factor(w.reshape(len(w), k, k, k), u.reshape(len(u), k, k), e.reshape(*e.shape[:2], k))


def split_counts(counts: FactorMarginals, k1: int, k2: int) -> tuple[FactorMarginals, FactorMarginals]:
    """Expected counts of a :func:`kronecker_product` factor split back onto its two factors by summing out the
    other factor's substate: the exact gradients of each factor's weights (brief §1.4)."""
    w = counts.w_counts.reshape(-1, k1, k2, k1, k2, k1, k2)
    u = counts.u_counts.reshape(-1, k1, k2, k1, k2)
    e = counts.e_counts.reshape(*counts.e_counts.shape[:2], k1, k2)
    first = FactorMarginals(counts.log_z, w.sum(axis=(2, 4, 6)), u.sum(axis=(2, 4)), e.sum(axis=3),
                            counts.mu_b, counts.mu_u, counts.mu_tag, counts.mu_bot, counts.mu_top)
    second = FactorMarginals(counts.log_z, w.sum(axis=(1, 3, 5)), u.sum(axis=(1, 3)), e.sum(axis=2),
                             counts.mu_b, counts.mu_u, counts.mu_tag, counts.mu_bot, counts.mu_top)
    return first, second
