"""Reliability diagrams (engine.evaluation.reliability_plot) and the label/tag/tree ECEs behind them
(engine.evaluation.metrics.confidence_scores)."""

from __future__ import annotations

import builtins
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from engine.cli import main
from engine.evaluation.metrics import calibration, confidence_scores
from engine.evaluation.reliability_plot import draw_reliability, tag_series


def _gold(heads: list[int], deprels: list[str], upos: list[str]) -> Any:
    return SimpleNamespace(heads=np.array([-1, *heads]), deprels=deprels, upos=upos)


def test_confidence_scores_count_labels_on_right_heads_only_and_trees_by_exact_match() -> None:
    gold = [_gold([2, 0, 2], ["nsubj", "root", "obj"], ["PRON", "VERB", "NOUN"]),
            _gold([0, 1], ["root", "punct"], ["INTJ", "PUNCT"])]
    heads = [np.array([-1, 2, 0, 2]), np.array([-1, 0, 0])]  # second sentence: word 2's head is wrong
    labels = [["nsubj", "root", "iobj"], ["root", "punct"]]
    label_probs = [np.array([0.9, 0.8, 0.7]), np.array([0.6, 0.5])]
    out, arrays = confidence_scores(gold, heads, labels, label_probs, [0.75, 0.25],
                                    ([["PRON", "VERB", "NOUN"], ["INTJ", "X"]], [np.full(3, 0.9), np.full(2, 0.6)]))
    conf, right = arrays["labels"]
    np.testing.assert_array_equal(conf, [0.9, 0.8, 0.7, 0.6])  # the wrong-headed word is left out
    np.testing.assert_array_equal(right, [True, True, False, True])
    assert out["label_ece"] == pytest.approx(calibration(conf, right)[0])
    np.testing.assert_array_equal(arrays["trees"][1], [True, False])
    assert out["exact_match"] == 50.0
    assert out["p_tree_ece"] == pytest.approx(calibration(np.array([0.75, 0.25]), np.array([1.0, 0.0]))[0])
    np.testing.assert_array_equal(arrays["tags"][1], [True, True, True, True, False])


def test_the_upos_panel_shows_mapped_tags_beside_the_model_s_own() -> None:
    """A joint parse whose tag probabilities were mapped (``upos_power``) records the model's own
    (``model_upos_probs``): the UPOS panel draws both, sentence by sentence in order; unmapped parses keep theirs."""
    gold = [_gold([0, 1], ["root", "obj"], ["VERB", "NOUN"]), _gold([0], ["root"], ["INTJ"])]
    parsed = [SimpleNamespace(diagnostics={"model_upos_probs": np.array([0.7, 0.6])}),
              SimpleNamespace(diagnostics=None)]
    tags = (np.array([0.8, 0.65, 0.9]), np.array([True, False, True]))
    series = tag_series(gold, parsed, tags)
    assert set(series) == {"calibrated", "raw"} and series["calibrated"] is tags
    np.testing.assert_array_equal(series["raw"][0], [0.7, 0.6, 0.9])
    np.testing.assert_array_equal(series["raw"][1], tags[1])
    unmapped = [SimpleNamespace(diagnostics={}), SimpleNamespace(diagnostics=None)]
    assert tag_series(gold, unmapped, tags) == {"raw (not mapped)": tags}


def test_draw_reliability_writes_a_png(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    rng = np.random.default_rng(0)
    conf = rng.uniform(0, 1, 500)
    panels = {"heads": {"calibrated": (conf, rng.random(500) < conf), "raw": (conf ** 0.5, rng.random(500) < conf)},
              "tags": {"raw": (conf, rng.random(500) < conf)}}
    out = tmp_path / "r.png"
    draw_reliability(str(out), panels, "test")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_missing_matplotlib_is_a_clear_usage_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    real = builtins.__import__

    def no_matplotlib(name: str, *args: Any, **kwargs: Any) -> Any:
        if name.startswith("matplotlib"):
            raise ImportError("no matplotlib here")
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_matplotlib)
    with pytest.raises(RuntimeError, match="needs matplotlib"):
        draw_reliability(str(tmp_path / "r.png"), {"heads": {"raw": (np.ones(2), np.ones(2, bool))}})


@pytest.mark.slow
def test_evaluate_draws_the_reliability_plot(ewt_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("matplotlib")
    blocks = (ewt_dir / "en_ewt-ud-dev.conllu").read_text(encoding="utf-8").split("\n\n")[:40]
    data = tmp_path / "dev40.conllu"
    data.write_text("\n\n".join(blocks) + "\n\n", encoding="utf-8")
    model = str(Path(__file__).resolve().parents[3] / "models" / "en_ewt")
    plot = tmp_path / "r.png"
    assert main(["evaluate", "--model", model, "--data", str(data), "--tags", "predicted", "--json",
                 "--reliability-plot", str(plot)]) == 0
    assert plot.stat().st_size > 1000
    assert main(["evaluate", "--model", model, "--data", str(data), "--from-text", "--reliability-plot",
                 str(plot)]) == 2
