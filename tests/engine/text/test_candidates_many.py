"""Candidate tags of a whole tagger chunk at once (engine.text.tag_candidates.candidates_many) against
``choose_states`` + ``restrict`` sentence by sentence: every array equal bit for bit, every list equal."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.special import softmax

from engine.text.tag_candidates import (
    CandidateSettings,
    TagCandidates,
    candidates_many,
    choose_states,
    restrict,
    top_columns,
)


def _same(got: TagCandidates | None, want: TagCandidates | None) -> None:
    assert (got is None) == (want is None)
    if got is None or want is None:
        return
    for field in ("states", "allowed", "emissions", "transitions", "start", "end", "mass", "pruned", "slot_upos"):
        a, b = getattr(got, field), getattr(want, field)
        assert a.shape == b.shape and a.dtype == b.dtype, field
        np.testing.assert_array_equal(a, b, err_msg=field)
    assert (got.upos, got.xpos, got.upos_labels) == (want.upos, want.xpos, want.upos_labels)


@pytest.mark.parametrize("settings", [CandidateSettings(3, 0.1), CandidateSettings(3, 0.0), CandidateSettings(1, 0.2),
                                      CandidateSettings(5, 0.05), CandidateSettings(2, 1.0)])
@pytest.mark.parametrize("seed", [0, 1])
def test_a_chunk_at_once_equals_sentence_by_sentence(settings: CandidateSettings, seed: int) -> None:
    rng = np.random.default_rng(seed)
    upos_labels, xpos_labels = ["NOUN", "VERB", "DET", "ADJ"], ["NN", "NNS", "VB", "VBZ", "DT", "JJ"]
    pairs = np.array([[0, 0], [0, 1], [1, 2], [1, 3], [2, 4], [3, 5], [0, 5]])  # (S, 2) states: (UPOS, XPOS)
    lengths = [3, 1, 0, 7, 2, 5]  # an empty sentence among them
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    n_words, s = offsets[-1], len(pairs)
    emissions = rng.normal(scale=2.0, size=(n_words, s))
    transitions = rng.normal(size=(s + 1, s + 1))
    # peaked and flat rows alike, so that words keep 1 to k candidates
    marginals = softmax(emissions * rng.choice([0.3, 1.0, 4.0], size=(n_words, 1)), axis=1)
    best = np.argmax(marginals + rng.normal(scale=0.05, size=marginals.shape), axis=1).astype(np.int64)
    labels = (upos_labels, xpos_labels, pairs)
    together = candidates_many(emissions, transitions, marginals, best, offsets, settings, labels)
    widths = []
    for r, (a, b) in enumerate(zip(offsets[:-1], offsets[1:], strict=True)):
        want = None
        if b > a:
            states, allowed = choose_states(marginals[a:b], best[a:b], settings)
            want = restrict(emissions[a:b], transitions, states, allowed, labels, marginals[a:b])
            widths.append(states.shape[1])
        _same(together[r], want)
    if settings.k > 1 and 0.0 < settings.min_marginal < 1.0:
        assert len(set(widths)) > 1  # sentences of different widths were cut from the chunk's rows


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 30), st.integers(1, 12), st.integers(0, 14), st.integers(0, 2**32), st.booleans())
def test_top_columns_are_the_stable_sorts_first_columns(n: int, s: int, r: int, seed: int, coarse: bool) -> None:
    """``top_columns`` (repeated argmax) picks what the stable descending sort picks, ties (equal values, 0.0
    and -0.0, the -1 of a word's best state) in column order, for every width; non-finite values take the sort."""
    rng = np.random.default_rng(seed)
    values = rng.random((n, s))
    if coarse:  # many ties
        values = np.round(values * 3) / 3
        values[rng.random((n, s)) < 0.2] = -0.0
    values[rng.random((n, s)) < 0.1] = -1.0
    expected = np.argsort(-values, axis=1, kind="stable")[:, :r]
    np.testing.assert_array_equal(top_columns(values, r), expected)
    if n:
        values[0, 0] = np.inf
        np.testing.assert_array_equal(top_columns(values, r), np.argsort(-values, axis=1, kind="stable")[:, :r])
