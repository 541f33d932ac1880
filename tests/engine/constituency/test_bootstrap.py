"""The paired bootstrap of EVALB F1 differences (``engine.constituency.bootstrap``) against direct computation:
EVALB's own totals, the exact bootstrap distribution of tiny sets (every ordered resample enumerated), symmetry."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.constituency.bootstrap import counts, f1_of, paired_bootstrap
from engine.constituency.evalb import SentenceScore, Totals


def _system(rng: np.random.Generator, gold: list[int], lengths: list[int]) -> list[SentenceScore]:
    out = []
    for g, n in zip(gold, lengths, strict=True):
        test = int(rng.integers(0, g + 3))
        matched = int(rng.integers(0, min(g, test) + 1))
        out.append(SentenceScore(length=n, gold=g, test=test, matched=matched, words=n, tags_correct=n))
    return out


def _pair(seed: int, n: int) -> tuple[list[SentenceScore], list[SentenceScore]]:
    rng = np.random.default_rng(seed)
    gold = [int(g) for g in rng.integers(1, 12, size=n)]
    lengths = [int(x) for x in rng.integers(3, 50, size=n)]
    return _system(rng, gold, lengths), _system(rng, gold, lengths)


@settings(max_examples=50, deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(1, 30))
def test_f1_of_summed_counts_is_evalbs_micro_average(seed: int, n: int) -> None:
    a, _ = _pair(seed, n)
    kept = [s for s in a if s.length <= 40]
    assert float(f1_of(counts(a).sum(0))) == pytest.approx(Totals.of(kept).f1, abs=1e-9)
    assert float(f1_of(counts(a, cutoff=None).sum(0))) == pytest.approx(Totals.of(a).f1, abs=1e-9)


def _exact_distribution(a: list[SentenceScore], b: list[SentenceScore]) -> np.ndarray:
    """The difference of every ordered resample of the sentences (each has probability n^-n)."""
    ca, cb = counts(a, None), counts(b, None)
    n = len(ca)
    return np.array([float(f1_of(ca[list(d)].sum(0)) - f1_of(cb[list(d)].sum(0)))
                     for d in itertools.product(range(n), repeat=n)])


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_replicates_follow_the_exact_bootstrap_distribution(seed: int) -> None:
    """For 5 sentences (3,125 ordered resamples) the estimated P(delta* <= 0) and the interval's ends match the
    exact bootstrap distribution: 40,000 replicates give a standard error <= 0.0025 for a probability, and the
    test allows 5 standard errors (false alarm ~ 6e-7 per probability at a fixed seed)."""
    a, b = _pair(seed, 5)
    exact = _exact_distribution(a, b)
    got = paired_bootstrap(a, b, samples=40_000, seed=seed, cutoff=None)
    assert got.delta == pytest.approx(float(f1_of(counts(a, None).sum(0)) - f1_of(counts(b, None).sum(0))))
    assert got.p_not_better == pytest.approx(float(np.mean(exact <= 0)), abs=5 * 0.0025)
    # the interval's ends: the exact distribution puts about 2.5% of its mass beyond each
    assert np.mean(exact < got.low) <= 0.025 + 5 * 0.0025 and np.mean(exact > got.high) <= 0.025 + 5 * 0.0025
    assert np.mean(exact <= got.low) >= 0.025 - 5 * 0.0025 and np.mean(exact >= got.high) >= 0.025 - 5 * 0.0025


def test_identical_systems_differ_by_nothing() -> None:
    a, _ = _pair(7, 40)
    got = paired_bootstrap(a, list(a), samples=500)
    assert (got.delta, got.low, got.high, got.p_not_better, got.p_value) == (0.0, 0.0, 0.0, 1.0, 1.0)
    assert not got.significant


def test_swapping_the_systems_negates_the_difference() -> None:
    a, b = _pair(11, 60)
    ab, ba = paired_bootstrap(a, b, samples=2_000, seed=5), paired_bootstrap(b, a, samples=2_000, seed=5)
    assert ba.delta == pytest.approx(-ab.delta, abs=1e-12)
    assert (ba.low, ba.high) == pytest.approx((-ab.high, -ab.low), abs=1e-9)


def test_a_system_better_on_every_sentence_is_significantly_better() -> None:
    _, b = _pair(13, 80)
    better = [SentenceScore(s.length, s.gold, s.test, min(s.matched + 1, s.gold, s.test), s.words, s.tags_correct)
              for s in b]
    assert sum(x.matched > y.matched for x, y in zip(better, b, strict=True)) > 40
    got = paired_bootstrap(better, b, samples=2_000)
    assert got.delta > 0 and got.low > 0 and got.significant and got.p_not_better == 0.0


def test_the_cutoff_drops_long_sentences_from_both() -> None:
    a, b = _pair(17, 50)
    long_a = [SentenceScore(60, s.gold, s.test, 0, s.words, 0) for s in a[:5]]
    long_b = [SentenceScore(60, s.gold, s.test, s.matched, s.words, 0) for s in a[:5]]
    short = paired_bootstrap(a, b, samples=300, seed=3)
    with_long = paired_bootstrap(a + long_a, b + long_b, samples=300, seed=3)
    assert with_long.sentences == short.sentences == sum(s.length <= 40 for s in a)
    assert with_long.delta == short.delta


def test_mismatched_inputs_are_refused() -> None:
    a, b = _pair(19, 10)
    with pytest.raises(ValueError, match="same sentences"):
        paired_bootstrap(a, b[:-1])
    other = [SentenceScore(s.length, s.gold + 1, s.test, s.matched, s.words, s.tags_correct) for s in b]
    with pytest.raises(ValueError, match="different gold"):
        paired_bootstrap(a, other)
    with pytest.raises(ValueError, match="level"):
        paired_bootstrap(a, b, level=1.5)
