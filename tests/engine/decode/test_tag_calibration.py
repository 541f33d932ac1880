"""Tag probabilities of joint parses (engine.decode.calibration: ``calibrated_tags``, ``fit_upos_power``) and which
tag inference a parse runs (engine.decode.tag_marginal.resolve_tag_average)."""

from __future__ import annotations

import numpy as np
import pytest

from engine.decode.calibration import calibrated, calibrated_tags, fit_upos_power, minimise_power, powered
from engine.decode.tag_marginal import resolve_tag_average
from engine.results import ParsedSentence

LABELS = ("ADJ", "NOUN", "VERB")


def _joint_parse(dist: np.ndarray, chosen: list[str]) -> ParsedSentence:
    n = len(dist)
    heads = np.array([0, *([0] + list(range(1, n)))])
    marginals = np.zeros((n + 1, n + 1))
    marginals[heads[1:], np.arange(1, n + 1)] = 1.0
    column = {t: k for k, t in enumerate(LABELS)}
    return ParsedSentence(heads, np.ones(n), marginals, None, ["dep"] * n, np.ones(n),
                          diagnostics={"upos_marginals": (LABELS, dist)}, upos=chosen, xpos=chosen,
                          upos_probs=dist[np.arange(n), [column[t] for t in chosen]])


def test_powered_distributions_sum_to_one_keep_order_and_zeros() -> None:
    rng = np.random.default_rng(0)
    dist = rng.dirichlet(np.ones(5), size=20)
    dist[3, 2] = 0.0
    dist[3] /= dist[3].sum()
    for power in (0.4, 1.0, 2.5):
        out = powered(dist, power, axis=1)
        np.testing.assert_allclose(out.sum(axis=1), 1.0, atol=1e-12)
        assert (np.argsort(out, axis=1) == np.argsort(dist, axis=1)).all() and out[3, 2] == 0.0
        expected = dist ** power / (dist ** power).sum(axis=1, keepdims=True)
        np.testing.assert_allclose(out, expected, atol=1e-12)


def test_calibrated_tags_keep_the_distribution_and_the_probability_one() -> None:
    """The chosen tag's reported probability is its entry of the mapped distribution, which sums to 1; the tags
    and the heads do not move; a power of 1, or a parse without joint tags, is left as it is."""
    dist = np.array([[0.7, 0.2, 0.1], [0.05, 0.5, 0.45], [0.0, 0.01, 0.99]])
    parse = _joint_parse(dist, ["ADJ", "VERB", "VERB"])
    out = calibrated(parse, 1.0, upos_power=0.5)
    labels, mapped = out.diagnostics["upos_marginals"]
    assert labels == LABELS and out.upos == parse.upos
    np.testing.assert_allclose(mapped.sum(axis=1), 1.0, atol=1e-12)
    np.testing.assert_allclose(out.upos_probs, mapped[[0, 1, 2], [0, 2, 2]], atol=1e-12)
    assert out.upos_probs[0] == pytest.approx(0.7 ** 0.5 / (0.7 ** 0.5 + 0.2 ** 0.5 + 0.1 ** 0.5))
    np.testing.assert_array_equal(out.diagnostics["model_upos_probs"], parse.upos_probs)
    assert calibrated_tags(parse, 1.0) is parse
    plain = _joint_parse(dist, ["ADJ", "VERB", "VERB"])
    plain.upos = None
    assert calibrated_tags(plain, 0.5) is plain


def test_fit_upos_power_recovers_a_known_overconfidence() -> None:
    """True tag distributions q; the model reports powered(q, 1/0.6) (overconfident); each word's tag is right
    with probability q(chosen): the fitted power is near 0.6. Fixed seed, 8,000 words."""
    rng = np.random.default_rng(11)
    q = rng.dirichlet(np.full(3, 0.6), size=8000)
    reported = powered(q, 1 / 0.6, axis=1)
    chosen = reported.argmax(axis=1)
    right = rng.random(len(q)) < q[np.arange(len(q)), chosen]
    gold_tags = [LABELS[c] if ok else LABELS[(c + 1) % 3] for c, ok in zip(chosen, right, strict=True)]
    parses, gold = [], []
    for start in range(0, len(q), 20):
        parses.append(_joint_parse(reported[start:start + 20], [LABELS[c] for c in chosen[start:start + 20]]))
        gold.append(type("Gold", (), {"upos": gold_tags[start:start + 20]})())
    fitted = fit_upos_power(parses, gold)
    assert fitted is not None and 0.53 < fitted < 0.67
    # the fit runs on every word's distribution at once; one sentence at a time through calibrated_tags, as a
    # parse applies the map, the same search finds the same power
    right = np.concatenate([np.asarray(p.upos) == np.asarray(g.upos) for p, g in zip(parses, gold, strict=True)])
    assert fitted == minimise_power(lambda d: float(((np.concatenate(
        [calibrated_tags(p, d).upos_probs for p in parses]) - right) ** 2).mean()))
    plain = parses[0]
    plain.upos = None
    assert fit_upos_power([plain], gold[:1]) is None  # no joint tags: nothing to fit


def test_resolve_tag_average_user_then_model_where_it_can_run() -> None:
    assert resolve_tag_average(None, "joint", "bp", 0) == "joint"
    assert resolve_tag_average(None, "joint", "relaxed", 0) == "potentials"  # the model's default gives way
    assert resolve_tag_average(None, "joint", "bp", 8) == "potentials"
    assert resolve_tag_average(None, "marginals", "relaxed", 4) == "marginals"
    assert resolve_tag_average("marginals", "joint", "bp", 4) == "marginals"
    with pytest.raises(ValueError, match="plain BP"):
        resolve_tag_average("joint", "potentials", "relaxed", 0)
    with pytest.raises(ValueError, match="no tag samples"):
        resolve_tag_average("joint", "potentials", "bp", 4)
    with pytest.raises(ValueError, match="tag_average must be one of"):
        resolve_tag_average(None, "mean", "bp", 0)
