"""Word shape: a word's characters mapped to classes (``X`` upper case, ``x`` other letters, ``d`` digits,
anything else kept), a back-off feature for rare and unknown words.

Used by the tagger's features (``engine.text.tagger``) and by the parser's ``shape`` token attribute
(``engine.features.extract``); a module of its own, so that the parser's features do not import the tagger.
"""

from __future__ import annotations

from functools import lru_cache


@lru_cache(maxsize=1 << 16)  # a pure function of the form, called for the same words by several components
def word_shape(form: str) -> str:
    """Collapsed word shape: ``Xx`` for "Hello", ``d.d`` for "3.14", ``x-x`` for "well-known"."""
    out: list[str] = []
    for ch in form:
        c = "X" if ch.isupper() else "x" if ch.isalpha() else "d" if ch.isdigit() else ch
        if not out or out[-1] != c:
            out.append(c)
    return "".join(out)

