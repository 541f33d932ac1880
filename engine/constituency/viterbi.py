"""Viterbi decoding of a one-substate factor over the unpruned chart: the single most probable tree
(``../shared/design/epic.md`` §2 lists Viterbi beside Max-Recall; Hall & Klein 2012 §5.5 decode Petrov-style by
Viterbi over summed anchored log posteriors, which is this pass given those scores).

Max-product in log space (no scaling needed): ``top[i, j, A] = max_{u = A -> B} log_u + bot[i, j, B]`` and
``bot[i, j, A] = max_{k, r = A -> B C} log_w + top[i, k, B] + top[k, j, C]``, vectorised over the cells and
split points of one span length (``(cells, splits, R)``), keeping each rule's best split and score per cell; the
tree is read back from the root, each span's chain restored from its unary rule, and debinarised.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from nltk import Tree  # type: ignore[import-untyped]

from engine.constituency.anchored import FloatArray
from engine.constituency.binarize import debinarize
from engine.constituency.factor import Factor
from engine.constituency.grammar import Grammar

__all__ = ["viterbi"]


def _inside(grammar: Grammar, factor: Factor) -> tuple[FloatArray, FloatArray, FloatArray, np.ndarray]:
    """Max-product charts ``bot``, ``top`` (``(n+1, n+1, L)``), per-rule cell scores ``rule (n+1, n+1, R)`` and
    their best splits."""
    n, size = factor.log_e.shape[0], grammar.n_labels
    a, b, c = grammar.binary.T
    log_w, log_u = factor.log_w[:, 0, 0, 0], factor.log_u[:, 0, 0]
    top_label, bot_label = grammar.unary.T
    bot, top = np.full((n + 1, n + 1, size), -np.inf), np.full((n + 1, n + 1, size), -np.inf)
    rule = np.full((n + 1, n + 1, len(a)), -np.inf)
    split = np.zeros((n + 1, n + 1, len(a)), dtype=np.int64)
    words = np.arange(n)
    bot[words, words + 1] = np.where(grammar.is_tag[None, :], factor.log_e[:, :, 0], -np.inf)
    for length in range(1, n + 1):
        cells = np.arange(n - length + 1)
        if length > 1:
            i = cells[:, None]
            k = i + np.arange(1, length)[None, :]
            scores = top[i, k][:, :, b] + top[k, i + length][:, :, c]  # (cells, splits, R)
            best = scores.argmax(axis=1)
            rule[cells, cells + length] = np.take_along_axis(scores, best[:, None, :], axis=1)[:, 0] + log_w
            split[cells, cells + length] = cells[:, None] + 1 + best
            per_parent = np.full((len(cells), size), -np.inf)
            np.maximum.at(per_parent, (np.repeat(cells, len(a)), np.tile(a, len(cells))),
                          rule[cells, cells + length].ravel())
            bot[cells, cells + length] = per_parent
        allowed = (top_label == grammar.top) if length == n else (top_label != grammar.top)
        cand = np.where(allowed[None, :], log_u[None, :] + bot[cells, cells + length][:, bot_label], -np.inf)
        per_top = np.full((len(cells), size), -np.inf)
        np.maximum.at(per_top, (np.repeat(cells, len(top_label)), np.tile(top_label, len(cells))), cand.ravel())
        top[cells, cells + length] = per_top
    return bot, top, rule, split


def viterbi(grammar: Grammar, factor: Factor, words: Sequence[str]) -> tuple[float, Tree]:
    """The log score and the debinarised ``(TOP ...)`` tree of the best tree of a one-substate factor. Raises
    ``FloatingPointError`` when there is no tree."""
    n = len(words)
    bot, top, rule, split = _inside(grammar, factor)
    best = float(top[0, n, grammar.top])
    if not np.isfinite(best):
        raise FloatingPointError("no tree")
    log_u = factor.log_u[:, 0, 0]

    def build(i: int, j: int, label: int) -> Tree:
        rules = np.flatnonzero(grammar.unary[:, 0] == label)
        u = int(rules[np.argmax(log_u[rules] + bot[i, j, grammar.unary[rules, 1]])])
        low = int(grammar.unary[u, 1])
        if j == i + 1:
            node = Tree(grammar.labels[low], [words[i]])
        else:
            parents = np.flatnonzero(grammar.binary[:, 0] == low)
            r = int(parents[np.argmax(rule[i, j, parents])])
            k = int(split[i, j, r])
            node = Tree(grammar.labels[low], [build(i, k, int(grammar.binary[r, 1])),
                                              build(k, j, int(grammar.binary[r, 2]))])
        if label == low and not grammar.chains[u]:
            return node
        for name in (grammar.labels[label], *grammar.chains[u])[::-1]:
            node = Tree(name, [node])
        return node

    return best, debinarize(build(0, n, grammar.top))
