"""Global tree factors TREE and PTREE (Smith & Eisner 2008 §5.3).

TREE (non-projective) and PTREE (projective) are hard constraints over all ``O(n^2)`` link variables:
the assignment must be a (single- or multi-rooted) dependency tree. Their propagator runs a
first-order parser with edge weights equal to the incoming message odds ``q[h, m]``: the marginal
``mu[h, m]`` of each edge under the distribution over trees proportional to the product of those odds
is the factor's belief ``b(L[h, m] = true)``, and the outgoing message divides out the incoming one:

    out[h, m] = logit(mu[h, m]) - r[h, m]          (log-odds; r = incoming log-odds)

``1 - mu[h, m]`` keeps full relative precision when ``mu`` is close to 1 (``_complement``): every tree
gives m exactly one head, so a column of marginals sums to 1, at most its largest entry exceeds 1/2,
and that entry's complement is the sum of the column's other entries. O(n^3) per propagation:
Matrix-Tree for TREE (marginals only: BP needs no log Z), Eisner inside-outside for PTREE.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from engine.graph.family import ArcFamily, FactorFamily, Messages, pad_arcs
from engine.kernels.brute_force import is_projective
from engine.kernels.eisner import eisner_marginals
from engine.kernels.matrix_tree import (
    matrix_tree_marginals,
    matrix_tree_word_marginals,
    matrix_tree_word_marginals_many,
)
from engine.kernels.mst import is_tree
from engine.kernels.tree_hessian import eisner_hvp, matrix_tree_hvp

_TINY = 1e-300


def _complement(mu: np.ndarray) -> np.ndarray:
    """``1 - mu[h, m]`` for marginals whose columns sum to 1, to full relative precision: the sum of the
    column's other entries for its largest entry (the only one that can exceed 1/2), ``1 - mu`` (at
    least about 1/2, so exact to rounding) for the rest. Equal to ``_exclusive_sum(mu)`` up to rounding
    in fewer array operations. ``mu`` (n+1, n+1), or (B, n+1, n+1) for a stack of sentences."""
    columns = mu.shape[-1]
    top = mu.argmax(axis=-2) * columns + np.arange(columns)  # flat index of each column's largest entry
    if mu.ndim == 3:  # a stack: offset by sentence
        top = (top + (np.arange(len(mu)) * mu[0].size)[:, None]).reshape(-1)
    others = mu.copy()
    others.put(top, 0.0)
    rest = 1.0 - mu
    rest.put(top, np.add.reduce(others, axis=-2))
    return rest


def _exclusive_sum(x: np.ndarray) -> np.ndarray:
    """``out[h, m] = sum_{h' != h} x[h', m]`` by prefix and suffix sums (no cancellation)."""
    zero = np.zeros((1, x.shape[1]))
    prefix = np.concatenate([zero, np.cumsum(x, axis=0)[:-1]])
    suffix = np.concatenate([np.cumsum(x[::-1], axis=0)[::-1][1:], zero])
    return prefix + suffix


class Tree(ArcFamily):
    """TREE (``projective=False``) or PTREE (``projective=True``), single- or multi-rooted."""

    def __init__(self, n: int, valid: np.ndarray, *, projective: bool, single_root: bool) -> None:
        super().__init__(n, valid)
        self.projective = projective
        self.single_root = single_root
        self.name = "ptree" if projective else "tree"
        self._words = valid[:, 1:].copy()  # valid arcs into words 1..n, [h, m - 1], without self loops
        self._words.reshape(-1)[n::n + 1] = False
        self.length = n  # the sentence's own words; fewer than n in a tree widened for a stack (``widened``)

    stackable = True

    def widened(self, size: int) -> Tree:
        """This factor inside a stack of sentences of ``size`` words (``engine.inference.joint_bp``): words
        n+1..size are padding, with no arc into or out of them (no variable), which the batched Matrix-Tree
        kernel gives an identity block (``matrix_tree_word_marginals_many``'s ``lengths``): the real words'
        marginals are this factor's own. TREE only (Eisner's chart has no padding)."""
        if size == self.n:
            return self
        if self.projective or size < self.n or self.length != self.n:
            raise ValueError("only an unwidened TREE factor can be widened, to at least its own length")
        out = Tree(size, pad_arcs(self.valid, size), projective=False, single_root=self.single_root)
        out.length = self.n
        return out

    @classmethod
    def stack(cls, parts: Sequence[FactorFamily]) -> FactorFamily:
        """TREE/PTREE over several sentences of one length (``FactorFamily.stack``): its update computes
        the marginals of all of them at once, by the batched Matrix-Tree path (PTREE: Eisner per sentence)."""
        if len(parts) == 1:
            return parts[0]
        trees: list[Tree] = list(parts)  # type: ignore[arg-type]
        lengths = np.array([t.length for t in trees])
        return _TreeStack.of(trees[0], np.stack([t.valid for t in trees]), np.stack([t._words for t in trees]),
                             None if (lengths == trees[0].n).all() else lengths)

    def marginals(self, incoming: Messages) -> tuple[float, np.ndarray]:
        """``(log Z, mu)`` of the tree distribution with edge weights exp(incoming log-odds)."""
        scores = np.where(self.valid, incoming[0], -np.inf)
        if self.projective:
            return eisner_marginals(scores, single_root=self.single_root)
        log_z, mu = matrix_tree_marginals(scores, single_root=self.single_root)
        return float(log_z), mu

    def arc_marginals(self, incoming: Messages) -> np.ndarray:
        """``mu`` of ``marginals`` without log Z."""
        if self.projective:
            return self.marginals(incoming)[1]
        n = self.length  # a widened factor alone: its own words (the padding has no variable)
        words = np.where(self._words[:n + 1, :n], incoming[0][:n + 1, 1:n + 1], -np.inf)
        if n == self.n:
            return matrix_tree_word_marginals(words, single_root=self.single_root)
        mu = np.zeros(self.valid.shape)
        mu[:n + 1, :n + 1] = matrix_tree_word_marginals(words, single_root=self.single_root)
        return mu

    def propagate(self, incoming: Messages) -> Messages:
        mu = self.arc_marginals(incoming)
        logit = np.log(np.maximum(mu, _TINY) / np.maximum(_complement(mu), _TINY))
        return (np.where(self.valid, logit - incoming[0], 0.0),)

    def vjp(self, incoming: Messages, grad_out: Messages) -> tuple[Messages, np.ndarray | None]:
        """Adjoint of ``propagate`` (Gormley et al. 2015 §3.4, Fig. 2 C.1-C.3; for TREE, the
        non-projective case that paper left to future work).

        ``out = log mu - log rest - r`` with ``rest = exclusive_sum(mu)``, so with ``g = d/d out``:
        ``d/d mu = g / mu - exclusive_sum(g / rest)`` (the exclusive sum is its own transpose), and the
        Jacobian of ``mu`` in ``r`` is the Hessian of ``log Z``: ``d/d r = H (d/d mu) - g``, an exact
        O(n^3) Hessian-vector product (``engine.kernels.tree_hessian``). Where the forward pass
        clamped ``mu`` or ``rest`` at 1e-300 the adjoint through that term is 0."""
        g = np.where(self.valid, grad_out[0], 0.0)
        mu = self.arc_marginals(incoming)
        rest = _exclusive_sum(mu)
        g_mu = (np.where(mu > _TINY, g / np.maximum(mu, _TINY), 0.0)
                - _exclusive_sum(np.where(rest > _TINY, g / np.maximum(rest, _TINY), 0.0)))
        scores = np.where(self.valid, incoming[0], -np.inf)
        if self.projective:
            hv = eisner_hvp(scores, g_mu, single_root=self.single_root)
        else:
            hv = matrix_tree_hvp(scores, g_mu, single_root=self.single_root)[1]
        return (np.where(self.valid, hv - g, 0.0),), None

    def log_potential(self, y: np.ndarray) -> float:
        y = y & self.valid
        if not (y[:, 1:].sum(axis=0) == 1).all():
            return -np.inf
        heads = np.concatenate([[-1], y[:, 1:].argmax(axis=0)])
        ok = is_tree(heads) and (not self.single_root or (heads[1:] == 0).sum() == 1)
        ok = ok and (not self.projective or is_projective(heads))
        return 0.0 if ok else -np.inf


class _TreeStack(Tree):
    """``Tree.stack``: the tree factor of B sentences of one length; ``valid`` (B, n+1, n+1)."""

    lengths: np.ndarray | None  # each sentence's own words where some are shorter than n (``Tree.widened``)

    @classmethod
    def of(cls, like: Tree, valid: np.ndarray, words: np.ndarray, lengths: np.ndarray | None = None) -> _TreeStack:
        out = object.__new__(cls)
        out._stacked(like.n, valid)
        out.projective, out.single_root, out.name = like.projective, like.single_root, like.name
        out._words, out.lengths, out.length = words, lengths, like.n
        return out

    def sentences(self, keep: np.ndarray) -> FactorFamily:
        return self.of(self, self.valid[keep], self._words[keep], None if self.lengths is None else self.lengths[keep])

    def propagate_flat(self, incoming: np.ndarray) -> np.ndarray:
        r = incoming.reshape(self.valid.shape)
        if self.projective:
            scores = np.where(self.valid, r, -np.inf)
            mu = np.stack([eisner_marginals(s, single_root=self.single_root)[1] for s in scores])
        else:
            words = np.where(self._words, r[:, :, 1:], -np.inf)
            mu = matrix_tree_word_marginals_many(words, single_root=self.single_root, lengths=self.lengths)
        logit = np.log(np.maximum(mu, _TINY) / np.maximum(_complement(mu), _TINY))
        return np.where(self.valid, logit - r, 0.0).reshape(-1)

    def vjp(self, incoming: Messages, grad_out: Messages) -> tuple[Messages, np.ndarray | None]:
        raise NotImplementedError("a stack of tree factors has no adjoint: differentiate BP one sentence at a time")
