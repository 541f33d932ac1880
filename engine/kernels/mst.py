"""Maximum spanning arborescence: Chu-Liu-Edmonds (Chu & Liu 1965; Edmonds 1967) on dense score matrices.

Shapes follow :mod:`engine`: ``scores`` is ``(n + 1, n + 1)`` with ``scores[h, m]`` the score of the arc
``h -> m`` (0 = ROOT; column 0 and the diagonal are ignored; ``-inf`` forbids an arc), ``heads`` is
``(n + 1,)`` int64 with ``heads[0] == -1``.

Algorithm: every node takes its best incoming arc; if that is a tree we are done (the *fast path*:
O(n^2) numpy work, no Python loop over arcs). Otherwise the cycles are contracted one at a time in the
dense style of Tarjan (1977): the matrix stays indexed by original positions and a cycle ``C`` is merged
into one representative ``r``, whose row is the max of the members' rows and whose column is the max of
the members' columns after subtracting each member's cycle-arc score (arcs entering ``C`` at ``v`` are
worth ``s[u, v] - s[par(v), v]``); a parallel int matrix keeps the original arc behind every entry. Only
``r``'s best incoming arc changes, so a new cycle must pass through ``r`` (checked by pointer doubling).
One contraction costs O(|C| n) numpy work and sum |C| <= 2n, hence O(n^2) overall plus O(n log n) per
contraction for the cycle check. Expansion walks the contractions backwards: the member of a cycle
entered by the arc chosen for the cycle takes that arc, the others keep their cycle arcs.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

__all__ = ["is_tree", "max_spanning_arborescence"]


def max_spanning_arborescence(scores: ArrayLike, *, single_root: bool) -> np.ndarray:
    """Heads ``(n + 1,)`` of the highest-scoring dependency tree rooted at 0 under ``scores`` ``(n+1, n+1)``.

    ``single_root=False``: the maximum spanning arborescence, any number of words may attach to ROOT.
    ``single_root=True``: the best tree in which exactly one word attaches to ROOT (exact).

    Single-root mode is the root-penalty reduction taken to its limit. Subtracting a constant ``M`` from
    every root arc costs a tree with ``k`` root children ``k * M``, so once ``M`` exceeds the spread of
    tree scores (at most ``sum_m (max_h - min_h)`` of the finite ``scores[h, m]``) the optimum has one root
    arc whenever such a tree exists. A finite ``M`` would cost ``M * eps`` of absolute precision on every
    root arc (about 1e-10 for 150 words of magnitude 1e3) and could flip near-ties, so instead we use
    ``M -> infinity`` symbolically: arc weights are the pairs ``(-[h == 0], scores[h, m])`` compared
    lexicographically. Chu-Liu-Edmonds is correct over any totally ordered abelian group (its proof only
    adds, subtracts and compares weights), and contraction keeps the first component equal to
    ``-[head is ROOT]`` (cycles never contain ROOT, so their arcs are word arcs). Concretely each node takes
    its best *word* arc and ROOT only when no finite word arc enters it; no bound or numerical guard is
    needed. (Gabow & Tarjan 1984 / Zmigrod, Vieira & Cotterell 2020 reach O(n^2) by root-edge swaps.)

    This lexicographic optimum has the fewest root children, so a result with more than one means no
    single-root tree exists (reported as ``ValueError``).

    Complexity: O(n^2) numpy work when the greedy choice is already a (single-root, if asked) tree,
    otherwise O(n^2 + c n log n) for c <= n - 1 contractions. ``scores`` is never modified.

    Raises ``ValueError`` unless ``scores`` is a square 2-D real array with ``n >= 1``, no NaN or ``+inf``
    (in the used entries) and finite arcs admitting at least one tree of the requested kind.
    """
    w = validated(scores)
    n1 = w.shape[0]
    par = w.argmax(axis=0)
    if np.isfinite(w[par[1:], np.arange(1, n1)]).all():
        par[0] = 0
        if _reaches_root(par) and (not single_root or np.count_nonzero(par[1:] == 0) == 1):
            par[0] = -1
            return par
    _check_feasible(w)
    heads = _chu_liu_edmonds(w, single_root)
    if single_root and np.count_nonzero(heads[1:] == 0) != 1:
        raise ValueError("no single-root tree is possible: the finite arcs need several words on ROOT")
    return heads


def is_tree(heads: ArrayLike) -> bool:
    """True iff ``heads`` ``(n + 1,)`` (n >= 1) is a dependency tree: ``heads[0] == -1``, every other
    entry a position in ``0..n`` other than its own, and every word reaches ROOT (hence no cycle).
    O(n log n) by pointer doubling."""
    h = np.asarray(heads)
    if h.ndim != 1 or h.size < 2 or h.dtype.kind not in "iu" or h[0] != -1:
        return False
    n = h.size - 1
    par = h.astype(np.int64)
    if ((par[1:] < 0) | (par[1:] > n) | (par[1:] == np.arange(1, n + 1))).any():
        return False
    par[0] = 0
    return _reaches_root(par)


def _reaches_root(par: np.ndarray) -> bool:
    """``par`` (k,) with ``par[0] == 0``, entries in ``0..k-1``: does every node reach 0? Pointer doubling:
    after j squarings ``par`` holds the 2**j-th ancestor, and a path to 0 has at most k - 1 arcs."""
    for _ in range(par.size.bit_length()):
        par = par[par]
    return not par.any()


def validated(scores: ArrayLike) -> np.ndarray:
    """A float64 copy of ``scores`` with column 0 and the diagonal set to -inf; ValueError if malformed."""
    a = np.asarray(scores)
    if a.ndim != 2 or a.shape[0] != a.shape[1]:
        raise ValueError(f"scores must be a square 2-D array (n+1, n+1), got shape {a.shape}")
    if a.shape[0] < 2:
        raise ValueError("scores must cover ROOT and at least one word: shape (n+1, n+1) with n >= 1")
    if a.dtype.kind not in "iuf":
        raise ValueError(f"scores must be a real (float or integer) array, got dtype {a.dtype}")
    w = a.astype(np.float64)  # always a copy: the caller's array is never modified
    w[:, 0] = -np.inf
    np.fill_diagonal(w, -np.inf)
    bad = ~(w < np.inf)  # NaN or +inf
    if bad.any():
        h, m = np.argwhere(bad)[0]
        raise ValueError(f"scores must be finite or -inf, got {w[h, m]} at [{h}, {m}]")
    return w


def _check_feasible(w: np.ndarray) -> None:
    """ValueError unless every word is reachable from ROOT through finite arcs, i.e. some tree exists.
    Breadth-first search on the boolean arc matrix, O(n^2) in total."""
    fin = np.isfinite(w)
    seen = fin[0].copy()
    frontier = seen
    while frontier.any():
        frontier = fin[frontier].any(axis=0) & ~seen
        seen |= frontier
    if not seen[1:].all():
        missing = (np.flatnonzero(~seen[1:]) + 1).tolist()
        raise ValueError(f"no tree is possible: words {missing} cannot be reached from ROOT by finite arcs")


def _best_incoming(w: np.ndarray, single_root: bool) -> tuple[np.ndarray, np.ndarray]:
    """Best head ``par`` (k,) and its score ``best`` (k,) per node; ``par[0] == 0``. Single-root mode
    prefers any finite word arc to a root arc (the lexicographic order described above)."""
    cols = np.arange(w.shape[0])
    if single_root:
        par = w[1:].argmax(axis=0) + 1
        best = w[par, cols]
        orphan = best == -np.inf
        par[orphan] = 0
        best[orphan] = w[0, orphan]
    else:
        par = w.argmax(axis=0)
        best = w[par, cols]
    par[0] = 0
    return par, best


def find_cycles(par: list[int]) -> list[list[int]]:
    """All cycles of the functional graph ``m -> par[m]`` (node 0 excluded), each as a node list. O(k)."""
    state = [0] * len(par)  # 0 unseen, 1 on the current walk, 2 finished
    state[0] = 2
    cycles = []
    for start in range(1, len(par)):
        walk = []
        v = start
        while state[v] == 0:
            state[v] = 1
            walk.append(v)
            v = par[v]
        if state[v] == 1:
            cycles.append(walk[walk.index(v) :])
        for u in walk:
            state[u] = 2
    return cycles


def _chu_liu_edmonds(w: np.ndarray, single_root: bool) -> np.ndarray:
    """Heads of the best tree for ``w`` (n+1, n+1): float64, column 0 and diagonal -inf, no NaN/+inf, every
    word reachable from ROOT by finite arcs. ``w`` is overwritten. Single-root mode returns the best tree
    among those with the fewest root children."""
    n1 = w.shape[0]
    par, best = _best_incoming(w, single_root)
    cycles = find_cycles(par.tolist())
    if not cycles:
        par[0] = -1
        return par
    f = np.arange(n1 * n1, dtype=np.int64).reshape(n1, n1)  # original arc id h * n1 + m behind w[h, m]
    rows = np.arange(n1)
    sid = np.arange(n1)  # matrix index -> id of the (super)node it stands for; contraction t gets n1 + t
    top = np.arange(n1)  # original node -> id of the outermost supernode containing it
    cyc_arc = np.zeros(2 * n1, dtype=np.int64)  # id -> its cycle arc inside the supernode that absorbed it
    alive = np.ones(n1, dtype=bool)
    pending = np.zeros(n1, dtype=bool)  # members of greedy cycles not yet contracted
    pending[np.concatenate(cycles)] = True
    kids: list[np.ndarray] = []
    snaps: list[np.ndarray] = []  # ``top`` just before each contraction
    steps = (n1 - 1).bit_length()
    for cycle in cycles:
        cyc: list[int] | None = cycle
        while cyc:
            c = np.asarray(cyc, dtype=np.int64)
            r = cyc[0]
            k = sid[c]
            cyc_arc[k] = f[par[c], c]
            is_kid = np.zeros(2 * n1, dtype=bool)
            is_kid[k] = True
            kids.append(k)
            snaps.append(top.copy())
            top[is_kid[top]] = sid[r] = n1 + len(kids) - 1
            sub = w[:, c] - best[c]  # arcs into the cycle, relative to the cycle arcs they replace
            j = sub.argmax(axis=1)
            col_w, col_f = sub[rows, j], f[rows, c[j]]
            i = w[c].argmax(axis=0)
            w[r], f[r] = w[c[i], rows], f[c[i], rows]
            w[:, r], f[:, r] = col_w, col_f
            w[r, r] = -np.inf
            w[c[1:]] = -np.inf  # the other members are gone (their rows could tie with row r)
            alive[c[1:]] = False
            pending[c] = False
            in_c = np.zeros(n1, dtype=bool)
            in_c[c] = True
            par[in_c[par]] = r  # same best score: row r is the max of the members' rows
            col = w[:, r]
            p = int(col[1:].argmax()) + 1 if single_root else int(col.argmax())
            if col[p] == -np.inf:
                p = 0
            par[r], best[r] = p, col[p]
            q = par
            for _ in range(steps):
                q = q[q]
            end = int(q[r])  # on the cycle r's path ends in: 0, a pending one, or a new one through r
            cyc = None
            if end != 0 and not pending[end]:
                cyc = [r]
                while (v := int(par[cyc[-1]])) != r:
                    cyc.append(v)
    inarc = np.zeros(2 * n1, dtype=np.int64)  # id -> chosen original arc entering it
    act = np.flatnonzero(alive[1:]) + 1
    inarc[sid[act]] = f[par[act], act]
    for t in range(len(kids) - 1, -1, -1):
        a = inarc[n1 + t]
        inarc[kids[t]] = cyc_arc[kids[t]]
        inarc[snaps[t][a % n1]] = a
    heads = inarc[:n1] // n1
    heads[0] = -1
    return heads
