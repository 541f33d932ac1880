"""Tag-averaged potentials (engine.features.tag_mixture).

Each fast path is checked against the direct computation it replaces: a mixture's link and higher-order potentials
against the weighted mean of the potentials computed under each tagging separately; a one-tagging mixture
against the plain parse."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.bp_parser import BPParser
from engine.decode.labeler import CountLabeler
from engine.decode.tag_marginal import parse_over_tag_samples, retagged
from engine.features.extract import UPOS_TAGS, FeatureExtractor
from engine.features.second_order import default_second_order
from engine.features.tag_mixture import TagMixture, mixed_rows, with_copies
from engine.features.templates import default_first_order
from engine.graph.build import build_graph
from engine.graph.family import all_arcs
from engine.kernels.exact import TreeConstraint
from engine.scoring.fused import ArcScorer


class Toks:
    def __init__(self, forms: list[str], upos: list[str], xpos: list[str]) -> None:
        self.forms, self.upos, self.xpos = forms, upos, xpos


WORDS = ["The", "dog", "barks", ",", "McDonald's", "1,234", "é", "RUN", "x"]
TAGS = list(UPOS_TAGS[:6])


def _sentence(draw: st.DrawFn, n: int) -> Toks:
    return Toks(draw(st.lists(st.sampled_from(WORDS), min_size=n, max_size=n)),
                draw(st.lists(st.sampled_from(TAGS), min_size=n, max_size=n)),
                draw(st.lists(st.sampled_from(["NN", "VB", "DT"]), min_size=n, max_size=n)))


def _retag(draw: st.DrawFn, s: Toks) -> Toks:
    upos, xpos = list(s.upos), list(s.xpos)
    for p in draw(st.lists(st.integers(0, len(s.forms) - 1), max_size=3)):
        upos[p], xpos[p] = draw(st.sampled_from(TAGS)), draw(st.sampled_from(["NN", "VB", "DT"]))
    return retagged(s, (upos, xpos))


def _parser(seed: int = 0, clusters: int | None = None) -> BPParser:
    rng = np.random.default_rng(seed)
    extractor = FeatureExtractor(tuple(default_first_order()), 1 << 10)
    templates = {"grand": tuple(default_second_order(["grand"])), "sib": tuple(default_second_order(["sib"]))}
    first = extractor.dim * (clusters or 1)
    parser = BPParser(extractor, rng.normal(size=first + 512) * 0.3, TreeConstraint("nonprojective", "single"),
                      CountLabeler(), templates, rng.normal(size=extractor.dim) * 0.3, clusters=clusters)
    for w in (parser.weights, parser.pruner):
        assert w is not None
        w.flags.writeable = False
    return parser


@settings(max_examples=25, deadline=None)
@given(st.data(), st.integers(2, 8), st.sampled_from([None, 2, 3]))
def test_mixed_link_scores_are_the_weighted_mean_over_taggings(data: st.DataObject, n: int,
                                                               clusters: int | None) -> None:
    """On the kept arcs, the mixture's link scores equal the weighted mean of each tagging's full scores (with
    latent edge clusters, of each tagging's marginalised scores)."""
    parser = _parser(n, clusters)
    sentences = [_sentence(data.draw, n) for _ in range(data.draw(st.integers(1, 3)))]
    mixtures: list[TagMixture | None] = []
    for s in sentences:
        copies = tuple(_retag(data.draw, s) for _ in range(data.draw(st.integers(0, 3))))
        w = np.random.default_rng(len(copies)).random(1 + len(copies)) + 0.1
        mixtures.append(TagMixture(copies, w / w.sum()) if copies else None)
    link = parser.link_and_prune_scores(sentences)[0]
    rng = np.random.default_rng(n)
    valid = [rng.random((n + 1, n + 1)) < 0.6 for _ in sentences]
    for v in valid:
        v[:, 0] = False
        np.fill_diagonal(v, False)
    got = parser.mixed_link_scores(sentences, mixtures, link, valid)
    expected = mixed_rows(parser.link_and_prune_scores(with_copies(sentences, mixtures))[0], mixtures)
    for j, v in enumerate(valid):
        np.testing.assert_allclose(got[j][v], expected[j][v], rtol=0, atol=1e-10)
        np.testing.assert_array_equal(got[j][~v], link[j][~v])  # pruned arcs keep their own scores


@settings(max_examples=25, deadline=None)
@given(st.data(), st.integers(2, 7), st.sampled_from([np.float16, np.float64]))
def test_mixed_higher_order_potentials_are_the_weighted_mean(data: st.DataObject, n: int, dtype: type) -> None:
    sentence = _sentence(data.draw, n)
    copies = tuple(_retag(data.draw, sentence) for _ in range(data.draw(st.integers(1, 4))))
    w = np.random.default_rng(n).random(1 + len(copies)) + 0.1
    mixture = TagMixture(copies, w / w.sum())
    templates = {name: tuple(default_second_order([name])) for name in ("grand", "sib", "childseq", "nocross")}
    weights = np.random.default_rng(1).normal(size=1 << 9).astype(dtype)
    valid, link = all_arcs(n), np.zeros((n + 1, n + 1))
    mixed = build_graph(sentence, valid, link, weights, templates, mixture=mixture)
    each = [build_graph(s, valid, link, weights, templates) for s in (sentence, *copies)]
    for name in templates:
        thetas = [_theta(g.soft[name].family) for g in each]
        np.testing.assert_allclose(_theta(mixed.soft[name].family), np.tensordot(mixture.weights, thetas, axes=1),
                                   rtol=0, atol=1e-10)


def _theta(family: object) -> np.ndarray:
    """A family's log-potentials (CHILDSEQ: right then left chains)."""
    if hasattr(family, "theta_right"):
        return np.concatenate([np.ravel(family.theta_right), np.ravel(family.theta_left)])
    return np.asarray(family.theta, dtype=np.float64)  # type: ignore[attr-defined]


def test_a_mixture_of_one_tagging_parses_as_the_sentence() -> None:
    """Copies identical to the sentence change nothing: the parse is the plain parse."""
    parser = _parser(3)
    sentence = Toks(["The", "dog", "barks", "loud", "."], ["DET", "NOUN", "VERB", "ADV", "PUNCT"],
                    ["DT", "NN", "VBZ", "RB", "."])
    same = retagged(sentence, (list(sentence.upos), list(sentence.xpos)))
    plain = parser.parse([sentence], labels=False)[0]
    mixed = parser.parse([sentence], labels=False, mixtures=[TagMixture((same,), np.array([0.25, 0.75]))])[0]
    np.testing.assert_allclose(mixed.marginals, plain.marginals, rtol=0, atol=1e-12)
    assert np.array_equal(mixed.heads, plain.heads)


def test_parse_over_tag_samples_averages_potentials_once_per_sentence() -> None:
    parser = _parser(4)
    sentence = Toks(["The", "dog", "barks", "loud", "."], ["DET", "NOUN", "VERB", "ADV", "PUNCT"],
                    ["DT", "NN", "VBZ", "RB", "."])
    draws = [(["DET", "NOUN", "NOUN", "ADV", "PUNCT"], ["DT", "NN", "NN", "RB", "."])] * 3 + \
        [(list(sentence.upos), list(sentence.xpos))]
    calls: list[int] = []

    def unlabelled(items, mixtures=None):  # type: ignore[no-untyped-def]
        calls.append(len(items))
        return parser.parse(items, labels=False, mixtures=mixtures)

    out = parse_over_tag_samples([sentence], [draws], lambda b: parser.parse(b), parser.constraint,
                                 parser.labeler, unlabelled, average="potentials")[0]
    assert calls == [1]  # one parse for the sentence and its four draws
    assert out.diagnostics is not None and out.diagnostics["tag_samples"] == 4
    np.testing.assert_allclose(out.marginals[:, 1:].sum(axis=0), 1.0, atol=1e-9)
    copy = retagged(sentence, draws[0])
    direct = parser.parse([sentence], labels=False,
                          mixtures=[TagMixture((copy,), np.array([2 / 5, 3 / 5]))])[0]
    np.testing.assert_allclose(out.marginals, direct.marginals, rtol=0, atol=1e-12)
    with pytest.raises(ValueError, match="tag_average"):
        parse_over_tag_samples([sentence], [draws], parser.parse, parser.constraint, parser.labeler, unlabelled,
                               average="modes")


def test_mixture_weights_are_checked() -> None:
    s = Toks(["a"], ["X"], ["X"])
    with pytest.raises(ValueError, match="summing to 1"):
        TagMixture((s,), np.array([0.5, 0.6]))
    with pytest.raises(ValueError, match="one weight per tagging"):
        TagMixture((s,), np.array([1.0]))


def test_copy_scores_score_only_listed_arcs() -> None:
    parser = _parser(5)
    s = Toks(["The", "dog", "barks"], ["DET", "NOUN", "VERB"], ["DT", "NN", "VBZ"])
    c = retagged(s, (["DET", "VERB", "VERB"], ["DT", "VB", "VBZ"]))
    scorer = ArcScorer(parser.extractor, [parser.weights])
    own = scorer([s])[0][0]
    full = scorer([c])[0][0]
    arcs = np.array([[0, 0, 2], [0, 1, 3], [0, 3, 1]])
    got = scorer.copy_scores([s], [c], np.array([0]), arcs, own[arcs[:, 1], arcs[:, 2]])
    np.testing.assert_allclose(got, full[arcs[:, 1], arcs[:, 2]], rtol=0, atol=1e-12)
