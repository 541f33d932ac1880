"""EVALB (COLLINS.prm) against hand-computed cases, the tricky ones included."""

from __future__ import annotations

from pathlib import Path

import pytest
from nltk import Tree

from engine.constituency.evalb import EvalbError, Totals, brackets, evalb, score_sentence, sentence_scores
from engine.constituency.treebank import read_file


def t(text: str) -> Tree:
    return Tree.fromstring(text)


def test_a_hand_computed_sentence() -> None:
    gold = t("(TOP (S (NP (DT The) (NN dog)) (VP (VBD barked) (PP (IN at) (NP (DT the) (NN cat)))) (. .)))")
    test = t("(TOP (S (NP (DT The) (NN dog)) (VP (VBD barked) (PP (IN at) (NP (DT the))) (NP (NN cat))) (. .)))")
    # '.' deleted: gold S(0,6) NP(0,2) VP(2,6) PP(3,6) NP(4,6); test S NP VP PP(3,5) NP(4,5) NP(5,6)
    assert brackets(gold, [True] * 6 + [False]) == {("S", 0, 6): 1, ("NP", 0, 2): 1, ("VP", 2, 6): 1,
                                                     ("PP", 3, 6): 1, ("NP", 4, 6): 1}
    s = score_sentence(gold, test)
    assert (s.length, s.gold, s.test, s.matched, s.words, s.tags_correct) == (7, 5, 6, 3, 6, 6)
    result = evalb([gold], [test])
    assert result.short.precision == pytest.approx(50.0) and result.short.recall == pytest.approx(60.0)
    assert result.short.f1 == pytest.approx(2 * 50 * 60 / 110)
    assert result.short.exact_match == 0.0 and result.short.tag_accuracy == 100.0
    same = evalb([gold], [gold]).short
    assert (same.precision, same.recall, same.f1, same.exact_match) == (100.0, 100.0, 100.0, 100.0)


def test_punctuation_at_constituent_edges_is_deleted_by_the_gold_tag() -> None:
    gold = t("(TOP (S (NP (NNP John)) (, ,) (VP (VBD left)) (. .)))")
    inside = t("(TOP (S (NP (NNP John) (, ,)) (VP (VBD left)) (. .)))")  # the comma inside the NP: NP(0,1) still
    only_punct = t("(TOP (S (NP (NNP John)) (PRN (, ,)) (VP (VBD left)) (. .)))")  # PRN over the comma: dropped
    for test in (inside, only_punct):
        s = score_sentence(gold, test)
        assert (s.gold, s.test, s.matched, s.words) == (3, 3, 3, 2) and s.exact
    # a word the TEST tags as punctuation is not deleted (the gold tag decides), and its tag counts as wrong
    gold2 = t("(TOP (S (NP (NN a)) (VP (VB b) (NP (NN c)))))")
    test2 = t("(TOP (S (NP (NN a)) (VP (VB b) (NP (. c)))))")
    s = score_sentence(gold2, test2)
    assert (s.gold, s.test, s.matched, s.words, s.tags_correct) == (4, 4, 4, 3, 2)
    # the gold tag is punctuation but the test tag is not: the word is deleted in both, its tag not scored
    s = score_sentence(t("(TOP (S (NP (NN a)) (: ;)))"), t("(TOP (S (NP (NN a)) (NN ;)))"))
    assert (s.words, s.tags_correct, s.gold, s.test, s.matched) == (1, 1, 2, 2, 2)


def test_duplicated_brackets_are_a_multiset() -> None:
    gold = t("(TOP (NP (NP (NN a))))")  # two NP(0,1): EVALB does not remove X -> X unaries itself
    s = score_sentence(gold, t("(TOP (NP (NN a)))"))
    assert (s.gold, s.test, s.matched) == (2, 1, 1)
    s = score_sentence(t("(TOP (S (VP (VB go))))"), t("(TOP (S (S (VP (VB go)))))"))
    assert (s.gold, s.test, s.matched) == (2, 3, 2) and not s.exact
    s = score_sentence(gold, gold)
    assert (s.gold, s.test, s.matched) == (2, 2, 2) and s.exact


def test_every_level_of_a_unary_chain_counts() -> None:
    gold = t("(TOP (S (VP (VB Go)) (. .)))")
    s = score_sentence(gold, t("(TOP (VP (VB Go) (. .)))"))
    assert (s.gold, s.test, s.matched) == (2, 1, 1)  # S(0,1) and VP(0,1) in gold, VP(0,1) in test
    result = evalb([gold], [t("(TOP (VP (VB Go) (. .)))")]).short
    assert (result.precision, result.recall) == (100.0, 50.0)


def test_labels_function_tags_prt_and_traces() -> None:
    s = score_sentence(t("(TOP (VP (VB give) (PRT (RP up))))"), t("(TOP (VP (VB give) (ADVP (RP up))))"))
    assert s.matched == s.gold == s.test == 2
    raw_gold = t("( (S (NP-SBJ-1 (-NONE- *)) (VP (VB go) (NP (-NONE- *T*-1))) (. .)) )")
    s = score_sentence(raw_gold, t("(TOP (S (VP (VB go)) (. .)))"))
    assert (s.length, s.gold, s.test, s.matched) == (2, 2, 2, 2)  # trace-only constituents gone, no root bracket
    s = score_sentence(t("(S (NN a) (NN b))"), t("(TOP (S (NN a) (NN b)))"))
    assert (s.gold, s.test, s.matched) == (1, 1, 1)  # a root other than TOP is a bracket


def test_the_cutoff_counts_punctuation_but_not_traces() -> None:
    def flat(n: int, traces: int = 0, label: str = "S") -> Tree:
        return t(f"(TOP ({label} " + " ".join([f"(NN w{i})" for i in range(n - 1)] + ["(. .)"]
                                       + ["(NP (-NONE- *))"] * traces) + "))")

    forty, forty_one = flat(40, traces=3), flat(41)
    result = evalb([forty, forty_one], [forty, flat(41, label="X")])
    assert (result.short.sentences, result.all.sentences) == (1, 2)
    assert result.short.f1 == 100.0 and result.all.f1 == 50.0
    assert score_sentence(forty, forty).length == 40
    assert evalb([forty_one], [forty_one], cutoff=41).short.sentences == 1


def test_micro_average_and_json() -> None:
    a = t("(TOP (S (NP (NN a)) (VP (VB b))))")
    b = t("(TOP (S (NP (DT x) (NN y)) (VP (VB z) (NP (NN w) (PP (IN v) (NP (NN u)))))))")
    b_flat = t("(TOP (S (DT x) (NN y) (VB z) (NN w) (IN v) (NN u)))")
    result = evalb([a, b], [a, b_flat])
    # a: 3 gold, 3 test, 3 matched; b: 6 gold, 1 test (S), 1 matched. Micro: P = 4/4, R = 4/9
    assert result.short.precision == 100.0 and result.short.recall == pytest.approx(400 / 9)
    assert result.short.exact_match == 50.0
    summary = result.to_json()
    assert summary["f1"] == pytest.approx(2 * 100 * (400 / 9) / (100 + 400 / 9))
    assert summary["sentences"] == summary["sentences_all"] == 2 and summary["cutoff"] == 40
    assert Totals.of([]).f1 == 0.0 and Totals.of([]).exact_match == 0.0


def test_errors() -> None:
    gold = t("(TOP (S (NN a) (NN b)))")
    with pytest.raises(EvalbError, match="sentence 2: length mismatch: gold has 2 words, test has 1"):
        sentence_scores([gold, gold], [gold, t("(TOP (S (NN a)))")])
    with pytest.raises(EvalbError, match="words differ at word 1: gold 'b', test 'c'"):
        score_sentence(gold, t("(TOP (S (NN a) (NN c)))"))
    with pytest.raises(EvalbError, match="2 gold trees but 1 test trees"):
        evalb([gold, gold], [gold])


def test_gold_against_itself_on_a_sample_file(ptb_dir: Path) -> None:
    gold = read_file(ptb_dir / "wsj_0003.mrg")
    result = evalb(gold, gold)
    assert result.all.f1 == 100.0 and result.all.exact_match == 100.0 and result.all.tag_accuracy == 100.0
    flat = [Tree("TOP", [Tree("FLAT", [Tree(tag, [w]) for w, tag in g.pos()])]) for g in gold]
    r = evalb(gold, flat).all  # a label no gold tree has: nothing matches, every tag right
    assert (r.test, r.matched, r.precision, r.recall, r.tag_accuracy) == (len(gold), 0, 0.0, 0.0, 100.0)


def test_precision_and_recall_swap_with_the_trees() -> None:
    """With the same tags on both sides, scoring B against A swaps A-against-B's precision and recall."""
    a = t("(TOP (S (NP (DT the) (NN dog)) (VP (VB ran) (ADVP (RB away))) (. .)))")
    b = t("(TOP (S (NP (DT the) (NN dog) (VB ran)) (ADVP (RB away)) (. .)))")
    ab, ba = evalb([a], [b]).short, evalb([b], [a]).short
    assert (ab.precision, ab.recall) == (ba.recall, ba.precision)
    # a: S(0,4) NP(0,2) VP(2,4) ADVP(3,4); b: S(0,4) NP(0,3) ADVP(3,4); matched S and ADVP
    assert (ab.matched, ab.gold, ab.test) == (2, 4, 3) and (ba.matched, ba.gold, ba.test) == (2, 3, 4)
