"""The kept arcs' feature rows (engine.scoring.kept_features) against extract: row for row, bit for bit."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.features.extract import UPOS_TAGS, FeatureExtractor
from engine.features.templates import ArcTemplate, default_first_order
from engine.scoring.hidden import cluster_blocks, cluster_scores, marginalise_clusters
from engine.scoring.kept_features import arc_features, kept_feature_rows, kept_link_scores
from engine.scoring.potentials import arc_scores

WORDS = ["The", "dog", "barks", ",", "McDonald's", "1,234", "é", "RUN", "x"]
TAGS = [*UPOS_TAGS, "UNKNOWN", "_"]  # tags outside UPOS_TAGS take no "between" feature
EXTRACTOR = FeatureExtractor(tuple(default_first_order()), 1 << 12)
BETWEEN = FeatureExtractor((ArcTemplate(("upos",), ("upos",), "dir", between=True),
                            ArcTemplate(("form", "upos_next"), ("xpos_prev",), "dist")), 97)


def _sentences(draw: st.DrawFn, b: int, n: int) -> list[SimpleNamespace]:
    return [SimpleNamespace(forms=draw(st.lists(st.sampled_from(WORDS), min_size=n, max_size=n)),
                            upos=draw(st.lists(st.sampled_from(TAGS), min_size=n, max_size=n)),
                            xpos=draw(st.lists(st.sampled_from(["NN", "VB", "DT", "_"]), min_size=n, max_size=n)))
            for _ in range(b)]


def _possible(b: int, n: int) -> np.ndarray:
    """Every arc that has features: (B, n+1, n+1) bool, no arc into ROOT, none from a word to itself."""
    ok = ~np.eye(n + 1, dtype=bool)
    ok[:, 0] = False
    return np.broadcast_to(ok, (b, n + 1, n + 1)).copy()


@settings(max_examples=40, deadline=None)
@given(st.data(), st.integers(1, 3), st.integers(1, 9), st.sampled_from([EXTRACTOR, BETWEEN]))
def test_rows_equal_extract_at_every_listed_arc(data: st.DataObject, b: int, n: int,
                                               extractor: FeatureExtractor) -> None:
    sentences = _sentences(data.draw, b, n)
    full = extractor.extract(sentences)
    listed = np.argwhere(_possible(b, n))
    listed = listed[data.draw(st.permutations(range(len(listed))))]  # any order, any subset
    listed = listed[:data.draw(st.integers(0, len(listed)))]
    rows = kept_feature_rows(extractor, sentences, listed)
    assert rows.dtype == full.dtype == np.int32 and rows.shape == (len(listed), extractor.slots)
    assert np.array_equal(rows, full[listed[:, 0], listed[:, 1], listed[:, 2]])


@settings(max_examples=40, deadline=None)
@given(st.data(), st.integers(1, 3), st.integers(1, 9), st.sampled_from([EXTRACTOR, BETWEEN]))
def test_arc_features_equal_extract(data: st.DataObject, b: int, n: int, extractor: FeatureExtractor) -> None:
    sentences = _sentences(data.draw, b, n)
    full = extractor.extract(sentences)
    got = arc_features(extractor, sentences)
    assert got.dtype == full.dtype and got.shape == full.shape and np.array_equal(got, full)


def test_long_sentences_reach_the_last_distance_buckets() -> None:
    rng = np.random.default_rng(0)
    n = 150
    sentence = SimpleNamespace(forms=list(rng.choice(WORDS, n)), upos=list(rng.choice(TAGS, n)),
                               xpos=list(rng.choice(["NN", "VB"], n)))
    listed = np.argwhere(_possible(1, n))
    full = EXTRACTOR.extract([sentence])
    assert np.array_equal(kept_feature_rows(EXTRACTOR, [sentence], listed), full[0][listed[:, 1], listed[:, 2]])
    assert np.array_equal(arc_features(EXTRACTOR, [sentence]), full)


def test_arcs_without_features_are_refused() -> None:
    sentence = SimpleNamespace(forms=["a", "b"], upos=["DET", "NOUN"], xpos=["DT", "NN"])
    for arc in ([0, 1, 1], [0, 1, 0]):
        with pytest.raises(ValueError, match="no features"):
            kept_feature_rows(EXTRACTOR, [sentence], np.array([arc]))


@pytest.mark.parametrize("clusters", [None, 3])
def test_kept_link_scores_are_arc_scores_at_the_kept_arcs_bit_for_bit(clusters: int | None) -> None:
    rng = np.random.default_rng(1)
    b, n = 3, 7
    sentences = [
        SimpleNamespace(forms=list(rng.choice(WORDS, n)), upos=list(rng.choice(TAGS, n)),
                        xpos=list(rng.choice(["NN", "VB", "DT"], n))) for _ in range(b)]
    weights = rng.normal(size=EXTRACTOR.dim * (clusters or 1) + 11)
    kept = _possible(b, n) & (rng.random((b, n + 1, n + 1)) < 0.5)
    kept[:, 0, 1] = True  # every sentence keeps an arc
    kept[2, 0, 2:] = kept[2, 1:, 1:] = False  # and one keeps that arc alone
    link, rows, posterior = kept_link_scores(EXTRACTOR, weights, clusters, sentences, list(kept))
    full = EXTRACTOR.extract(sentences)
    if clusters is None:
        expected, expected_posterior = arc_scores(weights, full), None
    else:
        expected, expected_posterior = marginalise_clusters(
            cluster_scores(cluster_blocks(weights, clusters, EXTRACTOR.dim), full))
    assert np.array_equal(link[kept], expected[kept])  # bit for bit
    assert np.isneginf(link[~kept]).all()
    for j in range(b):
        assert np.array_equal(rows[j], full[j][kept[j]])
        if clusters is None:
            assert posterior is None
        else:
            assert posterior is not None and expected_posterior is not None
            assert np.array_equal(posterior[j], expected_posterior[:, j][:, kept[j]])
