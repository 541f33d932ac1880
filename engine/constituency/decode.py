"""Max-Recall decoding (Goodman 1996; ``../shared/design/epic.md`` §2 "Decoding with Max-Recall"; Hall & Klein
2012 §5.5 decode by max-recall over the final marginals).

Given the coarse marginals ``mu_bot[i, j, A]`` and ``mu_top[i, j, A]`` of a sentence, each span ``(i, j)`` is
scored by its best bot label's marginal, plus its best top label's marginal when that label differs (the span
then holds two nodes: a unary chain): the expected number of correct labelled spans of the binarised tree it
would add. CKY over split points chooses the binary bracketing of largest total score (every bracketing holds
the ``n`` one-word spans and the root span, so only the spans of length 2 to ``n - 1`` decide). The tree keeps each
chosen span's best labels, tags as preterminals, the most probable chain between a top and a bot label
(``chains``), ``TOP`` at the root; ``@`` nodes are spliced out (``binarize.debinarize``). A span whose labels
have no mass (a bracketing the model gives probability 0) becomes an ``@`` node, so it is spliced out too.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from nltk import Tree  # type: ignore[import-untyped]

from engine.constituency.anchored import FloatArray
from engine.constituency.binarize import AT, debinarize
from engine.constituency.grammar import Grammar

__all__ = ["MaxRecall", "max_recall", "max_recall_chart", "max_recall_tree"]


@dataclass(frozen=True)
class MaxRecall:
    """The chosen bracketing: ``objective`` (total span score), ``splits[(i, j)] = k`` of every chosen span of
    two words or more, ``bot[i, j]``, ``top[i, j]``: best labels per cell (-1 where no label has mass)."""

    objective: float
    splits: dict[tuple[int, int], int]
    bot: np.ndarray
    top: np.ndarray


def _best(mu: FloatArray) -> tuple[np.ndarray, FloatArray]:
    label = mu.argmax(axis=2)
    value = mu.max(axis=2)
    return np.where(value > 0, label, -1), value


def max_recall_chart(mu_bot: FloatArray, mu_top: FloatArray) -> MaxRecall:
    """CKY over the span scores of the module docstring (the root's top layer is TOP and scores nothing)."""
    n = mu_bot.shape[0] - 1
    bot, bot_value = _best(mu_bot)
    top, top_value = _best(mu_top)
    score = bot_value + np.where((top != bot) & (top >= 0), top_value, 0.0)
    score[0, n] = bot_value[0, n]
    best = np.zeros((n + 1, n + 1))
    split = np.zeros((n + 1, n + 1), dtype=np.int64)
    for i in range(n):
        best[i, i + 1] = score[i, i + 1]
    for length in range(2, n + 1):
        for i in range(n - length + 1):
            j = i + length
            ks = np.arange(i + 1, j)
            totals = best[i, ks] + best[ks, j]
            split[i, j] = ks[int(totals.argmax())]
            best[i, j] = score[i, j] + totals.max()
    chosen: dict[tuple[int, int], int] = {}
    stack = [(0, n)] if n > 1 else []
    while stack:
        i, j = stack.pop()
        k = int(split[i, j])
        chosen[(i, j)] = k
        stack += [(a, b) for a, b in ((i, k), (k, j)) if b - a > 1]
    return MaxRecall(float(best[0, n]), chosen, bot, top)


def max_recall_tree(grammar: Grammar, chart: MaxRecall, words: Sequence[str],
                    chains: Mapping[tuple[int, int], tuple[str, ...]]) -> Tree:
    """The debinarised ``(TOP ...)`` tree of a chosen bracketing (module docstring)."""
    n, labels = len(words), grammar.labels

    def build(i: int, j: int, top: int) -> Tree:
        bot = int(chart.bot[i, j])
        name = labels[bot] if bot >= 0 else AT
        if j == i + 1:
            node = Tree(name if bot >= 0 else "XX", [words[i]])
        else:
            k = chart.splits[(i, j)]
            node = Tree(name, [build(i, k, int(chart.top[i, k])), build(k, j, int(chart.top[k, j]))])
        if top < 0 or top == bot:
            return node
        for label in (labels[top], *chains.get((top, bot), ()))[::-1]:
            node = Tree(label, [node])
        return node

    tree = build(0, n, grammar.top)
    return debinarize(tree if tree.label() == labels[grammar.top] else Tree(labels[grammar.top], [tree]))


def max_recall(grammar: Grammar, mu_bot: FloatArray, mu_top: FloatArray, words: Sequence[str],
               chains: Mapping[tuple[int, int], tuple[str, ...]]) -> Tree:
    """The Max-Recall tree of a sentence's coarse marginals (module docstring)."""
    return max_recall_tree(grammar, max_recall_chart(mu_bot, mu_top), words, chains)
