"""Where hashed feature codes sit in a model's sorted array of known codes, by open addressing.

The tagger keeps the codes of its training features sorted (``Tagger.features``, about 211,000 for EWT) and maps
each word's codes to their positions. ``np.searchsorted`` does ~18 dependent probes per code (about 230 ns for
random codes into 1.7 MB); ``CodeIndex`` puts the codes in a power-of-two table of twice their number, slot
``(code * FIB) >> shift`` (Fibonacci hashing, Knuth vol. 3 §6.4) with linear probing, so a lookup is one or
two probes. The answer is the same position, or -1 for a code not in the array.
"""

from __future__ import annotations

import numpy as np
from numba import njit  # type: ignore[import-untyped]

_FIB = np.uint64(0x9E3779B97F4A7C15)  # 2^64 / golden ratio


class CodeIndex:
    """``positions(q)``: the index of each code of ``q`` in ``keys`` (sorted, distinct uint64), -1 where absent:
    what ``np.searchsorted`` finds there."""

    def __init__(self, keys: np.ndarray) -> None:
        keys = np.ascontiguousarray(keys, dtype=np.uint64)
        if len(keys) > 1 and not (keys[1:] > keys[:-1]).all():
            raise ValueError("CodeIndex needs sorted, distinct keys")
        bits = max(1, int(2 * len(keys) - 1).bit_length())  # at most half full
        self.shift = np.uint64(64 - bits)
        self.slots = np.full(1 << bits, -1, dtype=np.int64)  # the key's position, or -1 (empty)
        self.keys = keys
        _insert(keys, self.slots, self.shift)

    def positions(self, queries: np.ndarray) -> np.ndarray:
        flat = np.ascontiguousarray(queries, dtype=np.uint64).reshape(-1)
        out = np.empty(len(flat), dtype=np.int64)
        _find(self.keys, self.slots, self.shift, flat, out)
        return out.reshape(np.shape(queries))


@njit(cache=True, nogil=True)
def _insert(keys: np.ndarray, slots: np.ndarray, shift: np.uint64) -> None:  # pragma: no cover - compiled
    mask = len(slots) - 1
    for j in range(len(keys)):
        i = np.int64((keys[j] * _FIB) >> shift)
        while slots[i] >= 0:
            i = (i + 1) & mask
        slots[i] = j


@njit(cache=True, nogil=True)
def _find(keys: np.ndarray, slots: np.ndarray, shift: np.uint64, queries: np.ndarray,
          out: np.ndarray) -> None:  # pragma: no cover - compiled
    mask = len(slots) - 1
    for q in range(len(queries)):
        code = queries[q]
        i = np.int64((code * _FIB) >> shift)
        found = -1
        while slots[i] >= 0:
            if keys[slots[i]] == code:
                found = slots[i]
                break
            i = (i + 1) & mask
        out[q] = found
