"""Label and sentence-level confidence (engine.decode.calibration): the binary power map on the chosen label's
probability, ``p_tree`` exact against brute-force enumeration of the trees for an exact first-order parse and
estimated from the head probabilities otherwise, ``expected_errors``, and the fitted powers recovering a known
miscalibration."""

from __future__ import annotations

import itertools
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from engine.cli import main
from engine.decode.calibration import (
    calibrated,
    calibrated_top,
    fit_label_power,
    fit_tree_power,
    manifest_powers,
    tree_confidence,
)
from engine.kernels.exact import TreeConstraint
from engine.model.store import ModelError, read_manifest, update_manifest
from engine.pipeline import Pipeline
from engine.results import ParsedSentence, TreeDistribution


def test_calibrated_top_is_monotone_and_keeps_its_fixed_points() -> None:
    q = np.linspace(0.0, 1.0, 101)
    for power in (0.3, 1.0, 2.5):
        out = calibrated_top(q, power)
        assert np.all(np.diff(out) >= 0) and out[0] == 0.0 and out[-1] == 1.0
        assert out[50] == pytest.approx(0.5)
    np.testing.assert_array_equal(calibrated_top(q, 1.0), q)
    assert calibrated_top(np.array([0.9]), 2.0)[0] == pytest.approx(0.81 / (0.81 + 0.01))


def test_fit_label_power_recovers_a_known_overconfidence() -> None:
    """True probabilities q, reported as calibrated_top(q, 1/0.7) (overconfident), outcomes drawn from q: the
    fitted power is near 0.7. Fixed seed; 20,000 draws."""
    rng = np.random.default_rng(3)
    q = rng.uniform(0.3, 0.999, 20000)
    power = fit_label_power(calibrated_top(q, 1 / 0.7), rng.random(len(q)) < q)
    assert 0.62 < power < 0.78


def test_fit_tree_power_recovers_a_known_exponent() -> None:
    """Sentences right with probability P^0.6 where P is the reported product: the fitted power is near 0.6."""
    rng = np.random.default_rng(5)
    logs = np.log(rng.uniform(0.02, 1.0, 20000))
    power = fit_tree_power(logs, rng.random(len(logs)) < np.exp(0.6 * logs))
    assert 0.54 < power < 0.66


def _brute_force_tree_prob(scores: np.ndarray, heads: np.ndarray) -> float:
    """p(heads) by enumerating every single-root non-projective tree over n words."""
    n = scores.shape[0] - 1
    total, mine = 0.0, None
    for assign in itertools.product(range(n + 1), repeat=n):
        h = np.array([-1, *assign])
        if sum(1 for x in assign if x == 0) != 1 or any(h[m] == m for m in range(1, n + 1)):
            continue
        ok = True
        for m in range(1, n + 1):  # every word reaches the root without a cycle
            seen, x = set(), m
            while x != 0 and ok:
                ok = x not in seen
                seen.add(x)
                x = h[x]
        if not ok:
            continue
        w = float(np.exp(scores[h[1:], np.arange(1, n + 1)].sum()))
        total += w
        if np.array_equal(h[1:], heads[1:]):
            mine = w
    assert mine is not None
    return mine / total


@pytest.mark.parametrize("seed", range(5))
def test_p_tree_is_exact_for_an_exact_first_order_parse(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = 4
    dist = TreeDistribution(rng.normal(0, 1.5, (n + 1, n + 1)), TreeConstraint(), "exact")
    heads = dist.mbr()
    m = np.arange(1, n + 1)
    parsed = ParsedSentence(heads, dist.marginals[heads[1:], m], dist.marginals, dist.log_partition,
                            ["dep"] * n, np.full(n, 0.9), None, dist)
    out = calibrated(parsed, 0.5, 1.3, 0.4)  # head, label, tree powers: the exact p_tree ignores them
    assert out.diagnostics["p_tree_source"] == "exact"
    assert out.diagnostics["p_tree"] == pytest.approx(_brute_force_tree_prob(dist.scores, heads), rel=1e-9)
    assert out.diagnostics["expected_errors"] == pytest.approx(float((1 - out.head_probs).sum()))
    assert np.array_equal(out.heads, heads)
    np.testing.assert_allclose(out.label_probs, calibrated_top(np.full(n, 0.9), 1.3))


def test_p_tree_is_estimated_without_an_exact_distribution() -> None:
    marginals = np.zeros((4, 4))
    marginals[0, 1], marginals[2, 1] = 0.8, 0.2
    marginals[1, 2], marginals[0, 2] = 0.6, 0.4
    marginals[2, 3], marginals[1, 3] = 0.9, 0.1
    heads = np.array([-1, 0, 1, 2])
    parsed = ParsedSentence(heads, np.array([0.8, 0.6, 0.9]), marginals, None, ["a", "b", "c"], np.ones(3))
    p_tree, source = tree_confidence(parsed, 0.5)
    assert source == "estimate" and p_tree == pytest.approx((0.8 * 0.6 * 0.9) ** 0.5)
    out = calibrated(parsed, 1.0, 1.0, 0.5)
    assert out.diagnostics["expected_errors"] == pytest.approx(0.2 + 0.4 + 0.1)
    assert out.diagnostics["p_tree"] == pytest.approx(p_tree)


@pytest.mark.parametrize("key", ["label_power", "tree_power", "upos_power"])
def test_bad_label_and_tree_powers_are_refused(key: str) -> None:
    assert manifest_powers({}) == {"head_power": 1.0, "label_power": 1.0, "tree_power": 1.0, "upos_power": 1.0}
    with pytest.raises(ValueError, match=key):
        manifest_powers({key: 0})


@pytest.mark.slow
def test_calibrate_fits_label_and_tree_powers_and_evaluate_reports_their_ece(
        trained: tuple[Path, Path, dict], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source, dev, _ = trained
    model = tmp_path / "model"
    shutil.copytree(source, model)
    assert main(["calibrate", "--model", str(model), "--data", str(dev), "--tag-average", "potentials"]) == 0
    report = json.loads(capsys.readouterr().out)
    inference = read_manifest(model)["inference"]
    assert inference["label_power"] == report["label_power"] and inference["tree_power"] == report["tree_power"]
    defaults = Pipeline.load(model).default_powers
    assert "upos_power" not in inference  # no joint tags under potentials: nothing to fit, the power stays 1
    assert {key: defaults[key] for key in manifest_powers({})} == {key: inference.get(key, 1.0)
                                                                   for key in manifest_powers({})}
    assert defaults["head_isotonic"][0].tolist() == inference["head_isotonic"]["x"]  # the isotonic stage too
    scores = {}
    for mode in ("model", "none"):
        assert main(["evaluate", "--model", str(model), "--data", str(dev), "--tags", "predicted", "--json",
                     "--calibration", mode]) == 0
        scores[mode] = json.loads(capsys.readouterr().out)
    for key in ("label_ece", "upos_ece", "p_tree_ece"):
        assert 0.0 <= scores["model"][key] <= 1.0
    assert scores["model"]["upos_ece"] == scores["none"]["upos_ece"]  # tag probabilities are not mapped
    assert scores["model"]["exact_match"] == scores["none"]["exact_match"]
    update_manifest(model, {"inference": {**inference, "label_power": 99}})
    with pytest.raises(ModelError, match="label_power"):
        Pipeline.load(model)


def test_parse_writes_sentence_confidence_only_when_asked(ewt_dir: Path, tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    blocks = (ewt_dir / "en_ewt-ud-dev.conllu").read_text(encoding="utf-8").split("\n\n")[:3]
    data = tmp_path / "three.conllu"
    data.write_text("\n\n".join(blocks) + "\n\n", encoding="utf-8")
    model = str(Path(__file__).resolve().parents[3] / "models" / "en_ewt-o1")
    outputs = {}
    for flag in ([], ["--sentence-confidence"]):
        assert main(["parse", "--model", model, "--input", str(data), *flag]) == 0
        outputs[bool(flag)] = capsys.readouterr().out
    assert "# p_tree" not in outputs[False]
    p_trees = [float(line.split("= ")[1]) for line in outputs[True].splitlines() if line.startswith("# p_tree =")]
    assert len(p_trees) == 3 and all(0.0 < p <= 1.0 for p in p_trees)
    assert outputs[True].count("# p_tree_source = exact") == 3
    strip = [line for line in outputs[True].splitlines() if not line.startswith(("# p_tree", "# expected_errors"))]
    assert strip == outputs[False].splitlines()
