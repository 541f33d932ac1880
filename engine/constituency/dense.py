"""Dense one-substate inside-outside over the unpruned chart: the coarse pruning pass (``../shared/design/epic.md``
§2 "Coarse pruning", §1.1 with K = 1).

The unpruned item list of a 40-word sentence has about 16M binary items (10,660 splits x 1,536 rules), too many to
list (``anchored.build_items``: seven int64 arrays of 16M). This pass never lists them: for the cells of one span
length it sums the products of the children's top charts over the split points, reads the rules' ``(B, C)``
entries, weights them and scatters them onto their parents (``np.bincount``); unary rules are one ``(L, L)``
matrix. The split points whose children both span two words or more take one batched matrix product over the
labels that can top such a span (``(cells, P, splits) @ (cells, splits, P)``, ``P`` = 46 of the PTB grammar's 92
labels: the charts keep those labels in the first ``P`` columns); the two edge splits (a one-word child, any
label) are read rule by rule. The outside pass scatters the parents' outside weights into ``(cells, L, L)`` and
multiplies back the same way. Cost O(n^3 P^2 / 6) flops in BLAS (single-threaded BLAS is much faster on a loaded
machine: ``docs/constituency.md``) plus about ``8n`` vectorised steps.

It computes what ``inside_outside.inside_outside`` computes over ``build_items(grammar, full_mask(grammar, n))``
with a one-substate factor and a zero anchored grammar (TOP only in the root cell's top layer, tags only in
one-word cells' bot layer): ``log Z`` and the coarse marginals ``mu_bot``, ``mu_top``; tested equal to it on
tiny grammars.

**Scaling**: one log scale per cell and layer (brief §1.5), the largest label 1; outside values are stored as
``o = alpha * exp(s - log Z)`` so that a marginal is ``o * chart``. A label more than ~700 nats below its cell's
best label underflows to 0: its posterior is then taken as 0, harmless for pruning at ``e^-9`` unless its outside
score is as many nats above (``inside_outside`` keeps a scale per cell and label for the inference proper).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from engine.constituency.anchored import FloatArray
from engine.constituency.factor import Factor
from engine.constituency.grammar import Grammar

__all__ = ["DenseMarginals", "dense_inside_outside"]

_CLIP = 700.0  # largest exponent taken (exp(709) overflows)


@dataclass(frozen=True)
class DenseMarginals:
    """``log_z`` and the coarse marginals ``mu_bot[i, j, A]``, ``mu_top[i, j, A]``, shape ``(n+1, n+1, L)``."""

    log_z: float
    mu_bot: FloatArray
    mu_top: FloatArray


class _Dense:
    """Charts of one pass: ``bot``, ``top`` (scaled inside), ``sb``, ``st`` (per-cell log scales)."""

    def __init__(self, grammar: Grammar, factor: Factor) -> None:
        if factor.k != 1:
            raise ValueError(f"the dense pass takes one-substate factors, got K = {factor.k}")
        n, size = factor.log_e.shape[0], grammar.n_labels
        # the labels that can top a span of two words or more (a unary's top over a binary rule's parent, not
        # TOP) come first: the charts hold label ``order[x]`` in column ``x`` (``inv`` is the inverse), so that a
        # product over two such spans is over the columns ``:long`` alone (``_pairs``)
        can = np.zeros(size, dtype=bool)
        can[grammar.unary[np.isin(grammar.unary[:, 1], grammar.binary[:, 0]), 0]] = True
        can[grammar.top] = False
        self.order = np.concatenate([np.flatnonzero(can), np.flatnonzero(~can)])
        self.inv = np.argsort(self.order)
        self.long = int(can.sum())
        self.a, self.b, self.c = self.inv[grammar.binary.T]
        self.n, self.size, self.root = n, size, int(self.inv[grammar.top])
        self.inner = np.flatnonzero((self.b < self.long) & (self.c < self.long))
        self.w = np.exp(factor.log_w[:, 0, 0, 0])
        top_label, bot_label = self.inv[grammar.unary.T]
        self.unary = np.zeros((size, size))  # [bot, top]
        np.add.at(self.unary, (bot_label, top_label), np.exp(factor.log_u[:, 0, 0]))
        self.unary[:, self.root] = 0.0  # TOP only at the root
        self.root_unary = np.zeros(size)
        top_rules = top_label == self.root
        np.add.at(self.root_unary, bot_label[top_rules], np.exp(factor.log_u[top_rules, 0, 0]))
        self.bot = np.zeros((n + 1, n + 1, size))
        self.top = np.zeros((n + 1, n + 1, size))
        self.sb = np.full((n + 1, n + 1), -np.inf)
        self.st = np.full((n + 1, n + 1), -np.inf)
        lex = np.where(grammar.is_tag[None, self.order], factor.log_e[:, self.order, 0], -np.inf)
        self._store(self.bot, self.sb, 1, np.exp(lex - _finite_max(lex)[:, None]), _finite_max(lex))

    def _store(self, chart: FloatArray, scale: FloatArray, length: int, values: FloatArray, ref: FloatArray) -> None:
        """Write the cells of one length, each renormalised to a largest label of 1."""
        cells = np.arange(self.n - length + 1)
        peak = values.max(axis=1)
        alive = (peak > 0) & np.isfinite(ref)
        chart[cells, cells + length] = np.where(alive[:, None], values / np.where(alive, peak, 1.0)[:, None], 0.0)
        with np.errstate(divide="ignore"):
            scale[cells, cells + length] = np.where(alive, ref + np.log(np.where(alive, peak, 1.0)), -np.inf)

    def _splits(self, length: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        i = np.arange(self.n - length + 1)[:, None]
        return i, i + np.arange(1, length)[None, :], i + length

    def inside(self) -> float:
        for length in range(1, self.n + 1):
            if length > 1:
                i, k, j = self._splits(length)
                scale = self.st[i, k] + self.st[k, j]  # (cells, splits)
                ref = _finite_max(scale)
                weight = np.where(np.isfinite(scale), np.exp(scale - ref[:, None]), 0.0)
                left = self.top[i, k] * weight[:, :, None]  # (cells, splits, L)
                rules = self._rule_sums(left, self.top[k, j]) * self.w
                self._store(self.bot, self.sb, length, _scatter_labels(rules, a_of=self.a, size=self.size), ref)
            cells = np.arange(self.n - length + 1)
            bot = self.bot[cells, cells + length]
            if length == self.n:
                values = np.zeros((1, self.size))
                values[0, self.root] = bot[0] @ self.root_unary
            else:
                values = bot @ self.unary
            self._store(self.top, self.st, length, values, self.sb[cells, cells + length])
        root = self.top[0, self.n, self.root]
        return float(self.st[0, self.n] + np.log(root)) if root > 0 else -np.inf

    def outside(self, log_z: float) -> DenseMarginals:
        n = self.n
        ob, ot = np.zeros_like(self.bot), np.zeros_like(self.top)
        ot[0, n, self.root] = 1.0 / self.top[0, n, self.root]
        for length in range(n, 0, -1):
            cells = np.arange(n - length + 1)
            jj = cells + length
            step = _exp_gap(self.sb[cells, jj], -self.st[cells, jj])
            unary = self.unary if length < n else np.outer(self.root_unary, np.eye(self.size)[self.root])
            ob[cells, jj] = (ot[cells, jj] @ unary.T) * step[:, None]
            if length == 1:
                continue
            i, k, j = self._splits(length)
            e = _exp_gap(self.st[i, k], self.st[k, j], -self.sb[i, j])  # (cells, splits)
            g = ob[cells, jj][:, self.a] * self.w  # (cells, R)
            self._outside_children(ot, g, i, k, j, e)
        return DenseMarginals(log_z, (ob * self.bot)[:, :, self.inv], (ot * self.top)[:, :, self.inv])

    def _rule_sums(self, left: FloatArray, right: FloatArray) -> FloatArray:
        """``sum_s left[:, s, B(r)] * right[:, s, C(r)]`` per cell and rule (``left``, ``right``: ``(cells, splits,
        L)``): the two edge splits (a one-word child, any label) rule by rule, the others (both children over two
        words or more) by one batched matrix product over the columns ``:long`` (a quarter of the flops)."""
        splits, p = left.shape[1], self.long
        out = left[:, 0, self.b] * right[:, 0, self.c]
        if splits > 1:
            out += left[:, -1, self.b] * right[:, -1, self.c]
        if splits > 2:
            pairs = np.matmul(left[:, 1:-1, :p].transpose(0, 2, 1), right[:, 1:-1, :p])  # (cells, long, long)
            out[:, self.inner] += pairs[:, self.b[self.inner], self.c[self.inner]]
        return out

    def _outside_children(self, ot: FloatArray, g: FloatArray, i: np.ndarray, k: np.ndarray, j: np.ndarray,
                          e: FloatArray) -> None:
        """Add the rules' outside weights ``g (cells, R)``, times each split's scale ``e (cells, splits)``, into the
        children's top outside charts, split as in :meth:`_rule_sums`."""
        splits, p, size, cells = k.shape[1], self.long, self.size, len(g)
        flat = (np.arange(cells)[:, None] * size * size + (self.b * size + self.c)[None, :]).ravel()
        pairs = np.bincount(flat, g.ravel(), cells * size * size).reshape(cells, size, size)  # [B, C]
        i0, j0 = i[:, 0], j[:, 0]
        for s in (0, splits - 1) if splits > 1 else (0,):
            ks, es = k[:, s], e[:, s, None]
            ot[i0, ks] += np.matmul(pairs, self.top[ks, j0][:, :, None])[:, :, 0] * es
            ot[ks, j0] += np.matmul(self.top[i0, ks][:, None, :], pairs)[:, 0, :] * es
        if splits > 2:
            inner = pairs[:, :p, :p]
            mid, weight = k[:, 1:-1], e[:, 1:-1, None]
            ot[i, mid, :p] += np.matmul(self.top[mid, j, :p] * weight, inner.transpose(0, 2, 1))
            ot[mid, j, :p] += np.matmul(self.top[i, mid, :p] * weight, inner)


def _scatter_labels(values: FloatArray, a_of: np.ndarray, size: int) -> FloatArray:
    """``out[c, A] = sum of values[c, r]`` over the rules ``r`` with ``a_of[r] = A`` (``values (cells, R)``)."""
    cells = len(values)
    flat = (np.arange(cells)[:, None] * size + a_of[None, :]).ravel()
    return np.asarray(np.bincount(flat, values.ravel(), cells * size), dtype=np.float64).reshape(cells, size)


def _finite_max(x: FloatArray) -> FloatArray:
    """Maximum over the last axis, 0 where every entry is ``-inf``."""
    m = x.max(axis=-1) if x.shape[-1] else np.zeros(x.shape[:-1])
    return np.where(np.isfinite(m), m, 0.0)


def _exp_gap(*terms: FloatArray) -> FloatArray:
    """``exp(sum of terms)`` clipped at ``exp(700)``, 0 where any term is infinite (a dead cell)."""
    total = sum(np.where(np.isfinite(t), t, 0.0) for t in terms)
    dead = np.zeros(np.shape(terms[0]), dtype=bool)
    for t in terms:
        dead |= ~np.isfinite(t)
    return np.where(dead, 0.0, np.exp(np.minimum(total, _CLIP)))


def dense_inside_outside(grammar: Grammar, factor: Factor) -> DenseMarginals:
    """``log Z`` and the coarse marginals of a one-substate factor over the unpruned chart (module docstring).
    Raises ``FloatingPointError`` when no tree is possible."""
    run = _Dense(grammar, factor)
    log_z = run.inside()
    if not np.isfinite(log_z):
        raise FloatingPointError(f"the partition function is {log_z}: no tree")
    return run.outside(log_z)
