"""Training and parsing with the factored latent model on a tiny hand-written treebank (issue 26): the loop
lowers the loss and fits its training trees, records seconds and dev F1 per epoch, gives the same weights with two
worker processes, and the parser's marginals are those of the model's inference."""

from __future__ import annotations

import numpy as np
import pytest
from test_latent_gradients import TREES

from engine.constituency.anchored import AnchoredScores, build_items
from engine.constituency.ep import EPSettings
from engine.constituency.evalb import evalb
from engine.constituency.inside_outside import inside_outside
from engine.constituency.latent import LatentSettings, product_factor
from engine.constituency.latent_parser import LatentParser
from engine.constituency.latent_train import Trained, TrainSettings, train_latent
from engine.constituency.pruning import prune_mask


def trained(inference: str = "ep", workers: int = 1, epochs: int = 4, factors: int = 2) -> Trained:
    """Trained from uniform rules (no X-bar warm start) on the tiny treebank, every tag open to every word (the
    lexical features must learn the tags), dev = the training trees."""
    settings = TrainSettings(epochs=epochs, batch_size=7, learning_rate=0.05, l2=0.0, inference=inference,
                             workers=workers)
    return train_latent(TREES, TREES, LatentSettings(factors=factors, noise=0.1, warm_start=False), settings,
                        dictionary={"open_tag_threshold": 0})


def test_training_lowers_the_loss_and_fits_the_training_trees() -> None:
    result = trained()
    history = result.history
    assert [h["epoch"] for h in history] == [1, 2, 3, 4]
    assert all(h["seconds"] > 0 and 0 <= h["dev_f1"] <= 100 for h in history)
    losses = [h["loss"] for h in history]  # full batches, a small step: each epoch's loss below the last
    assert all(b < a for a, b in zip(losses, losses[1:], strict=False)) and losses[-1] < 0.8 * losses[0]
    assert history[-1]["train_ep_sweeps_mean"] >= 2 and history[-1]["dev_ep_sweeps_mean"] >= 2
    assert result.best_epoch == max(history, key=lambda h: h["dev_f1"])["epoch"]
    parser = LatentParser(result.model)
    parsed = [parser.parse(t.leaves()) for t in TREES]
    assert evalb(TREES, parsed).short.f1 == pytest.approx(max(h["dev_f1"] for h in history))
    assert max(h["dev_f1"] for h in history) >= 90
    assert parser.failures == 0 and len(parser.sweeps) == len(TREES)


def test_two_workers_give_the_same_weights() -> None:
    one, two = trained(workers=1, epochs=2), trained(workers=2, epochs=2)
    np.testing.assert_allclose(one.model.theta, two.model.theta, rtol=0, atol=1e-9)
    assert [h["dev_f1"] for h in one.history] == [h["dev_f1"] for h in two.history]


@pytest.mark.parametrize("inference", ["exact", "adf", "independent"])
def test_other_inferences_train(inference: str) -> None:
    history = trained(inference=inference, epochs=2).history
    assert history[-1]["loss"] < history[0]["loss"]


def test_parser_marginals_are_the_models() -> None:
    """Exact decoding returns the product's coarse marginals over the X-bar mask; EP's are close to them, and
    with one factor EP decoding is the exact one."""
    model = trained(epochs=1).model
    words = TREES[5].leaves()
    exact = LatentParser(model, "exact")
    tree, marginals = exact.parse_with_marginals(words)
    assert tree.leaves() == words and marginals is not None
    n, size = len(words), model.grammar.n_labels
    assert marginals.mu_bot.shape == (n + 1, n + 1, size)
    mask = prune_mask(model.grammar, exact.pruner.marginals(words))
    items = build_items(model.grammar, mask)
    joint = inside_outside(items, product_factor(model.factors(model.sentence(words))), AnchoredScores.zeros(items))
    np.testing.assert_allclose(marginals.mu_bot, joint.mu_bot, atol=1e-12)
    ep = LatentParser(model, "ep", EPSettings(max_sweeps=20))
    _, approx = ep.parse_with_marginals(words)
    assert approx is not None and ep.converged == [True]
    assert np.abs(approx.mu_bot - marginals.mu_bot).max() < 0.05
    assert abs(approx.mu_top[0, n].sum() - 1) < 1e-9


def test_a_grown_model_starts_as_the_smaller_one() -> None:
    """Two factors warm-started from a trained one-factor model: the first factor is the trained one, the new
    one noise alone, so the exact product parses (nearly) as the one-factor model did; training continues."""
    one = trained(factors=1, epochs=2).model
    two = one.grown(LatentSettings(factors=2, noise=1e-9))
    np.testing.assert_array_equal(two.theta[:len(one.theta)], one.theta)
    assert np.abs(two.theta[len(one.theta):]).max() < 1e-7
    words = TREES[4].leaves()
    _, small = LatentParser(one, "exact").parse_with_marginals(words)
    _, big = LatentParser(two, "exact").parse_with_marginals(words)
    assert small is not None and big is not None
    np.testing.assert_allclose(big.mu_bot, small.mu_bot, atol=1e-6)
    settings = TrainSettings(epochs=1, batch_size=7, learning_rate=0.05, l2=0.0)
    result = train_latent(TREES, TREES, LatentSettings(factors=2), settings, init=one)
    assert len(result.model.theta) == len(two.theta) and result.history[0]["dev_f1"] >= 90
