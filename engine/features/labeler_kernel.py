"""The compiled inner loop of the labeller's feature extraction (``engine.features.labeler_features``).

``CompiledTemplates.feature_ids`` hashes every template of every arc with a multiply-xorshift rolling hash
over the template's atoms. In numpy that is one pass over an ``(arcs, templates)`` (or ``(arcs, slots,
templates)``) array per atom, plus the gathers that build the atom matrices; this kernel does the same
integer arithmetic arc by arc, reading the atoms straight from the token codes, so the feature ids are the
same bit for bit (``tests/engine/decode/test_labeler_kernel.py`` compares it with the numpy path).
"""

from __future__ import annotations

import numpy as np
from numba import njit  # type: ignore[import-untyped]

from engine.model.widen import HALF_VALUES, HALF_VALUES32, kernel_table, weight_value

_MUL = np.uint64(0x9E3779B97F4A7C15)
_SHIFT = np.uint64(32)
_ALL_BITS = np.uint64(0xFFFFFFFFFFFFFFFF)


@njit(cache=True, nogil=True, inline="always")
def _roll(x: np.uint64, value: np.uint64) -> np.uint64:
    """One step of the multiply-xorshift rolling hash (wrapping uint64)."""
    x = (x ^ value) * _MUL
    return x ^ (x >> _SHIFT)


@njit(cache=True, nogil=True, inline="always")
def _bucket(x: np.uint64, mask: np.uint64) -> np.int32:
    """The feature id of a hash: its low bits, 0 (the null feature) moved to 1."""
    return np.int32(max(np.int64(x & mask), 1))


@njit(cache=True, nogil=True)
def group_ids(codes: np.ndarray, dep: np.ndarray, head: np.ndarray, grand: np.ndarray, arc: np.ndarray,
              children: np.ndarray, side_codes: np.ndarray, bag: int, seeds: np.ndarray, one: np.ndarray,
              many: np.ndarray, mask: np.uint64, out: np.ndarray, first: int) -> None:
    """Write the ids of one template group into ``out[:, first:]``.

    ``codes`` (T + 1, k) token codes, the last row the none token; ``arc`` (N, 4) arc atoms, the last column
    0; ``one[t]`` the template's single-token columns into ``[codes[dep] | codes[head] | codes[grand] | arc]``
    (padded with the arc's 0 column); ``bag`` 0 (none), 1 (the dependent's children, "c") or 2 (the head's
    other children, "s"); ``many[t]`` the member columns into ``[codes[member] | side | 0]``;
    ``side_codes`` the codes of the bag's sides. A bag group's column of slot ``s`` and template ``t`` is
    ``first + s * len(seeds) + t``; empty slots get the null feature 0."""
    k = codes.shape[1]
    none = codes.shape[0] - 1
    n_templates = len(seeds)
    slots = children.shape[1]
    for r in range(len(dep)):
        d, h, g = dep[r], head[r], grand[r]
        for t in range(n_templates):
            x = seeds[t]
            for j in range(one.shape[1]):
                c = one[t, j]
                if c < k:
                    x = _roll(x, codes[d, c])
                elif c < 2 * k:
                    x = _roll(x, codes[h, c - k])
                elif c < 3 * k:
                    x = _roll(x, codes[g, c - 2 * k])
                else:
                    x = _roll(x, arc[r, c - 3 * k])
            if bag == 0:
                out[r, first + t] = _bucket(x, mask)
                continue
            owner = d if bag == 1 else h
            for s in range(slots):
                member = children[owner, s]
                col = first + s * n_templates + t
                if member == none or (bag == 2 and member == d):
                    out[r, col] = 0
                    continue
                side = side_codes[np.int64(member < d)] if bag == 1 else \
                    side_codes[np.int64(member < d) + 2 * np.int64(member < h)]
                y = x
                for j in range(many.shape[1]):
                    c = many[t, j]
                    if c < k:
                        y = _roll(y, codes[member, c])
                    elif c == k:
                        y = _roll(y, side)
                    else:
                        y = _roll(y, np.uint64(0))
                out[r, col] = _bucket(y, mask)


@njit(cache=True, nogil=True)
def unique_rows(ids: np.ndarray, hash_mask: np.uint64 = _ALL_BITS) -> tuple[np.ndarray, np.ndarray]:
    """The distinct rows of the (N, W) matrix ``ids``: the index of each one's first occurrence, in order,
    and for each row the number of its distinct row (``ids[first][inverse] == ids``). An open-addressing
    table over a hash of each row; rows with equal hashes are compared in full, so the result is exact
    (``hash_mask`` keeps only some bits of the hash: the tests force collisions with it)."""
    n, w = ids.shape
    size = 16
    while size < 2 * n:
        size *= 2
    table = np.full(size, -1, dtype=np.int64)
    first = np.empty(n, dtype=np.int64)
    hashes = np.empty(n, dtype=np.uint64)
    inverse = np.empty(n, dtype=np.int64)
    count = 0
    for r in range(n):
        h = np.uint64(w)
        for j in range(w):
            h = _roll(h, np.uint64(ids[r, j]))
        h &= hash_mask
        slot = np.int64(h & np.uint64(size - 1))
        while True:
            u = table[slot]
            if u < 0:
                table[slot] = count
                first[count] = r
                hashes[count] = h
                inverse[r] = count
                count += 1
                break
            if hashes[u] == h:
                q = first[u]
                same = True
                for j in range(w):
                    if ids[q, j] != ids[r, j]:
                        same = False
                        break
                if same:
                    inverse[r] = u
                    break
            slot = (slot + 1) & (size - 1)
    return first[:count], inverse


@njit(cache=True, nogil=True)
def add_row_scores(weights: np.ndarray, decode: np.ndarray, ids: np.ndarray, rows: np.ndarray,
                   out: np.ndarray) -> None:  # pragma: no cover - compiled
    """``out[i] += `` the sum of the weight rows of the features of ``ids[rows[i]]`` (id 0, the null feature, left
    out), added in the row's order; each weight read by ``weight_value`` in ``decode``'s precision (``weights``:
    float16 bits, float32 or float64; ``row_scores``; the label-aware LINK factors' ``engine.scoring.link_labels``
    adds float32 weights into float64)."""
    for i in range(len(rows)):
        r = rows[i]
        for j in range(ids.shape[1]):
            f = ids[r, j]
            if f != 0:
                for k in range(weights.shape[1]):
                    out[i, k] += weight_value(weights[f, k], decode)


def row_scores(weights: np.ndarray, ids: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """``label_scores(weights, ids[rows])``: for each row the sum of the weight rows of its features (id 0,
    the null feature, left out), added in the row's order from 0 in the weights' precision, as scipy's
    sparse-dense product adds them (float16 weights, a loaded model's as stored: in float32, the precision
    they are trained and widened to, read through ``HALF_VALUES32`` without the widened copy)."""
    decode: np.ndarray = HALF_VALUES if weights.dtype == np.float64 else HALF_VALUES32
    out = np.zeros((len(rows), weights.shape[1]), dtype=decode.dtype)
    add_row_scores(kernel_table(weights), decode, ids, rows, out)
    return out
