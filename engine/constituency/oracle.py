"""The oracle tree of a pruned forest: the tree among a mask's items that best matches a gold tree (issue 26:
"the oracle F1 of the pruned forest"; ``../shared/design/epic.md`` §3.8).

Max-plus Viterbi over the anchored items (``anchored.build_items``): a binary item scores 1 when its parent's
labelled bot span is in the gold tree, a unary item ``A -> B`` with ``A != B`` scores 1 when its labelled top span
is, a labelled span not in the gold tree costs ``WRONG`` (so that among trees of equal matches the one with fewer
wrong brackets wins), and ``@`` labels, identities and tags score 0 (EVALB does not count them). The best tree is
read back as an ``AnchoredTree`` and debinarised with its exact chains (``binarize.from_anchored``); EVALB of it
against the gold tree is the oracle F1. Vectorised per span length; the best item per labelled cell is found by
one ``lexsort``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from nltk import Tree  # type: ignore[import-untyped]

from engine.constituency.anchored import AnchoredItems, FloatArray, IntArray, tree_mask
from engine.constituency.binarize import AT, from_anchored
from engine.constituency.grammar import AnchoredTree, Grammar

__all__ = ["WRONG", "oracle_tree"]

WRONG = -1e-3  # score of a labelled span the gold tree does not have


def _best_per_cell(cells: IntArray, labels: IntArray, values: FloatArray, size: int) -> tuple[IntArray, IntArray]:
    """Indices (into ``values``) of the best entry of each ``(cell, label)`` and their keys ``cell * size +
    label``."""
    keys = cells * size + labels
    order = np.lexsort((values, keys))
    last = np.r_[keys[order][1:] != keys[order][:-1], True] if len(order) else np.zeros(0, dtype=bool)
    return order[last], keys[order[last]]


def _charts(grammar: Grammar, items: AnchoredItems, gain_b: FloatArray,
            gain_u: FloatArray) -> tuple[FloatArray, FloatArray, IntArray, IntArray]:
    n, size = items.n, grammar.n_labels
    bot, top = np.full((n + 1, n + 1, size), -np.inf), np.full((n + 1, n + 1, size), -np.inf)
    bp_bot, bp_top = np.full((n + 1, n + 1, size), -1), np.full((n + 1, n + 1, size), -1)
    bot[items.tag_i, items.tag_i + 1, items.tag_t] = 0.0
    for length in range(1, n + 1):
        if length > 1:
            s = items.binary_of_length(length)
            i, k, j = items.bin_i[s], items.bin_k[s], items.bin_j[s]
            val = gain_b[s] + top[i, k, items.bin_b[s]] + top[k, j, items.bin_c[s]]
            best, _ = _best_per_cell(i, items.bin_a[s], val, size)
            best = best[np.isfinite(val[best])]
            bot[i[best], j[best], items.bin_a[s][best]] = val[best]
            bp_bot[i[best], j[best], items.bin_a[s][best]] = np.arange(s.start, s.stop)[best]
        s = items.unary_of_length(length)
        i, j = items.un_i[s], items.un_j[s]
        val = gain_u[s] + bot[i, j, items.un_b[s]]
        best, _ = _best_per_cell(i, items.un_a[s], val, size)
        best = best[np.isfinite(val[best])]
        top[i[best], j[best], items.un_a[s][best]] = val[best]
        bp_top[i[best], j[best], items.un_a[s][best]] = np.arange(s.start, s.stop)[best]
    return bot, top, bp_bot, bp_top


def oracle_tree(grammar: Grammar, items: AnchoredItems, gold: AnchoredTree, words: Sequence[str]) -> Tree | None:
    """The debinarised oracle tree of ``items`` for ``gold`` (module docstring), ``None`` when no tree is live."""
    g = tree_mask(grammar, gold)
    is_at = np.array([label.startswith(AT) for label in grammar.labels])
    gain_b = np.where(is_at[items.bin_a], 0.0, np.where(g.bot[items.bin_i, items.bin_j, items.bin_a], 1.0, WRONG))
    gain_u = np.where(is_at[items.un_a] | (items.un_a == items.un_b), 0.0,
                      np.where(g.top[items.un_i, items.un_j, items.un_a], 1.0, WRONG))
    gain_u[items.un_a == grammar.top] = 0.0
    _, top, bp_bot, bp_top = _charts(grammar, items, gain_b, gain_u)
    n = items.n
    if not np.isfinite(top[0, n, grammar.top]):
        return None
    tags, unary, binary = np.zeros(n, dtype=np.int64), [], []
    stack = [(0, n, grammar.top)]
    while stack:
        i, j, a = stack.pop()
        v = int(bp_top[i, j, a])
        unary.append((i, j, int(items.un_u[v])))
        b = int(items.un_b[v])
        if j == i + 1:
            tags[i] = b
            continue
        x = int(bp_bot[i, j, b])
        k = int(items.bin_k[x])
        binary.append((i, k, j, int(items.bin_r[x])))
        stack += [(i, k, int(items.bin_b[x])), (k, j, int(items.bin_c[x]))]
    anchored = AnchoredTree(tags, np.array(unary, dtype=np.int64), np.array(binary, dtype=np.int64).reshape(-1, 4),
                            tuple(words))
    return from_anchored(anchored, grammar)
