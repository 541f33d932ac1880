"""Inside-outside of a factor times an anchored grammar, in scaled probability space (Hall & Klein 2012, eq. 4).

The augmented distribution ``q^m ~ f_m * q`` (paper §5.3-5.4) scores a refined tree by the product of the factor's
refined rule weights (``factor`` module) and the anchored grammar's item scores: ``exp(phi_b)`` on every binary
item, ``exp(phi_u)`` on every unary item, ``exp(phi_t)`` on every tag item. The recurrences (brief §1.1):

- ``bot[i, i+1, t, x] = E[i, t, x] e^{phi_t}``;
- ``top[i, j, A, x] = sum_{u = A -> B, y} U[u, x, y] e^{phi_u(i, j, u)} bot[i, j, B, y]``;
- ``bot[i, j, A, x] = sum_{k, r = A -> B C, y, z} W[r, x, y, z] e^{phi_b(i, k, j, r)} top[i, k, B, y] top[k, j, C, z]``;
- ``Z = top[0, n, TOP, 0]``; the outside pass mirrors them from ``(0, n)`` down.

**Scaling** (brief §1.5, one step finer). Each labelled cell's bot and top vectors are stored as ``chart * exp(s)``
with the largest of its ``K`` substates 1 and ``s[i, j, A]`` a log scale per cell *and label*: the brief's
per-cell scale lost mass when a cell's labels differ by hundreds of nats (two small children multiply below
1e-308 while their items' exponents are large; ``test_scaled_pass_survives_extreme_scores``). Rule weights are
stored as ``exp(log_w - max_r)`` with the rule's maximum moved into the exponent. The outside chart is stored as
``o = alpha * exp(s - log Z)``: a parent-to-child contribution then carries ``exp(phi + max_r + s_children -
s_parent)``, clipped at ``exp(700)``, and a marginal is just ``o * chart``.

Two implementations of the same recurrences and scaling, both tested equal to the enumeration and to the
log-space oracle (:mod:`engine.constituency.reference`) at 1e-10:

- :func:`inside_outside` / :func:`log_partition`: the compiled kernel (:mod:`engine.constituency.kernel`), one
  item at a time; what EP and the trainer call. About 10 times faster (CPU) than the numpy pass on pruned PTB dev
  sentences (``docs/constituency.md``, speed table).
- :func:`inside_outside_numpy` / :func:`log_partition_numpy`: **vectorised** over all items of one span length
  (gathers, an ``einsum`` over the substates, ``np.bincount`` to scatter into cells), so the Python loop runs
  over the ``n`` lengths only; O(N_b K^3 + N_u K^2 + n T K) flops plus about ``8n`` vectorised steps, whose
  overhead dominates at K = 1 and 2. Kept as the readable reference of the compiled pass.
"""

from __future__ import annotations

import numpy as np

from engine.constituency import kernel
from engine.constituency.anchored import AnchoredItems, AnchoredScores, FloatArray, IntArray, items_from_tree
from engine.constituency.factor import Factor, FactorMarginals
from engine.constituency.grammar import AnchoredTree, Grammar

__all__ = ["gold_pass", "inside_outside", "inside_outside_numpy", "log_partition", "log_partition_numpy"]

_CLIP = 700.0  # largest exponent taken (exp(709) overflows)


def _normalised(log_w: FloatArray) -> tuple[FloatArray, FloatArray]:
    """``(exp(log_w - m), m)`` with ``m`` the maximum over each rule's substates (0 for an all ``-inf`` rule)."""
    flat = log_w.reshape(len(log_w), -1)
    m = flat.max(axis=1) if flat.shape[1] else np.zeros(len(log_w))
    m = np.where(np.isfinite(m), m, 0.0)
    return np.exp(log_w - m.reshape((-1,) + (1,) * (log_w.ndim - 1))), m


def _accumulate(local: IntArray, labels: IntArray, log_c: FloatArray, y: FloatArray, cells: int,
                n_labels: int) -> tuple[FloatArray, FloatArray]:
    """Sum item contributions ``exp(log_c) * y`` (``y`` of shape ``(N, K)``) per ``(cell, label)`` without under-
    or overflow: each row is normalised by its largest entry, the log magnitudes ``log_c + log max y`` are made
    relative to their per-``(cell, label)`` maximum ``ref``. Returns ``(acc (cells, L, K), ref (cells, L))``,
    the sum being ``acc * exp(ref)`` (``ref`` is 0 where nothing arrives)."""
    top = y.max(axis=1)
    alive = (top > 0) & (log_c > -np.inf)
    with np.errstate(divide="ignore"):
        magnitude = np.where(alive, log_c + np.log(np.where(alive, top, 1.0)), -np.inf)
    key = local * n_labels + labels
    ref = np.full(cells * n_labels, -np.inf)
    np.maximum.at(ref, key, magnitude)
    ref = np.where(np.isfinite(ref), ref, 0.0)
    weight = np.where(alive, np.exp(magnitude - ref[key]) / np.where(alive, top, 1.0), 0.0)
    return _scatter(local, labels, y * weight[:, None], cells, n_labels), ref.reshape(cells, n_labels)


def _bincount(index: IntArray, weights: FloatArray, size: int) -> FloatArray:
    """``np.bincount`` with float weights (typed as such: numpy's stubs say it returns integers)."""
    return np.asarray(np.bincount(index, weights, minlength=size), dtype=np.float64)


def _scatter(local: IntArray, labels: IntArray, values: FloatArray, cells: int, n_labels: int) -> FloatArray:
    """Sum the ``(N, K)`` rows of ``values`` into a ``(cells, L, K)`` array at ``(local, labels)``."""
    k = values.shape[1]
    flat = ((local * n_labels + labels) * k)[:, None] + np.arange(k)[None, :]
    return _bincount(flat.ravel(), values.ravel(), cells * n_labels * k).reshape(cells, n_labels, k)


def _store(chart: FloatArray, scale: FloatArray, length: int, acc: FloatArray, ref: FloatArray) -> None:
    """Write the accumulated cells of one length into ``chart``, each ``(cell, label)`` renormalised (largest
    substate 1), their log scales ``ref + log(max)`` into ``scale`` (``-inf`` where nothing arrived)."""
    cells = acc.shape[0]
    i = np.arange(cells)
    top = acc.max(axis=2)
    alive = top > 0
    acc[alive] /= top[alive][:, None]
    chart[i, i + length] = acc
    with np.errstate(divide="ignore"):
        scale[i, i + length] = np.where(alive, ref + np.log(np.where(alive, top, 1.0)), -np.inf)


def _gap(*terms: FloatArray, clip: float = np.inf) -> FloatArray:
    """The sum of log terms, ``-inf`` if any is infinite (never ``inf - inf``), clipped above at ``clip`` (the
    outside pass's exponents; the inside pass's are absolute logs, made relative by the cell maximum)."""
    total = np.zeros_like(terms[0])
    dead = np.zeros(terms[0].shape, dtype=bool)
    for term in terms:
        dead |= ~np.isfinite(term)
        total = total + np.where(np.isfinite(term), term, 0.0)
    return np.where(dead, -np.inf, np.minimum(total, clip))


class _Pass:
    """The charts of one inside-outside pass: ``bot``, ``top`` (scaled inside), ``sb``, ``st`` (their log scales),
    ``ob``, ``ot`` (scaled outside, allocated by the outside pass)."""

    def __init__(self, items: AnchoredItems, factor: Factor, scores: AnchoredScores) -> None:
        self.items, self.factor, self.scores = items, factor, scores
        n, size, k = items.n, items.n_labels, factor.k
        self.size, self.k = size, k
        self.bot = np.zeros((n + 1, n + 1, size, k))
        self.top = np.zeros((n + 1, n + 1, size, k))
        self.sb = np.full((n + 1, n + 1, size), -np.inf)
        self.st = np.full((n + 1, n + 1, size), -np.inf)
        self.wn, self.wmax = _normalised(factor.log_w)
        self.un, self.umax = _normalised(factor.log_u)

    def inside(self) -> float:
        """Fill the inside charts; return ``log Z`` (``-inf`` when no tree is live)."""
        it, n = self.items, self.items.n
        lex = self.factor.log_e[it.tag_i, it.tag_t] + self.scores.tag[:, None]  # (T, K)
        peak = lex.max(axis=1) if lex.size else np.zeros(0)
        with np.errstate(invalid="ignore"):
            y = np.where(np.isfinite(peak)[:, None], np.exp(lex - peak[:, None]), 0.0)
        acc, ref = _accumulate(it.tag_i, it.tag_t, peak, y, n, self.size)
        _store(self.bot, self.sb, 1, acc, ref)
        for length in range(1, n + 1):
            if length > 1:
                self._inside_binary(length)
            self._inside_unary(length)
        root = self.top[0, n, it.root, 0]
        return float(self.st[0, n, it.root] + np.log(root)) if root > 0 else -np.inf

    def _inside_binary(self, length: int) -> None:
        it, s = self.items, self.items.binary_of_length(length)
        i, k, j, r = it.bin_i[s], it.bin_k[s], it.bin_j[s], it.bin_r[s]
        left, right = self.top[i, k, it.bin_b[s]], self.top[k, j, it.bin_c[s]]
        c = _gap(self.scores.binary[s], self.wmax[r], self.st[i, k, it.bin_b[s]], self.st[k, j, it.bin_c[s]])
        y = np.einsum("nxyz,ny,nz->nx", self.wn[r], left, right)
        acc, ref = _accumulate(i, it.bin_a[s], c, y, it.n - length + 1, self.size)
        _store(self.bot, self.sb, length, acc, ref)

    def _inside_unary(self, length: int) -> None:
        it, s = self.items, self.items.unary_of_length(length)
        i, j, u = it.un_i[s], it.un_j[s], it.un_u[s]
        c = _gap(self.scores.unary[s], self.umax[u], self.sb[i, j, it.un_b[s]])
        y = np.einsum("nxy,ny->nx", self.un[u], self.bot[i, j, it.un_b[s]])
        acc, ref = _accumulate(i, it.un_a[s], c, y, it.n - length + 1, self.size)
        _store(self.top, self.st, length, acc, ref)

    def outside(self, log_z: float) -> FactorMarginals:
        """Fill the scaled outside charts from the root down and collect every marginal (brief §1.1)."""
        it, n, k = self.items, self.items.n, self.k
        self.ob, self.ot = np.zeros_like(self.bot), np.zeros_like(self.top)
        self.ot[0, n, it.root, 0] = 1.0 / self.top[0, n, it.root, 0]
        w_counts, u_counts = np.zeros_like(self.wn), np.zeros_like(self.un)
        mu_b, mu_u = np.zeros(it.n_binary), np.zeros(it.n_unary)
        for length in range(n, 0, -1):
            self._outside_unary(length, u_counts, mu_u)
            if length > 1:
                self._outside_binary(length, w_counts, mu_b)
        tags = self.ob[it.tag_i, it.tag_i + 1, it.tag_t] * self.bot[it.tag_i, it.tag_i + 1, it.tag_t]
        e_counts = np.zeros((n, self.size, k))
        e_counts[it.tag_i, it.tag_t] = tags
        return FactorMarginals(log_z, w_counts, u_counts, e_counts, mu_b, mu_u, tags.sum(axis=1),
                               (self.ob * self.bot).sum(axis=3), (self.ot * self.top).sum(axis=3))

    def _outside_unary(self, length: int, u_counts: FloatArray, mu_u: FloatArray) -> None:
        it, s = self.items, self.items.unary_of_length(length)
        i, j, u, b = it.un_i[s], it.un_j[s], it.un_u[s], it.un_b[s]
        e = _gap(self.scores.unary[s], self.umax[u], self.sb[i, j, b], -self.st[i, j, it.un_a[s]], clip=_CLIP)
        g = self.ot[i, j, it.un_a[s]][:, :, None] * self.un[u] * np.exp(e)[:, None, None]  # (N, x, y)
        cells = it.n - length + 1
        self.ob[np.arange(cells), np.arange(cells) + length] += _scatter(i, b, g.sum(axis=1), cells, self.size)
        refined = g * self.bot[i, j, b][:, None, :]
        mu_u[s] = refined.sum(axis=(1, 2))
        kk = self.k * self.k
        flat = (u * kk)[:, None] + np.arange(kk)[None, :]
        u_counts += _bincount(flat.ravel(), refined.ravel(), u_counts.size).reshape(u_counts.shape)

    def _outside_binary(self, length: int, w_counts: FloatArray, mu_b: FloatArray) -> None:
        it, s, n = self.items, self.items.binary_of_length(length), self.items.n
        i, k, j, r = it.bin_i[s], it.bin_k[s], it.bin_j[s], it.bin_r[s]
        b, c = it.bin_b[s], it.bin_c[s]
        left, right = self.top[i, k, b], self.top[k, j, c]
        e = _gap(self.scores.binary[s], self.wmax[r], self.st[i, k, b], self.st[k, j, c], -self.sb[i, j, it.bin_a[s]],
                 clip=_CLIP)
        kk = self.k * self.k
        parent = self.ob[i, j, it.bin_a[s]] * np.exp(e)[:, None]  # (N, x)
        weights = self.wn[r].reshape(len(r), self.k, kk)  # (N, x, yz)
        g = np.einsum("nx,nxw->nw", parent, weights).reshape(len(r), self.k, self.k)  # summed over x: (N, y, z)
        children = np.concatenate([i * (n + 1) + k, k * (n + 1) + j])
        flat = ((children * self.size + np.concatenate([b, c])) * self.k)[:, None] + np.arange(self.k)[None, :]
        values = np.concatenate([np.einsum("nyz,nz->ny", g, right), np.einsum("nyz,ny->nz", g, left)])
        self.ot += _bincount(flat.ravel(), values.ravel(), self.ot.size).reshape(self.ot.shape)
        pair = (left[:, :, None] * right[:, None, :]).reshape(len(r), 1, kk)
        refined = weights * (parent[:, :, None] * pair)  # (N, x, yz)
        mu_b[s] = refined.sum(axis=(1, 2))
        k3 = self.k**3
        flat = (r * k3)[:, None] + np.arange(k3)[None, :]
        w_counts += _bincount(flat.ravel(), refined.ravel(), w_counts.size).reshape(w_counts.shape)


def inside_outside_numpy(items: AnchoredItems, factor: Factor, scores: AnchoredScores) -> FactorMarginals:
    """``log Z``, refined expected counts and coarse anchored marginals of ``factor * scores`` over ``items``
    (brief §1.1), vectorised per span length. Raises ``FloatingPointError`` when no tree is live (``Z = 0``)."""
    run = _Pass(items, factor, scores)
    log_z = run.inside()
    if not np.isfinite(log_z):
        raise FloatingPointError(f"the partition function is {log_z}: no live tree")
    return run.outside(log_z)


def log_partition_numpy(items: AnchoredItems, factor: Factor, scores: AnchoredScores) -> float:
    """``log Z`` of ``factor * scores`` (the inside pass alone); ``-inf`` when no tree is live."""
    return _Pass(items, factor, scores).inside()


def gold_pass(grammar: Grammar, tree: AnchoredTree, factor: Factor) -> FactorMarginals:
    """The tree-shaped pass of the gold side (brief §1.4): inside-outside of ``factor`` over the items of ``tree``
    alone, no anchored grammar (Epic's ``epInGold=false``). ``log_z`` is ``log Z_gold,m``, the counts are the
    gold half of the gradient."""
    items = items_from_tree(grammar, tree)
    return inside_outside(items, factor, AnchoredScores.zeros(items))


def _ints(*arrays: IntArray) -> tuple[IntArray, ...]:
    return tuple(np.ascontiguousarray(a, dtype=np.int64) for a in arrays)


def _floats(*arrays: FloatArray) -> tuple[FloatArray, ...]:
    return tuple(np.ascontiguousarray(a, dtype=np.float64) for a in arrays)


class _Compiled:
    """The arguments and charts of one pass of the compiled kernel (``kernel``)."""

    def __init__(self, items: AnchoredItems, factor: Factor, scores: AnchoredScores) -> None:
        it, n, k = items, items.n, factor.k
        self.items = items
        self.bins = _ints(it.bin_i, it.bin_k, it.bin_j, it.bin_r, it.bin_a, it.bin_b, it.bin_c)
        self.uns = _ints(it.un_i, it.un_j, it.un_u, it.un_a, it.un_b)
        self.starts = _ints(it.bin_start, it.un_start)
        self.phi = _floats(scores.binary, scores.unary)
        self.wn, self.wmax = _normalised(factor.log_w)
        self.un, self.umax = _normalised(factor.log_u)
        self.shape = (n + 1, n + 1, items.n_labels, k)
        self.bot, self.top = np.zeros(self.shape), np.zeros(self.shape)
        self.sb, self.st = np.full(self.shape[:3], -np.inf), np.full(self.shape[:3], -np.inf)
        (lex,) = _floats(factor.log_e[it.tag_i, it.tag_t] + scores.tag[:, None])
        tag_i, tag_t = _ints(it.tag_i, it.tag_t)
        self.log_z = float(kernel.inside_pass(
            n, it.root, self.bins, self.starts[0], self.uns, self.starts[1], tag_i, tag_t, self.phi[0], self.phi[1],
            lex, self.wn, self.wmax, self.un, self.umax, self.bot, self.sb, self.top, self.st))

    def outside(self) -> FactorMarginals:
        it, n = self.items, self.items.n
        ob, ot = np.zeros(self.shape), np.zeros(self.shape)
        w_counts, u_counts = np.zeros_like(self.wn), np.zeros_like(self.un)
        mu_b, mu_u = np.zeros(it.n_binary), np.zeros(it.n_unary)
        mu_bot, mu_top = np.zeros(self.shape[:3]), np.zeros(self.shape[:3])
        kernel.outside_pass(n, it.root, self.bins, self.starts[0], self.uns, self.starts[1], self.phi[0],
                            self.phi[1], self.wn, self.wmax, self.un, self.umax, self.bot, self.sb, self.top, self.st,
                            ob, ot, w_counts, u_counts, mu_b, mu_u, mu_bot, mu_top)
        tags = ob[it.tag_i, it.tag_i + 1, it.tag_t] * self.bot[it.tag_i, it.tag_i + 1, it.tag_t]
        e_counts = np.zeros((n, it.n_labels, self.shape[3]))
        e_counts[it.tag_i, it.tag_t] = tags
        return FactorMarginals(self.log_z, w_counts, u_counts, e_counts, mu_b, mu_u, tags.sum(axis=1), mu_bot, mu_top)


def inside_outside(items: AnchoredItems, factor: Factor, scores: AnchoredScores) -> FactorMarginals:
    """What :func:`inside_outside_numpy` returns, computed by the compiled kernel (``kernel``): ``log Z``, refined
    expected counts and coarse anchored marginals of ``factor * scores`` over ``items`` (brief §1.1). Raises
    ``FloatingPointError`` when no tree is live (``Z = 0``)."""
    run = _Compiled(items, factor, scores)
    if not np.isfinite(run.log_z):
        raise FloatingPointError(f"the partition function is {run.log_z}: no live tree")
    return run.outside()


def log_partition(items: AnchoredItems, factor: Factor, scores: AnchoredScores) -> float:
    """``log Z`` of ``factor * scores`` by the compiled inside pass; ``-inf`` when no tree is live."""
    return _Compiled(items, factor, scores).log_z
