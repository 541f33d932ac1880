"""``engine.constituency.outputs``: every posterior of ``parse_answer`` and ``span_answer`` against the enumeration
of every tree of an X-bar PCFG trained on a tiny hand-written treebank, read off the debinarised trees (so that
the mapping of nodes to layers and the exclusion of ``@`` spans are checked, not only the marginals); and
``parse --output-format json``."""

from __future__ import annotations

import json
import math
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest
from nltk import Tree
from pcfg_helpers import enumerate_trees, tree_from_events

from engine.cli import main
from engine.constituency.anchored import AnchoredScores, build_items, full_mask
from engine.constituency.baseline import XbarParser
from engine.constituency.binarize import from_anchored
from engine.constituency.dense import DenseMarginals
from engine.constituency.outputs import chains, parse_answer, span_answer
from engine.constituency.xbar import XbarPCFG, train_xbar

TREEBANK = (
    "(TOP (S (NP (DT the) (NN dog)) (VP (VBD saw) (NP (DT a) (NN cat)) (PP (IN with) (NP (NN care)))) (. .)))",
    "(TOP (S (NP (DT the) (NN cat)) (VP (VBD saw) (NP (NP (DT a) (NN dog)) (PP (IN with) (NP (DT a) (NN hat)))))))",
    "(TOP (S (VP (VB look) (PP (IN with) (NP (NN care))))))",
    "(TOP (NP (NN saw)))",
    "(TOP (S (NP (NN time)) (VP (VBD flies) (PP (IN like) (NP (DT an) (NN arrow))))))",
    "(TOP (S (NP (NN fruit) (NN flies)) (VP (VB like) (NP (DT a) (NN banana)))))",
    "(TOP (S (NP (NNS dogs)) (VP (VBD ran))))",
)
SENTENCES = ["look with care", "time flies like an arrow", "the dog saw a cat with a hat", "saw"]


@pytest.fixture(scope="module")
def model() -> XbarPCFG:
    return train_xbar([Tree.fromstring(t) for t in TREEBANK], dictionary={"open_tag_threshold": 1})


def enumerated(model: XbarPCFG, words: list[str]) -> list[tuple[float, Tree]]:
    """Every debinarised tree of the grammar over ``words`` with its probability."""
    grammar = model.grammar
    items = build_items(grammar, full_mask(grammar, len(words)))
    trees = list(enumerate_trees(items, model.factor(words), AnchoredScores.zeros(items)))
    log_z = np.logaddexp.reduce([w for w, _ in trees])
    return [(math.exp(w - log_z), from_anchored(tree_from_events(items, events), grammar, words))
            for w, events in trees]


def events(trees: list[tuple[float, Tree]]) -> dict[tuple[str, str, int, int], float]:
    """p(label is the bottom / top / an inner node of the chain on span (i, j)), p(some node covers (i, j))."""
    p: dict[tuple[str, str, int, int], float] = defaultdict(float)
    for prob, tree in trees:
        for chain in chains(tree):
            label, i, j, _ = chain[0]
            p["cover", "", i, j] += prob
            p["bot", chain[-1][0], i, j] += prob
            if len(chain) > 1:
                p["top", label, i, j] += prob
            for inner in chain[1:-1]:
                p["inner", inner[0], i, j] += prob
    return p


@pytest.mark.parametrize("sentence", SENTENCES)
def test_posteriors_equal_enumeration(model: XbarPCFG, sentence: str) -> None:
    words = sentence.split()
    trees = enumerated(model, words)
    assert len(trees) >= (2 if len(words) > 1 else 1)
    p = events(trees)
    parser = XbarParser(model)
    best, marginals = parser.parse_with_marginals(words)
    assert marginals is not None
    inner_seen = 0
    for _, tree in [(1.0, best), *trees]:  # every node of every tree the grammar has for the words
        answer = parse_answer(tree, marginals, model.grammar)
        assert Tree.fromstring(answer["tree"]) == tree and "\n" not in answer["tree"] and not answer["fallback"]
        nodes = [n for chain in chains(tree) for n in chain]
        assert len(answer["constituents"]) == sum(1 for n in nodes if not n[3]) - 1  # all but TOP and the tags
        assert [t["label"] for t in answer["tags"]] == [label for _, label in tree.pos()]
        for c in answer["constituents"]:
            if c["layer"] == "inner":
                inner_seen += 1
                assert c["prob"] is None and p["inner", c["label"], c["start"], c["end"]] > 0
            else:
                assert c["prob"] == pytest.approx(p[c["layer"], c["label"], c["start"], c["end"]], abs=1e-10)
        for t in answer["tags"]:
            assert t["end"] == t["start"] + 1
            assert t["prob"] == pytest.approx(p["bot", t["label"], t["start"], t["end"]], abs=1e-10)
    if sentence in ("look with care", "saw"):
        assert inner_seen  # TOP -> S -> VP and TOP -> NP -> NN: S and NP are inner nodes
    spans = span_answer(words, marginals, model.grammar)
    n = len(words)
    for i in range(n + 1):
        for j in range(n + 1):
            if j <= i:
                assert spans["spans"][i][j] == 0 and spans["labels"][i][j] is None
                continue
            assert spans["spans"][i][j] == pytest.approx(p["cover", "", i, j], abs=1e-10)
            bottoms = {key[1]: v for key, v in p.items() if key[0] == "bot" and key[2:] == (i, j)}
            if not bottoms:
                assert spans["labels"][i][j] is None and spans["label_probs"][i][j] == pytest.approx(0, abs=1e-12)
                continue
            assert spans["label_probs"][i][j] == pytest.approx(max(bottoms.values()), abs=1e-10)
            assert bottoms[spans["labels"][i][j]] == pytest.approx(max(bottoms.values()), abs=1e-10)
    assert spans["spans"][0][n] == pytest.approx(1.0) and all(spans["spans"][i][i + 1] == pytest.approx(1.0)
                                                              for i in range(n))


def test_an_at_span_is_no_constituent(model: XbarPCFG) -> None:
    """Spans whose bot label is an @ label carry mass in mu_bot but are not covered in the debinarised trees."""
    words = "the dog saw a cat with a hat".split()
    _, marginals = XbarParser(model).parse_with_marginals(words)
    assert marginals is not None
    at = [a for a, label in enumerate(model.grammar.labels) if label.startswith("@")]
    all_labels = marginals.mu_bot.sum(axis=2)
    at_mass = marginals.mu_bot[:, :, at].sum(axis=2)
    assert at_mass.max() > 0.5
    spans = np.array(span_answer(words, marginals, model.grammar)["spans"])
    np.testing.assert_allclose(spans, np.triu(np.clip(all_labels - at_mass, 0, 1), k=1), atol=1e-12)


def test_fallback_and_bad_marginals(model: XbarPCFG) -> None:
    flat = Tree.fromstring("(TOP (NN zebra) (VBD sang))")
    answer = parse_answer(flat, None, model.grammar)
    assert answer["constituents"] == [] and answer["fallback"] and [t["prob"] for t in answer["tags"]] == [None] * 2
    assert span_answer(["zebra", "sang"], None, model.grammar) == {
        "words": ["zebra", "sang"], "spans": None, "labels": None, "label_probs": None, "fallback": True}
    _, good = XbarParser(model).parse_with_marginals(["saw"])
    assert good is not None
    bad = DenseMarginals(good.log_z, np.full_like(good.mu_bot, np.nan), good.mu_top)
    with pytest.raises(FloatingPointError):
        span_answer(["saw"], bad, model.grammar)
    above = DenseMarginals(good.log_z, good.mu_bot * (1 + 1e-9), good.mu_top)
    assert max(max(row) for row in span_answer(["saw"], above, model.grammar)["spans"]) <= 1.0


def test_parse_json_output(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "train.mrg").write_text("\n".join(TREEBANK) + "\n", encoding="utf-8")
    assert main(["train", "--formalism", "constituency", "--train", str(tmp_path / "train.mrg"), "--out",
                 str(tmp_path / "m")]) == 0
    capsys.readouterr()
    (tmp_path / "in.txt").write_text("look with care\n\ntime flies like an arrow\n", encoding="utf-8")
    args = ["parse", "--model", str(tmp_path / "m"), "--input", str(tmp_path / "in.txt")]
    assert main([*args, "--output-format", "json"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert main([*args, "--output-format", "ptb"]) == 0
    trees = capsys.readouterr().out.splitlines()
    assert main(args) == 0
    assert capsys.readouterr().out.splitlines() == trees and len(lines) == 2
    for line, tree in zip(lines, trees, strict=True):
        answer = json.loads(line)
        assert set(answer) == {"words", "tree", "constituents", "tags", "fallback"} and answer["tree"] == tree
        assert all(0 <= c["prob"] <= 1 for c in answer["constituents"] if c["prob"] is not None)
    assert json.loads(lines[0])["words"] == ["look", "with", "care"]
    assert main([*args, "--output-format", "json", "--output", str(tmp_path / "out.jsonl")]) == 0
    assert (tmp_path / "out.jsonl").read_text(encoding="utf-8").splitlines() == lines


def test_output_format_is_for_constituency_models(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model = Path(__file__).resolve().parents[3] / "models" / "en_ewt-o1"
    (tmp_path / "in.conllu").write_text("1\tDogs\t_\tNOUN\t_\t_\t_\t_\t_\t_\n\n", encoding="utf-8")
    assert main(["parse", "--model", str(model), "--input", str(tmp_path / "in.conllu"), "--output-format",
                 "json"]) == 2
    assert "--output-format is for constituency models" in capsys.readouterr().err
