"""Matrix-Tree inference against brute-force enumeration, finite differences and extreme scores."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from trees import score_matrices

from engine.kernels.brute_force import brute_force
from engine.kernels.matrix_tree import (
    _solve_many,
    _solve_one,
    _word_scores,
    matrix_tree_log_partition,
    matrix_tree_marginals,
    matrix_tree_word_marginals,
    matrix_tree_word_marginals_many,
)
from engine.kernels.tree_elimination import eliminate_log_partition, eliminate_marginals

ROOT_MODES = [False, True]


@pytest.mark.parametrize("single_root", ROOT_MODES)
@pytest.mark.parametrize("n", range(1, 7))
def test_matrix_tree_matches_brute_force(n: int, single_root: bool) -> None:
    rng = np.random.default_rng(n + 10 * single_root)
    for _ in range(3):
        scores = rng.normal(scale=2.0, size=(n + 1, n + 1))
        oracle = brute_force(scores, single_root=single_root, projective=False)
        log_z, marg = matrix_tree_marginals(scores, single_root=single_root)
        assert log_z == pytest.approx(oracle.log_partition, abs=1e-9)
        np.testing.assert_allclose(marg, oracle.marginals, atol=1e-9)
        assert matrix_tree_log_partition(scores, single_root=single_root) == pytest.approx(log_z, abs=1e-12)


@pytest.mark.parametrize("single_root", ROOT_MODES)
@pytest.mark.parametrize("n", range(1, 7))
def test_elimination_matches_brute_force(n: int, single_root: bool) -> None:
    rng = np.random.default_rng(100 + n + 10 * single_root)
    scores = rng.normal(scale=3.0, size=(n + 1, n + 1))
    oracle = brute_force(scores, single_root=single_root, projective=False)
    log_z, marg = eliminate_marginals(scores, single_root=single_root)
    assert log_z == pytest.approx(oracle.log_partition, abs=1e-9)
    np.testing.assert_allclose(marg, oracle.marginals, atol=1e-9)
    assert eliminate_log_partition(scores, single_root=single_root) == pytest.approx(log_z, abs=1e-12)


@pytest.mark.parametrize("n", range(1, 7))
def test_tree_counts_with_zero_potentials(n: int) -> None:
    zeros = np.zeros((n + 1, n + 1))
    multi = np.exp(matrix_tree_log_partition(zeros, single_root=False))
    single = np.exp(matrix_tree_log_partition(zeros, single_root=True))
    assert round(multi) == (n + 1) ** (n - 1)  # Cayley: rooted trees on n+1 labelled nodes
    assert round(single) == n ** (n - 1)
    assert round(np.exp(eliminate_log_partition(zeros, single_root=True))) == n ** (n - 1)


@pytest.mark.parametrize("single_root", ROOT_MODES)
def test_marginals_are_gradient_of_log_partition(single_root: bool) -> None:
    rng = np.random.default_rng(7)
    n = 5
    scores = rng.normal(size=(n + 1, n + 1))
    _, marg = matrix_tree_marginals(scores, single_root=single_root)
    eps = 1e-6
    for h in range(n + 1):
        for m in range(1, n + 1):
            if h == m:
                continue
            up, down = scores.copy(), scores.copy()
            up[h, m] += eps
            down[h, m] -= eps
            fd = (matrix_tree_log_partition(up, single_root=single_root)
                  - matrix_tree_log_partition(down, single_root=single_root)) / (2 * eps)
            assert marg[h, m] == pytest.approx(fd, abs=1e-7)


def test_batch_equals_single() -> None:
    rng = np.random.default_rng(3)
    scores = rng.normal(size=(4, 7, 7))
    log_z, marg = matrix_tree_marginals(scores, single_root=True)
    for b in range(4):
        lz, m = matrix_tree_marginals(scores[b], single_root=True)
        assert log_z[b] == pytest.approx(lz)
        np.testing.assert_allclose(marg[b], m, atol=1e-12)


@pytest.mark.parametrize("single_root", ROOT_MODES)
def test_single_sentence_path_equals_the_batch_path(single_root: bool) -> None:
    """One (n+1, n+1) matrix takes a leaner path (no batch axis, one LAPACK LU of K^T where the batch
    takes slogdet and inv); it computes the same numbers up to rounding, and hands sentences whose LU
    result cannot be trusted to the same fallback (whose numbers are then equal bit for bit). The
    marginals without log Z, from the word columns (BP's tree factor), are those of the single path."""
    rng = np.random.default_rng(17)
    for n, scale in ((1, 1.0), (3, 2.0), (9, 3.0), (40, 5.0), (60, 1e3)):
        scores = rng.normal(scale=scale, size=(n + 1, n + 1))
        scores[rng.random((n + 1, n + 1)) < 0.2] = -np.inf
        scores[0, 1:] = rng.normal(size=n)  # every word keeps a head
        log_z, marg = matrix_tree_marginals(scores, single_root=single_root)
        batch_z, batch_m = matrix_tree_marginals(scores[None], single_root=single_root)
        trusted = _solve_one(_word_scores(scores), single_root) is not None
        assert trusted == (n < 60)  # the last case goes to the fallback on both paths
        assert log_z == pytest.approx(batch_z[0], rel=1e-14 if trusted else 0.0)
        np.testing.assert_allclose(marg, batch_m[0], rtol=0.0, atol=1e-12 if trusted else 0.0)
        np.testing.assert_array_equal(matrix_tree_word_marginals(_word_scores(scores), single_root=single_root), marg)


@pytest.mark.parametrize("single_root", ROOT_MODES)
def test_a_stack_of_several_lengths_gives_each_sentence_its_marginals(single_root: bool) -> None:
    """Shorter sentences padded to the stack's length (``lengths``): the padding words have no arc, their
    block of K is the identity, and each sentence's marginals are its own (zero on the padding), including a
    sentence whose LU result cannot be trusted (it takes the fallback on its own words)."""
    rng = np.random.default_rng(23)
    size = 60
    lengths = np.array([1, 4, 9, 33, 60, 60])
    words = np.full((len(lengths), size + 1, size), -np.inf)
    alone = []
    for b, (n, scale) in enumerate(zip(lengths, (1.0, 2.0, 3.0, 5.0, 5.0, 1e3), strict=True)):
        scores = rng.normal(scale=scale, size=(n + 1, n + 1))
        scores[rng.random((n + 1, n + 1)) < 0.2] = -np.inf
        scores[0, 1:] = rng.normal(size=n)  # every word keeps a head
        own = _word_scores(scores)
        words[b, :n + 1, :n] = own
        alone.append(matrix_tree_word_marginals(own, single_root=single_root))
    assert _solve_one(_word_scores(np.pad(words[-1], ((0, 0), (1, 0)), constant_values=-np.inf)),
                      single_root) is None  # the last sentence is the fallback's
    assert _solve_many(words[:5], single_root, lengths[:5])[1].all()  # the others are the stack's
    marg = matrix_tree_word_marginals_many(words, single_root=single_root, lengths=lengths)
    assert np.isfinite(marg).all()
    for b, n in enumerate(lengths):
        np.testing.assert_allclose(marg[b, :n + 1, :n + 1], alone[b], rtol=0.0, atol=1e-12)
        assert not marg[b, n + 1:].any() and not marg[b, :, n + 1:].any()


@pytest.mark.parametrize("single_root", ROOT_MODES)
def test_long_sentence_extreme_scores(single_root: bool) -> None:
    """150 words, scores uniform in [-1e3, 1e3]: finite, normalised, and equal to the log-space
    elimination (which never subtracts, so it is the accurate reference here)."""
    rng = np.random.default_rng(11)
    for _ in range(3):
        scores = rng.uniform(-1e3, 1e3, size=(151, 151))
        log_z, marg = matrix_tree_marginals(scores, single_root=single_root)
        ref_z, ref_m = eliminate_marginals(scores, single_root=single_root)
        assert np.isfinite(log_z) and np.isfinite(marg).all()
        np.testing.assert_allclose(marg[:, 1:].sum(axis=0), 1.0, atol=1e-9)
        assert log_z == pytest.approx(ref_z, rel=1e-12)
        np.testing.assert_allclose(marg, ref_m, atol=1e-6)


def test_single_root_below_multi_root_under_extreme_scores() -> None:
    """Single-root trees are a subset of all trees, however extreme the scores."""
    rng = np.random.default_rng(5)
    for _ in range(5):
        scores = rng.uniform(-1e3, 1e3, size=(151, 151))
        assert matrix_tree_log_partition(scores, single_root=True) <= matrix_tree_log_partition(
            scores, single_root=False) + 1e-9


def test_forbidden_arcs() -> None:
    scores = np.zeros((4, 4))
    scores[0, 2:] = -np.inf  # only word 1 may attach to ROOT
    _, marg = matrix_tree_marginals(scores, single_root=False)
    assert marg[0, 1] == pytest.approx(1.0)
    assert marg[0, 2] == 0.0 and marg[0, 3] == 0.0
    with pytest.raises(ValueError, match="no allowed head"):
        bad = np.zeros((3, 3))
        bad[:, 2] = -np.inf
        matrix_tree_marginals(bad, single_root=False)
    with pytest.raises(ValueError, match="NaN"):
        matrix_tree_marginals(np.full((3, 3), np.nan), single_root=False)


@settings(max_examples=60, deadline=None)
@given(
    score_matrices(12),
    st.booleans(),
)
def test_marginals_are_distributions(scores: np.ndarray, single_root: bool) -> None:
    before = scores.copy()
    log_z, marg = matrix_tree_marginals(scores, single_root=single_root)
    np.testing.assert_array_equal(scores, before)  # input not mutated
    assert np.isfinite(log_z)
    assert (marg >= 0).all() and (marg <= 1).all()
    np.testing.assert_allclose(marg[:, 1:].sum(axis=0), 1.0, atol=1e-8)
    if single_root:
        assert marg[0, 1:].sum() == pytest.approx(1.0, abs=1e-8)


@pytest.mark.parametrize("single_root", ROOT_MODES)
def test_elimination_with_forbidden_arcs_matches_brute_force(single_root: bool) -> None:
    """Pruned arcs (-inf), including words that only ROOT may head: the elimination order adapts."""
    rng = np.random.default_rng(21)
    checked = 0
    for _ in range(60):
        n = int(rng.integers(2, 6))
        scores = rng.normal(size=(n + 1, n + 1))
        scores[rng.random((n + 1, n + 1)) < 0.4] = -np.inf
        scores[0, int(rng.integers(1, n + 1))] = 0.0
        oracle = brute_force(scores, single_root=single_root, projective=False)
        if not np.isfinite(oracle.log_partition):
            with pytest.raises(ValueError, match="no .*tree is possible"):
                eliminate_marginals(scores, single_root=single_root)
            continue
        log_z, marg = eliminate_marginals(scores, single_root=single_root)
        assert log_z == pytest.approx(oracle.log_partition, abs=1e-9)
        np.testing.assert_allclose(marg, oracle.marginals, atol=1e-9)
        checked += 1
    assert checked > 20
    only_root = np.zeros((4, 4))
    only_root[1:, 2] = -np.inf  # word 2 can only attach to ROOT, so it is the single root child
    _, marg = eliminate_marginals(only_root, single_root=True)
    assert marg[0, 2] == pytest.approx(1.0)
