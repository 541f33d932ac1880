"""Fixtures of the engine's tests: a small pipeline trained once per session on an EWT sample."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.training.pipeline import TrainOptions, train_model


def sample(path: Path, out: Path, count: int) -> Path:
    blocks = path.read_text(encoding="utf-8").split("\n\n")[:count]
    out.write_text("\n\n".join(blocks) + "\n\n", encoding="utf-8")
    return out


@pytest.fixture(scope="session")
def trained(tmp_path_factory: pytest.TempPathFactory, ewt_dir: Path) -> tuple[Path, Path, dict]:
    tmp = tmp_path_factory.mktemp("pipeline")
    train = sample(ewt_dir / "en_ewt-ud-train.conllu", tmp / "train.conllu", 400)
    dev = sample(ewt_dir / "en_ewt-ud-dev.conllu", tmp / "dev.conllu", 60)
    options = TrainOptions(epochs=2, dim=2**18, folds=3, tag_samples=2)
    summary = train_model(train, dev, tmp / "model", options, progress=False)
    return tmp / "model", dev, summary
