"""Coarse pruning by the posteriors of the generative X-bar PCFG (``../shared/design/epic.md`` §2 "Coarse
pruning"; Hall & Klein 2012 §5.5).

A labelled span of the bot or top layer stays when its posterior under the X-bar PCFG (``dense``) is at least
``exp(PRUNING_THRESHOLD)`` (the brief's ``e^-9``; Epic thresholds max-marginals of a markovised generative parser
at the same value). The mask (``anchored.SpanMask``) then defines the items: ``anchored.build_items`` keeps an
item when its parent and its children all live. In training the gold tree's labelled spans are added
(``keep_gold``): the paper-era code forced gold spans, Epic substitutes an oracle tree.

:func:`gold_coverage` measures what pruning costs on gold trees: the gold bot and top labelled spans kept, and
whether the whole gold tree survives.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from engine.constituency.anchored import SpanMask, full_mask, tree_mask
from engine.constituency.dense import DenseMarginals
from engine.constituency.grammar import AnchoredTree, Grammar

__all__ = ["PRUNING_THRESHOLD", "GoldCoverage", "gold_coverage", "prune_mask"]

PRUNING_THRESHOLD = -9.0  # log posterior below which a labelled span is pruned (brief §2: e^-9)


def prune_mask(grammar: Grammar, marginals: DenseMarginals, threshold: float = PRUNING_THRESHOLD,
               keep_gold: AnchoredTree | None = None) -> SpanMask:
    """The labelled spans of the unpruned mask whose posterior is at least ``exp(threshold)``, plus the labelled
    spans of ``keep_gold`` (training). The root's TOP always stays."""
    n = marginals.mu_bot.shape[0] - 1
    full = full_mask(grammar, n)
    cut = np.exp(threshold)
    bot = full.bot & (marginals.mu_bot >= cut)
    top = full.top & (marginals.mu_top >= cut)
    top[0, n, grammar.top] = True
    if keep_gold is not None:
        gold = tree_mask(grammar, keep_gold)
        bot |= gold.bot
        top |= gold.top
    return SpanMask(bot, top)


@dataclass(frozen=True)
class GoldCoverage:
    """Gold labelled spans of one tree kept by a mask: ``bot`` (binary parents and tags) and ``top`` layers;
    ``tree_live``: every labelled span of the tree kept, so the gold tree is one of the mask's trees."""

    bot_kept: int
    bot_total: int
    top_kept: int
    top_total: int

    @property
    def tree_live(self) -> bool:
        return self.bot_kept == self.bot_total and self.top_kept == self.top_total


def gold_coverage(grammar: Grammar, mask: SpanMask, gold: AnchoredTree) -> GoldCoverage:
    """How many of the gold tree's labelled spans ``mask`` keeps (tags count in the bot layer)."""
    i, j, u = gold.unary.T
    top_label, bot_label = grammar.unary[u].T
    bot_kept = mask.bot[i, j, bot_label]
    top_kept = mask.top[i, j, top_label]
    return GoldCoverage(int(bot_kept.sum()), len(u), int(top_kept.sum()), len(u))
