"""The factored latent model's weights, its factors, and the gradient of ``log Z - log Z_gold`` with respect to
the weights against central finite differences, through the feature mapping (issue 26; brief §1.4, §3.6).

A tiny hand-written treebank (not the PTB sample): the X-bar PCFG gives the grammar and tag dictionary, every
sentence runs over its full (unpruned) item list. Gradients are checked on random subsets of the weights (each
part of the layout represented) for exact inference with one, two and three factors (the last through the
``K^3 = 8``-state product), independent factors, and EP at a fixed point (50 sweeps, tolerance 0).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from nltk import Tree

from engine.constituency.anchored import full_mask
from engine.constituency.binarize import binarize, to_anchored
from engine.constituency.ep import EPSettings
from engine.constituency.features import LexicalFeatures, word_features
from engine.constituency.latent import LatentModel, LatentSettings
from engine.constituency.objective import Prepared, compact_mask, sentence_gradient
from engine.constituency.xbar import train_xbar

TREES = [Tree.fromstring(s) for s in (
    "(TOP (S (NP (DT the) (NN dog)) (VP (VBD barked)) (. .)))",
    "(TOP (S (NP (DT the) (NN cat)) (VP (VBD saw) (NP (DT a) (NN dog)))))",
    "(TOP (S (NP (NNP John)) (VP (VBD ran) (PP (IN to) (NP (DT the) (NN park))))))",
    "(TOP (S (NP (DT a) (JJ big) (NN cat)) (VP (VBD slept))))",
    "(TOP (S (NP (DT the) (NN dog)) (VP (VBD saw) (NP (NP (DT a) (NN cat)) (PP (IN in) (NP (DT the) (NN park)))))))",
    "(TOP (S (NP (NNP John)) (VP (VBD saw) (NP (DT the) (NN dog)) (PP (IN with) (NP (DT a) (JJ big) (NN cat))))))",
    "(TOP (S (NP (NP (DT the) (NN cat)) (PP (IN in) (NP (NNP John)))) (VP (VBD ran))))",
)]
H = 1e-5


def model_of(factors: int, noise: float = 0.3, seed: int = 0) -> LatentModel:
    xbar = train_xbar(TREES, dictionary={"open_tag_threshold": 1})
    features = LexicalFeatures.from_words([w for t in TREES for w in t.leaves()], xbar.tags, word_threshold=2)
    return LatentModel.initial(xbar, features, LatentSettings(factors=factors, noise=noise, seed=seed))


def prepared(model: LatentModel, tree: Tree) -> Prepared:
    words = tree.leaves()
    gold = to_anchored(binarize(tree), model.grammar)
    return Prepared(model.sentence(words), compact_mask(full_mask(model.grammar, len(words))), gold)


def picked(model: LatentModel, rng: np.random.Generator, per_part: int) -> np.ndarray:
    """``per_part`` random weights of each part (W, C, U, D, E) of each factor's block that the gradient or
    the loss can reach (E: a weight of a feature the sentence fires)."""
    layout, out, at = model.layout, [], 0
    for _ in range(model.settings.factors):
        for shape in layout.shapes:
            size = int(np.prod(shape))
            out.append(at + rng.choice(size, size=min(per_part, size), replace=False))
            at += size
    return np.concatenate(out)


def check(model: LatentModel, sentence: Prepared, loss: Callable[[LatentModel], float], analytic: np.ndarray,
          coordinates: np.ndarray, atol: float) -> int:
    """Central differences of ``loss`` at ``coordinates``; returns how many of them have a nonzero gradient."""
    for p in coordinates:
        up, down = model.theta.copy(), model.theta.copy()
        up[p] += H
        down[p] -= H
        fd = (loss(model.with_theta(up)) - loss(model.with_theta(down))) / (2 * H)
        assert analytic[p] == pytest.approx(fd, abs=atol), f"weight {p}"
    return int((np.abs(analytic[coordinates]) > 1e-6).sum())


def lexical_coordinates(model: LatentModel, sentence: Prepared, rng: np.random.Generator, size: int) -> np.ndarray:
    """Weights ``E[f, t, x]`` of features the sentence fires (the others have gradient 0 by construction)."""
    layout = model.layout
    fired = np.unique(sentence.feats.x.indices)
    offset = layout.size - layout.f * layout.t * layout.k
    cols = rng.choice(fired, size=size) * layout.t * layout.k + rng.integers(0, layout.t * layout.k, size)
    m = rng.integers(0, model.settings.factors, size)
    return np.unique(m * layout.size + offset + cols)


@pytest.mark.parametrize(("factors", "inference", "tree"), [(1, "exact", 2), (2, "exact", 6), (3, "exact", 2),
                                                            (2, "independent", 4), (1, "ep", 5)])
def test_exact_gradients_through_the_features(factors: int, inference: str, tree: int) -> None:
    model = model_of(factors)
    sentence = prepared(model, TREES[tree])
    result = sentence_gradient(model, sentence, inference)
    assert result.loss > 0 and np.isfinite(result.gradient).all()

    def loss(m: LatentModel) -> float:
        return sentence_gradient(m, sentence, inference).loss

    rng = np.random.default_rng(factors)
    coords = np.concatenate([picked(model, rng, 6), lexical_coordinates(model, sentence, rng, 12)])
    assert check(model, sentence, loss, result.gradient, coords, 1e-7) >= 10


def test_ep_gradient_at_fifty_sweeps_through_the_features() -> None:
    """At EP's fixed point the gradient of log Z_EP is each factor's counts under its q^m (brief §1.4)."""
    model = model_of(2, noise=0.5, seed=3)
    sentence = prepared(model, TREES[6])
    settings = EPSettings(max_sweeps=50, tolerance=0.0, floor=None)
    result = sentence_gradient(model, sentence, "ep", settings)
    assert result.converged and result.sweeps is not None and result.sweeps > 2  # a fixed point (change 0)

    def loss(m: LatentModel) -> float:
        return sentence_gradient(m, sentence, "ep", settings).loss

    rng = np.random.default_rng(7)
    coords = np.concatenate([picked(model, rng, 2), lexical_coordinates(model, sentence, rng, 4)])
    assert check(model, sentence, loss, result.gradient, coords, 1e-7) >= 4


def test_ep_and_exact_losses_are_close_and_ep_of_one_factor_is_exact() -> None:
    model = model_of(2, noise=0.3, seed=1)
    sentence = prepared(model, TREES[2])
    exact = sentence_gradient(model, sentence, "exact")
    ep = sentence_gradient(model, sentence, "ep", EPSettings(max_sweeps=20, floor=None))
    assert ep.converged and abs(ep.loss - exact.loss) < 0.05 * exact.loss
    one = model_of(1)
    s1 = prepared(one, TREES[2])
    assert sentence_gradient(one, s1, "adf").loss == pytest.approx(sentence_gradient(one, s1, "exact").loss)


def test_factor_weights_are_the_features_sums() -> None:
    """``log_e[i, t, x]`` is the sum of the weights of the features word ``i`` fires, ``-inf`` for tags the tag
    dictionary does not allow; ``log_w`` is the refined plus the coarse rule weight; TOP has one substate."""
    model = model_of(2)
    words = TREES[0].leaves()
    sent = model.sentence(words)
    layout = model.layout
    w, c, u, d, e = layout.split(model.theta[layout.size:])
    f = model.factor(1, sent)
    tags = np.flatnonzero(model.grammar.is_tag)
    for i, word in enumerate(words):
        cols = [model.features.column(n) for n in word_features(word, model.features.fired(word)[1].startswith("w="))]
        allowed = model.xbar.tags.allowed(word)
        for j, t in enumerate(tags):
            expected = e[[x for x in cols if x is not None], j].sum(axis=0) if t in allowed else -np.inf
            np.testing.assert_allclose(f.log_e[i, t], expected)
    g = model.grammar
    splittable = (g.binary != g.top).all(axis=1)
    np.testing.assert_allclose(f.log_w[splittable], (w + c[:, None, None, None])[splittable])
    assert np.isneginf(f.log_u[g.unary[:, 0] == g.top][:, 1]).all()


def test_factors_start_from_the_xbar_rules_with_different_noise() -> None:
    model = model_of(2, noise=0.01)
    layout = model.layout
    first, second = layout.split(model.theta[:layout.size]), layout.split(model.theta[layout.size:])
    finite = np.isfinite(model.xbar.log_binary)
    np.testing.assert_allclose(first[1][finite], model.xbar.log_binary[finite] / 2, atol=0.06)
    assert not np.allclose(first[0], second[0])
    assert abs(first[0].mean()) < 0.005 and 0.005 < first[0].std() < 0.015
