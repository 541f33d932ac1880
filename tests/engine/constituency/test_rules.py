"""The grammar read off binarised trees, its JSON form, rule counts and the tag dictionary."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from nltk import Tree

from engine.constituency.binarize import binarize, to_anchored
from engine.constituency.grammar import Grammar
from engine.constituency.lexicon import TagDictionary
from engine.constituency.rules import grammar_from_json, grammar_from_trees, grammar_to_json, rule_counts
from engine.constituency.treebank import split_by_file

TREES = [
    "(TOP (S (NP (DT the) (NN dog)) (VP (VB ran)) (. .)))",
    "(TOP (S (NP (DT the) (NN cat)) (VP (VB sat) (PP (IN on) (NP (DT the) (NN mat)))) (. .)))",
    "(TOP (NP (NN dog)))",
]


def binarized() -> list[Tree]:
    return [binarize(Tree.fromstring(t)) for t in TREES]


def rules_of(g: Grammar) -> tuple[set[tuple[str, ...]], set[tuple[str, str, tuple[str, ...]]]]:
    binary = {tuple(g.labels[x] for x in row) for row in g.binary}
    unary = {(g.labels[a], g.labels[b], g.chains[u]) for u, (a, b) in enumerate(g.unary)}
    return binary, unary


def test_grammar_from_trees() -> None:
    g = grammar_from_trees(binarized())
    assert g.labels == ("TOP", ".", "@S", "DT", "IN", "NN", "NP", "PP", "S", "VB", "VP")
    assert g.top == 0 and g.labels[g.top] == "TOP"
    assert [g.labels[a] for a in np.flatnonzero(g.is_tag)] == [".", "DT", "IN", "NN", "VB"]
    binary, unary = rules_of(g)
    # S -> NP VP . has head VP: @S -> VP . inside, then S -> NP @S
    assert binary == {("S", "NP", "@S"), ("@S", "VP", "."), ("NP", "DT", "NN"), ("VP", "VB", "PP"),
                      ("PP", "IN", "NP")}
    assert unary == {("TOP", "S", ()), ("TOP", "NN", ("NP",)), ("VP", "VB", ()),
                     *((x, x, ()) for x in ("@S", "NP", "PP", "VP", "DT", "NN", "VB", "IN", "."))}
    assert len(unary) == len(g.unary)  # no duplicates
    assert grammar_from_trees(binarized()[::-1]).labels == g.labels  # the order of the trees does not matter
    with pytest.raises(ValueError, match="not 'TOP'"):
        grammar_from_trees([Tree.fromstring("(S (NN a))")])


def test_grammar_json_round_trip() -> None:
    g = grammar_from_trees(binarized())
    back = grammar_from_json(json.loads(json.dumps(grammar_to_json(g))))
    assert back.labels == g.labels and back.chains == g.chains and back.top == g.top
    for name in ("binary", "unary", "is_tag"):
        assert np.array_equal(getattr(back, name), getattr(g, name)) and getattr(back, name).dtype == getattr(
            g, name).dtype


def test_rule_counts() -> None:
    g = grammar_from_trees(binarized())
    anchored = [to_anchored(t, g) for t in binarized()]
    counts = rule_counts(anchored, g)
    binary = {tuple(g.labels[x] for x in row): c for row, c in zip(g.binary, counts.binary, strict=True)}
    assert binary == {("S", "NP", "@S"): 2, ("@S", "VP", "."): 2, ("NP", "DT", "NN"): 3, ("VP", "VB", "PP"): 1,
                      ("PP", "IN", "NP"): 1}
    unary = {(g.labels[a], g.labels[b], g.chains[u]): c
             for u, ((a, b), c) in enumerate(zip(g.unary, counts.unary, strict=True))}
    assert unary[("TOP", "S", ())] == 2 and unary[("TOP", "NN", ("NP",))] == 1 and unary[("NN", "NN", ())] == 3
    assert unary[("VP", "VB", ())] == 1 and unary[("VB", "VB", ())] == 1 and unary[("VP", "VP", ())] == 1
    assert counts.unary.sum() == sum(2 * a.n - 1 for a in anchored)
    assert counts.words == (".", "cat", "dog", "mat", "on", "ran", "sat", "the")
    lex = counts.lexical.toarray()
    assert lex[g.index["DT"], counts.words.index("the")] == 3
    assert lex[g.index["NN"], counts.words.index("dog")] == 2
    assert lex.sum() == 12
    bot = counts.bot_counts(g)
    assert bot[g.index["NP"]] == 3 and bot[g.index["NN"]] == 4 and bot[g.index["TOP"]] == 0
    top = counts.top_counts(g)
    assert top[g.index["TOP"]] == 3 and top[g.index["NN"]] == 3
    with pytest.raises(ValueError, match="counts need words"):
        rule_counts([type(anchored[0])(anchored[0].tags, anchored[0].unary, anchored[0].binary)], g)


def test_tag_dictionary() -> None:
    g = grammar_from_trees(binarized())
    counts = rule_counts([to_anchored(t, g) for t in binarized()], g)
    # "the" is seen 3 times (closed at 3); open tags: seen with more than 1 word type (NN: dog cat mat; VB: ran sat)
    d = TagDictionary.from_counts(counts, closed_word_threshold=3, open_tag_threshold=1)
    assert [g.labels[t] for t in d.open_tags] == ["NN", "VB"]
    assert [g.labels[t] for t in d.allowed("the")] == ["DT"]  # frequent: only its seen tags
    assert [g.labels[t] for t in d.allowed("on")] == ["IN", "NN", "VB"]  # rare: seen + open
    assert [g.labels[t] for t in d.allowed("unseen")] == ["NN", "VB"]
    assert d.word_index("dog") == counts.words.index("dog") and d.word_index("zzz") is None
    back = TagDictionary.from_json(json.loads(json.dumps(d.to_json())))
    for word in ("the", "on", "unseen", "."):
        assert np.array_equal(back.allowed(word), d.allowed(word))
    assert TagDictionary.from_counts(counts).closed_word_threshold == 10  # Epic's defaults
    with pytest.raises(ValueError, match="not sorted"):
        TagDictionary.from_json({**d.to_json(), "words": list(d.words)[::-1]})


@pytest.mark.slow
def test_the_train_split_grammar(ptb_dir: Path) -> None:
    train = [binarize(t) for t in split_by_file(ptb_dir)["train"]]
    g = grammar_from_trees(train)
    assert (g.n_labels, int(g.is_tag.sum()), sum(x.startswith("@") for x in g.labels)) == (92, 45, 21)
    assert (len(g.binary), len(g.unary)) == (1536, 214)
    counts = rule_counts([to_anchored(t, g) for t in train], g)
    assert counts.lexical.sum() == sum(len(t.leaves()) for t in train)
