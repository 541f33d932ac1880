"""Lemmatizer: the LEMMA of each word as an edit script from its form, chosen by a dictionary of the
training pairs first and a classifier over scripts otherwise (``engine.text.word_classifier``).

An edit script (as UDPipe's lemma rules, Straka et al. 2016, §4.3, and Chrupała 2008) is
``MODE|CUT|ADD``: ``MODE`` ``L`` lowercases the form first (``K`` keeps it), then ``CUT`` characters are
removed from its end and ``ADD`` appended: "Running" -> "run" is ``L|4|`` ("running" minus "ning"),
"studies" -> "study" ``L|3|y``, "went" -> "go" ``L|4|go``. Scripts generalise across words ("stopping"
and "running" share one), so the classifier, from suffixes, shape and the UPOS/XPOS tags, lemmatises
words never seen in training; seen (form, tags) take the dictionary's lemma. Scripts that would cut the
whole word are excluded per word before the argmax.

Templates, chosen on EWT dev (``docs/results/lemmas-feats.md``): every affix conjoined with the UPOS and
with the XPOS, the lowercased form with the UPOS (frequent forms only, by the classifier's ``min_count``),
shape and case pattern.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from engine.text.word_classifier import Tagged, WordClassifier, classifier_from_state, versioned_state

STATE_FORMAT = "lemmatizer"
STATE_VERSION = 1
TEMPLATES = ("upos", "xpos", "lower+upos", "shape+upos", "cap+upos",
             "s1+upos", "s2+upos", "s3+upos", "s4+upos", "s5+upos",
             "s1+xpos", "s2+xpos", "s3+xpos", "s4+xpos", "p2+upos")


def edit_script(form: str, lemma: str) -> str:
    """The script turning ``form`` into ``lemma`` (see the module docstring)."""
    mode = "L" if lemma == lemma.lower() and form != form.lower() else "K"
    base = form.lower() if mode == "L" else form
    p = 0
    while p < min(len(base), len(lemma)) and base[p] == lemma[p]:
        p += 1
    return f"{mode}|{len(base) - p}|{lemma[p:]}"


def apply_script(form: str, script: str) -> str:
    """``script`` applied to ``form``; the form itself when the script does not fit it."""
    mode, cut, add = script.split("|", 2)
    base = form.lower() if mode == "L" else form
    n = int(cut)
    if n > len(base) or (n == len(base) and not add):
        return form
    return base[:len(base) - n] + add


class Lemmatizer:
    """LEMMA from form and tags (a pipeline component: ``train``, ``lemmatize``, ``to_state``/``from_state``)."""

    def __init__(self, classifier: WordClassifier, info: dict[str, Any] | None = None) -> None:
        self.classifier = classifier
        self.info = dict(info or {})
        self._cuts = np.array([int(classifier.values[c].split("|", 2)[1]) for c in classifier.classes])
        self._adds = np.array([bool(classifier.values[c].split("|", 2)[2]) for c in classifier.classes])

    @classmethod
    def train(cls, sentences: Sequence[Any], *, seed: int = 0, progress: bool = False,
              **settings: Any) -> Lemmatizer:
        """Fit on treebank sentences with LEMMA (words whose lemma is ``_`` are skipped)."""
        targets = [[edit_script(f, lem) if lem != "_" else None for f, lem in zip(s.forms, s.lemmas, strict=True)]
                   for s in sentences]
        clf = WordClassifier.train(sentences, targets, TEMPLATES, seed=seed, progress=progress, desc="lemmatizer",
                                   **settings)
        return cls(clf, {"scripts": len(clf.values), "classes": len(clf.classes), **settings})

    def _applicable(self, forms: list[str]) -> np.ndarray:
        lengths = np.array([len(f) for f in forms])[:, None]
        return (self._cuts[None, :] < lengths) | ((self._cuts[None, :] == lengths) & self._adds[None, :])

    def lemmatize(self, sentences: Sequence[Tagged]) -> list[list[str]]:
        """The lemma of every word, one list per sentence (the sentences' UPOS/XPOS must be filled)."""
        chosen, _ = self.classifier.predict(sentences, self._applicable)
        scripts = [self.classifier.values[i] for i in chosen.tolist()]
        out, at = [], 0
        for s in sentences:
            out.append([apply_script(f, scripts[at + k]) for k, f in enumerate(s.forms)])
            at += len(s.forms)
        return out

    def to_state(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        return versioned_state(self.classifier, STATE_FORMAT, STATE_VERSION, self.info)

    @classmethod
    def from_state(cls, meta: dict[str, Any], arrays: dict[str, np.ndarray]) -> Lemmatizer:
        return cls(classifier_from_state(meta, arrays, STATE_FORMAT, STATE_VERSION), meta.get("info"))
