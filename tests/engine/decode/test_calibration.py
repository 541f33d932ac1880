"""Calibrated head probabilities (engine.decode.calibration): the map keeps distributions and trees, the
fitted power recovers a known miscalibration, and ``calibrate`` stores what ``parse`` then applies."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from engine.cli import main
from engine.decode.calibration import (
    ChosenHeads,
    calibrated,
    calibrated_all,
    calibrated_marginals,
    check_power,
    chosen_head_brier,
    fit_power,
)
from engine.model.store import ModelError, load_model, read_manifest, update_manifest
from engine.pipeline import Pipeline
from engine.results import ParsedSentence


@settings(max_examples=60, deadline=None)
@given(arrays(np.float64, (5, 5), elements=st.floats(0, 1)), st.floats(0.05, 20))
def test_calibrated_columns_are_distributions_in_the_same_order(raw: np.ndarray, power: float) -> None:
    raw[:, 0] = 0.0
    raw[1:, 1:][np.eye(4, dtype=bool)] = 0.0
    raw[0, 1:] += 1e-3  # every word has at least one possible head
    marginals = raw / np.where(raw.sum(axis=0) > 0, raw.sum(axis=0), 1.0)
    out = calibrated_marginals(marginals, power)
    np.testing.assert_allclose(out[:, 1:].sum(axis=0), 1.0, atol=1e-12)
    assert np.all(np.isfinite(out)) and np.all(out >= 0)
    assert np.all(out[:, 1:][marginals[:, 1:] == 0] == 0)  # impossible heads stay impossible
    for m in range(1, 5):  # the order of a word's heads is kept (ties may only appear by rounding)
        order = np.argsort(marginals[:, m], kind="stable")
        assert np.all(np.diff(out[order, m]) >= -1e-12)
    np.testing.assert_array_equal(calibrated_marginals(marginals, 1.0), marginals)


def _parse(marginals: np.ndarray) -> ParsedSentence:
    heads = np.concatenate([[-1], marginals[:, 1:].argmax(axis=0)])
    m = np.arange(1, len(heads))
    return ParsedSentence(heads, marginals[heads[1:], m], marginals, None, ["dep"] * (len(heads) - 1),
                          np.ones(len(heads) - 1))


def _loop_brier(parses: list[ParsedSentence], golds: list[np.ndarray], power: float) -> float:
    """The chosen-head Brier score one sentence at a time through ``calibrated`` (what ``ChosenHeads`` stands in
    for)."""
    total, count = 0.0, 0
    for p, gold in zip(parses, golds, strict=True):
        right = p.heads[1:] == gold[1:]
        total += float(((calibrated(p, power).head_probs - right) ** 2).sum())
        count += len(right)
    return total / count


def test_the_vectorised_brier_equals_calibrating_each_sentence() -> None:
    """``ChosenHeads`` (every word's head column end to end) gives ``calibrated``'s chosen-head probabilities and
    Brier score at every power: sentences of 1-12 words, impossible heads (zeros), a chosen head of probability
    0, a parse without marginals (its probabilities kept), and the power 1 (the reported ones)."""
    rng = np.random.default_rng(3)
    parses, golds = [], []
    for n in [1, 2, 3, 5, 8, 12, 4, 7]:
        raw = rng.dirichlet(np.full(n + 1, 0.4), size=n).T
        raw[rng.random(raw.shape) < 0.2] = 0.0
        raw[0, :] += 1e-3  # every word keeps a possible head
        marginals = np.zeros((n + 1, n + 1))
        marginals[:, 1:] = raw / raw.sum(axis=0)
        parse = _parse(marginals)
        golds.append(np.concatenate([[-1], rng.integers(0, n + 1, n)]))
        parses.append(parse)
    zero = parses[3]
    zero.heads[2] = int(np.flatnonzero(zero.marginals[:, 2] == 0)[0]) if (zero.marginals[:, 2] == 0).any() else 0
    zero.marginals[zero.heads[2], 2] = 0.0  # a chosen head the marginals call impossible
    parses.append(ParsedSentence(np.array([-1, 0, 1]), np.array([0.7, 0.4]), None, None, ["dep"] * 2, np.ones(2)))
    golds.append(np.array([-1, 0, 0]))
    heads = ChosenHeads(parses, golds)
    for power in [0.05, 0.3, 0.7149, 1.0, 1.5, 4.0, 20.0]:
        expected = np.concatenate([calibrated(p, power).head_probs for p in parses])
        np.testing.assert_allclose(heads.probabilities(power), expected, rtol=1e-12, atol=1e-15)
        assert heads.brier(power) == pytest.approx(_loop_brier(parses, golds, power), rel=1e-12)
    np.testing.assert_array_equal(heads.probabilities(0.5)[-2:], [0.7, 0.4])


def test_fit_recovers_a_known_overconfidence() -> None:
    """Words whose true head distribution is q, reported as q^(1/0.6) renormalised (overconfident), heads drawn
    from q: the fitted power is close to 0.6 and lowers the Brier score. Fixed seed; 3,000 words."""
    rng = np.random.default_rng(7)
    parses, golds = [], []
    for _ in range(300):
        n = 10
        q = rng.dirichlet(np.full(n + 1, 0.3), size=n).T  # column m: word m's true head distribution
        reported = np.zeros((n + 1, n + 1))
        reported[:, 1:] = q ** (1 / 0.6)
        reported[:, 1:] /= reported[:, 1:].sum(axis=0)
        parses.append(_parse(reported))
        golds.append(np.concatenate([[-1], [rng.choice(n + 1, p=q[:, m]) for m in range(n)]]))
    power = fit_power(parses, golds)
    assert 0.5 < power < 0.72
    assert chosen_head_brier(parses, golds, power) < chosen_head_brier(parses, golds, 1.0)
    same = calibrated(parses[0], power)
    assert np.array_equal(same.heads, parses[0].heads) and same.deprels == parses[0].deprels


@pytest.mark.parametrize("bad", [0, -1, 0.01, 21, True, "1", None, float("nan")])
def test_bad_powers_are_refused(bad: object) -> None:
    with pytest.raises(ValueError, match="head_power"):
        check_power(bad)


@pytest.mark.slow
def test_calibrate_stores_the_power_and_parse_applies_it(trained: tuple[Path, Path, dict], tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    source, dev, _ = trained
    model = tmp_path / "model"
    shutil.copytree(source, model)
    assert main(["calibrate", "--model", str(model), "--data", str(dev), "--tag-average", "potentials"]) == 0
    report = json.loads(capsys.readouterr().out)
    manifest = read_manifest(model)
    assert manifest["inference"]["head_power"] == report["head_power"]
    assert manifest["inference"]["tag_average"] == "potentials"
    assert manifest["inference"]["head_calibration"]["data"] == dev.name
    load_model(model)  # arrays and their checksums untouched
    pipeline = Pipeline.load(model)
    assert pipeline.default_head_power == report["head_power"] and pipeline.default_tag_average == "potentials"
    scores = {}
    for mode in ("model", "none"):
        assert main(["evaluate", "--model", str(model), "--data", str(dev), "--tags", "predicted", "--json",
                     "--calibration", mode]) == 0
        scores[mode] = json.loads(capsys.readouterr().out)
    assert scores["model"]["uas"] == scores["none"]["uas"] and scores["model"]["las"] == scores["none"]["las"]
    assert scores["none"]["ece"] == pytest.approx(report["ece_before"], abs=1e-4)
    assert scores["model"]["ece"] == pytest.approx(report["ece_after"], abs=1e-4)


@pytest.mark.slow
def test_a_bad_stored_power_is_refused_at_load(trained: tuple[Path, Path, dict], tmp_path: Path) -> None:
    source, _, _ = trained
    model = tmp_path / "model"
    shutil.copytree(source, model)
    update_manifest(model, {"inference": {**(read_manifest(model).get("inference") or {}), "head_power": -2}})
    with pytest.raises(ModelError, match="head_power"):
        Pipeline.load(model)
    update_manifest(model, {"inference": {"tag_average": "modes"}})
    with pytest.raises(ModelError, match="tag_average"):
        Pipeline.load(model)


def _same(a: object, b: object) -> bool:
    """Equal values, arrays equal bit for bit (NaN too), dicts with the same keys in the same order."""
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return np.shape(a) == np.shape(b) and np.array_equal(np.asarray(a), np.asarray(b), equal_nan=True)
    if isinstance(a, dict) and isinstance(b, dict):
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return a == b


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_calibrating_a_batch_equals_calibrating_each_parse(seed: int) -> None:
    """``calibrated_all`` (the maps over all parses at once, the heads stacked by length) gives what
    ``calibrated`` gives each parse, bit for bit: sentences of 1-9 words with lengths repeated, a parse without
    marginals, joint parses with their UPOS distributions next to parses without, a parse without label
    probabilities, chosen heads of probability 1 (not movable), with and without the isotonic stage and with
    every power 1 (nothing mapped)."""
    rng = np.random.default_rng(seed)
    labels = ["NOUN", "VERB", "ADJ", "DET"]
    parses = []
    for k, n in enumerate([3, 1, 5, 3, 9, 5, 3, 2, 9, 1, 4]):
        raw = rng.dirichlet(np.full(n + 1, 0.4), size=n).T
        raw[rng.random(raw.shape) < 0.2] = 0.0
        raw[0, :] += 1e-3
        marginals = np.zeros((n + 1, n + 1))
        marginals[:, 1:] = raw / raw.sum(axis=0)
        if k == 2:
            marginals[:, 1] = 0.0
            marginals[0, 1] = 1.0  # a certain head: not movable by the isotonic stage
        parse = _parse(marginals)
        parse.label_probs = rng.uniform(0.05, 1.0, n) if k != 4 else np.zeros(0)
        parse.diagnostics = {"iterations": k}
        if k % 3 != 1:  # a joint parse: its tags and their distributions
            dist = rng.dirichlet(np.ones(len(labels)), size=n)
            parse.upos = [labels[int(i)] for i in dist.argmax(axis=1)]
            parse.upos_probs = dist.max(axis=1)
            parse.diagnostics["upos_marginals"] = (labels, dist)
        parses.append(parse)
    parses.insert(3, ParsedSentence(np.array([-1, 0, 1]), np.array([0.7, 0.4]), None, None, ["dep"] * 2,
                                    np.ones(2)))
    knots = (np.array([0.0, 0.3, 0.8, 1.0]), np.array([0.0, 0.2, 0.85, 1.0]))
    for powers in ({"head_power": 0.7, "label_power": 1.3, "tree_power": 0.6, "upos_power": 0.85,
                    "head_isotonic": knots},
                   {"head_power": 1.6, "label_power": 0.9, "tree_power": 1.0, "upos_power": 1.0},
                   {"head_power": 1.0, "upos_power": 0.5, "head_isotonic": knots}, None):
        given = powers or {}
        one = [calibrated(p, *(float(given.get(key, 1.0)) for key in ("head_power", "label_power", "tree_power")),
                          given.get("head_isotonic"), float(given.get("upos_power", 1.0))) for p in parses]
        batch = calibrated_all(parses, powers)
        assert batch[3] is parses[3]  # no marginals: as it was
        for a, b in zip(batch, one, strict=True):
            for name in ("heads", "head_probs", "marginals", "label_probs", "upos", "upos_probs", "diagnostics"):
                assert _same(getattr(a, name), getattr(b, name)), (powers, name)
