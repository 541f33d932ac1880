"""The ragged chain kernels (``engine.text.crf_ragged``) against the numpy chain kernels of ``engine.text.crf``,
and the tagger built on them against the per-length numpy tagging it replaced."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.data.batching import length_batches
from engine.data.conllu_io import read_conllu
from engine.hashing import hash_string
from engine.pipeline import Pipeline
from engine.text import crf, crf_ragged, tagger_features
from engine.text.tagger import Tagger
from engine.text.tagger_features import feature_codes

MODEL = Path(__file__).resolve().parents[3] / "models" / "en_ewt"


@settings(max_examples=60, deadline=None)
@given(lengths=st.lists(st.integers(0, 8), min_size=1, max_size=5), states=st.integers(1, 7),
       forbid=st.booleans(), seed=st.integers(0, 2**31))
def test_each_ragged_chain_equals_the_numpy_kernels_on_it_alone(lengths: list[int], states: int, forbid: bool,
                                                                 seed: int) -> None:
    rng = np.random.default_rng(seed)
    transitions = rng.normal(size=(states + 1, states + 1)) * 2
    if forbid:  # forbidden transitions (-inf) stay impossible in both
        transitions[rng.random(transitions.shape) < 0.2] = -np.inf
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    emissions = rng.normal(size=(offsets[-1], states)) * 3
    alpha = crf_ragged.forward(emissions, transitions, offsets)
    unary, log_z = crf_ragged.marginals(emissions, transitions, offsets, alpha)
    k = min(3, states)
    candidates = np.argpartition(-unary, k - 1, axis=-1)[:, :k]
    best = crf_ragged.viterbi(emissions, transitions, candidates, offsets)
    uniform = rng.random((4, offsets[-1]))
    drawn = crf_ragged.sample(alpha, transitions, uniform, offsets)
    for b, n in enumerate(lengths):
        w = slice(offsets[b], offsets[b + 1])
        if n == 0:
            assert log_z[b] == 0.0
            continue
        expected = crf.chain_forward_backward(emissions[None, w], transitions)
        if np.isfinite(expected.log_z[0]):
            np.testing.assert_allclose(alpha[w], crf.chain_forward(emissions[None, w], transitions)[0], rtol=1e-12,
                                       atol=1e-12)
            np.testing.assert_allclose(unary[w], expected.unary[0], rtol=0, atol=1e-12)
            assert log_z[b] == pytest.approx(expected.log_z[0], rel=1e-12, abs=1e-12)
            expected_draws = crf.chain_sample(emissions[None, w], transitions, uniform[None, :, w])[0]
            assert np.array_equal(drawn[:, w], expected_draws)
        assert np.array_equal(best[w], crf.chain_viterbi(emissions[None, w], transitions, candidates[None, w])[0])


def test_ragged_kernels_are_exact_against_enumeration() -> None:
    """Marginals and log Z of two chains in one call equal brute-force enumeration of every tag sequence."""
    rng = np.random.default_rng(3)
    transitions = rng.normal(size=(4, 4))
    emissions = rng.normal(size=(5, 3))
    offsets = np.array([0, 2, 5])
    unary, log_z = crf_ragged.marginals(emissions, transitions, offsets)
    for b in range(2):
        em = emissions[offsets[b]:offsets[b + 1]]
        n = len(em)
        grid = np.stack(np.meshgrid(*[np.arange(3)] * n, indexing="ij"), -1).reshape(-1, n)
        scores = np.array([crf.chain_score(em[None], transitions, y[None])[0] for y in grid])
        z = np.logaddexp.reduce(scores)
        assert log_z[b] == pytest.approx(z, abs=1e-12)
        p = np.exp(scores - z)
        for t in range(n):
            np.testing.assert_allclose(unary[offsets[b] + t], [p[grid[:, t] == j].sum() for j in range(3)], atol=1e-12)


def _tag_per_length(tagger: Tagger, sentences: list, samples: int) -> list[tuple]:
    """The tagging that the ragged kernels replaced: equal-length sentences stacked, numpy kernels."""
    out: list[tuple | None] = [None] * len(sentences)
    ids, offsets = tagger._ids(sentences)
    lengths = [len(s.forms) for s in sentences]
    c = tagger.crf
    for idx in length_batches(lengths, 64, max_arcs=1 << 62):
        n = lengths[idx[0]]
        em = c.emissions(ids[offsets[idx][:, None] + np.arange(n)])
        marginals = crf.chain_forward_backward(em, c.transition).unary
        k = min(tagger.viterbi_candidates, marginals.shape[-1])
        best = crf.chain_viterbi(em, c.transition, np.argpartition(-marginals, k - 1, axis=-1)[..., :k])
        uniform = np.stack([np.random.default_rng(int(hash_string("\x1f".join(sentences[i].forms))))
                            .random((samples, n)) for i in idx])
        drawn = crf.chain_sample(em, c.transition, uniform)
        for r, i in enumerate(idx):
            out[i] = (best[r], marginals[r], drawn[r])
    return out  # type: ignore[return-value]


@pytest.mark.skipif(not (MODEL / "manifest.json").exists(), reason="the shipped model is not here")
def test_shipped_tagger_tags_dev_as_the_per_length_numpy_path(ewt_dir: Path) -> None:
    """On 300 EWT dev sentences of every length: the same best states and the same 16 draws, marginals to 1e-9."""
    tagger = Pipeline.load(MODEL).tagger
    assert tagger is not None
    sentences = read_conllu(ewt_dir / "en_ewt-ud-dev.conllu")[:300]
    found = tagger.tag(sentences, samples=16)
    expected = _tag_per_length(tagger, sentences, 16)
    states = {tuple(p): i for i, p in enumerate(tagger.crf.states.tolist())}
    for sentence, result, (best, marginals, drawn) in zip(sentences, found, expected, strict=True):
        pairs = [states[(tagger.upos_labels.index(u), tagger.xpos_labels.index(x))]
                 for u, x in zip(result.upos, result.xpos, strict=True)]
        assert pairs == best.tolist(), sentence.forms
        um, xm = tagger.crf.split(marginals)
        np.testing.assert_allclose(result.upos_marginals, um, rtol=0, atol=1e-9)
        np.testing.assert_allclose(result.xpos_marginals, xm, rtol=0, atol=1e-9)
        assert [u for u, _ in result.samples] == [[tagger.upos_labels[i] for i in tagger.crf.states[y, 0]]
                                                  for y in drawn]


@pytest.mark.skipif(not (MODEL / "manifest.json").exists(), reason="the shipped model is not here")
def test_feature_codes_through_the_form_cache_equal_fresh_ones(ewt_dir: Path, monkeypatch) -> None:
    """The tagger's form cache gives the codes computed without it: on a first call (cache empty), a later one
    (cache full of earlier forms), and across a cache that overflows and starts afresh mid-way."""
    tagger = Pipeline.load(MODEL).tagger
    assert tagger is not None
    dev = read_conllu(ewt_dir / "en_ewt-ud-dev.conllu")
    cache: dict[str, tuple[int, ...]] = {}
    monkeypatch.setattr(tagger_features, "_CACHED_FORMS", 700)
    for part in (dev[:40], dev[20:80], dev[80:200], dev[:40]):
        fresh, offsets = feature_codes(part, tagger.lexicon)
        cached, same_offsets = feature_codes(part, tagger.lexicon, cache)
        assert np.array_equal(fresh, cached) and np.array_equal(offsets, same_offsets)
        forms = {f for s in part for f in s.forms} | {tagger_features._BOS, tagger_features._EOS}
        assert forms <= cache.keys() and (len(cache) <= 700 or cache.keys() == forms)  # afresh when full


@pytest.mark.skipif(not (MODEL / "manifest.json").exists(), reason="the shipped model is not here")
def test_emissions_are_numpys_gathered_sums_bit_for_bit(ewt_dir: Path) -> None:
    """The compiled row sums give what summing the gathered weight rows in float64 gives, for a flat (words, K)
    id matrix (tagging) and a (sentences, words, K) one (training)."""
    tagger = Pipeline.load(MODEL).tagger
    assert tagger is not None
    ids, _ = tagger._ids(read_conllu(ewt_dir / "en_ewt-ud-dev.conllu")[:200])
    c = tagger.crf
    for shaped in (ids, ids[:600].reshape(20, 30, -1)):
        eu = c.upos_emission[shaped].sum(axis=-2, dtype=np.float64)
        ex = c.xpos_emission[shaped].sum(axis=-2, dtype=np.float64)
        assert np.array_equal(c.emissions(shaped), eu[..., c.states[:, 0]] + ex[..., c.states[:, 1]])
