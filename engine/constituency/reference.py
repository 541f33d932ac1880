"""The log-space reference of :func:`engine.constituency.inside_outside.inside_outside`: the test oracle.

The same recurrences (brief §1.1, paper eq. 4) written the plainest way: one Python loop over the items, one
``logsumexp`` over the substates of each, inside and outside charts held as log values (``-inf`` = zero), no
scaling, no vectorisation, nothing shared with the scaled pass but the item list. Slow (a Python step per item):
for tests on tiny grammars only.
"""

from __future__ import annotations

import numpy as np

from engine.constituency.anchored import AnchoredItems, AnchoredScores, FloatArray
from engine.constituency.factor import Factor, FactorMarginals

__all__ = ["inside_outside_log"]


def _lse(x: FloatArray, axis: int | tuple[int, ...] | None = None) -> FloatArray:
    """Log-sum-exp, ``-inf`` for an all ``-inf`` input (no NaN, no warning)."""
    m = np.max(x, axis=axis, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)
    with np.errstate(divide="ignore"):
        return np.asarray(np.log(np.sum(np.exp(x - m), axis=axis)) + np.squeeze(m, axis=axis))


def _inside(items: AnchoredItems, f: Factor, q: AnchoredScores) -> tuple[FloatArray, FloatArray]:
    """Log inside charts ``(bot, top)``, shape ``(n+1, n+1, L, K)``."""
    n, k = items.n, f.k
    bot = np.full((n + 1, n + 1, items.n_labels, k), -np.inf)
    top = np.full_like(bot, -np.inf)
    for v, (i, t) in enumerate(zip(items.tag_i, items.tag_t, strict=True)):
        bot[i, i + 1, t] = f.log_e[i, t] + q.tag[v]
    for length in range(1, n + 1):
        s = items.binary_of_length(length)
        for b in range(s.start, s.stop):
            i, kk, j, r = items.bin_i[b], items.bin_k[b], items.bin_j[b], items.bin_r[b]
            terms = (f.log_w[r] + top[i, kk, items.bin_b[b]][None, :, None]
                     + top[kk, j, items.bin_c[b]][None, None, :])
            bot[i, j, items.bin_a[b]] = np.logaddexp(bot[i, j, items.bin_a[b]], _lse(terms, (1, 2)) + q.binary[b])
        s = items.unary_of_length(length)
        for v in range(s.start, s.stop):
            i, j, u = items.un_i[v], items.un_j[v], items.un_u[v]
            terms = f.log_u[u] + bot[i, j, items.un_b[v]][None, :]
            top[i, j, items.un_a[v]] = np.logaddexp(top[i, j, items.un_a[v]], _lse(terms, 1) + q.unary[v])
    return bot, top


def inside_outside_log(items: AnchoredItems, f: Factor, q: AnchoredScores) -> FactorMarginals:
    """Everything :func:`~engine.constituency.inside_outside.inside_outside` returns, in log space (and the same
    ``FloatingPointError`` when no tree is live)."""
    n, k = items.n, f.k
    bot, top = _inside(items, f, q)
    log_z = float(top[0, n, items.root, 0])
    if not np.isfinite(log_z):
        raise FloatingPointError(f"the partition function is {log_z}: no live tree")
    obot = np.full_like(bot, -np.inf)
    otop = np.full_like(top, -np.inf)
    otop[0, n, items.root, 0] = 0.0
    w_counts, u_counts = np.zeros_like(f.log_w), np.zeros_like(f.log_u)
    mu_b, mu_u = np.zeros(items.n_binary), np.zeros(items.n_unary)
    for length in range(n, 0, -1):
        s = items.unary_of_length(length)
        for v in range(s.start, s.stop):
            i, j, u, a, b = items.un_i[v], items.un_j[v], items.un_u[v], items.un_a[v], items.un_b[v]
            terms = otop[i, j, a][:, None] + f.log_u[u] + q.unary[v]
            obot[i, j, b] = np.logaddexp(obot[i, j, b], _lse(terms, 0))
            refined = np.exp(terms + bot[i, j, b][None, :] - log_z)
            u_counts[u] += refined
            mu_u[v] = refined.sum()
        s = items.binary_of_length(length)
        for e in range(s.start, s.stop):
            i, kk, j, r = items.bin_i[e], items.bin_k[e], items.bin_j[e], items.bin_r[e]
            a, b, c = items.bin_a[e], items.bin_b[e], items.bin_c[e]
            rule = obot[i, j, a][:, None, None] + f.log_w[r] + q.binary[e]
            left, right = top[i, kk, b][None, :, None], top[kk, j, c][None, None, :]
            otop[i, kk, b] = np.logaddexp(otop[i, kk, b], _lse(rule + right, (0, 2)))
            otop[kk, j, c] = np.logaddexp(otop[kk, j, c], _lse(rule + left, (0, 1)))
            refined = np.exp(rule + left + right - log_z)
            w_counts[r] += refined
            mu_b[e] = refined.sum()
    tags = np.exp(obot[items.tag_i, items.tag_i + 1, items.tag_t] + bot[items.tag_i, items.tag_i + 1, items.tag_t]
                  - log_z)
    e_counts = np.zeros((n, items.n_labels, k))
    e_counts[items.tag_i, items.tag_t] = tags
    mu_bot = np.exp(_lse(obot + bot, 3) - log_z)
    mu_top = np.exp(_lse(otop + top, 3) - log_z)
    return FactorMarginals(log_z, w_counts, u_counts, e_counts, mu_b, mu_u, tags.sum(axis=1), mu_bot, mu_top)
