"""Lemmas, UFeats, AllTags, CLAS, MLAS and BLEX (CoNLL 2018 definitions, ``conll18_ud_eval.py``) on a tiny
hand-built sentence whose scores are worked out by hand in each test."""

from __future__ import annotations

import pytest

from engine.evaluation.ud_align import evaluate_ud, sentences_from_conllu, universal_feats

# ID FORM LEMMA UPOS XPOS FEATS HEAD DEPREL. Content words (CONTENT_DEPRELS): cats (nsubj), sleep (root);
# "The" is a functional child (det) of cats; "." (punct) is neither. Gold LEMMA of "." is "_".
GOLD = [
    ("1", "The", "the", "DET", "DT", "Definite=Def|PronType=Art", "2", "det"),
    ("2", "cats", "cat", "NOUN", "NNS", "Number=Plur", "3", "nsubj"),
    ("3", "sleep", "sleep", "VERB", "VBP", "Mood=Ind|Tense=Pres|VerbForm=Fin", "0", "root"),
    ("4", ".", "_", "PUNCT", ".", "_", "3", "punct"),
]


def _text(rows: list[tuple[str, ...]]) -> str:
    lines = ["# text = The cats sleep."]
    lines += ["\t".join([*row, "_", "SpaceAfter=No" if row[0] == "3" else "_"]) for row in rows]
    return "\n".join(lines) + "\n\n"


def _change(wid: str, column: int, value: str, rows: list[tuple[str, ...]] = GOLD) -> list[tuple[str, ...]]:
    return [tuple(value if (r[0] == wid and k == column) else v for k, v in enumerate(r)) for r in rows]


def _scores(rows: list[tuple[str, ...]]) -> dict:
    return evaluate_ud(sentences_from_conllu(_text(GOLD)), sentences_from_conllu(_text(rows)))


def test_perfect_copy_scores_100() -> None:
    s = _scores(GOLD)
    for m in ("lemmas", "ufeats", "alltags", "clas", "mlas", "blex"):
        assert s[m] == 100.0, m
    assert s["counts"]["mlas"] == {"gold": 2, "system": 2, "correct": 2}


def test_universal_features_only() -> None:
    assert universal_feats("Number=Plur|Foo=Bar|Case=Nom") == "Case=Nom|Number=Plur"
    assert universal_feats("_") == ""
    # a language-specific feature and another order of the same universal features change nothing
    rows = _change("2", 5, "Foo=Bar|Number=Plur")
    rows = _change("3", 5, "VerbForm=Fin|Tense=Pres|Mood=Ind", rows)
    assert _scores(rows)["ufeats"] == 100.0 and _scores(rows)["alltags"] == 100.0


def test_wrong_feats_of_a_functional_child_and_wrong_lemma() -> None:
    # "The" Definite=Ind: UFeats/AllTags 3/4 words. MLAS: cats needs its functional child "The" right -> 0;
    # sleep right -> MLAS 1/2. "sleep" lemma "sleeps": Lemmas 3/4, BLEX: cats right, sleep wrong -> 1/2.
    # "." lemma "xyz": right, the gold lemma is "_".
    rows = _change("1", 5, "Definite=Ind|PronType=Art")
    rows = _change("3", 2, "sleeps", rows)
    rows = _change("4", 2, "xyz", rows)
    s = _scores(rows)
    assert s["ufeats"] == 75.0 and s["alltags"] == 75.0 and s["lemmas"] == 75.0
    assert s["las"] == 100.0 and s["clas"] == 100.0
    assert s["mlas"] == 50.0 and s["blex"] == 50.0


def test_xpos_only_breaks_alltags() -> None:
    s = _scores(_change("2", 4, "NN"))
    assert s["alltags"] == 75.0 and s["ufeats"] == 100.0 and s["mlas"] == 100.0  # MLAS has no XPOS


def test_wrong_content_relation() -> None:
    # cats as obj: still a content word on both sides (2 gold, 2 system); its LAS is wrong -> CLAS, MLAS, BLEX 1/2
    s = _scores(_change("2", 7, "obj"))
    assert s["clas"] == 50.0 and s["mlas"] == 50.0 and s["blex"] == 50.0


def test_functional_child_made_content() -> None:
    # "The" as nmod: system has 3 content words (gold 2). CLAS: cats and sleep right -> P 2/3, R 2/2,
    # F1 = 2*2/(2+3) = 80. MLAS: cats lost its functional child -> 1 right, F1 = 2*1/5 = 40. BLEX as CLAS.
    s = _scores(_change("1", 7, "nmod"))
    assert s["clas"] == pytest.approx(80.0) and s["blex"] == pytest.approx(80.0)
    assert s["mlas"] == pytest.approx(40.0)
    assert s["counts"]["mlas"] == {"gold": 2, "system": 3, "correct": 1}


def test_wrong_upos_of_content_word_breaks_mlas_not_blex() -> None:
    s = _scores(_change("2", 3, "PROPN"))
    assert s["mlas"] == 50.0 and s["blex"] == 100.0 and s["clas"] == 100.0
