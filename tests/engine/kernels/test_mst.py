"""Maximum spanning arborescence against brute force, a textbook Chu-Liu-Edmonds, and tree properties."""

from __future__ import annotations

import functools
import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

import engine.kernels.mst as mst_module
from engine.kernels.brute_force import brute_force, enumerate_trees, tree_scores
from engine.kernels.mst import is_tree, max_spanning_arborescence

ROOT_MODES = [False, True]


@functools.cache
def all_trees(n: int, single_root: bool) -> np.ndarray:
    return enumerate_trees(n, single_root=single_root, projective=False)


def score(scores: np.ndarray, heads: np.ndarray) -> float:
    return float(tree_scores(np.asarray(scores, dtype=np.float64), heads[None])[0])


def close(a: float, b: float) -> bool:
    return bool(np.isclose(a, b, rtol=1e-9, atol=1e-9))


def check_tree(heads: np.ndarray, n: int, single_root: bool) -> None:
    assert heads.dtype == np.int64 and heads.shape == (n + 1,) and heads[0] == -1
    assert is_tree(heads)
    if single_root:
        assert np.count_nonzero(heads[1:] == 0) == 1


def random_tree(rng: np.random.Generator, n: int, single_root: bool) -> np.ndarray:
    order = rng.permutation(n) + 1
    heads = np.full(n + 1, -1)
    heads[order[0]] = 0
    for i in range(1, n):
        pool = order[:i] if single_root else np.concatenate([[0], order[:i]])
        heads[order[i]] = rng.choice(pool)
    return heads


def assert_locally_optimal(scores: np.ndarray, heads: np.ndarray, single_root: bool) -> None:
    """No single change of head that keeps a (single-root) tree improves the score."""
    n1 = len(heads)
    par = heads.copy()
    par[0] = 0
    anc = np.eye(n1, dtype=bool)  # anc[x, y]: y is an ancestor of x or x itself
    cur = np.arange(n1)
    for _ in range(n1):
        cur = par[cur]
        anc[np.arange(n1), cur] = True
    valid = ~anc  # m may move under h unless m is an ancestor-or-self of h
    valid[:, 0] = False
    if single_root:
        valid[0, :] = False
        valid[:, heads == 0] = False
    now = scores[par, np.arange(n1)]
    with np.errstate(invalid="ignore"):
        gain = np.where(valid, scores - now[None, :], -np.inf)
    assert gain.max() <= 1e-9 * (1 + np.abs(now[1:]).sum())


def reference_mst(scores: np.ndarray) -> np.ndarray:
    """Textbook recursive Chu-Liu-Edmonds in pure Python, one cycle per level (multi-root, feasible)."""
    w = np.array(scores, dtype=np.float64)
    w[:, 0] = -np.inf
    np.fill_diagonal(w, -np.inf)
    return np.array(_reference(w.tolist()))


def _reference(w: list[list[float]]) -> list[int]:
    k = len(w)
    par = [0] + [max(range(k), key=lambda u, v=v: w[u][v]) for v in range(1, k)]
    cycle = None
    for start in range(1, k):
        seen, v = [], start
        while v != 0 and v not in seen:
            seen.append(v)
            v = par[v]
        if v != 0:
            cycle = seen[seen.index(v) :]
            break
    if cycle is None:
        return [-1, *par[1:]]
    rest = [v for v in range(k) if v not in cycle]
    c = len(rest)
    nw = [[w[u][v] for v in rest] + [-np.inf] for u in rest] + [[-np.inf] * (c + 1)]
    enter, leave = {}, {}
    for i, u in enumerate(rest):
        enter[i] = max(cycle, key=lambda v, u=u: w[u][v] - w[par[v]][v])
        nw[i][c] = w[u][enter[i]] - w[par[enter[i]]][enter[i]]
    for i, v in enumerate(rest[1:], 1):
        leave[i] = max(cycle, key=lambda u, v=v: w[u][v])
        nw[c][i] = w[leave[i]][v]
    sub = _reference(nw)
    heads = [-1] * k
    for i, v in enumerate(rest[1:], 1):
        heads[v] = leave[i] if sub[i] == c else rest[sub[i]]
    for v in cycle:
        heads[v] = par[v]
    heads[enter[sub[c]]] = rest[sub[c]]
    return heads


def best_single_root_by_forcing(scores: np.ndarray) -> float:
    """Max over root children r of the multi-root MST with every other root arc forbidden."""
    best = -np.inf
    for r in np.flatnonzero(np.isfinite(scores[0, 1:])) + 1:
        forced = scores.copy()
        forced[0, 1:] = -np.inf
        forced[0, r] = scores[0, r]
        try:
            best = max(best, score(scores, max_spanning_arborescence(forced, single_root=False)))
        except ValueError:
            pass
    return best


@pytest.mark.parametrize("single_root", ROOT_MODES)
@pytest.mark.parametrize("n", range(1, 7))
def test_matches_brute_force(n: int, single_root: bool) -> None:
    rng = np.random.default_rng(1000 * n + single_root)
    trees = all_trees(n, single_root)
    for seed in range(150):
        if seed % 3 == 0:
            scores = rng.integers(-2, 3, size=(n + 1, n + 1)).astype(np.float64)  # many ties
        else:
            scores = rng.normal(scale=3.0, size=(n + 1, n + 1))
        if seed % 5 == 0:
            scores[rng.random(scores.shape) < 0.4] = -np.inf
        best = float(tree_scores(scores, trees).max())
        if best == -np.inf:
            with pytest.raises(ValueError, match="no (single-root )?tree is possible"):
                max_spanning_arborescence(scores, single_root=single_root)
            continue
        heads = max_spanning_arborescence(scores, single_root=single_root)
        check_tree(heads, n, single_root)
        assert close(score(scores, heads), best)
        if seed < 3:  # the oracle's own entry point agrees
            oracle = brute_force(scores, single_root=single_root, projective=False)
            assert close(score(scores, heads), score(scores, oracle.best_heads))


@st.composite
def problems(draw: st.DrawFn, max_n: int = 30) -> tuple[np.ndarray, np.ndarray, bool]:
    """Random scores (normal, integer ties, constant, magnitude 1e3) with -inf arcs around a planted tree."""
    n = draw(st.integers(1, max_n))
    single_root = draw(st.booleans())
    kind = draw(st.sampled_from(["normal", "ties", "constant", "huge"]))
    forbid = draw(st.sampled_from([0.0, 0.3, 0.7, 0.95]))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    shape = (n + 1, n + 1)
    if kind == "normal":
        scores = rng.normal(scale=3.0, size=shape)
    elif kind == "ties":
        scores = rng.integers(-2, 3, size=shape).astype(np.float64)
    elif kind == "constant":
        scores = np.full(shape, float(rng.integers(-3, 4)))
    else:
        scores = rng.normal(scale=1e3, size=shape)
    planted = random_tree(rng, n, single_root)
    keep = rng.random(shape) >= forbid
    keep[planted[1:], np.arange(1, n + 1)] = True
    scores[~keep] = -np.inf
    return scores, planted, single_root


@settings(max_examples=1000, deadline=None)
@given(problems())
def test_properties(problem: tuple[np.ndarray, np.ndarray, bool]) -> None:
    scores, planted, single_root = problem
    n = scores.shape[0] - 1
    before = scores.copy()
    heads = max_spanning_arborescence(scores, single_root=single_root)
    np.testing.assert_array_equal(scores, before)
    check_tree(heads, n, single_root)
    got = score(scores, heads)
    assert got >= score(scores, planted) - 1e-9 * (1 + abs(got))
    assert_locally_optimal(scores, heads, single_root)
    if n <= 6:
        expected = float(tree_scores(scores, all_trees(n, single_root)).max())
    elif single_root:
        expected = best_single_root_by_forcing(scores)
    else:
        expected = score(scores, reference_mst(scores))
    assert close(got, expected)


@settings(max_examples=600, deadline=None)
@given(
    st.integers(1, 5).flatmap(
        lambda n: arrays(np.float64, (n + 1, n + 1), elements=st.sampled_from([-np.inf, -1.0, 0.0, 0.5, 2.0]))
    ),
    st.booleans(),
)
def test_small_grid_against_brute_force(scores: np.ndarray, single_root: bool) -> None:
    n = scores.shape[0] - 1
    best = float(tree_scores(scores, all_trees(n, single_root)).max())
    if best == -np.inf:
        with pytest.raises(ValueError, match="no (single-root )?tree is possible"):
            max_spanning_arborescence(scores, single_root=single_root)
        return
    heads = max_spanning_arborescence(scores, single_root=single_root)
    check_tree(heads, n, single_root)
    assert score(scores, heads) == best  # exact: sums of these values are exact in float64


@pytest.mark.parametrize("single_root", ROOT_MODES)
def test_large_sentence_magnitude_1e3(single_root: bool) -> None:
    rng = np.random.default_rng(150)
    n = 150
    scores = rng.normal(scale=1e3, size=(n + 1, n + 1))
    scores.setflags(write=False)  # any attempt to write into the input fails loudly
    start = time.perf_counter()
    heads = max_spanning_arborescence(scores, single_root=single_root)
    assert time.perf_counter() - start < 0.5  # ~2 ms measured; generous for slow CI machines
    check_tree(heads, n, single_root)
    assert_locally_optimal(scores, heads, single_root)
    expected = best_single_root_by_forcing(scores) if single_root else score(scores, reference_mst(scores))
    assert close(score(scores, heads), expected)


@pytest.mark.parametrize("single_root", ROOT_MODES)
def test_against_reference_at_medium_length(single_root: bool) -> None:
    rng = np.random.default_rng(60)
    for n in (40, 60):
        for _ in range(3):
            scores = rng.normal(size=(n + 1, n + 1))
            heads = max_spanning_arborescence(scores, single_root=single_root)
            check_tree(heads, n, single_root)
            expected = (
                best_single_root_by_forcing(scores) if single_root else score(scores, reference_mst(scores))
            )
            assert close(score(scores, heads), expected)


def test_fast_path_skips_contraction(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(3)
    n = 20
    planted = random_tree(rng, n, single_root=True)
    scores = rng.normal(size=(n + 1, n + 1))
    scores[planted[1:], np.arange(1, n + 1)] += 10.0

    def no_kernel(*args: object) -> None:
        raise AssertionError("the greedy tree should be returned without contraction")

    monkeypatch.setattr(mst_module, "_chu_liu_edmonds", no_kernel)
    for single_root in ROOT_MODES:
        np.testing.assert_array_equal(max_spanning_arborescence(scores, single_root=single_root), planted)


def test_ignored_entries_and_no_mutation() -> None:
    rng = np.random.default_rng(4)
    n = 12
    clean = rng.normal(size=(n + 1, n + 1))
    junk = clean.copy()
    junk[:, 0] = np.nan  # column 0 and the diagonal are ignored, whatever they hold
    np.fill_diagonal(junk, np.inf)
    junk.setflags(write=False)
    before = junk.copy()
    for single_root in ROOT_MODES:
        heads = max_spanning_arborescence(junk, single_root=single_root)
        np.testing.assert_array_equal(heads, max_spanning_arborescence(clean, single_root=single_root))
        np.testing.assert_array_equal(junk, before)
    ints = np.arange(16).reshape(4, 4)  # integer input is accepted
    check_tree(max_spanning_arborescence(ints, single_root=True), 3, True)


def test_all_ties() -> None:
    for n in (1, 7, 50):
        for single_root in ROOT_MODES:
            heads = max_spanning_arborescence(np.zeros((n + 1, n + 1)), single_root=single_root)
            check_tree(heads, n, single_root)


def _with(value: float, at: tuple[int, int]) -> np.ndarray:
    scores = np.zeros((4, 4))
    scores[at] = value
    return scores


def _unreachable() -> np.ndarray:
    scores = np.zeros((4, 4))
    scores[:, 2] = -np.inf  # word 2 has no possible head
    return scores


@pytest.mark.parametrize(
    ("bad", "single_root", "match"),
    [
        (np.zeros(4), False, "square 2-D"),
        (np.zeros((3, 4)), False, "square 2-D"),
        (np.zeros((2, 2, 2)), False, "square 2-D"),
        (np.zeros((1, 1)), False, "n >= 1"),
        (np.zeros((0, 0)), True, "n >= 1"),
        (_with(np.nan, (1, 2)), False, "finite or -inf"),
        (_with(np.inf, (0, 3)), True, "finite or -inf"),
        (np.zeros((3, 3), dtype=complex), False, "real"),
        (np.array([["a", "b"], ["c", "d"]]), False, "real"),
        (_unreachable(), False, "no tree is possible"),
        (_unreachable(), True, "no tree is possible"),
        (np.array([[0, 0, 0], [0, 0, -np.inf], [0, -np.inf, 0]]), True, "no single-root tree"),
    ],
)
def test_bad_input_raises(bad: np.ndarray, single_root: bool, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        max_spanning_arborescence(bad, single_root=single_root)


def test_two_root_children_allowed_without_single_root() -> None:
    scores = np.array([[0, 0, 0], [0, 0, -np.inf], [0, -np.inf, 0]], dtype=np.float64)
    np.testing.assert_array_equal(max_spanning_arborescence(scores, single_root=False), [-1, 0, 0])


def test_is_tree() -> None:
    assert is_tree(np.array([-1, 0]))
    assert is_tree(np.array([-1, 2, 0, 2]))
    assert is_tree([-1, 0, 0, 1])
    assert not is_tree(np.array([-1, 2, 1]))  # cycle 1 <-> 2
    assert not is_tree(np.array([-1, 0, 3, 2]))  # cycle away from ROOT
    assert not is_tree(np.array([-1, 1]))  # self loop
    assert not is_tree(np.array([-1, 0, 5]))  # out of range
    assert not is_tree(np.array([-1, -1, 0]))  # a word without head
    assert not is_tree(np.array([0, 0, 1]))  # heads[0] must be -1
    assert not is_tree(np.array([-1.0, 0.0]))  # not integers
    assert not is_tree(np.array([-1]))  # no words
    assert not is_tree(np.array([[-1, 0]]))  # not 1-D
