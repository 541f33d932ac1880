"""TAGLINK potentials (ArcScorer.candidate_scores) against extract + arc_scores with the head's and the
dependent's own tags replaced and every other word's tags (neighbours, words in between) left at the 1-best."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import engine.features.extract as extract
from engine.features.extract import FeatureExtractor
from engine.features.templates import ArcTemplate, default_first_order
from engine.scoring.fused import ArcScorer
from engine.scoring.potentials import arc_scores


class Toks:
    def __init__(self, forms: list[str], upos: list[str], xpos: list[str]) -> None:
        self.forms, self.upos, self.xpos = forms, upos, xpos
        self.own: dict[str, list[str]] | None = None  # own tags that differ from upos/xpos (test only)


def _own_tags(original):  # type: ignore[no-untyped-def]
    """``token_attribute`` that reads a word's *own* UPOS/XPOS from ``sent.own`` when set (the neighbours'
    ``*_prev``/``*_next`` and the "between" tags keep the sentence's tags)."""
    def attribute(sent, attr):  # type: ignore[no-untyped-def]
        if getattr(sent, "own", None) and attr in ("upos", "xpos"):
            return ["<ROOT>", *sent.own[attr]]
        return original(sent, attr)
    return attribute


EXTRACTORS = [FeatureExtractor(tuple(default_first_order()), 1 << 12),
              FeatureExtractor((ArcTemplate(("upos",), ("upos",), "dir", between=True),
                                ArcTemplate(("upos", "upos_next"), ("xpos_prev", "xpos"), "dist"),
                                ArcTemplate(("xpos",), ("form",), "none")), 97)]


@pytest.mark.parametrize("extractor", EXTRACTORS)
def test_candidate_scores_equal_retagged_own_tags(extractor: FeatureExtractor, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(3)
    weights = rng.normal(size=extractor.dim)
    weights[0] = 0.2
    sentence = Toks(["The", "dog", "runs", "fast"], ["DET", "NOUN", "VERB", "ADV"], ["DT", "NN", "VBZ", "RB"])
    upos = [["DET"], ["NOUN", "VERB", "PROPN"], ["VERB", "NOUN"], ["ADV", "ADJ", "NOUN"]]
    xpos = [["DT"], ["NN", "VB", "NNP"], ["VBZ", "NNS"], ["RB", "JJ", "NN"]]
    heads, deps = np.nonzero(~np.eye(5, dtype=bool) & (np.arange(5) > 0)[None, :])
    theta = ArcScorer(extractor, [weights]).candidate_scores(sentence, upos, xpos, heads, deps)
    monkeypatch.setattr(extract, "token_attribute", _own_tags(extract.token_attribute))
    for j, (h, m) in enumerate(zip(heads, deps, strict=True)):
        for a, b in itertools.product(range(3), range(3)):
            if (h == 0 and a) or (h and a >= len(upos[h - 1])) or b >= len(upos[m - 1]):
                assert theta[j, a, b] == -np.inf
                continue
            own = {"upos": list(sentence.upos), "xpos": list(sentence.xpos)}
            for word, slot in ((h, a), (m, b)):
                if word:
                    own["upos"][word - 1], own["xpos"][word - 1] = upos[word - 1][slot], xpos[word - 1][slot]
            sentence.own = own
            expected = arc_scores(weights, extractor.extract([sentence]))[0, h, m]
            sentence.own = None
            assert theta[j, a, b] == pytest.approx(expected, abs=1e-9), (h, m, a, b)


@pytest.mark.parametrize("extractor", EXTRACTORS)
def test_one_best_scores_stand_in_for_arcs_between_one_candidate_words(extractor: FeatureExtractor) -> None:
    """With the sentence's own scores (``__call__``) given, arcs whose two words have one candidate each take them
    and the others are scored: theta equals the full computation bit for bit (the parser's TAGLINK then does not
    depend on the shortcut); candidates whose first is not the sentence's tags are refused."""
    rng = np.random.default_rng(5)
    weights = rng.normal(size=extractor.dim)
    sentence = Toks(["The", "dog", "runs", "fast", "now"], ["DET", "NOUN", "VERB", "ADV", "ADV"],
                    ["DT", "NN", "VBZ", "RB", "RB"])
    upos = [["DET"], ["NOUN", "VERB"], ["VERB"], ["ADV"], ["ADV", "ADJ", "NOUN"]]
    xpos = [["DT"], ["NN", "VB"], ["VBZ"], ["RB"], ["RB", "JJ", "NN"]]
    heads, deps = np.nonzero(~np.eye(6, dtype=bool) & (np.arange(6) > 0)[None, :])
    scorer = ArcScorer(extractor, [weights])
    own = scorer([sentence])[0][0][heads, deps]
    full = scorer.candidate_scores(sentence, upos, xpos, heads, deps)
    shortcut = scorer.candidate_scores(sentence, upos, xpos, heads, deps, one_best=own)
    np.testing.assert_array_equal(shortcut, full)
    single = np.array([1, *(len(u) for u in upos)])
    assert ((single[heads] == 1) & (single[deps] == 1)).sum() > 5  # arcs that did take the shortcut
    with pytest.raises(ValueError, match="first candidate"):
        scorer.candidate_scores(sentence, [["DET"], ["VERB", "NOUN"], *upos[2:]], [["DT"], ["VB", "NN"], *xpos[2:]],
                                heads, deps, one_best=own)


@pytest.mark.parametrize("extractor", EXTRACTORS)
def test_candidate_gradient_is_the_derivative_of_the_candidate_scores(extractor: FeatureExtractor) -> None:
    """theta is linear in the weights, so the feature counts ``candidate_gradient`` adds for coefficients c
    dotted with any weights w give sum c * theta(w); the null feature carries the absent "between" slots."""
    rng = np.random.default_rng(5)
    sentence = Toks(["The", "dog", "runs", "fast"], ["DET", "NOUN", "VERB", "ADV"], ["DT", "NN", "VBZ", "RB"])
    upos = [["DET"], ["NOUN", "VERB", "PROPN"], ["VERB", "NOUN"], ["ADV", "ADJ", "NOUN"]]
    xpos = [["DT"], ["NN", "VB", "NNP"], ["VBZ", "NNS"], ["RB", "JJ", "NN"]]
    heads, deps = np.nonzero(~np.eye(5, dtype=bool) & (np.arange(5) > 0)[None, :])
    counts = np.zeros(extractor.dim)
    coef = rng.normal(size=(len(heads), 3, 3))
    weights = rng.normal(size=extractor.dim)
    scorer = ArcScorer(extractor, [weights])
    scorer.candidate_gradient(sentence, upos, xpos, heads, deps, coef, counts)
    theta = scorer.candidate_scores(sentence, upos, xpos, heads, deps)
    finite = np.isfinite(theta)
    assert finite.sum() < theta.size  # some pairs are not candidates, and their coefficients are ignored
    np.testing.assert_allclose(counts @ weights, (coef * np.where(finite, theta, 0.0)).sum(), rtol=1e-10)
    for j, a, b in [(0, 0, 0), (7, 1, 0), (len(heads) - 1, 2, 1)]:  # one pair alone: its feature counts
        one = np.zeros_like(coef)
        one[j, a, b] = 1.0
        alone = np.zeros(extractor.dim)
        scorer.candidate_gradient(sentence, upos, xpos, heads, deps, one, alone)
        spread = sum(t.between for t in extractor.templates)  # one slot per UPOS tag, present or not
        assert alone.sum() == len(extractor.templates) - spread + len(extract.UPOS_TAGS) * spread
        assert alone @ weights == pytest.approx(theta[j, a, b], rel=1e-12)
