"""Exact k-best non-projective trees against brute force, an independent Lawler-Murty reference, and edge cases."""

from __future__ import annotations

import functools
import heapq
import time

import numpy as np
import pytest

from engine.kernels.brute_force import enumerate_trees, tree_scores
from engine.kernels.kbest_nonprojective import kbest_arborescences
from engine.kernels.mst import is_tree, max_spanning_arborescence

ROOT_MODES = [False, True]
KINDS = ["normal", "neg_inf", "int_ties"]


@functools.cache
def all_trees(n: int, single_root: bool) -> np.ndarray:
    return enumerate_trees(n, single_root=single_root, projective=False)


def make_scores(kind: str, n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if kind == "normal":
        return rng.normal(size=(n + 1, n + 1))
    if kind == "neg_inf":
        s = rng.normal(size=(n + 1, n + 1))
        s[rng.random(s.shape) < 0.35] = -np.inf
        return s
    s = rng.integers(-1, 2, size=(n + 1, n + 1)).astype(np.float64)  # many exact ties
    s[rng.random(s.shape) < 0.15] = -np.inf
    return s


def peaked_scores(rng: np.random.Generator, n: int) -> np.ndarray:
    """Like a trained parser's log-marginals: a random tree near log(0.6..0.99), other arcs far below."""
    order = rng.permutation(n) + 1
    heads = np.zeros(n + 1, dtype=np.int64)
    for i in range(1, n):
        heads[order[i]] = order[rng.integers(0, i)]
    s = rng.normal(-6.0, 2.0, size=(n + 1, n + 1))
    s[heads[1:], np.arange(1, n + 1)] = np.log(rng.uniform(0.6, 0.99, size=n))
    return s


def brute_top(scores: np.ndarray, single_root: bool) -> np.ndarray:
    """All finite tree scores, best first."""
    s = tree_scores(scores, all_trees(scores.shape[0] - 1, single_root))
    return np.sort(s[np.isfinite(s)])[::-1]


def check_result(scores: np.ndarray, result: list[tuple[float, np.ndarray]], single_root: bool) -> np.ndarray:
    """Every entry a valid, distinct (single-root) tree with its true score, best first; returns the scores."""
    n = scores.shape[0] - 1
    seen = set()
    for score, heads in result:
        assert isinstance(score, float)
        assert heads.dtype == np.int64 and heads.shape == (n + 1,) and heads[0] == -1
        assert is_tree(heads)
        if single_root:
            assert np.count_nonzero(heads[1:] == 0) == 1
        assert np.isclose(score, tree_scores(scores, heads[None])[0], rtol=1e-12, atol=1e-12)
        assert heads.tobytes() not in seen
        seen.add(heads.tobytes())
    got = np.array([score for score, _ in result])
    assert np.all(np.diff(got) <= 1e-12)
    return got


@pytest.mark.parametrize("single_root", ROOT_MODES)
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("n", [*range(1, 6), pytest.param(6, marks=pytest.mark.slow)])
def test_matches_brute_force(n: int, kind: str, single_root: bool) -> None:
    for seed in range(4):
        scores = make_scores(kind, n, seed)
        ref = brute_top(scores, single_root)
        ks = [1, 3, 10] + ([len(ref) + 1, len(ref) + 7] if n <= 5 or kind != "normal" else [])
        for k in ks:
            got = check_result(scores, kbest_arborescences(scores, k, single_root=single_root), single_root)
            assert len(got) == min(k, len(ref))
            np.testing.assert_allclose(got, ref[:k], rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("single_root", ROOT_MODES)
@pytest.mark.slow
def test_every_tree_of_six_words(single_root: bool) -> None:
    scores = make_scores("normal", 6, 7)
    trees = all_trees(6, single_root)
    result = kbest_arborescences(scores, len(trees) + 100, single_root=single_root)
    got = check_result(scores, result, single_root)
    assert len(got) == len(trees)
    np.testing.assert_allclose(got, brute_top(scores, single_root), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("single_root", ROOT_MODES)
def test_all_ties_returns_every_tree_once(single_root: bool) -> None:
    n = 4
    scores = np.zeros((n + 1, n + 1), dtype=np.int64)  # integer input, every tree scores 0
    trees = all_trees(n, single_root)
    result = kbest_arborescences(scores, 10_000, single_root=single_root)
    check_result(scores.astype(np.float64), result, single_root)
    assert {h.tobytes() for _, h in result} == {h.tobytes() for h in trees}
    assert all(score == 0.0 for score, _ in result)


def lawler_reference(scores: np.ndarray, k: int, single_root: bool) -> list[float]:
    """Eager Lawler-Murty partitioning over the exact MST of mst.py: a slow, independent check."""

    def best(w: np.ndarray) -> tuple[float, np.ndarray] | None:
        try:
            heads = max_spanning_arborescence(w, single_root=single_root)
        except ValueError:
            return None
        return float(tree_scores(w, heads[None])[0]), heads

    queue: list[tuple[float, int, np.ndarray, np.ndarray]] = []
    if (sol := best(scores)) is not None:
        queue.append((-sol[0], 0, scores, sol[1]))
    out: list[float] = []
    tick = 1
    while queue and len(out) < k:
        neg, _, w, heads = heapq.heappop(queue)
        out.append(-neg)
        w = w.copy()
        for m in range(1, w.shape[0]):  # child m: the arcs of heads before m forced, its arc into m forbidden
            child = w.copy()
            child[heads[m], m] = -np.inf
            if (sol := best(child)) is not None:
                heapq.heappush(queue, (-sol[0], tick, child, sol[1]))
                tick += 1
            keep = w[heads[m], m]
            w[:, m] = -np.inf
            w[heads[m], m] = keep
    return out


@pytest.mark.parametrize("single_root", ROOT_MODES)
@pytest.mark.parametrize("kind", KINDS)
def test_matches_lawler_reference_on_longer_sentences(kind: str, single_root: bool) -> None:
    for seed in range(3):
        scores = make_scores(kind, 10, 100 + seed)
        ref = lawler_reference(scores, 25, single_root)
        got = check_result(scores, kbest_arborescences(scores, 25, single_root=single_root), single_root)
        np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("single_root", ROOT_MODES)
def test_first_is_the_mst(single_root: bool) -> None:
    rng = np.random.default_rng(3)
    for n in (1, 2, 8, 25):
        scores = rng.normal(size=(n + 1, n + 1))
        (score, _), *_ = kbest_arborescences(scores, 5, single_root=single_root)
        mst = max_spanning_arborescence(scores, single_root=single_root)
        assert np.isclose(score, tree_scores(scores, mst[None])[0])


def test_fewer_trees_than_k() -> None:
    scores = np.zeros((3, 3))
    assert len(kbest_arborescences(scores, 10, single_root=False)) == 3
    assert len(kbest_arborescences(scores, 10, single_root=True)) == 2
    one = kbest_arborescences(np.zeros((2, 2)), 5, single_root=True)
    assert len(one) == 1 and one[0][1].tolist() == [-1, 0]
    only_root_arcs = np.full((3, 3), -np.inf)
    only_root_arcs[0, 1:] = 1.0
    assert [h.tolist() for _, h in kbest_arborescences(only_root_arcs, 4, single_root=False)] == [[-1, 0, 0]]
    assert kbest_arborescences(only_root_arcs, 4, single_root=True) == []  # no single-root tree at all
    unreachable = np.zeros((3, 3))
    unreachable[:, 2] = -np.inf
    assert kbest_arborescences(unreachable, 4, single_root=False) == []


def test_input_not_mutated_and_ignored_entries() -> None:
    rng = np.random.default_rng(5)
    scores = rng.normal(size=(6, 6))
    scores[2, 4] = -np.inf
    before = scores.copy()
    result = kbest_arborescences(scores, 20, single_root=True)
    np.testing.assert_array_equal(scores, before)
    noisy = scores.copy()
    noisy[:, 0] = np.nan  # column 0 and the diagonal are ignored
    np.fill_diagonal(noisy, np.inf)
    again = kbest_arborescences(noisy, 20, single_root=True)
    assert [s for s, _ in again] == [s for s, _ in result]


@pytest.mark.parametrize(
    ("scores", "k"),
    [
        (np.zeros((3, 4)), 1),
        (np.zeros(3), 1),
        (np.zeros((1, 1)), 1),
        (np.array([[0.0, np.nan], [0.0, 0.0]]), 1),
        (np.array([[0.0, np.inf], [0.0, 0.0]]), 1),
        (np.full((3, 3), "a"), 1),
        (np.zeros((3, 3)), 0),
        (np.zeros((3, 3)), -2),
        (np.zeros((3, 3)), 2.0),
        (np.zeros((3, 3)), True),
    ],
)
def test_validation(scores: np.ndarray, k: object) -> None:
    with pytest.raises(ValueError):
        kbest_arborescences(scores, k, single_root=False)  # type: ignore[arg-type]


@pytest.mark.parametrize("single_root", ROOT_MODES)
def test_forty_words_is_fast(single_root: bool) -> None:
    rng = np.random.default_rng(0)
    for scores in (rng.normal(size=(41, 41)), peaked_scores(rng, 40)):
        kbest_arborescences(scores, 10, single_root=single_root)  # warm-up
        start = time.perf_counter()
        result = kbest_arborescences(scores, 10, single_root=single_root)
        elapsed = time.perf_counter() - start
        assert len(check_result(scores, result, single_root)) == 10
        assert elapsed < 0.5, f"10-best of 40 words took {elapsed:.3f} s"
