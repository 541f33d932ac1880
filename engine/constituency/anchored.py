"""Anchored items of one sentence and anchored grammars over them (Hall & Klein 2012, §5.1; brief §1).

A sentence of ``n`` words has cells ``(i, j)``, ``0 <= i < j <= n``, each with a **bot** and a **top** layer
(``grammar`` module). A :class:`SpanMask` says which labels live in which layer of which cell (pruning, brief §2);
:func:`build_items` lists every anchored item whose labels all live:

- **tag items** ``(i, t)``: tag ``t`` in the bot layer of ``(i, i+1)``;
- **unary items** ``(i, j, u)``: rule ``u = A(top) -> B(bot)`` on ``(i, j)``, grouped by span length;
- **binary items** ``(i, k, j, r)``: rule ``r = A -> B C``, bot ``A`` over ``(i, j)``, top ``B`` over ``(i, k)``,
  top ``C`` over ``(k, j)``, grouped by span length (lengths 2..n), so that inside-outside handles all items of
  one length with a few vectorised array operations (brief §1.5).

An **anchored grammar** (:class:`AnchoredScores`, paper §5.1) gives one log score to each item of that list:
``binary[b]``, ``unary[v]``, ``tag[t]``; ``-inf`` marks a dead item. All factors of one sentence share the item
list, so the product of anchored grammars is ``+`` on these vectors and the division ``-`` (brief §1.3). The
division keeps a dead item dead: where the divisor is ``-inf`` the quotient is ``-inf`` (never ``-inf - -inf``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from engine.constituency import kernel
from engine.constituency.grammar import AnchoredTree, Grammar, IntArray

FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]

__all__ = ["AnchoredItems", "AnchoredScores", "SpanMask", "build_items", "full_mask", "items_from_tree",
           "tree_mask"]


@dataclass(frozen=True)
class SpanMask:
    """Live labels per cell and layer: ``bot[i, j, A]`` and ``top[i, j, A]``, shape ``(n+1, n+1, L)``."""

    bot: BoolArray
    top: BoolArray

    @property
    def n(self) -> int:
        return self.bot.shape[0] - 1


def full_mask(grammar: Grammar, n: int) -> SpanMask:
    """The unpruned mask of ``n`` words: tags in the bot layer of one-word cells, other labels (not TOP) in the
    bot layer of longer cells, every label but TOP in the top layer of every cell but ``(0, n)``, whose top layer
    holds TOP alone (the root)."""
    size = grammar.n_labels
    bot = np.zeros((n + 1, n + 1, size), dtype=bool)
    top = np.zeros((n + 1, n + 1, size), dtype=bool)
    phrase = ~grammar.is_tag.copy()
    phrase[grammar.top] = False
    others = np.ones(size, dtype=bool)
    others[grammar.top] = False
    i, j = np.triu_indices(n + 1, 1)
    word = j == i + 1
    bot[i[word], j[word]] = grammar.is_tag
    bot[i[~word], j[~word]] = phrase
    top[i, j] = others
    top[0, n] = False
    top[0, n, grammar.top] = True
    return SpanMask(bot, top)


def tree_mask(grammar: Grammar, tree: AnchoredTree) -> SpanMask:
    """The mask holding exactly the labels of a tree's cells (for gold spans added to a pruned mask: ``|``)."""
    n, size = tree.n, grammar.n_labels
    bot = np.zeros((n + 1, n + 1, size), dtype=bool)
    top = np.zeros((n + 1, n + 1, size), dtype=bool)
    bot[np.arange(n), np.arange(1, n + 1), tree.tags] = True
    for i, j, u in tree.unary:
        top[i, j, grammar.unary[u, 0]] = True
        bot[i, j, grammar.unary[u, 1]] = True
    return SpanMask(bot, top)


@dataclass(frozen=True)
class AnchoredItems:
    """The anchored items of one sentence as int arrays (brief §1.5).

    Binary items ``b`` in ``bin_i, bin_k, bin_j, bin_r`` (parent ``bin_a``, children ``bin_b``, ``bin_c``) sorted
    by span length, those of length ``l`` at ``bin_start[l]:bin_start[l+1]``; unary items ``v`` in ``un_i, un_j,
    un_u`` (top label ``un_a``, bot label ``un_b``), those of length ``l`` at ``un_start[l]:un_start[l+1]``; tag
    items in ``tag_i, tag_t``. ``n`` words, ``n_labels`` labels, ``root`` the TOP label.
    """

    n: int
    n_labels: int
    root: int
    bin_i: IntArray
    bin_k: IntArray
    bin_j: IntArray
    bin_r: IntArray
    bin_a: IntArray
    bin_b: IntArray
    bin_c: IntArray
    bin_start: IntArray  # (n + 2,)
    un_i: IntArray
    un_j: IntArray
    un_u: IntArray
    un_a: IntArray
    un_b: IntArray
    un_start: IntArray  # (n + 2,)
    tag_i: IntArray
    tag_t: IntArray

    @property
    def n_binary(self) -> int:
        return len(self.bin_r)

    @property
    def n_unary(self) -> int:
        return len(self.un_u)

    @property
    def n_tags(self) -> int:
        return len(self.tag_t)

    def binary_of_length(self, length: int) -> slice:
        return slice(int(self.bin_start[length]), int(self.bin_start[length + 1]))

    def unary_of_length(self, length: int) -> slice:
        return slice(int(self.un_start[length]), int(self.un_start[length + 1]))


def _starts(lengths: IntArray, n: int) -> IntArray:
    """Offsets of each span length in an array sorted by length: ``start[l]:start[l+1]`` holds length ``l``."""
    counts = np.bincount(lengths, minlength=n + 2)[: n + 2]
    return np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)


def _make_items(grammar: Grammar, n: int, binary: IntArray, unary: IntArray, tags: IntArray) -> AnchoredItems:
    """Sort items by span length and attach their labels: ``binary (N, 4) = (i, k, j, r)``, ``unary (N, 3) =
    (i, j, u)``, ``tags (N, 2) = (i, t)``."""
    binary = binary.reshape(-1, 4).astype(np.int64)
    unary = unary.reshape(-1, 3).astype(np.int64)
    tags = tags.reshape(-1, 2).astype(np.int64)
    binary = binary[np.lexsort((binary[:, 1], binary[:, 0], binary[:, 2] - binary[:, 0]))]
    unary = unary[np.lexsort((unary[:, 0], unary[:, 1] - unary[:, 0]))]
    # rows of contiguous copies: every item array is contiguous (the compiled passes read them item by item)
    b, r = np.ascontiguousarray(binary.T), np.ascontiguousarray(grammar.binary[binary[:, 3]].T)
    u, a = np.ascontiguousarray(unary.T), np.ascontiguousarray(grammar.unary[unary[:, 2]].T)
    t = np.ascontiguousarray(tags.T)
    return AnchoredItems(
        n=n, n_labels=grammar.n_labels, root=grammar.top,
        bin_i=b[0], bin_k=b[1], bin_j=b[2], bin_r=b[3], bin_a=r[0], bin_b=r[1], bin_c=r[2],
        bin_start=_starts(b[2] - b[0], n),
        un_i=u[0], un_j=u[1], un_u=u[2], un_a=a[0], un_b=a[1], un_start=_starts(u[1] - u[0], n),
        tag_i=t[0], tag_t=t[1],
    )


def build_items(grammar: Grammar, mask: SpanMask) -> AnchoredItems:
    """Every anchored item of a sentence whose labels all live in ``mask``: a binary item where its parent lives
    in the bot layer of ``(i, j)`` and its children in the top layers of ``(i, k)`` and ``(k, j)``, a unary item
    where its top and bot labels live in their layers of one cell, a tag item where the tag lives in the bot
    layer of a one-word cell. The binary items come from a compiled loop over each cell's live parents' rules
    (``kernel.live_binary``): a boolean ``(cells x splits, R)`` array took about 30 ms on a 40-word sentence."""
    n = mask.n
    rules = np.ascontiguousarray(grammar.binary, dtype=np.int64)
    by_parent = np.argsort(rules[:, 0], kind="stable").astype(np.int64)
    parent_start = np.searchsorted(rules[by_parent, 0], np.arange(grammar.n_labels + 1)).astype(np.int64)
    binary = kernel.live_binary(np.ascontiguousarray(mask.bot), np.ascontiguousarray(mask.top), rules, by_parent,
                                parent_start)
    cells = np.array([(i, j) for i in range(n) for j in range(i + 1, n + 1)], dtype=np.int64).reshape(-1, 2)
    ci, cj = cells.T
    top_a, bot_b = grammar.unary.T
    where, rule = np.nonzero(mask.top[ci, cj][:, top_a] & mask.bot[ci, cj][:, bot_b])
    unary = np.column_stack([ci[where], cj[where], rule])
    words = np.arange(n)
    where, tag = np.nonzero(mask.bot[words, words + 1] & grammar.is_tag[None, :])
    return _make_items(grammar, n, binary, unary, np.column_stack([words[where], tag]))


def items_from_tree(grammar: Grammar, tree: AnchoredTree) -> AnchoredItems:
    """The items of one tree and nothing else: the chart of the tree-shaped (gold) inside-outside pass (brief
    §1.4). Unlike ``build_items(grammar, tree_mask(...))`` it cannot admit a second unary rule with the same top
    and bot labels (another collapsed chain)."""
    tags = np.column_stack([np.arange(tree.n), tree.tags])
    return _make_items(grammar, tree.n, tree.binary, tree.unary, tags)


@dataclass(frozen=True)
class AnchoredScores:
    """An anchored grammar: log scores of the binary, unary and tag items of one :class:`AnchoredItems`
    (``-inf`` = dead). ``+`` is the product of anchored grammars, ``-`` the division (dead stays dead)."""

    binary: FloatArray
    unary: FloatArray
    tag: FloatArray

    @staticmethod
    def zeros(items: AnchoredItems) -> AnchoredScores:
        """The anchored grammar scoring every live tree 1 (brief §1.3, the initial approximate factors)."""
        return AnchoredScores(np.zeros(items.n_binary), np.zeros(items.n_unary), np.zeros(items.n_tags))

    def __add__(self, other: AnchoredScores) -> AnchoredScores:
        return AnchoredScores(self.binary + other.binary, self.unary + other.unary, self.tag + other.tag)

    def __sub__(self, other: AnchoredScores) -> AnchoredScores:
        return AnchoredScores(_divide(self.binary, other.binary), _divide(self.unary, other.unary),
                              _divide(self.tag, other.tag))

    def parts(self) -> tuple[FloatArray, FloatArray, FloatArray]:
        return self.binary, self.unary, self.tag

    def concatenated(self) -> FloatArray:
        """All scores in one vector (binary, unary, tag): for convergence checks."""
        return np.concatenate([self.binary, self.unary, self.tag])


def _divide(a: FloatArray, b: FloatArray) -> FloatArray:
    """``a - b`` in log space, ``-inf`` where either is ``-inf`` (a dead divisor keeps the item dead)."""
    with np.errstate(invalid="ignore"):  # inf - inf where dead: masked
        return np.where(np.isfinite(b) & (a > -np.inf), a - b, -np.inf)
