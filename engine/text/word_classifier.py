"""A per-word classifier with a dictionary first: the shared machinery of the lemmatizer and the
morphological-feature tagger (``engine.text.lemmatizer``, ``engine.text.morph``).

Every word of a sentence gets one *value* (a lemma edit script, a feature bundle) from a table of the
values seen in training:

1. **dictionary** -- a word whose (form, UPOS, XPOS) was seen in training gets the value it had most often
   with them; failing that, the value of its (form, UPOS). Only entries whose most frequent value had at
   least ``dict_share`` of the occurrences are kept (ambiguous words go to the classifier);
2. **classifier** -- otherwise, a multinomial logistic regression (``engine.text.linear.HashedLogLinear``,
   AdaGrad with iterate averaging) over the values seen at least ``min_class_count`` times, from hashed
   feature templates of the word (form, affixes, shape, its tags) and its neighbours; its softmax is
   restricted to the values seen in training with the word's UPOS (any value when the UPOS was never
   seen), so the tags condition the prediction twice: as features and as the support of the distribution.

Templates are ``+``-joined atoms: ``lower``, ``form``, ``upos``, ``xpos``, ``s1``..``s9`` (lowercased
suffixes), ``p1``..``p9`` (prefixes), ``shape`` (``engine.text.shapes``), ``cap`` (case pattern), and
``deprel`` (the universal DEPREL, for a component run after the parser), and ``prev_``/``next_`` + an
atom for the neighbours.

The probability reported for a word is the classifier's (masked) probability of the value chosen, or for a
dictionary word the share of its entry's training occurrences that had the value (its relative frequency).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any, Protocol

import numpy as np

from engine.hashing import hash_string, hash_strings, mix
from engine.text.linear import HashedLogLinear, softmax
from engine.text.shapes import word_shape


class Tagged(Protocol):
    """A sentence with words and tags (``engine.data.conllu_io.Sentence``)."""

    forms: list[str]
    upos: list[str]
    xpos: list[str]
    deprels: list[str]


@cache
def _seed(name: str) -> np.uint64:
    return np.uint64(hash_string(f"word-classifier|{name}"))


def _cap(form: str) -> str:
    return "U" if form.isupper() else "T" if form[:1].isupper() else "l" if form.islower() else "o"


def _atom(name: str, sentences: Sequence[Tagged], forms: list[str], lower: list[str], first: np.ndarray,
          last: np.ndarray) -> np.ndarray:
    """Codes (N,) of one atom over the words of all sentences; ``first``/``last`` mark sentence edges."""
    for side, shift, edge in (("prev_", 1, first), ("next_", -1, last)):
        if name.startswith(side):
            codes = _atom(name[len(side):], sentences, forms, lower, first, last)
            return np.where(edge, _seed("<edge>"), np.roll(codes, shift)) if len(codes) else codes
    if name in ("lower", "form"):
        return hash_strings(lower if name == "lower" else forms)
    if name in ("upos", "xpos"):
        return hash_strings([t for s in sentences for t in getattr(s, name)])
    if name == "deprel":  # the universal relation of the word to its head, once the sentence is parsed
        return hash_strings([r.split(":")[0] for s in sentences for r in s.deprels])
    if name == "shape":
        return hash_strings([word_shape(f) for f in forms])
    if name == "cap":
        return hash_strings([_cap(f) for f in forms])
    if name[0] in "ps" and name[1:].isdigit():
        k = int(name[1:])
        return hash_strings([w[:k] for w in lower] if name[0] == "p" else [w[-k:] for w in lower])
    raise ValueError(f"unknown template atom {name!r}")


def feature_keys(sentences: Sequence[Tagged], templates: Sequence[str]) -> np.ndarray:
    """Hashed keys (N, len(templates)) uint64 of every word of ``sentences`` (concatenated in order)."""
    forms = [f for s in sentences for f in s.forms]
    lower = [f.lower() for f in forms]
    lengths = np.array([len(s.forms) for s in sentences], dtype=np.int64)
    first = np.zeros(len(forms), dtype=bool)
    last = np.zeros(len(forms), dtype=bool)
    ends = np.cumsum(lengths)
    nonempty = lengths > 0
    first[(ends - lengths)[nonempty]] = True
    last[(ends - 1)[nonempty]] = True
    atoms: dict[str, np.ndarray] = {}
    out = np.empty((len(forms), len(templates)), dtype=np.uint64)
    for j, template in enumerate(templates):
        code = np.full(len(forms), _seed(template), dtype=np.uint64)
        for name in template.split("+"):
            if name not in atoms:
                atoms[name] = _atom(name, sentences, forms, lower, first, last)
            code = mix(code, atoms[name])
        out[:, j] = code
    return out


def dictionary_keys(forms: Sequence[str], upos: Sequence[str], xpos: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """The two dictionary keys of each word: (form, UPOS, XPOS) and (form, UPOS)."""
    full = hash_strings([f"{f}\t{u}\t{x}" for f, u, x in zip(forms, upos, xpos, strict=True)])
    short = hash_strings([f"{f}\t{u}" for f, u in zip(forms, upos, strict=True)])
    return full, short


@dataclass
class WordClassifier:
    """Values table, dictionary and masked classifier (see the module docstring).

    ``values`` every value seen in training, most frequent first; ``classes`` (K,) the indices in ``values``
    of the classifier's classes; ``upos_labels`` and ``allowed`` (len(upos_labels), K) bool: which classes
    each UPOS was seen with; ``dict_keys`` sorted uint64, ``dict_values`` int64 indices into ``values`` and
    ``dict_shares`` the fraction of the entry's training occurrences that had that value.
    """

    templates: tuple[str, ...]
    values: list[str]
    classes: np.ndarray
    upos_labels: list[str]
    allowed: np.ndarray
    model: HashedLogLinear
    dict_keys: np.ndarray
    dict_values: np.ndarray
    dict_shares: np.ndarray

    @classmethod
    def train(cls, sentences: Sequence[Tagged], targets: Sequence[Sequence[str | None]], templates: Sequence[str], *,
              min_class_count: int = 2, dict_share: float = 0.0, min_count: int = 2, epochs: int = 4,
              seed: int = 0, progress: bool = False, desc: str = "word classifier") -> WordClassifier:
        """Fit on ``sentences`` whose words have the values ``targets`` (one list per sentence; words
        with the value ``None`` are skipped, e.g. an underscore lemma)."""
        flat = [t for ts in targets for t in ts]
        keep = np.array([t is not None for t in flat], dtype=bool)
        counts = Counter(t for t in flat if t is not None)
        values = [v for v, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))]
        index = {v: i for i, v in enumerate(values)}
        classes = np.array([i for i, v in enumerate(values) if counts[v] >= min_class_count] or [0], dtype=np.int64)
        class_of = {int(v): k for k, v in enumerate(classes)}
        forms = [f for s in sentences for f in s.forms]
        upos = [u for s in sentences for u in s.upos]
        xpos = [x for s in sentences for x in s.xpos]
        upos_labels = sorted(set(upos))
        allowed = np.zeros((len(upos_labels), len(classes)), dtype=bool)
        upos_id = {u: i for i, u in enumerate(upos_labels)}
        labels = np.full(len(flat), -1, dtype=np.int64)
        for w, (t, u) in enumerate(zip(flat, upos, strict=True)):
            if t is not None and index[t] in class_of:
                labels[w] = class_of[index[t]]
                allowed[upos_id[u], labels[w]] = True
        dict_keys, dict_values, dict_shares = _build_dictionary(forms, upos, xpos, flat, index, dict_share)
        feats = feature_keys(sentences, templates)
        train = keep & (labels >= 0)
        model = HashedLogLinear.train(feats[train], labels[train], len(classes), epochs=epochs, min_count=min_count,
                                      seed=seed, progress=progress, desc=desc)
        return cls(tuple(templates), values, classes, upos_labels, allowed, model, dict_keys, dict_values,
                   dict_shares)

    def distribution(self, sentences: Sequence[Tagged], applicable: Callable[[list[str]], np.ndarray] | None = None,
                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The classifier's masked class probabilities (N, K) for every word (concatenated in order), and the
        dictionary's value (-1 where it has none) and share (``lookup``). ``applicable(forms)`` -> (N, K) bool
        restricts the classes further (e.g. edit scripts that fit)."""
        forms = [f for s in sentences for f in s.forms]
        upos = [u for s in sentences for u in s.upos]
        xpos = [x for s in sentences for x in s.xpos]
        known, share = self.lookup(forms, upos, xpos)
        return self._probabilities(sentences, forms, upos, np.arange(len(forms)), applicable), known, share

    def undecided(self, sentences: Sequence[Tagged], applicable: Callable[[list[str]], np.ndarray] | None = None,
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """What ``predict`` needs: the dictionary's value and share of every word (``lookup``), the positions
        ``rows`` of the words it has no entry for, and the classifier's probabilities (len(rows), K) of those
        words alone (the rows of ``distribution`` for them: the classifier is not run on dictionary words)."""
        forms = [f for s in sentences for f in s.forms]
        upos = [u for s in sentences for u in s.upos]
        known, share = self.lookup(forms, upos, [x for s in sentences for x in s.xpos])
        rows = np.flatnonzero(known < 0)
        return known, share, rows, self._probabilities(sentences, forms, upos, rows, applicable)

    def _probabilities(self, sentences: Sequence[Tagged], forms: list[str], upos: list[str], rows: np.ndarray,
                       applicable: Callable[[list[str]], np.ndarray] | None) -> np.ndarray:
        """Masked class probabilities (len(rows), K) of the words at ``rows`` (features read their neighbours)."""
        if not len(rows):
            return np.zeros((0, len(self.classes)))
        scores = self.model.scores(feature_keys(sentences, self.templates)[rows])
        upos_id = {u: i for i, u in enumerate(self.upos_labels)}
        ids = np.array([upos_id.get(upos[i], -1) for i in rows.tolist()], dtype=np.int64)
        mask = np.where((ids >= 0)[:, None], self.allowed[np.maximum(ids, 0)], True)
        if applicable is not None:
            mask &= applicable([forms[i] for i in rows.tolist()])
        mask[~mask.any(axis=1)] = True  # nothing allowed: fall back to the unrestricted distribution
        return softmax(np.where(mask, scores, -np.inf))

    def predict(self, sentences: Sequence[Tagged],
                applicable: Callable[[list[str]], np.ndarray] | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Value index (into ``values``) and its probability for every word (concatenated in order): the
        dictionary's, else the classifier's most probable (``undecided``)."""
        known, share, rows, probs = self.undecided(sentences, applicable)
        chosen, prob = known.copy(), share.copy()
        chosen[rows] = self.classes[probs.argmax(axis=1)]
        prob[rows] = probs.max(axis=1)
        return chosen, prob

    def lookup(self, forms: Sequence[str], upos: Sequence[str],
               xpos: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """Dictionary value of each word (index into ``values``, -1 where the dictionary has none) and its share."""
        out = np.full(len(forms), -1, dtype=np.int64)
        share = np.zeros(len(forms))
        if len(self.dict_keys) == 0:
            return out, share
        for keys in dictionary_keys(forms, upos, xpos):
            at = np.minimum(np.searchsorted(self.dict_keys, keys), len(self.dict_keys) - 1)
            hit = (self.dict_keys[at] == keys) & (out < 0)
            out[hit] = self.dict_values[at[hit]]
            share[hit] = self.dict_shares[at[hit]]
        return out, share

    # -- persistence ----------------------------------------------------------------------------------------
    def to_state(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        meta: dict[str, Any] = {"templates": list(self.templates), "values": list(self.values),
                                "upos_labels": list(self.upos_labels)}
        arrays: dict[str, np.ndarray] = {
            "classes": self.classes.astype(np.int64), "allowed": self.allowed.astype(np.uint8),
            "dict_keys": self.dict_keys.astype(np.uint64), "dict_values": self.dict_values.astype(np.int32),
            "dict_shares": self.dict_shares.astype(np.float16),
            **self.model.to_arrays("model")}
        return meta, arrays

    @classmethod
    def from_state(cls, meta: dict[str, Any], arrays: dict[str, np.ndarray]) -> WordClassifier:
        """Rebuild from ``to_state`` output; ``ValueError`` naming what is malformed."""
        values = [str(v) for v in meta["values"]]
        upos_labels = [str(u) for u in meta["upos_labels"]]
        classes = np.asarray(arrays["classes"])
        if classes.ndim != 1 or not len(classes) or classes.min() < 0 or classes.max() >= len(values):
            raise ValueError("classes must index the values table")
        allowed = np.asarray(arrays["allowed"])
        if allowed.shape != (len(upos_labels), len(classes)):
            raise ValueError(f"allowed must have shape ({len(upos_labels)}, {len(classes)}), got {allowed.shape}")
        keys, dvalues = np.asarray(arrays["dict_keys"]), np.asarray(arrays["dict_values"])
        shares = np.asarray(arrays["dict_shares"], dtype=np.float64)
        if keys.dtype != np.uint64 or keys.shape != dvalues.shape or np.any(keys[1:] <= keys[:-1]):
            raise ValueError("dict_keys must be strictly increasing uint64 with one dict_value each")
        if shares.shape != keys.shape or not np.all((shares > 0) & (shares <= 1)):
            raise ValueError("dict_shares must be one share in (0, 1] per dictionary key")
        if len(dvalues) and (dvalues.min() < 0 or dvalues.max() >= len(values)):
            raise ValueError("dict_values must index the values table")
        model = HashedLogLinear.from_arrays(arrays, "model", len(classes))
        return cls(tuple(str(t) for t in meta["templates"]), values, classes.astype(np.int64), upos_labels,
                   allowed.astype(bool), model, keys, dvalues.astype(np.int64), shares)


def _build_dictionary(forms: list[str], upos: list[str], xpos: list[str], targets: list[str | None],
                      index: dict[str, int], share: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Sorted keys and value indices of the (form, UPOS, XPOS) and (form, UPOS) entries whose most
    frequent value has at least ``share`` of the occurrences (ties: the more frequent value overall)."""
    seen: dict[int, Counter[int]] = defaultdict(Counter)
    full, short = dictionary_keys(forms, upos, xpos)
    for a, b, t in zip(full.tolist(), short.tolist(), targets, strict=True):
        if t is not None:
            seen[a][index[t]] += 1
            seen[b][index[t]] += 1
    entries = {}
    for key, counter in seen.items():
        value, n = min(counter.items(), key=lambda kv: (-kv[1], kv[0]))
        total = sum(counter.values())
        if n >= share * total:
            entries[key] = (value, n / total)
    keys = np.array(sorted(entries), dtype=np.uint64)
    return (keys, np.array([entries[int(k)][0] for k in keys], dtype=np.int64),
            np.array([entries[int(k)][1] for k in keys], dtype=np.float64))


def versioned_state(classifier: WordClassifier, fmt: str, version: int,
                    info: dict[str, Any] | None) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """A component's state: its classifier's, tagged with the component's format, version and training record."""
    meta, arrays = classifier.to_state()
    return {"format": fmt, "version": version, "info": info, **meta}, arrays


def classifier_from_state(meta: dict[str, Any], arrays: dict[str, np.ndarray], fmt: str,
                          version: int) -> WordClassifier:
    """The classifier of a component's state written by ``versioned_state``; ``ValueError`` if the state is of
    another format or version."""
    if meta.get("format") != fmt or meta.get("version") != version:
        raise ValueError(f"not a {fmt} v{version} state: {meta.get('format')!r} v{meta.get('version')!r}")
    return WordClassifier.from_state(meta, arrays)
