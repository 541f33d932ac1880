"""Latent edge clusters (engine.scoring.hidden, Smith & Smith 2007 §5.1): the marginalised edge scores equal
explicit sums over the clusters, and one cluster gives today's first-order scores and gradient bit for bit."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest

from engine.features.extract import FeatureExtractor
from engine.features.templates import ArcTemplate
from engine.kernels.exact import TreeConstraint
from engine.scoring.hidden import (
    HIDDEN_INIT_SCALE,
    cluster_scores,
    initial_cluster_weights,
    marginalise_clusters,
    scatter_cluster_gradient,
)
from engine.scoring.potentials import arc_scores, scatter_gradient
from engine.training.cll import TrainingBatch, cll_objective, hidden_cll_objective

TEMPLATES = (
    ArcTemplate(("upos",), ("upos",), "dist"),
    ArcTemplate(("form",), ("upos",), "dir"),
    ArcTemplate(("upos",), ("upos",), "dir", between=True),
)


def _sent(text: str, tags: str, heads: list[int]) -> SimpleNamespace:
    return SimpleNamespace(forms=text.split(), upos=tags.split(), xpos=tags.split(), heads=np.array([-1, *heads]))


SENTS = [
    _sent("the old dog barks", "DET ADJ NOUN VERB", [3, 3, 4, 0]),
    _sent("a cat sleeps there", "DET NOUN VERB ADV", [2, 3, 0, 3]),
]


def _batch(dim: int = 97) -> tuple[FeatureExtractor, TrainingBatch]:
    fx = FeatureExtractor(TEMPLATES, dim)
    return fx, TrainingBatch(fx.extract(SENTS), np.stack([s.heads for s in SENTS]))


def test_marginalised_scores_equal_explicit_sums_over_clusters() -> None:
    fx, batch = _batch()
    w = np.random.default_rng(1).normal(scale=1.0, size=(3, fx.dim))
    w[:, 0] = 0.0
    s, post = marginalise_clusters(cluster_scores(w, batch.features))
    b, n1 = batch.gold.shape
    for i in range(b):
        for h in range(n1):
            for m in range(n1):
                if m == 0 or h == m:
                    assert s[i, h, m] == -np.inf and (post[:, i, h, m] == 0).all()
                    continue
                per = [math.fsum(w[z, f] for f in batch.features[i, h, m]) for z in range(3)]
                total = math.fsum(math.exp(x) for x in per)
                assert s[i, h, m] == pytest.approx(math.log(total), rel=1e-12, abs=1e-12)
                assert post[:, i, h, m] == pytest.approx([math.exp(x) / total for x in per], rel=1e-12)
    assert np.allclose(post.sum(axis=0)[np.isfinite(s)], 1.0)


def test_marginalising_is_stable_for_large_scores() -> None:
    per = np.array([[1000.0, -1000.0, -np.inf], [1000.0, 5.0, -np.inf]])
    s, post = marginalise_clusters(per)
    assert s[0] == pytest.approx(1000.0 + math.log(2.0))
    assert s[1] == pytest.approx(5.0)  # exp(-1000) underflows: the sum is the larger term itself
    assert s[2] == -np.inf and (post[:, 2] == 0).all()
    assert post[:, 0] == pytest.approx([0.5, 0.5])


@pytest.mark.parametrize("tree", ["nonprojective", "projective"])
@pytest.mark.parametrize("root", ["single", "multi"])
def test_one_cluster_is_the_first_order_model_bit_for_bit(tree: str, root: str) -> None:
    fx, batch = _batch()
    w = np.random.default_rng(2).normal(scale=0.7, size=fx.dim)
    w[0] = 0.0
    plain = arc_scores(w, batch.features)
    s, post = marginalise_clusters(cluster_scores(w[None], batch.features))
    assert s.tobytes() == plain.tobytes()
    assert (post[0][np.isfinite(plain)] == 1.0).all()
    constraint = TreeConstraint(tree, root)
    nll, grad = cll_objective(w, batch, constraint)
    hidden_nll, hidden_grad = hidden_cll_objective(w[None], batch, constraint)
    assert hidden_nll == nll
    assert hidden_grad.shape == (1, fx.dim)
    assert hidden_grad[0].tobytes() == grad.tobytes()
    score_grad = np.random.default_rng(3).normal(size=plain.shape)
    assert scatter_cluster_gradient(batch.features, score_grad, post, fx.dim)[0].tobytes() == \
        scatter_gradient(batch.features, score_grad, fx.dim).tobytes()


def test_initial_weights_break_symmetry_only_with_several_clusters() -> None:
    assert not initial_cluster_weights(1, 50, seed=0).any()
    w = initial_cluster_weights(4, 5000, seed=0)
    assert w.shape == (4, 5000) and (w[:, 0] == 0).all()
    assert np.std(w[:, 1:]) == pytest.approx(HIDDEN_INIT_SCALE, rel=0.05)
    assert not np.array_equal(w[0], w[1])
    assert np.array_equal(w, initial_cluster_weights(4, 5000, seed=0))
    assert not np.array_equal(w, initial_cluster_weights(4, 5000, seed=1))
    with pytest.raises(ValueError):
        initial_cluster_weights(0, 50, seed=0)
