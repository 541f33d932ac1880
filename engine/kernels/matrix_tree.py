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
column of ``K``). Every entry of ``A`` is then in ``[0, 1]`` and the determinant is taken from an LU
factorisation (``slogdet`` for a batch; for one sentence LAPACK ``dgetrf``, whose factors also give the
inverse). When the LU determinant cannot be trusted (a cycle of dominant arcs left only through far
weaker arcs makes ``K`` numerically singular), the sentence is recomputed by subtraction-free
log-space elimination (``tree_elimination``), so scores of any magnitude give exact, finite results.
All functions accept a batch of sentences of one length, shape ``(B, n + 1, n + 1)``, as well as a
single ``(n + 1, n + 1)`` matrix.
Cost: O(n^3) per sentence (one LU factorisation and one inverse).
"""

from __future__ import annotations

import numpy as np
from scipy.linalg import lapack

from engine.kernels.tree_elimination import eliminate_log_partition, eliminate_marginals

__all__ = ["matrix_tree_log_partition", "matrix_tree_marginals", "matrix_tree_word_marginals",
           "matrix_tree_word_marginals_many"]


def check_scores(scores: np.ndarray) -> np.ndarray:
    scores = np.asarray(scores, dtype=np.float64)
    if scores.ndim not in (2, 3) or scores.shape[-1] != scores.shape[-2]:
        raise ValueError(f"scores must have shape (n+1, n+1) or (B, n+1, n+1), got {scores.shape}")
    if scores.shape[-1] < 2:
        raise ValueError("a sentence needs at least one word (scores of shape (2, 2) or larger)")
    if not (scores < np.inf).all():  # one pass finds NaN and +inf
        raise ValueError("scores must not contain NaN or +inf (-inf marks a forbidden arc)")
    return scores


def kirchhoff(scores: np.ndarray, single_root: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
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


def _word_derivative(g: np.ndarray, single_root: bool, out: np.ndarray) -> np.ndarray:
    """``out[..., h, m - 1] = <dK/dA[h, m], g>`` over heads 0..n x words 1..n (``out`` (..., n+1, n), with or
    without a batch axis) for a cell-wise adjoint ``g`` (..., n, n) of the Kirchhoff matrix; the self
    loops are left as computed (their weight is 0)."""
    g_diag = np.diagonal(g, axis1=-2, axis2=-1)  # cell K[m, m]
    d_words = out[..., 1:, :]  # [h - 1, m - 1]: A[h, m] enters K[m, m] (+) and K[h, m] (-)
    np.subtract(g_diag[..., None, :], g, out=d_words)
    if single_root:  # single-root drops K[0, 0]'s sum and row 0
        d_words[..., :, 0] = -g[..., :, 0]
        d_words[..., 0, :] = g_diag
        d_words[..., 0, 0] = 0.0
        out[..., 0, :] = g[..., 0, :]
    else:
        out[..., 0, :] = g_diag
    return out


def arc_derivative(g: np.ndarray, single_root: bool) -> np.ndarray:
    """``d[b, h, m] = <dK/dA[h, m], g[b]>`` (B, n+1, n+1; column 0 zero) for a cell-wise adjoint ``g``
    (B, n, n) of the Kirchhoff matrix: with ``g = (K^-1)^T`` it is ``d log Z / d A`` (Smith & Smith 2007
    eq. 7-13), and the marginals are ``A * d``."""
    n = g.shape[-1]
    words = np.arange(n)
    d = np.zeros((len(g), n + 1, n + 1))
    _word_derivative(g, single_root, d[:, :, 1:])
    d[:, words + 1, words + 1] = 0.0
    return d


def _solve(
    scores: np.ndarray, single_root: bool
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """LU path for a batch: (log Z (B,), A, G = inverse-transpose of K, ok mask (B,)).

    ``ok`` is False where the determinant cannot be trusted: non-positive sign, or a reciprocal
    condition number below ``_MIN_RCOND`` (more than 6 of 16 digits lost to cancellation).
    """
    a, shift, k = kirchhoff(scores, single_root)
    sign, logdet = np.linalg.slogdet(k)
    ok = (sign > 0) & np.isfinite(logdet)
    inv = np.zeros_like(k)
    if ok.any():
        inv[ok] = np.linalg.inv(k[ok])
        rcond = 1.0 / (np.abs(k).sum(axis=1).max(axis=1) * np.abs(inv).sum(axis=1).max(axis=1))
        ok &= np.isfinite(rcond) & (rcond > _MIN_RCOND)
    return shift.sum(axis=1) + logdet, a, np.swapaxes(inv, 1, 2), ok


_MIN_RCOND = 1e-6
_TINY = np.finfo(float).tiny


def _lu_one(k: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """``(G, u)`` for one Kirchhoff matrix K (n, n), overwritten: ``G = (K^-1)^T = d log det K / d K``
    and ``u`` the diagonal of U, so ``log det K = sum(log |u|)``. One LAPACK LU of K^T (``dgetrf``: K^T is
    K's memory read in Fortran order, factored in place) serves both the determinant's sign and the
    inverse (``dgetri`` inverts K^T, which is G): ``np.linalg.slogdet`` and ``inv`` would factor K twice.
    None where the LU path cannot be trusted, by the tests of ``_solve``: a singular K or det K <= 0, or a
    reciprocal condition number ``1 / (||K||_1 ||K^-1||_1)`` at most ``_MIN_RCOND`` (the norms by LAPACK
    ``dlange``: ||K||_1 is K^T's largest absolute row sum, ||K^-1||_1 is G's)."""
    norm = lapack.dlange("I", k.T)  # type: ignore[call-arg]  # scipy-stubs types dlange with one argument
    lu, piv, info = lapack.dgetrf(k.T, overwrite_a=True)
    if info != 0:  # an exactly zero pivot: singular
        return None
    u = lu.diagonal().copy()
    # det K = prod(u) (-1)^(row swaps); the product keeps its sign through underflow and overflow
    if np.signbit(np.multiply.reduce(u)) != bool(np.count_nonzero(piv != np.arange(len(piv))) % 2):
        return None
    g, info = lapack.dgetri(lu, piv, overwrite_lu=True)
    rcond = 1.0 / (norm * lapack.dlange("I", g))  # type: ignore[call-arg]  # (norm, a) as above
    if info != 0 or not rcond > _MIN_RCOND:  # also catches NaN
        return None
    return g, u


def _word_scores(scores: np.ndarray) -> np.ndarray:
    """The word columns of a score matrix (n+1, n+1): ``s[h, m - 1] = scores[h, m]`` (n+1, n), with -inf on
    the self loops ``s[m, m - 1]``."""
    n = scores.shape[-1] - 1
    s = scores[:, 1:].copy()
    s.reshape(-1)[n::n + 1] = -np.inf
    return s


def _solve_one(s: np.ndarray, single_root: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """``(marginals (n+1, n+1), column shifts, u)`` of one sentence from its word columns ``s`` (n+1, n;
    ``_word_scores``), with ``log Z = sum(shifts) + sum(log |u|)``, by the LU path of ``_solve`` and
    ``arc_derivative``: the same formulas, equal up to rounding, without the batch axis, with one LU
    factorisation (``_lu_one``) and about half the array operations (at sentence lengths numpy's
    per-call overhead, not the O(n^3) algebra, dominates; loopy BP calls this once per iteration through
    the tree factor, which needs no log Z). None where the LU path cannot be trusted."""
    n = s.shape[-1]
    shift = np.maximum.reduce(s, axis=0)
    if not np.minimum.reduce(shift) > -np.inf:  # also NaN
        raise ValueError("some word has no allowed head (a whole column of scores is -inf)")
    a = np.exp(s - shift)
    root, arcs = a[0], a[1:]  # (n,), (n, n) [h - 1, m - 1]
    k = -arcs
    heads = np.add.reduce(arcs, axis=0)  # each word's total word-head weight
    k.reshape(-1)[:: n + 1] = heads if single_root else heads + root
    if single_root:
        k[0] = root
    lu = _lu_one(k)
    if lu is None:
        return None
    g, u = lu  # g = d log det K / d K
    # d log Z / d A over heads 0..n x words 1..n: the marginals are A * d
    d = _word_derivative(g, single_root, np.empty((n + 1, n)))
    words = np.multiply(a, d, out=d)
    np.maximum(words, 0.0, out=words)  # then no entry exceeds its column's sum: no clip at 1 is needed
    words /= np.maximum(np.add.reduce(words, axis=0), _TINY)
    marg = np.zeros((n + 1, n + 1))
    marg[:, 1:] = words
    return marg, shift, u


def _solve_many(s: np.ndarray, single_root: bool, lengths: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """``_solve_one`` for a stack of sentences of one length: word columns ``s`` (B, n+1, n) -> (word marginals
    (B, n+1, n), ok (B,)), with one ``np.linalg.inv`` for the stack and no log Z. Only the reciprocal
    condition number is tested: above ``_MIN_RCOND`` the LU determinant is accurate to many digits, so
    its sign is the true one (positive: det K is a sum of tree weights), which ``_lu_one`` tests
    separately. Raises ``np.linalg.LinAlgError`` if some K is exactly singular. ``lengths`` (B,): sentence b has
    only its first ``lengths[b]`` words, the rest are padding with no allowed arc (``-inf`` columns and rows);
    their block of K is the identity, so K is block-diagonal and the words' marginals are the sentence's own."""
    shift = np.maximum.reduce(s, axis=1)[:, None, :]
    pad = None
    if lengths is not None:
        pad = np.arange(s.shape[-1]) >= np.asarray(lengths)[:, None]  # (B, n): padding columns
        shift = np.where(pad[:, None, :], 0.0, shift)
    a = np.exp(s - shift)
    k = laplacian(a, single_root)
    if pad is not None:
        at, word = np.nonzero(pad)
        k[at, word, word] = 1.0  # the rest of a padding row and column is 0 already
    g = np.linalg.inv(k.transpose(0, 2, 1))  # (K^T)^-1 = d log det K / d K
    rcond = 1.0 / (np.abs(k).sum(axis=1).max(axis=1) * np.abs(g).sum(axis=2).max(axis=1))
    ok = rcond > _MIN_RCOND  # also False for NaN
    d = _word_derivative(g, single_root, np.empty(s.shape))
    out = np.multiply(a, d, out=d)
    np.maximum(out, 0.0, out=out)
    out /= np.maximum(np.add.reduce(out, axis=1), _TINY)[:, None, :]
    return out, ok


def matrix_tree_word_marginals_many(words: np.ndarray, *, single_root: bool,
                                    lengths: np.ndarray | None = None) -> np.ndarray:
    """``matrix_tree_word_marginals`` for a stack of sentences of one length: ``words`` (B, n+1, n) ->
    marginals (B, n+1, n + 1). One batched inverse for the stack; a sentence whose LU path cannot be
    trusted takes ``matrix_tree_word_marginals`` (and its fallback) alone. ``lengths`` (B,): shorter
    sentences padded to n words (``_solve_many``); their padding rows and columns of the marginals are 0."""
    try:
        cols, ok = _solve_many(words, single_root, lengths)
    except np.linalg.LinAlgError:  # some K exactly singular: each sentence alone
        cols, ok = np.zeros(words.shape), np.zeros(len(words), dtype=bool)
    marg = np.zeros((*words.shape[:2], words.shape[1]))
    marg[:, :, 1:] = cols
    for b in np.flatnonzero(~ok):
        n = words.shape[-1] if lengths is None else int(lengths[b])
        marg[b] = 0.0
        marg[b, :n + 1, :n + 1] = matrix_tree_word_marginals(words[b, :n + 1, :n], single_root=single_root)
    return marg


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
    scores = check_scores(scores)
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
    scores = check_scores(scores)
    if scores.ndim == 2:
        one = _solve_one(_word_scores(scores), single_root)
        if one is not None:
            marg, shift, u = one
            return float(shift.sum() + np.log(np.abs(u)).sum()), marg
    return _batch_marginals(scores, single_root)


def matrix_tree_word_marginals(words: np.ndarray, *, single_root: bool) -> np.ndarray:
    """The marginals (n+1, n+1) of ``matrix_tree_marginals`` for one sentence, without log Z, from the
    word columns of its scores, ``words[h, m - 1] = scores[h, m]`` (n+1, n), with -inf on every forbidden
    arc including the self loops; not checked further. This is what BP's tree factor needs
    (``engine.graph.tree``), in fewer array operations. The same fallback to ``tree_elimination`` where
    the LU path cannot be trusted."""
    one = _solve_one(words, single_root)
    if one is not None:
        return one[0]
    scores = np.full((words.shape[0], words.shape[0]), -np.inf)
    scores[:, 1:] = words
    return _batch_marginals(check_scores(scores), single_root)[1]


def _batch_marginals(scores: np.ndarray, single_root: bool) -> tuple[np.ndarray | float, np.ndarray]:
    """``matrix_tree_marginals`` by the batched LU path, and by elimination where that path cannot be
    trusted; one sentence (n+1, n+1) gives ``(float, (n+1, n+1))``."""
    batch = scores[None] if scores.ndim == 2 else scores
    log_z, a, g, ok = _solve(batch, single_root)  # g[i, j] = d log det K / d K[i, j]
    marg = a * arc_derivative(g, single_root)
    np.clip(marg, 0.0, 1.0, out=marg)
    marg /= np.maximum(marg.sum(axis=1, keepdims=True), _TINY)
    marg[:, :, 0] = 0.0
    for b in np.flatnonzero(~ok):
        log_z[b], marg[b] = eliminate_marginals(batch[b], single_root=single_root)
    if scores.ndim == 2:
        return float(log_z[0]), marg[0]
    return log_z, marg
