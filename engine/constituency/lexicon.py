"""The tag dictionary: which tags a word may take (Epic's ``SimpleLexicon``, ``../shared/design/epic.md`` §0).

A word seen at least ``closed_word_threshold`` (10) times in training keeps only the tags it was seen with; a
rarer word gets its seen tags plus the open-class tags, and an unknown word the open-class tags. A tag is
open-class when it was seen with more than ``open_tag_threshold`` (50) distinct word types, Epic's defaults.
Stored as plain arrays and JSON lists (no pickle): the vocabulary, each word's count, its seen tags in CSR
layout (``indptr``, ``tags``), and the open tags.
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from engine.constituency.rules import RuleCounts

IntArray = npt.NDArray[np.int64]


@dataclass(frozen=True)
class TagDictionary:
    """Allowed tags (grammar label indices) per word; ``words`` sorted, ``seen_tags[indptr[v]:indptr[v + 1]]``
    are word ``v``'s seen tags in index order."""

    words: tuple[str, ...]
    counts: IntArray  # (V,) training occurrences of each word
    indptr: IntArray  # (V + 1,)
    seen_tags: IntArray  # (indptr[-1],)
    open_tags: IntArray  # sorted label indices
    closed_word_threshold: int = 10
    open_tag_threshold: int = 50

    @classmethod
    def from_counts(cls, counts: RuleCounts, closed_word_threshold: int = 10,
                    open_tag_threshold: int = 50) -> TagDictionary:
        """The dictionary of the (tag, word) counts of training trees (``rules.rule_counts``)."""
        by_word = counts.lexical.T.tocsr()  # (V, L)
        by_word.sort_indices()
        types_per_tag = np.diff(counts.lexical.tocsr().indptr)
        return cls(
            words=counts.words,
            counts=np.rint(np.asarray(by_word.sum(axis=1)).ravel()).astype(np.int64),
            indptr=by_word.indptr.astype(np.int64),
            seen_tags=by_word.indices.astype(np.int64),
            open_tags=np.flatnonzero(types_per_tag > open_tag_threshold).astype(np.int64),
            closed_word_threshold=closed_word_threshold,
            open_tag_threshold=open_tag_threshold,
        )

    def word_index(self, word: str) -> int | None:
        """Index of ``word`` in ``words``, or ``None`` when it was not seen in training."""
        v = bisect.bisect_left(self.words, word)
        return v if v < len(self.words) and self.words[v] == word else None

    def allowed(self, word: str) -> IntArray:
        """Sorted label indices of the tags ``word`` may take."""
        v = self.word_index(word)
        if v is None:
            return self.open_tags.copy()
        seen = self.seen_tags[self.indptr[v]:self.indptr[v + 1]]
        if self.counts[v] >= self.closed_word_threshold:
            return seen.copy()
        return np.union1d(seen, self.open_tags)

    def to_json(self) -> dict[str, Any]:
        """Plain lists for a model's JSON manifest (``from_json`` reads them back)."""
        return {
            "words": list(self.words),
            "counts": self.counts.tolist(),
            "indptr": self.indptr.tolist(),
            "seen_tags": self.seen_tags.tolist(),
            "open_tags": self.open_tags.tolist(),
            "closed_word_threshold": self.closed_word_threshold,
            "open_tag_threshold": self.open_tag_threshold,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> TagDictionary:
        words = tuple(str(w) for w in data["words"])
        if list(words) != sorted(words):
            raise ValueError("the tag dictionary's words are not sorted")
        return cls(
            words=words,
            counts=np.array(data["counts"], dtype=np.int64),
            indptr=np.array(data["indptr"], dtype=np.int64),
            seen_tags=np.array(data["seen_tags"], dtype=np.int64),
            open_tags=np.array(data["open_tags"], dtype=np.int64),
            closed_word_threshold=int(data["closed_word_threshold"]),
            open_tag_threshold=int(data["open_tag_threshold"]),
        )
