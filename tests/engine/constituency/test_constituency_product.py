"""Petrov (2010) product decoding (Hall & Klein 2012 §6.1; brief §2) against enumeration on tiny grammars.

Each factor's anchored-rule posteriors come from the enumeration of its refined trees (``brute_force``, nothing
shared with the decoder's inside-outside); every coarse tree of a pruned mask is scored by the sum over factors
of the log posteriors of its binary, unary and tag items, and the decoded tree must be one of the best. With one
factor the objective is the max-rule-product of that factor.
"""

from __future__ import annotations

import numpy as np
import pytest
from pcfg_helpers import brute_force, enumerate_trees, random_factor, sentence, tree_from_events

from engine.constituency.anchored import AnchoredScores, build_items, full_mask
from engine.constituency.binarize import from_anchored
from engine.constituency.decode import max_recall
from engine.constituency.decode_product import petrov_decode, petrov_scores
from engine.constituency.factor import Factor, unit_like
from engine.constituency.item_viterbi import best_tree


def coarse_trees(items, factor: Factor) -> list[list[tuple]]:
    """The events of every coarse tree over the items (one substate, every item live)."""
    return [events for _, events in enumerate_trees(items, unit_like(factor), AnchoredScores.zeros(items))]


def objective(events: list[tuple], posteriors: list) -> float:
    total = 0.0
    for p in posteriors:
        for kind, item, *_ in events:
            mu = {"b": p.mu_b, "u": p.mu_u, "t": p.mu_tag}[kind][item]
            total += np.log(mu) if mu > 0 else -np.inf
    return total


@pytest.mark.parametrize(("seed", "factors", "k"), [(0, 1, 2), (1, 1, 1), (2, 2, 2), (3, 2, 2), (4, 3, 1)])
def test_petrov_decode_maximises_the_summed_log_posteriors(seed: int, factors: int, k: int) -> None:
    rng = np.random.default_rng(seed)
    grammar, items, first = sentence(rng, 4, k, pruned=True)
    fs = [first] + [random_factor(grammar, 4, k, rng) for _ in range(factors - 1)]
    posteriors = [brute_force(items, f, AnchoredScores.zeros(items)) for f in fs]
    scored = [(objective(events, posteriors), events) for events in coarse_trees(items, first)]
    top = max(s for s, _ in scored)
    assert np.isfinite(top) and len(scored) > 2
    words = [f"w{i}" for i in range(4)]
    best = [from_anchored(tree_from_events(items, events), grammar, words) for s, events in scored
            if s >= top - 1e-9]
    assert len(best) < len(scored)  # the objective tells the trees apart
    scores = petrov_scores(items, fs)
    found = best_tree(items, scores.binary, scores.unary, scores.tag, tuple(words))
    assert found is not None and found[0] == pytest.approx(top, abs=1e-9)
    assert petrov_decode(grammar, items, fs, words, {}) in best


def test_one_factor_gives_its_max_rule_product_tree() -> None:
    """With one factor the tree maximises the product of its anchored-rule posteriors: the same tree as the
    decoder run on the factor twice (the objective doubled), and its posteriors product is the enumeration's
    largest."""
    rng = np.random.default_rng(11)
    grammar, items, f = sentence(rng, 4, 2, pruned=True)
    words = [f"w{i}" for i in range(4)]
    p = brute_force(items, f, AnchoredScores.zeros(items))
    products = [np.prod([{"b": p.mu_b, "u": p.mu_u, "t": p.mu_tag}[kind][item] for kind, item, *_ in events])
                for events in coarse_trees(items, f)]
    tree = petrov_decode(grammar, items, [f], words, {})
    assert tree == petrov_decode(grammar, items, [f, f], words, {})
    best = [from_anchored(tree_from_events(items, events), grammar, words)
            for events, value in zip(coarse_trees(items, f), products, strict=True)
            if value >= max(products) * (1 - 1e-9)]
    assert len(best) < len(products)
    assert tree in best


def test_factors_without_a_common_tree_fall_back_to_max_recall() -> None:
    """Two factors whose trees share no root rule (the first forbids TOP -> X and TOP -> S -> X -> a, the second
    TOP -> S): every tree has a rule of posterior 0 under one of them, so the decoder takes Max-Recall over the
    factors' mean marginals."""
    rng = np.random.default_rng(12)
    grammar, _, _ = sentence(rng, 2, 2)
    items = build_items(grammar, full_mask(grammar, 2))
    f1, f2 = random_factor(grammar, 2, 2, rng), random_factor(grammar, 2, 2, rng)
    root = grammar.unary[:, 0] == grammar.top
    to_s = root & (grammar.unary[:, 1] == grammar.index["S"])
    f1.log_u[root & ~to_s] = -np.inf
    f2.log_u[to_s] = -np.inf
    scores = petrov_scores(items, [f1, f2])
    assert best_tree(items, scores.binary, scores.unary, scores.tag) is None
    words, chains = ["w0", "w1"], {(0, 2): ("Y",)}
    a, b = scores.marginals
    expected = max_recall(grammar, (a.mu_bot + b.mu_bot) / 2, (a.mu_top + b.mu_top) / 2, words, chains)
    assert petrov_decode(grammar, items, [f1, f2], words, chains) == expected
