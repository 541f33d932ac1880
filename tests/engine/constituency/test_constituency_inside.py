"""Inside-outside of a factor times an anchored grammar against brute-force enumeration (issue 26, brief §3.1-2).

Every case enumerates all refined trees (each binarised tree with its unary layer and every substate assignment)
over the live items of a tiny random grammar, and compares ``log Z``, the refined expected counts and the coarse
marginals of both implementations (scaled, log-space) with the plain sums, to 1e-10.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from pcfg_helpers import (
    brute_force,
    enumerate_trees,
    live_scores,
    pruned_mask,
    random_factor,
    random_scores,
    sentence,
    tiny_grammar,
    tree_from_events,
)

from engine.constituency.anchored import AnchoredScores, build_items, full_mask
from engine.constituency.factor import kronecker_product, make_factor, substates
from engine.constituency.inside_outside import (
    gold_pass,
    inside_outside,
    inside_outside_numpy,
    log_partition,
    log_partition_numpy,
)
from engine.constituency.reference import inside_outside_log

SCALED = {"numba": (inside_outside, log_partition), "numpy": (inside_outside_numpy, log_partition_numpy)}
EVERY = {"numba": inside_outside, "numpy": inside_outside_numpy, "log": inside_outside_log}

FIELDS = ("w_counts", "u_counts", "e_counts", "mu_b", "mu_u", "mu_tag", "mu_bot", "mu_top")

CASES = [  # n, K, pruned, labels with one substate
    (1, 2, False, ()),
    (3, 2, False, ()),
    (3, 3, False, ("a",)),
    (4, 2, True, ()),
    (5, 1, False, ()),
    (5, 1, True, ()),
    (6, 1, True, ()),
]


@pytest.mark.parametrize("implementation", EVERY)
@pytest.mark.parametrize(("n", "k", "pruned", "unsplit"), CASES)
def test_every_implementation_equals_enumeration(n: int, k: int, pruned: bool, unsplit: tuple[str, ...],
                                                 implementation: str) -> None:
    rng = np.random.default_rng(100 * n + 10 * k + pruned)
    _, items, f = sentence(rng, n, k, pruned, unsplit=unsplit)
    q = live_scores(items, f, rng)
    expected = brute_force(items, f, q)
    assert expected.count > 1
    got = EVERY[implementation](items, f, q)
    assert got.log_z == pytest.approx(expected.log_z, abs=1e-10)
    for name in FIELDS:
        np.testing.assert_allclose(getattr(got, name), getattr(expected, name), rtol=0, atol=1e-10, err_msg=name)


def test_items_are_exactly_the_live_combinations() -> None:
    rng = np.random.default_rng(5)
    grammar = tiny_grammar(rng)
    mask = pruned_mask(grammar, 4, rng)
    items = build_items(grammar, mask)
    expected = {(i, k, j, r) for i in range(4) for j in range(i + 2, 5) for k in range(i + 1, j)
                for r, (a, b, c) in enumerate(grammar.binary)
                if mask.bot[i, j, a] and mask.top[i, k, b] and mask.top[k, j, c]}
    got = set(zip(items.bin_i.tolist(), items.bin_k.tolist(), items.bin_j.tolist(), items.bin_r.tolist(),
                  strict=True))
    assert got == expected and len(got) == items.n_binary
    lengths = items.bin_j - items.bin_i
    for length in range(2, 5):
        assert (lengths[items.binary_of_length(length)] == length).all()
    unary = {(i, j, u) for i in range(4) for j in range(i + 1, 5) for u, (a, b) in enumerate(grammar.unary)
             if mask.top[i, j, a] and mask.bot[i, j, b]}
    assert set(zip(items.un_i.tolist(), items.un_j.tolist(), items.un_u.tolist(), strict=True)) == unary
    order = np.lexsort((items.bin_r, items.bin_k, items.bin_i, lengths))  # length, i, k, rule
    np.testing.assert_array_equal(order, np.arange(items.n_binary))
    assert (np.diff(items.un_j - items.un_i) >= 0).all()
    assert (grammar.binary[items.bin_r, 0] == items.bin_a).all() and (grammar.unary[items.un_u, 1] == items.un_b).all()


@pytest.mark.parametrize("implementation", SCALED)
@pytest.mark.parametrize("k", [1, 2, 4])
def test_totals(k: int, implementation: str) -> None:
    """Brief §3.2: one tag per word, n - 1 binary parents, 2n - 1 unaries, the binary items of a parent add up
    to its bot marginal, the root's top marginal is 1, no NaN."""
    rng = np.random.default_rng(k)
    n = 6
    _, items, f = sentence(rng, n, 1)
    f = random_factor(tiny_grammar(np.random.default_rng(k)), n, k, rng)
    got = SCALED[implementation][0](items, f, random_scores(items, rng))
    spans = [(i, j) for i in range(n) for j in range(i + 2, n + 1)]
    assert np.isfinite(got.mu_bot).all() and np.isfinite(got.mu_b).all() and np.isfinite(got.w_counts).all()
    np.testing.assert_allclose(got.mu_bot[np.arange(n), np.arange(1, n + 1)].sum(axis=1), 1.0, atol=1e-12)
    assert sum(got.mu_bot[i, j].sum() for i, j in spans) == pytest.approx(n - 1, abs=1e-12)
    assert got.mu_u.sum() == pytest.approx(2 * n - 1, abs=1e-12)
    assert got.w_counts.sum() == pytest.approx(n - 1, abs=1e-12)
    per_parent = np.zeros_like(got.mu_bot)
    np.add.at(per_parent, (items.bin_i, items.bin_j, items.bin_a), got.mu_b)
    for i, j in spans:
        np.testing.assert_allclose(per_parent[i, j], got.mu_bot[i, j], atol=1e-12)
    assert got.mu_top[0, n, items.root] == pytest.approx(1.0, abs=1e-12)


@pytest.mark.parametrize("implementation", SCALED)
def test_scaled_pass_survives_extreme_scores(implementation: str) -> None:
    """Scores of +-300 per item and weights of +-30 per rule overflow or underflow probabilities: the scaled pass
    agrees with the log-space oracle on log Z (relative 1e-12) and every marginal (1e-9)."""
    rng = np.random.default_rng(3)
    grammar = tiny_grammar(rng)
    items = build_items(grammar, full_mask(grammar, 6))
    f = random_factor(grammar, 6, 2, rng, scale=30.0)
    q = AnchoredScores(300 * rng.standard_normal(items.n_binary), 300 * rng.standard_normal(items.n_unary),
                       300 * rng.standard_normal(items.n_tags))
    got, oracle = SCALED[implementation][0](items, f, q), inside_outside_log(items, f, q)
    assert abs(got.log_z) > 800
    assert got.log_z == pytest.approx(oracle.log_z, rel=1e-12)
    for name in FIELDS:
        np.testing.assert_allclose(getattr(got, name), getattr(oracle, name), rtol=0, atol=1e-9, err_msg=name)


@pytest.mark.parametrize("implementation", SCALED)
def test_no_live_tree_raises_and_log_partition_is_minus_inf(implementation: str) -> None:
    rng = np.random.default_rng(4)
    _, items, f = sentence(rng, 3, 2)
    q = AnchoredScores(np.full(items.n_binary, -np.inf), np.zeros(items.n_unary), np.zeros(items.n_tags))
    passes, partition = SCALED[implementation]
    assert partition(items, f, q) == -np.inf
    with pytest.raises(FloatingPointError):
        passes(items, f, q)


def test_gold_pass_equals_the_sum_over_one_trees_substates() -> None:
    """The tree-shaped pass (items of the gold tree only, no anchored grammar) against the refined trees of the
    enumeration whose coarse skeleton is that tree."""
    rng = np.random.default_rng(6)
    grammar, items, f = sentence(rng, 4, 2, pruned=True)
    zero = AnchoredScores.zeros(items)
    trees = list(enumerate_trees(items, f, zero))
    skeleton = sorted({e[:2] for e in trees[len(trees) // 2][1]})
    same = [(w, events) for w, events in trees if sorted({e[:2] for e in events}) == skeleton]
    assert len(same) > 1
    tree = tree_from_events(items, same[0][1])
    got = gold_pass(grammar, tree, f)
    weights = np.array([w for w, _ in same])
    assert got.log_z == pytest.approx(np.log(np.exp(weights).sum()), abs=1e-12)
    assert got.w_counts.sum() == pytest.approx(3, abs=1e-12) and got.u_counts.sum() == pytest.approx(7, abs=1e-12)
    np.testing.assert_allclose(got.mu_b, 1.0, atol=1e-12)
    expected = np.zeros_like(f.log_w)
    for w, events in same:
        for e in events:
            if e[0] == "b":
                expected[items.bin_r[e[1]], e[2], e[3], e[4]] += np.exp(w - got.log_z)
    np.testing.assert_allclose(got.w_counts, expected, atol=1e-12)


def test_factor_masks_padding_and_identity_off_diagonals() -> None:
    grammar = tiny_grammar(np.random.default_rng(0))
    counts = substates(grammar, 2, ("a",))
    f = make_factor(grammar, np.zeros((len(grammar.binary), 2, 2, 2)), np.zeros((len(grammar.unary), 2, 2)),
                    np.zeros((3, 5, 2)), counts)
    identity = grammar.unary[:, 0] == grammar.unary[:, 1]
    assert np.isneginf(f.log_u[identity][:, 0, 1]).all() and np.isneginf(f.log_u[identity][:, 1, 0]).all()
    assert (f.log_u[grammar.unary[:, 0] == grammar.top][:, 1] == -np.inf).all()
    assert np.isneginf(f.log_e[:, grammar.index["a"], 1]).all() and np.isfinite(f.log_e[:, grammar.index["b"]]).all()


def test_kronecker_product_multiplies_weights() -> None:
    rng = np.random.default_rng(9)
    grammar = tiny_grammar(rng)
    f1, f2 = random_factor(grammar, 3, 2, rng), random_factor(grammar, 3, 2, rng)
    both = kronecker_product(f1, f2)
    assert both.k == 4
    for r, x1, x2, y1, y2, z1, z2 in itertools.product(range(len(grammar.binary)), *[range(2)] * 6):
        assert both.log_w[r, 2 * x1 + x2, 2 * y1 + y2, 2 * z1 + z2] == f1.log_w[r, x1, y1, z1] + f2.log_w[r, x2, y2, z2]
