"""Exact, unbiased sampling of dependency trees from ``p(tree) ∝ exp(sum of its arc scores)``.

Non-projective (spanning arborescences rooted at ROOT) -- Wilson (1996), "Generating random spanning
trees more quickly than the cover time", algorithm RandomTreeWithRoot: every word's *successor* is its
head, drawn with probability ``A[h, m] / sum_h' A[h', m]`` (``A = exp(scores)``); walks from each word
not yet in the tree until they hit it, erasing loops by overwriting successors, then attach the
loop-erased path. Wilson's theorem: the output is an in-arborescence with probability proportional to
the product of its transition probabilities, i.e. ``prod A[h, m] / prod_m D_m``, the per-word
normalisers ``D_m`` being the same for every tree: exactly ``p(tree)``.

- multi-root: Wilson over positions ``0..n`` rooted at ROOT.
- single-root: the ROOT child ``r`` is drawn from its exact marginal ``p(head of r = 0)``
  (``matrix_tree_marginals(single_root=True)``), then Wilson over the words only, rooted at ``r``,
  ROOT removed. Exact because a single-root tree is ``{0 -> r}`` plus a spanning arborescence ``T'``
  of the words rooted at ``r``, and ``p(T | r) = A[0, r] prod_{T'} A / (Z p(r)) ∝ prod_{T'} A``:
  given ``r``, the words' arborescence has probability proportional to the product of its word arcs,
  which Wilson rooted at ``r`` samples.

Running time: Wilson's expected number of random successors is ``trace(G)``, ``G = (I - Q)^-1`` the
Green matrix (expected visits) of the walk killed at the root (Wilson 1996); the expected hitting times
of the root are ``h = G 1``. Peaked scores with a dominant cycle (escape probability ``exp(-100)``) make
both astronomical, so ``G`` is computed first (O(n^3) per root). Wilson is used only when ``trace(G)``
is within a step budget (``10 n^2 + 1000``), and each sample's walks are capped at ``128 n max_i h_i``
steps: by Markov's inequality and the strong Markov property a walk exceeds ``2k max_i h_i`` steps
with probability at most ``2^-k``, so the cap is hit with probability below ``n 2^-64`` (that sample is
then redrawn by the fallback, a deviation from exactness far below float precision). As
``h_i <= trace(G)``, no sample takes more than ``128 n (10 n^2 + 1000)`` steps. Otherwise the exact
fallback is sequential sampling by conditional Matrix-Tree marginals (Colbourn, Myrvold & Neufeld
1996): draw one word's head from its marginal, fix it, recompute, ...; O(n^4) per sample, batched over
samples, robust to any score magnitude (Matrix-Tree switches to log-space elimination when its LU is
ill-conditioned). Hence sampling never hangs.

Projective -- forward filtering, backward sampling through Eisner's (1996) inside chart in log space
(``engine.kernels.eisner``): the chart is filled once (O(n^3)); each sample then starts at the top
item (multi-root ``C_r[0, n]``; single-root: the ROOT child ``m`` drawn by ``scores[0, m] + C_l[1, m] +
C_r[m, n]``) and recursively draws every item's split with probability proportional to the inside
weights of its two sub-items (the conditional probability of that split given the item). All samples
are drawn in lock step, vectorised over samples: O(n) per item, 3n + 1 items per tree.
"""

from __future__ import annotations

import contextlib
from bisect import bisect_right

import numpy as np

from engine.kernels.eisner import CL, CR, IL, IR, LOG_SEMIRING, inside_chart, root_terms, validate
from engine.kernels.matrix_tree import matrix_tree_marginals

__all__ = ["sample_trees"]

_STEP_BUDGET = 10  # Wilson is used when its expected number of steps is at most this times n^2 (+ 1000)
_CAP_FACTOR = 128  # per-sample step cap: _CAP_FACTOR * n * max hitting time (abort probability < n 2^-64)
_CHUNK = 1 << 14  # uniforms drawn per call to the generator in Wilson's walks
# Split of an item (kind, s, w) at offset j: children (kA, s, j + dA) and (kB, s + j + oB, w - j - oB).
_SPLIT = np.zeros((4, 4), dtype=np.int64)
_SPLIT[IR] = _SPLIT[IL] = (CR, 0, CL, 1)  # C_r[s, s+j] + C_l[s+j+1, t]
_SPLIT[CR] = (IR, 1, CR, 1)  # I_r[s, s+j+1] + C_r[s+j+1, t]
_SPLIT[CL] = (CL, 0, IL, 0)  # C_l[s, s+j] + I_l[s+j, t]


def sample_trees(
    scores: np.ndarray,
    num: int,
    *,
    single_root: bool,
    projective: bool,
    rng: np.random.Generator | int | None = None,
) -> np.ndarray:
    """``num`` independent exact samples from ``p(tree) ∝ exp(sum of arc scores)``.

    ``scores`` (n+1, n+1) arc log-potentials (column 0 and the diagonal ignored, ``-inf`` forbids an
    arc; not modified). Returns heads of shape (num, n+1), int64, ``heads[:, 0] == -1``. ``rng``: a
    Generator, or a seed (the same seed gives the same samples), or None for fresh entropy.
    Raises ValueError on malformed input or when no tree of the requested kind has a finite score.
    Cost: projective O(n^3 + num n^2); non-projective O(n^3) plus Wilson's expected ``trace(G)`` steps
    per sample, or O(n^4) per sample on the fallback (see the module docstring).
    """
    if isinstance(num, bool) or not isinstance(num, (int, np.integer)) or num < 0:
        raise ValueError(f"num must be a non-negative integer, got {num!r}")
    if not (rng is None or isinstance(rng, np.random.Generator) or
            (isinstance(rng, (int, np.integer)) and not isinstance(rng, bool))):
        raise ValueError(f"rng must be a numpy Generator, an int seed or None, got {type(rng).__name__}")
    s = np.array(validate(scores), dtype=np.float64)  # a copy: the caller's array is never touched
    s[:, 0] = -np.inf
    np.fill_diagonal(s, -np.inf)
    gen = rng if isinstance(rng, np.random.Generator) else np.random.default_rng(rng)
    if projective:
        return _ffbs(s, int(num), single_root, gen)
    return _nonprojective(s, int(num), single_root, gen)


def _draw(w: np.ndarray, u: np.ndarray) -> np.ndarray:
    """Inverse-CDF draw per row of non-negative weights ``w`` (B, K) with uniforms ``u`` (B,) -> (B,).

    Zero-weight entries are never drawn (the first cumulative weight exceeding ``u * total`` is taken).
    """
    cdf = np.cumsum(w, axis=1)
    total = cdf[:, -1]
    v = np.minimum(u * total, np.nextafter(total, 0.0))
    return (cdf <= v[:, None]).sum(axis=1)


def _draw_log(x: np.ndarray, u: np.ndarray) -> np.ndarray:
    """``_draw`` on log weights ``x`` (B, K), each row with a finite entry."""
    return _draw(np.exp(x - x.max(axis=1, keepdims=True)), u)


def _ffbs(s: np.ndarray, num: int, single_root: bool, rng: np.random.Generator) -> np.ndarray:
    """Projective samples: Eisner inside chart, then top-down split sampling, all samples in lock step."""
    n = s.shape[0] - 1
    with np.errstate(divide="ignore"):
        ch, log_z = inside_chart(s, single_root, LOG_SEMIRING)
    if not np.isfinite(log_z):
        raise ValueError("no projective tree has a finite score (every one uses a -inf arc)")
    chart, size = ch.start, ch.start.shape[1]  # chart[kind, start, width]; `size` chart positions
    heads = np.full((num, n + 1), -1, dtype=np.int64)
    stack = np.zeros((num, 2 * size + 2, 3), dtype=np.int64)  # (kind, start, width) items to expand
    rows = np.arange(num)
    if single_root:  # chart over the words only: chart position p is word p + 1
        t = root_terms(s, ch)
        m = _draw_log(np.broadcast_to(t, (num, n)), rng.random(num))
        heads[rows, m + 1] = 0
        stack[:, 0] = np.stack([np.full(num, CL), np.zeros(num, np.int64), m], axis=1)
        stack[:, 1] = np.stack([np.full(num, CR), m, size - 1 - m], axis=1)
        sp, off = np.full(num, 2), 1
    else:
        stack[:, 0] = (CR, 0, size - 1)
        sp, off = np.ones(num, dtype=np.int64), 0
    while (live := np.flatnonzero(sp > 0)).size:
        sp[live] -= 1
        k, a, w = stack[live, sp[live]].T
        inner = w > 0  # width-0 complete items are leaves
        live, k, a, w = live[inner], k[inner], a[inner], w[inner]
        if not live.size:
            continue
        right, left = k == IR, k == IL  # incomplete items carry the arcs
        heads[live[right], a[right] + w[right] + off] = a[right] + off
        heads[live[left], a[left] + off] = a[left] + w[left] + off
        ka, da, kb, ob = (c[:, None] for c in _SPLIT[k].T)
        j = np.arange(int(w.max()))[None, :]
        x = chart[ka, a[:, None], np.minimum(j + da, size - 1)] + chart[
            kb, np.minimum(a[:, None] + j + ob, size - 1), np.maximum(w[:, None] - j - ob, 0)
        ]
        x = np.where(j < w[:, None], x, -np.inf)
        jj = _draw_log(x, rng.random(live.size))
        ka, da, kb, ob = ka[:, 0], da[:, 0], kb[:, 0], ob[:, 0]
        stack[live, sp[live]] = np.stack([ka, a, jj + da], axis=1)
        stack[live, sp[live] + 1] = np.stack([kb, a + jj + ob, w - jj - ob], axis=1)
        sp[live] += 2
    return heads


def _reach(allowed: np.ndarray) -> np.ndarray:
    """Reflexive-transitive closure of a boolean arc matrix (``[a, b]``: a path a -> ... -> b)."""
    r = (allowed | np.eye(len(allowed), dtype=bool)).astype(np.float64)
    while True:
        nxt = ((r @ r) > 0).astype(np.float64)
        if (nxt == r).all():
            return r > 0
        r = nxt


def _walk_cost(q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Wilson's expected number of steps and the largest expected hitting time, per chain.

    ``q`` (B, K, K): transition probabilities among the walk's transient states (rows sum to at most 1; an
    absorbing state is a zero row and adds one harmless visit). The Green matrix ``G = (I - q)^-1`` holds
    expected visits: Wilson's (1996) expected number of random successors is ``trace(G)`` and the hitting
    times are ``h = G 1``. Both are ``inf`` where ``I - q`` is ill-conditioned: ``cond(I - q) <= 2 max h``,
    so ``rcond < 1e-9`` implies ``max h > 5e8``, beyond any budget. O(K^3) per chain.
    """
    a = np.eye(q.shape[-1]) - q
    try:
        g = np.linalg.inv(a)
    except np.linalg.LinAlgError:  # one by one: a singular matrix must not spoil the others
        g = np.full_like(a, np.inf)
        for i in range(len(a)):
            with contextlib.suppress(np.linalg.LinAlgError):
                g[i] = np.linalg.inv(a[i])
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        rcond = 1.0 / (np.abs(a).sum(axis=-1).max(axis=-1) * np.abs(g).sum(axis=-1).max(axis=-1))
        good = np.isfinite(g).all(axis=(1, 2)) & (rcond > 1e-9) & (g.min(axis=(1, 2)) > -1e-6)
    trace, h_max = np.trace(g, axis1=1, axis2=2), g.sum(axis=-1).max(axis=-1)
    return np.where(good, trace, np.inf), np.where(good, h_max, np.inf)


def _nonprojective(s: np.ndarray, num: int, single_root: bool, rng: np.random.Generator) -> np.ndarray:
    """Wilson's algorithm per sample (budgeted), exact sequential fallback for the rest."""
    n = s.shape[0] - 1
    allowed = np.isfinite(s)
    if single_root:
        ok = allowed[0, 1:] & _reach(allowed[1:, 1:]).all(axis=1)  # r can be the ROOT child of a tree
        if not ok.any():
            raise ValueError("no single-root tree has a finite score (every one uses a -inf arc)")
        with np.errstate(divide="ignore"):  # Matrix-Tree's condition estimate may divide by zero
            p = np.where(ok, matrix_tree_marginals(s, single_root=True)[1][0, 1:], 0.0)
        roots = _draw(np.broadcast_to(p, (num, n)), rng.random(num)) + 1
        walk = np.vstack([np.full((1, n + 1), -np.inf), s[1:]])  # the walk never steps to ROOT
    else:
        if not _reach(allowed)[0].all():
            raise ValueError("no tree has a finite score (some word cannot be reached from ROOT)")
        roots, walk = np.zeros(num, dtype=np.int64), s
    with np.errstate(invalid="ignore"):
        wts = np.exp(walk - walk.max(axis=0, keepdims=True))  # column m: weights of the heads of m
        prob = np.nan_to_num(wts / wts.sum(axis=0, keepdims=True)).T  # prob[m, h]: step m -> h
    candidates = [np.flatnonzero(row > 0) for row in prob]  # per word: its possible heads ...
    cums = [np.cumsum(row[c]) for row, c in zip(prob, candidates, strict=True)]
    cdfs = [(c / c[-1]).tolist() if c.size else [] for c in cums]  # ... and their CDF, ending at 1.0
    heads_of: list[list[int]] = [c.tolist() for c in candidates]
    uniq = np.unique(roots)
    q = np.repeat(prob[None, 1:, 1:], uniq.size, axis=0)  # transient states: the words
    if single_root:
        q[np.arange(uniq.size), uniq - 1] = 0.0  # the root child absorbs
    walk_steps, h_max = _walk_cost(q)
    use = walk_steps <= _STEP_BUDGET * n * n + 1000
    caps = {int(r): int(_CAP_FACTOR * n * h_max[i]) + n + 1 for i, r in enumerate(uniq) if use[i]}
    heads = np.full((num, n + 1), -1, dtype=np.int64)
    todo = [i for i in range(num) if int(roots[i]) not in caps]
    buf, pos = rng.random(_CHUNK).tolist(), 0
    for i in range(num):
        root = int(roots[i])
        cap = caps.get(root)
        if cap is None:
            continue
        nxt, in_tree, steps = [-1] * (n + 1), [False] * (n + 1), 0
        in_tree[0] = in_tree[root] = True
        for start in range(1, n + 1):
            u = start
            while not in_tree[u] and steps < cap:  # random walk; revisits overwrite nxt (loop erasure)
                if pos == _CHUNK:
                    buf, pos = rng.random(_CHUNK).tolist(), 0
                nxt[u] = v = heads_of[u][bisect_right(cdfs[u], buf[pos])]
                u = v
                pos += 1
                steps += 1
            if steps >= cap and not in_tree[u]:
                break
            u = start
            while not in_tree[u]:  # attach the loop-erased path
                in_tree[u] = True
                u = nxt[u]
        else:
            nxt[0], nxt[root] = -1, (0 if root else -1)
            heads[i] = nxt
            continue
        todo.append(i)  # cap reached (probability < n 2^-64): redraw exactly below
    if todo:
        rows = np.array(sorted(todo))
        heads[rows] = _sequential(s, rows.size, single_root, roots[rows] if single_root else None, rng)
    return heads


def _sequential(
    s: np.ndarray, num: int, single_root: bool, root_child: np.ndarray | None, rng: np.random.Generator
) -> np.ndarray:
    """Exact samples by conditional Matrix-Tree marginals, one word at a time, batched over samples.

    Each step draws the head of one word from its Matrix-Tree marginal given the arcs fixed so far and
    fixes it (Colbourn, Myrvold & Neufeld 1996); the chain rule makes this exact for any order, even one
    chosen from the arcs fixed so far. Arcs that would close a cycle with fixed arcs are forbidden, and
    the next word is one on a cycle of the currently most likely heads (a dominant cycle makes the
    Kirchhoff matrix ill-conditioned, forcing Matrix-Tree onto its slow log-space path), so dominant
    cycles are broken first. Samples in the same state share one Matrix-Tree call. ``root_child`` (num,)
    fixes each sample's ROOT child. O(n^4) per sample.
    """
    n = s.shape[0] - 1
    w = np.repeat(s[None], num, axis=0)
    heads = np.full((num, n + 1), -1, dtype=np.int64)
    top = np.tile(np.arange(n + 1), (num, 1))  # top[b, v]: where v's chain of fixed heads ends
    nodes, rows = np.arange(n + 1), np.arange(num)

    def fix(m: np.ndarray, h: np.ndarray) -> None:
        """Fix the arcs h -> m (m has no head yet; h -> m closes no cycle), one per sample."""
        col = np.full((num, n + 1), -np.inf)
        col[rows, h] = s[h, m]
        w[rows, :, m] = col
        if single_root:  # ROOT takes no other child
            r = h == 0
            w[r, 0, :] = -np.inf
            w[r, 0, m[r]] = s[0, m[r]]
        heads[rows, m] = h
        top[:] = np.where(top == m[:, None], top[rows, h][:, None], top)
        w[top[:, :, None] == nodes] = -np.inf  # u -> top(u) would close a cycle

    if root_child is not None:
        fix(root_child, np.zeros(num, dtype=np.int64))
    for _ in range(int((heads[0, 1:] < 0).sum())):  # every sample has the same number of free words
        land = np.tile(nodes, (num, 1))
        best = w.argmax(axis=1)  # best[b, 0] = 0: ROOT absorbs
        for _ in range(n + 1):
            land = np.take_along_axis(best, land, axis=1)
        trap = np.zeros((num, n + 1), dtype=bool)
        np.put_along_axis(trap, land, True, axis=1)
        free = heads < 0
        free[:, 0] = False
        m = np.where((trap & free).any(axis=1), (trap & free).argmax(axis=1), free.argmax(axis=1))
        _, first, inv = np.unique(heads, axis=0, return_index=True, return_inverse=True)  # same arcs fixed
        with np.errstate(divide="ignore"):
            p = matrix_tree_marginals(w[first], single_root=single_root)[1][inv.ravel(), :, m]
        fix(m, _draw(p, rng.random(num)))
    heads[:, 0] = -1
    return heads
