"""Morphological features: the FEATS of each word as one whole bundle ("Number=Plur|Person=3"), chosen by a
dictionary of the training (form, tags) first and a classifier over the bundles otherwise
(``engine.text.word_classifier``), with the probability of the bundle chosen.

Why whole bundles and not one classifier per feature: a bundle is consistent by construction (no
``VerbForm=Inf`` with ``Tense=Past``), and in English (EWT: 230 distinct bundles, 321 (UPOS, bundle)
pairs) the bundles a UPOS allows are few; the classifier's distribution is restricted to the bundles seen
with the word's predicted UPOS, and the XPOS, nearly a bundle in itself for English, is a feature.
Features stay a per-word classifier after the tagger rather than joining the tags in BP: the tagger's
best tags are the conditioning, as UDPipe 1 does it (Straka et al. 2016).

Templates, chosen on EWT dev (``docs/results/lemmas-feats.md``): the tags, the lowercased form, suffixes
(with UPOS and XPOS) and the neighbours' forms and tags, which decide e.g. ``Case`` of "you"/"it" and
``Mood=Imp`` against ``VerbForm=Inf``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from engine.text.word_classifier import Tagged, WordClassifier, classifier_from_state, versioned_state

STATE_FORMAT = "morph-features"
STATE_VERSION = 1
TEMPLATES = ("upos", "xpos", "upos+xpos", "lower+upos", "lower+xpos", "s1+xpos", "s2+xpos", "s3+xpos",
             "s2+upos", "s3+upos", "shape+upos", "prev_upos+xpos", "next_upos+xpos", "prev_xpos+xpos",
             "next_xpos+xpos", "prev_lower+xpos", "next_lower+xpos", "lower+prev_upos", "lower+next_upos",
             "prev_upos+next_upos+xpos", "deprel+xpos", "lower+deprel", "deprel+prev_lower+xpos")


class MorphTagger:
    """FEATS from form, tags and context (a pipeline component: ``train``, ``analyse``, ``to_state``/``from_state``)."""

    def __init__(self, classifier: WordClassifier, info: dict[str, Any] | None = None) -> None:
        self.classifier = classifier
        self.info = dict(info or {})

    @classmethod
    def train(cls, sentences: Sequence[Any], *, seed: int = 0, progress: bool = False,
              **settings: Any) -> MorphTagger:
        """Fit on treebank sentences with FEATS."""
        targets = [list(s.feats) for s in sentences]
        clf = WordClassifier.train(sentences, targets, TEMPLATES, seed=seed, progress=progress, desc="morph",
                                   **settings)
        return cls(clf, {"bundles": len(clf.values), "classes": len(clf.classes), **settings})

    def analyse(self, sentences: Sequence[Tagged]) -> list[tuple[list[str], list[float]]]:
        """(FEATS bundle, its probability) of every word, one pair of lists per sentence."""
        chosen, prob = self.classifier.predict(sentences)
        bundles = [self.classifier.values[i] for i in chosen.tolist()]
        out, at = [], 0
        for s in sentences:
            n = len(s.forms)
            out.append((bundles[at:at + n], prob[at:at + n].tolist()))
            at += n
        return out

    def to_state(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        return versioned_state(self.classifier, STATE_FORMAT, STATE_VERSION, self.info)

    @classmethod
    def from_state(cls, meta: dict[str, Any], arrays: dict[str, np.ndarray]) -> MorphTagger:
        return cls(classifier_from_state(meta, arrays, STATE_FORMAT, STATE_VERSION), meta.get("info"))
