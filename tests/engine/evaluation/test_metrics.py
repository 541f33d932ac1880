"""Attachment scores and calibration."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from engine.evaluation.metrics import attachment_scores, calibration


def test_calibration_perfect_and_overconfident() -> None:
    conf = np.array([0.95] * 20 + [0.55] * 20)
    correct = np.array([True] * 19 + [False] + [True] * 11 + [False] * 9)
    ece, table = calibration(conf, correct)
    assert ece == pytest.approx(0.0)
    assert len(table) == 15 and sum(r["count"] for r in table) == 40
    ece, _ = calibration(np.full(10, 0.9), np.zeros(10, bool))
    assert ece == pytest.approx(0.9)
    assert calibration(np.array([1.0]), np.array([True]))[0] == pytest.approx(0.0)  # p=1 in last bin


def test_attachment_scores() -> None:
    gold = SimpleNamespace(heads=np.array([-1, 2, 0, 2]), deprels=["det", "root", "punct"],
                           upos=["DET", "NOUN", "PUNCT"])
    pred = np.array([-1, 2, 0, 1])
    out = attachment_scores([gold], [pred], [["det", "root", "punct"]], [np.array([0.9, 0.8, 0.5])])
    assert out["uas"] == pytest.approx(200 / 3)
    assert out["las"] == pytest.approx(200 / 3)
    assert out["uas_no_punct"] == pytest.approx(100.0)
    assert out["tokens"] == 3 and out["sentences"] == 1
    out = attachment_scores([gold], [pred], [["nsubj", "root", "punct"]], [np.ones(3)])
    assert out["las"] == pytest.approx(100 / 3)
    sub = attachment_scores([gold], [gold.heads], [["det:poss", "root", "punct"]], [np.ones(3)])
    assert sub["las"] == pytest.approx(100.0)  # subtypes ignored, as in the CoNLL 2018 evaluation
