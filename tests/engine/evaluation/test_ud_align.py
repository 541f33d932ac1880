"""CoNLL 2018 aligned evaluation: a perfect copy scores 100, hand-computed perturbations score exactly."""

from __future__ import annotations

import unicodedata
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from engine.data.conllu_io import read_conllu
from engine.evaluation.ud_align import METRICS, _strip, evaluate_ud, sentences_from_conllu


def _block(text: str, rows: list[tuple]) -> str:
    """rows: (ID, FORM, UPOS, HEAD, DEPREL[, MISC]); range rows are (ID, FORM); XPOS is the upper-cased FORM."""
    lines = [f"# text = {text}"]
    for row in rows:
        if len(row) == 2:
            lines.append(f"{row[0]}\t{row[1]}\t_\t_\t_\t_\t_\t_\t_\t_")
        else:
            wid, form, upos, head, rel, *misc = row
            lines.append(f"{wid}\t{form}\t{form.lower()}\t{upos}\t{form.upper()}\t_\t{head}\t{rel}\t_\t"
                         f"{misc[0] if misc else '_'}")
    return "\n".join(lines) + "\n\n"


S1 = [("1", "I", "PRON", 4, "nsubj"), ("2-3", "can't"), ("2", "ca", "AUX", 4, "aux"), ("3", "n't", "PART", 4, "advmod"),
      ("4", "go", "VERB", 0, "root"), ("5", ".", "PUNCT", 4, "punct")]
S2 = [("1", "New", "PROPN", 2, "compound"), ("2", "York", "PROPN", 4, "nsubj"), ("3", "is", "AUX", 4, "cop"),
      ("4", "big", "ADJ", 0, "root"), ("5", ".", "PUNCT", 4, "punct")]
GOLD = _block("I can't go.", S1) + _block("New York is big.", S2)  # 9 tokens, 10 words, 2 sentences


def _scores(system_text: str) -> dict:
    return evaluate_ud(sentences_from_conllu(GOLD), sentences_from_conllu(system_text))


def _replace(rows: list[tuple], wid: str, **changes: object) -> list[tuple]:
    fields = ("id", "form", "upos", "head", "rel")
    out = []
    for row in rows:
        if row[0] == wid:
            row = tuple(changes.get(f, v) for f, v in zip(fields, row, strict=True))
        out.append(row)
    return out


def test_perfect_copy_scores_100() -> None:
    out = _scores(GOLD)
    for metric in METRICS:
        assert out[metric] == pytest.approx(100.0)
        assert out["precision"][metric] == pytest.approx(100.0) and out["recall"][metric] == pytest.approx(100.0)
    assert out["counts"]["tokens"] == {"gold": 9, "system": 9, "correct": 9}
    assert out["counts"]["words"] == {"gold": 10, "system": 10, "correct": 10}
    assert out["counts"]["sentences"] == {"gold": 2, "system": 2, "correct": 2}


def test_one_upos_one_head_one_label() -> None:
    out = _scores(_block("I can't go.", _replace(S1, "4", upos="NOUN")) + _block("New York is big.", S2))
    assert out["upos"] == pytest.approx(90.0) and out["xpos"] == pytest.approx(100.0)
    assert out["uas"] == pytest.approx(100.0) and out["tokens"] == pytest.approx(100.0)

    out = _scores(_block("I can't go.", S1) + _block("New York is big.", _replace(S2, "2", head=3)))
    assert out["uas"] == pytest.approx(90.0) and out["las"] == pytest.approx(90.0)
    assert out["upos"] == pytest.approx(100.0)

    out = _scores(_block("I can't go.", S1) + _block("New York is big.", _replace(S2, "2", rel="obj")))
    assert out["uas"] == pytest.approx(100.0) and out["las"] == pytest.approx(90.0)

    out = _scores(_block("I can't go.", S1) + _block("New York is big.", _replace(S2, "2", rel="nsubj:pass")))
    assert out["las"] == pytest.approx(100.0)  # only the universal part of DEPREL counts


def test_merged_tokens() -> None:
    merged = [("1", "NewYork", "PROPN", 3, "nsubj"), ("2", "is", "AUX", 3, "cop"), ("3", "big", "ADJ", 0, "root"),
              ("4", ".", "PUNCT", 3, "punct")]
    out = _scores(_block("I can't go.", S1) + _block("NewYork is big.", merged))
    # tokens: 7 of 9 gold, 7 of 8 system; words: 8 aligned of 10 gold, 9 system
    assert out["counts"]["tokens"] == {"gold": 9, "system": 8, "correct": 7}
    assert out["tokens"] == pytest.approx(200 * 7 / 17)
    assert out["words"] == pytest.approx(200 * 8 / 19)
    assert out["precision"]["words"] == pytest.approx(100 * 8 / 9)
    assert out["recall"]["words"] == pytest.approx(100 * 8 / 10)
    for metric in ("upos", "uas", "las"):  # every aligned word is right
        assert out[metric] == pytest.approx(200 * 8 / 19)
        assert out["aligned_accuracy"][metric] == pytest.approx(100.0)
    assert out["sentences"] == pytest.approx(100.0)


def test_split_sentence() -> None:
    first = [("1", "New", "PROPN", 2, "compound"), ("2", "York", "PROPN", 0, "root")]
    second = [("1", "is", "AUX", 2, "cop"), ("2", "big", "ADJ", 0, "root"), ("3", ".", "PUNCT", 2, "punct")]
    out = _scores(_block("I can't go.", S1) + _block("New York", first) + _block("is big.", second))
    assert out["counts"]["sentences"] == {"gold": 2, "system": 3, "correct": 1}
    assert out["sentences"] == pytest.approx(40.0)
    assert out["tokens"] == pytest.approx(100.0) and out["words"] == pytest.approx(100.0)
    assert out["uas"] == pytest.approx(90.0)  # York's head (big) is now the root
    assert out["las"] == pytest.approx(90.0)


@pytest.mark.parametrize(
    ("rows", "aligned", "system_words"),
    [
        ([("2-3", "can't"), ("2", "can", "AUX", 4, "aux"), ("3", "'t", "PART", 4, "advmod")], 8, 10),
        ([("2-4", "can't"), ("2", "ca", "AUX", 5, "aux"), ("3", "n", "PART", 5, "advmod"),
          ("4", "'t", "PART", 5, "advmod")], 9, 11),
        ([("2", "can't", "AUX", 3, "aux")], 8, 9),  # not a multiword token at all
        ([("2-3", "CAN'T"), ("2", "CA", "AUX", 4, "aux"), ("3", "N'T", "PART", 4, "advmod")], 10, 10),  # case-blind
    ],
)
def test_multiword_token_expanded_differently(rows: list[tuple], aligned: int, system_words: int) -> None:
    n_extra = system_words - 10
    head_go = 4 + n_extra
    s1 = [("1", "I", "PRON", head_go, "nsubj"), *rows, (str(head_go), "go", "VERB", 0, "root"),
          (str(head_go + 1), ".", "PUNCT", head_go, "punct")]
    text = "I CAN'T go." if rows[0][1] == "CAN'T" else "I can't go."
    if rows[0][1] == "CAN'T":
        gold = sentences_from_conllu(GOLD.replace("can't", "CAN'T"))
        out = evaluate_ud(gold, sentences_from_conllu(_block(text, s1) + _block("New York is big.", S2)))
    else:
        out = _scores(_block(text, s1) + _block("New York is big.", S2))
    assert out["tokens"] == pytest.approx(100.0)
    assert out["counts"]["words"] == {"gold": 10, "system": system_words, "correct": aligned}
    assert out["words"] == pytest.approx(200 * aligned / (10 + system_words))
    assert out["uas"] == pytest.approx(200 * aligned / (10 + system_words))  # every aligned head corresponds


def test_system_without_heads_scores_tokens_not_attachment() -> None:
    bare = "".join(
        "\n".join([f"# text = {t}"] + [line.split("\t", 1)[0] + "\t" + line.split("\t")[1] + "\t_" * 8
                                        for line in block.splitlines()[1:]]) + "\n\n"
        for t, block in zip(("I can't go.", "New York is big."), GOLD.strip().split("\n\n"), strict=True)
    )
    system = sentences_from_conllu(bare)
    assert all(s.heads is None for s in system)
    out = evaluate_ud(sentences_from_conllu(GOLD), system)
    assert out["tokens"] == pytest.approx(100.0) and out["words"] == pytest.approx(100.0)
    assert out["sentences"] == pytest.approx(100.0)
    assert out["uas"] == 0.0 and out["las"] == 0.0 and out["upos"] == 0.0


def test_different_characters_are_refused() -> None:
    with pytest.raises(ValueError, match="differ"):
        _scores(GOLD.replace("big", "bog"))


def test_whitespace_in_forms_is_ignored() -> None:
    spaced = [("1", "New York", "PROPN", 3, "nsubj"), ("2", "is", "AUX", 3, "cop"), ("3", "big", "ADJ", 0, "root"),
              ("4", ".", "PUNCT", 3, "punct")]
    out = _scores(_block("I can't go.", S1) + _block("New York is big.", spaced))
    assert out["counts"]["tokens"] == {"gold": 9, "system": 8, "correct": 7}


def test_ewt_dev_copy_scores_100(ewt_dir: Path) -> None:
    dev = read_conllu(ewt_dir / "en_ewt-ud-dev.conllu")
    out = evaluate_ud(dev, dev)
    assert all(out[m] == pytest.approx(100.0) for m in METRICS)
    assert out["counts"]["sentences"]["gold"] == len(dev)
    assert out["counts"]["words"]["gold"] == sum(s.n for s in dev)


def _words_conllu(tokens: list[str]) -> str:
    """One sentence; ``"abc a b c"`` is the multiword token ``abc`` of the words a, b, c (word 1 is the root)."""
    lines, k = [], 0
    for tok in tokens:
        surface, *words = tok.split(" ")
        if words:
            lines.append(f"{k + 1}-{k + len(words)}\t{surface}" + "\t_" * 8)
        for w in words or [surface]:
            k += 1
            lines.append(f"{k}\t{w}\t_\t_\t_\t_\t{int(k > 1)}\t_\t_\t_")
    return "\n".join(lines) + "\n\n"


@pytest.mark.parametrize(
    ("gold", "system", "correct"),
    [  # the word-alignment cases of the shared task's own evaluation tests
        (["abc a b c"], ["a", "b", "c"], 3),
        (["a", "bc b c", "d"], ["a", "b", "c", "d"], 4),
        (["abcd a b c d"], ["ab a b", "cd c d"], 4),
        (["abc a b c", "de d e"], ["a", "bcd b c d", "e"], 5),
        (["abcd"], ["a", "b", "c", "d"], 0),
        (["abc", "d"], ["a", "b", "c", "d"], 1),
        (["a", "bc", "d"], ["a", "b", "c", "d"], 2),
        (["a", "bc b c", "d"], ["a", "b", "cd"], 2),
        (["abc a BX c", "def d EX f"], ["ab a b", "cd c d", "ef e f"], 4),
        (["ab a b", "cd bc d"], ["a", "bc", "d"], 2),
        (["a", "bc b c", "d"], ["ab AX BX", "cd CX a"], 1),
    ],
)
def test_word_alignment_cases(gold: list[str], system: list[str], correct: int) -> None:
    n_gold = sum(max(1, len(t.split(" ")) - 1) for t in gold)
    n_system = sum(max(1, len(t.split(" ")) - 1) for t in system)
    out = evaluate_ud(sentences_from_conllu(_words_conllu(gold)), sentences_from_conllu(_words_conllu(system)))
    assert out["counts"]["words"] == {"gold": n_gold, "system": n_system, "correct": correct}
    assert out["words"] == pytest.approx(200 * correct / (n_gold + n_system))


@given(st.text(alphabet=st.sampled_from(["a", "b", " ", "\t", "\u00a0", "\u2009", "\u3000", "\u200b", "\n", "\u1680",
                                         "\u2028", "é"]), max_size=12) | st.text(max_size=12))
def test_strip_removes_exactly_the_space_separators(form: str) -> None:
    """The fast path (no whitespace at all: the form itself) and the slow one give what the CoNLL 2018 script's
    rule gives: every character of category Zs removed, and nothing else (tabs, newlines, U+200B kept)."""
    assert _strip(form) == "".join(c for c in form if unicodedata.category(c) != "Zs")
