"""The X-bar backbone grammar as index arrays, and gold trees as anchored items (Hall & Klein 2012, §2-3).

Every span (i, j) of a binarised tree has two layers (``../shared/design/epic.md`` §0): a **bot** layer (the
parent of a binary rule, or a part-of-speech tag on a one-word span) and a **top** layer, reached from the bot
layer by exactly one unary rule ``A(top) -> B(bot)``: a collapsed unary chain, or the identity ``A -> A``. So
there are no unary cycles and every tree has ``n`` tag items, ``2n - 1`` unary items and ``n - 1`` binary items.

A binary rule ``A -> B C`` rewrites a bot ``A`` into a top ``B`` over ``(i, k)`` and a top ``C`` over ``(k, j)``.
The root is the top layer of ``(0, n)`` with label ``TOP``.

This module is the contract shared by the data side (``treebank``, ``binarize``) and the inference side
(``inside_outside``, ``ep``): labels and rules are integers indexing the arrays below.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

IntArray = npt.NDArray[np.int64]


@dataclass(frozen=True)
class Grammar:
    """Labels and rules of a backbone grammar.

    ``labels[a]`` is a label's name (``"NP"``, ``"@NP"`` for an intermediate node of binarisation, ``"NN"`` for a
    tag, ``"TOP"``). ``binary[r] = (A, B, C)`` for ``A -> B C``; ``unary[u] = (A, B)`` for top ``A`` over bot
    ``B``, identities included; ``chains[u]`` is the collapsed chain's inner labels, top to bottom (empty for a
    single unary rule or an identity). ``is_tag[a]`` marks part-of-speech tags (bot labels of one-word spans
    only). ``top`` is the index of ``TOP``.
    """

    labels: tuple[str, ...]
    binary: IntArray  # (R, 3): parent, left child, right child
    unary: IntArray  # (U, 2): top label, bot label
    chains: tuple[tuple[str, ...], ...]  # (U,): inner labels of each collapsed chain
    is_tag: npt.NDArray[np.bool_]  # (L,)
    top: int
    index: dict[str, int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "index", {label: a for a, label in enumerate(self.labels)})
        if self.binary.ndim != 2 or self.binary.shape[1] != 3 or self.unary.ndim != 2 or self.unary.shape[1] != 2:
            raise ValueError("binary rules are (R, 3) and unary rules (U, 2) integer arrays")
        if len(self.chains) != len(self.unary) or len(self.is_tag) != len(self.labels):
            raise ValueError("chains must have one entry per unary rule and is_tag one per label")
        if len(self.labels) and (self.binary.size and self.binary.max() >= len(self.labels)):
            raise ValueError("a binary rule names a label that does not exist")

    @property
    def n_labels(self) -> int:
        return len(self.labels)


@dataclass(frozen=True)
class AnchoredTree:
    """A binarised tree over ``n`` words as anchored items: what a gold tree contributes to training and EVALB.

    ``tags[i]`` is the tag label of word ``i``; ``unary[t] = (i, j, u)``: unary rule ``u`` on span ``(i, j)``
    (``2n - 1`` rows, one per span of the tree); ``binary[b] = (i, k, j, r)``: rule ``r`` splitting ``(i, j)`` at
    ``k`` (``n - 1`` rows). ``words`` are the sentence's words when known (``binarize.to_anchored`` fills them;
    ``rules.rule_counts`` reads them for the lexical counts).
    """

    tags: IntArray  # (n,)
    unary: IntArray  # (2n - 1, 3)
    binary: IntArray  # (n - 1, 4)
    words: tuple[str, ...] = ()  # (n,) or empty

    @property
    def n(self) -> int:
        return len(self.tags)
