"""Tokenizer and sentence splitter learned from a treebank's ``# text`` lines, token forms and SpaceAfter.

At inference both classifiers read the input's view (``engine.text.layout``: a single line break is a
space, a blank line a paragraph break, which always ends a sentence; invisible format characters left
out; NFC), and each token keeps the input offsets of its characters. Token starts then obey the view's
constraints (URLs, e-mail addresses and emoji one token each; never inside a grapheme cluster).

Two linear classifiers (``engine.text.linear``), no language-specific rules:

1. Characters. The treebank's running text (``engine.text.treebank_text``) gives every character a
   label: START (a token begins here), INSIDE (continues a token; a space inside a token too) or
   OUTSIDE (whitespace between tokens). Features are hashed character n-grams and class n-grams in a
   +-3 window and the whitespace-delimited chunk around the character (``char_features``).
   Decoding keeps every non-whitespace character in some token: a non-whitespace character after
   one starts a token when START outscores INSIDE; a whitespace run joins its neighbours into one
   token only if each of its characters prefers INSIDE to OUTSIDE and the next character prefers
   INSIDE to START.
2. Tokens. Whether a sentence ends after a token, from the token, its neighbours, their shapes and the
   whitespace around it (``token_features``); trained on the gold tokens of the running text, where
   sentences of a paragraph follow each other as the treebank's text would.

Multiword tokens (``1-2\\tcannot``) are single tokens for both classifiers; their words come from
``MultiwordExpander`` (a dictionary and suffix rules learned from the treebank's multiword tokens).
Everything is vectorised over characters/tokens; long texts are cut at whitespace into segments of
about ``SEGMENT`` characters (preferring empty lines), so time and memory are linear in the length.
"""

from __future__ import annotations

import logging
import re
import time
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from engine.data.conllu_io import Sentence
from engine.text.char_features import (
    LINE_BREAKS,
    N_CHAR_TEMPLATES,
    N_TOKEN_TEMPLATES,
    ONE_LINE_BREAK,
    TextArrays,
    char_features,
    chunks,
    gap_categories,
    token_features,
)
from engine.text.layout import BLANK_LINE_MARKS, DEFAULT_BLANK_LINE, TextView, constrain_starts
from engine.text.linear import HashedLogLinear
from engine.text.mwt import MultiwordExpander
from engine.text.treebank_text import build_text

log = logging.getLogger(__name__)

STATE_VERSION = 1
START, INSIDE, OUTSIDE = 0, 1, 2
SEGMENT = 1 << 18
_BLOCK = 1 << 16
_NOT_IN_LINE = re.compile(r"[\t\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029]")


@dataclass
class Token:
    """A surface token: ``form`` is the view's text of it (``engine.text.layout``: the input's characters
    without ignored format characters, inner whitespace as spaces, NFC), ``[start, end)`` its exact
    characters in the input; ``words`` has several entries for a multiword token."""

    form: str
    words: list[str]
    space_after: bool
    start: int
    end: int


@dataclass
class TokenizedSentence:
    """A sentence: its text (the forms joined as SpaceAfter says), its tokens (offsets into the whole input
    text) and whether it begins a paragraph (a blank line before it, or the start of the input)."""

    text: str
    tokens: list[Token] = field(default_factory=list)
    new_paragraph: bool = False

    def conllu(self, sent_id: str, marks: Sequence[str] = ()) -> str:
        """A CoNLL-U block (ending with its blank line): ``# newdoc`` / ``# newpar`` for ``marks``,
        ``# sent_id``, ``# text``, a range line per multiword token, one line per word with FORM (other
        columns ``_``), and in the token's MISC ``SpaceAfter=No`` and ``TokenRange=start:end`` (input
        character offsets, end exclusive, as UDPipe writes them)."""
        lines = [f"# {mark}" for mark in marks]
        lines += [f"# sent_id = {_NOT_IN_LINE.sub(' ', sent_id)}", f"# text = {_NOT_IN_LINE.sub(' ', self.text)}"]
        k = 1
        for tok in self.tokens:
            misc = ("" if tok.space_after else "SpaceAfter=No|") + f"TokenRange={tok.start}:{tok.end}"
            form = _NOT_IN_LINE.sub(" ", tok.form)
            if len(tok.words) > 1:
                lines.append(f"{k}-{k + len(tok.words) - 1}\t{form}\t_\t_\t_\t_\t_\t_\t_\t{misc}")
                for w in tok.words:
                    lines.append(f"{k}\t{_NOT_IN_LINE.sub(' ', w)}\t_\t_\t_\t_\t_\t_\t_\t_")
                    k += 1
            else:
                lines.append(f"{k}\t{form}\t_\t_\t_\t_\t_\t_\t_\t{misc}")
                k += 1
        return "\n".join(lines) + "\n\n"


def _spelled(tokens: Sequence[Token]) -> str:
    """The text of a sentence's tokens: forms joined by a space where SpaceAfter says so."""
    return "".join(t.form + (" " if t.space_after and k + 1 < len(tokens) else "") for k, t in enumerate(tokens))


def char_labels(n: int, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """START / INSIDE / OUTSIDE label of each of ``n`` characters given token spans."""
    depth = np.zeros(n + 1, dtype=np.int64)
    np.add.at(depth, starts, 1)
    np.add.at(depth, ends, -1)
    labels = np.where(np.cumsum(depth)[:n] > 0, INSIDE, OUTSIDE)
    labels[starts] = START
    return labels


def _segments(text: str, size: int) -> list[tuple[int, int]]:
    """Cut ``text`` into pieces of about ``size`` characters at whitespace (empty line, else line break,
    else any whitespace, else anywhere), as ``(start, end)``."""
    out, a, n = [], 0, len(text)
    while n - a > size:
        lo, hi = a + size // 2, min(a + size, n)
        cut = -1
        for pattern in ("\n\n", "\n", " "):
            cut = text.rfind(pattern, lo, hi)
            if cut >= 0:
                break
        if cut < 0:
            cut = next((i for i in range(hi, lo, -1) if text[i - 1].isspace()), hi)
        cut = max(cut, a + 1)
        out.append((a, cut))
        a = cut
    out.append((a, n))
    return out


class Tokenizer:
    """Sentence splitter, tokenizer and multiword-token expander (see the module docstring)."""

    def __init__(self, chars: HashedLogLinear, sentences: HashedLogLinear, known: np.ndarray,
                 mwt: MultiwordExpander, *, threshold: float = 0.5, info: dict[str, Any] | None = None) -> None:
        self.chars = chars
        self.sentences = sentences
        self.known = known
        self.mwt = mwt
        self.threshold = float(threshold)
        self.info = dict(info or {})

    # ------------------------------------------------------------------ training
    @classmethod
    def train(
        cls, sentences: Sequence[Sentence], *, seed: int = 0, progress: bool = False, char_epochs: int = 3,
        sentence_epochs: int = 5, learning_rate: float = 0.2, min_count: int = 2,
    ) -> Tokenizer:
        """Learn from treebank sentences (their ``# text``, tokens, SpaceAfter, ``# newdoc``/``# newpar``).
        The raw-text scores on a dev set are the trainer's (``engine.training.pipeline``)."""
        if not sentences:
            raise ValueError("no training sentences")
        t0 = time.perf_counter()
        aligned = build_text(sentences, paragraph_seps=("\n", "\n\n"), seed=seed)
        spans = np.array([sp for sent in aligned.tokens for sp in sent], dtype=np.int64).reshape(-1, 2)
        starts, ends = spans[:, 0], spans[:, 1]
        arr = TextArrays.of(aligned.text)
        token_keys, token_counts = np.unique(arr.token_hashes(starts, ends), return_counts=True)
        known = token_keys[token_counts >= 2]
        labels = char_labels(arr.n, starts, ends)
        bounds = chunks(arr)
        feats = np.concatenate([char_features(arr, known, slice(a, a + _BLOCK), bounds)
                                for a in range(0, arr.n, _BLOCK)])
        t_feats = time.perf_counter() - t0
        char_model = HashedLogLinear.train(feats, labels, 3, epochs=char_epochs, learning_rate=learning_rate,
                                           min_count=min_count, seed=seed, progress=progress, desc="characters")
        del feats
        t_chars = time.perf_counter() - t0
        last = np.zeros(len(starts), dtype=np.int64)
        last[np.cumsum([len(s) for s in aligned.tokens]) - 1] = 1
        sent_model = HashedLogLinear.train(token_features(arr, starts, ends), last, 2, epochs=sentence_epochs,
                                           learning_rate=learning_rate, min_count=min_count, seed=seed,
                                           progress=progress, desc="sentence ends")
        mwt = MultiwordExpander.train(t for sent in aligned.gold for t in sent)
        info = {
            "train_sentences": len(sentences), "train_characters": arr.n, "train_tokens": len(starts),
            "char_epochs": char_epochs, "sentence_epochs": sentence_epochs, "learning_rate": learning_rate,
            "min_count": min_count, "seed": seed,
            "seconds": {"features": round(t_feats, 2), "characters": round(t_chars - t_feats, 2),
                        "total": round(time.perf_counter() - t0, 2)},
        }
        return cls(char_model, sent_model, known, mwt, info=info)

    # ------------------------------------------------------------------ inference
    def _char_probabilities(self, arr: TextArrays) -> np.ndarray:
        bounds = chunks(arr)
        return np.concatenate([self.chars.probabilities(char_features(arr, self.known, slice(a, a + _BLOCK), bounds))
                               for a in range(0, arr.n, _BLOCK)])

    def _spans(self, arr: TextArrays, text: str) -> tuple[np.ndarray, np.ndarray]:
        """Token ``starts``, ``ends`` of a view ``text`` that has some non-whitespace character."""
        n = arr.n
        p = self._char_probabilities(arr)
        sp = arr.space
        idx = np.arange(n)
        prev_sp = np.concatenate([[False], sp[:-1]])
        next_sp = np.concatenate([sp[1:], [False]])
        rs = np.flatnonzero(sp & ~prev_sp)
        re_ = np.flatnonzero(sp & ~next_sp) + 1
        bad = np.concatenate([[0], np.cumsum(sp & (p[:, INSIDE] <= p[:, OUTSIDE]))])
        inner = (rs > 0) & (re_ < n)
        nxt = np.minimum(re_, n - 1)
        joined = inner & (bad[re_] == bad[rs]) & (p[nxt, INSIDE] > p[nxt, START])
        after_gap = np.zeros(n, dtype=bool)
        after_gap[re_[~joined & (re_ < n)]] = True
        is_start = ~sp & ((idx == 0) | after_gap | (~prev_sp & (p[:, START] >= p[:, INSIDE])))
        starts = np.flatnonzero(constrain_starts(is_start, text))
        last_ns = np.maximum.accumulate(np.where(~sp, idx, -1))
        ends = last_ns[np.append(starts[1:] - 1, n - 1)] + 1
        return starts, ends

    def _sentence_ends(self, arr: TextArrays, starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Whether a sentence ends after each token, and whether a paragraph break (a line break in the
        view) follows it, which always ends the sentence."""
        p = self.sentences.probabilities(token_features(arr, starts, ends))[:, 1]
        gap = gap_categories(arr, starts, ends)
        paragraph = (gap == ONE_LINE_BREAK) | (gap == LINE_BREAKS)
        out = (p >= self.threshold) | paragraph
        out[-1] = True
        return out, paragraph

    def tokenize(self, text: str) -> list[TokenizedSentence]:
        """Sentences and tokens of ``text`` (any Unicode; ``[]`` if it has no token), read through its view
        (``engine.text.layout``): tokens carry their exact input offsets; a blank line ends a paragraph."""
        view = TextView.of(text)
        out: list[TokenizedSentence] = []
        prev_end = 0  # view index after the last token so far
        for a, b in _segments(view.text, SEGMENT):
            piece = view.text[a:b]
            if not piece.strip():
                continue
            arr = TextArrays.of(piece)
            starts, ends = self._spans(arr, piece)
            last, paragraph = self._sentence_ends(arr, starts, ends)
            new_paragraph = not out or "\n" in view.text[prev_end:a + int(starts[0])]
            prev_end = a + int(ends[-1])
            sent: list[Token] = []
            first, after = view.first[starts + a].tolist(), view.last[ends + a - 1].tolist()
            for s, e, is_last, par, i, j in zip(starts.tolist(), ends.tolist(), last.tolist(), paragraph.tolist(),
                                                first, after, strict=True):
                space_after = e + a >= len(view.text) or view.text[e + a].isspace()
                form = piece[s:e]
                sent.append(Token(form, self.mwt.expand(form), space_after, i, j))
                if is_last:
                    out.append(TokenizedSentence(_spelled(sent), sent, new_paragraph))
                    sent, new_paragraph = [], par
        return out

    @staticmethod
    def to_conllu(sentences: Sequence[TokenizedSentence], prefix: str = "s",
                  blank_line: str = DEFAULT_BLANK_LINE) -> str:
        """All sentences as one CoNLL-U text with ids ``{prefix}1``, ``{prefix}2``, ...; the input starts a
        document and a paragraph (``# newdoc``, ``# newpar``), and each paragraph after a blank line starts
        a paragraph, or a document too when ``blank_line`` is ``newdoc``."""
        if blank_line not in BLANK_LINE_MARKS:
            raise ValueError(f"blank_line must be one of {', '.join(BLANK_LINE_MARKS)}, got {blank_line!r}")
        blocks = []
        for k, s in enumerate(sentences, 1):
            marks = ("newdoc", "newpar") if k == 1 or (s.new_paragraph and blank_line == "newdoc") else \
                ("newpar",) if s.new_paragraph else ()
            blocks.append(s.conllu(f"{prefix}{k}", marks))
        return "".join(blocks)

    # ------------------------------------------------------------------ persistence
    def to_state(self) -> tuple[dict, dict[str, np.ndarray]]:
        meta = {
            "version": STATE_VERSION, "char_templates": N_CHAR_TEMPLATES, "token_templates": N_TOKEN_TEMPLATES,
            "unicode": unicodedata.unidata_version, "threshold": self.threshold, "mwt": self.mwt.to_meta(),
            "info": self.info,
        }
        arrays = {**self.chars.to_arrays("chars"), **self.sentences.to_arrays("sentences"), "known": self.known}
        return meta, arrays

    @classmethod
    def from_state(cls, meta: dict, arrays: dict[str, np.ndarray]) -> Tokenizer:
        if not isinstance(meta, dict) or meta.get("version") != STATE_VERSION:
            raise ValueError(f"tokenizer state version {meta.get('version') if isinstance(meta, dict) else None!r} "
                             f"is not {STATE_VERSION}")
        if meta.get("char_templates") != N_CHAR_TEMPLATES or meta.get("token_templates") != N_TOKEN_TEMPLATES:
            raise ValueError("tokenizer state was written with different feature templates")
        threshold = meta.get("threshold")
        if not isinstance(threshold, (int, float)) or not 0.0 < threshold < 1.0:
            raise ValueError(f"bad tokenizer threshold {threshold!r}")
        known = arrays.get("known")
        if known is None or known.dtype != np.uint64 or known.ndim != 1:
            raise ValueError("tokenizer state needs a uint64 'known' array")
        if unicodedata.unidata_version != meta.get("unicode"):
            log.warning("tokenizer trained with Unicode %s, running with %s", meta.get("unicode"),
                        unicodedata.unidata_version)
        return cls(HashedLogLinear.from_arrays(arrays, "chars", 3), HashedLogLinear.from_arrays(arrays, "sentences", 2),
                   known, MultiwordExpander.from_meta(meta.get("mwt", {})), threshold=float(threshold),
                   info=meta.get("info") or {})
