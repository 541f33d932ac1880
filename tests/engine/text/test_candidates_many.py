"""Candidate tags of a whole tagger chunk at once (engine.text.tag_candidates.candidates_many) against
``choose_states`` + ``restrict`` sentence by sentence: every array equal bit for bit, every list equal."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.special import softmax

from engine.text.tag_candidates import CandidateSettings, TagCandidates, candidates_many, choose_states, restrict


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
