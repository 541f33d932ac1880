"""Lemmatizer: the LEMMA of each word as an edit script from its form, chosen by a dictionary of the
training pairs first and a classifier over scripts otherwise (``engine.text.word_classifier``).

An edit script (as UDPipe's lemma rules, Straka et al. 2016, §4.3, and Chrupała 2008) is
``MODE|CUT|ADD``: ``MODE`` ``L`` lowercases the form first (``K`` keeps it), then ``CUT`` characters are
removed from its end and ``ADD`` appended: "Running" -> "run" is ``L|4|`` ("running" minus "ning"),
"studies" -> "study" ``L|3|y``, "went" -> "go" ``L|4|go``. Scripts generalise across words ("stopping"
and "running" share one), so the classifier, from suffixes, shape and the UPOS/XPOS tags, lemmatises
words never seen in training; seen (form, tags) take the dictionary's lemma. Scripts that would cut the
whole word are excluded per word before the argmax.

Lemma lexicon: the classifier picks a script without seeing the lemma it makes, and for an unseen verb in
"-ing" or "-ed" the scripts that restore an "e" or undo a doubled consonant are close ("violating" ->
"violat" or "violate", "bombed" -> "bomb" or "bom"). The lemmatizer therefore keeps the set of (lowercased
lemma, UPOS) pairs of the training treebank (lemmas of at least ``lexicon_min_length`` characters), and a
word the dictionary does not know takes, among its ``lexicon_candidates`` most probable scripts, the one
maximising ``log p(script) + lexicon_bonus * [its lemma with the word's UPOS is in the lexicon]``: a lemma
the treebank has seen wins when the classifier gives it at least ``exp(-lexicon_bonus)`` of the best
script's probability. A word whose lemma is new (most unseen words keep their form) is left to the
classifier when no candidate is in the lexicon, hence a bounded bonus rather than a hard filter.

Templates, chosen on EWT dev (``docs/results/lemmas-feats.md``): every affix conjoined with the UPOS and
with the XPOS, the lowercased form with the UPOS (frequent forms only, by the classifier's ``min_count``),
shape and case pattern.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from engine.hashing import hash_strings
from engine.text.word_classifier import Tagged, WordClassifier, classifier_from_state, versioned_state

STATE_FORMAT = "lemmatizer"
STATE_VERSION = 2  # 2 adds the lemma lexicon; a version-1 state is read as one without a lexicon
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


def lexicon_keys(lemmas: Sequence[str], upos: Sequence[str]) -> np.ndarray:
    """The lexicon's key of each (lemma, UPOS): the hash of the lowercased lemma and the UPOS."""
    return hash_strings([f"{lemma.lower()}\t{u}" for lemma, u in zip(lemmas, upos, strict=True)])


def build_lexicon(sentences: Sequence[Any], min_length: int) -> np.ndarray:
    """Sorted unique keys of the (lemma, UPOS) pairs of ``sentences`` whose lemma has ``min_length`` characters
    or more (``_`` lemmas left out)."""
    pairs = {(lem, u) for s in sentences for lem, u in zip(s.lemmas, s.upos, strict=True)
             if lem != "_" and len(lem) >= min_length}
    lemmas, upos = [p[0] for p in pairs], [p[1] for p in pairs]
    return np.unique(lexicon_keys(lemmas, upos)) if pairs else np.zeros(0, dtype=np.uint64)


class Lemmatizer:
    """LEMMA from form and tags (a pipeline component: ``train``, ``lemmatize``, ``to_state``/``from_state``).
    ``lexicon`` (sorted uint64, ``lexicon_keys``) and the ``lexicon_*`` settings recorded in ``info`` steer
    the classifier's choice towards seen lemmas (module docstring); an empty lexicon or a zero bonus leaves
    the classifier's argmax."""

    def __init__(self, classifier: WordClassifier, info: dict[str, Any] | None = None,
                 lexicon: np.ndarray | None = None) -> None:
        self.classifier = classifier
        self.info = dict(info or {})
        self.lexicon = np.zeros(0, dtype=np.uint64) if lexicon is None else np.asarray(lexicon, dtype=np.uint64)
        if np.any(self.lexicon[1:] <= self.lexicon[:-1]):
            raise ValueError("the lemma lexicon must be strictly increasing uint64 keys")
        self._bonus = float(self.info.get("lexicon_bonus", 0.0))
        self._candidates = int(self.info.get("lexicon_candidates", 1))
        self._min_length = int(self.info.get("lexicon_min_length", 1))
        self._cuts = np.array([int(classifier.values[c].split("|", 2)[1]) for c in classifier.classes])
        self._adds = np.array([bool(classifier.values[c].split("|", 2)[2]) for c in classifier.classes])

    @classmethod
    def train(cls, sentences: Sequence[Any], *, seed: int = 0, progress: bool = False, lexicon_bonus: float = 0.0,
              lexicon_candidates: int = 1, lexicon_min_length: int = 1, **settings: Any) -> Lemmatizer:
        """Fit on treebank sentences with LEMMA (words whose lemma is ``_`` are skipped); ``lexicon_*``: see the
        module docstring (the defaults leave the lexicon unused), ``settings`` go to ``WordClassifier.train``."""
        targets = [[edit_script(f, lem) if lem != "_" else None for f, lem in zip(s.forms, s.lemmas, strict=True)]
                   for s in sentences]
        clf = WordClassifier.train(sentences, targets, TEMPLATES, seed=seed, progress=progress, desc="lemmatizer",
                                   **settings)
        lexicon = build_lexicon(sentences, lexicon_min_length)
        info = {"scripts": len(clf.values), "classes": len(clf.classes), "lexicon": len(lexicon), **settings,
                "lexicon_bonus": lexicon_bonus, "lexicon_candidates": lexicon_candidates,
                "lexicon_min_length": lexicon_min_length}
        return cls(clf, info, lexicon)

    def _applicable(self, forms: list[str]) -> np.ndarray:
        lengths = np.array([len(f) for f in forms])[:, None]
        return (self._cuts[None, :] < lengths) | ((self._cuts[None, :] == lengths) & self._adds[None, :])

    def lemmatize(self, sentences: Sequence[Tagged]) -> list[list[str]]:
        """The lemma of every word, one list per sentence (the sentences' UPOS/XPOS must be filled)."""
        clf = self.classifier
        known, _, rows, probs = clf.undecided(sentences, self._applicable)
        forms = [f for s in sentences for f in s.forms]
        lemmas = [apply_script(f, clf.values[k]) if k >= 0 else "" for f, k in zip(forms, known.tolist(), strict=True)]
        if self._bonus > 0 and len(self.lexicon):
            upos = [u for s in sentences for u in s.upos]
            for i, p in zip(rows.tolist(), probs, strict=True):
                lemmas[i] = self._lexicon_choice(forms[i], upos[i], p)
        else:
            for i, c in zip(rows.tolist(), clf.classes[probs.argmax(axis=1)].tolist(), strict=True):
                lemmas[i] = apply_script(forms[i], clf.values[c])
        out, at = [], 0
        for s in sentences:
            out.append(lemmas[at:at + len(s.forms)])
            at += len(s.forms)
        return out

    def _lexicon_choice(self, form: str, upos: str, probs: np.ndarray) -> str:
        """The lemma of the best of the ``lexicon_candidates`` most probable scripts, scored by log probability
        plus ``lexicon_bonus`` when the lemma is in the lexicon (module docstring)."""
        top = np.argsort(-probs, kind="stable")[:self._candidates]
        top = top[probs[top] > 0]
        lemmas = [apply_script(form, self.classifier.values[c]) for c in self.classifier.classes[top].tolist()]
        keys = lexicon_keys(lemmas, [upos] * len(lemmas))
        at = np.minimum(np.searchsorted(self.lexicon, keys), len(self.lexicon) - 1)
        seen = (self.lexicon[at] == keys) & (np.array([len(lem) for lem in lemmas]) >= self._min_length)
        return lemmas[int(np.argmax(np.log(probs[top]) + self._bonus * seen))]

    def to_state(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        meta, arrays = versioned_state(self.classifier, STATE_FORMAT, STATE_VERSION, self.info)
        return meta, {**arrays, "lexicon": self.lexicon}

    @classmethod
    def from_state(cls, meta: dict[str, Any], arrays: dict[str, np.ndarray]) -> Lemmatizer:
        """Rebuild from ``to_state`` output (a version-1 state, from before the lexicon, has none)."""
        if meta.get("format") == STATE_FORMAT and meta.get("version") == 1:
            return cls(classifier_from_state(meta, arrays, STATE_FORMAT, 1), meta.get("info"))
        lexicon = arrays.get("lexicon")
        if meta.get("version") == STATE_VERSION and lexicon is None:
            raise ValueError(f"{STATE_FORMAT} v{STATE_VERSION} state without its lexicon array")
        return cls(classifier_from_state(meta, arrays, STATE_FORMAT, STATE_VERSION), meta.get("info"), lexicon)
