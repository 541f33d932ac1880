"""k-best projective trees (lazy k-best over the Eisner hypergraph) against brute-force enumeration."""

from __future__ import annotations

import time
from functools import cache

import numpy as np
import pytest
from trees import assert_valid_tree

from engine.kernels.brute_force import enumerate_trees, tree_scores
from engine.kernels.eisner import eisner_viterbi
from engine.kernels.kbest_projective import kbest_projective

ROOT_MODES = [False, True]
SINGLE_ROOT_COUNTS = [1, 2, 7, 30, 143, 728]
MULTI_ROOT_COUNTS = [1, 3, 12, 55, 273, 1428]


@cache
def projective_trees(n: int, single_root: bool) -> np.ndarray:
    return enumerate_trees(n, single_root=single_root, projective=True)


def oracle_scores(scores: np.ndarray, single_root: bool) -> np.ndarray:
    """Brute-force scores of every finite-score projective tree, best first."""
    s = np.sort(tree_scores(scores, projective_trees(scores.shape[0] - 1, single_root)))[::-1]
    return s[np.isfinite(s)]




def check_kbest(scores: np.ndarray, k: int, single_root: bool, *, exact: bool = False) -> list:
    """Run k-best and check it against the oracle; returns the result."""
    n = scores.shape[0] - 1
    before = scores.copy()
    res = kbest_projective(scores, k, single_root=single_root)
    np.testing.assert_array_equal(scores, before)  # input not mutated
    expected = oracle_scores(scores, single_root)[:k]
    got = np.array([s for s, _ in res])
    assert len(res) == len(expected)
    if exact:
        np.testing.assert_array_equal(got, expected)
    else:
        np.testing.assert_allclose(got, expected, rtol=0, atol=1e-9)
    assert (np.diff(got) <= 0).all()  # best first
    assert len({tuple(h) for _, h in res}) == len(res)  # distinct trees
    for s, heads in res:
        assert_valid_tree(heads, n, single_root)
        assert isinstance(s, float)
        assert s == pytest.approx(float(tree_scores(scores, heads[None])[0]), abs=1e-9)
    return res


@pytest.mark.parametrize("single_root", ROOT_MODES)
@pytest.mark.parametrize("n", range(1, 7))
def test_matches_brute_force(n: int, single_root: bool) -> None:
    total = len(projective_trees(n, single_root))
    rng = np.random.default_rng(100 + 10 * n + single_root)
    for _ in range(4):
        scores = rng.normal(scale=2.0, size=(n + 1, n + 1))
        results = {k: check_kbest(scores, k, single_root) for k in (1, 3, 10, total + 7)}
        assert len(results[total + 7]) == total
        for k, res in results.items():  # no ties here: every k-best list is a prefix of the longest one
            assert all((a == b).all() for (_, a), (_, b) in zip(res, results[total + 7][:k], strict=True))
        best = eisner_viterbi(scores, single_root=single_root)
        np.testing.assert_array_equal(results[1][0][1], best)


@pytest.mark.parametrize("single_root", ROOT_MODES)
@pytest.mark.parametrize("n", range(1, 7))
def test_forbidden_arcs(n: int, single_root: bool) -> None:
    """About 40% of the arcs are -inf; only finite-score trees come back, all of them for a large k."""
    rng = np.random.default_rng(200 + 10 * n + single_root)
    for trial in range(5):
        scores = rng.normal(scale=2.0, size=(n + 1, n + 1))
        scores[rng.random(scores.shape) < 0.4] = -np.inf
        if trial < 3:  # keep the chain ROOT -> 1 -> ... -> n possible
            scores[np.arange(n), np.arange(1, n + 1)] = rng.normal(size=n)
        finite = len(oracle_scores(scores, single_root))
        for k in (1, 3, 10, 10_000):
            res = check_kbest(scores, k, single_root)
            assert len(res) == min(k, finite)
            assert all(np.isfinite(s) for s, _ in res)


@pytest.mark.parametrize("single_root", ROOT_MODES)
def test_no_finite_tree_returns_empty(single_root: bool) -> None:
    scores = np.zeros((5, 5))
    scores[0, :] = -np.inf  # no word may attach to ROOT
    assert kbest_projective(scores, 5, single_root=single_root) == []


@pytest.mark.parametrize("single_root", ROOT_MODES)
@pytest.mark.parametrize("n", range(2, 7))
def test_integer_scores_with_ties(n: int, single_root: bool) -> None:
    """Small integer scores: many ties. Scores must match exactly; at a tie any tree may be chosen."""
    trees = projective_trees(n, single_root)
    rng = np.random.default_rng(300 + 10 * n + single_root)
    for _ in range(4):
        scores = rng.integers(-2, 3, size=(n + 1, n + 1)).astype(np.float64)
        for k in (1, 3, 10, len(trees) + 1):
            res = check_kbest(scores, k, single_root, exact=True)
        assert {tuple(h) for _, h in res} == {tuple(h) for h in trees}


@pytest.mark.parametrize("single_root", ROOT_MODES)
@pytest.mark.parametrize("n", range(1, 7))
def test_all_trees_counts(n: int, single_root: bool) -> None:
    """Zero scores (everything tied), k beyond the number of projective trees: every tree once."""
    count = (SINGLE_ROOT_COUNTS if single_root else MULTI_ROOT_COUNTS)[n - 1]
    res = kbest_projective(np.zeros((n + 1, n + 1)), 10 * count, single_root=single_root)
    assert len(res) == count
    assert {tuple(h) for _, h in res} == {tuple(h) for h in projective_trees(n, single_root)}
    assert all(s == 0.0 for s, _ in res)


def test_validation() -> None:
    ok = np.zeros((3, 3))
    for bad in (np.zeros((3, 4)), np.zeros(3), np.zeros((1, 1))):
        with pytest.raises(ValueError):
            kbest_projective(bad, 1, single_root=True)
    for value in (np.nan, np.inf):
        scores = ok.copy()
        scores[1, 2] = value
        with pytest.raises(ValueError):
            kbest_projective(scores, 1, single_root=False)
    for k in (0, -1, 1.5, True, "3", None):
        with pytest.raises(ValueError):
            kbest_projective(ok, k, single_root=False)  # type: ignore[arg-type]
    ignored = ok.copy()
    ignored[:, 0] = np.nan  # column 0 and the diagonal are ignored
    np.fill_diagonal(ignored, np.inf)
    before = ignored.copy()
    res = kbest_projective(ignored, np.int64(100), single_root=False)
    assert len(res) == MULTI_ROOT_COUNTS[1]
    np.testing.assert_array_equal(ignored, before)


@pytest.mark.parametrize("single_root", ROOT_MODES)
def test_forty_words(single_root: bool) -> None:
    """n = 40: agrees with Viterbi, valid distinct trees in order; generous timing bound (target < 50 ms)."""
    rng = np.random.default_rng(400 + single_root)
    pos = np.arange(41)
    for peaked in (False, True):
        scores = rng.normal(size=(41, 41))
        if peaked:  # trained-parser-like: column-wise log-softmax, sharp, favouring near heads
            scores = 3.0 * (2.0 * scores - np.abs(pos[:, None] - pos[None, :]))
            np.fill_diagonal(scores, -np.inf)
            scores -= np.logaddexp.reduce(scores, axis=0, keepdims=True)
            np.fill_diagonal(scores, 0.0)
        kbest_projective(scores, 10, single_root=single_root)  # warm-up
        t0 = time.perf_counter()
        res = kbest_projective(scores, 10, single_root=single_root)
        elapsed = time.perf_counter() - t0
        assert elapsed < 0.5, f"10-best of 40 words took {elapsed:.3f} s"
        assert len(res) == 10 and len({tuple(h) for _, h in res}) == 10
        got = np.array([s for s, _ in res])
        assert (np.diff(got) <= 0).all()
        np.testing.assert_array_equal(res[0][1], eisner_viterbi(scores, single_root=single_root))
        for s, heads in res:
            assert_valid_tree(heads, 40, single_root)
            assert s == pytest.approx(float(tree_scores(scores, heads[None])[0]), abs=1e-9)
        longer = kbest_projective(scores, 30, single_root=single_root)
        np.testing.assert_allclose([s for s, _ in longer[:10]], got, rtol=0, atol=1e-12)
