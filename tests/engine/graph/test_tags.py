"""TAGLINK and CHAIN (engine.graph.tags) against enumeration of their factors, and BP over links and tags
(engine.inference.joint_bp) against the exact joint marginals of (tree, tags) where the graph has no loop."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from scipy.special import logsumexp

from engine.graph.family import all_arcs
from engine.graph.hard import Link
from engine.graph.pairwise import PairFamily, grand_arcs
from engine.graph.tags import TagChain, TagLink, normalised
from engine.graph.tree import Tree
from engine.inference.bp import BPConfig, run_bp
from engine.inference.joint_bp import run_joint_bp
from engine.kernels.brute_force import enumerate_trees


def _allowed(counts: list[int], g: int) -> np.ndarray:
    """(n+1, g) slots allowed: ROOT one, word i ``counts[i - 1]``."""
    return np.arange(g)[None, :] < np.array([1, *counts])[:, None]


def _taglink(n: int, valid: np.ndarray, allowed: np.ndarray, rng: np.random.Generator) -> TagLink:
    heads, deps = np.nonzero(valid)
    g = allowed.shape[1]
    return TagLink(n, heads, deps, rng.normal(scale=1.5, size=(len(heads), g, g)), allowed)


def _chain(n: int, allowed: np.ndarray, rng: np.random.Generator) -> TagChain:
    g = allowed.shape[1]
    return TagChain(rng.normal(size=(n - 1, g, g)), rng.normal(size=g), rng.normal(size=g), allowed)


def _normalise_enumerated(values: np.ndarray, allowed: np.ndarray) -> np.ndarray:
    return np.where(allowed, values - logsumexp(np.where(allowed, values, -np.inf)), 0.0)


@pytest.mark.parametrize("counts", [[3, 3, 3], [3, 1, 2], [2, 2, 1, 3]])
def test_taglink_messages_equal_enumeration(counts: list[int]) -> None:
    n, g = len(counts), 3
    rng = np.random.default_rng(len(counts) + sum(counts))
    allowed = _allowed(counts, g)
    tl = _taglink(n, all_arcs(n), allowed, rng)
    r = rng.normal(scale=2.0, size=tl.size)
    r[0], r[-1] = 1e4, -1e4  # BP's clip: a link as good as certain either way
    u = np.where(allowed[tl.heads], rng.normal(size=(tl.size, g)), -np.inf)
    v = np.where(allowed[tl.deps], rng.normal(size=(tl.size, g)), -np.inf)
    to_link, to_head, to_dep = tl.propagate(r, u, v)
    for j in range(tl.size):
        h_ok, d_ok = allowed[tl.heads[j]], allowed[tl.deps[j]]
        on, off = [], []
        head_sum, dep_sum = np.full(g, -np.inf), np.full(g, -np.inf)
        for link, a, b in itertools.product((0, 1), range(g), range(g)):
            if not (h_ok[a] and d_ok[b]):
                continue
            log_phi = tl.theta[j, a, b] if link else 0.0  # the factor's potential
            (on if link else off).append(log_phi + u[j, a] + v[j, b])
            head_sum[a] = np.logaddexp(head_sum[a], log_phi + link * r[j] + v[j, b])
            dep_sum[b] = np.logaddexp(dep_sum[b], log_phi + link * r[j] + u[j, a])
        assert to_link[j] == pytest.approx(logsumexp(on) - logsumexp(off), abs=1e-9)
        np.testing.assert_allclose(to_head[j], _normalise_enumerated(head_sum, h_ok), atol=1e-9)
        np.testing.assert_allclose(to_dep[j], _normalise_enumerated(dep_sum, d_ok), atol=1e-9)
        assert (to_head[j][~h_ok] == 0).all() and (to_dep[j][~d_ok] == 0).all()


def test_taglink_from_root_reads_only_the_dependent_tag() -> None:
    n, g = 2, 3
    allowed = _allowed([3, 2], g)
    tl = TagLink(n, np.array([0]), np.array([1]), np.arange(9.0).reshape(1, 3, 3), allowed)
    assert np.isneginf(tl.theta[0, 1:]).all()  # ROOT has a single slot
    to_link, _, to_dep = tl.propagate(np.zeros(1), np.array([[0.0, -np.inf, -np.inf]]), np.zeros((1, 3)))
    assert to_link[0] == pytest.approx(logsumexp([0.0, 1.0, 2.0]) - np.log(3.0))
    np.testing.assert_allclose(to_dep[0], normalised(np.logaddexp(0.0, np.arange(3.0)), np.ones(3, bool)))


@pytest.mark.parametrize("counts", [[3], [2, 3], [3, 1, 2], [3, 2, 3, 2]])
def test_chain_messages_equal_enumeration(counts: list[int]) -> None:
    n, g = len(counts), 3
    rng = np.random.default_rng(7 * n)
    allowed = _allowed(counts, g)
    chain = _chain(n, allowed, rng) if n > 1 else TagChain(np.zeros((0, g, g)), rng.normal(size=g),
                                                          rng.normal(size=g), allowed)
    incoming = np.where(allowed[1:], rng.normal(size=(n, g)), -np.inf)
    out = chain.propagate(incoming)
    expected = np.full((n, g), -np.inf)
    for slots in itertools.product(*[range(c) for c in counts]):
        full = np.array([0, *slots])
        for i in range(n):
            others = sum(incoming[j, slots[j]] for j in range(n) if j != i)
            expected[i, slots[i]] = np.logaddexp(expected[i, slots[i]], chain.log_potential(full) + others)
    for i in range(n):
        np.testing.assert_allclose(out[i], _normalise_enumerated(expected[i], allowed[i + 1]), atol=1e-9)


def _exact_joint(n: int, valid: np.ndarray, tl: TagLink, chain: TagChain, emissions: np.ndarray,
                 ) -> tuple[np.ndarray, np.ndarray]:
    """Link marginals (n+1, n+1) and tag marginals (n+1, g) of p(tree, tags) proportional to
    TREE * prod TAG * CHAIN * prod TAGLINK, by enumerating every (single-rooted) tree and tagging."""
    links, tags, _, _ = _exact_joint_all(n, valid, tl, chain, emissions)
    return links, tags


def _exact_joint_all(n: int, valid: np.ndarray, tl: TagLink, chain: TagChain, emissions: np.ndarray,
                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    """``_exact_joint`` and, per kept arc, p(L_hm = 1, T_h = a, T_m = b) (A, g, g), and log Z."""
    allowed = tl.allowed
    g = allowed.shape[1]
    on = []
    trees = [h for h in enumerate_trees(n, single_root=True, projective=False)
             if valid[h[1:], np.arange(1, n + 1)].all()]
    taggings = list(itertools.product(*[np.flatnonzero(allowed[i]) for i in range(1, n + 1)]))
    logs, links, tags = [], [], []
    for heads in trees:
        arcs = np.zeros((n + 1, n + 1), dtype=bool)
        arcs[heads[1:], np.arange(1, n + 1)] = True
        for slots in taggings:
            full = np.array([0, *slots])
            logs.append(emissions[np.arange(1, n + 1), full[1:]].sum() + chain.log_potential(full)
                        + tl.log_potential(arcs, full))
            links.append(arcs)
            tags.append(np.eye(allowed.shape[1])[full])
            pairs = np.zeros((tl.size, g, g))
            live = arcs[tl.heads, tl.deps]
            pairs[np.flatnonzero(live), full[tl.heads[live]], full[tl.deps[live]]] = 1.0
            on.append(pairs)
    p = np.exp(np.array(logs) - logsumexp(logs))
    return (np.tensordot(p, np.array(links, dtype=float), axes=1), np.tensordot(p, np.array(tags), axes=1),
            np.tensordot(p, np.array(on), axes=1), float(logsumexp(logs)))


def _emissions(allowed: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    out = np.where(allowed, rng.normal(size=allowed.shape), -np.inf)
    out[0] = np.where(allowed[0], 0.0, -np.inf)
    return out


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_bp_equals_exact_joint_marginals_on_a_loop_free_graph(seed: int) -> None:
    """No loop: word 3 is the only word with several candidate tags (the others have one: observed, not
    variables), and the only kept arc touching it is 1 -> 3. TREE joins the links of words 1-2 and L[1, 3];
    T_3 joins TAG_3, CHAIN (a unary on T_3 once T_1, T_2 are fixed) and TAGLINK_13 alone. The factor graph is
    a tree, so BP's beliefs are the exact marginals of (tree, tags)."""
    n, g = 3, 3
    rng = np.random.default_rng(seed)
    valid = all_arcs(n)
    valid[:, 3] = False
    valid[1, 3] = True
    valid[3, :] = False
    allowed = _allowed([1, 1, 3], g)
    tl, chain, emissions = _taglink(n, valid, allowed, rng), _chain(n, allowed, rng), _emissions(allowed, rng)
    result = run_joint_bp([Tree(n, valid, projective=False, single_root=True)], valid, tl, chain, emissions,
                          BPConfig(max_iterations=20, tolerance=1e-12))
    links, tags, on, _ = _exact_joint_all(n, valid, tl, chain, emissions)
    np.testing.assert_allclose(result.links.beliefs, np.where(valid, links, 0.0), atol=1e-9)
    np.testing.assert_allclose(result.tags, tags, atol=1e-9)
    np.testing.assert_allclose(result.taglink, on, atol=1e-9)  # TAGLINK's factor beliefs are exact too
    assert result.links.converged
    # and they are the gradient of log Z in each pair's potential (what surrogate CLL reads as expected counts)
    for j, a, b in zip(*np.nonzero(np.isfinite(tl.theta)), strict=True):
        moved = []
        for step in (1e-5, -1e-5):
            theta = tl.theta.copy()
            theta[j, a, b] += step
            moved.append(_exact_joint_all(n, valid, TagLink(n, tl.heads, tl.deps, theta, allowed), chain,
                                          emissions)[3])
        assert (moved[0] - moved[1]) / 2e-5 == pytest.approx(result.taglink[j, a, b], abs=1e-7)


def test_bp_equals_exact_joint_marginals_with_one_word() -> None:
    """n = 1: L[0, 1], T_1 (3 candidates), TREE, TAG_1, CHAIN (start and end scores) and TAGLINK_01 form a tree."""
    n, g = 1, 3
    rng = np.random.default_rng(5)
    valid, allowed = all_arcs(n), _allowed([3], g)
    chain = TagChain(np.zeros((0, g, g)), rng.normal(size=g), rng.normal(size=g), allowed)
    tl, emissions = _taglink(n, valid, allowed, rng), _emissions(allowed, rng)
    result = run_joint_bp([Tree(n, valid, projective=False, single_root=True)], valid, tl, chain, emissions)
    links, tags, on, _ = _exact_joint_all(n, valid, tl, chain, emissions)
    np.testing.assert_allclose(result.links.beliefs, links, atol=1e-9)
    np.testing.assert_allclose(result.tags, tags, atol=1e-9)
    np.testing.assert_allclose(result.taglink, on, atol=1e-9)


@pytest.mark.parametrize("seed", [3, 4])
def test_loopy_beliefs_are_normalised_and_finite(seed: int) -> None:
    n, g = 4, 3
    rng = np.random.default_rng(seed)
    valid, allowed = all_arcs(n), _allowed([3, 2, 3, 1], g)
    tl, chain, emissions = _taglink(n, valid, allowed, rng), _chain(n, allowed, rng), _emissions(allowed, rng)
    grand = PairFamily(n, valid, grand_arcs(n, valid), rng.normal(size=len(grand_arcs(n, valid)[0])), "grand")
    result = run_joint_bp([Tree(n, valid, projective=False, single_root=True), grand], valid, tl, chain, emissions,
                          BPConfig(max_iterations=10))
    beliefs = result.links.beliefs
    assert np.isfinite(beliefs).all() and ((beliefs >= 0) & (beliefs <= 1)).all()
    assert (beliefs[~valid] == 0).all()
    np.testing.assert_allclose(result.tags.sum(axis=1), 1.0, atol=1e-12)
    assert np.isfinite(result.tags).all() and (result.tags[~allowed] == 0).all()
    assert np.isclose(result.tags[1:].max(axis=1), 1.0).sum() < n  # the tags are uncertain, not collapsed


@pytest.mark.parametrize("schedule", ["serial", "flooding"])
def test_one_candidate_per_word_is_todays_bp(schedule: str) -> None:
    """Every word with a single candidate: TAGLINK sends the arc scores, and BP over links and tags is BP over
    TREE + LINK + GRAND (``run_bp``), beliefs and iterations alike."""
    n = 4
    rng = np.random.default_rng(11)
    valid = all_arcs(n)
    valid[2, 4] = valid[0, 3] = False
    scores = rng.normal(scale=2.0, size=valid.shape)
    arcs = grand_arcs(n, valid)
    theta = rng.normal(size=len(arcs[0]))
    allowed = _allowed([1] * n, 1)
    heads, deps = np.nonzero(valid)
    tl = TagLink(n, heads, deps, scores[heads, deps][:, None, None], allowed)
    chain = TagChain(rng.normal(size=(n - 1, 1, 1)), rng.normal(size=1), rng.normal(size=1), allowed)
    config = BPConfig(max_iterations=8, schedule=schedule)
    tree = Tree(n, valid, projective=False, single_root=True)
    joint = run_joint_bp([tree, PairFamily(n, valid, arcs, theta, "grand")], valid, tl, chain,
                         _emissions(allowed, rng), config)
    today = run_bp([tree, Link(n, valid, scores), PairFamily(n, valid, arcs, theta, "grand")], valid, config)
    np.testing.assert_allclose(joint.links.beliefs, today.beliefs, atol=1e-12)
    np.testing.assert_allclose(joint.links.incoming[0][0][valid], today.incoming[0][0][valid], atol=1e-9)
    assert joint.links.iterations == today.iterations
    np.testing.assert_array_equal(joint.tags, np.where(allowed, 1.0, 0.0))


def test_add_rows_is_add_at_bit_for_bit() -> None:
    """``add_rows`` (joint BP's scatter of TAGLINK's tag messages) makes np.add.at's additions in its order."""
    from engine.graph.tags import add_rows

    rng = np.random.default_rng(9)
    rows = rng.integers(0, 7, size=200)  # many repeats: the order of the additions matters
    values = rng.normal(scale=1e3, size=(200, 3)) * 10.0 ** rng.integers(-8, 8, size=(200, 1))
    want, got = rng.normal(size=(7, 3)), None
    got = want.copy()
    np.add.at(want, rows, values)
    add_rows(got, rows, values)
    np.testing.assert_array_equal(got, want)
    add_rows(got, rows[:0], values[:0])  # nothing to add
    np.testing.assert_array_equal(got, want)
