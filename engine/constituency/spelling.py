"""Words in the Penn Treebank's spelling (issue 26: ``tokens`` and ``text`` given to a constituency model, by the
service and by ``parse --input-format text``): the treebank writes brackets as ``-LRB-``/``-RRB-``, opening and
closing double quotes as ````` `` and ``''``, dashes as ``--``, and a bracketed tree cannot hold a round bracket,
whitespace or a final backslash inside a word.
"""

from __future__ import annotations

import re

__all__ = ["PTB_WORDS", "ptb_words"]

PTB_WORDS = {"(": "-LRB-", ")": "-RRB-", "[": "-LSB-", "]": "-RSB-", "{": "-LCB-", "}": "-RCB-",
             "\u201c": "``", "\u201d": "''", "\u2018": "`", "\u2019": "'", "\u00ab": "``", "\u00bb": "''",
             "\u2026": "...", "\u2013": "--", "\u2014": "--"}
"""Whole words respelled as the Penn Treebank spells them (brackets, typographic quotes, ellipsis, dashes)."""
_IN_WORD = {"(": "-LRB-", ")": "-RRB-", "\u2019": "'"}
"""Characters respelled inside a word too (``don\u2019t``'s ``n\u2019t``; a round bracket would break the
bracketed tree)."""
_SPACE = re.compile(r"\s+")
_END_BACKSLASH = re.compile(r"\\+$")
r"""Backslashes ending a word: in the bracketed tree they would escape its closing bracket (``nltk`` reads ``\)``
as a bracket inside a word)."""


def ptb_words(words: list[str]) -> list[str]:
    """``words`` in the treebank's spelling: :data:`PTB_WORDS` for a whole word, :data:`_IN_WORD` inside one,
    ``"`` as an opening ````` `` or closing ``''`` quote in turn (the first of a sentence opens), whitespace inside
    a word as ``_``, backslashes that end a word as ``-BSL-``. Words already spelled as in the treebank are left
    as they are."""
    out, quote_open = [], False
    for word in words:
        if word == '"':
            out.append("''" if quote_open else "``")
            quote_open = not quote_open
            continue
        word = PTB_WORDS.get(word, word)
        for char, spelled in _IN_WORD.items():
            word = word.replace(char, spelled)
        out.append(_END_BACKSLASH.sub(lambda m: "-BSL-" * len(m.group()), _SPACE.sub("_", word)))
    return out
