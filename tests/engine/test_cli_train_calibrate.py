"""``train --dev DEV`` ends with the fit ``calibrate --model OUT --data DEV`` runs (issue 24): the same
manifest ``inference`` entries as training without it (``--no-calibrate``) and calibrating afterwards; none
without a dev set or with ``--no-calibrate``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.cli import main
from engine.data.conllu_io import read_conllu
from engine.model.store import file_sha256, read_manifest
from tests.engine.conftest import sample

# a small parser-only model; train and dev differ, so the fitted maps are not the identity of a perfect parse
TRAIN_FLAGS = ["--order", "1", "--components", "parser", "--epochs", "2", "--dim", "65536", "--quiet"]


@pytest.fixture(scope="module")
def treebanks(tmp_path_factory: pytest.TempPathFactory, ewt_dir: Path) -> tuple[Path, Path]:
    tmp = tmp_path_factory.mktemp("train_calibrate")
    return (sample(ewt_dir / "en_ewt-ud-train.conllu", tmp / "train.conllu", 150),
            sample(ewt_dir / "en_ewt-ud-dev.conllu", tmp / "dev.conllu", 60))


def _train(train: Path, dev: Path | None, out: Path, *extra: str) -> dict:
    argv = ["train", "--train", str(train), "--out", str(out), *TRAIN_FLAGS, *extra]
    assert main(argv + (["--dev", str(dev)] if dev else [])) == 0
    return read_manifest(out).get("inference") or {}


def test_train_with_dev_runs_the_calibrate_fit(treebanks: tuple[Path, Path], tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    train, dev = treebanks
    inference = _train(train, dev, tmp_path / "calibrated")
    summary = json.loads(capsys.readouterr().out)
    assert inference["head_calibration"]["data_sha256"] == file_sha256(dev)
    assert inference["conformal"]["words"] == sum(s.n for s in read_conllu(dev))
    for key in ("head_power", "label_power", "tree_power"):
        assert summary["calibration"][key] == inference[key]
    assert inference["head_power"] != 1.0 and inference["head_isotonic"]["x"]  # a fit, not the identity

    separate = tmp_path / "separate"
    assert "head_power" not in _train(train, dev, separate, "--no-calibrate")
    assert "calibration" not in json.loads(capsys.readouterr().out)
    assert main(["calibrate", "--model", str(separate), "--data", str(dev)]) == 0
    assert read_manifest(separate)["inference"] == inference  # the same fit, on the same model and data


def test_no_calibration_without_a_dev_set(treebanks: tuple[Path, Path], tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    train, _ = treebanks
    assert "head_power" not in _train(train, None, tmp_path / "model")
    assert "calibration" not in json.loads(capsys.readouterr().out)
