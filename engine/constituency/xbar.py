"""The generative X-bar PCFG: relative frequencies of the binarised training trees (``../shared/design/epic.md``
§2 "Coarse pruning", §4 "Measured baseline"; Hall & Klein 2012 §5.5 prune with a generative baseline).

Rules (``rules.rule_counts``): ``p(A -> B C | bot A) = c(A -> B C) / c(bot A)`` and ``p(u | top A) = c(u) /
c(top A)`` for the collapsed unary rules ``u = A(top) -> B(bot)`` (identities included), so every bot label's
binary rules and every top label's unary rules sum to 1 (tags' bot mass is their lexical counts).

Lexicon: ``p(w | t)`` by Bayes from ``p(t | w)``, with a simple unknown-word model. A word's **signature**
(:func:`signature`) is its capitalisation, digits, a dash and one common suffix (``UNK-INITC-s``). The tag
distribution of a signature is estimated from the training words seen fewer than ``rare_count`` times (the
hapaxes, by default: how a new word behaves), smoothed towards the tag distribution of all those rare words::

    p(t | sig) = (c_rare(t, sig) + prior * p_rare(t)) / (c_rare(sig) + prior)
    p(t | w)   = (c(t, w) + weight * p(t | sig(w))) / (c(w) + weight)      (c(w) = 0 for an unknown word)
    score(t, w) = log p(t | w) - log p(t)  =  log p(w | t) - log p(w)

``log p(w)`` is the same for every tag of a word, so it is left out: posteriors, pruning and decoding do not
depend on it (``log Z`` is ``log p(words)`` minus ``sum_i log p(w_i)``). The tag dictionary
(``lexicon.TagDictionary``, Epic's ``SimpleLexicon``) restricts the tags a word may take. Settings and their
bounds are declared once, in :class:`XbarSettings`, and stored in the model's manifest.

The model becomes a one-substate :class:`~engine.constituency.factor.Factor` per sentence (:meth:`XbarPCFG.factor`)
so that ``inside_outside`` and the dense pass (``dense``) run it; it is saved as plain arrays plus JSON.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
from nltk import Tree  # type: ignore[import-untyped]

from engine.constituency.anchored import FloatArray
from engine.constituency.binarize import binarize, to_anchored
from engine.constituency.factor import Factor, make_factor, substates
from engine.constituency.grammar import Grammar
from engine.constituency.lexicon import TagDictionary
from engine.constituency.rules import grammar_from_json, grammar_from_trees, grammar_to_json, rule_counts

__all__ = ["SUFFIXES", "XbarPCFG", "XbarSettings", "chain_choice", "signature", "train_xbar"]

SUFFIXES = ("ing", "ion", "ed", "ly", "er", "est", "ity", "al", "ive", "ous", "ic", "s", "y")


def signature(word: str) -> str:
    """The unknown-word class of ``word``: ``UNK`` + capitalisation (``-CAPS`` all upper case, ``-INITC`` first
    letter upper case, ``-MIXC`` another upper case letter, ``-LC`` lower case only), ``-NUM`` (a digit),
    ``-DASH`` (a hyphen), ``-`` + the first of ``SUFFIXES`` the lower-cased word ends with (words of at least
    ``len(suffix) + 3`` characters)."""
    parts = ["UNK"]
    letters = [c for c in word if c.isalpha()]
    if letters and all(c.isupper() for c in letters):
        parts.append("-CAPS")
    elif word[:1].isupper():
        parts.append("-INITC")
    elif any(c.isupper() for c in letters):
        parts.append("-MIXC")
    elif letters:
        parts.append("-LC")
    if any(c.isdigit() for c in word):
        parts.append("-NUM")
    if "-" in word:
        parts.append("-DASH")
    lower = word.lower()
    for suffix in SUFFIXES:
        if lower.endswith(suffix) and len(word) >= len(suffix) + 3:
            parts.append("-" + suffix)
            break
    return "".join(parts)


@dataclass(frozen=True)
class XbarSettings:
    """The X-bar PCFG's settings and their bounds, declared once here (module docstring).

    ``rare_count`` (>= 1): training words seen fewer times feed the signatures' tag distributions (2: hapaxes);
    ``signature_weight`` (> 0): pseudo-count of ``p(t | sig(w))`` in ``p(t | w)``; ``signature_prior`` (> 0):
    pseudo-count of the rare words' tag distribution in ``p(t | sig)``."""

    rare_count: int = 2
    signature_weight: float = 1.0
    signature_prior: float = 1.0

    def __post_init__(self) -> None:
        if self.rare_count < 1:
            raise ValueError(f"rare_count must be >= 1, got {self.rare_count}")
        if not (self.signature_weight > 0 and self.signature_prior > 0):
            raise ValueError("signature_weight and signature_prior must be > 0")


@dataclass(frozen=True)
class XbarPCFG:
    """A trained X-bar PCFG. ``log_binary (R,)``, ``log_unary (U,)``: log rule probabilities;
    ``word_tag_counts`` aligned with ``tags.seen_tags`` (each word's seen tags' counts); ``signatures`` sorted,
    ``sig_log_probs (S, L)`` = ``log p(t | sig)``; ``rare_log_prob (L,)`` = ``log p_rare(t)`` (unseen
    signatures); ``tag_log_prob (L,)`` = ``log p(t)``."""

    grammar: Grammar
    tags: TagDictionary
    settings: XbarSettings
    log_binary: FloatArray
    log_unary: FloatArray
    word_tag_counts: FloatArray
    signatures: tuple[str, ...]
    sig_log_probs: FloatArray
    rare_log_prob: FloatArray
    tag_log_prob: FloatArray

    def _sig_probs(self, word: str) -> FloatArray:
        sig = signature(word)
        s = int(np.searchsorted(self.signatures, sig)) if self.signatures else 0
        known = s < len(self.signatures) and self.signatures[s] == sig
        return np.exp(self.sig_log_probs[s] if known else self.rare_log_prob)

    def emissions(self, words: Sequence[str]) -> FloatArray:
        """``(n, L)`` tag scores ``log p(t | w) - log p(t)`` of each word (module docstring), ``-inf`` for labels
        that are not tags or that the tag dictionary does not allow for the word."""
        out = np.full((len(words), self.grammar.n_labels), -np.inf)
        weight = self.settings.signature_weight
        for i, word in enumerate(words):
            p = weight * self._sig_probs(word)
            total = weight
            v = self.tags.word_index(word)
            if v is not None:
                lo, hi = self.tags.indptr[v], self.tags.indptr[v + 1]
                p[self.tags.seen_tags[lo:hi]] += self.word_tag_counts[lo:hi]
                total += float(self.word_tag_counts[lo:hi].sum())
            allowed = self.tags.allowed(word)
            with np.errstate(divide="ignore"):
                out[i, allowed] = np.log(p[allowed] / total) - self.tag_log_prob[allowed]
        return out

    def factor(self, words: Sequence[str]) -> Factor:
        """The one-substate factor of a sentence (log weights: rule log probabilities, tag scores)."""
        g = self.grammar
        return make_factor(g, self.log_binary.reshape(-1, 1, 1, 1), self.log_unary.reshape(-1, 1, 1),
                           self.emissions(words)[:, :, None], substates(g, 1))

    def manifest(self) -> dict[str, Any]:
        """The JSON part of the model: grammar, tag dictionary, settings, signatures."""
        return {"grammar": grammar_to_json(self.grammar), "tag_dictionary": self.tags.to_json(),
                "xbar": asdict(self.settings), "signatures": list(self.signatures)}

    def arrays(self) -> dict[str, np.ndarray]:
        """The array part of the model (``model.store.save_model``)."""
        return {"log_binary": self.log_binary, "log_unary": self.log_unary, "word_tag_counts": self.word_tag_counts,
                "sig_log_probs": self.sig_log_probs, "rare_log_prob": self.rare_log_prob,
                "tag_log_prob": self.tag_log_prob}

    @classmethod
    def load(cls, manifest: Mapping[str, Any], arrays: Mapping[str, np.ndarray]) -> XbarPCFG:
        """The model of :meth:`manifest` and :meth:`arrays`."""
        return cls(grammar=grammar_from_json(manifest["grammar"]),
                   tags=TagDictionary.from_json(manifest["tag_dictionary"]),
                   settings=XbarSettings(**manifest["xbar"]),
                   signatures=tuple(str(s) for s in manifest["signatures"]),
                   **{name: np.asarray(arrays[name], dtype=np.float64) for name in
                      ("log_binary", "log_unary", "word_tag_counts", "sig_log_probs", "rare_log_prob",
                       "tag_log_prob")})


def _log(x: FloatArray) -> FloatArray:
    with np.errstate(divide="ignore"):
        return np.log(x)


def _signature_table(tags: TagDictionary, counts: FloatArray, settings: XbarSettings,
                     n_labels: int) -> tuple[tuple[str, ...], FloatArray, FloatArray]:
    """Signatures of the rare training words, ``log p(t | sig)`` and ``log p_rare(t)`` (module docstring)."""
    rare = np.flatnonzero(tags.counts < settings.rare_count)
    by_sig: dict[str, FloatArray] = {}
    for v in rare.tolist():
        row = by_sig.setdefault(signature(tags.words[v]), np.zeros(n_labels))
        lo, hi = tags.indptr[v], tags.indptr[v + 1]
        row[tags.seen_tags[lo:hi]] += counts[lo:hi]
    names = tuple(sorted(by_sig))
    table = np.array([by_sig[s] for s in names]).reshape(len(names), n_labels)
    rare_tags = table.sum(axis=0)
    if rare_tags.sum() == 0:
        raise ValueError(f"no training word is seen fewer than {settings.rare_count} times: no unknown-word model")
    p_rare = rare_tags / rare_tags.sum()
    prior = settings.signature_prior
    probs = (table + prior * p_rare) / (table.sum(axis=1, keepdims=True) + prior)
    return names, _log(probs), _log(p_rare)


def train_xbar(trees: Sequence[Tree], settings: XbarSettings | None = None,
               dictionary: Mapping[str, int] | None = None) -> XbarPCFG:
    """The X-bar PCFG of cleaned training trees (``treebank.read_trees``): binarised, grammar read off them,
    relative frequencies (module docstring). ``dictionary``: thresholds given to ``TagDictionary.from_counts``
    (its defaults otherwise; tiny test treebanks need a lower ``open_tag_threshold``)."""
    settings = settings or XbarSettings()
    binarised = [binarize(t) for t in trees]
    grammar = grammar_from_trees(binarised)
    counts = rule_counts([to_anchored(t, grammar) for t in binarised], grammar)
    tags = TagDictionary.from_counts(counts, **(dictionary or {}))
    by_word = counts.lexical.T.tocsr()
    by_word.sort_indices()
    word_tag_counts = np.asarray(by_word.data, dtype=np.float64)
    a, u = grammar.binary[:, 0], grammar.unary[:, 0]
    log_binary = _log(counts.binary / counts.bot_counts(grammar)[a])
    log_unary = _log(counts.unary / counts.top_counts(grammar)[u])
    names, sig_log_probs, rare_log_prob = _signature_table(tags, word_tag_counts, settings, grammar.n_labels)
    tag_counts = np.asarray(counts.lexical.sum(axis=1), dtype=np.float64).ravel()
    return XbarPCFG(grammar=grammar, tags=tags, settings=settings, log_binary=log_binary, log_unary=log_unary,
                    word_tag_counts=word_tag_counts, signatures=names, sig_log_probs=sig_log_probs,
                    rare_log_prob=rare_log_prob, tag_log_prob=_log(tag_counts / tag_counts.sum()))


def chain_choice(grammar: Grammar, log_unary: FloatArray) -> dict[tuple[int, int], tuple[str, ...]]:
    """``(top, bot) -> chain`` of the most probable unary rule of each label pair: how a decoder that chose the
    two labels of a span restores the chain between them (brief §2, "re-expand unary chains")."""
    best: dict[tuple[int, int], int] = {}
    for u, (a, b) in enumerate(grammar.unary.tolist()):
        if (a, b) not in best or log_unary[u] > log_unary[best[(a, b)]]:
            best[(a, b)] = u
    return {key: grammar.chains[u] for key, u in best.items()}

