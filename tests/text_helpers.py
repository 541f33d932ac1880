"""Checks shared by the tokenizer tests: every token maps back to its exact input characters."""

from __future__ import annotations

import re
import unicodedata

from engine.text.layout import IGNORED
from engine.text.tokenizer import TokenizedSentence

_IGNORED = re.compile(f"[{IGNORED}]")


def _gap(s: str) -> bool:
    """Only whitespace and ignored format characters."""
    return not _IGNORED.sub("", s).strip()


def seen(s: str) -> str:
    """What the tokenizer reads of input characters: ignored characters dropped, whitespace runs one space,
    NFC."""
    return unicodedata.normalize("NFC", re.sub(r"\s+", " ", _IGNORED.sub("", s)))


def check_cover(text: str, sentences: list[TokenizedSentence]) -> None:
    """Tokens are in input order and do not overlap; ``text[start:end]`` is the token's exact characters
    (beginning and ending with a visible one, spelling the form once ignored characters are dropped,
    whitespace runs are single spaces and the text is NFC); between tokens there is only whitespace and
    ignored characters, so every other character of the input is in a token; the sentence text is the
    forms joined by SpaceAfter; the CoNLL-U ``TokenRange`` of each token is its offsets."""
    pos = 0
    for sent in sentences:
        assert sent.tokens
        last = len(sent.tokens) - 1
        assert sent.text == "".join(t.form + (" " if t.space_after and k < last else "")
                                    for k, t in enumerate(sent.tokens))
        for tok in sent.tokens:
            assert pos <= tok.start < tok.end <= len(text)
            exact = text[tok.start:tok.end]
            assert not _gap(exact[0]) and not _gap(exact[-1])
            assert seen(exact) == seen(tok.form) and not re.search(f"[^\\S ]|[{IGNORED}]", tok.form)
            assert _gap(text[pos:tok.start])
            assert tok.words and all(tok.words)
            if tok.end < len(text) and not _gap(text[tok.end]):
                assert not tok.space_after
            pos = tok.end
    assert _gap(text[pos:])
    ranges = [t for s in sentences for t in s.tokens]
    conllu = "".join(s.conllu(str(k)) for k, s in enumerate(sentences))
    written = [tuple(map(int, m.split(":"))) for m in re.findall(r"TokenRange=(\d+:\d+)", conllu)]
    assert written == [(t.start, t.end) for t in ranges]
