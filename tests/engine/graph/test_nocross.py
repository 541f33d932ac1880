"""NOCROSS: every factor's messages and crossing belief against brute force; BP with TREE + LINK."""

from __future__ import annotations

import itertools
import time

import numpy as np
import pytest
from scipy.special import logsumexp

from engine.graph.family import all_arcs as _valid
from engine.graph.hard import Exactly1, Link
from engine.graph.nocross import NoCross
from engine.graph.oracle import arc_family_messages, assignment_marginals, tree_marginals
from engine.graph.tree import Tree
from engine.inference.bp import BPConfig, run_bp
from engine.kernels.brute_force import enumerate_trees


def _cross(a: tuple[int, int], b: tuple[int, int]) -> bool:
    """Arcs cross when exactly one endpoint of one lies strictly inside the other's span and no
    endpoint is shared (written independently of the family)."""
    (l1, r1), (l2, r2) = sorted(a), sorted(b)
    if {l1, r1} & {l2, r2}:
        return False
    return (l1 < l2 < r1) != (l1 < r2 < r1)


def _factor_log_value(heads_j: list[int], heads_l: list[int], j: int, l: int, w: float) -> float:  # noqa: E741
    """log NOCROSS_{j,l} on the sets of true heads of j and of l."""
    if len(heads_j) != 1 or len(heads_l) != 1:
        return -np.inf
    return w if _cross((heads_j[0], j), (heads_l[0], l)) else 0.0


Exact = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, float]


def _brute_force_factor(valid: np.ndarray, j: int, l: int, w: float,  # noqa: E741
                        r_j: np.ndarray, r_l: np.ndarray) -> Exact:
    """Exact messages of one factor by summing over all 2^(#heads of j + #heads of l) assignments
    of its neighbours: ``(heads of j, to them, heads of l, to them, b(crossing))``."""
    hj, hl = np.flatnonzero(valid[:, j]), np.flatnonzero(valid[:, l])
    bits = np.array(list(itertools.product([False, True], repeat=len(hj) + len(hl))), dtype=bool)
    log_w, crossing = [], []
    for bt in bits:
        on_j, on_l = list(hj[bt[:len(hj)]]), list(hl[bt[len(hj):]])
        value = _factor_log_value(on_j, on_l, j, l, w)
        log_w.append(value + r_j[on_j].sum() + r_l[on_l].sum())
        crossing.append(np.isfinite(value) and _cross((on_j[0], j), (on_l[0], l)))
    log_w = np.array(log_w)
    r = np.concatenate([r_j[hj], r_l[hl]])
    msgs = np.array([logsumexp(log_w[bits[:, v]]) - logsumexp(log_w[~bits[:, v]]) - r[v] for v in range(len(r))])
    belief = float(np.exp(logsumexp(log_w[np.array(crossing)]) - logsumexp(log_w))) if any(crossing) else 0.0
    return hj, msgs[:len(hj)], hl, msgs[len(hj):], belief


def _theta(n: int, kind: str, rng: np.random.Generator) -> np.ndarray:
    if kind == "hard":
        return np.full((n + 1, n + 1), -np.inf)
    return rng.normal(scale={"normal": 2.0, "large": 1e3}[kind], size=(n + 1, n + 1))


def _check_against_brute_force(family: NoCross, incoming: tuple[np.ndarray, np.ndarray], *, rtol: float = 0.0) -> None:
    to_j, to_l = family.propagate(incoming)
    beliefs = family.pair_beliefs(incoming)
    valid, n = family.valid, family.n
    for j, l in itertools.product(range(n + 1), repeat=2):  # noqa: E741
        if not family.active[j, l]:
            assert (to_j[j, l] == 0).all() and (to_l[j, l] == 0).all()
            continue
        hj, exp_j, hl, exp_l, belief = _brute_force_factor(valid, j, l, family.weight[j, l],
                                                           incoming[0][j, l], incoming[1][j, l])
        np.testing.assert_allclose(to_j[j, l, hj], exp_j, rtol=rtol, atol=1e-9)
        np.testing.assert_allclose(to_l[j, l, hl], exp_l, rtol=rtol, atol=1e-9)
        assert (to_j[j, l, ~valid[:, j]] == 0).all() and (to_l[j, l, ~valid[:, l]] == 0).all()
        assert beliefs[j, l] == pytest.approx(belief, abs=1e-9)
        if not family.ordered:
            assert beliefs[l, j] == beliefs[j, l]


@pytest.mark.parametrize("ordered", [False, True])
@pytest.mark.parametrize("kind", ["normal", "hard", "large"])
@pytest.mark.parametrize("n", [2, 3, 4])
def test_messages_match_brute_force(n: int, kind: str, ordered: bool) -> None:
    rng = np.random.default_rng(n)
    valid = _valid(n)
    family = NoCross(n, valid, _theta(n, kind, rng), ordered=ordered)
    scale = 1e3 if kind == "large" else 2.0
    incoming = (rng.normal(scale=scale, size=(n + 1,) * 3), rng.normal(scale=scale, size=(n + 1,) * 3))
    _check_against_brute_force(family, incoming, rtol=1e-9 if kind == "large" else 0.0)


@pytest.mark.parametrize("ordered", [False, True])
def test_pruned_arcs(ordered: bool) -> None:
    """Pruned heads are not neighbours; word 3 keeps a single possible head (its messages are +inf)."""
    n, rng = 4, np.random.default_rng(5)
    valid = _valid(n)
    valid[[0, 1, 2], 3] = False  # 3 can only attach to 4
    valid[2, 1] = valid[0, 4] = False
    family = NoCross(n, valid, rng.normal(size=(n + 1, n + 1)), ordered=ordered)
    incoming = (rng.normal(size=(n + 1,) * 3), rng.normal(size=(n + 1,) * 3))
    _check_against_brute_force(family, incoming)
    to_j, to_l = family.propagate(incoming)
    assert to_j[3, 4, 4] == np.inf and to_l[1, 3, 4] == np.inf  # L[4, 3] is the only head of 3: must be true
    assert (family.scatter((to_j, to_l))[~valid] == 0).all()


def test_crossing_definition_in_log_potential() -> None:
    """Strictly interleaved spans cross; a shared endpoint or nesting does not; ROOT is a position."""
    n = 4
    theta = np.zeros((n + 1, n + 1))
    theta[1, 2], theta[2, 1] = 1.0, 0.5  # unordered factor {1, 2} has crossing weight 1.5
    family = NoCross(n, _valid(n), theta)
    ordered = NoCross(n, _valid(n), theta, ordered=True)

    def tree(heads: list[int]) -> np.ndarray:
        y = np.zeros((n + 1, n + 1), dtype=bool)
        y[heads, np.arange(1, n + 1)] = True
        return y

    crossing = tree([3, 0, 2, 3])  # 3 -> 1 spans (1, 3), ROOT -> 2 spans (0, 2): interleaved
    assert family.log_potential(crossing) == ordered.log_potential(crossing) == pytest.approx(1.5)
    shared = tree([2, 0, 2, 3])  # 2 -> 1 and 0 -> 2 share word 2
    assert family.log_potential(shared) == 0.0
    nested = tree([0, 1, 2, 3])  # 0 -> 1 spans (0, 1), 1 -> 2 spans (1, 2): share 1
    assert family.log_potential(nested) == 0.0
    two_heads = crossing.copy()
    two_heads[4, 1] = True
    assert family.log_potential(two_heads) == -np.inf
    no_head = crossing.copy()
    no_head[:, 4] = False
    assert family.log_potential(no_head) == -np.inf


@pytest.mark.parametrize("ordered", [False, True])
def test_log_potential_is_the_product_of_the_factors(ordered: bool) -> None:
    """On every tree and on random non-trees: log_potential = sum over factors of the brute-force factor
    value used above (so the messages checked against brute force are the messages of this model)."""
    n, rng = 4, np.random.default_rng(6)
    valid = _valid(n)
    family = NoCross(n, valid, rng.normal(size=(n + 1, n + 1)), ordered=ordered)
    ys = []
    for heads in enumerate_trees(n, single_root=False, projective=False):
        y = np.zeros((n + 1, n + 1), dtype=bool)
        y[heads[1:], np.arange(1, n + 1)] = True
        ys.append(y)
    ys += [rng.random((n + 1, n + 1)) < 0.3 for _ in range(20)]
    for y in ys:
        y = y & valid
        expected = 0.0
        for j, l in zip(*np.nonzero(family.active), strict=True):  # noqa: E741
            heads_j, heads_l = list(np.flatnonzero(y[:, j])), list(np.flatnonzero(y[:, l]))
            expected += _factor_log_value(heads_j, heads_l, j, l, family.weight[j, l])
        assert family.log_potential(y) == pytest.approx(expected)


def test_single_factor_matches_the_arc_oracle() -> None:
    """n = 2 has one (unordered) factor, so gather -> propagate -> scatter must equal the arc oracle
    computed from log_potential alone."""
    n, rng = 2, np.random.default_rng(7)
    valid = _valid(n)
    family = NoCross(n, valid, rng.normal(size=(n + 1, n + 1)))
    r = rng.normal(scale=2.0, size=(n + 1, n + 1))
    out = family.scatter(family.propagate(family.gather(r)))
    np.testing.assert_allclose(out[valid], arc_family_messages(family, r)[valid], atol=1e-12)


@pytest.mark.parametrize("ordered", [False, True])
def test_gather_scatter(ordered: bool) -> None:
    n = 5
    valid = _valid(n)
    valid[3, 2] = False
    family = NoCross(n, valid, np.zeros((n + 1, n + 1)), ordered=ordered)
    ones = family.gather(np.ones((n + 1, n + 1)))
    # every variable L[i, j] is in one factor per other word (twice if ordered)
    counts = family.scatter(ones)
    np.testing.assert_array_equal(counts, np.where(valid, (n - 1) * (2 if ordered else 1), 0))
    arc = np.arange((n + 1) ** 2, dtype=float).reshape(n + 1, n + 1)
    to_j, to_l = family.gather(arc)
    assert to_j[1, 4, 3] == arc[3, 1] and to_l[1, 4, 3] == arc[3, 4]
    assert to_j[1, 4, 1] == 0 and to_l[1, 4, 4] == 0  # not variables
    assert family.active[4, 1] == ordered  # unordered: one factor per pair, (j, l) with j < l
    assert (to_j[4, 1] == 0).all() == (not ordered)


@pytest.mark.parametrize("ordered", [False, True])
def test_unused_weight_entries_are_ignored(ordered: bool) -> None:
    """theta[j, j] and the ROOT row and column belong to no factor."""
    n, rng = 4, np.random.default_rng(10)
    valid = _valid(n)
    theta = rng.normal(size=(n + 1, n + 1))
    noisy = theta.copy()
    noisy[0, :] = noisy[:, 0] = np.nan
    np.fill_diagonal(noisy, np.inf)
    clean_family, noisy_family = NoCross(n, valid, theta, ordered=ordered), NoCross(n, valid, noisy, ordered=ordered)
    incoming = (rng.normal(size=(n + 1,) * 3), rng.normal(size=(n + 1,) * 3))
    for a, b in zip(clean_family.propagate(incoming), noisy_family.propagate(incoming), strict=True):
        np.testing.assert_array_equal(a, b)
    y = np.zeros((n + 1, n + 1), dtype=bool)
    y[[0, 1, 1, 3], [1, 2, 3, 4]] = True
    assert noisy_family.log_potential(y) == clean_family.log_potential(y)


def test_zero_weight_factors_are_exactly1_pairs() -> None:
    """theta = 0: NOCROSS_{j,l} = EXACTLY1_j EXACTLY1_l, so its message to L[i, j] is EXACTLY1_j's."""
    n, rng = 5, np.random.default_rng(8)
    valid = _valid(n)
    family = NoCross(n, valid, np.zeros((n + 1, n + 1)))
    arc = rng.normal(scale=3.0, size=(n + 1, n + 1))
    to_j, to_l = family.propagate(family.gather(arc))
    (ex,) = Exactly1(n, valid).propagate((arc,))
    for j, l in zip(*np.nonzero(family.active), strict=True):  # noqa: E741
        np.testing.assert_allclose(to_j[j, l], ex[:, j], atol=1e-12)
        np.testing.assert_allclose(to_l[j, l], ex[:, l], atol=1e-12)


def test_bp_on_one_factor_is_exact() -> None:
    """LINK + NOCROSS with n = 2 (a single factor): the factor graph is a tree, BP is exact."""
    n, rng = 2, np.random.default_rng(9)
    valid = _valid(n)
    families = [Link(n, valid, rng.normal(size=(n + 1, n + 1))), NoCross(n, valid, rng.normal(size=(n + 1, n + 1)))]
    result = run_bp(families, valid, BPConfig(max_iterations=5, tolerance=1e-12))
    assert result.converged
    np.testing.assert_allclose(result.beliefs, assignment_marginals(families, valid), atol=1e-12)


def _bp_errors(ordered: bool, hard: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Belief errors against exact tree marginals of TREE + LINK + NOCROSS, of TREE + LINK (first
    order, 1 iteration) and of TREE + LINK + EXACTLY1 (a control: the redundant constraint alone)."""
    errors, first_order, control = [], [], []
    for n in (3, 4):
        for seed in range(4):
            rng = np.random.default_rng(seed)
            valid = _valid(n)
            theta = np.full((n + 1, n + 1), -np.inf) if hard else rng.normal(size=(n + 1, n + 1))
            tree = Tree(n, valid, projective=False, single_root=True)
            link = Link(n, valid, rng.normal(size=(n + 1, n + 1)))
            families = [tree, link, NoCross(n, valid, theta, ordered=ordered)]
            exact = tree_marginals(families, n, single_root=True, projective=False)
            config = BPConfig(max_iterations=10, schedule="serial")
            result = run_bp(families, valid, config)
            assert np.isfinite(result.beliefs).all()
            errors.append(np.abs(result.beliefs - exact)[valid])
            fo = run_bp(families[:2], valid, BPConfig(max_iterations=1)).beliefs
            first_order.append(np.abs(fo - exact)[valid])
            ex1 = run_bp([tree, link, Exactly1(n, valid)], valid, config).beliefs
            control.append(np.abs(ex1 - tree_marginals([tree, link], n, single_root=True, projective=False))[valid])
    return np.concatenate(errors), np.concatenate(first_order), np.concatenate(control)


@pytest.mark.parametrize("ordered", [False, True])
def test_bp_with_tree(ordered: bool) -> None:
    """TREE + LINK + NOCROSS (theta ~ N(0, 1)), n = 3, 4, 4 seeds each, 10 serial iterations, against
    exact non-projective tree marginals. BP is poor here, and the cause is not the crossing weights:
    every NOCROSS factor contains EXACTLY1 of both its words, which TREE already enforces, and loopy
    BP double-counts redundant hard constraints. Measured mean absolute belief error 0.240 (max 0.688)
    both unordered and ordered, against 0.060 (max 0.255) for the first-order marginals; the control
    TREE + LINK + one EXACTLY1 family (no crossing factor, same exact marginals as first order) has
    0.228 (max 0.626), and NOCROSS with theta = 0 (also the first-order distribution) 0.253 (max 0.691).
    With theta = -inf (hard no-crossing; the exact answer is the projective trees): 0.295 (max 0.996)
    unordered, 0.321 (max 0.996) ordered."""
    err, fo, control = _bp_errors(ordered, hard=False)
    assert err.mean() < 0.30 and err.max() < 0.85
    assert abs(err.mean() - control.mean()) < 0.05  # as bad as the redundant EXACTLY1 alone, not worse
    assert fo.mean() < 0.08
    err, _, _ = _bp_errors(ordered, hard=True)
    assert err.mean() < 0.38 and err.max() <= 1.0


@pytest.mark.slow
def test_long_sentence_is_finite_and_fast() -> None:
    """150 words. Measured propagation (best of 5, 2 shared cores): 0.17-0.28 s at n = 150 and 5-10 ms
    at n = 40 (ordered: about twice that); constructor 0.08-0.15 s at n = 150."""
    n, rng = 150, np.random.default_rng(0)
    valid = _valid(n)
    valid[rng.random(valid.shape) < 0.3] = False  # some pruning
    valid[0, 1:] = True
    np.fill_diagonal(valid, False)
    family = NoCross(n, valid, rng.normal(scale=3.0, size=(n + 1, n + 1)))
    incoming = (rng.normal(scale=20.0, size=(n + 1,) * 3), rng.normal(scale=20.0, size=(n + 1,) * 3))
    start = time.perf_counter()
    to_j, to_l = family.propagate(incoming)
    elapsed = time.perf_counter() - start
    assert np.isfinite(to_j).all() and np.isfinite(to_l).all()
    assert elapsed < 10.0
    b = family.pair_beliefs(incoming)
    assert np.isfinite(b).all() and ((b >= 0) & (b <= 1 + 1e-9)).all()
    families = [Tree(n, valid, projective=False, single_root=True),
                Link(n, valid, rng.normal(scale=3.0, size=(n + 1, n + 1))), family]
    result = run_bp(families, valid, BPConfig(max_iterations=2, schedule="serial"))
    assert np.isfinite(result.beliefs).all() and np.isfinite(result.log_odds[valid]).all()
