"""The backbone grammar read off binarised trees, relative-frequency counts, and plain JSON for both.

``grammar_from_trees`` collects what the training trees use (``../shared/design/epic.md`` §0): every label that
is a span's top or bot label (tags are the bot labels of one-word spans), every binary rule ``A -> B C`` (``A``
a bot label, ``B`` and ``C`` the children's top labels), and every collapsed unary rule ``(top, bot, chain)``,
the identity ``A -> A`` included for each label seen as a span's single node. Labels are ``TOP`` then the others
in name order; rules are in index order, so the grammar of the same trees is the same arrays.

``rule_counts`` counts how often each rule is used by anchored gold trees and each (tag, word) pair: the
relative frequencies of a generative X-bar PCFG (``count(A -> B C) / count(bot A)``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
from nltk import Tree  # type: ignore[import-untyped]
from scipy import sparse

from engine.constituency.binarize import Chain, spans
from engine.constituency.grammar import AnchoredTree, Grammar
from engine.constituency.treebank import TOP

FloatArray = npt.NDArray[np.float64]


def grammar_from_trees(trees: Iterable[Tree]) -> Grammar:
    """The grammar of binarised trees (``binarize.binarize``) rooted in ``TOP`` (module docstring)."""
    binary: set[tuple[str, str, str]] = set()
    unary: set[tuple[str, str, Chain]] = set()
    tags: set[str] = set()
    for tree in trees:
        if tree.label() != TOP:
            raise ValueError(f"a tree rooted in {tree.label()!r}, not {TOP!r}")
        _, chains, binaries = spans(tree)
        binary.update((a, b, c) for _, _, _, a, b, c in binaries)
        unary.update((chain[0], chain[-1], chain[1:-1]) for _, _, chain in chains)
        tags.update(chain[-1] for i, j, chain in chains if j == i + 1)
    names = {label for rule in binary for label in rule} | {label for a, b, _ in unary for label in (a, b)}
    labels = (TOP, *sorted(names - {TOP}))
    index = {label: a for a, label in enumerate(labels)}
    binary_rows = sorted((index[a], index[b], index[c]) for a, b, c in binary)
    unary_rules = sorted(unary, key=lambda rule: (index[rule[0]], index[rule[1]], rule[2]))
    clash = tags & {a for a, _, _ in binary}
    if clash:
        raise ValueError(f"labels used both as tags and as phrases: {sorted(clash)}")
    return Grammar(
        labels=labels,
        binary=np.array(binary_rows, dtype=np.int64).reshape(-1, 3),
        unary=np.array([(index[a], index[b]) for a, b, _ in unary_rules], dtype=np.int64).reshape(-1, 2),
        chains=tuple(chain for _, _, chain in unary_rules),
        is_tag=np.array([label in tags for label in labels], dtype=bool),
        top=0,
    )


def grammar_to_json(grammar: Grammar) -> dict[str, Any]:
    """Plain lists for a model's JSON manifest; ``grammar_from_json`` gives back the same labels, arrays, chains."""
    return {
        "labels": list(grammar.labels),
        "binary": grammar.binary.tolist(),
        "unary": grammar.unary.tolist(),
        "chains": [list(chain) for chain in grammar.chains],
        "tags": [label for label, tag in zip(grammar.labels, grammar.is_tag, strict=True) if tag],
        "top": grammar.labels[grammar.top],
    }


def grammar_from_json(data: Mapping[str, Any]) -> Grammar:
    """The grammar of ``grammar_to_json``'s output."""
    labels = tuple(str(label) for label in data["labels"])
    tags = set(data["tags"])
    return Grammar(
        labels=labels,
        binary=np.array(data["binary"], dtype=np.int64).reshape(-1, 3),
        unary=np.array(data["unary"], dtype=np.int64).reshape(-1, 2),
        chains=tuple(tuple(str(x) for x in chain) for chain in data["chains"]),
        is_tag=np.array([label in tags for label in labels], dtype=bool),
        top=labels.index(data["top"]),
    )


@dataclass(frozen=True)
class RuleCounts:
    """Rule and lexical counts of gold trees. ``binary[r]``, ``unary[u]``: uses of each rule; ``lexical[t, w]``
    (labels x ``words``, sparse): how often word ``words[w]`` is tagged ``t``; ``words`` in name order."""

    binary: FloatArray  # (R,)
    unary: FloatArray  # (U,)
    words: tuple[str, ...]
    lexical: sparse.csr_array  # (L, V)

    def bot_counts(self, grammar: Grammar) -> FloatArray:
        """``(L,)`` uses of each label as a bot label (as a binary parent or as a tag): the denominator of the
        binary rules' and the tags' relative frequencies."""
        out = np.bincount(grammar.binary[:, 0], weights=self.binary, minlength=grammar.n_labels)
        return np.asarray(out + self.lexical.sum(axis=1), dtype=np.float64).ravel()

    def top_counts(self, grammar: Grammar) -> FloatArray:
        """``(L,)`` uses of each label as a top label: the denominator of the unary rules' relative frequencies."""
        return np.bincount(grammar.unary[:, 0], weights=self.unary, minlength=grammar.n_labels).astype(np.float64)


def rule_counts(anchored_trees: Sequence[AnchoredTree], grammar: Grammar) -> RuleCounts:
    """Counts of binary rules, unary rules and (tag, word) pairs over anchored trees (their ``words`` needed)."""
    binary = np.zeros(len(grammar.binary))
    unary = np.zeros(len(grammar.unary))
    pairs: Counter[tuple[int, str]] = Counter()
    for tree in anchored_trees:
        if len(tree.words) != tree.n:
            raise ValueError(f"an anchored tree of {tree.n} tags has {len(tree.words)} words: counts need words")
        binary += np.bincount(tree.binary[:, 3], minlength=len(binary))
        unary += np.bincount(tree.unary[:, 2], minlength=len(unary))
        pairs.update(zip(tree.tags.tolist(), tree.words, strict=True))
    words = tuple(sorted({w for _, w in pairs}))
    column = {w: v for v, w in enumerate(words)}
    rows = np.array([t for t, _ in pairs], dtype=np.int64)
    cols = np.array([column[w] for _, w in pairs], dtype=np.int64)
    values = np.array(list(pairs.values()), dtype=np.float64)
    lexical = sparse.csr_array((values, (rows, cols)), shape=(grammar.n_labels, len(words)))
    return RuleCounts(binary=binary, unary=unary, words=words, lexical=lexical)
