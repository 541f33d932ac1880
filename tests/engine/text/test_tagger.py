"""Tagger: chain forward-backward against enumeration, CRF gradient, EWT accuracy, state, jackknifing."""

from __future__ import annotations

import io
import itertools
import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from engine.data.conllu_io import iter_conllu, read_conllu
from engine.text.jackknife import fold_bounds, jackknife_tag_draws, jackknife_tags
from engine.text.tagger import (
    Tagger,
    chain_forward_backward,
    chain_nll,
    chain_sample,
    chain_score,
    chain_viterbi,
)


def _enumerate(emissions: np.ndarray, transitions: np.ndarray):
    """Brute force over all tag sequences of one chain: (log Z, unary (n, T), pairwise (n-1, T, T), best)."""
    n, t = emissions.shape
    seqs = np.array(list(itertools.product(range(t), repeat=n)))
    scores = chain_score(np.repeat(emissions[None], len(seqs), axis=0), transitions, seqs)
    log_z = np.logaddexp.reduce(scores)
    p = np.exp(scores - log_z)
    unary = np.zeros((n, t))
    pair = np.zeros((max(n - 1, 0), t, t))
    for seq, prob in zip(seqs, p, strict=True):
        unary[np.arange(n), seq] += prob
        pair[np.arange(n - 1), seq[:-1], seq[1:]] += prob
    return log_z, unary, pair, seqs[np.argmax(scores)]


@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_forward_backward_equals_enumeration(n: int) -> None:
    rng = np.random.default_rng(n)
    t, b = 3, 3
    emissions = rng.normal(scale=3.0, size=(b, n, t))
    transitions = rng.normal(scale=3.0, size=(t + 1, t + 1))
    full = chain_forward_backward(emissions, transitions, pairwise="full")
    summed = chain_forward_backward(emissions, transitions, pairwise="sum")
    expected_counts = np.zeros((t + 1, t + 1))
    for i in range(b):
        log_z, unary, pair, best = _enumerate(emissions[i], transitions)
        assert full.log_z[i] == pytest.approx(log_z, abs=1e-9)
        np.testing.assert_allclose(full.unary[i], unary, atol=1e-10)
        np.testing.assert_allclose(full.pairwise[i], pair, atol=1e-10)
        np.testing.assert_array_equal(chain_viterbi(emissions[i : i + 1], transitions)[0], best)
        expected_counts[:t, :t] += pair.sum(axis=0)
        expected_counts[t, :t] += unary[0]
        expected_counts[:t, t] += unary[-1]
    np.testing.assert_allclose(summed.pair_counts, expected_counts, atol=1e-10)
    np.testing.assert_allclose(summed.log_z, full.log_z)


@pytest.mark.parametrize("n", [1, 3])
def test_samples_follow_the_chain_distribution(n: int) -> None:
    """Sequence frequencies of forward-filtering backward-sampling match the enumerated p(y | x)."""
    rng = np.random.default_rng(20 + n)
    t, b, k = 3, 2, 40_000
    emissions = rng.normal(scale=1.5, size=(b, n, t))
    transitions = rng.normal(scale=1.5, size=(t + 1, t + 1))
    transitions[1, 2] = -np.inf  # a forbidden bigram is never drawn
    samples = chain_sample(emissions, transitions, np.random.default_rng(0).random((b, k, n)))
    assert samples.shape == (b, k, n) and samples.dtype == np.int64
    for i in range(b):
        seqs = np.array(list(itertools.product(range(t), repeat=n)))
        scores = chain_score(np.repeat(emissions[i][None], len(seqs), axis=0), transitions, seqs)
        exact = np.exp(scores - np.logaddexp.reduce(scores))
        codes = (samples[i] * t ** np.arange(n)[::-1]).sum(axis=1)  # the row of each sample in ``seqs``
        freq = np.bincount(codes, minlength=len(seqs)) / k
        assert np.abs(freq - exact).max() < 4 * np.sqrt(0.25 / k)  # four standard errors at worst
        assert freq[exact == 0].sum() == 0
    assert chain_sample(emissions, transitions, np.zeros((b, 0, n))).shape == (b, 0, n)
    # u = 0 draws the first tag of nonzero probability, never a forbidden one
    blocked = emissions.copy()
    blocked[:, :, 0] = -np.inf
    assert (chain_sample(blocked, transitions, np.zeros((b, 5, n))) != 0).all()
    with pytest.raises(ValueError, match="uniform"):
        chain_sample(emissions, transitions, np.zeros((b, k, n + 1)))


def test_large_batches_equal_single_chains() -> None:
    """Batches big enough for the kernels to split their matrix products give the per-chain results."""
    rng = np.random.default_rng(5)
    emissions = rng.normal(scale=2.0, size=(60, 40, 102))  # 60 x 102 x 102 exceeds one product block
    transitions = rng.normal(size=(103, 103))
    batch = chain_forward_backward(emissions, transitions, pairwise="sum")
    counts = np.zeros_like(batch.pair_counts)
    for i in range(0, 60, 7):
        one = chain_forward_backward(emissions[i : i + 1], transitions, pairwise="sum")
        assert batch.log_z[i] == pytest.approx(one.log_z[0], rel=1e-12)
        np.testing.assert_allclose(batch.unary[i], one.unary[0], atol=1e-12)
    for i in range(60):
        counts += chain_forward_backward(emissions[i : i + 1], transitions, pairwise="sum").pair_counts
    np.testing.assert_allclose(batch.pair_counts, counts, atol=1e-9)


def test_viterbi_over_candidates_is_best_within_them() -> None:
    rng = np.random.default_rng(11)
    b, n, t, k = 3, 4, 5, 2
    emissions = rng.normal(scale=2.0, size=(b, n, t))
    transitions = rng.normal(scale=2.0, size=(t + 1, t + 1))
    every = rng.permuted(np.broadcast_to(np.arange(t), (b, n, t)), axis=-1)  # all tags, shuffled
    np.testing.assert_array_equal(chain_viterbi(emissions, transitions, every), chain_viterbi(emissions, transitions))
    candidates = every[..., :k]
    paths = chain_viterbi(emissions, transitions, candidates)
    for i in range(b):
        seqs = np.array(list(itertools.product(*[candidates[i, j] for j in range(n)])))
        scores = chain_score(np.repeat(emissions[i : i + 1], len(seqs), axis=0), transitions, seqs)
        np.testing.assert_array_equal(paths[i], seqs[np.argmax(scores)])


def test_forbidden_transitions_stay_impossible() -> None:
    """-inf scores are hard zeros: a forbidden bigram gets pairwise marginal exactly 0."""
    rng = np.random.default_rng(7)
    emissions = rng.normal(size=(2, 4, 3))
    transitions = rng.normal(size=(4, 4))
    transitions[0, 1] = -np.inf
    fb = chain_forward_backward(emissions, transitions, pairwise="full")
    assert np.isfinite(fb.log_z).all()
    assert (fb.pairwise[:, :, 0, 1] == 0).all()
    np.testing.assert_allclose(fb.unary.sum(axis=-1), 1.0)


def test_nll_gradient_matches_finite_differences() -> None:
    rng = np.random.default_rng(3)
    b, n, t = 2, 4, 3
    emissions = rng.normal(size=(b, n, t))
    transitions = rng.normal(size=(t + 1, t + 1))
    gold = rng.integers(0, t, size=(b, n))
    nll, d_em, d_tr = chain_nll(emissions, transitions, gold)
    direct = sum(_enumerate(emissions[i], transitions)[0] for i in range(b)) - chain_score(
        emissions, transitions, gold).sum()
    assert nll == pytest.approx(direct)
    eps = 1e-5
    for index in np.ndindex(emissions.shape):
        plus, minus = emissions.copy(), emissions.copy()
        plus[index] += eps
        minus[index] -= eps
        numeric = (chain_nll(plus, transitions, gold)[0] - chain_nll(minus, transitions, gold)[0]) / (2 * eps)
        assert d_em[index] == pytest.approx(numeric, abs=1e-6)
    for index in np.ndindex(transitions.shape):
        plus, minus = transitions.copy(), transitions.copy()
        plus[index] += eps
        minus[index] -= eps
        numeric = (chain_nll(emissions, plus, gold)[0] - chain_nll(emissions, minus, gold)[0]) / (2 * eps)
        assert d_tr[index] == pytest.approx(numeric, abs=1e-6)


@settings(max_examples=60, deadline=None)
@given(
    st.tuples(st.integers(1, 4), st.integers(0, 7), st.integers(1, 6)).flatmap(
        lambda s: st.tuples(
            arrays(np.float64, s, elements=st.floats(-40, 40, allow_nan=False)),
            arrays(np.float64, (s[2] + 1, s[2] + 1), elements=st.floats(-40, 40, allow_nan=False)),
        )
    )
)
def test_marginals_are_distributions(scores: tuple[np.ndarray, np.ndarray]) -> None:
    emissions, transitions = scores
    fb = chain_forward_backward(emissions, transitions, pairwise="full")
    assert np.isfinite(fb.log_z).all()
    np.testing.assert_allclose(fb.unary.sum(axis=-1), 1.0, atol=1e-9)
    assert (fb.unary >= 0).all()
    # pairwise marginals agree with the unary ones on both sides
    np.testing.assert_allclose(fb.pairwise.sum(axis=-1), fb.unary[:, :-1], atol=1e-9)
    np.testing.assert_allclose(fb.pairwise.sum(axis=-2), fb.unary[:, 1:], atol=1e-9)


@pytest.fixture(scope="module")
def ewt_tagger(ewt_dir) -> tuple[Tagger, list]:
    train = read_conllu(ewt_dir / "en_ewt-ud-train.conllu")[:400]
    dev = read_conllu(ewt_dir / "en_ewt-ud-dev.conllu")[:300]
    return Tagger.train(train, epochs=4), dev


@pytest.mark.slow
def test_tagger_trained_on_ewt_sample_tags_dev(ewt_tagger) -> None:
    tagger, dev = ewt_tagger
    acc = tagger.accuracy(dev)
    assert acc["upos"] > 86.0  # 400 training sentences (about 6k words): 89.6 when written
    assert acc["xpos"] > 85.0  # 88.6
    for sent, res in zip(dev[:50], tagger.tag(dev[:50]), strict=True):
        n = len(sent.forms)
        assert len(res.upos) == len(res.xpos) == n
        assert res.upos_marginals.shape == (n, len(tagger.upos_labels))
        assert res.xpos_marginals.shape == (n, len(tagger.xpos_labels))
        np.testing.assert_allclose(res.upos_marginals.sum(axis=1), 1.0, atol=1e-9)
        np.testing.assert_allclose(res.xpos_marginals.sum(axis=1), 1.0, atol=1e-9)


@pytest.mark.slow
def test_state_round_trip(ewt_tagger) -> None:
    tagger, dev = ewt_tagger
    meta, arrays_ = tagger.to_state()
    meta = json.loads(json.dumps(meta))  # JSON-serialisable
    loaded = Tagger.from_state(meta, {k: v.copy() for k, v in arrays_.items()})
    for a, b in zip(tagger.tag(dev[:80]), loaded.tag(dev[:80]), strict=True):
        assert (a.upos, a.xpos) == (b.upos, b.xpos)
        np.testing.assert_array_equal(a.upos_marginals, b.upos_marginals)
        np.testing.assert_array_equal(a.xpos_marginals, b.xpos_marginals)
    stored = dict(arrays_, **{k: arrays_[k].astype(np.float16) for k in ("upos_emission", "xpos_emission")})
    half = Tagger.from_state(meta, stored)  # as a pipeline stores them: kept as float16, read exactly
    assert half.crf.upos_emission.dtype == half.crf.xpos_emission.dtype == np.float16
    widened = Tagger.from_state(meta, {k: v.astype(np.float32) if v.dtype == np.float16 else v
                                       for k, v in stored.items()})
    for a, b in zip(half.tag(dev[:80]), widened.tag(dev[:80]), strict=True):
        assert (a.upos, a.xpos) == (b.upos, b.xpos)
        np.testing.assert_array_equal(a.upos_marginals, b.upos_marginals)
        np.testing.assert_array_equal(a.xpos_marginals, b.xpos_marginals)
    for name in ("upos_emission", "xpos_emission"):  # as a pipeline stores them (float16), with one inf
        half = arrays_[name].astype(np.float16)
        half[5, 1] = np.inf
        with pytest.raises(ValueError, match="not finite"):
            Tagger.from_state(meta, dict(arrays_, **{name: half}))
    bad = dict(arrays_, transition=arrays_["transition"][:-1])
    with pytest.raises(ValueError, match="shapes"):
        Tagger.from_state(meta, bad)
    with pytest.raises(ValueError, match="not a crf-tagger"):
        Tagger.from_state(dict(meta, format="other"), arrays_)
    with pytest.raises(ValueError):
        Tagger.from_state(meta, {k: v for k, v in arrays_.items() if k != "udict_keys"})


@pytest.mark.slow
def test_empty_and_single_word_sentences(ewt_tagger) -> None:
    tagger, dev = ewt_tagger

    class Words:
        def __init__(self, forms: list[str]) -> None:
            self.forms = forms

    res = tagger.tag([Words([]), Words(["Hello"]), dev[0]])
    assert res[0].upos == [] and res[0].upos_marginals.shape == (0, len(tagger.upos_labels))
    assert len(res[1].upos) == 1 and res[2].upos == tagger.tag([dev[0]])[0].upos


# --- jackknifing -----------------------------------------------------------------------------------------

_NONCE = ["blick", "dax", "fep", "gorp", "kiki", "lorp", "mip", "nuz", "pilk", "quorf"]


def _nonce_treebank() -> list:
    """Ten sentences; sentence i holds a word found nowhere else whose UPOS/XPOS ``T{i}`` is also found
    nowhere else, so only a model that saw sentence i can ever output ``T{i}``."""
    blocks = []
    for i, word in enumerate(_NONCE):
        rows = [("the", "DET", "DT"), ("dog", "NOUN", "NN"), ("saw", "VERB", "VBD"),
                (word, f"T{i}", f"T{i}"), (".", "PUNCT", ".")]
        lines = [f"# sent_id = s{i}", f"# text = the dog saw {word} ."]
        heads = [2, 3, 0, 3, 3]
        for k, ((form, upos, xpos), head) in enumerate(zip(rows, heads, strict=True), 1):
            lines.append(f"{k}\t{form}\t{form}\t{upos}\t{xpos}\t_\t{head}\tdep\t_\t_")
        blocks.append("\n".join(lines) + "\n")
    return list(iter_conllu(io.StringIO("\n".join(blocks) + "\n")))


def test_fold_bounds_cover_everything() -> None:
    for n, k in [(10, 5), (11, 5), (3, 3), (12544, 5)]:
        bounds = fold_bounds(n, k)
        assert bounds[0][0] == 0 and bounds[-1][1] == n and len(bounds) == k
        assert all(a[1] == b[0] for a, b in itertools.pairwise(bounds))
        sizes = [b - a for a, b in bounds]
        assert max(sizes) - min(sizes) <= 1


def test_jackknife_tags_each_fold_with_a_model_that_did_not_see_it() -> None:
    gold = _nonce_treebank()
    kwargs = {"epochs": 6, "feature_min_count": 1}  # keep the once-seen nonce-word features
    # control: a model that saw every sentence does learn each nonce tag, so a leak would show
    full = Tagger.train(gold, **kwargs).tag(gold)
    assert sum(r.upos[3] == f"T{i}" for i, r in enumerate(full)) >= 8
    out = jackknife_tags(gold, folds=5, seed=0, train_kwargs=kwargs)
    assert len(out) == len(gold)
    for i, (src, new) in enumerate(zip(gold, out, strict=True)):
        assert new is not src and new.upos is not src.upos and new.lines is not src.lines
        assert new.forms == src.forms and new.lemmas == src.lemmas and new.deprels == src.deprels
        assert new.lines == src.lines and new.misc == src.misc and new.feats == src.feats
        np.testing.assert_array_equal(new.heads, src.heads)
        assert len(new.upos) == len(new.xpos) == src.n
        assert f"T{i}" not in new.upos and f"T{i}" not in new.xpos  # never seen by its tagger
        assert new.upos[:3] == ["DET", "NOUN", "VERB"]  # the shared words are learnt from the other folds
    # the input is untouched
    assert [s.upos[3] for s in gold] == [f"T{i}" for i in range(len(gold))]


def test_jackknife_draws_come_from_the_fold_tagger() -> None:
    """``jackknife_tag_draws``: the same best tags as ``jackknife_tags`` and, per sentence, ``samples`` draws
    from the posterior of the fold tagger that did not see it (its nonce tag never drawn)."""
    gold = _nonce_treebank()
    kwargs = {"epochs": 6, "feature_min_count": 1}
    best = jackknife_tags(gold, folds=5, seed=0, train_kwargs=kwargs)
    out, draws = jackknife_tag_draws(gold, folds=5, seed=0, train_kwargs=kwargs, samples=3)
    assert [s.upos for s in out] == [s.upos for s in best] and [s.xpos for s in out] == [s.xpos for s in best]
    assert len(draws) == len(gold)
    for i, (src, sampled) in enumerate(zip(gold, draws, strict=True)):
        assert len(sampled) == 3
        for upos, xpos in sampled:
            assert len(upos) == len(xpos) == src.n and f"T{i}" not in upos
    start, end = fold_bounds(len(gold), 5)[2]
    fold_tagger = Tagger.train([*gold[:start], *gold[end:]], seed=0, **kwargs)
    expected = fold_tagger.tag(gold[start:end], samples=3)
    assert [r.samples for r in expected] == draws[start:end]
    assert jackknife_tag_draws(gold, folds=5, seed=0, train_kwargs=kwargs)[1] == [[] for _ in gold]


def test_jackknife_needs_two_sentences() -> None:
    with pytest.raises(ValueError):
        jackknife_tags(_nonce_treebank()[:1])
