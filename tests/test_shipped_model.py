"""The shipped default model loads, is small, records its provenance, and parses EWT dev sensibly."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from engine.data.conllu_io import read_conllu
from engine.evaluation.metrics import attachment_scores
from engine.parser import FirstOrderParser

MODEL = Path(__file__).resolve().parents[1] / "models" / "en_ewt-o1"


def test_shipped_model_manifest() -> None:
    size = sum(p.stat().st_size for p in MODEL.iterdir())
    assert size < 50 * 2**20
    parser = FirstOrderParser.load(MODEL)
    man = parser.manifest
    assert parser.constraint.tree == "nonprojective" and parser.constraint.root == "single"
    assert len(man["training"]["train_sha256"]) == 64
    assert man["training"]["train_file"] == "en_ewt-ud-train.conllu"
    assert man["metrics"]["dev"]["uas"] >= 85.0


def test_shipped_model_parses_ewt_dev(ewt_dir: Path) -> None:
    gold = read_conllu(ewt_dir / "en_ewt-ud-dev.conllu")[:300]
    parser = FirstOrderParser.load(MODEL)
    parsed = parser.parse(gold)
    for p in parsed:
        np.testing.assert_allclose(p.marginals[:, 1:].sum(axis=0), 1.0, atol=1e-8)
        assert ((p.head_probs > 0) & (p.head_probs <= 1)).all()
    scores = attachment_scores(gold, [p.heads for p in parsed], [p.deprels for p in parsed],
                               [p.head_probs for p in parsed])
    assert scores["uas"] > 80.0  # the full dev figure is in the README; this guards against regressions
    assert scores["ece"] < 0.05
