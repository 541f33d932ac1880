"""Features of the CRF tagger (``engine.text.tagger``): templates, hashed codes and the tag dictionaries.

Features are 64-bit codes from ``engine.hashing`` (template seed mixed with value codes), extracted for all
words at once: the word and its lowercase form (frequent words only), prefixes and suffixes of 1-4
characters, collapsed shape (``Xx``, ``d.d``; conjoined with "first word" at the start), digit/hyphen/capital
flags, the neighbours' words, suffixes and tag sets at -2..+2 and shapes at -1/+1, conjunctions of adjacent
words, tag sets and suffixes, and tag-dictionary features: the set of UPOS (XPOS) tags a frequent training
word was seen with, also for its lowercase form (``build_lexicon``). ``feature_spec`` records the templates
in a tagger's state so that a model is never used with different ones.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from functools import cache
from typing import Any, Protocol

import numpy as np

from engine.hashing import cached_codes, hash_string, hash_strings, mix
from engine.text.shapes import word_shape

_BOS, _EOS = "\x02BOS", "\x03EOS"  # padding "words" (control characters cannot occur in a treebank form)

class HasForms(Protocol):
    forms: list[str]



_LEX = ("bias", "lower", "form", "p1", "p2", "p3", "p4", "s1", "s2", "s3", "s4", "shape", "flags", "udict", "xdict",
        "ldict")
# (template, offset) pairs read at the neighbours
_CONTEXT = (
    ("lower", -2), ("lower", -1), ("lower", 1), ("lower", 2),
    ("s3", -2), ("s3", -1), ("s3", 1), ("s3", 2),
    ("shape", -1), ("shape", 1),
    ("udict", -2), ("udict", -1), ("udict", 1), ("udict", 2),
)
_BIGRAMS = (
    (("lower", -1), ("lower", 0)), (("lower", 0), ("lower", 1)), (("udict", -1), ("udict", 1)),
    (("lower", 0), ("udict", 1)), (("udict", -1), ("lower", 0)),
    (("udict", 1), ("udict", 2)), (("udict", -2), ("udict", -1)),
    (("lower", -1), ("s3", 0)), (("s3", 0), ("lower", 1)),
)
LEXICONS = ("udict", "xdict", "ldict")  # tag-dictionary templates (values looked up in the lexicon)
_RARE, _UNK = hash_string("<rare>"), hash_string("<unk>")

# A lexicon maps a template name to (sorted uint64 codes of the words it knows, uint64 codes of their values).
Lexicon = dict[str, tuple[np.ndarray, np.ndarray]]


@cache
def _seed(name: str) -> np.uint64:
    return np.uint64(hash_string(f"tagger|{name}"))


def _find(known: np.ndarray, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Where each of ``keys`` would sit in the sorted ``known`` (clipped to a valid index) and whether it is
    there: ``np.isin(keys, known)`` without sorting ``known`` again on every call."""
    if len(known) == 0:
        return np.zeros(len(keys), dtype=np.int64), np.zeros(len(keys), dtype=bool)
    at = np.minimum(np.searchsorted(known, keys), len(known) - 1)
    return at, known[at] == keys


def _lookup_table(table: tuple[np.ndarray, np.ndarray], keys: np.ndarray, default: int) -> np.ndarray:
    """Values of ``keys`` (uint64 codes) in a lexicon table, ``default`` where absent."""
    known, values = table
    if len(known) == 0:
        return np.full(len(keys), default, dtype=np.uint64)
    at, hit = _find(known, keys)
    return np.where(hit, values[at], np.uint64(default))


def _member(keys: np.ndarray, known: np.ndarray) -> np.ndarray:
    """``np.isin(keys, known)`` for a sorted ``known``."""
    return _find(known, keys)[1]


def _value_codes(name: str, forms: list[str], lower: list[str], lexicon: Lexicon) -> np.ndarray:
    """Codes (U,) uint64 of lexical template ``name`` for each distinct form."""
    if name == "bias":
        return np.zeros(len(forms), dtype=np.uint64)
    if name in ("lower", "form", *LEXICONS):
        keys = hash_strings(lower if name in ("lower", "ldict") else forms)
        if name in LEXICONS:
            return _lookup_table(lexicon[name], keys, _RARE)
        # word identities only for frequent words (those in the tag dictionaries): rare training words
        # then train the affix and shape features that unknown words depend on
        known = lexicon["ldict" if name == "lower" else "udict"][0]  # sorted (checked when a state loads)
        return np.where(_member(keys, known), keys, np.uint64(_UNK))
    if name == "shape":
        return hash_strings([word_shape(f) for f in forms])
    if name == "flags":
        return hash_strings([f"{any(c.isdigit() for c in f)}{'-' in f}{f[:1].isupper()}{f.isupper()}" for f in forms])
    if name[0] in "ps" and name[1:].isdigit():
        k = int(name[1:])
        return hash_strings([w[:k] for w in lower] if name[0] == "p" else [w[-k:] for w in lower])
    raise ValueError(f"unknown tagger template {name!r}")


def feature_codes(
    sentences: Sequence[HasForms], lexicon: Lexicon, cache: dict[str, tuple[int, ...]] | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Hashed feature codes of every word of ``sentences`` (concatenated in order) -> ((N, K) uint64, offsets).

    Lexical templates are hashed once per distinct form; neighbour templates read a flat array in which
    every sentence is padded with two BOS and two EOS pseudo-words, so the word at offset ``d`` of padded
    position ``p`` is ``p + d`` for all words at once. A form's lexical values depend on the form and
    ``lexicon`` alone: given a ``cache`` (form -> its values, for this lexicon only), they are computed once per
    form across calls.
    """
    lengths = np.array([len(s.forms) for s in sentences], dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    padded: list[str] = []
    for s in sentences:
        padded += [_BOS, _BOS, *s.forms, _EOS, _EOS]
    types, inverse = np.unique(np.array(padded, dtype=object), return_inverse=True)
    values = _form_values([str(x) for x in types], lexicon, cache)
    # padded position of each real word: sentence i's word j sits at offsets[i] + 4 i + 2 + j
    sent_of = np.repeat(np.arange(len(sentences)), lengths)
    pos = np.arange(int(offsets[-1])) + 4 * sent_of + 2
    codes = np.empty((len(pos), len(_LEX) + len(_CONTEXT) + len(_BIGRAMS)), dtype=np.uint64)
    col = 0
    for name in _LEX:
        codes[:, col] = mix(_seed(name), values[name][inverse[pos]])
        col += 1
    for name, d in _CONTEXT:
        codes[:, col] = mix(_seed(f"{name}@{d}"), values[name][inverse[pos + d]])
        col += 1
    for (a, d), (c, e) in _BIGRAMS:
        key = _seed(f"{a}@{d}+{c}@{e}")
        codes[:, col] = mix(mix(key, values[a][inverse[pos + d]]), values[c][inverse[pos + e]])
        col += 1
    # sentence-initial capitalisation is uninformative: conjoin the shape of the first word with "first"
    first = offsets[:-1][lengths > 0]
    codes[first, _LEX.index("shape")] = mix(_seed("first"), codes[first, _LEX.index("shape")])
    return codes, offsets


_NEEDED = sorted({*_LEX, *(a for a, _ in _CONTEXT), *(a for pair in _BIGRAMS for a, _ in pair)})
_CACHED_FORMS = 1 << 18  # a cache holding more forms starts afresh


def _form_values(forms: list[str], lexicon: Lexicon, cache: dict[str, tuple[int, ...]] | None
                 ) -> dict[str, np.ndarray]:
    """Each lexical template's codes (U,) uint64 for the distinct ``forms``, through ``cache`` where given."""
    def compute(todo: list[str]) -> Iterable[tuple[int, ...]]:
        fresh = [_value_codes(name, todo, [f.lower() for f in todo], lexicon).tolist() for name in _NEEDED]
        return zip(*fresh, strict=True)

    if cache is None:
        return {name: _value_codes(name, forms, [f.lower() for f in forms], lexicon) for name in _NEEDED}
    table = cached_codes(cache, forms, compute, _CACHED_FORMS).reshape(len(forms), len(_NEEDED))
    return {name: table[:, k] for k, name in enumerate(_NEEDED)}


def build_lexicon(sentences: Sequence[Any], min_count: int = 3) -> Lexicon:
    """Tag dictionaries of frequent words: ``udict``/``xdict`` map a form seen at least ``min_count`` times
    to (the code of) the set of UPOS/XPOS tags it was seen with, e.g. "ADJ|NOUN"; ``ldict`` maps a
    lowercased form (its case variants counted together) to its UPOS tags."""
    count: dict[str, Counter[str]] = {"udict": Counter(), "xdict": Counter(), "ldict": Counter()}
    tags: dict[str, dict[str, set[str]]] = {k: defaultdict(set) for k in count}
    for s in sentences:
        for f, u, x in zip(s.forms, s.upos, s.xpos, strict=True):
            for name, key, tag in (("udict", f, u), ("xdict", f, x), ("ldict", f.lower(), u)):
                count[name][key] += 1
                tags[name][key].add(tag)
    lexicon: Lexicon = {}
    for name in LEXICONS:
        words = sorted(k for k, c in count[name].items() if c >= min_count)
        keys = hash_strings(words)
        values = hash_strings(["|".join(sorted(tags[name][w])) for w in words])
        order = np.argsort(keys)
        lexicon[name] = (keys[order], values[order])
    return lexicon


def feature_spec() -> dict[str, Any]:
    """The feature templates, recorded in a state so that a model is never used with different ones."""
    return {"lexical": list(_LEX), "context": [list(c) for c in _CONTEXT],
            "bigrams": [[list(a), list(b)] for a, b in _BIGRAMS]}
