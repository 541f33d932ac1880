"""Higher-order potentials straight from the tokens: the triple features' hashing and weight lookup in one pass.

A GRAND, SIB, CHILDSEQ or NOCROSS factor's log-potential is the sum of its features' weights,
``theta_i = sum_k weights[features[i, k]]`` (Smith & Eisner 2008 §8.2; ``engine.features.second_order``).
Inference needs only the sums, so this kernel hashes each factor's K features and adds their weights without
writing the (F, K) index array, its (F, K) gather and the float64 copy of the gathered weights. The sum is
taken in numpy's order for a row of K values (``np.sum(axis=1)`` of a C-contiguous (F, K) array: pairwise
with 8 accumulators), so the potentials equal ``weights[extract_triples(...)].sum(axis=1)`` bit for bit
(``tests/test_fused_triples.py``) and parses stay byte-identical. Training keeps the indices (it needs them
for the gradient).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numba import njit  # type: ignore[import-untyped]

from engine.features.extract import Tokens
from engine.features.second_order import TripleTemplate, triple_hash, triple_tables
from engine.scoring.fused import HALF_VALUES, weight_value


@njit(cache=True, nogil=True)
def _row_sum(v: np.ndarray, n: int) -> float:
    """``v[:n].sum()`` in numpy's order for a contiguous row (pairwise_sum for n <= 128: 8 accumulators over
    blocks of 8, combined as ((r0+r1)+(r2+r3))+((r4+r5)+(r6+r7)), then the rest one by one)."""
    if n < 8:
        acc = 0.0
        for k in range(n):
            acc += v[k]
        return acc
    r0, r1, r2, r3, r4, r5, r6, r7 = v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7]
    k = 8
    while k + 8 <= n:
        r0 += v[k]
        r1 += v[k + 1]
        r2 += v[k + 2]
        r3 += v[k + 3]
        r4 += v[k + 4]
        r5 += v[k + 5]
        r6 += v[k + 6]
        r7 += v[k + 7]
        k += 8
    acc = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))
    while k < n:
        acc += v[k]
        k += 1
    return acc


@njit(cache=True, nogil=True)  # releases the GIL: the service's parse threads run it side by side
def _triple_scores_kernel(codes: np.ndarray, seeds: np.ndarray, roles: np.ndarray, kinds: np.ndarray,
                          positions: np.ndarray, ctx: np.ndarray, modulus: np.uint64, offset: np.int64,
                          table: np.ndarray, decode: np.ndarray, out: np.ndarray) -> None:
    """``out[i]`` = the sum of ``table[offset + 1 + hash % modulus]`` over the templates (float16 bits
    standing for ``decode[bits]``, or float32/float64 values); indices first, then the loads."""
    t_count = len(seeds)
    index = np.empty(t_count, dtype=np.int64)
    values = np.empty(t_count)
    for i in range(positions.shape[1]):
        for k in range(t_count):
            index[k] = offset + np.int64(triple_hash(codes, seeds, roles, kinds, positions, ctx, i, k) % modulus) + 1
        for k in range(t_count):
            values[k] = weight_value(table[index[k]], decode)
        out[i] = _row_sum(values, t_count)


def triple_scores(tokens: Tokens, templates: Sequence[TripleTemplate], triples: np.ndarray, weights: np.ndarray,
                  offset: int = 0, direction: np.ndarray | None = None, *, codes: np.ndarray | None = None,
                  rows: np.ndarray | None = None) -> np.ndarray:
    """(F,) float64: ``weights[extract_triples(tokens, templates, triples, len(weights) - offset, direction,
    codes=codes, rows=rows) + offset].sum(axis=1)`` computed without the index array; ``weights`` float16,
    float32 or float64 (a model's stored block, read as stored)."""
    f = triples.shape[1]
    if f == 0 or not templates:
        return np.zeros(f)
    codes_table, seeds, roles, kinds, positions, ctx = triple_tables(tokens, templates, triples, direction, codes, rows)
    table = weights.view(np.uint16) if weights.dtype == np.float16 else weights
    if table.dtype not in (np.uint16, np.float32, np.float64):
        raise ValueError(f"weights must be float16, float32 or float64, got {weights.dtype}")
    out = np.empty(f)
    _triple_scores_kernel(codes_table, seeds, roles, kinds, positions, ctx, np.uint64(len(weights) - offset - 1),
                          np.int64(offset), table, HALF_VALUES, out)
    return out
