"""Lexical features of a tag item for the discriminative latent factors (Hall & Klein 2012, §6: "lexical features
... of the word, its suffixes and shape"; ``../shared/design/epic.md`` §2 "Minimal model").

A word ``w_i`` fires a few string features, each later crossed with every tag ``t`` and substate ``x``
(``latent``): ``theta . phi(t[x], w_i)`` is the factor's log weight ``log_e[i, t, x]``.

- ``b``: a bias, so each ``t[x]`` has a weight of its own;
- ``w=<word>`` when the word was seen at least ``word_threshold`` times in training, else ``s=<signature>``
  (``xbar.signature``: capitalisation, digits, dash, a common suffix);
- ``x1=``, ``x2=``, ``x3=``: the word's last one to three lower-cased characters (words longer than that);
- ``h=<shape>``: the word's characters mapped to ``X``/``x``/``d``/themselves, runs collapsed (``Xx-d``);
- ``f=cap``, ``f=num``, ``f=dash``: a capital letter, a digit, a hyphen.

The vocabulary is the features the training words fire (sorted names: the column of a feature is its rank); an
unseen feature at parse time is left out. A sentence's features are a sparse ``(n, F)`` 0/1 matrix, so that
``log_e = X @ theta`` and the gradient ``X^T @ counts`` are two sparse products (vectorised).
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
from scipy import sparse

from engine.constituency.lexicon import TagDictionary
from engine.constituency.xbar import signature

__all__ = ["LexicalFeatures", "word_features"]

_RUNS = re.compile(r"(.)\1+")


def _shape(word: str) -> str:
    mapped = "".join("X" if c.isupper() else "x" if c.isalpha() else "d" if c.isdigit() else c for c in word)
    return _RUNS.sub(r"\1", mapped)


def word_features(word: str, frequent: bool) -> list[str]:
    """The feature names ``word`` fires (module docstring); ``frequent``: seen ``word_threshold`` times."""
    lower = word.lower()
    out = ["b", f"w={word}" if frequent else f"s={signature(word)}", f"h={_shape(word)}"]
    out += [f"x{k}={lower[-k:]}" for k in (1, 2, 3) if len(lower) > k]
    if any(c.isupper() for c in word):
        out.append("f=cap")
    if any(c.isdigit() for c in word):
        out.append("f=num")
    if "-" in word:
        out.append("f=dash")
    return out


@dataclass(frozen=True)
class LexicalFeatures:
    """The feature vocabulary (``names``, sorted) and the word-count threshold of ``w=`` features, with the tag
    dictionary's training counts (``tags``) deciding which words are frequent."""

    names: tuple[str, ...]
    tags: TagDictionary
    word_threshold: int = 5

    @classmethod
    def from_words(cls, words: Iterable[str], tags: TagDictionary, word_threshold: int = 5) -> LexicalFeatures:
        """The vocabulary of the features that ``words`` (the training tokens) fire."""
        if word_threshold < 1:
            raise ValueError(f"word_threshold must be >= 1, got {word_threshold}")
        probe = cls((), tags, word_threshold)
        names = {name for word in set(words) for name in probe.fired(word)}
        return cls(tuple(sorted(names)), tags, word_threshold)

    @property
    def size(self) -> int:
        return len(self.names)

    def fired(self, word: str) -> list[str]:
        v = self.tags.word_index(word)
        return word_features(word, v is not None and int(self.tags.counts[v]) >= self.word_threshold)

    def column(self, name: str) -> int | None:
        f = bisect.bisect_left(self.names, name)
        return f if f < len(self.names) and self.names[f] == name else None

    def matrix(self, words: Sequence[str]) -> sparse.csr_array:
        """The ``(n, F)`` 0/1 feature matrix of a sentence (features outside the vocabulary dropped)."""
        rows: list[int] = []
        cols: list[int] = []
        for i, word in enumerate(words):
            for name in self.fired(word):
                f = self.column(name)
                if f is not None:
                    rows.append(i)
                    cols.append(f)
        data = np.ones(len(rows))
        return sparse.csr_array((data, (np.array(rows, dtype=np.int64), np.array(cols, dtype=np.int64))),
                                shape=(len(words), self.size))
