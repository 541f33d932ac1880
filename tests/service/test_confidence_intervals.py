"""/confidence's intervals (service.parsing.confidence_json): computed around the model's own marginal even when
the reported probability is calibrated, and marked vacuous exactly when they cover [0, 1]."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from engine.decode.calibration import calibrated
from engine.inference.relaxed_gain import marginal_interval
from engine.results import ParsedSentence
from service.parsing import confidence_json, model_marginals


def _parsed(eta: float) -> ParsedSentence:
    rng = np.random.default_rng(int(eta * 10))
    marginals = np.zeros((5, 5))
    marginals[:, 1:] = rng.dirichlet(np.ones(5), size=4).T
    heads = np.concatenate([[-1], marginals[:, 1:].argmax(axis=0)])
    m = np.arange(1, 5)
    return ParsedSentence(heads, marginals[heads[1:], m], marginals, None, ["dep"] * 4, np.full(4, 0.8),
                          {"method": "relaxed", "eta": eta})


SENTENCE = SimpleNamespace(forms=["a", "b", "c", "d"], n=4)


@pytest.mark.parametrize("power", [0.5, 1.0, 1.7])
def test_model_marginals_undo_the_head_calibration(power: float) -> None:
    raw = _parsed(0.0)
    np.testing.assert_allclose(model_marginals(calibrated(raw, power)), raw.head_probs, rtol=1e-10)


@pytest.mark.parametrize("eta", [0.0, 0.05, 0.7, 3.0, 50.0])
def test_intervals_are_around_the_model_marginal_and_vacuous_when_they_cover_everything(eta: float) -> None:
    raw = _parsed(eta)
    (out,) = confidence_json([SENTENCE], [calibrated(raw, 0.6)])  # type: ignore[list-item]
    lower, upper = marginal_interval(raw.head_probs, eta)
    for t, lo, up, mu in zip(out["tokens"], lower, upper, raw.head_probs, strict=True):
        assert t["model_prob"] == pytest.approx(mu, rel=1e-10)
        assert t["lower"] == pytest.approx(lo, abs=1e-12) and t["upper"] == pytest.approx(up, abs=1e-12)
        assert t["vacuous"] == (t["lower"] == 0.0 and t["upper"] == 1.0)
    assert out["vacuous_share"] == pytest.approx(np.mean([t["vacuous"] for t in out["tokens"]]))
    if eta == 0.0:
        assert out["vacuous_share"] == 0.0 and all(t["lower"] == t["upper"] for t in out["tokens"])
    if eta == 50.0:
        assert out["vacuous_share"] == 1.0
    assert 0.0 <= out["p_tree"] <= 1.0 and out["p_tree_source"] == "estimate"
