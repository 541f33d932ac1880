"""Stable 64-bit hashing of strings and vectorised hash combination; lookup of codes in a sorted array.

Feature indices must be identical across processes and machines (a saved model is a weight vector
indexed by them), so Python's salted ``hash`` is not used: strings go through CRC-32 (zlib, C speed)
and are then combined with a multiply-xorshift mixer in wrapping uint64 arithmetic.

Layering: at the bottom of the engine (numpy, zlib and numba only), because every hashed model uses it:
the tokenizer's and tagger's features (``engine.text``), the parser's (``engine.features``,
``engine.scoring``) and the log-linear labeller's (``engine.decode``).
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Iterable, Sequence

import numpy as np
from numba import njit  # type: ignore[import-untyped]

_MUL = np.uint64(0x9E3779B97F4A7C15)
_MUL2 = np.uint64(0xBF58476D1CE4E5B9)
_S1 = np.uint64(31)
_S2 = np.uint64(27)


_CODES: dict[str, int] = {}  # codes of the strings seen, up to _MAX_CODES of them (then it starts afresh)
_MAX_CODES = 1 << 20


def _code(text: str) -> int:
    data = text.encode("utf-8")
    return (zlib.crc32(data) << 32) | zlib.crc32(data[::-1], 0x5BD1E995)


def hash_string(text: str) -> int:
    """A stable 64-bit code for a string (CRC-32 of its UTF-8 bytes and of its reverse)."""
    code = _CODES.get(text)
    if code is None:
        if len(_CODES) >= _MAX_CODES:
            _CODES.clear()
        code = _CODES[text] = _code(text)
    return code


def hash_strings(texts: list[str]) -> np.ndarray:
    """``hash_string`` over a list -> uint64 array (one dictionary lookup per string once it has been seen)."""
    codes = _CODES
    try:
        return np.array([codes[t] for t in texts], dtype=np.uint64).reshape(len(texts))
    except KeyError:
        return np.array([hash_string(t) for t in texts], dtype=np.uint64).reshape(len(texts))


def cached_codes(cache: dict[str, tuple[int, ...]], keys: Sequence[str],
                 compute: Callable[[list[str]], Iterable[tuple[int, ...]]], limit: int) -> np.ndarray:
    """(len(keys), width) uint64: each key's codes (a pure function of the key) through ``cache``, the missing
    keys' computed by one call of ``compute`` (in their order, each once); a cache that would grow beyond
    ``limit`` keys starts afresh. Each entry is read once, so another thread clearing the cache meanwhile (the
    service's parse threads share one) changes no result."""
    if len(cache) + len(keys) > limit:
        cache.clear()
    found = [cache.get(k) for k in keys]
    todo = list(dict.fromkeys(k for k, row in zip(keys, found, strict=True) if row is None))
    fresh = dict(zip(todo, compute(todo), strict=True)) if todo else {}
    cache.update(fresh)
    rows = [fresh[k] if row is None else row for k, row in zip(keys, found, strict=True)]
    return np.array(rows, dtype=np.uint64).reshape(len(keys), len(rows[0]) if rows else 0)


def mix(x: np.ndarray | np.uint64, y: np.ndarray | np.uint64) -> np.ndarray:
    """Combine two uint64 codes (broadcasting) into one; order-sensitive, well spread."""
    with np.errstate(over="ignore"):
        z = (x ^ y) * _MUL
        z ^= z >> _S1
        z *= _MUL2
        z ^= z >> _S2
    return z


@njit(cache=True, inline="always")
def mix_pair(x: np.uint64, y: np.uint64) -> np.uint64:
    """``mix`` of two scalar codes, for compiled kernels (the same arithmetic, wrapping uint64)."""
    z = (x ^ y) * np.uint64(0x9E3779B97F4A7C15)
    z ^= z >> np.uint64(31)
    z *= np.uint64(0xBF58476D1CE4E5B9)
    z ^= z >> np.uint64(27)
    return z


# -- where hashed codes sit in a sorted array of known codes, by open addressing -----------------------------
# The tagger keeps the codes of its training features sorted (``Tagger.features``, about 211,000 for EWT) and
# maps each word's codes to their positions. ``np.searchsorted`` does ~18 dependent probes per code (about 230 ns
# for random codes into 1.7 MB); ``CodeIndex`` puts the codes in a power-of-two table at most half full, slot
# ``(code * _MUL) >> shift`` (Fibonacci hashing, Knuth vol. 3 §6.4) with linear probing: one or two probes, the
# same position, or -1 for a code not in the array.


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
        i = np.int64((keys[j] * _MUL) >> shift)
        while slots[i] >= 0:
            i = (i + 1) & mask
        slots[i] = j


@njit(cache=True, nogil=True)
def _find(keys: np.ndarray, slots: np.ndarray, shift: np.uint64, queries: np.ndarray,
          out: np.ndarray) -> None:  # pragma: no cover - compiled
    mask = len(slots) - 1
    for q in range(len(queries)):
        code = queries[q]
        i = np.int64((code * _MUL) >> shift)
        found = -1
        while slots[i] >= 0:
            if keys[slots[i]] == code:
                found = slots[i]
                break
            i = (i + 1) & mask
        out[q] = found
