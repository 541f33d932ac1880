"""Compiled (numba) inside and outside passes over anchored items (Hall & Klein 2012, eq. 4; brief §1.1, §1.5).

The same recurrences and the same scaled representation as the numpy pass of
:mod:`engine.constituency.inside_outside` (whose docstring states them), one item at a time instead of one span
length at a time: the numpy pass spends most of its time in the overhead of about eight vectorised steps per span
length (``docs/constituency.md``, speed table), which a loop over the items does not have.

**Scaling** (per cell and label, as the numpy pass). Inside: each labelled cell's ``K`` substates are stored with
the largest 1 and a log scale ``s[i, j, A]``. While the items of one span length arrive, ``s`` holds the running
maximum of the items' log magnitudes ``c`` (item score + the rule's largest log weight + the children's scales;
the scaled substate sums ``y`` multiplying ``exp(c)`` are at most ``K^2``, each factor being at most 1); an item
above the running maximum first rescales what the cell holds by ``exp(old - new)`` (the streaming log-sum-exp),
so no sum under- or overflows whatever the spread of the items' scores
(``test_scaled_pass_survives_extreme_scores``). The numpy pass also folds ``log max y`` into the magnitude; one
``log`` per item less here, and the two agree to 1e-13 on PTB sentences. Once the length is done each labelled
cell is renormalised to a largest substate of 1. Outside values are stored as ``o = alpha * exp(s - log Z)``; a
parent-to-child contribution carries ``exp(phi + max_r + s_children - s_parent)``, clipped at ``exp(700)``.

Arrays: charts ``(n+1, n+1, L, K)``, scales ``(n+1, n+1, L)``, rule weights ``wn (R, K, K, K)``, ``un (U, K,
K)`` already divided by ``exp(wmax)``, ``exp(umax)`` (their largest substate entry). All float64, indices int64;
``cache=True`` keeps the machine code on disk, ``nogil`` lets the service's threads run passes side by side.
"""

from __future__ import annotations

import numpy as np
from numba import njit  # type: ignore[import-untyped]

Ints = tuple[np.ndarray, ...]  # item index arrays, one per field

__all__ = ["inside_pass", "live_binary", "outside_pass"]

_CLIP = 700.0  # largest exponent taken (exp(709) overflows)


@njit(cache=True, nogil=True, inline="always")
def _add_scaled(chart: np.ndarray, scale: np.ndarray, i: int, j: int, a: int, y: np.ndarray, c: float) -> None:
    """Add ``exp(c) * y`` to the labelled cell ``(i, j, a)`` held as ``chart * exp(scale)``: ``scale`` is the
    running maximum of the items' ``c``, what the cell holds is shrunk by ``exp(old - new)`` when it rises."""
    k = y.shape[0]
    ref = scale[i, j, a]
    if c > ref:
        shrink = np.exp(ref - c) if ref > -np.inf else 0.0
        for x in range(k):
            chart[i, j, a, x] *= shrink
        scale[i, j, a] = c
        ref = c
    w = np.exp(c - ref)
    for x in range(k):
        chart[i, j, a, x] += y[x] * w


@njit(cache=True, nogil=True)
def _renormalise(chart: np.ndarray, scale: np.ndarray, n: int, length: int) -> None:
    """Each labelled cell of one span length to a largest substate of 1, its log scale raised to match."""
    size, k = chart.shape[2], chart.shape[3]
    for i in range(n - length + 1):
        j = i + length
        for a in range(size):
            if scale[i, j, a] == -np.inf:
                continue
            top = 0.0
            for x in range(k):
                if chart[i, j, a, x] > top:
                    top = chart[i, j, a, x]
            if top > 0.0:
                for x in range(k):
                    chart[i, j, a, x] /= top
                scale[i, j, a] += np.log(top)
            else:
                scale[i, j, a] = -np.inf


@njit(cache=True, nogil=True)
def _inside_binary(start: int, stop: int, bi: np.ndarray, bk: np.ndarray, bj: np.ndarray, br: np.ndarray,
                   ba: np.ndarray, bb: np.ndarray, bc: np.ndarray, phi: np.ndarray, wn: np.ndarray,
                   wmax: np.ndarray, top: np.ndarray, st: np.ndarray, bot: np.ndarray, sb: np.ndarray) -> None:
    """Binary items ``start:stop`` (one span length) into the bot chart."""
    k = wn.shape[1]
    y = np.zeros(k)
    for b in range(start, stop):
        i, m, j, r = bi[b], bk[b], bj[b], br[b]
        c = phi[b] + wmax[r] + st[i, m, bb[b]] + st[m, j, bc[b]]
        if not np.isfinite(c):
            continue
        lb, rc = bb[b], bc[b]
        for x in range(k):
            total = 0.0
            for p in range(k):
                lv = top[i, m, lb, p]
                if lv == 0.0:
                    continue
                inner = 0.0
                for q in range(k):
                    inner += wn[r, x, p, q] * top[m, j, rc, q]
                total += lv * inner
            y[x] = total
        _add_scaled(bot, sb, i, j, ba[b], y, c)


@njit(cache=True, nogil=True)
def _inside_unary(start: int, stop: int, ui: np.ndarray, uj: np.ndarray, uu: np.ndarray, ua: np.ndarray,
                  ub: np.ndarray, phi: np.ndarray, un: np.ndarray, umax: np.ndarray, bot: np.ndarray,
                  sb: np.ndarray, top: np.ndarray, st: np.ndarray) -> None:
    """Unary items ``start:stop`` (one span length) into the top chart."""
    k = un.shape[1]
    y = np.zeros(k)
    for v in range(start, stop):
        i, j, u = ui[v], uj[v], uu[v]
        c = phi[v] + umax[u] + sb[i, j, ub[v]]
        if not np.isfinite(c):
            continue
        below = bot[i, j, ub[v]]
        for x in range(k):
            total = 0.0
            for p in range(k):
                total += un[u, x, p] * below[p]
            y[x] = total
        _add_scaled(top, st, i, j, ua[v], y, c)


@njit(cache=True, nogil=True)
def inside_pass(n: int, root: int, bin_idx: Ints, bin_start: np.ndarray, un_idx: Ints,
                un_start: np.ndarray, tag_i: np.ndarray, tag_t: np.ndarray, phi_b: np.ndarray, phi_u: np.ndarray,
                lex: np.ndarray, wn: np.ndarray, wmax: np.ndarray, un: np.ndarray, umax: np.ndarray,
                bot: np.ndarray, sb: np.ndarray, top: np.ndarray, st: np.ndarray) -> float:
    """Fill the scaled inside charts (``bot``, ``top`` zero, ``sb``, ``st`` ``-inf`` on entry); return ``log Z``
    (``-inf`` when no tree is live). ``bin_idx`` rows: i, k, j, r, A, B, C; ``un_idx`` rows: i, j, u, A, B;
    ``lex (T, K)``: the tag items' log weights plus their anchored scores."""
    for v in range(len(tag_i)):
        peak = lex[v].max()
        if peak > -np.inf:
            _add_scaled(bot, sb, tag_i[v], tag_i[v] + 1, tag_t[v], np.exp(lex[v] - peak), peak)
    _renormalise(bot, sb, n, 1)
    for length in range(1, n + 1):
        if length > 1:
            _inside_binary(bin_start[length], bin_start[length + 1], bin_idx[0], bin_idx[1], bin_idx[2],
                           bin_idx[3], bin_idx[4], bin_idx[5], bin_idx[6], phi_b, wn, wmax, top, st, bot, sb)
            _renormalise(bot, sb, n, length)
        _inside_unary(un_start[length], un_start[length + 1], un_idx[0], un_idx[1], un_idx[2], un_idx[3],
                      un_idx[4], phi_u, un, umax, bot, sb, top, st)
        _renormalise(top, st, n, length)
    z = top[0, n, root, 0]
    return st[0, n, root] + np.log(z) if z > 0.0 else -np.inf


@njit(cache=True, nogil=True)
def _outside_unary(start: int, stop: int, ui: np.ndarray, uj: np.ndarray, uu: np.ndarray, ua: np.ndarray,
                   ub: np.ndarray, phi: np.ndarray, un: np.ndarray, umax: np.ndarray, bot: np.ndarray,
                   sb: np.ndarray, st: np.ndarray, ob: np.ndarray, ot: np.ndarray, u_counts: np.ndarray,
                   mu_u: np.ndarray) -> None:
    """Unary items ``start:stop``: outside of their bot labels, their refined counts and marginals."""
    k = un.shape[1]
    for v in range(start, stop):
        i, j, u, a, b = ui[v], uj[v], uu[v], ua[v], ub[v]
        e = phi[v] + umax[u] + sb[i, j, b] - st[i, j, a]
        if not np.isfinite(e):
            continue
        scale = np.exp(min(e, _CLIP))
        total = 0.0
        for x in range(k):
            parent = ot[i, j, a, x] * scale
            if parent == 0.0:
                continue
            for y in range(k):
                g = parent * un[u, x, y]
                ob[i, j, b, y] += g
                refined = g * bot[i, j, b, y]
                u_counts[u, x, y] += refined
                total += refined
        mu_u[v] = total


@njit(cache=True, nogil=True)
def _outside_binary(start: int, stop: int, bi: np.ndarray, bk: np.ndarray, bj: np.ndarray, br: np.ndarray,
                    ba: np.ndarray, bb: np.ndarray, bc: np.ndarray, phi: np.ndarray, wn: np.ndarray,
                    wmax: np.ndarray, top: np.ndarray, st: np.ndarray, sb: np.ndarray, ob: np.ndarray,
                    ot: np.ndarray, w_counts: np.ndarray, mu_b: np.ndarray) -> None:
    """Binary items ``start:stop``: outside of their children, their refined counts and marginals."""
    k = wn.shape[1]
    g = np.zeros((k, k))
    for b in range(start, stop):
        i, m, j, r, a = bi[b], bk[b], bj[b], br[b], ba[b]
        e = phi[b] + wmax[r] + st[i, m, bb[b]] + st[m, j, bc[b]] - sb[i, j, a]
        if not np.isfinite(e):
            continue
        scale = np.exp(min(e, _CLIP))
        lb, rc = bb[b], bc[b]
        g[:] = 0.0
        total = 0.0
        for x in range(k):
            parent = ob[i, j, a, x] * scale
            if parent == 0.0:
                continue
            for p in range(k):
                lv = top[i, m, lb, p]
                for q in range(k):
                    w = parent * wn[r, x, p, q]
                    g[p, q] += w
                    refined = w * lv * top[m, j, rc, q]
                    w_counts[r, x, p, q] += refined
                    total += refined
        mu_b[b] = total
        if total == 0.0 and g.max() == 0.0:
            continue
        for p in range(k):
            for q in range(k):
                ot[i, m, lb, p] += g[p, q] * top[m, j, rc, q]
                ot[m, j, rc, q] += g[p, q] * top[i, m, lb, p]


@njit(cache=True, nogil=True)
def outside_pass(n: int, root: int, bin_idx: Ints, bin_start: np.ndarray, un_idx: Ints,
                 un_start: np.ndarray, phi_b: np.ndarray, phi_u: np.ndarray, wn: np.ndarray, wmax: np.ndarray,
                 un: np.ndarray, umax: np.ndarray, bot: np.ndarray, sb: np.ndarray, top: np.ndarray,
                 st: np.ndarray, ob: np.ndarray, ot: np.ndarray, w_counts: np.ndarray, u_counts: np.ndarray,
                 mu_b: np.ndarray, mu_u: np.ndarray, mu_bot: np.ndarray, mu_top: np.ndarray) -> None:
    """Fill the scaled outside charts ``ob``, ``ot`` (zero on entry) from the root down, adding the refined
    counts into ``w_counts``, ``u_counts`` (zero on entry) and writing the item marginals ``mu_b``, ``mu_u`` and
    the labelled cells' ``mu_bot``, ``mu_top`` (zero on entry; each span length's once its outside values are
    complete, while they are in cache)."""
    ot[0, n, root, 0] = 1.0 / top[0, n, root, 0]
    for length in range(n, 0, -1):
        _outside_unary(un_start[length], un_start[length + 1], un_idx[0], un_idx[1], un_idx[2], un_idx[3],
                       un_idx[4], phi_u, un, umax, bot, sb, st, ob, ot, u_counts, mu_u)
        _cell_marginals(ot, top, st, mu_top, n, length)
        _cell_marginals(ob, bot, sb, mu_bot, n, length)
        if length > 1:
            _outside_binary(bin_start[length], bin_start[length + 1], bin_idx[0], bin_idx[1], bin_idx[2],
                            bin_idx[3], bin_idx[4], bin_idx[5], bin_idx[6], phi_b, wn, wmax, top, st, sb, ob, ot,
                            w_counts, mu_b)


@njit(cache=True, nogil=True)
def _cell_marginals(outside: np.ndarray, inside: np.ndarray, scale: np.ndarray, mu: np.ndarray, n: int,
                    length: int) -> None:
    """``mu[i, j, A] = sum_x outside[i, j, A, x] * inside[i, j, A, x]`` over the cells of one span length, the
    labelled cells with inside mass only (``scale`` finite; ``mu`` stays 0 elsewhere)."""
    size, k = inside.shape[2], inside.shape[3]
    for i in range(n - length + 1):
        j = i + length
        for a in range(size):
            if scale[i, j, a] == -np.inf:
                continue
            total = 0.0
            for x in range(k):
                total += outside[i, j, a, x] * inside[i, j, a, x]
            mu[i, j, a] = total


@njit(cache=True, nogil=True)
def live_binary(bot: np.ndarray, top: np.ndarray, rules: np.ndarray, by_parent: np.ndarray,
                parent_start: np.ndarray) -> np.ndarray:
    """The binary items ``(i, k, j, r)`` of a mask (``bot``, ``top``: ``(n+1, n+1, L)`` booleans) whose parent
    lives in the bot layer of ``(i, j)`` and children in the top layers of ``(i, k)``, ``(k, j)``, in the order
    span length, ``i``, ``k``, ``r``. ``rules (R, 3)``: ``(A, B, C)``; ``by_parent``: the rule indices sorted by
    parent then index, those of parent ``A`` at ``parent_start[A]:parent_start[A + 1]``. Only the rules of live
    parents are visited: O(splits x rules of the live parents), not O(splits x R)."""
    n, size = bot.shape[0] - 1, bot.shape[2]
    cell_rules = np.empty(len(rules), dtype=np.int64)
    out = np.empty((0, 4), dtype=np.int64)
    for step in range(2):  # count, then fill
        count = 0
        for length in range(2, n + 1):
            for i in range(n - length + 1):
                j = i + length
                live = 0
                for a in range(size):
                    if bot[i, j, a]:
                        for p in range(parent_start[a], parent_start[a + 1]):
                            cell_rules[live] = by_parent[p]
                            live += 1
                if live == 0:
                    continue
                cell_rules[:live].sort()
                for k in range(i + 1, j):
                    for p in range(live):
                        r = cell_rules[p]
                        if top[i, k, rules[r, 1]] and top[k, j, rules[r, 2]]:
                            if step == 1:
                                out[count, 0], out[count, 1], out[count, 2], out[count, 3] = i, k, j, r
                            count += 1
        if step == 0:
            out = np.empty((count, 4), dtype=np.int64)
    return out
