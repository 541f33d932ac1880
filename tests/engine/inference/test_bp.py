"""Loopy BP: exact on first-order and loop-free graphs, close to brute force on second-order graphs."""

from __future__ import annotations

import numpy as np
import pytest

from engine.graph.family import all_arcs as _valid
from engine.graph.hard import Exactly1, Link
from engine.graph.oracle import assignment_marginals, tree_marginals
from engine.graph.pairwise import PairFamily, grand_arcs, sib_arcs
from engine.graph.tree import Tree
from engine.inference.bp import BPConfig, run_bp
from engine.kernels.brute_force import brute_force


@pytest.mark.parametrize("schedule", ["flooding", "serial"])
@pytest.mark.parametrize("projective", [False, True])
@pytest.mark.parametrize("single_root", [False, True])
@pytest.mark.parametrize("n", [1, 2, 4, 6])
def test_first_order_bp_is_exact_after_one_iteration(n: int, projective: bool, single_root: bool,
                                                     schedule: str) -> None:
    rng = np.random.default_rng(n)
    theta = rng.normal(scale=2.0, size=(n + 1, n + 1))
    valid = _valid(n)
    families = [Tree(n, valid, projective=projective, single_root=single_root), Link(n, valid, theta)]
    result = run_bp(families, valid, BPConfig(max_iterations=1, schedule=schedule))
    oracle = brute_force(theta, single_root=single_root, projective=projective)
    np.testing.assert_allclose(result.beliefs, oracle.marginals, atol=1e-8)


def _pair(n: int, valid: np.ndarray, arcs: np.ndarray, theta: np.ndarray, name: str) -> PairFamily:
    return PairFamily(n, valid, arcs, theta, name)


def test_bp_on_a_loop_free_graph_is_exact() -> None:
    """LINK + EXACTLY1 per word + GRAND(0,1,2) + SIB(1,2,3): the factor graph is a chain of
    per-word groups, so BP converges to the exact marginals."""
    n, rng = 3, np.random.default_rng(4)
    valid = _valid(n)
    theta = rng.normal(size=(n + 1, n + 1))
    grand = _pair(n, valid, np.array([[0], [1], [1], [2]]), np.array([1.5]), "grand")
    sib = _pair(n, valid, np.array([[1], [2], [1], [3]]), np.array([-2.0]), "sib")
    families = [Exactly1(n, valid), Link(n, valid, theta), grand, sib]
    result = run_bp(families, valid, BPConfig(max_iterations=50, tolerance=1e-12))
    assert result.converged
    np.testing.assert_allclose(result.beliefs, assignment_marginals(families, valid), atol=1e-9)


def _second_order(n: int, seed: int, *, projective: bool, scale: float) -> tuple[list, np.ndarray]:
    rng = np.random.default_rng(seed)
    valid = _valid(n)
    g_arcs, s_arcs = grand_arcs(n, valid), sib_arcs(n, valid)
    families = [
        Tree(n, valid, projective=projective, single_root=True),
        Link(n, valid, rng.normal(size=(n + 1, n + 1))),
        _pair(n, valid, g_arcs, rng.normal(scale=scale, size=g_arcs.shape[1]), "grand"),
        _pair(n, valid, s_arcs, rng.normal(scale=scale, size=s_arcs.shape[1]), "sib"),
    ]
    return families, valid


@pytest.mark.parametrize("projective", [False, True])
def test_second_order_bp_close_to_brute_force(projective: bool) -> None:
    """Full second-order models (TREE + LINK + GRAND + SIB) on n <= 5: BP is approximate.
    Measured on these 9 graphs per mode (10 iterations, second-order weights ~ N(0, 0.5^2)): mean
    absolute error of the beliefs 0.025 (max 0.164 non-projective, 0.134 projective), against 0.066
    (max 0.30 / 0.39) for the first-order marginals that ignore GRAND and SIB."""
    errors = []
    for n in (3, 4, 5):
        for seed in range(3):
            families, valid = _second_order(n, seed, projective=projective, scale=0.5)
            result = run_bp(families, valid, BPConfig(max_iterations=10, schedule="serial"))
            exact = tree_marginals(families, n, single_root=True, projective=projective)
            errors.append(np.abs(result.beliefs - exact)[valid])
    err = np.concatenate(errors)
    assert err.mean() < 0.035
    assert err.max() < 0.25
    # and BP is much closer to the truth than ignoring the second-order factors altogether
    first_order = []
    for n in (3, 4, 5):
        for seed in range(3):
            families, valid = _second_order(n, seed, projective=projective, scale=0.5)
            fo = run_bp(families[:2], valid, BPConfig(max_iterations=1)).beliefs
            exact = tree_marginals(families, n, single_root=True, projective=projective)
            first_order.append(np.abs(fo - exact)[valid])
    assert err.mean() < 0.5 * np.concatenate(first_order).mean()


@pytest.mark.parametrize("schedule", ["flooding", "serial"])
def test_long_sentence_beliefs_are_finite_and_normalised(schedule: str) -> None:
    n, rng = 150, np.random.default_rng(0)
    valid = _valid(n)
    s_arcs = sib_arcs(n, valid)
    keep = rng.random(s_arcs.shape[1]) < 0.05  # a random subset keeps the test fast
    families = [
        Tree(n, valid, projective=False, single_root=True),
        Link(n, valid, rng.normal(scale=3.0, size=(n + 1, n + 1))),
        _pair(n, valid, s_arcs[:, keep], rng.normal(size=int(keep.sum())), "sib"),
    ]
    result = run_bp(families, valid, BPConfig(max_iterations=3, schedule=schedule))
    assert np.isfinite(result.beliefs).all() and np.isfinite(result.log_odds[valid]).all()
    assert ((result.beliefs >= 0) & (result.beliefs <= 1)).all()
    if schedule == "serial":  # the tree factor is updated last, so beliefs are its tree marginals
        np.testing.assert_allclose(result.beliefs[:, 1:].sum(axis=0), 1.0, atol=1e-8)
    assert result.iterations == 3 and result.residual >= 0


def test_diagnostics_and_tape() -> None:
    families, valid = _second_order(4, 0, projective=False, scale=0.5)
    result = run_bp(families, valid, BPConfig(max_iterations=200, tolerance=1e-10, keep_tape=True, damping=0.3))
    assert result.converged and result.iterations < 200 and result.residual < 1e-10
    assert len(result.tape) == result.iterations
    assert len(result.tape[0]) == len(families)
    with pytest.raises(ValueError, match="schedule"):
        BPConfig(schedule="random")


def _textbook_bp(families: list, valid: np.ndarray, iterations: int, schedule: str) -> np.ndarray:
    """Every visit of the schedule, beliefs rebuilt from all messages before each stage, no skipping: the
    oracle for the updates ``run_bp`` skips as exact repeats."""
    messages = [f.initial() for f in families]

    def total() -> np.ndarray:
        return sum((f.scatter(m) for f, m in zip(families, messages, strict=True)), np.zeros(valid.shape))

    order = list(range(len(families)))
    plan = [order] if schedule == "flooding" else [[i] for i in order + order[-2::-1]]
    for _ in range(iterations):
        for stage in plan:
            b = total()
            new = {i: tuple(np.clip(m, -1e4, 1e4) for m in families[i].propagate(
                tuple(g - o for g, o in zip(families[i].gather(b), messages[i], strict=True)))) for i in stage}
            for i, m in new.items():
                messages[i] = m
    return np.where(valid, 1.0 / (1.0 + np.exp(-total())), 0.0)


class _CountingTree(Tree):
    calls = 0

    def propagate(self, incoming: tuple) -> tuple:
        _CountingTree.calls += 1
        return super().propagate(incoming)


@pytest.mark.parametrize("schedule", ["flooding", "serial"])
def test_skipped_repeats_change_nothing(schedule: str) -> None:
    """LINK is updated once and the serial schedule's opening tree update (a repeat of the closing one)
    is skipped: T serial iterations cost T + 1 Matrix-Tree calls instead of 2T, and the beliefs equal
    textbook BP's to rounding."""
    for n, seed in ((4, 0), (7, 1)):
        families, valid = _second_order(n, seed, projective=False, scale=0.7)
        families[0] = _CountingTree(n, valid, projective=False, single_root=True)
        for iterations in (1, 2, 6):
            _CountingTree.calls = 0
            result = run_bp(families, valid, BPConfig(max_iterations=iterations, tolerance=0.0, schedule=schedule))
            assert _CountingTree.calls == (iterations + 1 if schedule == "serial" else iterations)
            np.testing.assert_allclose(result.beliefs, _textbook_bp(families, valid, iterations, schedule),
                                       atol=1e-12)
    damped = run_bp(families, valid, BPConfig(max_iterations=3, damping=0.3, schedule="serial"))
    assert not damped.settled  # with damping nothing is a fixed point: nothing is skipped


def test_bp_continues_from_settled_messages() -> None:
    """TREE + LINK after one update are exact and settled; BP on the full graph started from them (the
    pairwise factors from 0) skips the tree factor's first update and equals BP from scratch."""
    families, valid = _second_order(6, 3, projective=False, scale=0.7)
    first = run_bp(families[:2], valid, BPConfig(max_iterations=1))
    assert first.settled == {0, 1}
    config = BPConfig(max_iterations=4, tolerance=0.0, schedule="serial")
    cold = run_bp(families, valid, config)
    warm = run_bp(families, valid, config, initial=[*first.messages, None, None], settled=first.settled)
    np.testing.assert_allclose(warm.beliefs, cold.beliefs, atol=1e-12)
    assert warm.settled == cold.settled == {0, 1}  # the tree factor closed the last iteration
