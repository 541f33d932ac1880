"""Projective first-order inference: Eisner's (1996) dynamic program, in log space.

A sentence of ``n`` words has positions ``0..n`` (0 = ROOT); ``scores[h, m]`` (shape ``(n+1, n+1)``,
float64, log space) is the log-potential of the arc ``h -> m``; column 0 and the diagonal are
ignored, ``-inf`` marks a forbidden arc. The chart items of Eisner (1996) over a span ``s..t``:

- ``I_r[s, t]`` / ``I_l[s, t]``: incomplete, the arc ``s -> t`` / ``t -> s`` plus what lies between;
  both are that arc's score plus ``inner[s, t] = (+)_{s<=r<t} C_r[s, r] (x) C_l[r+1, t]``;
- ``C_r[s, t] = (+)_{s<r<=t} I_r[s, r] (x) C_r[r, t]`` and
  ``C_l[s, t] = (+)_{s<=r<t} C_l[s, r] (x) I_l[r, t]``: complete, headed at ``s`` / ``t``, ``C[s, s] = 0``.

Root modes: multi-root (any number of ROOT children) is the ordinary chart with ROOT at position 0
and ``log Z = C_r[0, n]``; single-root (exactly one ROOT child, Koo et al. 2007 §3.3 in the projective
case) runs the chart over the words only and ends with
``log Z = (+)_m scores[0, m] + C_l[1, m] + C_r[m, n]``.

One chart-filling routine serves both semirings (style of Rush 2020, pytorch-struct): ``(x)`` is ``+``
and ``(+)`` is a max-shifted log-sum-exp (inside, log partition) or ``max`` with backpointers
(Viterbi). Items are stored twice, indexed by (start, width) and by (end, width), so all spans of
one width are combined with a few slices: the Python loop runs over widths only. Marginals are the
gradient of ``log Z`` with respect to the scores (Smith & Smith 2007 §3.2), computed by reverse-mode
differentiation of the inside pass, i.e. the outside algorithm (Eisner 2016). Cost: O(n^3) time,
O(n^2) memory, per pass.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

__all__ = ["eisner_inside", "eisner_marginals", "eisner_viterbi"]

IR, IL, CR, CL = 0, 1, 2, 3  # item kinds, first axis of the chart arrays
_FLOOR = np.finfo(np.float64).min  # the shift used for an all -inf row (never NaN)


def _logsumexp(x: np.ndarray) -> np.ndarray:
    """Log-sum-exp over the last axis, shifted by the row maximum; an all ``-inf`` row gives ``-inf``."""
    m = x.max(axis=-1, keepdims=True)
    np.maximum(m, _FLOOR, out=m)
    return np.log(np.exp(x - m).sum(axis=-1)) + m[..., 0]


def _max(x: np.ndarray) -> np.ndarray:
    return x.max(axis=-1)


@dataclass(frozen=True)
class Semiring:
    """``(x)`` is ``+`` on log-scores; ``(+)`` is ``reduce`` over the last axis."""

    reduce: Callable[[np.ndarray], np.ndarray]
    backpointers: bool  # record the argmax of every (+) (max semiring, for the Viterbi backtrace)


LOG_SEMIRING = Semiring(_logsumexp, backpointers=False)
MAX_SEMIRING = Semiring(_max, backpointers=True)


@dataclass(frozen=True)
class Chart:
    """Filled chart over ``L`` positions. Empty cells (width 0 of I) are ``-inf``."""

    start: np.ndarray  # (4, L, L): start[k, s, w] = item k over the span s..s+w
    end: np.ndarray  # (4, L, L): end[k, t, w] = item k over the span t-w..t (same values)
    inner: np.ndarray  # (L, L): inner[s, w], shared by I_r[s, s+w] and I_l[s, s+w]
    bp_inner: np.ndarray | None  # (L, L): argmax r - s of inner
    bp_complete: np.ndarray | None  # (2, L, L): argmax r - s - 1 of C_r, r - s of C_l


def to_start_width(arc: np.ndarray) -> np.ndarray:
    """``arc`` (L, L) -> (2, L, L) with ``[0, s, w] = arc[s, s+w]`` and ``[1, s, w] = arc[s+w, s]``."""
    n = arc.shape[0]
    s, t = np.triu_indices(n, 1)
    out = np.full((2, n, n), -np.inf)
    out[0, s, t - s] = arc[s, t]
    out[1, s, t - s] = arc[t, s]
    return out


def from_start_width(g: np.ndarray) -> np.ndarray:
    """Inverse of ``to_start_width`` for ``g`` (2, L, L) -> (L, L) with a zero diagonal."""
    n = g.shape[1]
    s, t = np.triu_indices(n, 1)
    out = np.zeros((n, n))
    out[s, t] = g[0, s, t - s]
    out[t, s] = g[1, s, t - s]
    return out


def fill(arc: np.ndarray, sr: Semiring) -> Chart:
    """Eisner chart over ``arc`` (L, L), ``arc[h, m]`` every arc allowed by the caller. O(L^3)."""
    n = arc.shape[0]
    start, end = np.full((4, n, n), -np.inf), np.full((4, n, n), -np.inf)
    start[CR:, :, 0] = end[CR:, :, 0] = 0.0
    inner = np.full((n, n), -np.inf)
    bp_i = np.zeros((n, n), dtype=np.int64) if sr.backpointers else None
    bp_c = np.zeros((2, n, n), dtype=np.int64) if sr.backpointers else None
    arcs = to_start_width(arc)
    for w in range(1, n):
        k = n - w  # spans s..s+w for s in 0..k-1; the split offset j = r - s is the last axis
        x = start[CR, :k, :w] + end[CL, w:, w - 1 :: -1]  # C_r[s, s+j] + C_l[s+j+1, s+w]
        inner[:k, w] = v = sr.reduce(x)
        if bp_i is not None:
            bp_i[:k, w] = x.argmax(axis=-1)
        start[:CR, :k, w] = end[:CR, w:, w] = v + arcs[:, :k, w]
        x = np.empty((2, k, w))
        np.add(start[IR, :k, 1 : w + 1], end[CR, w:, w - 1 :: -1], out=x[0])  # I_r[s, r] + C_r[r, t]
        np.add(start[CL, :k, :w], end[IL, w:, w:0:-1], out=x[1])  # C_l[s, r] + I_l[r, t]
        start[CR:, :k, w] = end[CR:, w:, w] = sr.reduce(x)
        if bp_c is not None:
            bp_c[:, :k, w] = x.argmax(axis=-1)
    return Chart(start, end, inner, bp_i, bp_c)


def _outside(ch: Chart, g_start: np.ndarray, g_end: np.ndarray) -> np.ndarray:
    """Reverse-mode pass through a log-semiring chart (the outside algorithm). O(L^3).

    ``g_start`` / ``g_end`` (4, L, L) hold the seed adjoints d log Z / d item (start- and end-indexed,
    summed per item) and are updated in place. Returns d log Z / d arc[h, m], shape (L, L).
    """
    n = ch.inner.shape[0]
    start, end = ch.start, ch.end
    # Normalisers with -inf -> +inf: an empty item then passes back exp(-inf) = 0 instead of NaN.
    c_norm = np.where(start[CR:] == -np.inf, np.inf, start[CR:])
    i_norm = np.where(ch.inner == -np.inf, np.inf, ch.inner)
    g_arc = np.zeros((2, n, n))
    for w in range(n - 1, 0, -1):
        k = n - w
        g_c = g_start[CR:, :k, w] + g_end[CR:, w:, w]  # (2, k) adjoints of C_r, C_l
        x = np.empty((2, k, w))
        np.add(start[IR, :k, 1 : w + 1], end[CR, w:, w - 1 :: -1], out=x[0])
        np.add(start[CL, :k, :w], end[IL, w:, w:0:-1], out=x[1])
        p = np.exp(x - c_norm[:, :k, w, None]) * g_c[:, :, None]
        g_start[IR, :k, 1 : w + 1] += p[0]
        g_end[CR, w:, w - 1 :: -1] += p[0]
        g_start[CL, :k, :w] += p[1]
        g_end[IL, w:, w:0:-1] += p[1]
        g_i = g_start[:CR, :k, w] + g_end[:CR, w:, w]  # (2, k) adjoints of I_r, I_l = arc marginals
        g_arc[:, :k, w] = g_i
        x = start[CR, :k, :w] + end[CL, w:, w - 1 :: -1]
        p = np.exp(x - i_norm[:k, w, None]) * (g_i[0] + g_i[1])[:, None]
        g_start[CR, :k, :w] += p
        g_end[CL, w:, w - 1 :: -1] += p
    return from_start_width(g_arc)


def root_terms(scores: np.ndarray, ch: Chart) -> np.ndarray:
    """Single-root: ``scores[0, m] + C_l[1, m] + C_r[m, n]`` for m = 1..n, shape (n,)."""
    return scores[0, 1:] + ch.start[CL, 0, :] + ch.end[CR, -1, ::-1]


def inside_chart(scores: np.ndarray, single_root: bool, sr: Semiring) -> tuple[Chart, float]:
    """Fill the chart for a root mode; returns it and the total ((+) over all trees)."""
    if single_root:
        ch = fill(scores[1:, 1:], sr)  # words only; position p of this chart is word p + 1
        return ch, float(sr.reduce(root_terms(scores, ch)[None])[0])
    arc = scores.copy()
    arc[:, 0] = -np.inf  # nothing heads ROOT
    ch = fill(arc, sr)
    return ch, float(ch.start[CR, 0, -1])


def validate(scores: np.ndarray) -> np.ndarray:
    scores = np.asarray(scores, dtype=np.float64)
    if scores.ndim != 2 or scores.shape[0] != scores.shape[1]:
        raise ValueError(f"scores must be a square 2-D array of shape (n+1, n+1), got shape {scores.shape}")
    n = scores.shape[0] - 1
    if n < 1:
        raise ValueError(f"a sentence needs at least one word (scores of shape (2, 2) or larger), got {n}")
    used = scores[:, 1:][~np.eye(n + 1, n, -1, dtype=bool)]  # column 0 and the diagonal are ignored
    if np.isnan(used).any() or np.isposinf(used).any():
        raise ValueError("scores must not contain NaN or +inf (-inf marks a forbidden arc)")
    return scores


def eisner_inside(scores: np.ndarray, *, single_root: bool) -> float:
    """Log partition function over projective trees.

    ``scores`` (n+1, n+1) arc log-potentials -> ``log Z`` (``-inf`` when every projective tree uses
    a forbidden arc). Eisner (1996) inside pass, O(n^3).
    """
    scores = validate(scores)
    with np.errstate(divide="ignore"):
        return inside_chart(scores, single_root, LOG_SEMIRING)[1]


def eisner_marginals(scores: np.ndarray, *, single_root: bool) -> tuple[float, np.ndarray]:
    """Log partition function and arc marginals over projective trees.

    ``scores`` (n+1, n+1) -> ``(log Z, marginals)`` with ``marginals[h, m] = p(head of m is h)``,
    shape (n+1, n+1), zero in column 0 and on the diagonal. The marginals are ``d log Z / d scores``
    (Smith & Smith 2007 §3.2), computed by an outside pass that back-propagates through the inside
    pass's log-sum-exps. O(n^3). Raises ValueError when no projective tree has a finite score.
    """
    scores = validate(scores)
    n = scores.shape[0] - 1
    with np.errstate(divide="ignore"):
        ch, log_z = inside_chart(scores, single_root, LOG_SEMIRING)
        if log_z == -np.inf:
            raise ValueError("no projective tree has a finite score (every one uses a -inf arc)")
        size = ch.inner.shape[0]
        g_start, g_end = np.zeros((4, size, size)), np.zeros((4, size, size))
        marg = np.zeros((n + 1, n + 1))
        if single_root:
            p = np.exp(root_terms(scores, ch) - log_z)
            marg[0, 1:] = p
            g_start[CL, 0, :] += p
            g_end[CR, -1, ::-1] += p
            marg[1:, 1:] = _outside(ch, g_start, g_end)
        else:
            g_start[CR, 0, -1] = 1.0
            marg[:, 1:] = _outside(ch, g_start, g_end)[:, 1:]
    return log_z, marg


def eisner_viterbi(scores: np.ndarray, *, single_root: bool) -> np.ndarray:
    """Heads (n+1,) of the highest-scoring projective tree, ``heads[0] == -1``.

    Max-semiring Eisner (1996) chart with backpointers, then an O(n) backtrace; O(n^3) overall.
    Ties are broken towards the leftmost split. Raises ValueError when no projective tree has a
    finite score.
    """
    scores = validate(scores)
    n = scores.shape[0] - 1
    ch, best = inside_chart(scores, single_root, MAX_SEMIRING)
    if best == -np.inf:
        raise ValueError("no projective tree has a finite score (every one uses a -inf arc)")
    heads = np.full(n + 1, -1, dtype=np.int64)
    if single_root:
        m = int(np.argmax(root_terms(scores, ch)))  # chart position m is word m + 1
        heads[m + 1] = 0
        _backtrace(ch, [(CL, 0, m), (CR, m, n - 1 - m)], heads, offset=1)
    else:
        _backtrace(ch, [(CR, 0, n)], heads, offset=0)
    return heads


def _backtrace(ch: Chart, stack: list[tuple[int, int, int]], heads: np.ndarray, offset: int) -> None:
    """Follow backpointers from the items ``(kind, start, width)`` on ``stack``, writing ``heads``.

    Chart position ``p`` is sentence position ``p + offset``. O(n): each word's arc is visited once.
    """
    bp_i, bp_c = ch.bp_inner, ch.bp_complete
    assert bp_i is not None and bp_c is not None, "backtrace needs a max-semiring chart"
    while stack:
        kind, s, w = stack.pop()
        if w == 0:
            continue
        if kind == CR:
            j = int(bp_c[0, s, w]) + 1
            stack += [(IR, s, j), (CR, s + j, w - j)]
        elif kind == CL:
            j = int(bp_c[1, s, w])
            stack += [(CL, s, j), (IL, s + j, w - j)]
        else:
            if kind == IR:
                heads[s + w + offset] = s + offset
            else:
                heads[s + offset] = s + w + offset
            j = int(bp_i[s, w])
            stack += [(CR, s, j), (CL, s + j + 1, w - j - 1)]
