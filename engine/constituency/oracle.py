"""The oracle tree of a pruned forest: the tree among a mask's items that best matches a gold tree (issue 26:
"the oracle F1 of the pruned forest"; ``../shared/design/epic.md`` §3.8).

Max-plus Viterbi over the anchored items (``anchored.build_items``, ``item_viterbi.best_tree``): a binary item
scores 1 when its parent's labelled bot span is in the gold tree, a unary item ``A -> B`` with ``A != B`` scores 1
when its labelled top span is, a labelled span not in the gold tree costs ``WRONG`` (so that among trees of equal
matches the one with fewer wrong brackets wins), and ``@`` labels, identities and tags score 0 (EVALB does not
count them). The best tree is read back as an ``AnchoredTree`` and debinarised with its exact chains
(``binarize.from_anchored``); EVALB of it against the gold tree is the oracle F1.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from nltk import Tree  # type: ignore[import-untyped]

from engine.constituency.anchored import AnchoredItems, tree_mask
from engine.constituency.binarize import AT, from_anchored
from engine.constituency.grammar import AnchoredTree, Grammar
from engine.constituency.item_viterbi import best_tree

__all__ = ["WRONG", "oracle_tree"]

WRONG = -1e-3  # score of a labelled span the gold tree does not have


def oracle_tree(grammar: Grammar, items: AnchoredItems, gold: AnchoredTree, words: Sequence[str]) -> Tree | None:
    """The debinarised oracle tree of ``items`` for ``gold`` (module docstring), ``None`` when no tree is live."""
    g = tree_mask(grammar, gold)
    is_at = np.array([label.startswith(AT) for label in grammar.labels])
    gain_b = np.where(is_at[items.bin_a], 0.0, np.where(g.bot[items.bin_i, items.bin_j, items.bin_a], 1.0, WRONG))
    gain_u = np.where(is_at[items.un_a] | (items.un_a == items.un_b), 0.0,
                      np.where(g.top[items.un_i, items.un_j, items.un_a], 1.0, WRONG))
    gain_u[items.un_a == grammar.top] = 0.0
    best = best_tree(items, gain_b, gain_u, np.zeros(items.n_tags), tuple(words))
    return None if best is None else from_anchored(best[1], grammar)
