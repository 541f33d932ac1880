"""``python -m engine train --formalism constituency``, ``parse`` and ``evaluate`` with a constituency model, on a
tiny hand-written treebank (not the PTB sample), and their ``error: FILE:LINE: problem`` exits (issue 26)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from nltk import Tree

from engine.cli import main
from engine.model.store import read_manifest

TRAIN = """\
(TOP (S (NP (DT the) (NN dog)) (VP (VBD barked)) (. .)))
( (S (NP-SBJ (DT the) (NN cat)) (VP (VBD saw) (NP (DT a) (NN dog)))))
(TOP (S (NP (NNP John)) (VP (VBD ran) (NP (-NONE- *T*-1)))))
"""
SENTENCE = "(TOP (S (NP (DT the) (NN dog)) (VP (VBD barked)) (. .)))"


@pytest.fixture
def trained(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    (tmp_path / "corpus").mkdir()
    (tmp_path / "corpus" / "a.mrg").write_text(TRAIN, encoding="utf-8")
    (tmp_path / "dev.mrg").write_text(SENTENCE + "\n", encoding="utf-8")
    out = tmp_path / "model"
    assert main(["train", "--formalism", "constituency", "--train", str(tmp_path / "corpus"), "--dev",
                 str(tmp_path / "dev.mrg"), "--out", str(out), "--factors", "0"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["sentences"] == 3 and summary["dev"]["f1"] == 100.0
    return out


def test_train_saves_arrays_and_manifest(trained: Path) -> None:
    manifest = read_manifest(trained)
    assert manifest["formalism"] == "constituency" and manifest["model"] == "xbar-pcfg"
    assert [f["file"] for f in manifest["training"]["train_files"]] == ["a.mrg"]
    assert manifest["metrics"]["dev"]["f1"] == 100.0
    assert {p.name for p in trained.glob("*.npy")} == {f"{name}.npy" for name in manifest["arrays"]}
    assert not list(trained.glob("*.pkl"))


def test_parse_tokens_and_ptb(trained: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "in.txt").write_text("the dog barked .\n\nthe cat saw a dog\n", encoding="utf-8")
    assert main(["parse", "--model", str(trained), "--input", str(tmp_path / "in.txt")]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2 and Tree.fromstring(lines[0]) == Tree.fromstring(SENTENCE)
    assert Tree.fromstring(lines[1]).leaves() == "the cat saw a dog".split()
    assert main(["parse", "--model", str(trained), "--input", str(tmp_path / "dev.mrg"), "--input-format", "ptb",
                 "--output", str(tmp_path / "out.txt")]) == 0
    assert Tree.fromstring((tmp_path / "out.txt").read_text(encoding="utf-8")) == Tree.fromstring(SENTENCE)


def test_evaluate_json(trained: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["evaluate", "--model", str(trained), "--data", str(tmp_path / "dev.mrg"),
                 str(tmp_path / "corpus"), "--json"]) == 0
    scores = json.loads(capsys.readouterr().out)
    for key in ("f1", "precision", "recall", "exact_match", "tag_accuracy", "f1_all", "sentences", "words",
                "seconds", "words_per_second", "ep_sweeps_mean", "ep_converged_fraction"):
        assert key in scores
    assert scores["sentences"] == 4 and scores["words"] == 4 + 4 + 5 + 2
    assert scores["ep_sweeps_mean"] is None and 0 < scores["f1"] <= 100


def test_bad_input_exits_2_with_file_and_line(trained: Path, tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.mrg"
    bad.write_text(SENTENCE + "\n(TOP (S (NP (DT the)) (VP (VBD ran)))\n", encoding="utf-8")
    assert main(["train", "--formalism", "constituency", "--train", str(bad), "--out", str(tmp_path / "m2")]) == 2
    assert capsys.readouterr().err.strip() == f"error: {bad}:2: unbalanced '(': this tree is never closed (1 open " \
                                              "at the end)"
    assert main(["evaluate", "--model", str(trained), "--data", str(bad)]) == 2
    assert f"error: {bad}:2:" in capsys.readouterr().err
    tokens = tmp_path / "tokens.txt"
    tokens.write_text("the dog barked .\nthe  dog\n", encoding="utf-8")
    assert main(["parse", "--model", str(trained), "--input", str(tokens)]) == 2
    captured = capsys.readouterr()
    assert captured.err.strip() == f"error: {tokens}:2: words must be separated by single spaces"
    assert captured.out == ""
    assert main(["parse", "--model", str(trained), "--input", str(tokens), "--input-format", "conllu"]) == 2
    assert "constituency model reads" in capsys.readouterr().err
    assert main(["train", "--train", "a.conllu", "b.conllu", "--out", str(tmp_path / "m3")]) == 2
    assert "--train takes one CoNLL-U file" in capsys.readouterr().err


def test_parse_raw_text_with_the_shipped_tokenizer(trained: Path, tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """``--input-format text`` (and ``--text``): the shipped en_ewt tokenizer splits the sentences and words, which
    are respelled as the treebank spells them (``(`` -> ``-LRB-``, ``"`` -> ```` ``/'' ````)."""
    (tmp_path / "in.txt").write_text('The dog barked (loudly). The cat said "no".\n', encoding="utf-8")
    assert main(["parse", "--model", str(trained), "--input", str(tmp_path / "in.txt"), "--input-format",
                 "text"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [Tree.fromstring(line).leaves() for line in lines] == [
        ["The", "dog", "barked", "-LRB-", "loudly", "-RRB-", "."], ["The", "cat", "said", "``", "no", "''", "."]]
    assert main(["parse", "--model", str(trained), "--text", "The dog barked."]) == 0
    assert [Tree.fromstring(line).leaves() for line in capsys.readouterr().out.splitlines()] == [
        ["The", "dog", "barked", "."]]
    assert main(["parse", "--model", str(trained), "--text", "x", "--tokenizer-model", str(trained)]) == 2
    assert "error:" in capsys.readouterr().err


def test_substates_shape_a_latent_model(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``--factors 1 --substates 4``: the single 4-state model (Table 1's reference row); a bad K exits 2."""
    (tmp_path / "a.mrg").write_text(TRAIN, encoding="utf-8")
    out = tmp_path / "k4"
    assert main(["train", "--formalism", "constituency", "--train", str(tmp_path / "a.mrg"), "--out", str(out),
                 "--factors", "1", "--substates", "4", "--epochs", "1", "--quiet"]) == 0
    manifest = read_manifest(out)
    assert manifest["model"] == "latent-pcfg" and manifest["latent"]["factors"] == 1
    assert manifest["latent"]["substates"] == 4
    assert main(["train", "--formalism", "constituency", "--train", str(tmp_path / "a.mrg"), "--out",
                 str(tmp_path / "bad"), "--substates", "1", "--quiet"]) == 2
    assert "substates" in capsys.readouterr().err
