"""Vectorised extraction of hashed first-order arc features.

For a batch of ``B`` sentences of the same length ``n`` the extractor returns an int32 array
``(B, n+1, n+1, K)`` of feature indices in ``[0, dim)``: ``K`` slots per candidate arc ``h -> m``,
one per template (``between`` templates take one slot per UPOS tag). Index 0 is the null feature
(weight fixed at 0): it fills unused slots and every impossible arc (into ROOT, self loops).

All ``n (n + 1)`` candidate arcs are computed at once with numpy broadcasting: a template's hash is
``mix(mix(seed, head code[h]), dependent code[m])`` optionally mixed with a direction/distance code.
Cost: O(B n^2 K) integer operations, no Python loop over arcs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Protocol

import numpy as np

from engine.features.templates import ArcTemplate
from engine.hashing import cached_codes, hash_string, hash_strings, mix
from engine.text.shapes import word_shape

UPOS_TAGS = (
    "ADJ", "ADP", "ADV", "AUX", "CCONJ", "DET", "INTJ", "NOUN", "NUM",
    "PART", "PRON", "PROPN", "PUNCT", "SCONJ", "SYM", "VERB", "X",
)
_DIST_BINS = np.array([0, 1, 2, 3, 4, 5, 6, 6, 7, 7, 7, 8, 8, 8, 8, 9, 9, 9, 9, 9, 10])  # by |h - m|


class Tokens(Protocol):
    """What feature extraction reads from a sentence (``engine.data.conllu_io.Sentence`` fits)."""

    forms: list[str]
    upos: list[str]
    xpos: list[str]


# the word attributes that are a function of the form alone: their strings, one definition for both the string
# path (token_attribute) and the per-form codes (attribute_hashes)
_WORD_STRINGS: dict[str, Callable[[str], str]] = {
    "form": lambda f: f,
    "lower": str.lower,
    "pre5": lambda f: f.lower()[:5],
    "suf3": lambda f: f.lower()[-3:],
    "shape": word_shape,
}


def token_attribute(sent: Tokens, attr: str) -> list[str]:
    """Attribute strings for positions 0..n (position 0 is ROOT); ``<base>_prev`` / ``<base>_next`` is
    the base attribute of the word before / after (``<BOS>`` / ``<EOS>`` past the edges)."""
    base, _, shift = attr.partition("_")
    if base in ("upos", "xpos"):
        vals = ["<ROOT>", *(sent.upos if base == "upos" else sent.xpos)]
    else:
        string = _WORD_STRINGS[base]
        vals = ["<ROOT>", *(string(f) for f in sent.forms)]
    if not shift:
        return vals
    if shift == "prev":
        return ["<BOS>", *vals[:-1]]
    return [*vals[1:], "<EOS>"]


_WORD_BASES = tuple(_WORD_STRINGS)
_FORM_CODES: dict[str, tuple[int, ...]] = {}  # each form's codes of the _WORD_BASES, up to _MAX_FORMS forms
_MAX_FORMS = 1 << 18
_ROOT, _BOS, _EOS = (hash_string(x) for x in ("<ROOT>", "<BOS>", "<EOS>"))
ROOT_CODE = _ROOT  # every attribute's code at row 0 (ROOT) of ``attribute_hashes``


def _word_codes(forms: list[str]) -> np.ndarray:
    """(n, len(_WORD_BASES)) uint64: the hash codes of each form's attribute strings, computed once per form
    (they depend on the form alone) and kept while fewer than ``_MAX_FORMS`` forms have been seen."""
    return cached_codes(_FORM_CODES, forms, lambda todo: (tuple(hash_string(string(f)) for string in
                                                                _WORD_STRINGS.values()) for f in todo), _MAX_FORMS
                        ).reshape(len(forms), len(_WORD_BASES))


def attribute_hashes(sent: Tokens, attrs: Sequence[str]) -> np.ndarray:
    """(n+1, A) uint64: ``hash_strings(token_attribute(sent, a))`` for each attribute ``a``, the same codes
    without building the strings of a form again once it has been seen."""
    return attribute_hashes_many([sent], attrs)[0]


def attribute_hashes_many(sentences: Sequence[Tokens], attrs: Sequence[str]) -> np.ndarray:
    """(B, n+1, A) uint64: ``attribute_hashes`` of each of a batch of sentences of one length ``n``, with one
    lookup of the batch's forms and one of each tag attribute (not one per sentence). Each sentence's codes of
    every base attribute are laid out once as ``<BOS> <ROOT> w1 .. wn <EOS>``, and attribute ``j`` at position
    ``i`` is read at ``i + 0`` (``_prev``), ``i + 1`` (plain) or ``i + 2`` (``_next``) of its base's row: one
    gather for all attributes instead of a few numpy steps per attribute."""
    b, n = len(sentences), len(sentences[0].forms) if sentences else 0
    if any(len(s.forms) != n for s in sentences):
        raise ValueError("attribute_hashes_many takes sentences of one length")
    bases, offsets = _attribute_layout(tuple(attrs))
    padded = np.empty((b, n + 3, len(_LAYOUT_BASES)), dtype=np.uint64)
    padded[:, 0], padded[:, 1], padded[:, n + 2] = _BOS, _ROOT, _EOS
    used = set(bases.tolist())
    if used & _WORD_COLUMNS:
        padded[:, 2:n + 2, :len(_WORD_BASES)] = _word_codes([f for s in sentences for f in s.forms]).reshape(
            b, n, len(_WORD_BASES))
    for k, base in ((_UPOS_COLUMN, "upos"), (_UPOS_COLUMN + 1, "xpos")):
        if k in used:
            padded[:, 2:n + 2, k] = hash_strings([t for s in sentences for t in getattr(s, base)]).reshape(b, n)
    return padded[:, np.arange(n + 1)[:, None] + offsets[None, :], bases[None, :]]


_LAYOUT_BASES = (*_WORD_BASES, "upos", "xpos")  # the columns of attribute_hashes_many's layout
_UPOS_COLUMN = len(_WORD_BASES)
_WORD_COLUMNS = set(range(len(_WORD_BASES)))


@lru_cache(maxsize=64)
def _attribute_layout(attrs: tuple[str, ...]) -> tuple[np.ndarray, np.ndarray]:
    """Each attribute's base column in ``_LAYOUT_BASES`` and its offset (0 ``_prev``, 1 plain, 2 ``_next``);
    ``KeyError`` for an attribute that is none of these."""
    bases, offsets = [], []
    for attr in attrs:
        base, _, shift = attr.partition("_")
        if base not in _LAYOUT_BASES or shift not in ("prev", "", "next"):
            raise KeyError(attr)
        bases.append(_LAYOUT_BASES.index(base))
        offsets.append({"prev": 0, "": 1, "next": 2}[shift])
    return np.array(bases, dtype=np.intp), np.array(offsets, dtype=np.intp)


def direction_distance(n: int) -> tuple[np.ndarray, np.ndarray]:
    """Codes (n+1, n+1) for the direction of ``h -> m`` and for direction plus binned distance."""
    pos = np.arange(n + 1)
    right = (pos[:, None] < pos[None, :]).astype(np.int64)
    dist = np.abs(pos[:, None] - pos[None, :])
    binned = _DIST_BINS[np.minimum(dist, len(_DIST_BINS) - 1)]
    return right + 1, 100 + 16 * right + binned


@dataclass(frozen=True)
class FeatureExtractor:
    """Hashes declared ``templates`` into ``dim`` buckets (index 0 reserved as null)."""

    templates: tuple[ArcTemplate, ...]
    dim: int

    def __post_init__(self) -> None:
        if self.dim < 2:
            raise ValueError("feature dimension must be at least 2")

    @property
    def slots(self) -> int:
        """Feature slots per arc, K."""
        return sum(len(UPOS_TAGS) if t.between else 1 for t in self.templates)

    def extract(self, sentences: Sequence[Tokens]) -> np.ndarray:
        """Feature indices (B, n+1, n+1, K) int32 for sentences that all have ``n`` words."""
        n = len(sentences[0].forms)
        if any(len(s.forms) != n for s in sentences):
            raise ValueError("extract() takes a batch of sentences of one length")
        b = len(sentences)
        attrs = {a for t in self.templates for a in t.head + t.dep}
        codes = {
            a: hash_strings([x for s in sentences for x in token_attribute(s, a)]).reshape(b, n + 1)
            for a in sorted(attrs)
        }
        direction, distance = direction_distance(n)
        context = {
            "none": None,
            "dir": hash_strings([f"dir{d}" for d in range(3)])[direction],
            "dist": hash_strings([f"dist{d}" for d in range(200)])[distance],
        }
        out = np.zeros((b, n + 1, n + 1, self.slots), dtype=np.int32)
        invalid = np.eye(n + 1, dtype=bool)
        invalid[:, 0] = True
        slot = 0
        for template in self.templates:
            x = np.full((b, n + 1), np.uint64(hash_string(template.name)))
            for a in template.head:
                x = mix(x, codes[a])
            y = np.full((b, n + 1), np.uint64(0x51ED27))
            for a in template.dep:
                y = mix(y, codes[a])
            arc = mix(x[:, :, None], y[:, None, :])  # (B, n+1, n+1)
            ctx = context[template.context]
            if ctx is not None:
                arc = mix(arc, ctx[None])
            if template.between:
                present = self._tags_between(sentences, n)  # (B, n+1, n+1, T)
                idx = self._bucket(mix(arc[..., None], hash_strings(list(UPOS_TAGS))))
                idx[~present] = 0
                width = len(UPOS_TAGS)
            else:
                idx = self._bucket(arc)[..., None]
                width = 1
            out[..., slot : slot + width] = idx
            slot += width
        out[:, invalid] = 0
        return out

    def _bucket(self, h: np.ndarray) -> np.ndarray:
        return (h % np.uint64(self.dim - 1)).astype(np.int32) + 1

    @staticmethod
    def _tags_between(sentences: Sequence[Tokens], n: int) -> np.ndarray:
        """present[b, h, m, t]: a word tagged ``UPOS_TAGS[t]`` lies strictly between h and m."""
        index = {t: i for i, t in enumerate(UPOS_TAGS)}
        tag_ids = np.array([[index.get(t, -1) for t in s.upos] for s in sentences]).reshape(len(sentences), n)
        onehot = np.zeros((len(sentences), n + 2, len(UPOS_TAGS)), dtype=np.int16)
        rows, cols = np.nonzero(tag_ids >= 0)
        onehot[rows, cols + 2, tag_ids[rows, cols]] = 1  # word at position p counts from prefix p+1
        prefix = np.cumsum(onehot, axis=1)  # prefix[:, i] = tags at positions < i
        pos = np.arange(n + 1)
        lo = np.minimum(pos[:, None], pos[None, :])
        hi = np.maximum(pos[:, None], pos[None, :])
        return (prefix[:, hi] - prefix[:, np.minimum(lo + 1, hi)]) > 0
