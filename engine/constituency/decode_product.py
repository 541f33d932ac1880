"""Petrov (2010) product decoding of several factors (Hall & Klein 2012 §6.1, Table 1 "Petrov"; brief §2
"Decoding": "sum of each factor's independent log anchored-rule posteriors, then Viterbi").

Each factor ``f_m`` is parsed **on its own** over the sentence's items (no anchored grammar: ``inside_outside``
of ``f_m`` alone), its substates summed out: the posterior ``mu_m(e)`` of every anchored rule ``e`` (binary item
``(i, k, j, A -> B C)``, unary item ``(i, j, A -> B)``, tag item ``(i, t)``). The decoded tree maximises

    sum_m sum_{e in T} log mu_m(e)

over the trees ``T`` of the items (max-plus Viterbi, ``item_viterbi.best_tree``): with one factor this is the
max-rule-product tree of that factor (Petrov and Klein 2007), with several the product of their rule posteriors
(Petrov 2010's product of independently trained grammars). The tree is debinarised with the exact chains of
its unary items (``binarize.from_anchored``), ``TOP`` at the root, as the other decoders return it.

If no tree has a finite objective (a rule some factor gives posterior 0, by underflow, on every tree), the
decoder falls back to Max-Recall (``decode.max_recall``, with ``chains``) over the factors' mean coarse
marginals. A factor with no live tree at all raises ``FloatingPointError`` (``inside_outside``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from nltk import Tree  # type: ignore[import-untyped]

from engine.constituency.anchored import AnchoredItems, AnchoredScores, FloatArray
from engine.constituency.binarize import from_anchored
from engine.constituency.decode import max_recall
from engine.constituency.factor import Factor, FactorMarginals
from engine.constituency.grammar import Grammar
from engine.constituency.inside_outside import inside_outside
from engine.constituency.item_viterbi import best_tree

__all__ = ["ProductScores", "petrov_decode", "petrov_scores"]


@dataclass(frozen=True)
class ProductScores:
    """The summed log posteriors of every item (``binary``, ``unary``, ``tag``; ``-inf`` where some factor gives
    0) and each factor's own pass (``marginals``)."""

    binary: FloatArray
    unary: FloatArray
    tag: FloatArray
    marginals: list[FactorMarginals]


def _log(x: FloatArray) -> FloatArray:
    with np.errstate(divide="ignore"):
        return np.log(np.maximum(x, 0.0))


def petrov_scores(items: AnchoredItems, factors: Sequence[Factor]) -> ProductScores:
    """Each factor's inside-outside over ``items`` alone and the sum of their log anchored-rule posteriors."""
    zero = AnchoredScores.zeros(items)
    passes = [inside_outside(items, factor, zero) for factor in factors]
    return ProductScores(sum((_log(p.mu_b) for p in passes), np.zeros(items.n_binary)),
                         sum((_log(p.mu_u) for p in passes), np.zeros(items.n_unary)),
                         sum((_log(p.mu_tag) for p in passes), np.zeros(items.n_tags)), passes)


def petrov_decode(grammar: Grammar, items: AnchoredItems, factors: Sequence[Factor], words: Sequence[str],
                  chains: Mapping[tuple[int, int], tuple[str, ...]]) -> Tree:
    """The debinarised ``(TOP ...)`` tree maximising the sum over ``factors`` of the log posteriors of its
    anchored rules (module docstring); ``chains`` (as in ``decode.max_recall``) serve the Max-Recall fallback."""
    scores = petrov_scores(items, factors)
    best = best_tree(items, scores.binary, scores.unary, scores.tag, tuple(words))
    if best is not None:
        return from_anchored(best[1], grammar)
    mu_bot = np.mean([p.mu_bot for p in scores.marginals], axis=0)
    mu_top = np.mean([p.mu_top for p in scores.marginals], axis=0)
    return max_recall(grammar, mu_bot, mu_top, words, chains)
