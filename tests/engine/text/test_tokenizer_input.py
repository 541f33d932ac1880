"""Text as users have it: line-wrapped paragraphs, blank lines, Windows line endings, tabs and other spaces,
invisible format characters, URLs, e-mail addresses, emoji and CJK runs; every token maps back to its exact
input characters (``TokenRange``). Uses the shipped default model's tokenizer."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from text_helpers import check_cover

import engine.text.tokenizer as tokenizer_module
from engine.data.conllu_io import read_conllu
from engine.evaluation.ud_align import evaluate_ud, sentences_from_conllu
from engine.pipeline import Pipeline
from engine.text.layout import IGNORED, TextView, clusters, protected_spans
from engine.text.tokenizer import Tokenizer
from engine.text.treebank_text import raw_text

MODEL = Path(__file__).resolve().parents[3] / "models" / "en_ewt"


@pytest.fixture(scope="module")
def tok() -> Tokenizer:
    tokenizer = Pipeline.load(MODEL).tokenizer
    assert tokenizer is not None
    return tokenizer


def forms(tok: Tokenizer, text: str) -> list[list[str]]:
    out = tok.tokenize(text)
    check_cover(text, out)
    return [[t.form for t in s.tokens] for s in out]


def test_single_line_breaks_are_spaces(tok: Tokenizer) -> None:
    flat = "The quick brown fox jumps over the lazy dog. It was not amused by the fox at all."
    wrapped = "The quick brown fox\njumps over the lazy\ndog. It was not amused\nby the fox at all."
    assert forms(tok, wrapped) == forms(tok, flat) == [
        ["The", "quick", "brown", "fox", "jumps", "over", "the", "lazy", "dog", "."],
        ["It", "was", "not", "amused", "by", "the", "fox", "at", "all", "."]]
    assert tok.tokenize("a list\nof words")[0].text == "a list of words"


def test_a_blank_line_is_a_paragraph_and_a_sentence_break(tok: Tokenizer) -> None:
    text = "Thanks for the help\n\nwe will see you on Monday\n \t\nBest regards"
    out = tok.tokenize(text)
    check_cover(text, out)
    assert [[t.form for t in s.tokens] for s in out] == [
        ["Thanks", "for", "the", "help"], ["we", "will", "see", "you", "on", "Monday"], ["Best", "regards"]]
    assert [s.new_paragraph for s in out] == [True, True, True]
    assert not tok.tokenize("One sentence. Another one.")[1].new_paragraph
    blocks = Tokenizer.to_conllu(out).split("\n\n")
    assert blocks[0].startswith("# newdoc\n# newpar\n# sent_id = s1\n") and blocks[1].startswith("# newpar\n")
    blocks = Tokenizer.to_conllu(out, blank_line="newdoc").split("\n\n")
    assert blocks[1].startswith("# newdoc\n# newpar\n# sent_id = s2\n")
    with pytest.raises(ValueError):
        Tokenizer.to_conllu(out, blank_line="newline")


def test_paragraphs_survive_the_cut_into_segments(tok: Tokenizer, monkeypatch: pytest.MonkeyPatch) -> None:
    text = "\n\n".join(f"Paragraph number {k} has words in it. And a second sentence here" for k in range(60))
    whole = tok.tokenize(text)
    monkeypatch.setattr(tokenizer_module, "SEGMENT", 300)  # long texts are read in segments cut at blank lines
    cut = tok.tokenize(text)
    check_cover(text, cut)
    assert [s.new_paragraph for s in cut] == [s.new_paragraph for s in whole] == [True, False] * 60
    assert [[t.form for t in s.tokens] for s in cut] == [[t.form for t in s.tokens] for s in whole]


def test_windows_line_endings(tok: Tokenizer) -> None:
    unix = "Dear Sir,\nthe parcel did not arrive.\n\nPlease send it again.\n"
    windows = unix.replace("\n", "\r\n")
    out = tok.tokenize(windows)
    check_cover(windows, out)
    assert [[t.form for t in s.tokens] for s in out] == forms(tok, unix)
    assert len(out) == 2 and out[1].new_paragraph  # \r\n\r\n is a blank line; one \r\n is a space
    assert forms(tok, "Please send\rit again.") == [["Please", "send", "it", "again", "."]]  # old Mac breaks


def test_tabs_and_other_spaces(tok: Tokenizer) -> None:
    plain = forms(tok, "We paid 10 dollars for two tickets, then left.")
    for space in ("\t", "\u00a0", "\u3000", "\u202f", "\u2009", " \t "):
        text = "We paid 10 dollars for two tickets, then left.".replace(" ", space)
        assert forms(tok, text) == plain, repr(space)
    assert TextView.of("a\tb\u00a0c").text == "a b c"


def test_invisible_format_characters(tok: Tokenizer) -> None:
    text = "\ufeffThe infor\u00admation is here\u200b. Con\u00adtact\u200b us\u2060now."
    out = tok.tokenize(text)
    check_cover(text, out)
    tokens = [t for s in out for t in s.tokens]
    assert [t.form for t in tokens][:4] == ["The", "information", "is", "here"]
    assert (tokens[0].start, tokens[0].end) == (1, 4)  # after the byte-order mark
    info = tokens[1]
    assert text[info.start:info.end] == "infor\u00admation"  # the range covers the soft hyphen
    assert "Contact" in [t.form for t in tokens]


def test_urls_and_email_addresses_are_one_token(tok: Tokenizer) -> None:
    text = ("Write to john.doe@example.co.uk or see https://example.com/a/b?x=1&y=2#top. "
            "The page (http://foo.bar/baz) moved to www.example.org/new.html, and "
            "https://en.wikipedia.org/wiki/Rome_(city) explains it.")
    out = [t for s in forms(tok, text) for t in s]
    for expected in ("john.doe@example.co.uk", "https://example.com/a/b?x=1&y=2#top", "http://foo.bar/baz",
                     "www.example.org/new.html", "https://en.wikipedia.org/wiki/Rome_(city)"):
        assert expected in out
    assert out[out.index("http://foo.bar/baz") - 1] == "(" and out[out.index("http://foo.bar/baz") + 1] == ")"
    assert protected_spans("see www.x.com.") == [(4, 13)]


def test_emoji_are_tokens_and_never_split(tok: Tokenizer) -> None:
    family, thumb, flag, keycap = "\U0001f468\u200d\U0001f469\u200d\U0001f467", "\U0001f44d\U0001f3fd", \
        "\U0001f1fa\U0001f1f8", "1\ufe0f\u20e3"
    text = f"Loved it\U0001f60d\U0001f60d! My {family} says {thumb} from the {flag}, press {keycap} now."
    out = [t for s in forms(tok, text) for t in s]
    for emoji in ("\U0001f60d", family, thumb, flag, keycap):
        assert emoji in out
    assert out.count("\U0001f60d") == 2 and "it" in out


def test_cjk_runs(tok: Tokenizer) -> None:
    english = forms(tok, "He said it yesterday.")
    text = "He said 我爱北京天安门。 it yesterday."
    out = [t for s in forms(tok, text) for t in s]
    assert [t for t in out if t.isascii()] == [t for s in english for t in s]
    assert "".join(t for t in out if not t.isascii()) == "我爱北京天安门。"



def test_decomposed_letters_read_composed(tok: Tokenizer) -> None:
    decomposed = "Cafe\u0301s and re\u0301sume\u0301s. Cafe\u0301"
    sentences = tok.tokenize(decomposed)
    check_cover(decomposed, sentences)
    out = [t for s in sentences for t in s.tokens]
    assert [t.form for t in out] == ["Caf\u00e9s", "and", "r\u00e9sum\u00e9s", ".", "Caf\u00e9"]  # NFC
    assert decomposed[out[2].start:out[2].end] == "re\u0301sume\u0301s"
    assert decomposed[out[4].start:out[4].end] == "Cafe\u0301"  # the range ends after the combining mark
    inside, _ = clusters("e\u0301x")
    assert inside.tolist() == [False, True, False]


PIECES = ["Hi", "U.S.", "e-mail", ",", "...", "3.5", "'s", "don't", "Mr.", ".", "?", "\U0001f600", "\u6771\u4eac",
          "x\u0301", "e\u0301", "https://a.b/c", "me@x.org", "(", ")", "\u00ad", "\u200b", "\ufeff", "\u200d", "\ud83d"]
SPACES = [" ", " ", " ", "\n", "\r\n", "\t", "\u00a0", "  ", "\n\n", "\r\n\r\n", "\n \n", "\u2028", "\u2029"]


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.sampled_from(PIECES), st.sampled_from(SPACES + [""])), max_size=40))
def test_offsets_map_every_token_back_to_its_input_characters(tok: Tokenizer, parts: list[tuple[str, str]]) -> None:
    """Property: in any mix of the oddities above, tokens cover the input exactly (``check_cover``), and the
    text with each single line break, tab or no-break space between visible characters made a space
    tokenizes the same."""
    text = "".join(p + s for p, s in parts)
    out = tok.tokenize(text)
    check_cover(text, out)
    visible = f"[^\\s{IGNORED}]"
    canonical = re.sub(f"(?<={visible})(?:\r\n|[\n\r\t\u00a0\u2028])(?={visible})", " ", text)
    assert [[t.form for t in s.tokens] for s in tok.tokenize(canonical)] == [[t.form for t in s.tokens] for s in out]


def test_wrapped_treebank_text_reads_as_unwrapped(tok: Tokenizer, ewt_dir: Path) -> None:
    """EWT test as files have it (paragraphs wrapped at 80 characters, as conllu_to_text.pl writes them) gives
    the tokens and sentences of the one-line-per-paragraph text."""
    gold = read_conllu(ewt_dir / "en_ewt-ud-test.conllu")
    flat, wrapped = raw_text(gold), raw_text(gold, width=80)
    lines = wrapped.split("\n")
    single = re.compile(r"(?<!\n)\n(?!\n)")  # a line break inside a paragraph
    assert not single.search(flat) and len(single.findall(wrapped)) > 1000  # really wrapped
    assert all(len(line) <= 80 or " " not in line for line in lines)
    assert re.sub(r"\s", "", wrapped) == re.sub(r"\s", "", flat)
    scores = {}
    for name, text in (("flat", flat), ("wrapped", wrapped)):
        out = tok.tokenize(text)
        check_cover(text, out)
        scores[name] = evaluate_ud(gold, sentences_from_conllu(Tokenizer.to_conllu(out)))
    for metric in ("tokens", "sentences", "words"):
        assert abs(scores["wrapped"][metric] - scores["flat"][metric]) <= 0.5, metric
    assert scores["flat"]["sentences"] > 80.0  # the figure itself, not only the difference
