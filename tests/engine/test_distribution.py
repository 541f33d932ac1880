"""The distribution API: log partition, marginals, MBR, k-best and samples from one object."""

from __future__ import annotations

import numpy as np
import pytest

from engine.graph.build import build_graph
from engine.graph.family import all_arcs
from engine.inference.bp import BPConfig, run_bp
from engine.kernels.brute_force import brute_force
from engine.kernels.exact import TreeConstraint
from engine.results import TreeDistribution

MODES = [TreeConstraint(t, r) for t in ("nonprojective", "projective") for r in ("single", "multi")]


@pytest.mark.parametrize("constraint", MODES, ids=lambda c: f"{c.tree}-{c.root}")
def test_distribution_matches_brute_force(constraint: TreeConstraint) -> None:
    rng = np.random.default_rng(0)
    scores = rng.normal(size=(5, 5))
    dist = TreeDistribution(scores, constraint)
    oracle = brute_force(scores, single_root=constraint.single_root, projective=constraint.projective)
    assert dist.log_partition == pytest.approx(oracle.log_partition)
    np.testing.assert_allclose(dist.marginals, oracle.marginals, atol=1e-9)
    np.testing.assert_array_equal(dist.argmax(), oracle.best_heads)
    everything = dist.kbest(10_000)
    assert len(everything) == len(oracle.trees)
    assert sum(np.exp(lp) for lp, _ in everything) == pytest.approx(1.0)
    log_probs = [lp for lp, _ in everything]
    assert log_probs == sorted(log_probs, reverse=True)
    np.testing.assert_array_equal(everything[0][1], oracle.best_heads)
    for lp, heads in everything[:5]:
        assert lp == pytest.approx(dist.log_prob(heads))
    first = dist.sample(50, seed=3)
    again = dist.sample(50, seed=3)
    assert all(np.array_equal(a[1], b[1]) for a, b in zip(first, again, strict=True))
    assert all(lp == pytest.approx(dist.log_prob(h)) for lp, h in first)


def test_bp_tree_factor_distribution_is_exact_for_first_order_graphs() -> None:
    """With LINK + TREE only, the tree factor's incoming messages are the arc scores themselves."""
    from types import SimpleNamespace

    n, rng = 5, np.random.default_rng(1)
    scores = rng.normal(size=(n + 1, n + 1))
    valid = all_arcs(n)
    tokens = SimpleNamespace(forms=["w"] * n, upos=["X"] * n, xpos=["X"] * n)
    graph = build_graph(tokens, valid, scores, np.zeros(4), {})
    result = run_bp(graph.families, valid, BPConfig(max_iterations=2))
    dist = TreeDistribution(np.where(valid, result.incoming[0][0], -np.inf), TreeConstraint(), "bp-tree-factor")
    exact = TreeDistribution(scores, TreeConstraint())
    np.testing.assert_allclose(dist.marginals, exact.marginals, atol=1e-9)
    assert [h.tolist() for _, h in dist.kbest(5)] == [h.tolist() for _, h in exact.kbest(5)]
