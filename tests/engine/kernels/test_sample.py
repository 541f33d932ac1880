"""Exact tree sampling (Wilson / sequential Matrix-Tree / Eisner FFBS) against brute-force enumeration."""

from __future__ import annotations

import time

import numpy as np
import pytest
from scipy.stats import chisquare

import engine.kernels.sample as sample_mod
from engine.kernels.brute_force import BruteForce, brute_force, is_projective
from engine.kernels.sample import sample_trees

MODES = [(single_root, projective) for single_root in (False, True) for projective in (False, True)]
NUM = 20_000


def codes(trees: np.ndarray) -> np.ndarray:
    """One integer per tree (heads of words 1..n in base n+1)."""
    n = trees.shape[1] - 1
    return trees[:, 1:] @ (n + 1) ** np.arange(n, dtype=np.int64)


def assert_valid(trees: np.ndarray, n: int, single_root: bool, projective: bool) -> None:
    assert trees.dtype == np.int64 and trees.shape[1] == n + 1
    assert (trees[:, 0] == -1).all()
    words = np.arange(1, n + 1)
    assert ((trees[:, 1:] >= 0) & (trees[:, 1:] <= n) & (trees[:, 1:] != words)).all()
    cur = np.tile(words, (len(trees), 1))
    for _ in range(n):  # every word reaches ROOT within n steps: no cycle
        cur = np.where(cur == 0, 0, np.take_along_axis(trees, cur, axis=1))
    assert (cur == 0).all()
    if single_root:
        assert ((trees[:, 1:] == 0).sum(axis=1) == 1).all()
    if projective:
        assert all(is_projective(t) for t in np.unique(trees, axis=0))


def tree_counts(bf: BruteForce, trees: np.ndarray) -> np.ndarray:
    """Counts per enumerated tree; every sample must be one of them."""
    ref = codes(bf.trees)
    order = np.argsort(ref)
    pos = np.searchsorted(ref[order], codes(trees))
    assert (pos < len(ref)).all() and (ref[order][np.minimum(pos, len(ref) - 1)] == codes(trees)).all()
    return np.bincount(order[pos], minlength=len(ref))


def chi_square_p(bf: BruteForce, trees: np.ndarray) -> float:
    """Pearson chi-square of tree counts against exact probabilities; rare trees pooled (expected >= 5)."""
    obs, exp = tree_counts(bf, trees).astype(float), np.exp(bf.log_probs) * len(trees)
    order = np.argsort(-exp)
    obs, exp = obs[order], exp[order]
    k = int((exp >= 5).sum())
    obs = np.append(obs[:k], obs[k:].sum())
    exp = np.append(exp[:k], exp[k:].sum())
    if exp[-1] < 5:  # pooled cell too small: merge it into the smallest kept one
        obs, exp = np.append(obs[:-2], obs[-2:].sum()), np.append(exp[:-2], exp[-2:].sum())
    return float(chisquare(obs, exp * obs.sum() / exp.sum()).pvalue)


def arc_frequencies(trees: np.ndarray) -> np.ndarray:
    n = trees.shape[1] - 1
    freq = np.zeros((n + 1, n + 1))
    np.add.at(freq, (trees[:, 1:], np.tile(np.arange(1, n + 1), (len(trees), 1))), 1.0)
    return freq / len(trees)


def check_distribution(scores: np.ndarray, single_root: bool, projective: bool, seed: int) -> float:
    n = scores.shape[0] - 1
    bf = brute_force(scores, single_root=single_root, projective=projective)
    trees = sample_trees(scores, NUM, single_root=single_root, projective=projective, rng=seed)
    assert_valid(trees, n, single_root, projective)
    p = chi_square_p(bf, trees)
    print(f"n={n} single_root={single_root} projective={projective}: chi-square p = {p:.4f}")
    assert p > 1e-3
    assert np.abs(arc_frequencies(trees) - bf.marginals).max() < 0.02
    return p


@pytest.mark.parametrize("n", [3, 4, 5])
@pytest.mark.parametrize(("single_root", "projective"), MODES)
def test_tree_and_arc_frequencies_match_brute_force(n: int, single_root: bool, projective: bool) -> None:
    scores = np.random.default_rng(100 + n).normal(scale=1.5, size=(n + 1, n + 1))
    check_distribution(scores, single_root, projective, seed=n)


@pytest.mark.parametrize("n", [4, 5])
@pytest.mark.parametrize("single_root", [False, True])
def test_sequential_fallback_is_exact(monkeypatch: pytest.MonkeyPatch, n: int, single_root: bool) -> None:
    """With no step budget every non-projective sample comes from conditional Matrix-Tree marginals."""
    monkeypatch.setattr(sample_mod, "_STEP_BUDGET", -(10**9))
    calls = []
    real = sample_mod._sequential
    monkeypatch.setattr(sample_mod, "_sequential", lambda *a: calls.append(a[1]) or real(*a))
    scores = np.random.default_rng(200 + n).normal(scale=1.5, size=(n + 1, n + 1))
    check_distribution(scores, single_root, False, seed=7)
    assert calls == [NUM]


@pytest.mark.parametrize(("single_root", "projective"), MODES)
def test_seed_reproducible(single_root: bool, projective: bool) -> None:
    scores = np.random.default_rng(1).normal(size=(9, 9))
    kw = {"single_root": single_root, "projective": projective}
    a = sample_trees(scores, 50, rng=123, **kw)
    assert np.array_equal(a, sample_trees(scores, 50, rng=123, **kw))
    assert np.array_equal(a, sample_trees(scores, 50, rng=np.random.default_rng(123), **kw))
    assert not np.array_equal(a, sample_trees(scores, 50, rng=124, **kw))
    assert_valid(a, 8, single_root, projective)
    assert sample_trees(scores, 0, rng=1, **kw).shape == (0, 9)
    assert np.array_equal(sample_trees(np.zeros((2, 2)), 3, rng=1, **kw), [[-1, 0]] * 3)


@pytest.mark.parametrize(("single_root", "projective"), MODES)
def test_forbidden_arcs_never_sampled(single_root: bool, projective: bool) -> None:
    n, rng = 6, np.random.default_rng(5)
    scores = rng.normal(size=(n + 1, n + 1))
    scores[rng.random((n + 1, n + 1)) < 0.5] = -np.inf
    scores[np.arange(n), np.arange(1, n + 1)] = 0.0  # a chain 0 -> 1 -> ... -> n keeps a tree possible
    before = scores.copy()
    trees = sample_trees(scores, 5000, single_root=single_root, projective=projective, rng=0)
    assert np.array_equal(scores, before)  # input not mutated
    assert_valid(trees, n, single_root, projective)
    assert np.isfinite(scores[trees[:, 1:], np.arange(1, n + 1)]).all()
    bf = brute_force(scores, single_root=single_root, projective=projective)
    assert np.abs(arc_frequencies(trees) - bf.marginals).max() < 0.04


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize(("single_root", "projective"), MODES)
def test_extreme_scores_terminate_and_give_the_map_tree(seed: int, single_root: bool, projective: bool) -> None:
    n, num = 6, 500
    scores = np.random.default_rng(seed).normal(scale=100.0, size=(n + 1, n + 1))
    bf = brute_force(scores, single_root=single_root, projective=projective)
    start = time.perf_counter()
    trees = sample_trees(scores, num, single_root=single_root, projective=projective, rng=seed)
    assert time.perf_counter() - start < 5.0
    assert_valid(trees, n, single_root, projective)
    p_map = float(np.exp(bf.log_probs.max()))
    freq = float((trees == bf.best_heads).all(axis=1).mean())
    assert abs(freq - p_map) < 4 * np.sqrt(p_map * (1 - p_map) / num) + 0.01
    if p_map > 0.99:
        assert freq > 0.97
    assert (bf.log_probs[tree_counts(bf, trees) > 0] > -30).all()  # nothing absurdly unlikely


@pytest.mark.parametrize("single_root", [False, True])
def test_dominant_cycle_uses_the_fallback(monkeypatch: pytest.MonkeyPatch, single_root: bool) -> None:
    """Words 1 <-> 2 prefer each other by e^100 over anything that leads to ROOT: Wilson's walk would be
    trapped for ~e^100 steps, so the sampler must switch to the exact fallback, and stay exact."""
    n = 5
    scores = np.random.default_rng(3).normal(size=(n + 1, n + 1))
    scores[0] -= 100.0
    scores[1, 2] = scores[2, 1] = 100.0
    calls = []
    real = sample_mod._sequential
    monkeypatch.setattr(sample_mod, "_sequential", lambda *a: calls.append(a[1]) or real(*a))
    start = time.perf_counter()
    trees = sample_trees(scores, 5000, single_root=single_root, projective=False, rng=1)
    assert time.perf_counter() - start < 5.0
    # multi-root: every sample; single-root: those whose ROOT child is not on the cycle (else no trap)
    assert calls[0] == 5000 if not single_root else 0 < calls[0] < 5000
    bf = brute_force(scores, single_root=single_root, projective=False)
    assert_valid(trees, n, single_root, False)
    p = chi_square_p(bf, trees)
    print(f"dominant cycle, single_root={single_root}: chi-square p = {p:.4f}")
    assert p > 1e-3
    assert np.abs(arc_frequencies(trees) - bf.marginals).max() < 0.03


def test_step_cap_redraws(monkeypatch: pytest.MonkeyPatch) -> None:
    """A (test-only) tiny step cap aborts most walks; the aborted samples are redrawn as valid trees."""
    monkeypatch.setattr(sample_mod, "_CAP_FACTOR", 0)
    calls = []
    real = sample_mod._sequential
    monkeypatch.setattr(sample_mod, "_sequential", lambda *a: calls.append(a[1]) or real(*a))
    scores = np.random.default_rng(0).normal(size=(11, 11))
    for single_root in (False, True):
        trees = sample_trees(scores, 200, single_root=single_root, projective=False, rng=0)
        assert_valid(trees, 10, single_root, False)
        assert 0 < calls[-1] < 200


@pytest.mark.parametrize("n", [40])
@pytest.mark.parametrize(("single_root", "projective"), MODES)
def test_timing_40_words(n: int, single_root: bool, projective: bool) -> None:
    """100 samples of a 40-word sentence: normal scores and peaked trained-parser-like scores."""
    rng = np.random.default_rng(0)
    gold = np.array([0] + [int(rng.integers(0, m)) for m in range(1, n + 1)])  # each word under an earlier one
    peaked = rng.normal(size=(n + 1, n + 1))
    peaked[gold[1:], np.arange(1, n + 1)] += 5.0
    extreme = rng.normal(scale=100.0, size=(n + 1, n + 1))
    for scores, limit in ((rng.normal(size=(n + 1, n + 1)), 0.5), (peaked, 0.5), (extreme, 30.0)):
        best = np.inf
        for rep in range(2):
            start = time.perf_counter()
            trees = sample_trees(scores, 100, single_root=single_root, projective=projective, rng=rep)
            best = min(best, time.perf_counter() - start)
        assert_valid(trees, n, single_root, projective)
        assert best < limit


@pytest.mark.parametrize(
    ("scores", "num", "kwargs", "match"),
    [
        (np.zeros((3, 4)), 1, {}, "square"),
        (np.zeros((1, 1)), 1, {}, "at least one word"),
        (np.zeros(3), 1, {}, "square"),
        (np.full((3, 3), np.nan), 1, {}, "NaN"),
        (np.array([[0, np.inf], [0, 0]]), 1, {}, r"\+inf"),
        (np.zeros((3, 3)), -1, {}, "non-negative integer"),
        (np.zeros((3, 3)), 2.0, {}, "non-negative integer"),
        (np.zeros((3, 3)), True, {}, "non-negative integer"),
        (np.zeros((3, 3)), 1, {"rng": "seed"}, "rng must be"),
        (np.zeros((3, 3)), 1, {"rng": 1.5}, "rng must be"),
    ],
)
def test_invalid_input(scores: np.ndarray, num: object, kwargs: dict, match: str) -> None:
    for projective in (False, True):
        with pytest.raises(ValueError, match=match):
            sample_trees(scores, num, single_root=True, projective=projective, **kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize(("single_root", "projective"), MODES)
def test_no_possible_tree(single_root: bool, projective: bool) -> None:
    scores = np.zeros((4, 4))
    scores[:, 2] = -np.inf  # word 2 has no allowed head
    with pytest.raises(ValueError, match="no .*tree"):
        sample_trees(scores, 5, single_root=single_root, projective=projective, rng=0)
    scores = np.zeros((4, 4))
    scores[1:, 1:] = -np.inf  # only ROOT arcs: several ROOT children are needed
    if single_root:
        with pytest.raises(ValueError, match="no .*tree"):
            sample_trees(scores, 5, single_root=True, projective=projective, rng=0)
    else:
        assert (sample_trees(scores, 5, single_root=False, projective=projective, rng=0)[:, 1:] == 0).all()
