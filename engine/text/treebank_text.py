"""Raw text of a treebank, with the character offsets of its gold tokens.

A CoNLL-U sentence gives its text (``# text = ...``), its surface tokens (multiword-token ranges
``1-2\\tcannot`` count as ONE token whose words are the lines they cover) and ``SpaceAfter=No``.
Documents and paragraphs are marked by ``# newdoc`` / ``# newpar``. Joined as the UD tool
``conllu_to_text.pl`` joins them (sentences of a paragraph by a space, or by nothing after a last
token with ``SpaceAfter=No``; paragraphs and documents by an empty line), the sentences give the
text a user would send, and every gold token gets its ``[start, end)`` offsets in it; this is what
the tokenizer learns from and what the raw-text evaluation feeds it.
"""

from __future__ import annotations

import logging
import random
import re
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass

from engine.data.conllu_io import Sentence

log = logging.getLogger(__name__)

_TEXT = re.compile(r"#\s*text\s*=\s?(.*)")
_NEWDOC = re.compile(r"#\s*newdoc(\s|$)")
_NEWPAR = re.compile(r"#\s*newpar(\s|$)")


@dataclass(frozen=True)
class GoldToken:
    """A surface token: ``words`` has more than one entry for a multiword token."""

    form: str
    words: tuple[str, ...]
    space_after: bool


@dataclass
class AlignedText:
    """Text built from treebank sentences; ``tokens[k]`` are ``(start, end)`` offsets of sentence ``k``'s
    tokens in ``text`` (end exclusive), ``gold[k]`` the tokens themselves."""

    text: str
    tokens: list[list[tuple[int, int]]]
    gold: list[list[GoldToken]]


def surface_tokens(sent: Sentence) -> list[GoldToken]:
    """The surface tokens of a sentence from its lines (a range line replaces the words it covers)."""
    out: list[GoldToken] = []
    words = {li: k for k, li in enumerate(sent.word_line_index)}
    skip_to = 0
    for li, line in enumerate(sent.lines):
        if line.startswith("#"):
            continue
        cols = line.split("\t")
        if "-" in cols[0] and len(cols) == 10:
            first, last = (int(x) for x in cols[0].split("-"))
            out.append(GoldToken(cols[1], tuple(sent.forms[first - 1:last]), "SpaceAfter=No" not in cols[9].split("|")))
            skip_to = last
        elif li in words and words[li] + 1 > skip_to:
            k = words[li]
            out.append(GoldToken(sent.forms[k], (sent.forms[k],), "SpaceAfter=No" not in sent.misc[k].split("|")))
    return out


def sentence_text(sent: Sentence, tokens: Sequence[GoldToken] | None = None) -> str:
    """``# text`` of the sentence, or the text rebuilt from its tokens and SpaceAfter when there is none."""
    for line in sent.lines:
        if m := _TEXT.fullmatch(line):
            return m[1]
    return _rebuilt(surface_tokens(sent) if tokens is None else tokens)


def _rebuilt(toks: Sequence[GoldToken]) -> str:
    return "".join(t.form + (" " if t.space_after and k + 1 < len(toks) else "") for k, t in enumerate(toks))


def align_tokens(text: str, tokens: Sequence[GoldToken]) -> list[tuple[int, int]] | None:
    """``(start, end)`` of each token in ``text``, matching non-whitespace characters in order (a token's
    own spaces may be any whitespace run in the text); None if the characters do not match."""
    spans: list[tuple[int, int]] = []
    pos, n = 0, len(text)
    for tok in tokens:
        chars = [c for c in tok.form if not c.isspace()]
        if not chars:
            return None
        start = -1
        for c in chars:
            while pos < n and text[pos].isspace():
                pos += 1
            if pos >= n or text[pos] != c:
                return None
            if start < 0:
                start = pos
            pos += 1
        spans.append((start, pos))
    if text[pos:].strip():
        return None
    return spans


def _marks(sent: Sentence) -> tuple[bool, bool]:
    comments = [line for line in sent.lines if line.startswith("#")]
    return any(_NEWDOC.match(c) for c in comments), any(_NEWPAR.match(c) for c in comments)


def build_text(
    sentences: Sequence[Sentence], *, paragraph_seps: Sequence[str] = ("\n\n",), document_sep: str = "\n\n",
    seed: int = 0,
) -> AlignedText:
    """The treebank's running text (see the module docstring) and the offsets of its gold tokens.

    Paragraph breaks are drawn from ``paragraph_seps`` (seeded; training uses ``("\\n", "\\n\\n")`` so the
    model sees both conventions), document breaks are ``document_sep``. A sentence whose tokens do
    not spell its ``# text`` falls back to the text rebuilt from its tokens (logged)."""
    rng = random.Random(seed)
    parts: list[str] = []
    length = 0
    all_spans: list[list[tuple[int, int]]] = []
    all_gold: list[list[GoldToken]] = []
    mismatched = 0
    prev_space = True
    for k, sent in enumerate(sentences):
        toks = surface_tokens(sent)
        text = sentence_text(sent, toks)
        spans = align_tokens(text, toks)
        if spans is None:
            mismatched += 1
            text = _rebuilt(toks)
            spans = align_tokens(text, toks)
            assert spans is not None
        lead = len(text) - len(text.lstrip())
        body = text.strip()
        spans = [(s - lead, e - lead) for s, e in spans]
        if k:
            newdoc, newpar = _marks(sent)
            sep = document_sep if newdoc else rng.choice(paragraph_seps) if newpar else (" " if prev_space else "")
            parts.append(sep)
            length += len(sep)
        all_spans.append([(s + length, e + length) for s, e in spans])
        all_gold.append(toks)
        parts.append(body)
        length += len(body)
        prev_space = not toks or toks[-1].space_after
    if mismatched:
        log.warning("%d sentence(s) whose tokens do not spell their '# text': used the text rebuilt from tokens",
                    mismatched)
    return AlignedText("".join(parts), all_spans, all_gold)


def raw_text(sentences: Sequence[Sentence], *, paragraph_sep: str = "\n\n", document_sep: str = "\n\n",
             width: int | None = None) -> str:
    """The text to give a tokenizer for raw-text evaluation (by default paragraphs and documents separated
    by an empty line, each paragraph on one line); its non-whitespace characters are exactly those of the
    gold tokens. ``width``: every line wrapped at that many characters, at spaces only, as text files and
    ``conllu_to_text.pl`` (80 characters) have it (``textwrap``, without breaking words or hyphens)."""
    text = build_text(sentences, paragraph_seps=(paragraph_sep,), document_sep=document_sep).text
    if width is None:
        return text
    if width < 1:
        raise ValueError(f"width must be positive, got {width}")
    return "\n".join(textwrap.fill(line, width, break_long_words=False, break_on_hyphens=False)
                     for line in text.split("\n"))
