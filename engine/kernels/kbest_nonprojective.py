"""Exact k-best non-projective dependency trees: Camerini, Fratta & Maffioli (1980) with root constraint.

Shapes follow :mod:`engine`: ``scores`` (n+1, n+1) float64, ``scores[h, m]`` the log-potential of the arc
``h -> m`` (0 = ROOT; column 0 and the diagonal ignored; ``-inf`` forbids an arc); ``heads`` (n+1,) int64
with ``heads[0] == -1``. A tree's score is the sum of its arc scores.

Partitioning (Lawler 1972; Camerini et al. 1980): a subproblem is the score matrix with its constraints
written in (a forbidden arc is ``-inf``; a forced arc ``h -> m`` is the only finite entry of column ``m``).
:func:`_solve` returns its best tree ``T``, the score of a second-best tree ``T2`` and an arc ``e`` of ``T``
not in ``T2``; ``trees - {T}`` then splits into "``e`` forbidden" (best: ``T2``) and "``e`` forced" (best:
``T`` again, so its second best is wanted). Each output tree costs at most two solves.

Second best (Camerini et al. 1980, as simplified by Zmigrod, Vieira & Cotterell 2021): run Chu-Liu-Edmonds
on the *multigraph* (contracting a cycle keeps every arc into each member, reweighted by that member's cycle
arc, ``s[u, v] - s[par(v), v]``). Every node ``y`` of every level (a word or a contracted cycle) whose arc
in ``T`` is its own greedy arc may swap it for another arc into ``y`` from outside the subtree of ``y`` in
``T``, at the difference of the two in ``y``'s reweighted scale; each swap is a real tree and the cheapest
one is a second-best tree. The multigraph is dense here: ``R[u, g]`` is the arc ``u -> g`` in the scale of
the top node holding word ``g``; a node's own scale is kept as a snapshot of the cumulative offsets, and
its swaps are one masked max over its words' columns.

Single root (Zmigrod, Vieira & Cotterell 2021): a second-best arborescence may have several root children,
so the swaps above leave the dependency trees, and filtering unconstrained trees may need exponentially many.
They partition on the root arc first: with ``0 -> r`` forced (every other root arc forbidden) *every*
arborescence is a dependency tree, so the unconstrained machinery above is exact inside it; the rest,
``0 -> r`` forbidden, is again a set of single-root trees whose best is the exact single-root MST
(:func:`engine.kernels.mst.max_spanning_arborescence`), which gives the next root arc.

Laziness: a child whose best is not needed yet is queued under its parent's value (an upper bound) and
solved when popped. Ties: a re-solve may return, instead of the tree already out, another one of the same
score; that tree is emitted then, and the first is skipped when it comes again.

Complexity: a solve is O(n^2) numpy work plus O(n |C|) per contracted cycle ``C`` (the dense multigraph
keeps ``|C|`` word columns per cycle: O(n^3) worst case under deep nesting, near O(n^2) on parser scores)
and O(n) Python steps per contraction. k trees cost O(k) solves, plus one single-root MST per distinct root
child in single-root mode, plus O(k log k) for the queue.
"""

from __future__ import annotations

import heapq
import itertools
from dataclasses import dataclass, field
from numbers import Integral
from typing import NamedTuple

import numpy as np
from numpy.typing import ArrayLike

from engine.kernels.mst import find_cycles, max_spanning_arborescence, validated

__all__ = ["kbest_arborescences"]

# Kinds of the entries of kbest_arborescences' queue:
# _NEXT: a solved subproblem (payload), value = its exact second best: emit that tree, split on its arc.
# _LAZY: an unsolved subproblem whose best tree (payload) is out, value = bound on its second best. If its
#   solve returns another tree (a tie), that one is new and as good: emit it now; the payload tree then comes
#   up again later and is skipped as already seen.
# _ROOT: an unsolved single-root set (some root arcs free), value = bound on its best.
# _ROOT_SOLVED: the same solved (payload: its best), exact value: emit it, split on its root arc.
_NEXT, _LAZY, _ROOT, _ROOT_SOLVED = 0, 1, 2, 3


class _Solution(NamedTuple):
    """Best tree of a subproblem, its score, the score of its second-best tree and the arc to branch on."""

    heads: np.ndarray
    score: float
    second: float
    arc: tuple[int, int]


@dataclass
class _Contraction:
    """Chu-Liu-Edmonds on the multigraph (see the module docstring): the state after every cycle is contracted.

    Nodes are words ``1..n`` and contracted cycles (ids ``n1, n1 + 1, ...``); ``R`` is ``w`` with each column
    reweighted into the scale of the top node holding its word, ``off`` the total subtracted per column.
    """

    R: np.ndarray
    off: np.ndarray
    comp: np.ndarray  # word -> id of the top node containing it
    ground: dict[int, np.ndarray]  # node -> its words
    greedy: dict[int, tuple[int, int]]  # node -> its best incoming arc (u, word) in its own scale
    kids: dict[int, list[int]] = field(default_factory=dict)  # cycle -> its members
    offin: dict[int, np.ndarray] = field(default_factory=dict)  # node -> the offsets of its own scale
    up: dict[int, int] = field(default_factory=dict)  # node -> the cycle that absorbed it
    tops: set[int] = field(default_factory=set)  # nodes not absorbed


def _contract(w: np.ndarray, gu: np.ndarray) -> _Contraction | None:
    """Contract the cycles of the greedy arcs ``gu`` one at a time, keeping every arc into each member;
    ``None`` if some cycle has no finite arc entering it (no tree exists)."""
    n1 = w.shape[0]
    cols = np.arange(n1)
    st = _Contraction(R=w.copy(), off=np.zeros(n1), comp=cols.copy(),
                      ground={g: cols[g : g + 1] for g in range(1, n1)},
                      greedy={g: (int(gu[g]), g) for g in range(1, n1)}, tops=set(range(1, n1)))
    R, ground, greedy = st.R, st.ground, st.greedy
    pending = find_cycles(gu.tolist())  # contracted one at a time; a new cycle must pass through the last one
    waiting = {y for cyc in pending for y in cyc}
    while pending:
        cyc = pending.pop()
        c = n1 + len(st.kids)
        snap = st.off.copy()
        for y in cyc:
            st.offin[y] = snap
            st.up[y] = c
        g = np.concatenate([ground[y] for y in cyc])
        val = np.repeat([R[greedy[y]] for y in cyc], [ground[y].size for y in cyc])
        R[:, g] -= val
        st.off[g] += val
        st.kids[c] = cyc
        st.tops.difference_update(cyc)
        st.tops.add(c)
        waiting.difference_update(cyc)
        ground[c] = g
        st.comp[g] = c
        sub = R[:, g]
        sub[g] = -np.inf
        u, j = divmod(int(sub.argmax()), g.size)
        if sub[u, j] == -np.inf:
            return None
        greedy[c] = (u, int(g[j]))
        path, v = [c], int(st.comp[u])
        while v != 0 and v != c and v not in waiting:
            path.append(v)
            v = int(st.comp[greedy[v][0]])
        if v == c:
            pending.append(path)
            waiting.update(path)
    for y in st.tops:
        st.offin[y] = st.off
    return st


def _expand(st: _Contraction, n1: int) -> tuple[dict[int, tuple[int, int]], np.ndarray]:
    """The best tree: each node's arc in it (``entry``) and the heads. A top node keeps its greedy arc; a
    cycle entered by ``(u, g)`` passes it to the member holding ``g``, the other members keep their greedy
    (cycle) arcs."""
    entry = {y: st.greedy[y] for y in st.tops}
    stack = list(st.tops)
    while stack:
        y = stack.pop()
        if y < n1:
            continue
        x = entry[y][1]
        while st.up[x] != y:
            x = st.up[x]
        for z in st.kids[y]:
            entry[z] = entry[y] if z == x else st.greedy[z]
            stack.append(z)
    heads = np.array([-1] + [entry[g][0] for g in range(1, n1)], dtype=np.int64)
    return entry, heads


def _cheapest_swap(w: np.ndarray, gu: np.ndarray, st: _Contraction, entry: dict[int, tuple[int, int]],
                   heads: np.ndarray) -> tuple[int, float]:
    """The node whose swap to another arc from outside its subtree loses least, and that loss (``inf`` if
    no swap exists): the best tree's score minus the second best's."""
    n1 = w.shape[0]
    cols = np.arange(n1)
    # anc[a, v]: a is v or one of its ancestors in the best tree.
    anc = np.eye(n1, dtype=bool)
    p = heads.copy()
    p[0] = 0
    cur = cols
    while cur.any():
        cur = p[cur]
        anc[cur, cols] = True
    # Words whose tree arc is their greedy arc: swap for any non-greedy arc from outside their subtree.
    cand = np.where(anc.T, -np.inf, w)
    cand[gu[1:], cols[1:]] = -np.inf
    cost = np.full(n1, np.inf)
    cost[1:] = w[gu[1:], cols[1:]] - cand[:, 1:].max(axis=0)
    cost[heads != gu] = np.inf  # cycle entries: their swaps are their cycle's
    best_y = int(cost.argmin())
    best_cost = float(cost[best_y])
    for y in st.kids:
        u, m = st.greedy[y]
        if entry[y] != (u, m):
            continue
        g = st.ground[y]
        block = w[:, g] - st.offin[y][g]
        block[anc[m]] = -np.inf
        j = int(np.flatnonzero(g == m)[0])
        gval = block[u, j]
        block[u, j] = -np.inf
        c = float(gval - block.max())
        if c < best_cost:
            best_y, best_cost = y, c
    return best_y, best_cost


def _solve(w: np.ndarray) -> _Solution | None:
    """Best tree of ``w`` (column 0 and diagonal -inf) and its second best (see the module docstring);
    ``None`` if no tree exists. ``w`` is not modified."""
    n1 = w.shape[0]
    cols = np.arange(n1)
    gu = w.argmax(axis=0)  # greedy arcs of the words
    if not np.isfinite(w[gu[1:], cols[1:]]).all():
        return None
    st = _contract(w, gu)
    if st is None:
        return None
    entry, heads = _expand(st, n1)
    best_y, best_cost = _cheapest_swap(w, gu, st, entry, heads)
    score = float(w[heads[1:], cols[1:]].sum())
    return _Solution(heads, score, score - best_cost, st.greedy[best_y] if best_cost < np.inf else (0, 0))


def _forced(w: np.ndarray, h: int, m: int) -> np.ndarray:
    """A copy of ``w`` in which ``h -> m`` is the only arc into ``m``."""
    f = w.copy()
    f[:, m] = -np.inf
    f[h, m] = w[h, m]
    return f


def _split_on_root(w: np.ndarray, r: int) -> tuple[np.ndarray, np.ndarray]:
    """Copies of ``w`` with ``0 -> r`` the only root arc (so every arborescence is a dependency tree) and
    with ``0 -> r`` forbidden."""
    only_r = _forced(w, 0, r)
    only_r[0, :r] = only_r[0, r + 1 :] = -np.inf
    without_r = w.copy()
    without_r[0, r] = -np.inf
    return only_r, without_r


def kbest_arborescences(scores: ArrayLike, k: int, *, single_root: bool) -> list[tuple[float, np.ndarray]]:
    """The ``k`` highest-scoring dependency trees under ``scores`` (n+1, n+1), best first, exactly.

    Returns a list of ``(score, heads)`` with ``heads`` (n+1,) int64, ``heads[0] == -1``, and ``score`` the
    sum of its arc scores; the trees are distinct spanning arborescences rooted at 0. ``single_root=True``
    keeps the trees with exactly one word attached to ROOT. Trees using a ``-inf`` arc are never returned,
    so fewer than ``k`` pairs (possibly none) come back when fewer finite-score trees exist. Ties are
    ordered arbitrarily.

    Camerini, Fratta & Maffioli (1980) as simplified by Zmigrod, Vieira & Cotterell (2021), with their exact
    single-root extension (see the module docstring; Hall 2007 brought Camerini et al. to parsing). O(k)
    solves of O(n^2) numpy work each (O(n^3) worst case), plus one single-root MST per root child.

    ``scores`` is not modified. Raises ValueError for a malformed ``scores`` (not square 2-D real, n < 1,
    NaN or ``+inf`` in a used entry) or a ``k`` that is not a positive integer.
    """
    if isinstance(k, bool) or not isinstance(k, Integral) or k < 1:
        raise ValueError(f"k must be a positive integer, got {k!r}")
    w0 = validated(scores)
    cols = np.arange(1, w0.shape[0])
    out: list[tuple[float, np.ndarray]] = []
    seen: set[bytes] = set()
    queue: list[tuple[float, int, int, np.ndarray, object]] = []  # (-value, tiebreak, kind, matrix, payload)
    tick = itertools.count()

    def emit(score: float, heads: np.ndarray) -> None:
        if (key := heads.tobytes()) not in seen:
            seen.add(key)
            out.append((score, heads))

    def push(value: float, kind: int, w: np.ndarray, payload: object = None) -> None:
        if value > -np.inf:
            heapq.heappush(queue, (-value, next(tick), kind, w, payload))

    if single_root:
        push(np.inf, _ROOT, w0)
    elif (sol := _solve(w0)) is not None:
        emit(sol.score, sol.heads)
        push(sol.second, _NEXT, w0, sol)
    while queue and len(out) < k:
        neg, _, kind, w, payload = heapq.heappop(queue)
        if kind == _NEXT:
            assert isinstance(payload, _Solution)
            h, m = payload.arc
            ex = w.copy()
            ex[h, m] = -np.inf
            sol = _solve(ex)
            assert sol is not None  # ex holds the second-best tree of w
            emit(sol.score, sol.heads)
            push(sol.second, _NEXT, ex, sol)
            push(-neg, _LAZY, _forced(w, h, m), payload.heads)
        elif kind == _LAZY:
            assert isinstance(payload, np.ndarray)
            if (sol := _solve(w)) is not None:
                if not np.array_equal(sol.heads, payload):
                    emit(sol.score, sol.heads)
                push(sol.second, _NEXT, w, sol)
        elif kind == _ROOT:
            try:
                heads = max_spanning_arborescence(w, single_root=True)
            except ValueError:  # no single-root tree is left
                continue
            push(float(w[heads[1:], cols].sum()), _ROOT_SOLVED, w, heads)
        else:
            assert isinstance(payload, np.ndarray)
            emit(-neg, payload)
            only_r, without_r = _split_on_root(w, int(np.flatnonzero(payload == 0)[0]))
            push(-neg, _LAZY, only_r, payload)
            push(-neg, _ROOT, without_r)
    out.sort(key=lambda pair: -pair[0])  # only reorders floating-point near-ties
    return out
