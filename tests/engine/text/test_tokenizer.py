"""Tokenizer and sentence splitter learned from a treebank: held-out accuracy, SpaceAfter, state, robustness."""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from text_helpers import check_cover, seen

import engine.text.tokenizer as tokenizer_module
from engine.data.conllu_io import read_conllu
from engine.evaluation.ud_align import evaluate_ud, sentences_from_conllu
from engine.text.mwt import MultiwordExpander
from engine.text.tokenizer import Tokenizer
from engine.text.treebank_text import GoldToken, build_text, raw_text

TRAIN_SENTENCES = 3000  # a fixed prefix of EWT train keeps training under ~15 s
DEV_SENTENCES = 500
MIN_TOKENS_F1, MIN_SENTENCES_F1, MIN_WORDS_F1 = 98.0, 70.0, 97.5  # measured: about 99.1, 83, 99.0


@pytest.fixture(scope="module")
def ewt(ewt_dir: Path) -> tuple[Tokenizer, list]:
    train = read_conllu(ewt_dir / "en_ewt-ud-train.conllu")[:TRAIN_SENTENCES]
    dev = read_conllu(ewt_dir / "en_ewt-ud-dev.conllu")[:DEV_SENTENCES]
    return Tokenizer.train(train, seed=0), dev


def _squeeze(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


@pytest.mark.slow
def test_reproduces_heldout_dev_tokenization(ewt: tuple[Tokenizer, list]) -> None:
    tok, dev = ewt
    text = raw_text(dev)
    out = tok.tokenize(text)
    check_cover(text, out)
    scores = evaluate_ud(dev, sentences_from_conllu(tok.to_conllu(out)))
    assert scores["tokens"] >= MIN_TOKENS_F1
    assert scores["sentences"] >= MIN_SENTENCES_F1
    assert scores["words"] >= MIN_WORDS_F1  # multiword tokens (don't -> do n't) expanded


@pytest.mark.slow
def test_space_after_round_trips(ewt: tuple[Tokenizer, list]) -> None:
    tok, dev = ewt
    aligned = build_text(dev)
    out = tok.tokenize(aligned.text)
    tokens = [t for s in out for t in s.tokens]
    detok = "".join(t.form + (" " if t.space_after else "") for t in tokens)
    assert _squeeze(detok) == _squeeze(aligned.text)
    # where a predicted token is a gold token, its SpaceAfter is the gold one
    gold = {span: g.space_after for spans, toks in zip(aligned.tokens, aligned.gold, strict=True)
            for span, g in zip(spans, toks, strict=True)}
    matched = [(t.space_after, gold[(t.start, t.end)]) for t in tokens[:-1] if (t.start, t.end) in gold]
    assert len(matched) > 0.95 * len(tokens) and all(a == b for a, b in matched)
    # and the CoNLL-U written for them says so
    blocks = sentences_from_conllu(tok.to_conllu(out))
    no_space = sum("SpaceAfter=No" in line for b in blocks for line in b.lines)
    assert no_space == sum(not t.space_after for t in tokens)


@pytest.mark.slow
def test_state_round_trip_gives_identical_output(ewt: tuple[Tokenizer, list], tmp_path: Path) -> None:
    tok, dev = ewt
    meta, arrays = tok.to_state()
    meta2 = json.loads(json.dumps(meta))
    for name, arr in arrays.items():
        np.save(tmp_path / f"{name}.npy", arr, allow_pickle=False)
    arrays2 = {name: np.load(tmp_path / f"{name}.npy", allow_pickle=False) for name in arrays}
    again = Tokenizer.from_state(meta2, arrays2)
    text = raw_text(dev[:200]) + "\n\nI can't believe it's THAT easy, Mr. O'Neil... isn't it?"
    assert again.tokenize(text) == tok.tokenize(text)


@pytest.mark.slow
def test_bad_state_is_refused(ewt: tuple[Tokenizer, list]) -> None:
    tok, _ = ewt
    meta, arrays = tok.to_state()
    with pytest.raises(ValueError):
        Tokenizer.from_state({**meta, "version": 99}, arrays)
    with pytest.raises(ValueError):
        Tokenizer.from_state(meta, {k: v for k, v in arrays.items() if k != "chars_weights"})
    with pytest.raises(ValueError):
        Tokenizer.from_state(meta, {**arrays, "sentences_weights": arrays["sentences_weights"][:-1]})
    with pytest.raises(ValueError):
        Tokenizer.from_state({**meta, "threshold": 2.0}, arrays)


@pytest.mark.slow
def test_empty_and_unpunctuated_text(ewt: tuple[Tokenizer, list]) -> None:
    tok, _ = ewt
    assert tok.tokenize("") == [] and tok.tokenize(" \n\t\u00a0\u3000 ") == []
    out = tok.tokenize("  i think we should go now  ")
    assert len(out) == 1 and [t.form for t in out[0].tokens] == ["i", "think", "we", "should", "go", "now"]
    assert out[0].text == "i think we should go now"
    out = tok.tokenize("I don't know.\n\nWe cannot stay")
    assert [[t.form for t in s.tokens] for s in out] == [["I", "don't", "know", "."], ["We", "cannot", "stay"]]
    assert out[0].tokens[1].words == ["do", "n't"] and out[1].tokens[1].words == ["can", "not"]
    assert out[0].tokens[2].space_after is False and out[0].tokens[3].space_after is True


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.text(alphabet=st.characters(exclude_categories=("Cs",)), max_size=200)
       | st.lists(st.sampled_from(["Hi", "U.S.", "e-mail", ",", "...", " ", "\n", "\n\n", "😀", "東京", "ß", "İ",
                                   "x\u0301", "'s", "\t", "\u200b", "www.example.com", ":-)", "3.5", "\u2028",
                                   "\ud83d"]),
                  max_size=60).map("".join))
@pytest.mark.slow
def test_any_unicode_text_is_covered(ewt: tuple[Tokenizer, list], text: str) -> None:
    tok, _ = ewt
    out = tok.tokenize(text)
    check_cover(text, out)
    if out:  # the CoNLL-U is valid and keeps the characters
        system = sentences_from_conllu(tok.to_conllu(out))
        assert len(system) == len(out)
        forms = "".join(t.form for s in out for t in s.tokens)
        lines = [line.split("\t") for s in system for line in s.lines if not line.startswith("#")]
        assert all(len(cols) == 10 for cols in lines)
        assert len(re.sub(r"\s", "", forms)) == len(re.sub(r"\s", "", seen(text)))


@pytest.mark.slow
def test_long_text_is_cut_into_segments(ewt: tuple[Tokenizer, list], monkeypatch: pytest.MonkeyPatch) -> None:
    tok, dev = ewt
    text = raw_text(dev[:150])
    whole = tok.tokenize(text)
    monkeypatch.setattr(tokenizer_module, "SEGMENT", 1000)
    cut = tok.tokenize(text)
    check_cover(text, cut)
    spans = {(t.start, t.end) for s in whole for t in s.tokens}
    spans_cut = {(t.start, t.end) for s in cut for t in s.tokens}
    assert len(spans & spans_cut) > 0.99 * len(spans)
    no_space = "x" * 3000 + " y"  # a run longer than a segment without whitespace still works
    out = tok.tokenize(no_space)
    check_cover(no_space, out)


def _conllu_sentence(tokens: list[tuple[str, list[str], bool]]) -> str:
    text = "".join(f + (" " if sp else "") for f, _, sp in tokens).strip()
    lines, k = [f"# text = {text}"], 0
    for form, words, sp in tokens:
        misc = "_" if sp else "SpaceAfter=No"
        if len(words) > 1:
            lines.append(f"{k + 1}-{k + len(words)}\t{form}\t_\t_\t_\t_\t_\t_\t_\t{misc}")
        for w in words:
            k += 1
            lines.append(f"{k}\t{w}\t_\tX\t_\t_\t{0 if k == 1 else 1}\t{'root' if k == 1 else 'dep'}\t_\t"
                         f"{misc if len(words) == 1 else '_'}")
    return "\n".join(lines) + "\n\n"


def test_learns_the_treebank_conventions_not_english_rules() -> None:
    """A made-up treebank: 'New York' is one token (with a space), 'del' is the words 'de el', '!' is
    glued to the word before it and a sentence ends after '!' only."""
    rng = random.Random(0)
    nouns = ["casa", "perro", "libro", "mesa", "gato", "sol", "mar", "pan", "luz", "rio"]
    blocks = []
    for k in range(400):
        words = [rng.choice(nouns) for _ in range(rng.randint(2, 6))]
        toks = [(w, [w], True) for w in words]
        toks.insert(rng.randint(0, len(toks)), ("New York", ["New York"], True))
        toks.insert(rng.randint(0, len(toks)), ("del", ["de", "el"], True))
        toks[-1] = (toks[-1][0], toks[-1][1], False)
        toks.append(("!", ["!"], True))
        blocks.append(("# newdoc\n" if k % 20 == 0 else "") + _conllu_sentence(toks))
    tok = Tokenizer.train(sentences_from_conllu("".join(blocks)), seed=0)
    text = "gato del mar New York! libro casa New York sol! perro"
    out = tok.tokenize(text)
    assert [[t.form for t in s.tokens] for s in out] == [
        ["gato", "del", "mar", "New York", "!"], ["libro", "casa", "New York", "sol", "!"], ["perro"]]
    assert out[0].tokens[1].words == ["de", "el"] and out[0].tokens[3].words == ["New York"]
    assert out[0].tokens[3].space_after is False
    block = out[0].conllu("t1")
    assert "2-3\tdel\t" in block and "\nt" not in block and block.endswith("\n\n")


def test_multiword_expander() -> None:
    def toks(form: str, words: str, n: int) -> list[GoldToken]:
        return [GoldToken(form, tuple(words.split()), True)] * n

    training = (toks("don't", "do n't", 5) + toks("can't", "ca n't", 3) + toks("isn't", "is n't", 2)
                + toks("au", "à le", 4) + toks("its", "it s", 1) + toks("its", "its", 9) + toks("Bush's", "Bush 's", 3)
                + toks("it's", "it 's", 3) + toks("John's", "John 's", 1) + toks("one's", "one's", 2)
                + toks("cannot", "can not", 3) + toks("knot", "knot", 1))
    mwt = MultiwordExpander.train(training)
    assert mwt.expand("Don't") == ["Do", "n't"] and mwt.expand("DON'T") == ["DO", "N'T"]
    assert mwt.expand("Au") == ["À", "le"] and mwt.expand("au") == ["à", "le"]
    assert mwt.expand("its") == ["its"]  # mostly a single word in training
    assert mwt.expand("wouldn't") == ["would", "n't"]  # unseen: suffix rule (3 types support n't)
    assert mwt.expand("Mary's") == ["Mary", "'s"]
    assert mwt.expand("one's") == ["one's"]  # seen unsplit
    assert mwt.expand("pinot") == ["pinot"]  # 'not' splits only one type: no rule
    assert mwt.expand("n't") == ["n't"]
    again = MultiwordExpander.from_meta(json.loads(json.dumps(mwt.to_meta())))
    assert again == mwt
