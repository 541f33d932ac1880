"""Eisner inference against brute-force enumeration of projective trees, finite differences,
hypothesis properties and extreme scores."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from trees import assert_valid_tree, score_matrices

from engine.kernels.brute_force import brute_force, enumerate_trees, tree_scores
from engine.kernels.eisner import eisner_inside, eisner_marginals, eisner_viterbi

ROOT_MODES = [False, True]


def tree_score(scores: np.ndarray, heads: np.ndarray) -> float:
    return float(tree_scores(scores, heads[None, :])[0])




@pytest.mark.parametrize("single_root", ROOT_MODES)
@pytest.mark.parametrize("n", range(1, 7))
def test_matches_brute_force(n: int, single_root: bool) -> None:
    rng = np.random.default_rng(1000 + 10 * n + single_root)
    for _ in range(4):
        scores = rng.normal(scale=2.0, size=(n + 1, n + 1))
        oracle = brute_force(scores, single_root=single_root, projective=True)
        log_z, marg = eisner_marginals(scores, single_root=single_root)
        assert log_z == pytest.approx(oracle.log_partition, abs=1e-8)
        assert eisner_inside(scores, single_root=single_root) == pytest.approx(log_z, abs=1e-12)
        np.testing.assert_allclose(marg, oracle.marginals, rtol=0, atol=1e-8)
        heads = eisner_viterbi(scores, single_root=single_root)
        assert_valid_tree(heads, n, single_root)
        assert tree_score(scores, heads) == pytest.approx(tree_score(scores, oracle.best_heads), abs=1e-8)


@pytest.mark.parametrize("single_root", ROOT_MODES)
@pytest.mark.parametrize("n", range(2, 7))
def test_forbidden_arcs_match_brute_force(n: int, single_root: bool) -> None:
    """About 40% of the arcs are -inf; the chain ROOT -> 1 -> 2 -> ... -> n keeps a tree possible."""
    rng = np.random.default_rng(2000 + 10 * n + single_root)
    for _ in range(3):
        scores = rng.normal(scale=2.0, size=(n + 1, n + 1))
        scores[rng.random(scores.shape) < 0.4] = -np.inf
        scores[np.arange(n), np.arange(1, n + 1)] = rng.normal(size=n)
        oracle = brute_force(scores, single_root=single_root, projective=True)
        log_z, marg = eisner_marginals(scores, single_root=single_root)
        assert log_z == pytest.approx(oracle.log_partition, abs=1e-8)
        np.testing.assert_allclose(marg, oracle.marginals, rtol=0, atol=1e-8)
        forbidden = np.isneginf(scores)
        assert (marg[forbidden] == 0.0).all()
        heads = eisner_viterbi(scores, single_root=single_root)
        assert_valid_tree(heads, n, single_root)
        assert tree_score(scores, heads) == pytest.approx(tree_score(scores, oracle.best_heads), abs=1e-8)


SINGLE_ROOT_COUNTS = [1, 2, 7, 30, 143, 728]
MULTI_ROOT_COUNTS = [1, 3, 12, 55, 273, 1428]


@pytest.mark.parametrize("n", range(1, 7))
def test_tree_counts_with_zero_potentials(n: int) -> None:
    zeros = np.zeros((n + 1, n + 1))
    single = np.exp(eisner_inside(zeros, single_root=True))
    multi = np.exp(eisner_inside(zeros, single_root=False))
    assert single == pytest.approx(SINGLE_ROOT_COUNTS[n - 1], rel=1e-12)
    assert multi == pytest.approx(MULTI_ROOT_COUNTS[n - 1], rel=1e-12)
    assert len(enumerate_trees(n, single_root=False, projective=True)) == MULTI_ROOT_COUNTS[n - 1]
    assert len(enumerate_trees(n, single_root=True, projective=True)) == SINGLE_ROOT_COUNTS[n - 1]
    # Uniform distribution: marginals are the fraction of trees using each arc.
    trees = enumerate_trees(n, single_root=True, projective=True)
    _, marg = eisner_marginals(zeros, single_root=True)
    for m in range(1, n + 1):
        share = np.bincount(trees[:, m], minlength=n + 1) / len(trees)
        np.testing.assert_allclose(marg[:, m], share, atol=1e-12)


@pytest.mark.parametrize("single_root", ROOT_MODES)
def test_marginals_are_gradient_of_log_partition(single_root: bool) -> None:
    rng = np.random.default_rng(7)
    n = 7
    scores = rng.normal(size=(n + 1, n + 1))
    _, marg = eisner_marginals(scores, single_root=single_root)
    np.testing.assert_allclose(marg[:, 1:].sum(axis=0), 1.0, atol=1e-12)
    assert (marg[:, 0] == 0.0).all() and (np.diag(marg) == 0.0).all()
    eps = 1e-5
    fd = np.zeros_like(marg)
    for h in range(n + 1):
        for m in range(1, n + 1):
            if h == m:
                continue
            up, down = scores.copy(), scores.copy()
            up[h, m] += eps
            down[h, m] -= eps
            fd[h, m] = (eisner_inside(up, single_root=single_root)
                        - eisner_inside(down, single_root=single_root)) / (2 * eps)
    np.testing.assert_allclose(marg, fd, rtol=0, atol=1e-8)


def test_ignored_entries_and_no_mutation() -> None:
    rng = np.random.default_rng(3)
    scores = rng.normal(size=(6, 6))
    before = scores.copy()
    other = scores.copy()
    other[:, 0] = np.nan  # column 0 and the diagonal are ignored, even when NaN
    np.fill_diagonal(other, 1e9)
    for single_root in ROOT_MODES:
        log_z, marg = eisner_marginals(scores, single_root=single_root)
        log_z2, marg2 = eisner_marginals(other, single_root=single_root)
        assert log_z2 == log_z
        np.testing.assert_array_equal(marg2, marg)
        np.testing.assert_array_equal(eisner_viterbi(other, single_root=single_root),
                                      eisner_viterbi(scores, single_root=single_root))
    np.testing.assert_array_equal(scores, before)


def test_invalid_input() -> None:
    for bad in (np.zeros(3), np.zeros((2, 3)), np.zeros((2, 2, 2))):
        with pytest.raises(ValueError, match="square 2-D"):
            eisner_inside(bad, single_root=True)
    with pytest.raises(ValueError, match="at least one word"):
        eisner_marginals(np.zeros((1, 1)), single_root=False)
    for value in (np.nan, np.inf):
        bad = np.zeros((4, 4))
        bad[1, 2] = value
        for f in (eisner_inside, eisner_marginals, eisner_viterbi):
            with pytest.raises(ValueError, match="NaN or \\+inf"):
                f(bad, single_root=False)


def test_no_finite_tree() -> None:
    scores = np.zeros((4, 4))
    scores[0, 1:] = -np.inf  # nothing may attach to ROOT
    for single_root in ROOT_MODES:
        assert eisner_inside(scores, single_root=single_root) == -np.inf
        with pytest.raises(ValueError, match="no projective tree"):
            eisner_marginals(scores, single_root=single_root)
        with pytest.raises(ValueError, match="no projective tree"):
            eisner_viterbi(scores, single_root=single_root)
    # Projectivity alone can rule out every tree: 1 -> 3 and 2 -> 4 cross, ROOT only reaches 1.
    scores = np.full((5, 5), -np.inf)
    scores[0, 1] = scores[1, 3] = scores[2, 4] = scores[3, 2] = 0.0
    assert len(brute_force(scores, single_root=True, projective=False).trees) > 0
    assert eisner_inside(scores, single_root=True) == -np.inf
    with pytest.raises(ValueError, match="no projective tree"):
        eisner_viterbi(scores, single_root=True)


@settings(max_examples=80, deadline=None)
@given(
    score_matrices(15),
    st.booleans(),
)
def test_properties(scores: np.ndarray, single_root: bool) -> None:
    n = scores.shape[0] - 1
    log_z, marg = eisner_marginals(scores, single_root=single_root)
    assert np.isfinite(log_z) and np.isfinite(marg).all()
    assert (marg >= 0).all() and (marg <= 1 + 1e-12).all()
    assert (marg[:, 0] == 0.0).all() and (np.diag(marg) == 0.0).all()
    np.testing.assert_allclose(marg[:, 1:].sum(axis=0), 1.0, atol=1e-9)
    if single_root:
        assert marg[0, 1:].sum() == pytest.approx(1.0, abs=1e-9)
    heads = eisner_viterbi(scores, single_root=single_root)
    assert_valid_tree(heads, n, single_root)
    best = tree_score(scores, heads)
    assert best <= log_z + 1e-9  # Z >= exp(best tree)
    assert log_z <= best + n * np.log(7.0) + 1e-9  # fewer than 7^n projective trees


@pytest.mark.parametrize("single_root", ROOT_MODES)
def test_long_sentence_extreme_scores(single_root: bool) -> None:
    """150 words, scores uniform in [-1e3, 1e3], then 30% of the arcs forbidden."""
    n = 150
    rng = np.random.default_rng(11 + single_root)
    scores = rng.uniform(-1e3, 1e3, size=(n + 1, n + 1))
    for forbid in (False, True):
        if forbid:
            scores[rng.random(scores.shape) < 0.3] = -np.inf
            scores[np.arange(n), np.arange(1, n + 1)] = rng.uniform(-1e3, 1e3, size=n)  # a chain survives
        log_z, marg = eisner_marginals(scores, single_root=single_root)
        assert np.isfinite(log_z) and np.isfinite(marg).all()
        assert (marg >= 0).all()
        np.testing.assert_allclose(marg[:, 1:].sum(axis=0), 1.0, atol=1e-9)
        assert (marg[np.isneginf(scores)] == 0.0).all()
        assert eisner_inside(scores, single_root=single_root) == pytest.approx(log_z, rel=1e-12)
        heads = eisner_viterbi(scores, single_root=single_root)
        assert_valid_tree(heads, n, single_root)
        best = tree_score(scores, heads)
        assert np.isfinite(best)
        assert best <= log_z + 1e-9 * abs(log_z)
        assert log_z <= best + n * np.log(7.0)
        # The mode of a peaked distribution: every Viterbi arc is the most probable head of its word.
        if not forbid:
            assert (marg[heads[1:], np.arange(1, n + 1)] > 0.5).mean() > 0.9
