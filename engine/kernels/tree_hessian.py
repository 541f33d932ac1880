"""Hessian-vector products of the log partition function over dependency trees.

With arc scores ``s`` (log-potentials, shape (n+1, n+1), index 0 = ROOT, ``-inf`` = forbidden arc),
the arc marginals are ``mu = d log Z / d s`` and their Jacobian is the Hessian of ``log Z``, the
covariance of the arc indicators under the tree distribution:

    H v = d mu / d s . v = E[y (v . y)] - mu (mu . v)          (symmetric, so also the VJP of mu)

This is what reverse-mode differentiation needs wherever arc marginals are computed from scores: the
TREE/PTREE factor's messages inside BP (Gormley et al. 2015 §3.4, Fig. 2 C.2) and the softened MBR
decoder of the annealed risk (§3.2 eq. 10-11, Fig. 2 E.2). Both kernels are exact up to rounding and
O(n^3), like the marginals themselves:

- **Matrix-Tree** (non-projective; Smith & Smith 2007 §3, Koo et al. 2007 for single-root). With
  ``A = exp(s)`` (column-scaled), ``K = sum_f A_f E_f`` the Kirchhoff matrix and ``d_f = tr(K^-1 E_f)``,
  the marginals are ``mu_f = A_f d_f``. Differentiating ``d_f`` gives the closed form

      H v = v * mu - A * D(X^T),   X = K^-1 W K^-1,   W = sum_e v_e A_e E_e

  where ``D`` is the map from a cell-wise adjoint of ``K`` to arcs (``matrix_tree.arc_derivative``)
  and ``W`` is the Kirchhoff matrix of the signed weights ``v * A``: two solves and a matrix product.
  Gormley et al. left the non-projective TREE factor to future work (§3.4); this is it. The
  Hessian is invariant to the column scaling, which is applied as in the marginals.
- **Eisner** (projective; Gormley et al. §3.5, backpropagation through inside-outside on the
  hypergraph). ``v . mu`` is the directional derivative of ``log Z``: a forward-mode (tangent) inside
  pass computes it, and reverse mode through both the tangent pass and the inside pass gives its
  gradient ``H v``. In log space the tangent of an item is the expectation of ``v . y`` over the
  item's sub-derivations, a probability-weighted average bounded by ``|v|_1``, and every adjoint is a
  probability times a difference of such averages: nothing is exponentiated unnormalised, so the
  signs that ``v`` and the covariance take need no signed log-space representation.
"""

from __future__ import annotations

import numpy as np

from engine.kernels.eisner import (
    CL,
    CR,
    IL,
    IR,
    LOG_SEMIRING,
    Chart,
    fill,
    from_start_width,
    root_terms,
    to_start_width,
)
from engine.kernels.exact import TreeConstraint
from engine.kernels.matrix_tree import arc_derivative, check_scores, kirchhoff, laplacian

__all__ = ["eisner_hvp", "matrix_tree_hvp", "tree_hvp"]


def matrix_tree_hvp(scores: np.ndarray, v: np.ndarray, *, single_root: bool) -> tuple[np.ndarray, np.ndarray]:
    """Marginals and ``H v`` over non-projective trees, batched.

    ``scores``, ``v``: (B, n+1, n+1) or (n+1, n+1); ``v`` is read only where the arc is allowed.
    Returns ``(mu, hv)`` of the same shape (column 0 and the diagonal zero). O(n^3) per sentence:
    one LU inverse and two matrix products. The inverse is taken as in ``matrix_tree_marginals``; for
    the rare sentences whose LU determinant that function distrusts (reciprocal condition number
    below 1e-6) it is used anyway, so ``hv`` may lose digits there.
    """
    scores = check_scores(scores)
    single = scores.ndim == 2
    batch = scores[None] if single else scores
    vb = np.asarray(v, dtype=np.float64).reshape(batch.shape)
    a, _, k = kirchhoff(batch, single_root)  # a: (B, n+1, n+1) column-scaled weights, zero where forbidden
    inv = np.linalg.inv(k)
    d = arc_derivative(np.swapaxes(inv, 1, 2), single_root)
    mu = a * d
    av = np.where(a > 0, a * vb, 0.0)  # v on allowed arcs only (v may be anything where A = 0)
    x = inv @ laplacian(av[:, :, 1:], single_root) @ inv
    hv = np.where(a > 0, vb, 0.0) * mu - a * arc_derivative(np.swapaxes(x, 1, 2), single_root)
    hv[:, :, 0] = 0.0
    return (mu[0], hv[0]) if single else (mu, hv)


def _tangent(ch: Chart, varc: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Forward-mode pass over a filled log-semiring chart: the tangent of every item along arc-score
    direction ``varc`` (2, L, L) (start-width layout). Each tangent is the expected ``v . y`` over the
    item's sub-derivations. Returns (tangent by start, by end, of ``inner``). O(L^3)."""
    n = ch.inner.shape[0]
    start, end = ch.start, ch.end
    c_norm = np.where(start[CR:] == -np.inf, np.inf, start[CR:])
    i_norm = np.where(ch.inner == -np.inf, np.inf, ch.inner)
    t_start, t_end, t_inner = np.zeros((4, n, n)), np.zeros((4, n, n)), np.zeros((n, n))
    for w in range(1, n):
        k = n - w
        p = np.exp(start[CR, :k, :w] + end[CL, w:, w - 1 :: -1] - i_norm[:k, w, None])
        t_inner[:k, w] = ti = (p * (t_start[CR, :k, :w] + t_end[CL, w:, w - 1 :: -1])).sum(axis=-1)
        t_start[:CR, :k, w] = t_end[:CR, w:, w] = ti + varc[:, :k, w]
        p2, u2 = _complete_terms(ch, t_start, t_end, c_norm, w)
        t_start[CR:, :k, w] = t_end[CR:, w:, w] = (p2 * u2).sum(axis=-1)
    return t_start, t_end, t_inner


def _complete_terms(ch: Chart, t_start: np.ndarray, t_end: np.ndarray, c_norm: np.ndarray,
                    w: int) -> tuple[np.ndarray, np.ndarray]:
    """For the complete items of width ``w``: the split probabilities p (2, k, w) and the tangent sums
    of the split's two children u (2, k, w); [0] = C_r (I_r + C_r), [1] = C_l (C_l + I_l)."""
    k = ch.inner.shape[0] - w
    start, end = ch.start, ch.end
    x = np.empty((2, k, w))
    np.add(start[IR, :k, 1 : w + 1], end[CR, w:, w - 1 :: -1], out=x[0])
    np.add(start[CL, :k, :w], end[IL, w:, w:0:-1], out=x[1])
    p = np.exp(x - c_norm[:, :k, w, None])
    u = np.empty((2, k, w))
    np.add(t_start[IR, :k, 1 : w + 1], t_end[CR, w:, w - 1 :: -1], out=u[0])
    np.add(t_start[CL, :k, :w], t_end[IL, w:, w:0:-1], out=u[1])
    return p, u


def _second_outside(ch: Chart, tangents: tuple[np.ndarray, np.ndarray, np.ndarray],
                    gd: tuple[np.ndarray, np.ndarray], gb: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
    """Reverse mode through the tangent and inside passes together. O(L^3).

    ``gd`` / ``gb`` (start- and end-indexed (4, L, L)) hold the seed adjoints of the items' tangents and
    values and are updated in place. For an item ``i = (+)_k x_k`` with split probabilities
    ``p_k = exp(x_k - i)`` and tangent ``t_i = sum_k p_k u_k``, the adjoints go to the children as
    ``gd_child += p_k gd_i`` and ``gb_child += p_k (gd_i (u_k - t_i) + gb_i)``. Returns
    d f / d arc score (L, L), f being what the seeds differentiate."""
    n = ch.inner.shape[0]
    start, end = ch.start, ch.end
    t_start, t_end, t_inner = tangents
    (gd_s, gd_e), (gb_s, gb_e) = gd, gb
    c_norm = np.where(start[CR:] == -np.inf, np.inf, start[CR:])
    i_norm = np.where(ch.inner == -np.inf, np.inf, ch.inner)
    g_arc = np.zeros((2, n, n))
    for w in range(n - 1, 0, -1):
        k = n - w
        d_c = gd_s[CR:, :k, w] + gd_e[CR:, w:, w]  # (2, k) adjoints of the complete items' tangents
        b_c = gb_s[CR:, :k, w] + gb_e[CR:, w:, w]  # ... and of their values
        p, u = _complete_terms(ch, t_start, t_end, c_norm, w)
        pd = p * d_c[:, :, None]
        pb = pd * (u - t_start[CR:, :k, w, None]) + p * b_c[:, :, None]
        for g_s, g_e, val in ((gd_s, gd_e, pd), (gb_s, gb_e, pb)):
            g_s[IR, :k, 1 : w + 1] += val[0]
            g_e[CR, w:, w - 1 :: -1] += val[0]
            g_s[CL, :k, :w] += val[1]
            g_e[IL, w:, w:0:-1] += val[1]
        d_i = gd_s[:CR, :k, w] + gd_e[:CR, w:, w]  # (2, k) incomplete items I_r, I_l
        b_i = gb_s[:CR, :k, w] + gb_e[:CR, w:, w]
        g_arc[:, :k, w] = b_i  # I = inner + arc score; its tangent adds v, a constant
        d_in, b_in = d_i.sum(axis=0), b_i.sum(axis=0)
        p = np.exp(start[CR, :k, :w] + end[CL, w:, w - 1 :: -1] - i_norm[:k, w, None])
        u = t_start[CR, :k, :w] + t_end[CL, w:, w - 1 :: -1]
        pd = p * d_in[:, None]
        pb = pd * (u - t_inner[:k, w, None]) + p * b_in[:, None]
        for g_s, g_e, val in ((gd_s, gd_e, pd), (gb_s, gb_e, pb)):
            g_s[CR, :k, :w] += val
            g_e[CL, w:, w - 1 :: -1] += val
    return from_start_width(g_arc)


def eisner_hvp(scores: np.ndarray, v: np.ndarray, *, single_root: bool) -> np.ndarray:
    """``H v`` (n+1, n+1) of ``log Z`` over projective trees (Gormley et al. 2015 §3.5).

    ``scores`` (n+1, n+1) arc log-potentials, ``v`` (n+1, n+1) a direction (read only on allowed
    arcs). One inside pass, one tangent pass and one reverse pass over Eisner's chart: O(n^3).
    """
    scores = np.asarray(scores, dtype=np.float64)
    n = scores.shape[0] - 1
    v = np.where(np.isfinite(scores), np.asarray(v, dtype=np.float64), 0.0)
    hv = np.zeros((n + 1, n + 1))
    with np.errstate(divide="ignore"):
        if single_root:
            ch = fill(scores[1:, 1:], LOG_SEMIRING)
            varc = np.where(np.isfinite(to_start_width(v[1:, 1:])), to_start_width(v[1:, 1:]), 0.0)
        else:
            arc = scores.copy()
            arc[:, 0] = -np.inf
            ch = fill(arc, LOG_SEMIRING)
            varc = np.where(np.isfinite(to_start_width(v)), to_start_width(v), 0.0)
        tangents = _tangent(ch, varc)
        t_start, t_end, _ = tangents
        size = ch.inner.shape[0]
        gd = (np.zeros((4, size, size)), np.zeros((4, size, size)))
        gb = (np.zeros((4, size, size)), np.zeros((4, size, size)))
        if single_root:  # log Z = (+)_m scores[0, m] + C_l[1, m] + C_r[m, n]
            x = root_terms(scores, ch)
            p = np.exp(x - np.logaddexp.reduce(x))
            u = v[0, 1:] + t_start[CL, 0, :] + t_end[CR, -1, ::-1]
            pb = p * (u - (p * u).sum())
            hv[0, 1:] = pb
            for (g_s, g_e), val in ((gd, p), (gb, pb)):
                g_s[CL, 0, :] += val
                g_e[CR, -1, ::-1] += val
            hv[1:, 1:] = _second_outside(ch, tangents, gd, gb)
        else:
            gd[0][CR, 0, -1] = 1.0
            hv[:, 1:] = _second_outside(ch, tangents, gd, gb)[:, 1:]
    return hv


def tree_hvp(scores: np.ndarray, v: np.ndarray, constraint: TreeConstraint) -> np.ndarray:
    """``H v`` for a batch (B, n+1, n+1) of same-length sentences, by the kernel ``constraint`` names."""
    if not constraint.projective:
        return matrix_tree_hvp(scores, v, single_root=constraint.single_root)[1]
    return np.stack([eisner_hvp(s, x, single_root=constraint.single_root) for s, x in zip(scores, v, strict=True)])
