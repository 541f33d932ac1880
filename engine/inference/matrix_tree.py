"""Non-projective first-order inference by the Matrix-Tree theorem.

The log partition function over all spanning arborescences rooted at ROOT and the arc marginals,
for both root modes:

- multi-root: any number of words may attach to ROOT. ``Z = det K`` with the Kirchhoff matrix of
  Smith & Smith (2007) §3.1 eq. 6: ``K[m, m] = sum_{h != m} A[h, m]`` (ROOT included) and
  ``K[h, m] = -A[h, m]`` for words ``h != m``, where ``A = exp(scores)``.
- single-root: exactly one word attaches to ROOT (UD trees). Koo et al. (2007) §3.3: the same
  matrix without the ROOT weights on the diagonal and with its first row replaced by the ROOT
  weights ``A[0, 1..n]``.

Marginals are the gradient of ``log Z`` with respect to the arc scores (Smith & Smith 2007 §3.2,
eq. 7-13): with ``G = (K^{-1})^T = d log det K / d K``, the marginal of ``h -> m`` is ``A[h, m]``
times the sum of ``G`` over the cells of ``K`` that ``A[h, m]`` enters.

Numerics: every tree picks exactly one head per word, so subtracting each column's maximum score
from the column changes ``log Z`` by a constant and leaves the marginals unchanged (this scales each
column of ``K``). Every entry of ``A`` is then in ``[0, 1]`` and the determinant is taken with
``slogdet``. When the LU determinant cannot be trusted (a cycle of dominant arcs left only through
far weaker arcs makes ``K`` numerically singular), the sentence is recomputed by subtraction-free
log-space elimination (``tree_elimination``), so scores of any magnitude give exact, finite results.
All functions accept a batch of sentences of one length, shape ``(B, n + 1, n + 1)``, as well as a
single ``(n + 1, n + 1)`` matrix.
Cost: O(n^3) per sentence (one LU factorisation and one inverse).
"""

from __future__ import annotations

import numpy as np

from engine.inference.tree_elimination import eliminate_log_partition, eliminate_marginals

__all__ = ["matrix_tree_log_partition", "matrix_tree_marginals"]


def _check(scores: np.ndarray) -> np.ndarray:
    scores = np.asarray(scores, dtype=np.float64)
    if scores.ndim not in (2, 3) or scores.shape[-1] != scores.shape[-2]:
        raise ValueError(f"scores must have shape (n+1, n+1) or (B, n+1, n+1), got {scores.shape}")
    if scores.shape[-1] < 2:
        raise ValueError("a sentence needs at least one word (scores of shape (2, 2) or larger)")
    if not (scores < np.inf).all():  # one pass finds NaN and +inf
        raise ValueError("scores must not contain NaN or +inf (-inf marks a forbidden arc)")
    return scores


def _kirchhoff(scores: np.ndarray, single_root: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Column-normalised weights and Kirchhoff matrix.

    ``scores`` (B, n+1, n+1) -> (A (B, n+1, n+1) in [0, 1] with zero diagonal and column 0,
    column shifts c (B, n) with ``log Z = sum(c) + log det K``, K (B, n, n)).
    """
    n = scores.shape[-1] - 1
    s = scores[:, :, 1:].copy()  # (B, n+1, n): heads 0..n, dependents 1..n
    words = np.arange(n)
    s[:, words + 1, words] = -np.inf  # no self loops
    shift = s.max(axis=1)  # (B, n)
    if not np.isfinite(shift).all():
        raise ValueError("some word has no allowed head (a whole column of scores is -inf)")
    a = np.exp(s - shift[:, None, :])  # (B, n+1, n)
    full = np.zeros(scores.shape)
    full[:, :, 1:] = a
    return full, shift, laplacian(a, single_root)


def laplacian(a: np.ndarray, single_root: bool) -> np.ndarray:
    """The Kirchhoff matrix (B, n, n) of arc weights ``a`` (B, n+1, n) = heads 0..n x words 1..n, with
    a zero weight on every self loop. Linear in ``a``, so it also maps signed weights (tangents)."""
    n = a.shape[-1]
    words = np.arange(n)
    root, arcs = a[:, 0, :], a[:, 1:, :]  # (B, n), (B, n, n) [h-1, m-1]
    k = -arcs
    k[:, words, words] = arcs.sum(axis=1) + (0.0 if single_root else root)
    if single_root:
        k[:, 0, :] = root
    return k


def arc_derivative(g: np.ndarray, single_root: bool) -> np.ndarray:
    """``d[b, h, m] = <dK/dA[h, m], g[b]>`` (B, n+1, n+1; column 0 zero) for a cell-wise adjoint ``g``
    (B, n, n) of the Kirchhoff matrix: with ``g = (K^-1)^T`` it is ``d log Z / d A`` (Smith & Smith 2007
    eq. 7-13), and the marginals are ``A * d``."""
    n = g.shape[-1]
    words = np.arange(n)
    g_diag = g[:, words, words]  # (B, n): cell K[m, m]
    # word heads: A[h, m] enters K[m, m] (+) and K[h, m] (-); single-root drops K[0, 0]'s sum and row 0
    d_words = g_diag[:, None, :] - g
    if single_root:
        d_words[:, :, 0] = -g[:, :, 0]
        d_words[:, 0, :] = g_diag
        d_words[:, 0, 0] = 0.0
        d_root = g[:, 0, :]
    else:
        d_root = g_diag
    d = np.zeros((len(g), n + 1, n + 1))
    d[:, 1:, 1:] = d_words
    d[:, 0, 1:] = d_root
    d[:, words + 1, words + 1] = 0.0
    return d


def _solve(
    scores: np.ndarray, single_root: bool
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """LU path for a batch: (log Z (B,), A, G = inverse-transpose of K, ok mask (B,)).

    ``ok`` is False where the determinant cannot be trusted: non-positive sign, or a reciprocal
    condition number below ``_MIN_RCOND`` (more than 6 of 16 digits lost to cancellation).
    """
    a, shift, k = _kirchhoff(scores, single_root)
    sign, logdet = np.linalg.slogdet(k)
    ok = (sign > 0) & np.isfinite(logdet)
    inv = np.zeros_like(k)
    if ok.any():
        inv[ok] = np.linalg.inv(k[ok])
        rcond = 1.0 / (np.abs(k).sum(axis=1).max(axis=1) * np.abs(inv).sum(axis=1).max(axis=1))
        ok &= np.isfinite(rcond) & (rcond > _MIN_RCOND)
    return shift.sum(axis=1) + logdet, a, np.swapaxes(inv, 1, 2), ok


_MIN_RCOND = 1e-6


def _solve_one(scores: np.ndarray, single_root: bool) -> tuple[float, np.ndarray] | None:
    """``(log Z, marginals)`` of one sentence (n+1, n+1) by the LU path of ``_solve`` and
    ``arc_derivative``: the same arithmetic without the batch axis and with about half the array
    operations (at sentence lengths numpy's per-call overhead, not the O(n^3) algebra, dominates; loopy
    BP calls this once or twice per iteration through the tree factor). None where the LU path cannot
    be trusted (same tests as ``_solve``)."""
    n = scores.shape[-1] - 1
    s = scores[:, 1:].copy()  # heads 0..n x words 1..n
    s.reshape(-1)[n::n + 1] = -np.inf  # no self loops: s[m, m - 1]
    shift = s.max(axis=0)
    if not np.isfinite(shift).all():
        raise ValueError("some word has no allowed head (a whole column of scores is -inf)")
    a = np.exp(s - shift)
    root, arcs = a[0], a[1:]  # (n,), (n, n) [h - 1, m - 1]
    k = -arcs
    k.reshape(-1)[:: n + 1] = arcs.sum(axis=0) if single_root else arcs.sum(axis=0) + root
    if single_root:
        k[0] = root
    sign, logdet = np.linalg.slogdet(k)
    if not (sign > 0 and np.isfinite(logdet)):
        return None
    inv = np.linalg.inv(k)
    rcond = 1.0 / (np.abs(k).sum(axis=0).max() * np.abs(inv).sum(axis=0).max())
    if not rcond > _MIN_RCOND:  # also catches NaN
        return None
    g = inv.T  # d log det K / d K
    g_diag = np.diagonal(g)
    d_words = g_diag - g  # [h - 1, m - 1]: A[h, m] enters K[m, m] (+) and K[h, m] (-)
    if single_root:
        d_words[:, 0] = -g[:, 0]
        d_words[0] = g_diag
        d_words[0, 0] = 0.0
        d_root = g[0]
    else:
        d_root = g_diag
    marg = np.zeros((n + 1, n + 1))
    marg[1:, 1:] = arcs * d_words
    marg[0, 1:] = root * d_root
    np.clip(marg, 0.0, 1.0, out=marg)
    marg /= np.maximum(marg.sum(axis=0), np.finfo(float).tiny)
    return float(shift.sum() + logdet), marg


def matrix_tree_log_partition(scores: np.ndarray, *, single_root: bool) -> np.ndarray | float:
    """Log partition function over non-projective trees.

    Parameters
    ----------
    scores : (n+1, n+1) or (B, n+1, n+1) float array, log-potentials ``scores[..., h, m]``.
    single_root : exactly one word attached to ROOT when True.

    Returns
    -------
    float, or (B,) array for a batch.

    >>> import numpy as np
    >>> round(float(np.exp(matrix_tree_log_partition(np.zeros((4, 4)), single_root=False))))
    16
    """
    scores = _check(scores)
    batch = scores[None] if scores.ndim == 2 else scores
    log_z, _, _, ok = _solve(batch, single_root)
    for b in np.flatnonzero(~ok):
        log_z[b] = eliminate_log_partition(batch[b], single_root=single_root)
    return float(log_z[0]) if scores.ndim == 2 else log_z


def matrix_tree_marginals(scores: np.ndarray, *, single_root: bool) -> tuple[np.ndarray | float, np.ndarray]:
    """Log partition function and arc marginals over non-projective trees.

    Returns ``(log_z, marginals)`` where ``marginals[..., h, m]`` is the probability that the head of
    word ``m`` is ``h`` (column 0 and the diagonal are 0; each column ``m >= 1`` sums to 1).
    Smith & Smith (2007) eq. 13; Koo et al. (2007) eq. for the single-root variant.
    """
    scores = _check(scores)
    if scores.ndim == 2:
        one = _solve_one(scores, single_root)
        if one is not None:
            return one
    batch = scores[None] if scores.ndim == 2 else scores
    log_z, a, g, ok = _solve(batch, single_root)  # g[i, j] = d log det K / d K[i, j]
    marg = a * arc_derivative(g, single_root)
    np.clip(marg, 0.0, 1.0, out=marg)
    marg /= np.maximum(marg.sum(axis=1, keepdims=True), np.finfo(float).tiny)
    marg[:, :, 0] = 0.0
    for b in np.flatnonzero(~ok):
        log_z[b], marg[b] = eliminate_marginals(batch[b], single_root=single_root)
    if scores.ndim == 2:
        return float(log_z[0]), marg[0]
    return log_z, marg
