"""The isotonic stage of the head calibration (engine.decode.isotonic): the fitted knots are the pool-adjacent-
violators solution, the remapped columns stay distributions with the chosen head mapped and the others in
order, and stored knots are checked."""

from __future__ import annotations

import numpy as np
import pytest

from engine.decode.calibration import calibrated, manifest_calibration
from engine.decode.isotonic import check_knots, fit_knots, fit_platt_knots, remap_chosen
from engine.evaluation.calibration_fit import choose_stage
from engine.results import ParsedSentence


def _brute_isotonic(y: np.ndarray) -> np.ndarray:
    """Pool adjacent violators written out: merge neighbouring blocks while their means decrease."""
    blocks = [[float(v), 1] for v in y]
    i = 0
    while i < len(blocks) - 1:
        if blocks[i][0] / blocks[i][1] > blocks[i + 1][0] / blocks[i + 1][1]:
            blocks[i] = [blocks[i][0] + blocks[i + 1][0], blocks[i][1] + blocks[i + 1][1]]
            del blocks[i + 1]
            i = max(i - 1, 0)
        else:
            i += 1
    return np.concatenate([np.full(c, s / c) for s, c in blocks])


def test_knots_reproduce_the_isotonic_fit_at_the_data() -> None:
    rng = np.random.default_rng(11)
    q = np.round(rng.uniform(0.2, 1.0, 300), 4)
    y = rng.random(300) < q ** 2
    knots = check_knots(fit_knots(q, y))
    assert knots is not None
    order = np.argsort(q, kind="stable")
    expected = _brute_isotonic(y[order].astype(float))
    np.testing.assert_allclose(np.interp(q[order], *knots), expected, atol=2e-5)


def test_remapped_columns_stay_distributions_with_the_chosen_head_mapped() -> None:
    rng = np.random.default_rng(2)
    marginals = np.zeros((6, 6))
    marginals[:, 1:] = rng.dirichlet(np.ones(6) * 0.5, size=5).T
    marginals[1:, 1:][np.eye(5, dtype=bool)] = 0.0
    marginals[:, 1:] /= marginals[:, 1:].sum(axis=0)
    heads = np.concatenate([[-1], marginals[:, 1:].argmax(axis=0)])
    knots = (np.array([0.0, 0.5, 1.0]), np.array([0.0, 0.6, 0.9]))
    out = remap_chosen(marginals, heads, knots)
    m = np.arange(1, 6)
    np.testing.assert_allclose(out[:, 1:].sum(axis=0), 1.0, atol=1e-12)
    np.testing.assert_allclose(out[heads[1:], m], np.interp(marginals[heads[1:], m], *knots))
    for j in m:  # the other heads keep their order and their zeros
        others = np.setdiff1d(np.arange(6), [heads[j]])
        order = np.argsort(marginals[others, j], kind="stable")
        assert np.all(np.diff(out[others[order], j]) >= -1e-15)
        assert np.all(out[others, j][marginals[others, j] == 0] == 0)
    sure = np.zeros((3, 3))
    sure[0, 1], sure[1, 2] = 1.0, 1.0  # no alternative: the chosen head keeps all the mass
    np.testing.assert_array_equal(remap_chosen(sure, np.array([-1, 0, 1]), knots), sure)


def test_calibrated_applies_power_then_isotonic_and_keeps_the_raw_values() -> None:
    marginals = np.zeros((3, 3))
    marginals[0, 1], marginals[2, 1] = 0.9, 0.1
    marginals[1, 2], marginals[0, 2] = 0.7, 0.3
    heads = np.array([-1, 0, 1])
    parsed = ParsedSentence(heads, np.array([0.9, 0.7]), marginals, None, ["a", "b"], np.ones(2))
    knots = (np.array([0.0, 1.0]), np.array([0.0, 0.8]))
    out = calibrated(parsed, 0.5, head_knots=knots)
    powered = np.sqrt([0.9, 0.7]) / (np.sqrt([0.9, 0.7]) + np.sqrt([0.1, 0.3]))
    np.testing.assert_allclose(out.head_probs, 0.8 * powered)
    np.testing.assert_allclose(out.diagnostics["power_head_probs"], powered)
    np.testing.assert_array_equal(out.diagnostics["model_head_probs"], [0.9, 0.7])
    np.testing.assert_array_equal(out.heads, heads)


@pytest.mark.parametrize("bad", [{"x": [0.5, 0.2], "y": [0.1, 0.2]}, {"x": [0.1, 0.2], "y": [0.3, 0.2]},
                                 {"x": [0.1], "y": [0.1, 0.2]}, {"x": [], "y": []}, {"x": [2.0], "y": [0.5]},
                                 [0.1, 0.2], {"x": [0.1, float("nan")], "y": [0.1, 0.2]}])
def test_bad_knots_are_refused(bad: object) -> None:
    with pytest.raises(ValueError, match="head_isotonic"):
        check_knots(bad)
    with pytest.raises(ValueError, match="head_isotonic"):
        manifest_calibration({"head_isotonic": bad})
    assert manifest_calibration({})["head_isotonic"] is None


def _sigmoid(t: np.ndarray) -> np.ndarray:
    return np.asarray(1.0 / (1.0 + np.exp(-t)))


def test_platt_knots_recover_a_known_curve_and_are_valid_knots() -> None:
    """Heads right with probability sigmoid(1.7 logit(q) - 0.4) (fixed seed, 40,000 words): the fitted Platt
    curve, stored as knots, is that curve to within sampling error, and the knots pass ``check_knots``; a fit that
    would decrease is replaced by the identity."""
    rng = np.random.default_rng(2)
    q = rng.uniform(0.02, 0.999, 40_000)
    truth = _sigmoid(1.7 * (np.log(q) - np.log1p(-q)) - 0.4)
    knots = check_knots(fit_platt_knots(q, rng.random(len(q)) < truth))
    assert knots is not None and knots[0][0] == 0.0 and knots[0][-1] == 1.0
    grid = np.linspace(0.05, 0.99, 50)
    expected = _sigmoid(1.7 * (np.log(grid) - np.log1p(-grid)) - 0.4)
    assert np.max(np.abs(np.interp(grid, *knots) - expected)) < 0.02
    assert fit_platt_knots(q, rng.random(len(q)) < 1.0 - q) == {"x": [0.0, 1.0], "y": [0.0, 1.0]}


def test_the_stage_is_chosen_by_held_out_ece() -> None:
    """Data shaped like a Platt curve choose ``platt``; data that jump at one probability (a step no sigmoid of
    the log-odds follows) choose ``isotonic``; the held-out ECEs that chose are returned for both."""
    rng = np.random.default_rng(4)
    q = rng.uniform(0.02, 0.999, 30_000)
    sentence = np.repeat(np.arange(3_000), 10)
    smooth = rng.random(len(q)) < _sigmoid(1.3 * (np.log(q) - np.log1p(-q)) + 0.3)
    stage, eces = choose_stage(q, smooth, sentence)
    assert stage == "platt" and eces["platt"] < eces["isotonic"]
    step = rng.random(len(q)) < np.where(q < 0.6, 0.15, 0.95)
    stage, eces = choose_stage(q, step, sentence)
    assert stage == "isotonic" and eces["isotonic"] < eces["platt"]
    # one sentence cannot be split in halves: the former stage, nothing measured
    assert choose_stage(q[:10], step[:10], np.zeros(10, dtype=np.int64)) == ("isotonic", {})
