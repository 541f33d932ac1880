"""``python -m engine train --formalism constituency --factors M`` (the factored latent model), ``parse`` and
``evaluate --json`` with it, ``--init``, and ``commands.load``'s parser contract (issue 26), on the tiny
hand-written treebank of ``test_latent_gradients`` (not the PTB sample)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from nltk import Tree
from test_latent_gradients import TREES

from engine.cli import main
from engine.constituency import commands
from engine.constituency.latent_parser import LatentParser
from engine.model.store import read_manifest


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("latent-cli")
    (folder / "train.mrg").write_text("\n".join(t.pformat(margin=1 << 30) for t in TREES) + "\n", encoding="utf-8")
    return folder


def train(corpus: Path, out: Path, *flags: str) -> dict:
    assert main(["train", "--formalism", "constituency", "--train", str(corpus / "train.mrg"), "--dev",
                 str(corpus / "train.mrg"), "--out", str(out), "--quiet", *flags]) == 0
    return read_manifest(out)


def test_train_parse_evaluate(corpus: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "epic"
    manifest = train(corpus, out, "--factors", "2", "--epochs", "2", "--ep-sweeps", "3", "--batch-size", "4")
    summary = json.loads(capsys.readouterr().out)
    assert manifest["formalism"] == "constituency" and manifest["model"] == "latent-pcfg"
    assert manifest["model_version"] == 1 and manifest["latent"]["factors"] == 2
    assert manifest["inference"] == {"method": "ep", "ep_sweeps": 3}
    settings = manifest["training"]["settings"]
    assert settings["batch_size"] == 4 and settings["epochs"] == 2 and settings["l2"] == 1.0  # declared default
    history = manifest["training"]["history"]
    assert [h["epoch"] for h in history] == [1, 2] and all(h["seconds"] > 0 for h in history)
    assert manifest["metrics"]["dev"]["f1"] == max(h["dev_f1"] for h in history)
    assert summary["dev_f1"] == [round(h["dev_f1"], 2) for h in history]
    assert {p.name for p in out.glob("*.npy")} == {f"{name}.npy" for name in manifest["arrays"]}
    (tmp_path / "in.txt").write_text(" ".join(TREES[4].leaves()) + "\n", encoding="utf-8")
    assert main(["parse", "--model", str(out), "--input", str(tmp_path / "in.txt")]) == 0
    assert Tree.fromstring(capsys.readouterr().out).leaves() == TREES[4].leaves()
    assert main(["evaluate", "--model", str(out), "--data", str(corpus / "train.mrg"), "--json"]) == 0
    scores = json.loads(capsys.readouterr().out)
    assert scores["sentences"] == len(TREES) and scores["f1"] >= 90
    assert 2 <= scores["ep_sweeps_mean"] <= 3 and 0 <= scores["ep_converged_fraction"] <= 1


def test_load_gives_the_parser_contract(corpus: Path, tmp_path: Path) -> None:
    out = tmp_path / "one"
    train(corpus, out, "--factors", "1", "--epochs", "1")
    parser = commands.load(out)
    assert isinstance(parser, LatentParser) and parser.inference == "ep"
    words = TREES[5].leaves()
    tree, marginals = parser.parse_with_marginals(words)
    assert tree.leaves() == words and marginals is not None
    assert marginals.mu_bot.shape == (len(words) + 1, len(words) + 1, parser.model.grammar.n_labels)
    grown = tmp_path / "two"
    manifest = train(corpus, grown, "--factors", "2", "--epochs", "1", "--init", str(out), "--inference", "exact")
    assert manifest["training"]["init"] == str(out) and manifest["inference"]["method"] == "exact"
    assert len(commands.load(grown).model.theta) == 2 * len(parser.model.theta)


@pytest.mark.parametrize(("flags", "message"), [(["--factors", "two"], "--factors takes the number"),
                                                (["--factors", "1", "--ep-sweeps", "0"], "ep_sweeps")])
def test_bad_flags_exit_2(corpus: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], flags: list[str],
                          message: str) -> None:
    assert main(["train", "--formalism", "constituency", "--train", str(corpus / "train.mrg"), "--out",
                 str(tmp_path / "m"), *flags]) == 2
    assert message in capsys.readouterr().err
