"""Exact k-best projective dependency trees: lazy k-best derivations over the Eisner (1996) hypergraph.

Shapes follow :mod:`engine`: ``scores`` (n+1, n+1) float64, ``scores[h, m]`` the log-potential of the arc
``h -> m`` (0 = ROOT; column 0 and the diagonal ignored; ``-inf`` forbids an arc); ``heads`` (n+1,) int64
with ``heads[0] == -1``. A tree's score is the sum of its arc scores.

Hypergraph (first-order Eisner, chart positions ``0..L-1``). Every hyperedge is binary with a weight:

- ``INNER[s, t]`` (``s < t``) <- ``C_r[s, r]``, ``C_l[r+1, t]`` for ``s <= r < t``, weight 0: the span
  between the two ends of an arc ``s -> t`` or ``t -> s`` (shared by ``I_r`` and ``I_l``);
- ``C_r[s, t]`` <- ``INNER[s, r]``, ``C_r[r, t]`` for ``s < r <= t``, weight ``arc[s, r]``: the arc ``s -> r``;
- ``C_l[s, t]`` <- ``C_l[s, r]``, ``INNER[r, t]`` for ``s <= r < t``, weight ``arc[t, r]``: the arc ``t -> r``;
- ``C_r[s, s]`` and ``C_l[s, s]`` are leaves of score 0.

Multi-root: the chart over positions ``0..n`` with no arc into ROOT, goal ``C_r[0, n]``. Single-root
(Koo et al. 2007 §3.3): the chart over the words only and a goal node with one edge per root child ``m``,
tails ``C_l[1, m]``, ``C_r[m, n]``, weight ``scores[0, m]``. Each projective tree has exactly one
derivation: the split points are forced (``C_r[s, t]`` splits at the last child of ``s``, ``C_l`` at the
first child of ``t``, ``INNER`` where the subtrees of ``s`` and ``t`` meet, the goal at the root
child), so the k best derivations are k distinct trees.

Algorithm: Huang & Chiang (2005), "Better k-best parsing", Algorithm 3. The 1-best (Viterbi) chart is
filled vectorised by :mod:`engine.kernels.eisner`; afterwards every node ``v`` reached by the search
keeps its derivations found so far, best first, and a heap of candidates (edge, rank pair). A node's heap
starts with every incoming edge at ranks (0, 0), scored straight from the chart; the (j+1)-th derivation
is popped only when asked for, after pushing the successors of the j-th, ``(a, b+1)`` and, when
``b == 0``, ``(a+1, b)`` (each rank pair thus has one predecessor: no duplicate candidates), which asks
the tails for their next derivations, recursively (here with an explicit stack). ``-inf`` edges are
dropped when a heap starts, so every derivation kept is finite and only finite-score trees are returned.

Complexity: O(n^3) time and O(n^2) memory for the chart, then O(|D| k log k) for the lazy phase plus
O(n) per node reached (its candidate heap), where |D| = O(n) is the size of a derivation; for k << n^2
the chart dominates. Also see Huang & Chiang (2005) §4-5, and Eisner (1996) for the chart.
"""

from __future__ import annotations

import heapq
from numbers import Integral

import numpy as np

from engine.kernels.eisner import CL, CR, IL, IR, MAX_SEMIRING, fill, validate

__all__ = ["kbest_projective"]

_INNER, _CR, _CL, _GOAL = 0, 1, 2, 3  # hypergraph node kinds; node id = (kind * L + s) * L + t
_NEG_INF = float("-inf")


class _Node:
    """Derivations found so far ``(score, r, a, b)``, best first; candidate heap ``(-score, r, a, b)``."""

    __slots__ = ("found", "cand", "expanded")

    def __init__(self, found: list[tuple[float, int, int, int]], cand: list[tuple[float, int, int, int]]) -> None:
        self.found = found
        self.cand = cand
        self.expanded = True  # the successors of found[-1] are already in cand (vacuous when found is empty)


class _LazyKBest:
    """Lazy k-best search over a filled max-semiring Eisner chart of ``L`` positions."""

    def __init__(self, arc: np.ndarray, root: np.ndarray | None) -> None:
        self.L = L = arc.shape[0]
        self.LL = L * L
        self.chart = fill(arc, MAX_SEMIRING)
        self.arc: list[list[float]] = arc.tolist()
        self.root = root  # single-root: scores[0, 1:], the goal's edge weights
        self.nodes: dict[int, _Node] = {}
        self.goal = _GOAL * self.LL if root is not None else (_CR * L + 0) * L + L - 1

    def _tails(self, v: int, r: int) -> tuple[int, int, int, float]:
        """``(kind, tail1, tail2, weight)`` of the edge of node ``v`` with split ``r``."""
        L, LL = self.L, self.LL
        kind, rem = divmod(v, LL)
        s, t = divmod(rem, L)
        if kind == _INNER:
            return kind, LL * _CR + s * L + r, LL * _CL + (r + 1) * L + t, 0.0
        if kind == _CR:
            return kind, s * L + r, LL * _CR + r * L + t, self.arc[s][r]
        if kind == _CL:
            return kind, LL * _CL + s * L + r, r * L + t, self.arc[t][r]
        assert self.root is not None
        return kind, LL * _CL + r, LL * _CR + r * L + L - 1, float(self.root[r])

    def _init(self, v: int) -> _Node:
        """Candidates of ``v``: every incoming edge at ranks (0, 0), scored from the chart (vectorised)."""
        kind, rem = divmod(v, self.LL)
        s, t = divmod(rem, self.L)
        w = t - s
        start, end = self.chart.start, self.chart.end
        if kind == _GOAL:
            assert self.root is not None
            x, r0 = self.root + start[CL, 0, :] + end[CR, -1, ::-1], 0  # as eisner._root_terms
        elif w == 0:
            node = _Node([(0.0, -1, 0, 0)], [])  # leaf C[s, s]
            self.nodes[v] = node
            return node
        elif kind == _INNER:
            x, r0 = start[CR, s, :w] + end[CL, t, w - 1 :: -1], s
        elif kind == _CR:
            x, r0 = start[IR, s, 1 : w + 1] + end[CR, t, w - 1 :: -1], s + 1
        else:
            x, r0 = start[CL, s, :w] + end[IL, t, w:0:-1], s
        cand = [(-y, r0 + j, 0, 0) for j, y in enumerate(x.tolist()) if y > _NEG_INF]
        heapq.heapify(cand)
        node = self.nodes[v] = _Node([], cand)
        return node

    def _node(self, v: int) -> _Node:
        node = self.nodes.get(v)
        return node if node is not None else self._init(v)

    def _pending(self, v: int, j: int) -> bool:
        """True when ``v`` might have a (j+1)-th derivation that has not been computed yet."""
        node = self._node(v)
        return len(node.found) <= j and (bool(node.cand) or not node.expanded)

    def ensure(self, v: int, j: int) -> bool:
        """Compute derivations of ``v`` up to rank ``j`` (0-based) if they exist; True when rank j exists."""
        stack = [(v, j)]
        while stack:
            u, i = stack[-1]
            node = self._node(u)
            if len(node.found) > i or (node.expanded and not node.cand):
                stack.pop()
                continue
            if not node.expanded:  # push the successors of the last derivation found (lazy: only now)
                _, r, a, b = node.found[-1]
                kind, t1, t2, wt = self._tails(u, r)
                need = [(t2, b + 1)] + ([(t1, a + 1)] if b == 0 else [])
                waiting = [q for q in need if self._pending(*q)]
                if waiting:
                    stack += waiting
                    continue
                for a2, b2 in ((a, b + 1), (a + 1, b)) if b == 0 else ((a, b + 1),):
                    f1, f2 = self.nodes[t1].found, self.nodes[t2].found
                    if a2 >= len(f1) or b2 >= len(f2):
                        continue
                    x1, x2 = f1[a2][0], f2[b2][0]  # association order as in the chart fill (exact ties)
                    if kind == _INNER:
                        y = x1 + x2
                    elif kind == _CR:
                        y = (x1 + wt) + x2
                    elif kind == _CL:
                        y = x1 + (x2 + wt)
                    else:
                        y = (wt + x1) + x2
                    heapq.heappush(node.cand, (-y, r, a2, b2))  # finite: finite weight and tails
                node.expanded = True
            if node.cand:
                neg, r, a, b = heapq.heappop(node.cand)
                node.found.append((-neg, r, a, b))
                node.expanded = False
        return len(self.nodes[v].found) > j

    def heads(self, j: int, n: int, offset: int) -> np.ndarray:
        """Heads (n+1,) of the goal's derivation of rank ``j``; chart position p is sentence position p + offset."""
        heads = np.full(n + 1, -1, dtype=np.int64)
        stack = [(self.goal, j)]
        while stack:
            v, i = stack.pop()
            self.ensure(v, i)  # rank 0 of a node scored only through the chart is not materialised yet
            r, a, b = self.nodes[v].found[i][1:]
            if r < 0:
                continue
            kind, t1, t2, _ = self._tails(v, r)
            s, t = divmod(v % self.LL, self.L)
            if kind == _CR:
                heads[r + offset] = s + offset
            elif kind == _CL:
                heads[r + offset] = t + offset
            elif kind == _GOAL:
                heads[r + 1] = 0
            stack += [(t1, a), (t2, b)]
        return heads


def kbest_projective(scores: np.ndarray, k: int, *, single_root: bool) -> list[tuple[float, np.ndarray]]:
    """The ``k`` highest-scoring projective trees under ``scores`` (n+1, n+1), best first, exactly.

    Returns a list of ``(score, heads)`` with ``heads`` (n+1,) int64, ``heads[0] == -1``, and ``score`` the
    sum of its arc scores; the trees are distinct. ``single_root=True`` keeps trees with exactly one word
    attached to ROOT. Trees using a ``-inf`` arc are never returned, so fewer than ``k`` pairs (possibly
    none) come back when fewer finite-score trees exist. Ties are ordered arbitrarily.

    Lazy k-best over the Eisner hypergraph (Huang & Chiang 2005, Algorithm 3; see the module docstring):
    O(n^3) for the Viterbi chart plus O(|D| k log k + n * nodes reached) for the lazy search, |D| = O(n).
    ``scores`` is not modified. Raises ValueError for a malformed ``scores`` (not square 2-D, n < 1, NaN or
    ``+inf`` in a used entry) or a ``k`` that is not a positive integer.
    """
    if isinstance(k, bool) or not isinstance(k, Integral) or k < 1:
        raise ValueError(f"k must be a positive integer, got {k!r}")
    scores = validate(scores)
    n = scores.shape[0] - 1
    if single_root:
        search = _LazyKBest(scores[1:, 1:].copy(), scores[0, 1:].copy())
        offset = 1
    else:
        arc = scores.copy()
        arc[:, 0] = -np.inf  # nothing heads ROOT
        search = _LazyKBest(arc, None)
        offset = 0
    out: list[tuple[float, np.ndarray]] = []
    for j in range(int(k)):
        if not search.ensure(search.goal, j):
            break
        out.append((search.nodes[search.goal].found[j][0], search.heads(j, n, offset)))
    return out
