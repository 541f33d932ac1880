"""Head rules, head-outward binarisation, the anchored two-layer form and the way back."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from nltk import Tree

from engine.constituency.binarize import binarize, debinarize, from_anchored, spans, to_anchored
from engine.constituency.grammar import AnchoredTree
from engine.constituency.heads import head_child
from engine.constituency.rules import grammar_from_trees
from engine.constituency.treebank import split_by_file


def tree(text: str) -> Tree:
    return Tree.fromstring(text)


def test_head_rules() -> None:
    assert head_child("NP", ["NP", "POS"]) == 1  # a final POS
    assert head_child("NP", ["DT", "NN", "NNS", "PP"]) == 2  # the rightmost noun
    assert head_child("NP", ["NP", ",", "NP", "SBAR"]) == 0  # else the leftmost NP
    assert head_child("NP", ["DT", "CD"]) == 1
    assert head_child("NP", ["DT", "DT"]) == 1  # nothing matches: the last child
    assert head_child("VP", ["ADVP", "VBD", "NP", "VP"]) == 1  # priority list, scanned left to right
    assert head_child("PP", ["IN", "NP", "IN"]) == 2  # PP scans from the right
    assert head_child("S", ["NP", "VP", "."]) == 1
    assert head_child("ADVP", ["NP", "NP"]) == 1  # right: the rightmost NP
    assert head_child("FRAG", ["NP", "PP"]) == 1  # empty list, right: the last child
    assert head_child("UNKNOWN", ["A", "B"]) == 0
    with pytest.raises(ValueError):
        head_child("NP", [])


def test_head_outward_right_siblings_first() -> None:
    # VP's head VBD (index 1): right siblings attached first (innermost @VP -> VBD NP), then the left ADVP
    vp = tree("(VP (ADVP (RB then)) (VBD sold) (NP (NN stock)) (PP (IN in) (NP (NN may))) (. .))")
    assert binarize(vp) == tree("(VP (ADVP (RB then)) (@VP (@VP (@VP (VBD sold) (NP (NN stock)))"
                                " (PP (IN in) (NP (NN may)))) (. .)))")
    # NP's head is its last noun: left siblings attached from the head outward
    np_ = tree("(NP (DT the) (JJ big) (JJ red) (NN dog))")
    assert binarize(np_) == tree("(NP (DT the) (@NP (JJ big) (@NP (JJ red) (NN dog))))")
    two = tree("(S (NP (NN a)) (VP (VB b)))")
    assert binarize(two) == two
    assert debinarize(binarize(vp)) == vp and debinarize(binarize(np_)) == np_
    with pytest.raises(ValueError, match="starts with '@'"):
        binarize(tree("(@X (NN a) (NN b))"))


def test_unary_chains_collapse_into_two_layers() -> None:
    t = binarize(tree("(TOP (S (VP (VB go)) (NP (NP (NN it)))))"))
    words, chains, binaries = spans(t)
    assert words == ["go", "it"]
    assert sorted(chains) == [(0, 1, ("VP", "VB")), (0, 2, ("TOP", "S")), (1, 2, ("NP", "NP", "NN"))]
    assert binaries == [(0, 1, 2, "S", "VP", "NP")]
    g = grammar_from_trees([t])
    a = to_anchored(t, g)
    assert a.n == 2 and len(a.unary) == 3 and len(a.binary) == 1 and a.words == ("go", "it")
    assert [g.labels[x] for x in a.tags] == ["VB", "NN"]
    rules = {(int(i), int(j)): (g.labels[g.unary[u][0]], g.labels[g.unary[u][1]], g.chains[u]) for i, j, u in a.unary}
    assert rules == {(0, 1): ("VP", "VB", ()), (1, 2): ("NP", "NN", ("NP",)), (0, 2): ("TOP", "S", ())}
    (i, k, j, r), = a.binary.tolist()
    assert (i, k, j) == (0, 1, 2) and tuple(g.labels[x] for x in g.binary[r]) == ("S", "VP", "NP")
    assert from_anchored(a, g) == debinarize(t)


def test_one_word_sentence() -> None:
    t = tree("(TOP (S (VP (VB go))))")
    g = grammar_from_trees([binarize(t)])
    a = to_anchored(binarize(t), g)
    assert a.binary.shape == (0, 4) and a.unary.shape == (1, 3)
    assert g.chains[int(a.unary[0, 2])] == ("S", "VP")
    assert from_anchored(a, g) == t


def test_anchored_items_that_are_not_a_tree_are_rejected() -> None:
    t = binarize(tree("(TOP (S (NP (NN a)) (VP (VB b) (NP (NN c)))))"))
    g = grammar_from_trees([t])
    a = to_anchored(t, g)
    with pytest.raises(ValueError, match="2 words for 3 tags"):
        from_anchored(a, g, ["a", "b"])
    with pytest.raises(ValueError, match="unary and"):
        from_anchored(AnchoredTree(a.tags, a.unary[:-1], a.binary, a.words), g)
    wrong_split = a.binary.copy()
    wrong_split[wrong_split[:, 2] - wrong_split[:, 0] == 3, 1] = 2  # split S at 2: spans 0..2 and 2..3
    with pytest.raises(ValueError, match="no unary item on span 0..2|no binary item"):
        from_anchored(AnchoredTree(a.tags, a.unary, wrong_split, a.words), g)
    wrong_tag = a.tags.copy()
    wrong_tag[0] = g.index["VB"]
    with pytest.raises(ValueError, match="word 0 is tagged 'VB'"):
        from_anchored(AnchoredTree(wrong_tag, a.unary, a.binary, a.words), g)
    with pytest.raises(ValueError, match="not in the grammar"):
        to_anchored(binarize(tree("(TOP (S (VP (VB b)) (NP (NN c))))")), g)
    with pytest.raises(ValueError, match="binarize the tree first"):
        spans(tree("(TOP (S (NN a) (NN b) (NN c)))"))


PHRASES = ("S", "NP", "VP", "PP", "ADJP", "SBAR")
TAGS = ("DT", "NN", "VB", "IN", "JJ", ",")


@st.composite
def trees(draw: st.DrawFn, depth: int = 0) -> Tree:
    """Random trees as the cleaner leaves them: tags over words, no X -> X unary, 1-4 children."""
    if depth >= 3 or draw(st.booleans()):
        return Tree(draw(st.sampled_from(TAGS)), [draw(st.sampled_from(("a", "b", "c")))])
    label = draw(st.sampled_from(PHRASES))
    children = draw(st.lists(trees(depth + 1), min_size=1, max_size=4))
    if len(children) == 1 and children[0].label() == label:
        return children[0]
    return Tree(label, children)


@settings(max_examples=100, deadline=None)
@given(st.lists(trees(), min_size=1, max_size=3))
def test_round_trip_random_trees(children: list[Tree]) -> None:
    t = Tree("TOP", children)
    b = binarize(t)
    assert debinarize(b) == t
    g = grammar_from_trees([b])
    a = to_anchored(b, g)
    n = len(t.leaves())
    assert a.unary.shape == (2 * n - 1, 3) and a.binary.shape == (n - 1, 4)
    assert sorted(map(tuple, a.unary[:, :2].tolist())) == sorted({(int(i), int(j)) for i, j, _ in a.unary})
    assert from_anchored(a, g) == t


@pytest.mark.slow
def test_round_trip_every_sample_tree(ptb_dir: Path) -> None:
    split = split_by_file(ptb_dir)
    everything = [t for trees_ in split.values() for t in trees_]
    binarized = [binarize(t) for t in everything]
    g = grammar_from_trees(binarized)
    for t, b in zip(everything, binarized, strict=True):
        a = to_anchored(b, g)
        assert np.all(a.unary[:, 1] > a.unary[:, 0])
        assert from_anchored(a, g) == t
