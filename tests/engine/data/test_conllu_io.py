"""CoNLL-U reading and writing: byte-for-byte round trips, predictions, validation errors."""

from __future__ import annotations

import io
import os
import pickle
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.data.conllu_io import (
    ConlluError,
    Sentence,
    format_sentence,
    iter_conllu,
    read_conllu,
    set_misc,
    write_conllu,
)

DATA_DIR = Path(os.environ.get("BP_PARSER_DATA", Path(__file__).resolve().parents[4] / "shared" / "data"))
UD_FILES = sorted((DATA_DIR / "ud").glob("*/*.conllu"))
EWT_DEV = DATA_DIR / "ud" / "en_ewt" / "en_ewt-ud-dev.conllu"
NO_DATA = f"no treebanks under {DATA_DIR / 'ud'} (set BP_PARSER_DATA to the shared data folder)"


def _row(*cols: str) -> str:
    return "\t".join(cols)


# Comments, a multiword token (3-4), an empty node (4.1), MISC values; HEAD/DEPREL filled in.
EXAMPLE = "\n".join([
    "# sent_id = ex-1",
    "# text = I don't know.",
    _row("1", "I", "I", "PRON", "PRP", "Case=Nom", "3", "nsubj", "3:nsubj", "_"),
    _row("2-3", "don't", "_", "_", "_", "_", "_", "_", "_", "SpaceAfter=No"),
    _row("2", "do", "do", "AUX", "VBP", "_", "3", "aux", "3:aux", "_"),
    _row("3", "n't", "not", "PART", "RB", "_", "0", "root", "0:root", "Gloss=not|X=1"),
    _row("3.1", "know", "know", "VERB", "VB", "_", "_", "_", "3:conj", "_"),
    _row("4", ".", ".", "PUNCT", ".", "_", "3", "punct", "3:punct", "_"),
]) + "\n\n" + "\n".join([
    "# sent_id = ex-2",
    _row("1", "Hi", "hi", "INTJ", "UH", "_", "0", "root", "0:root", "_"),
]) + "\n\n"


def _write(tmp_path: Path, text: str, name: str = "in.conllu") -> Path:
    path = tmp_path / name
    path.write_bytes(text.encode("utf-8"))
    return path


# -- round trips ---------------------------------------------------------------------------------
# a training treebank takes seconds to round-trip: the slow part of the suite
@pytest.mark.parametrize("path", [pytest.param(p, marks=pytest.mark.slow) if "-train" in p.name else p
                                  for p in UD_FILES] or [pytest.param(None, marks=pytest.mark.skip(reason=NO_DATA))],
                         ids=lambda p: p.name if p else "none")
def test_treebank_round_trip_is_byte_for_byte(path: Path, tmp_path: Path) -> None:
    original = path.read_bytes()
    sentences = read_conllu(path)
    assert sentences and all(s.heads is not None for s in sentences)
    assert "".join(format_sentence(s) for s in sentences).encode("utf-8") == original
    out = tmp_path / "out.conllu"
    write_conllu(sentences, out)
    assert out.read_bytes() == original
    assert [p.name for p in tmp_path.iterdir()] == ["out.conllu"]  # no temporary file left


def _check_predictions_only_change_head_deprel_misc(sentences: list[Sentence], seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    for s in sentences:
        heads = np.concatenate([[-1], rng.integers(0, s.n + 1, s.n)]).astype(np.int64)
        deprels = [f"rel{k}" for k in range(s.n)]
        probs: list[str | None] = [f"{p:.4f}" for p in rng.random(s.n)]
        if s.n:
            probs[0] = None  # leave the first word's MISC alone
        out_lines = format_sentence(s, heads, deprels, {"HeadProb": probs}).split(s.newline)
        assert out_lines[-2:] == ["", ""] and len(out_lines) - 2 == len(s.lines)
        words = dict(zip(s.word_line_index, range(s.n), strict=True))
        for li, (old, new) in enumerate(zip(s.lines, out_lines, strict=False)):
            if li not in words:
                assert new == old
                continue
            k, a, b = words[li], old.split("\t"), new.split("\t")
            assert b[:6] == a[:6] and b[8] == a[8]
            assert b[6] == str(heads[k + 1]) and b[7] == deprels[k]
            assert b[9] == (a[9] if probs[k] is None else set_misc(a[9], "HeadProb", probs[k]))
        again = read_conllu(io.StringIO(format_sentence(s, heads, deprels)))[0]
        assert again.heads is not None and np.array_equal(again.heads, heads) and again.deprels == deprels


def test_predictions_change_only_columns_7_8_10_of_word_lines() -> None:
    _check_predictions_only_change_head_deprel_misc(read_conllu(io.StringIO(EXAMPLE)))


def test_predictions_on_ewt_dev() -> None:
    if not EWT_DEV.is_file():
        pytest.skip(f"UD English EWT dev not found at {EWT_DEV}")
    _check_predictions_only_change_head_deprel_misc(read_conllu(EWT_DEV))


def test_multiword_tokens_and_empty_nodes_are_kept() -> None:
    s1, s2 = read_conllu(io.StringIO(EXAMPLE), name="ex")
    assert s1.forms == ["I", "do", "n't", "."] and s1.n == 4
    assert s1.lemmas == ["I", "do", "not", "."] and s1.upos == ["PRON", "AUX", "PART", "PUNCT"]
    assert s1.misc == ["_", "_", "Gloss=not|X=1", "_"] and s1.feats[0] == "Case=Nom"
    assert s1.heads is not None and s1.heads.tolist() == [-1, 3, 3, 0, 3] and s1.heads.dtype == np.int64
    assert s1.deprels == ["nsubj", "aux", "root", "punct"]
    assert s1.word_line_index == [2, 4, 5, 7] and s1.start_line == 1 and s2.start_line == 10
    assert len(s1.lines) == 8 and s1.lines[3].startswith("2-3\t") and s1.lines[6].startswith("3.1\t")
    assert format_sentence(s1) + format_sentence(s2) == EXAMPLE
    out = format_sentence(s1, np.array([-1, 0, 1, 1, 1]), ["a", "b", "c", "d"], {"HeadProb": ["1"] * 4})
    assert out.splitlines()[3] == s1.lines[3] and out.splitlines()[6] == s1.lines[6]
    assert out.splitlines()[5].endswith("0:root\tGloss=not|X=1|HeadProb=1")


def test_crlf_bom_and_missing_final_blank_line(tmp_path: Path) -> None:
    crlf = "\ufeff" + EXAMPLE.replace("\n", "\r\n")
    path = _write(tmp_path, crlf)
    sentences = read_conllu(path)
    assert sentences[0].bom and not sentences[1].bom and sentences[0].newline == "\r\n"
    assert sentences[0].lines[0] == "# sent_id = ex-1" and sentences[0].forms[0] == "I"
    out = tmp_path / "out.conllu"
    write_conllu(sentences, out)
    assert out.read_bytes() == crlf.encode("utf-8")
    # No blank line (or no line ending at all) after the last sentence, extra blank lines: tolerated.
    text = "\n\n" + EXAMPLE.replace("\n\n", "\n\n\n").rstrip("\n")
    assert "".join(format_sentence(s) for s in read_conllu(io.StringIO(text))) == EXAMPLE


def test_forms_with_spaces_keep_their_columns() -> None:
    # conllu also splits on two spaces; the reader must still follow CoNLL-U's tab rule.
    text = _row("1", "New  York", "New  York", "PROPN", "NNP", "_", "0", "root", "_", "Note=a  b") + "\n"
    (s,) = read_conllu(io.StringIO(text))
    assert s.forms == ["New  York"] and s.misc == ["Note=a  b"] and s.upos == ["PROPN"]
    assert format_sentence(s) == text + "\n"


FIELD = st.text(st.characters(exclude_characters="\t\n\r", exclude_categories=("Cs",)), min_size=1).filter(
    lambda t: not t.isspace())


@given(st.lists(st.lists(FIELD, min_size=4, max_size=4), min_size=1, max_size=6))
@settings(max_examples=60, deadline=None)
def test_generated_sentences_round_trip(words: list[list[str]]) -> None:
    lines = [_row(str(k + 1), form, lemma, upos, "_", feats, str(k), "dep", "_", "_")
             for k, (form, lemma, upos, feats) in enumerate(words)]
    text = "# generated\n" + "\n".join(lines) + "\n\n"
    (s,) = read_conllu(io.StringIO(text))
    assert s.forms == [w[0] for w in words] and s.feats == [w[3] for w in words]
    assert format_sentence(s) == text


# -- HEAD '_' and strict_heads -------------------------------------------------------------------
def test_underscore_head_gives_no_heads() -> None:
    text = EXAMPLE.replace("\t3\tnsubj\t", "\t_\tnsubj\t")
    s1, s2 = read_conllu(io.StringIO(text))
    assert s1.heads is None and s1.deprels[0] == "nsubj" and s2.heads is not None
    all_blank = _row("1", "Hi", "hi", "INTJ", "UH", "_", "_", "_", "_", "_") + "\n"
    assert read_conllu(io.StringIO(all_blank))[0].heads is None


def test_non_strict_reading_ignores_head_and_deprel() -> None:
    text = EXAMPLE.replace("\t3\tnsubj\t", "\tx\t\t").replace("\t0\troot\t0:root\tG", "\t99\troot\t0:root\tG")
    s1, s2 = read_conllu(io.StringIO(text), strict_heads=False)
    assert s1.heads is None and s1.forms[0] == "I" and s2.heads is not None
    out = format_sentence(s1, np.array([-1, 3, 3, 0, 3]), ["nsubj", "aux", "root", "punct"])
    assert out == format_sentence(read_conllu(io.StringIO(EXAMPLE))[0])


# -- malformed input -----------------------------------------------------------------------------
GOOD = _row("1", "a", "a", "X", "_", "_", "0", "root", "_", "_")
GOOD2 = _row("2", "b", "b", "X", "_", "_", "1", "dep", "_", "_")
BLANK = "\t_" * 8  # LEMMA..MISC of a multiword token or empty node


@pytest.mark.parametrize(("text", "line", "problem"), [
    (f"# c\n{GOOD}\n2\tb\tb\tX\t_\t_\t1\tdep\t_\n", 3, "expected 10 tab-separated columns, found 9"),
    (f"{GOOD}\n{GOOD2}\t_\n", 2, "expected 10 tab-separated columns, found 11"),
    (f"{GOOD}\nsome stray text\n{GOOD2}\n", 2, "expected 10 tab-separated columns, found 1"),
    (f"{GOOD}\n\n# c\n{GOOD}\n{GOOD2.replace('2', 'x', 1)}\n", 5, "invalid ID 'x'"),
    (f"{GOOD}\n{GOOD2.replace('2', '3', 1)}\n", 2, "ID sequence broken: expected 2, found 3"),
    (f"{GOOD2}\n", 1, "ID sequence broken: expected 1, found 2"),
    (f"{GOOD}\n{GOOD2.replace('1', 'abc', 1)}\n", 2, "HEAD 'abc' is not an integer or '_'"),
    (f"{GOOD}\n{GOOD2.replace('1', '-1', 1)}\n", 2, "HEAD '-1' is not an integer or '_'"),
    (f"{GOOD}\n{GOOD2.replace('1', '7', 1)}\n", 2, "HEAD 7 out of range (the sentence has 2 words)"),
    (f"{GOOD}\n{GOOD2.replace('b', '', 1)}\n", 2, "empty FORM column"),
    (f"{GOOD}\n2-3\tbc{BLANK}\n{GOOD2}\n", 2, "multiword token 2-3 extends past the last word"),
    (f"3-4\tbc{BLANK}\n{GOOD}\n", 1, "multiword token 3-4 out of place"),
    (f"{GOOD}\n2.1\tbc{BLANK}\n{GOOD2}\n", 2, "empty node 2.1 out of place"),
])
def test_malformed_input_names_file_and_line(tmp_path: Path, text: str, line: int, problem: str) -> None:
    path = _write(tmp_path, text)
    with pytest.raises(ConlluError) as info:
        read_conllu(path)
    err = info.value
    assert (err.path, err.line) == (str(path), line) and err.problem.startswith(problem)
    assert str(err).startswith(f"{path}:{line}: {problem}")
    assert isinstance(err, ValueError) and str(pickle.loads(pickle.dumps(err))) == str(err)


def test_errors_in_streams_use_the_given_name_and_count_lines_across_blocks() -> None:
    text = f"{GOOD}\n\n\n# c\n{GOOD}\n{GOOD2.replace('1', 'h', 1)}\n"
    with pytest.raises(ConlluError, match=r"^<stdin>:6: HEAD 'h'"):
        list(iter_conllu(io.StringIO(text), name="<stdin>"))
    assert read_conllu(io.StringIO(text), strict_heads=False)[1].heads is None


def test_invalid_utf8_is_reported_with_its_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.conllu"
    path.write_bytes(f"{GOOD}\n\n".encode() + b"1\t\xff\ta\tX\t_\t_\t0\troot\t_\t_\n")
    with pytest.raises(ConlluError, match=r":3: not valid UTF-8"):
        read_conllu(path)


def test_iter_conllu_streams() -> None:
    it = iter_conllu(io.StringIO(EXAMPLE + "garbage\n"))
    assert next(it).n == 4 and next(it).n == 1
    with pytest.raises(ConlluError, match=":13: expected 10"):
        next(it)


# -- formatting and writing ----------------------------------------------------------------------
def test_format_sentence_rejects_bad_predictions() -> None:
    s = read_conllu(io.StringIO(EXAMPLE))[0]
    with pytest.raises(ValueError, match="shape"):
        format_sentence(s, heads=np.array([0, 1, 2]))
    with pytest.raises(ValueError, match="0..4"):
        format_sentence(s, heads=np.array([-1, 0, 1, 2, 5]))
    with pytest.raises(ValueError, match="deprels"):
        format_sentence(s, deprels=["a", "b"])
    with pytest.raises(ValueError, match="deprels"):
        format_sentence(s, deprels=["a", "b", "c d\te", "f"])
    with pytest.raises(ValueError, match="MISC values"):
        format_sentence(s, misc={"HeadProb": ["1"]})


def test_write_conllu_to_stream_and_atomically_to_path(tmp_path: Path) -> None:
    sentences = read_conllu(io.StringIO(EXAMPLE))
    buf = io.StringIO()
    write_conllu([sentences[0], format_sentence(sentences[1])], buf)
    assert buf.getvalue() == EXAMPLE
    out = tmp_path / "out.conllu"
    out.write_text("old\n")

    def failing() -> Iterator[Sentence]:
        yield sentences[0]
        raise RuntimeError("interrupted")

    with pytest.raises(RuntimeError):
        write_conllu(failing(), out)
    assert out.read_text() == "old\n" and [p.name for p in tmp_path.iterdir()] == ["out.conllu"]
    write_conllu(iter(sentences), str(out))
    assert out.read_text(encoding="utf-8") == EXAMPLE


# -- set_misc ------------------------------------------------------------------------------------
def test_set_misc() -> None:
    assert set_misc("_", "HeadProb", "0.93") == "HeadProb=0.93"
    assert set_misc("", "HeadProb", "0.93") == "HeadProb=0.93"
    assert set_misc("SpaceAfter=No", "HeadProb", "0.5") == "SpaceAfter=No|HeadProb=0.5"
    assert set_misc("A=1|HeadProb=0.1|B=2", "HeadProb", "0.5") == "A=1|HeadProb=0.5|B=2"
    assert set_misc("A=1|HeadProb|HeadProb=0.2", "HeadProb", "0.5") == "A=1|HeadProb=0.5"
    assert set_misc("HeadProbX=1", "HeadProb", "0.5") == "HeadProbX=1|HeadProb=0.5"
    assert set_misc("A=1|HeadProb=0.1", "HeadProb", None) == "A=1"
    assert set_misc("HeadProb=0.1", "HeadProb", None) == "_"
    assert set_misc("_", "HeadProb", None) == "_"
    for key, value in [("", "1"), ("A=B", "1"), ("A|B", "1"), ("A", "1|2"), ("A", "1\t2")]:
        with pytest.raises(ValueError):
            set_misc("_", key, value)


def test_sentence_copy_is_a_deep_copy(ewt_dir) -> None:  # type: ignore[no-untyped-def]
    """``Sentence.copy`` (used before re-tagging in place) equals ``copy.deepcopy`` and shares no list."""
    import copy as copy_module
    import dataclasses

    sentences = read_conllu(ewt_dir / "en_ewt-ud-dev.conllu")[:200]
    for s in sentences:
        fast, deep = s.copy(), copy_module.deepcopy(s)
        for f in dataclasses.fields(s):
            a, b = getattr(fast, f.name), getattr(deep, f.name)
            assert (np.array_equal(a, b) if isinstance(a, np.ndarray) else a == b), f.name
            if isinstance(a, (list, np.ndarray)):
                assert a is not getattr(s, f.name), f.name
        fast.upos[0] = "CHANGED"
        assert s.upos[0] != "CHANGED"
