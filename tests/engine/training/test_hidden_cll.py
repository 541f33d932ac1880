"""CLL with latent edge clusters (Smith & Smith 2007 §5.1, eq. 17-18): the objective equals brute-force
enumeration of every tree and every cluster assignment of its edges, and its gradient passes finite differences
of that enumeration; one cluster trains today's weights bit for bit."""

from __future__ import annotations

import itertools
import math
from types import SimpleNamespace

import numpy as np
import pytest

from engine.features.extract import FeatureExtractor
from engine.features.templates import ArcTemplate
from engine.kernels.brute_force import enumerate_trees
from engine.kernels.exact import TreeConstraint
from engine.training.cll import TrainConfig, TrainingBatch, hidden_cll_objective, train_cll

TEMPLATES = (
    ArcTemplate(("upos",), ("upos",), "dist"),
    ArcTemplate(("form",), ("upos",), "dir"),
    ArcTemplate(("upos",), ("form",), "none"),
)


def _sent(text: str, tags: str, heads: list[int]) -> SimpleNamespace:
    return SimpleNamespace(forms=text.split(), upos=tags.split(), xpos=tags.split(), heads=np.array([-1, *heads]),
                           deprels=["dep"] * len(heads))


def _brute_nll(w: np.ndarray, features: np.ndarray, gold: np.ndarray, constraint: TreeConstraint) -> float:
    """-log sum_z p(gold, z | x) for one sentence by enumeration: every tree, every cluster of every edge,
    each (tree, z) scored as sum over its edges of theta . f(h, m, z_edge)."""
    n = len(gold) - 1
    k = len(w)
    edge = np.array([[[math.fsum(w[z, f] for f in features[h, m]) for m in range(n + 1)] for h in range(n + 1)]
                     for z in range(k)])
    trees = enumerate_trees(n, single_root=constraint.single_root, projective=constraint.projective)

    def log_total(heads: np.ndarray) -> float:
        terms = [math.fsum(edge[zs[m - 1], heads[m], m] for m in range(1, n + 1))
                 for zs in itertools.product(range(k), repeat=n)]
        top = max(terms)
        return top + math.log(math.fsum(math.exp(t - top) for t in terms))

    per_tree = [log_total(t) for t in trees]
    top = max(per_tree)
    log_z = top + math.log(math.fsum(math.exp(t - top) for t in per_tree))
    return log_z - log_total(gold)


SENTS = [
    _sent("dogs bark loudly", "NOUN VERB ADV", [2, 0, 2]),
    _sent("the cat sat there", "DET NOUN VERB ADV", [2, 3, 0, 3]),
]


@pytest.mark.parametrize(("tree", "root"), [("nonprojective", "single"), ("projective", "multi")])
def test_hidden_gradient_matches_finite_differences_of_brute_force(tree: str, root: str) -> None:
    constraint = TreeConstraint(tree, root)
    fx = FeatureExtractor(TEMPLATES, 61)
    k = 2
    rng = np.random.default_rng(0)
    w = rng.normal(scale=0.6, size=(k, fx.dim))
    w[:, 0] = 0.0
    for sent in SENTS:
        batch = TrainingBatch(fx.extract([sent]), sent.heads[None])
        value, grad = hidden_cll_objective(w, batch, constraint)
        feats = batch.features[0]
        assert value == pytest.approx(_brute_nll(w, feats, sent.heads, constraint), rel=1e-10)
        used = np.unique(feats)
        used = used[used > 0]
        assert len(used) >= 8
        eps = 1e-5
        for z in range(k):
            for f in used:
                up, down = w.copy(), w.copy()
                up[z, f] += eps
                down[z, f] -= eps
                fd = (_brute_nll(up, feats, sent.heads, constraint)
                      - _brute_nll(down, feats, sent.heads, constraint)) / (2 * eps)
                assert grad[z, f] == pytest.approx(fd, abs=1e-7)
        assert (grad[:, 0] == 0).all()
        assert np.abs(grad).max() > 1e-3  # the check compared something


def test_clusters_get_different_gradients_once_the_symmetry_is_broken() -> None:
    fx = FeatureExtractor(TEMPLATES, 61)
    sent = SENTS[1]
    batch = TrainingBatch(fx.extract([sent]), sent.heads[None])
    equal = np.tile(np.random.default_rng(4).normal(size=fx.dim), (2, 1))
    _, grad = hidden_cll_objective(equal, batch, TreeConstraint())
    assert np.array_equal(grad[0], grad[1])  # why the initial weights need noise
    noisy = equal + np.random.default_rng(5).normal(scale=0.1, size=equal.shape)
    _, grad = hidden_cll_objective(noisy, batch, TreeConstraint())
    assert not np.allclose(grad[0], grad[1])


def test_training_with_one_cluster_equals_todays_training_bit_for_bit() -> None:
    fx = FeatureExtractor(TEMPLATES, 61)
    train = [*SENTS, _sent("birds sing", "NOUN VERB", [2, 0]), _sent("we ran home fast", "PRON VERB NOUN ADV",
                                                                  [2, 0, 2, 2])]
    config = TrainConfig(epochs=3, batch_size=2, learning_rate=0.3, l2=0.5, seed=7)
    plain = train_cll(fx, TreeConstraint(), train, config, progress=False)
    hidden = train_cll(fx, TreeConstraint(), train, config, progress=False, clusters=1)
    assert hidden.weights.shape == (1, fx.dim)
    assert hidden.weights[0].tobytes() == plain.weights.tobytes()
    assert [h["nll"] for h in hidden.history] == [h["nll"] for h in plain.history]
    two = train_cll(fx, TreeConstraint(), train, config, progress=False, clusters=2)
    assert two.weights.shape == (2, fx.dim)
    assert two.history[-1]["nll"] < two.history[0]["nll"]
