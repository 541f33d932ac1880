"""Vectorised character arrays, substring hashes and the tokenizer's feature templates.

Everything is computed for all characters (or all tokens) at once with numpy: code points come from
the UTF-32 encoding, per-character lowercase and class are looked up once per distinct code point,
and the hash of any substring ``[i, j)`` is read off a polynomial prefix hash in wrapping uint64
arithmetic, ``(H[j] - H[i]) * P^-i`` (P odd, so invertible modulo 2^64), then mixed with its length
(Karp & Rabin 1987 rolling hashes). Feature values are finally combined with their template's code by
``engine.hashing.mix``, so a feature key is a stable 64-bit integer.
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass

import numpy as np

from engine.hashing import hash_string, mix

PAD = 4  # padding characters on each side of the text
_P = 0x100000001B3
_P_INV = pow(_P, -1, 1 << 64)
_LINE_BREAKS = frozenset("\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029")
CLASS_NAMES = ("pad", "space", "newline", "Lu", "Ll", "Lt", "Lm", "Lo", "M", "Nd", "N", "Pc", "Pd", "Ps", "Pe", "Pi",
               "Pf", "Po", "Sm", "Sc", "Sk", "So", "Z", "C")
_CLASS = {name: k for k, name in enumerate(CLASS_NAMES)}
NONE = np.uint64(0xFFFF_FFFF_FFFF)  # the value of a feature that does not apply (no chunk, no neighbour)


def char_class(ch: str) -> int:
    """Small class id of a character: space / line break, else its Unicode general category (grouped)."""
    if ch in _LINE_BREAKS:
        return _CLASS["newline"]
    if ch.isspace():
        return _CLASS["space"]
    cat = unicodedata.category(ch)
    if cat in _CLASS:
        return _CLASS[cat]
    return _CLASS.get(cat[0], _CLASS["C"])


def _powers(base: int, m: int) -> np.ndarray:
    out = np.empty(m, dtype=np.uint64)
    out[0] = 1
    if m > 1:
        out[1:] = np.cumprod(np.full(m - 1, base, dtype=np.uint64))
    return out


def _prefix_hash(values: np.ndarray, powers: np.ndarray) -> np.ndarray:
    h = np.zeros(len(values) + 1, dtype=np.uint64)
    np.cumsum(values.astype(np.uint64) * powers[: len(values)], out=h[1:])
    return h


@dataclass
class TextArrays:
    """Per-character arrays of a text, padded by ``PAD`` on both sides (position ``i`` of the text is
    ``i + PAD`` here). ``space`` / ``newline`` are unpadded (length ``n``)."""

    n: int
    raw: np.ndarray  # int64 code point + 2 (padding = 1)
    low: np.ndarray  # the same for the lowercased character
    cls: np.ndarray  # int64 class id (0 = padding)
    space: np.ndarray  # bool (n,): str.isspace
    newline: np.ndarray  # bool (n,): a line break
    h_raw: np.ndarray
    h_low: np.ndarray
    h_cls: np.ndarray
    inv: np.ndarray  # P^-i

    @classmethod
    def of(cls, text: str) -> TextArrays:
        cps = np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype=np.uint32).astype(np.int64)
        n = len(cps)
        uniq, where = np.unique(cps, return_inverse=True)
        chars = [chr(int(u)) for u in uniq]
        low_u = np.array([ord(c.lower()) if len(c.lower()) == 1 else ord(c) for c in chars], dtype=np.int64)
        cls_u = np.array([char_class(c) for c in chars], dtype=np.int64)
        space_u = np.array([c.isspace() for c in chars], dtype=bool)
        nl_u = np.array([c in _LINE_BREAKS for c in chars], dtype=bool)
        pad = np.ones(PAD, dtype=np.int64)
        raw = np.concatenate([pad, cps + 2, pad])
        low = np.concatenate([pad, low_u[where] + 2, pad]) if n else np.concatenate([pad, pad])
        klass = np.concatenate([pad * 0, cls_u[where], pad * 0]) if n else np.zeros(2 * PAD, dtype=np.int64)
        m = n + 2 * PAD
        powers = _powers(_P, m + 1)
        return cls(
            n=n, raw=raw, low=low, cls=klass,
            space=space_u[where] if n else np.zeros(0, bool), newline=nl_u[where] if n else np.zeros(0, bool),
            h_raw=_prefix_hash(raw, powers), h_low=_prefix_hash(low, powers), h_cls=_prefix_hash(klass + 1, powers),
            inv=_powers(_P_INV, m + 1),
        )

    @staticmethod
    def _sub(h: np.ndarray, inv: np.ndarray, i: np.ndarray, j: np.ndarray) -> np.ndarray:
        with np.errstate(over="ignore"):
            return mix((h[j] - h[i]) * inv[i], (j - i).astype(np.uint64))

    def low_hash(self, i: np.ndarray, j: np.ndarray) -> np.ndarray:
        """Hash of the lowercased padded substring ``[i, j)`` (padded coordinates)."""
        return self._sub(self.h_low, self.inv, i, j)

    def raw_hash(self, i: np.ndarray, j: np.ndarray) -> np.ndarray:
        return self._sub(self.h_raw, self.inv, i, j)

    def cls_hash(self, i: np.ndarray, j: np.ndarray) -> np.ndarray:
        return self._sub(self.h_cls, self.inv, i, j)

    def token_hashes(self, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
        """Lowercased hashes of text spans ``[start, end)`` (text coordinates): keys of known tokens."""
        return self.low_hash(np.asarray(starts) + PAD, np.asarray(ends) + PAD)


def _u(x: np.ndarray) -> np.ndarray:
    return np.asarray(x).astype(np.uint64)


def _combine(*values: np.ndarray) -> np.ndarray:
    out = _u(values[0])
    for v in values[1:]:
        out = mix(out, _u(v))
    return out


def _template_codes(prefix: str, n: int) -> np.ndarray:
    return np.array([hash_string(f"{prefix}{k}") for k in range(n)], dtype=np.uint64)


def chunks(arr: TextArrays) -> tuple[np.ndarray, np.ndarray]:
    """Start and end (text coordinates) of the whitespace-delimited chunk of each character (-1 on spaces)."""
    n = arr.n
    idx = np.arange(n)
    ns = ~arr.space
    prev_sp = np.concatenate([[True], arr.space[:-1]]) if n else np.zeros(0, bool)
    next_sp = np.concatenate([arr.space[1:], [True]]) if n else np.zeros(0, bool)
    start = np.maximum.accumulate(np.where(ns & prev_sp, idx, -1)) if n else idx
    end_marks = np.where(ns & next_sp, idx + 1, n + 1)
    end = np.minimum.accumulate(end_marks[::-1])[::-1] if n else idx
    return np.where(ns, start, -1), np.where(ns, end, -1)


def _in_sorted(values: np.ndarray, table: np.ndarray) -> np.ndarray:
    if len(table) == 0:
        return np.zeros(values.shape, dtype=bool)
    pos = np.minimum(np.searchsorted(table, values), len(table) - 1)
    return table[pos] == values


N_CHAR_TEMPLATES = 34
_CHAR_CODES = _template_codes("tokchar:", N_CHAR_TEMPLATES)


def char_features(arr: TextArrays, known: np.ndarray, rows: slice | None = None,
                  chunk_bounds: tuple[np.ndarray, np.ndarray] | None = None) -> np.ndarray:
    """Feature keys (len(rows), N_CHAR_TEMPLATES) uint64 of the characters ``rows`` (default: all).

    Templates: the character and its neighbours +-3 (lowercased), lowercased n-grams (2..5 and 7)
    around it, a case-sensitive trigram, class n-grams, and its whitespace-delimited chunk: the chunk
    with the offset in it, the text of the chunk before / from the character, and whether these and
    the whole chunk are known tokens (``known``: sorted lowercased token hashes)."""
    rows = rows or slice(0, arr.n)
    i = np.arange(arr.n)[rows]
    q = i + PAD
    feats: list[np.ndarray] = [np.zeros(len(i), dtype=np.uint64)]
    for k in range(-3, 4):
        feats.append(_u(arr.low[q + k]))
    for a, b in ((-2, 0), (-1, 1), (0, 2), (1, 3), (-3, 0), (-2, 1), (-1, 2), (0, 3), (-3, 1), (-2, 2), (-1, 3),
                 (0, 4), (-2, 3), (-3, 4)):
        feats.append(arr.low_hash(q + a, q + b))
    feats.append(arr.raw_hash(q - 1, q + 2))
    for a, b in ((-1, 1), (0, 2), (-1, 2), (-2, 3), (-3, 4)):
        feats.append(arr.cls_hash(q + a, q + b))
    cs, ce = chunk_bounds if chunk_bounds is not None else chunks(arr)
    cs, ce = cs[rows], ce[rows]
    inside = cs >= 0
    s = np.where(inside, cs, i) + PAD
    e = np.where(inside, ce, i + 1) + PAD
    chunk = arr.low_hash(s, e)
    before = arr.low_hash(s, q)
    after = arr.low_hash(q, e)
    off = np.minimum(q - s, 31)
    k_chunk = _in_sorted(chunk, known)
    k_before = _in_sorted(before, known) & (q > s)
    k_after = _in_sorted(after, known)
    flags = k_chunk.astype(np.int64) * 4 + k_before * 2 + k_after
    cur, prev = arr.cls[q], arr.cls[q - 1]
    length = np.minimum(e - s, 15)
    for v in (
        _combine(chunk, off),
        _combine(flags, prev, cur),
        np.where(q > s, before, NONE),
        after,
        _combine(length, off, cur),
        _combine(k_before, arr.low[q]),
    ):
        feats.append(np.where(inside, v, NONE))
    out = np.stack(feats, axis=1)
    return mix(out, _CHAR_CODES[None, :])


N_TOKEN_TEMPLATES = 24
_TOKEN_CODES = _template_codes("toksent:", N_TOKEN_TEMPLATES)
START_OF_TEXT, END_OF_TEXT = 6, 5
ONE_LINE_BREAK, LINE_BREAKS = 3, 4  # gap categories of whitespace holding line breaks


def gap_categories(arr: TextArrays, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Category of the whitespace after each token: 0 none, 1 one space, 2 more spaces, 3 one line break,
    4 more line breaks, 5 end of text."""
    t = len(starts)
    nl = np.concatenate([[0], np.cumsum(arr.newline)])
    out = np.full(t, END_OF_TEXT, dtype=np.int64)
    if t > 1:
        gl = starts[1:] - ends[:-1]
        gnl = nl[starts[1:]] - nl[ends[:-1]]
        out[:-1] = np.select([gl == 0, (gnl == 0) & (gl == 1), gnl == 0, gnl == 1], [0, 1, 2, ONE_LINE_BREAK],
                             LINE_BREAKS)
    return out


def token_features(arr: TextArrays, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Sentence-end feature keys (len(starts), N_TOKEN_TEMPLATES) uint64 of tokens ``[start, end)``: the
    token, its neighbours (+-1, +2), their shapes, the whitespace after and before it, and conjunctions."""
    starts, ends = np.asarray(starts, dtype=np.int64), np.asarray(ends, dtype=np.int64)
    t = len(starts)
    s, e = starts + PAD, ends + PAD
    w = arr.low_hash(s, e)
    wr = arr.raw_hash(s, e)
    first, last = arr.cls[s], arr.cls[e - 1]
    second = arr.cls[np.minimum(s + 1, e - 1)]
    shape = ((first * 32 + second) * 32 + last) * 8 + np.minimum(e - s, 5)
    lastchar = arr.low[e - 1]
    suffix2 = arr.low_hash(np.maximum(s, e - 2), e)
    gap = gap_categories(arr, starts, ends)

    def shift(x: np.ndarray, k: int, fill: int | np.uint64) -> np.ndarray:
        out = np.full(t, fill, dtype=x.dtype)
        if k > 0 and t > k:
            out[:-k] = x[k:]
        elif k < 0 and t > -k:
            out[-k:] = x[:k]
        return out

    w1, wm1, w2 = shift(w, 1, NONE), shift(w, -1, NONE), shift(w, 2, NONE)
    wr1 = shift(wr, 1, NONE)
    shape1, shapem1 = shift(shape, 1, -1), shift(shape, -1, -1)
    first1 = shift(first, 1, -1)
    gapm1 = shift(gap, -1, START_OF_TEXT)
    feats = [
        np.zeros(t, dtype=np.uint64), w, w1, wm1, w2, _u(shape), _u(shape1), _u(gap),
        _combine(w, gap), _combine(w1, gap), _combine(shape, shape1, gap), _combine(w, w1), _combine(wm1, w),
        _combine(lastchar, first1, gap), _combine(w, shape1), _combine(shape, w1), _combine(suffix2, gap, first1),
        _combine(gapm1, shape), _combine(w, w1, gap), _combine(shapem1, shape, shape1), _combine(wr, first1), wr1,
        _combine(lastchar, shape1, gap, gapm1), _combine(w, first1, gap),
    ]
    out = np.stack(feats, axis=1) if t else np.zeros((0, N_TOKEN_TEMPLATES), dtype=np.uint64)
    return mix(out, _TOKEN_CODES[None, :])
