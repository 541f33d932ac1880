"""NOCROSS: crossing-link factors for every pair of words (Smith & Eisner 2008 §3.4, §5.3 eq. 9, fn. 20-21).

NOCROSS_{j,l} (words j != l, both >= 1) looks at every variable ``L[i, j]`` (the heads of j) and
``L[k, l]`` (the heads of l). Its value is 0 unless j and l each have exactly one head (it incorporates
EXACTLY1_j and EXACTLY1_l); then it is ``x = exp(w)`` if the arc ``i -> j`` crosses ``k -> l`` and 1
if not. Two arcs cross when their spans strictly interleave (``lo1 < lo2 < hi1 < hi2`` or the other
way round); arcs sharing an endpoint never cross; ROOT (position 0) is an ordinary position.

Factors, weights and messages
-----------------------------
``theta`` is (n+1, n+1), indexed ``[j, l]``. Crossing is symmetric, so NOCROSS_{j,l} and NOCROSS_{l,j}
would have the same neighbours and the same crossing indicator. By default (``ordered=False``) the
family has **one factor per unordered pair j < l**, with crossing log-weight ``theta[j, l] + theta[l, j]``:
the same distribution as one factor per ordered pair (their product), without giving BP two
identical factors to double-count. ``ordered=True`` builds the literal family of one factor per
ordered pair (j, l) with log-weight ``theta[j, l]``. ``log_potential`` is the same in both modes.

Slot messages are dense (n+1, n+1, n+1) arrays indexed by the factor (j, l) and then a head:

    slot 0: ``msg[j, l, i]``  between factor (j, l) and ``L[i, j]``
    slot 1: ``msg[j, l, k]``  between factor (j, l) and ``L[k, l]``

They are 0 outside the factors of the family (j == l, j or l == 0, and j > l unless ``ordered``) and
at heads that are not variables (``valid[i, j]`` false). ``scatter`` sums over the factors an arc is in.

Propagation (eq. 9), per factor in O(n)
---------------------------------------
With ``q_i``, ``p_k`` the incoming odds of ``L[i, j]`` and ``L[k, l]``, the factor's message to
``L[i, j]`` has odds ``C_i / sum_{i' != i} q_i' C_i'`` where ``C_i = sum_k p_k x^cross(i->j, k->l)``
(the EXACTLY1 part is as in EXACTLY1_j). The heads k of l crossing ``i -> j`` form a range of
positions (fn. 20, generalised to either direction of the arc; lo, hi = min, max(i, j)):

    l inside (lo, hi):      crossing k < lo or k > hi;    non-crossing lo <= k <= hi
    l outside [lo, hi]:     crossing lo < k < hi;         non-crossing k <= lo or k >= hi
    l == i:                 none cross (fn. 21)

so ``C_i`` needs range sums of the p's. Everything is kept in log space; no mass is ever subtracted:
the sums over a range come from per-factor log-space prefix sums (``k < x``), suffix sums (``k >= x``)
and sums between the factor's fixed word j and x (on either side), and ``C_i`` is formed without
subtraction as ``T + (x - 1) cross_i`` when ``w >= 0`` and ``x T + (1 - x) noncross_i`` when
``w < 0`` (``T`` = all heads of l), which also makes ``w = -inf`` (a hard no-crossing constraint) exact.
The same computation with the roles of j and l swapped gives the messages to ``L[k, l]``. The leave-one-
out sum over ``i' != i`` uses the largest term as the scale (relative error below ``n`` ulps). Total
O(n^3) time and memory, vectorised over all factors and heads. The paper's partial sums ``Q_l`` are
shared by all factors NOCROSS_{j', l}; here each factor gets its own, because in BP the message from
``L[k, l]`` to a factor excludes that factor's own message and so differs from factor to factor.

With TREE in the graph the EXACTLY1 parts are redundant, and loopy BP double-counts them: beliefs
are then no better than with TREE + a redundant EXACTLY1 family (measured in tests/engine/graph/test_nocross.py).
"""

from __future__ import annotations

import numpy as np

from engine.graph.childseq import logaddexp_fast, logsumexp_fast
from engine.graph.family import FactorFamily, Messages

_NEG = -np.inf


def _crosses(i: np.ndarray, j: np.ndarray, k: np.ndarray, l: np.ndarray) -> np.ndarray:  # noqa: E741
    """Whether arcs (i, j) and (k, l) cross: strictly interleaved endpoints (broadcasts)."""
    lo1, hi1 = np.minimum(i, j), np.maximum(i, j)
    lo2, hi2 = np.minimum(k, l), np.maximum(k, l)
    return ((lo1 < lo2) & (lo2 < hi1) & (hi1 < hi2)) | ((lo2 < lo1) & (lo1 < hi2) & (hi2 < hi1))


def _range_offsets(size: int) -> dict[str, int]:
    """Layout (first axis) of the table of log range sums built by ``_range_table``."""
    return {"pre": 0, "suf": size + 1, "mid": 2 * size + 2, "at_j": 3 * size + 2, "all": 3 * size + 3,
            "none": 3 * size + 4, "rows": 3 * size + 5}


def _range_index(size: int, kind: str) -> tuple[np.ndarray, np.ndarray]:
    """For each factor-side ``(a, b)`` (a plays j, b plays l) and head ``i`` of a, the flat positions in
    the table ``V`` of ``_range_table`` of the two entries whose log-sum is the mass of the heads k of b
    that cross (``kind="cross"``) or do not cross (``"noncross"``) the arc ``i -> a``.
    Shapes (size, size, size), indexed ``[a, b, i]``."""
    o = _range_offsets(size)
    a = np.arange(size)[:, None, None]
    b = np.arange(size)[None, :, None]
    i = np.arange(size)[None, None, :]
    lo, hi = np.minimum(i, a), np.maximum(i, a)
    inside = (lo < b) & (b < hi)
    at_i = b == i
    if kind == "cross":
        near = np.where(i < a, i + 1, i - 1)  # strictly between i and a
        first = np.where(inside, o["pre"] + lo, np.where(at_i, o["none"], o["mid"] + near))
        second = np.where(inside, o["suf"] + hi + 1, o["none"])
    else:
        first = np.where(inside, o["mid"] + i, np.where(at_i, o["all"], o["pre"] + lo + 1))
        second = np.where(inside, o["at_j"], np.where(at_i, o["none"], o["suf"] + hi))
    bad = i == a  # L[a, a] is never a variable
    first, second = np.where(bad, o["none"], first), np.where(bad, o["none"], second)
    cell = a * size + b
    dtype = np.int32 if o["rows"] * size * size < 2**31 else np.int64
    return (first * size * size + cell).astype(dtype), (second * size * size + cell).astype(dtype)


def _range_table(p: np.ndarray) -> np.ndarray:
    """Log range sums of every factor-side ``(a, b)`` from ``p[a, b, k]`` (log odds of the heads k of
    b, ``-inf`` if not a variable). Returns ``V`` of shape (3 size + 5, size, size), ``V[row, a, b]``:

        pre + x   lse_{k < x} p          x = 0..size
        suf + x   lse_{k >= x} p         x = 0..size
        mid + x   lse_{x <= k < a} p for x < a, lse_{a < k <= x} p for x > a, -inf at x = a
        at_j      p[a, b, a];   all   lse_k p;   none   -inf

    Each is a log-space running sum over k (one loop over positions, vectorised over all factors)."""
    size = p.shape[0]
    o = _range_offsets(size)
    pk = np.ascontiguousarray(p.transpose(2, 0, 1))  # [k, a, b]
    table = np.empty((o["rows"], size, size))
    acc = np.full((size, size), _NEG)
    table[o["pre"]] = _NEG
    for k in range(size):
        acc = logaddexp_fast(acc, pk[k])
        table[o["pre"] + k + 1] = acc
    acc = np.full((size, size), _NEG)
    table[o["suf"] + size] = _NEG
    for k in range(size - 1, -1, -1):
        acc = logaddexp_fast(acc, pk[k])
        table[o["suf"] + k] = acc
    mid = table[o["mid"]:o["mid"] + size]
    acc = np.full((size, size), _NEG)
    for k in range(size):  # rows a < k: sum over a < k' <= k
        mid[k, k] = _NEG
        acc[:k] = logaddexp_fast(acc[:k], pk[k, :k])
        mid[k, :k] = acc[:k]
    acc = np.full((size, size), _NEG)
    for k in range(size - 1, -1, -1):  # rows a > k: sum over k <= k' < a
        acc[k + 1:] = logaddexp_fast(acc[k + 1:], pk[k, k + 1:])
        mid[k, k + 1:] = acc[k + 1:]
    table[o["at_j"]] = pk[np.arange(size), np.arange(size)]
    table[o["all"]] = table[o["suf"]]
    table[o["none"]] = _NEG
    return table


def _log_coefficients(w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(base_scale, coef)`` so that ``log C = logaddexp(base_scale + log T, coef + log range)``:
    ``(0, log(x - 1))`` with the crossing range for ``w >= 0``, ``(w, log(1 - x))`` with the
    non-crossing range for ``w < 0``."""
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        pos = np.where(w > 1.0, w + np.log1p(-np.exp(-w)), np.log(np.expm1(np.maximum(w, 0.0))))
        neg = np.log(-np.expm1(np.minimum(w, 0.0)))
    nonneg = w >= 0
    return np.where(nonneg, 0.0, w), np.where(nonneg, pos, neg)


def _exclusive_lse(s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(out, total)`` with ``out[..., i] = log sum_{i' != i} exp(s[..., i'])`` and ``total`` the
    log-sum over the last axis. Scaled by the largest term (and, at the largest, by the second)."""
    top = s.argmax(axis=-1)[..., None]
    m1 = np.take_along_axis(s, top, axis=-1)
    m1 = np.where(np.isfinite(m1), m1, 0.0)
    e = np.exp(s - m1)
    tot = e.sum(axis=-1, keepdims=True)
    others = s.copy()
    np.put_along_axis(others, top, _NEG, axis=-1)
    m2 = others.max(axis=-1, keepdims=True)
    m2 = np.where(np.isfinite(m2), m2, 0.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        # i != argmax: the argmax term (1 after scaling) stays in the sum, so no cancellation
        out = np.log(np.maximum(tot - e, 0.0)) + m1
        at_top = np.log(np.exp(others - m2).sum(axis=-1, keepdims=True)) + m2
        total = np.log(tot) + m1
    np.put_along_axis(out, top, at_top, axis=-1)
    return out, total[..., 0]


class NoCross(FactorFamily):
    """NOCROSS_{j,l} for every pair of words; see the module docstring for the conventions."""

    name = "nocross"

    def __init__(self, n: int, valid: np.ndarray, theta: np.ndarray, *, ordered: bool = False) -> None:
        super().__init__(n, valid)
        size = n + 1
        theta = np.asarray(theta, dtype=np.float64)
        if theta.shape != (size, size):
            raise ValueError(f"NOCROSS weights must have shape {(size, size)}, got {theta.shape}")
        self.theta = theta
        self.ordered = ordered
        pos = np.arange(size)
        pair = (pos[:, None] >= 1) & (pos[None, :] >= 1) & (pos[:, None] != pos[None, :])
        self.active = pair if ordered else pair & (pos[:, None] < pos[None, :])  # the factors (j, l)
        weight = theta if ordered else theta + theta.T
        self.weight = np.where(self.active, weight, 0.0)  # crossing log-weight of each factor (j, l)
        # side weights: the computation for "a plays j, b plays l"; unordered: one symmetric pass
        sides = [np.where(pair, weight, 0.0)] if not ordered else [self.weight, self.weight.T]
        self._sides = [(w, *_log_coefficients(w), self._select(w)) for w in sides]
        self._slot_mask = (self.active[:, :, None] & valid.T[:, None, :],  # factor (j,l), head i of j
                           self.active[:, :, None] & valid.T[None, :, :])  # factor (j,l), head k of l

    def _select(self, w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        size = self.n + 1
        cross, noncross = _range_index(size, "cross"), _range_index(size, "noncross")
        nonneg = (w >= 0)[:, :, None]
        return np.where(nonneg, cross[0], noncross[0]), np.where(nonneg, cross[1], noncross[1])

    # gather / scatter ----------------------------------------------------------------------------

    def gather(self, arc: np.ndarray) -> Messages:
        arc = np.asarray(arc, dtype=np.float64)
        to_j = np.where(self._slot_mask[0], arc.T[:, None, :], 0.0)
        to_l = np.where(self._slot_mask[1], arc.T[None, :, :], 0.0)
        return to_j, to_l

    def scatter(self, messages: Messages) -> np.ndarray:
        to_j = np.where(self._slot_mask[0], messages[0], 0.0).sum(axis=1).T  # [i, j]
        to_l = np.where(self._slot_mask[1], messages[1], 0.0).sum(axis=0).T  # [k, l]
        return np.where(self.valid, to_j + to_l, 0.0)

    # propagation ---------------------------------------------------------------------------------

    def _side_inputs(self, incoming: Messages) -> list[tuple[np.ndarray, np.ndarray]]:
        """``(q, p)`` per side pass: ``q[a, b, i]`` log odds of ``L[i, a]``, ``p[a, b, k]`` of
        ``L[k, b]`` as seen by the factor on {a, b}; ``-inf`` off the variables."""
        vq = self.valid.T[:, None, :]
        vp = self.valid.T[None, :, :]
        to_j, to_l = (np.asarray(m, dtype=np.float64) for m in incoming)
        if self.ordered:
            sides = [(to_j, to_l), (to_l.transpose(1, 0, 2), to_j.transpose(1, 0, 2))]
        else:
            upper = self.active[:, :, None]
            q = np.where(upper, to_j, to_l.transpose(1, 0, 2))  # factor {a, b}'s message from L[i, a]
            sides = [(q, q.transpose(1, 0, 2))]
        return [(np.where(vq, q, _NEG), np.where(vp, p, _NEG)) for q, p in sides]

    def _side(self, q: np.ndarray, p: np.ndarray, side: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Messages to ``L[i, a]`` from the factor on {a, b} (a plays j), the factor's log partition
        and ``log C``."""
        _, base, coef, (first, second) = self._sides[side]
        table = _range_table(p)
        flat = table.reshape(-1)
        part = logaddexp_fast(np.take(flat, first), np.take(flat, second))
        log_all = table[_range_offsets(self.n + 1)["all"]]
        log_c = logaddexp_fast((base + log_all)[:, :, None], coef[:, :, None] + part)
        excl, log_z = _exclusive_lse(q + log_c)
        with np.errstate(invalid="ignore"):
            out = log_c - excl
        return np.where(np.isnan(out), 0.0, out), log_z, log_c  # nan: a factor with no support

    def propagate(self, incoming: Messages) -> Messages:
        inputs = self._side_inputs(incoming)
        if self.ordered:
            to_j = self._side(*inputs[0], 0)[0]
            to_l = self._side(*inputs[1], 1)[0].transpose(1, 0, 2)
        else:
            out = self._side(*inputs[0], 0)[0]
            to_j, to_l = out, out.transpose(1, 0, 2)
        return np.where(self._slot_mask[0], to_j, 0.0), np.where(self._slot_mask[1], to_l, 0.0)

    def pair_beliefs(self, incoming: Messages) -> np.ndarray:
        """Factor beliefs ``b(the arc into j crosses the arc into l)`` (expected counts of the crossing
        feature, §7 eq. 10), (n+1, n+1) indexed ``[j, l]``. Unordered: symmetric, the belief of the
        factor on {j, l} (the expected count for both ``theta[j, l]`` and ``theta[l, j]``). 0 off the
        factors."""
        q, p = self._side_inputs(incoming)[0]
        w = self._sides[0][0]
        size = self.n + 1
        first, second = _range_index(size, "cross")
        flat = _range_table(p).reshape(-1)
        cross = logaddexp_fast(np.take(flat, first), np.take(flat, second))
        log_z = self._side(q, p, 0)[1]
        with np.errstate(invalid="ignore"):
            b = np.exp(logsumexp_fast(q + cross, axis=2) + w - log_z)
        b = np.where(self.active & ~np.isnan(b), b, 0.0)
        return b if self.ordered else b + b.T

    def log_potential(self, y: np.ndarray) -> float:
        """``-inf`` unless every word in a factor has exactly one head; otherwise the sum of the crossing
        weights of the factors whose two arcs cross (arcs off ``valid`` ignored). The same in both modes."""
        y = np.asarray(y, dtype=bool) & self.valid
        size = self.n + 1
        in_factor = self.active.any(axis=0) | self.active.any(axis=1)
        if not (y.sum(axis=0)[in_factor] == 1).all():
            return -np.inf
        if not self.active.any():
            return 0.0
        heads = y.argmax(axis=0)
        pos = np.arange(size)
        cross = _crosses(heads[:, None], pos[:, None], heads[None, :], pos[None, :]) & self.active
        return float(np.where(cross, self.weight, 0.0).sum())
