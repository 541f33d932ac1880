"""How much each copy of a sentence moves the higher-order potentials of the factors it touches.

Tag-averaged potentials (``engine.features.tag_mixture``) give a factor over the words ``(a, b, c)`` the score
``s + sum_c w_c (s_c - s)``, where ``s_c`` is the sum of the factor's feature weights under copy ``c``'s tags.
Only a template that reads an attribute a copy changed, of a word in one of its roles, can hash differently
under that copy; the others' features, and so their weights, are the sentence's own. This kernel computes

    d(c, i) = s_c(i) - s(i) = sum over the templates k whose read attributes copy c changed of
              w[h_c(i, k)] - w[h(i, k)]

per (copy, factor) pair: it hashes every template under the copy's codes
(``engine.features.second_order.triple_row``) and reads a weight only where the index differs from the
sentence's. With float16 weights every term and partial sum is exact in float64 (a float16 value has 11
significant bits and exponents between -24 and 15), so ``d`` equals ``s_c - s`` computed from full rows bit for
bit; with wider weights it agrees to rounding. ``tests/engine/scoring/test_triple_deltas.py`` checks both.
"""

from __future__ import annotations

import numpy as np
from numba import njit  # type: ignore[import-untyped]

from engine.features.second_order import triple_row
from engine.model.widen import HALF_VALUES, kernel_table, weight_value


@njit(cache=True, nogil=True)  # releases the GIL: the service's parse threads run it side by side
def _deltas_kernel(stacked: np.ndarray, seeds: np.ndarray, roles: np.ndarray, kinds: np.ndarray,
                   positions: np.ndarray, ctx: np.ndarray, factors: np.ndarray, rows: np.ndarray, feats: np.ndarray,
                   own: np.ndarray, table: np.ndarray, decode: np.ndarray, modulus: np.uint64, offset: int,
                   rows_per_copy: int, out: np.ndarray) -> None:
    """``out[q]``: d(copy, factor) of pair q, whose factor is ``factors[q]`` and whose copy's attribute codes
    start at row ``rows[q]`` of ``stacked``; ``feats`` are the factors' own feature indices (offset included)
    and ``own`` their weights. All of a pair's indices are computed before any weight is read, so that the
    reads (mostly cache misses in a table of megabytes) are in flight together.

    d depends on the copy only through the codes of the factor's three words, and copies of a sentence often
    agree there (they differ from each other elsewhere): a pair whose factor was already done under a copy
    with the same three rows of codes takes that pair's value (the same arithmetic, so the same bits) instead
    of hashing and reading again (about a third of the pairs on EWT dev)."""
    k_count = len(seeds)
    width = stacked.shape[1]
    x = np.empty(k_count, dtype=np.uint64)
    index = np.empty(k_count, dtype=np.int64)
    done = np.full((feats.shape[0], stacked.shape[0] // rows_per_copy), -1, dtype=np.int64)  # (factor, copy) -> q
    for q in range(len(factors)):
        i = factors[q]
        c = rows[q] // rows_per_copy
        same = -1
        for other in range(done.shape[1]):
            prior = done[i, other]
            if prior < 0:
                continue
            equal = True
            for r in range(3):
                a, b = rows[q] + positions[r, i], rows[prior] + positions[r, i]
                for j in range(width):
                    if stacked[a, j] != stacked[b, j]:
                        equal = False
                        break
                if not equal:
                    break
            if equal:
                same = prior
                break
        if same >= 0:
            out[q] = out[same]
            continue
        triple_row(stacked, seeds, roles, kinds, positions, ctx, i, rows[q], x)
        for k in range(k_count):
            index[k] = np.int64(x[k] % modulus) + 1 + offset
        d = 0.0
        for k in range(k_count):
            if index[k] != feats[i, k]:  # a template the copy's tags leave alone hashes as the sentence's
                d += weight_value(table[index[k]], decode) - own[i, k]
        out[q] = d
        done[i, c] = q


def copy_deltas(stacked: np.ndarray, tables: tuple[np.ndarray, ...], factors: np.ndarray, copies: np.ndarray,
                rows_per_copy: int, feats: np.ndarray, own: np.ndarray, weights: np.ndarray,
                offset: int) -> np.ndarray:
    """``s_c - s`` (float64) for each pair (``copies[q]``, ``factors[q]``) (module docstring).

    ``stacked`` (C rows_per_copy, A): the words' attribute codes under each copy's tags, stacked; ``tables``:
    ``triple_tables`` of all the factors (seeds, roles, kinds, positions, contexts: everything but the codes);
    ``feats`` (F, K): the factors' own feature indices into ``weights``, ``offset`` (the start of the
    higher-order block) included, and ``own`` (F, K) float64 their weights."""
    out = np.zeros(len(factors), dtype=np.float64)
    if not len(factors):
        return out
    seeds, roles, kinds, positions, ctx = tables
    table, decode = kernel_table(weights), HALF_VALUES
    dim = len(weights) - offset
    _deltas_kernel(stacked, seeds, roles, kinds, positions, ctx, factors.astype(np.int64),
                   (copies * rows_per_copy).astype(np.int64), feats, own, table, decode, np.uint64(dim - 1), offset,
                   rows_per_copy, out)
    return out
