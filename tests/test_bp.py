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
from engine.inference.brute_force import brute_force


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
