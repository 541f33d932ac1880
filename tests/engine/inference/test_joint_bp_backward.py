"""Reverse mode through joint BP (engine.inference.joint_bp_backward, engine.graph.tags_adjoint): the taped run is
``run_joint_bp`` bit for bit, and every adjoint, of each propagator alone and of whole runs of 1-3 iterations,
matches central finite differences."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from engine.graph.family import all_arcs
from engine.graph.pairwise import PairFamily, grand_arcs, sib_arcs
from engine.graph.tags import TagChain, TagLink
from engine.graph.tags_adjoint import chain_vjp, taglink_vjp
from engine.graph.tree import Tree
from engine.inference.bp import BPConfig
from engine.inference.joint_bp import run_joint_bp
from engine.inference.joint_bp_backward import joint_backward, joint_forward, joint_l2

EPS = 1e-6


def central_difference(f: Callable[[np.ndarray], float], x: np.ndarray, where: np.ndarray, eps: float) -> np.ndarray:
    """``(f(x + eps e_i) - f(x - eps e_i)) / 2 eps`` for every entry ``i`` of ``x`` where ``where`` is True, else 0."""
    out = np.zeros(x.shape)
    for i in zip(*np.nonzero(where), strict=True):
        up, down = x.copy(), x.copy()
        up[i] += eps
        down[i] -= eps
        out[i] = (f(up) - f(down)) / (2 * eps)
    return out


def _allowed(counts: list[int]) -> np.ndarray:
    return np.arange(max(counts))[None, :] < np.array([1, *counts])[:, None]


def test_taglink_adjoint_matches_finite_differences() -> None:
    rng = np.random.default_rng(0)
    n, counts = 4, [3, 1, 2, 3]
    allowed = _allowed(counts)
    valid = all_arcs(n)
    heads, deps = np.nonzero(valid)
    theta = rng.normal(scale=1.5, size=(len(heads), 3, 3))
    r, u, v = rng.normal(size=len(heads)), rng.normal(size=(len(heads), 3)), rng.normal(size=(len(heads), 3))
    w_link, w_head, w_dep = rng.normal(size=len(heads)), rng.normal(size=u.shape), rng.normal(size=v.shape)

    def objective(th: np.ndarray, r: np.ndarray, u: np.ndarray, v: np.ndarray) -> float:
        link, head, dep = TagLink(n, heads, deps, th, allowed).propagate(r, u, v)
        return float((w_link * link).sum() + (w_head * head).sum() + (w_dep * dep).sum())

    tl = TagLink(n, heads, deps, theta, allowed)
    assert len(tl.varying) < len(heads)  # arcs between one-candidate words (and ROOT) are in the test too
    g_r, g_u, g_v, g_theta = taglink_vjp(tl, r, u, v, w_link, w_head, w_dep)
    args = [theta, r, u, v]
    for pos, (got, ok) in enumerate([(g_theta, np.isfinite(tl.theta)), (g_r, np.ones(len(r), dtype=bool)),
                                     (g_u, allowed[heads]), (g_v, allowed[deps])]):
        def f(x: np.ndarray, pos: int = pos) -> float:
            return objective(*[x if j == pos else a for j, a in enumerate(args)])
        want = central_difference(f, args[pos], ok, EPS)
        np.testing.assert_allclose(np.where(ok, got, 0.0), want, rtol=1e-5, atol=1e-7)
        assert not np.where(ok, 0.0, got).any()


@pytest.mark.parametrize("counts", [[2, 3, 1, 3, 2], [1, 1, 1], [3]])
def test_chain_adjoint_matches_finite_differences(counts: list[int]) -> None:
    rng = np.random.default_rng(len(counts))
    n, g = len(counts), max(counts)
    allowed = _allowed(counts)
    chain = TagChain(rng.normal(size=(n - 1, g, g)), rng.normal(size=g), rng.normal(size=g), allowed)
    inc = np.where(allowed[1:], rng.normal(size=(n, g)), -np.inf)
    weights = rng.normal(size=(n, g))

    def objective(x: np.ndarray) -> float:
        return float((weights * chain.propagate(x)).sum())

    want = central_difference(objective, inc, allowed[1:], EPS)
    np.testing.assert_allclose(chain_vjp(chain, inc, weights), want, rtol=1e-5, atol=1e-7)


def _joint_graph(n: int, counts: list[int], seed: int, sib: bool) -> tuple:
    rng = np.random.default_rng(seed)
    valid = all_arcs(n) & (rng.random((n + 1, n + 1)) > 0.25)
    valid[0, 1:] = True
    g = max(counts)
    allowed = _allowed(counts)
    heads, deps = np.nonzero(valid)
    theta = rng.normal(scale=1.5, size=(len(heads), g, g))
    transitions, start, end = rng.normal(size=(n - 1, g, g)), rng.normal(size=g), rng.normal(size=g)
    emissions = np.where(allowed, rng.normal(size=allowed.shape), -np.inf)
    emissions[0] = np.where(allowed[0], 0.0, -np.inf)
    pair_arcs = (sib_arcs if sib else grand_arcs)(n, valid)
    pair_theta = rng.normal(size=len(pair_arcs[0]))
    gold = np.zeros(n + 1, dtype=np.int64)
    gold[1:] = rng.integers(0, n + 1, size=n)
    slots = np.array([0, *[rng.integers(0, c) for c in counts]])

    def build(th: np.ndarray, pt: np.ndarray) -> tuple:
        families = [Tree(n, valid, projective=False, single_root=True),
                    PairFamily(n, valid, pair_arcs, pt, "sib" if sib else "grand")]
        return families, valid, TagLink(n, heads, deps, th, allowed), TagChain(transitions, start, end, allowed), \
            emissions

    return build, theta, pair_theta, gold, slots, allowed


def _loss(build: Callable, gold: np.ndarray, slots: np.ndarray, allowed: np.ndarray, config: BPConfig
          ) -> Callable[[np.ndarray, np.ndarray], float]:
    def loss(th: np.ndarray, pt: np.ndarray) -> float:
        graph = build(th, pt)
        result = run_joint_bp(*graph, config)
        y = np.zeros(graph[1].shape)
        y[gold[1:], np.arange(1, len(gold))] = 1.0
        return joint_l2(result, y, slots, graph[1], allowed)[0]
    return loss


def test_the_taped_run_is_run_joint_bp_bit_for_bit() -> None:
    build, theta, pair_theta, *_ = _joint_graph(5, [2, 3, 1, 3, 2], 3, sib=True)
    config = BPConfig(max_iterations=4)
    taped, tape = joint_forward(*build(theta, pair_theta), config)
    plain = run_joint_bp(*build(theta, pair_theta), config)
    assert np.array_equal(taped.links.log_odds, plain.links.log_odds) and np.array_equal(taped.tags, plain.tags)
    assert {u.unit for u in tape} == {"family", "taglink", "chain"} and tape[1].initial


@pytest.mark.parametrize("iterations", [1, 2, 3])
@pytest.mark.parametrize(("n", "counts", "seed", "sib"), [(4, [2, 3, 1, 2], 0, False), (5, [2, 3, 1, 3, 2], 1, True),
                                                          (3, [1, 1, 1], 2, True)])
def test_the_gradient_through_joint_bp_matches_finite_differences(iterations: int, n: int, counts: list[int],
                                                                  seed: int, sib: bool) -> None:
    """The L2 objective of links and tags after T serial iterations (tolerance 0: every run takes T), against
    central differences in every TAGLINK potential of a candidate pair and every SIB/GRAND potential."""
    build, theta, pair_theta, gold, slots, allowed = _joint_graph(n, counts, seed, sib)
    config = BPConfig(max_iterations=iterations, tolerance=0.0)
    graph = build(theta, pair_theta)
    result, tape = joint_forward(*graph, config)
    y = np.zeros(graph[1].shape)
    y[gold[1:], np.arange(1, n + 1)] = 1.0
    _, g_b, g_t = joint_l2(result, y, slots, graph[1], allowed)
    grad = joint_backward(graph[0], graph[2], graph[3], tape, g_b, g_t)
    loss = _loss(build, gold, slots, allowed, config)
    pairs = np.isfinite(graph[2].theta)
    want_tl = central_difference(lambda th: loss(th, pair_theta), theta, pairs, EPS)
    np.testing.assert_allclose(grad.taglink, want_tl, rtol=1e-5, atol=1e-8)
    want_pair = central_difference(lambda pt: loss(theta, pt), pair_theta, np.ones(len(pair_theta), bool), EPS)
    assert grad.families[0] is None and grad.families[1] is not None
    np.testing.assert_allclose(grad.families[1], want_pair, rtol=1e-5, atol=1e-8)
    assert np.abs(want_tl).max() > 1e-3  # the check is not vacuous


def test_reverse_mode_refuses_flooding() -> None:
    build, theta, pair_theta, *_ = _joint_graph(3, [2, 1, 2], 0, sib=False)
    with pytest.raises(ValueError, match="serial"):
        joint_forward(*build(theta, pair_theta), BPConfig(schedule="flooding"))
