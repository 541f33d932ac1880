"""The fused scorer (engine.scoring.fused) against features -> potentials (extract + arc_scores)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.features.extract import UPOS_TAGS, FeatureExtractor
from engine.features.templates import ArcTemplate, default_first_order
from engine.scoring.fused import ArcScorer, fused_arc_scores
from engine.scoring.potentials import arc_scores


class Toks:
    def __init__(self, forms: list[str], upos: list[str], xpos: list[str]) -> None:
        self.forms, self.upos, self.xpos = forms, upos, xpos


WORDS = ["The", "dog", "barks", ",", "McDonald's", "1,234", "é", "RUN", "x"]
TAGS = [*UPOS_TAGS, "UNKNOWN", "_"]  # tags outside UPOS_TAGS take no "between" feature


def _sentences(draw: st.DrawFn, b: int, n: int) -> list[Toks]:
    out = []
    for _ in range(b):
        forms = draw(st.lists(st.sampled_from(WORDS), min_size=n, max_size=n))
        upos = draw(st.lists(st.sampled_from(TAGS), min_size=n, max_size=n))
        xpos = draw(st.lists(st.sampled_from(["NN", "VB", "DT", "_"]), min_size=n, max_size=n))
        out.append(Toks(forms, upos, xpos))
    return out


def _same(expected: np.ndarray, got: np.ndarray) -> None:
    assert np.array_equal(np.isinf(expected), np.isinf(got))
    finite = np.isfinite(expected)
    np.testing.assert_allclose(got[finite], expected[finite], rtol=0, atol=1e-9)


EXTRACTOR = FeatureExtractor(tuple(default_first_order()), 1 << 12)
BETWEEN = FeatureExtractor((ArcTemplate(("upos",), ("upos",), "dir", between=True),
                            ArcTemplate(("form", "upos_next"), ("xpos_prev",), "dist")), 97)


@settings(max_examples=40, deadline=None)
@given(st.data(), st.integers(1, 3), st.integers(1, 9), st.sampled_from([EXTRACTOR, BETWEEN]))
def test_fused_equals_extract_then_arc_scores(data: st.DataObject, b: int, n: int, extractor: FeatureExtractor) -> None:
    sentences = _sentences(data.draw, b, n)
    rng = np.random.default_rng(n)
    first, second = rng.normal(size=extractor.dim + 5), rng.normal(size=extractor.dim)
    first[0] = 0.3  # the null feature's weight counts once per absent slot, as in the feature array
    feats = extractor.extract(sentences)
    got = fused_arc_scores(extractor, sentences, [first, second])
    _same(arc_scores(first, feats), got[0])
    _same(arc_scores(second, feats), got[1])


@pytest.mark.parametrize("half", [True, False])
def test_read_only_weights_get_one_table(half: bool) -> None:
    rng = np.random.default_rng(0)
    vectors = [rng.normal(size=EXTRACTOR.dim), rng.normal(size=EXTRACTOR.dim)]
    if half:  # what a loaded model holds: float16 values widened to float64
        vectors = [v.astype(np.float16).astype(np.float64) for v in vectors]
    for v in vectors:
        v.flags.writeable = False
    scorer = ArcScorer(EXTRACTOR, vectors)
    assert len(scorer.tables) == 1
    assert scorer.tables[0].dtype == (np.uint16 if half else np.float64)
    assert scorer.tables[0].shape == (EXTRACTOR.dim, 2)
    assert scorer.serves(vectors)
    sentences = [Toks(["The", "dog", "barks", "."], ["DET", "NOUN", "VERB", "PUNCT"], ["DT", "NN", "VBZ", "."])]
    feats = EXTRACTOR.extract(sentences)
    got = scorer(sentences)
    for v, g in zip(vectors, got, strict=True):
        _same(arc_scores(v, feats), g)


def test_one_read_only_float32_vector_gets_a_float32_table() -> None:
    weights = np.random.default_rng(1).normal(size=EXTRACTOR.dim).astype(np.float32).astype(np.float64)
    weights.flags.writeable = False
    scorer = ArcScorer(EXTRACTOR, [weights])
    assert [t.dtype for t in scorer.tables] == [np.float32]
    sentences = [Toks(["a", "b", "c"], ["DET", "NOUN", "VERB"], ["DT", "NN", "VB"])]
    _same(arc_scores(weights, EXTRACTOR.extract(sentences)), scorer(sentences)[0])


def test_writable_weights_are_read_live() -> None:
    """A scorer over weights a trainer may still change keeps views, and does not claim to serve them."""
    weights = np.zeros(EXTRACTOR.dim)
    scorer = ArcScorer(EXTRACTOR, [weights])
    assert not scorer.serves([weights])
    sentences = [Toks(["a", "b"], ["DET", "NOUN"], ["DT", "NN"])]
    before = scorer(sentences)[0]
    weights += 1.0
    after = scorer(sentences)[0]
    _same(arc_scores(weights, EXTRACTOR.extract(sentences)), after)
    assert not np.array_equal(before, after)


def test_batch_of_mixed_lengths_is_refused() -> None:
    with pytest.raises(ValueError, match="one length"):
        fused_arc_scores(EXTRACTOR, [Toks(["a"], ["X"], ["X"]), Toks(["a", "b"], ["X", "X"], ["X", "X"])],
                         [np.zeros(EXTRACTOR.dim)])


def test_a_float16_model_scores_from_its_stored_bits(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A pipeline stored in float16 gets its scorer's table from the file's bits: same potentials as the
    feature path, and the loaded weights are read-only (nothing can change them behind the table)."""
    from engine.bp_parser import BPParser
    from engine.decode.labeler import CountLabeler
    from engine.kernels.exact import TreeConstraint

    rng = np.random.default_rng(3)
    extractor = FeatureExtractor(tuple(default_first_order()), 1 << 17)
    parser = BPParser(extractor, rng.normal(size=extractor.dim + 64), TreeConstraint("nonprojective", "single"),
                      CountLabeler(), {}, rng.normal(size=extractor.dim))
    parser.save(tmp_path / "m", half=True)
    loaded = BPParser.load(tmp_path / "m")
    assert loaded._scorer is not None and loaded._scorer.tables[0].dtype == np.uint16
    assert not loaded.weights.flags.writeable and loaded.pruner is not None and not loaded.pruner.flags.writeable
    sentences = [Toks(["The", "dog", "barks", "."], ["DET", "NOUN", "VERB", "PUNCT"], ["DT", "NN", "VBZ", "."])]
    feats = extractor.extract(sentences)
    got = loaded.link_and_prune_scores(sentences)
    _same(arc_scores(loaded.weights, feats), got[0])
    _same(arc_scores(loaded.pruner, feats), got[1])


@settings(max_examples=40, deadline=None)
@given(st.data(), st.integers(1, 10), st.sampled_from([EXTRACTOR, BETWEEN]))
def test_copies_under_other_tags_copy_only_what_is_unchanged(data: st.DataObject, n: int,
                                                              extractor: FeatureExtractor) -> None:
    """Copies of a sentence under other tags (sharing its list of forms, as the tag-sample copies do) take
    the sums of the arcs whose features cannot have changed from the first of them, and compute the others:
    every sum is the feature path's (to rounding) and, bit for bit, what computing it gives."""
    original = _sentences(data.draw, 1, n)[0]
    batch = [original]
    for _ in range(data.draw(st.integers(1, 4))):
        upos, xpos = list(original.upos), list(original.xpos)
        for p in data.draw(st.lists(st.integers(0, n - 1), max_size=3)):
            upos[p] = data.draw(st.sampled_from(TAGS))
            xpos[p] = data.draw(st.sampled_from(["NN", "VB", "DT", "_"]))
        copy = Toks(original.forms, upos, xpos)  # the same list of forms
        batch.insert(data.draw(st.integers(0, len(batch))), copy)
    rng = np.random.default_rng(n)
    first, second = rng.normal(size=extractor.dim), rng.normal(size=extractor.dim)
    feats = extractor.extract(batch)
    got = fused_arc_scores(extractor, batch, [first, second])
    _same(arc_scores(first, feats), got[0])
    _same(arc_scores(second, feats), got[1])
    # bit for bit what each computes without a shared list of forms (nothing copied)
    alone = fused_arc_scores(extractor, [Toks(list(s.forms), s.upos, s.xpos) for s in batch], [first, second])
    np.testing.assert_array_equal(got[0], alone[0])
    np.testing.assert_array_equal(got[1], alone[1])
