"""Max-plus Viterbi over a sentence's anchored items with arbitrary item scores: the best tree of a pruned forest
(``oracle`` scores items by their match with a gold tree, ``decode_product`` by summed log posteriors, Hall &
Klein 2012 §5.5 / Petrov 2010).

Given scores ``gain_b`` per binary item, ``gain_u`` per unary item and ``gain_t`` per tag item (``-inf``: not
allowed), the recurrences of ``inside_outside`` with max for sum and + for product:
``bot[i, i+1, t] = gain_t``, ``top[i, j, A] = max_u gain_u + bot[i, j, B(u)]``, ``bot[i, j, A] = max_{k, r}
gain_b + top[i, k, B(r)] + top[k, j, C(r)]``; the root is ``top[0, n, TOP]``. Vectorised per span length: the
best item of each labelled cell is found by one ``lexsort`` (ties: the last item in item order). The tree is
read back as an ``AnchoredTree``: its unary items carry their exact collapsed chains.
"""

from __future__ import annotations

import numpy as np

from engine.constituency.anchored import AnchoredItems, FloatArray, IntArray
from engine.constituency.grammar import AnchoredTree

__all__ = ["best_tree"]


def _best_per_cell(cells: IntArray, labels: IntArray, values: FloatArray, size: int) -> IntArray:
    """Indices (into ``values``) of the best entry of each ``(cell, label)``."""
    keys = cells * size + labels
    order = np.lexsort((values, keys))
    last = np.r_[keys[order][1:] != keys[order][:-1], True] if len(order) else np.zeros(0, dtype=bool)
    return order[last]


def _charts(items: AnchoredItems, gain_b: FloatArray, gain_u: FloatArray,
            gain_t: FloatArray) -> tuple[FloatArray, IntArray, IntArray]:
    """The top chart ``(n+1, n+1, L)`` of best scores and the back pointers (item index, -1 for none) of the bot
    and top layers."""
    n, size = items.n, items.n_labels
    bot, top = np.full((n + 1, n + 1, size), -np.inf), np.full((n + 1, n + 1, size), -np.inf)
    bp_bot, bp_top = np.full((n + 1, n + 1, size), -1), np.full((n + 1, n + 1, size), -1)
    bot[items.tag_i, items.tag_i + 1, items.tag_t] = gain_t
    for length in range(1, n + 1):
        if length > 1:
            s = items.binary_of_length(length)
            i, k, j = items.bin_i[s], items.bin_k[s], items.bin_j[s]
            val = gain_b[s] + top[i, k, items.bin_b[s]] + top[k, j, items.bin_c[s]]
            best = _best_per_cell(i, items.bin_a[s], val, size)
            best = best[np.isfinite(val[best])]
            bot[i[best], j[best], items.bin_a[s][best]] = val[best]
            bp_bot[i[best], j[best], items.bin_a[s][best]] = np.arange(s.start, s.stop)[best]
        s = items.unary_of_length(length)
        i, j = items.un_i[s], items.un_j[s]
        val = gain_u[s] + bot[i, j, items.un_b[s]]
        best = _best_per_cell(i, items.un_a[s], val, size)
        best = best[np.isfinite(val[best])]
        top[i[best], j[best], items.un_a[s][best]] = val[best]
        bp_top[i[best], j[best], items.un_a[s][best]] = np.arange(s.start, s.stop)[best]
    return top, bp_bot, bp_top


def best_tree(items: AnchoredItems, gain_b: FloatArray, gain_u: FloatArray, gain_t: FloatArray,
              words: tuple[str, ...] = ()) -> tuple[float, AnchoredTree] | None:
    """The best score and the anchored tree reaching it (module docstring), ``None`` when no tree has a finite
    score."""
    n = items.n
    top, bp_bot, bp_top = _charts(items, gain_b, gain_u, gain_t)
    score = float(top[0, n, items.root])
    if not np.isfinite(score):
        return None
    tags, unary, binary = np.zeros(n, dtype=np.int64), [], []
    stack = [(0, n, items.root)]
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
    return score, AnchoredTree(tags, np.array(unary, dtype=np.int64),
                               np.array(binary, dtype=np.int64).reshape(-1, 4), words)
