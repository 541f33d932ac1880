"""Text as users have it -> the text the tokenizer's classifiers read (its *view*), with offsets back.

Text comes out of files and editors line-wrapped, with Windows line endings, tabs, non-breaking spaces
and invisible format characters. The tokenizer's two classifiers (``engine.text.tokenizer``) read a
normalised *view* of it, and every view character keeps the index of the input character it came from,
so each token maps back to its exact input characters (``TokenRange`` in MISC, as UDPipe writes it):

- whitespace runs: one holding two or more line breaks (a blank line; ``\\r\\n`` counts as one break,
  U+2029 PARAGRAPH SEPARATOR as two) is a paragraph break, ``\\n\\n`` in the view; one holding a single
  line break is ordinary whitespace, one space (so text wrapped at any width reads as the unwrapped
  text); any other whitespace character (tab, no-break space, ideographic space, ...) is a space.
  Leading and trailing whitespace is dropped.
- the view is in NFC, as the treebanks' text is: a letter written decomposed (``e`` + U+0301) is read
  as one composed character, which maps back to both input characters.
- invisible format characters that carry no letters (``IGNORED``: soft hyphen, zero-width space, word
  joiner, byte-order mark, bidirectional marks) are left out of the view, so ``infor\\u00admation``
  is the token ``information`` whose range covers the soft hyphen. Joiners that are part of a word or
  an emoji (ZWJ U+200D, ZWNJ U+200C) stay.

Two constraints on token starts are read off the view (``constrain_starts``): a token never starts
inside a Unicode extended grapheme cluster (UAX #29: a base and its combining marks, an emoji ZWJ
sequence, a skin-tone modifier, a flag's pair of regional indicators); a URL or an e-mail address
(``PROTECTED``) is one token, as in the UD treebanks, and so is each emoji (UD tags them SYM; EWT's
training text has none for the classifier to learn from).
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

import numpy as np
import regex

BLANK_LINE_MARKS = ("newpar", "newdoc")  # what a blank line starts in the CoNLL-U written for text input
DEFAULT_BLANK_LINE = "newpar"

IGNORED = "\u00ad\u200b\u2060\ufeff\u200e\u200f\u061c\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"
_ODD_GAP = re.compile(rf"[\s{IGNORED}]{{2,}}|[^\S ]|[{IGNORED}]")  # any gap that is not a run of plain spaces
_LINE_BREAK = re.compile(r"\r\n|[\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028]")
_CLOSERS = ".,;:!?'\")]}>\u2019\u201d\u2026"
PROTECTED = re.compile(
    r"(?:\b[a-z][a-z0-9+.-]*://|\bwww\d{0,3}\.)[^\s<>\"'`\u2018-\u201f]+"  # URLs
    r"|[\w.+-]+@[\w-]+(?:\.[\w-]+)+",  # e-mail addresses
    re.IGNORECASE,
)
_COMPLEX_CHUNK = re.compile(r"\S*[^\x00-\u02ff]\S*")  # chunks where a grapheme cluster can span characters
_EMOJI = regex.compile(r"[\p{Extended_Pictographic}&&[^\x00-\u22ff]]|\p{Regional_Indicator}", regex.V1)


@dataclass
class TextView:
    """The view of an input text: ``text``, and for each view character ``i`` the input characters
    ``[first[i], last[i])`` it stands for (one character, or a grapheme cluster that NFC composed)."""

    text: str
    first: np.ndarray
    last: np.ndarray

    @classmethod
    def of(cls, text: str) -> TextView:
        """The view (see the module docstring), in NFC like the treebanks' text: a cluster written
        decomposed (``e`` + U+0301) is read composed and maps back to all its input characters."""
        pieces: list[str] = []
        sources: list[np.ndarray] = []
        pos = 0
        for m in _ODD_GAP.finditer(text):
            a, b = m.span()
            if a > pos:
                pieces.append(text[pos:a])
                sources.append(np.arange(pos, a))
            rep, src = _replacement(m.group(), a, at_edge=a == 0 or b == len(text))
            pieces.append(rep)
            sources.append(src)
            pos = b
        pieces.append(text[pos:])
        sources.append(np.arange(pos, len(text)))
        view = "".join(pieces)
        first = np.concatenate(sources).astype(np.int64)
        lead, keep = len(view) - len(view.lstrip()), len(view.rstrip())  # plain spaces at either end
        view, first = view[lead:keep], first[lead:keep]
        if unicodedata.is_normalized("NFC", view):
            return cls(view, first, first + 1)
        return cls(*_composed(view, first, first + 1))


def _composed(view: str, first: np.ndarray, last: np.ndarray) -> tuple[str, np.ndarray, np.ndarray]:
    """``view`` in NFC, cluster by cluster (``\\X``); every character of a cluster NFC changed stands for
    the whole cluster's input characters."""
    pieces: list[str] = []
    firsts: list[np.ndarray] = []
    lasts: list[np.ndarray] = []
    pos = 0
    for c in regex.finditer(r"\X", view):
        s, e = c.span()
        nfc = unicodedata.normalize("NFC", c.group())
        if nfc == c.group():
            continue
        pieces.append(view[pos:s])
        firsts += [first[pos:s], np.full(len(nfc), first[s])]
        lasts += [last[pos:s], np.full(len(nfc), last[e - 1])]
        pieces.append(nfc)
        pos = e
    pieces.append(view[pos:])
    firsts.append(first[pos:])
    lasts.append(last[pos:])
    return "".join(pieces), np.concatenate(firsts).astype(np.int64), np.concatenate(lasts).astype(np.int64)


def _replacement(gap: str, at: int, *, at_edge: bool) -> tuple[str, np.ndarray]:
    """What a gap (whitespace and ignored characters) at input index ``at`` becomes in the view, and the
    input index of each character of that."""
    if at_edge or not any(c.isspace() for c in gap):
        return "", np.zeros(0, dtype=np.int64)
    breaks = len(_LINE_BREAK.findall(gap)) + 2 * gap.count("\u2029")
    if breaks >= 2:
        return "\n\n", np.array([at, at], dtype=np.int64)
    if breaks == 1:
        return " ", np.array([at], dtype=np.int64)
    where = [at + k for k, c in enumerate(gap) if c.isspace()]
    return " " * len(where), np.array(where, dtype=np.int64)


def protected_spans(text: str) -> list[tuple[int, int]]:
    """``[start, end)`` of the URLs and e-mail addresses in ``text``, without trailing punctuation (a closing
    parenthesis stays when the URL opened one: ``https://en.wikipedia.org/wiki/Rome_(city)``)."""
    out = []
    for m in PROTECTED.finditer(text):
        s, e = m.span()
        while e > s + 1 and text[e - 1] in _CLOSERS:
            if text[e - 1] == ")" and text.count("(", s, e) >= text.count(")", s, e):
                break
            e -= 1
        out.append((s, e))
    return out


def clusters(text: str) -> tuple[np.ndarray, list[tuple[int, int]]]:
    """Grapheme clusters (UAX #29, the ``regex`` module's ``\\X``): ``inside[i]`` says character ``i``
    belongs to the cluster of character ``i - 1``; ``emoji`` are the ``[start, end)`` of the clusters that
    begin with a pictographic emoji (U+2300 up, so not (C), (R) or TM) or a regional indicator (flags).
    Only chunks holding a character from U+0300 up are examined: below it every character is a cluster
    of its own, except ``\\r\\n``, which a view never holds."""
    inside = np.zeros(len(text), dtype=bool)
    emoji = []
    for m in _COMPLEX_CHUNK.finditer(text):
        base = m.start()
        for c in regex.finditer(r"\X", m.group()):
            s, e = base + c.start(), base + c.end()
            inside[s + 1:e] = True
            if _EMOJI.match(c.group()):
                emoji.append((s, e))
    return inside, emoji


def constrain_starts(is_start: np.ndarray, text: str) -> np.ndarray:
    """Token starts of a view ``text`` (bool per character, True only on non-whitespace) after the
    constraints of the module docstring: each URL or e-mail address starts a token and nothing inside it
    does, nor does the character after it unless it is whitespace; an emoji is a token of its own (the
    ``emoji`` of ``clusters``); no start is inside a grapheme cluster (a cluster begins with its chunk,
    so a character after whitespace keeps its start and every character stays in a token)."""
    out = is_start.copy()
    n = len(text)
    inside, emoji = clusters(text)
    for s, e in emoji + protected_spans(text):  # an emoji inside a URL stays in it
        out[s + 1:e] = False
        out[s] = True
        if e < n and not text[e].isspace():
            out[e] = True
    out[inside] = False  # the character before is never whitespace (``\S`` chunks)
    return out
