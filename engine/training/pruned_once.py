"""Each training batch's pruned arcs, found once: the first-order pruner does not change while a second-order or
joint model's weights train (Smith & Eisner 2008 §9.1 prune with a fixed first-order model), so the arcs it keeps
in a batch are the same at every epoch. ``BPParser.gold_pruned`` finds them at the batch's first step;
``graph_batches(kept=...)`` takes them back at the later ones (``docs/results/training-speed.md``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from engine.bp_parser import BPParser, Pruned


class PrunedOnce:
    """``self(g, batch)``: batch ``g``'s ``gold_pruned`` entries, computed at its first call and kept (small: one
    (n+1, n+1) mask and the pruner's heads per sentence). ``link_features`` as for ``graph_batches``."""

    def __init__(self, parser: BPParser, link_features: bool = True) -> None:
        self.parser, self.link_features = parser, link_features
        self.found: dict[int, list[Pruned]] = {}

    def __call__(self, g: int, batch: Sequence[Any]) -> list[Pruned]:
        if g not in self.found:
            self.found[g] = self.parser.gold_pruned(batch, batch_size=len(batch), link_features=self.link_features)
        return self.found[g]
