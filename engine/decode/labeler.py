"""A count-based dependency labeller: DEPREL for each chosen arc, with its probability.

``p(label | head UPOS, dependent UPOS, direction)`` by relative frequency in the training trees,
backed off to ``p(label | dependent UPOS, direction)`` and to ``p(label)`` with Witten-Bell style
interpolation (weight of the specific context ``c / (c + types)``). A baseline that makes LAS
measurable for first-order models; a feature-rich labeller replaces it in the labels issue.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np


def _contexts(upos: Sequence[str], heads: np.ndarray) -> list[tuple[str, str]]:
    tags = ["<ROOT>", *upos]
    out = []
    for m in range(1, len(tags)):
        h = int(heads[m])
        direction = "R" if h < m else "L"
        out.append((f"{tags[h]}|{tags[m]}|{direction}", f"{tags[m]}|{direction}"))
    return out


@dataclass
class CountLabeler:
    """Label distributions per context, as plain lists (JSON-serialisable)."""

    labels: list[str] = field(default_factory=list)
    full: dict[str, list[int]] = field(default_factory=dict)
    backoff: dict[str, list[int]] = field(default_factory=dict)
    prior: list[int] = field(default_factory=list)
    # the distribution of each context seen so far (a function of the counts alone; reset by _smoothed when
    # the counts are not the ones it was computed from)
    _cache: dict[tuple[str, str], np.ndarray] = field(default_factory=dict, repr=False, compare=False)
    _cache_key: tuple[int, int, int, int] = field(default=(0, 0, 0, 0), repr=False, compare=False)

    @classmethod
    def fit(cls, sentences: Iterable[Any]) -> CountLabeler:
        """Count labels in trees; ``sentences`` have ``upos``, ``heads`` and ``deprels``."""
        full: dict[str, Counter[str]] = defaultdict(Counter)
        back: dict[str, Counter[str]] = defaultdict(Counter)
        prior: Counter[str] = Counter()
        for s in sentences:
            if s.heads is None:
                continue
            for (c_full, c_back), label in zip(_contexts(s.upos, s.heads), s.deprels, strict=True):
                full[c_full][label] += 1
                back[c_back][label] += 1
                prior[label] += 1
        labels = sorted(prior)

        def dense(c: Counter[str]) -> list[int]:
            return [c.get(lab, 0) for lab in labels]

        return cls(labels, {k: dense(v) for k, v in full.items()},
                   {k: dense(v) for k, v in back.items()}, dense(prior))

    def distribution(self, upos: Sequence[str], heads: np.ndarray) -> np.ndarray:
        """``p[m-1, l]``: probability of label ``labels[l]`` for word m's arc; rows sum to 1."""
        k = len(self.labels)
        contexts = _contexts(upos, heads)
        if not contexts:
            return np.zeros((0, k))
        return np.array([self._smoothed(c) for c in contexts]).reshape(len(contexts), k)

    def _smoothed(self, context: tuple[str, str]) -> np.ndarray:
        """The interpolated distribution of one (full, backoff) context, computed once per context."""
        key = (id(self.full), id(self.backoff), id(self.prior), len(self.labels))
        if key != self._cache_key:
            self._cache.clear()
            self._cache_key = key
        p = self._cache.get(context)
        if p is None:
            k = len(self.labels)
            prior = np.asarray(self.prior, dtype=np.float64) + 0.5
            prior /= prior.sum()
            p = prior
            c_full, c_back = context
            for table, name in ((self.backoff, c_back), (self.full, c_full)):
                counts = np.asarray(table.get(name, np.zeros(k)), dtype=np.float64)
                total, types = counts.sum(), (counts > 0).sum()
                if total > 0:
                    lam = total / (total + types)
                    p = lam * counts / total + (1 - lam) * p
            p.flags.writeable = False
            self._cache[context] = p
        return p

    def predict(self, upos: Sequence[str], heads: np.ndarray) -> tuple[list[str], np.ndarray]:
        """Most probable label of each word's arc and its probability."""
        if not self.labels:
            return ["dep"] * (len(heads) - 1), np.ones(len(heads) - 1)
        p = self.distribution(upos, heads)
        best = p.argmax(axis=1)
        return [self.labels[i] for i in best], p[np.arange(len(best)), best]

    def to_json(self) -> dict[str, Any]:
        return {"labels": self.labels, "full": self.full, "backoff": self.backoff, "prior": self.prior}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> CountLabeler:
        return cls(list(data["labels"]), dict(data["full"]), dict(data["backoff"]), list(data["prior"]))


def label_distributions(labeler: Any, sentences: Sequence[Any],
                        heads: Sequence[np.ndarray]) -> list[np.ndarray]:
    """For each sentence, ``p[m-1, l]``: the probability of ``labeler.labels[l]`` for the arc of word m in its
    tree ``heads``; rows sum to 1 (one vectorised pass for a log-linear labeller)."""
    if isinstance(labeler, CountLabeler):
        return [labeler.distribution(s.upos, h) for s, h in zip(sentences, heads, strict=True)]
    return list(labeler.distributions(sentences, heads))


def label_arcs(labeler: Any, sentence: Any, heads: np.ndarray) -> tuple[list[str], np.ndarray]:
    """The label and its probability for each arc of ``heads``: a ``CountLabeler`` reads the sentence's
    UPOS only; a log-linear labeller (``engine.decode.loglinear_labeler``) reads the whole sentence."""
    if isinstance(labeler, CountLabeler):
        return labeler.predict(sentence.upos, heads)
    labels, probs = labeler.predict(sentence, heads)
    return list(labels), np.asarray(probs, dtype=float)


def label_many(labeler: Any, sentences: Sequence[Any],
               heads: Sequence[np.ndarray]) -> list[tuple[list[str], np.ndarray]]:
    """``label_arcs`` of many sentences: a log-linear labeller in one vectorised pass (``predict_batch``: each
    row's scores and softmax are computed as for the sentence alone, so the labels and probabilities are the
    same), a count labeller sentence by sentence."""
    if isinstance(labeler, CountLabeler) or not hasattr(labeler, "predict_batch"):
        return [label_arcs(labeler, s, h) for s, h in zip(sentences, heads, strict=True)]
    return [(list(labels), np.asarray(probs, dtype=float))
            for labels, probs in labeler.predict_batch(sentences, heads)]
