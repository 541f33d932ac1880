"""CoNLL-U reading and writing that never loses a line.

Each sentence keeps its original lines (comments, multiword tokens ``3-4``, empty nodes ``8.1``
and words), so writing it back is byte-for-byte unless predictions are given; then only HEAD,
DEPREL and MISC of ordinary word lines (integer IDs) are replaced. A token line's columns are
``line.split("\\t")``, CoNLL-U's rule. The ``conllu`` library used to parse them first, but its columns
were kept only where they equalled the split (it also splits on two spaces and strips lines), so it never
changed a column and cost 0.6 s for each read of EWT dev, a quarter of a first-order ``evaluate`` (issue
20); nor did it validate what this module must (it knows no line numbers and accepts short lines). Problems
raise ``ConlluError`` as ``FILE:LINE: problem``.
"""

from __future__ import annotations

import dataclasses
import os
import re
import secrets
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, NoReturn, TextIO

import numpy as np

COLUMNS = ("ID", "FORM", "LEMMA", "UPOS", "XPOS", "FEATS", "HEAD", "DEPREL", "DEPS", "MISC")
LEMMA, UPOS, XPOS, FEATS, HEAD, DEPREL, MISC = 2, 3, 4, 5, 6, 7, 9
_INT = re.compile(r"0|[1-9][0-9]*")
_RANGE = re.compile(r"([1-9][0-9]*)-([1-9][0-9]*)")
_DECIMAL = re.compile(r"(0|[1-9][0-9]*)\.([1-9][0-9]*)")
_BAD_VALUE = re.compile(r"[\t\n\r|]")
_BAD_LINE = re.compile(r"[\t\n\r]")


class ConlluError(ValueError):
    """Malformed CoNLL-U; ``str(e)`` is ``"FILE:LINE: problem"``."""

    def __init__(self, path: str | os.PathLike[str], line: int, problem: str) -> None:
        self.path, self.line, self.problem = os.fspath(path), line, problem
        super().__init__(f"{self.path}:{line}: {problem}")

    def __reduce__(self) -> tuple[type[ConlluError], tuple[str, int, str]]:
        return type(self), (self.path, self.line, self.problem)


@dataclass(eq=False)
class Sentence:
    """One CoNLL-U block. Word columns are raw strings for the words with integer IDs, in order."""

    forms: list[str]
    lemmas: list[str]
    upos: list[str]
    xpos: list[str]
    feats: list[str]
    heads: np.ndarray | None  # int64 (n+1,), heads[0] = -1; None if a HEAD is '_' (or bad, non-strict)
    deprels: list[str]
    misc: list[str]
    lines: list[str]  # the block's original lines without line endings
    word_line_index: list[int]  # index into ``lines`` of each word's line
    start_line: int = 1  # 1-based line number of the block's first line
    newline: str = "\n"  # the block's line ending as read ("\r\n" for CRLF files)
    bom: bool = False  # the file started with a UTF-8 BOM just before this block

    @property
    def n(self) -> int:
        """Number of words (integer IDs)."""
        return len(self.forms)

    def copy(self) -> Sentence:
        """An independent copy (every list and the heads copied; the strings are immutable): what
        ``copy.deepcopy`` gives, ten times faster."""
        lists: dict[str, Any] = {f.name: list(getattr(self, f.name)) for f in dataclasses.fields(self)
                                 if isinstance(getattr(self, f.name), list)}
        return dataclasses.replace(self, **lists, heads=None if self.heads is None else self.heads.copy())


def _sentence(lines: list[str], start: int, newline: str, bom: bool, label: str, strict: bool) -> Sentence:
    """Validate one block and build its ``Sentence`` (errors name ``label`` and the exact line)."""

    def fail(i: int, problem: str) -> NoReturn:
        raise ConlluError(label, start + i, problem)

    token_at = [i for i, line in enumerate(lines) if not line.startswith("#")]
    forms: list[str] = []
    lemmas: list[str] = []
    upos: list[str] = []
    xpos: list[str] = []
    feats: list[str] = []
    head_strs: list[str] = []
    deprels: list[str] = []
    misc: list[str] = []
    word_at: list[int] = []
    ranges: list[tuple[int, str, int]] = []  # (line index, ID, last word)
    for i, cols in zip(token_at, (lines[i].split("\t") for i in token_at), strict=True):
        if len(cols) != 10:
            fail(i, f"expected 10 tab-separated columns, found {len(cols)}")
        if "" in cols:
            empty = [COLUMNS[k] for k, c in enumerate(cols) if not c and (strict or k not in (HEAD, DEPREL))]
            if empty:
                fail(i, f"empty {empty[0]} column")
        tid = cols[0]
        if tid == str(len(forms) + 1):
            forms.append(cols[1])
            lemmas.append(cols[2])
            upos.append(cols[3])
            xpos.append(cols[4])
            feats.append(cols[5])
            head_strs.append(cols[HEAD])
            deprels.append(cols[DEPREL])
            misc.append(cols[MISC])
            word_at.append(i)
            if strict and cols[HEAD] != "_" and not _INT.fullmatch(cols[HEAD]):
                fail(i, f"HEAD {cols[HEAD]!r} is not an integer or '_'")
        elif m := _RANGE.fullmatch(tid):
            first, last = int(m[1]), int(m[2])
            if first != len(forms) + 1 or last <= first or (ranges and first <= ranges[-1][2]):
                fail(i, f"multiword token {tid} out of place (expected a range starting at {len(forms) + 1})")
            ranges.append((i, tid, last))
        elif m := _DECIMAL.fullmatch(tid):
            if int(m[1]) != len(forms):
                fail(i, f"empty node {tid} out of place (it follows word {len(forms)})")
        elif _INT.fullmatch(tid):
            fail(i, f"ID sequence broken: expected {len(forms) + 1}, found {tid}")
        else:
            fail(i, f"invalid ID {tid!r}")
    n = len(forms)
    for i, tid, last in ranges:
        if last > n:
            fail(i, f"multiword token {tid} extends past the last word ({n})")
    heads: np.ndarray | None = None
    if "_" not in head_strs and (strict or all(_INT.fullmatch(h) for h in head_strs)):
        values = [int(h) for h in head_strs]
        bad = [k for k, h in enumerate(values) if h > n]
        if not bad:
            heads = np.array([-1, *values], dtype=np.int64)
        elif strict:
            fail(word_at[bad[0]], f"HEAD {values[bad[0]]} out of range (the sentence has {n} words)")
    elif strict:
        for k, h in enumerate(head_strs):
            if h != "_" and int(h) > n:
                fail(word_at[k], f"HEAD {h} out of range (the sentence has {n} words)")
    return Sentence(
        forms, lemmas, upos, xpos, feats, heads, deprels, misc, lines, word_at, start, newline, bom
    )


def check_parsable(sentences: Iterable[Sentence], source: str | os.PathLike[str]) -> None:
    """Raise ``ConlluError`` for a sentence without words (nothing to parse or train on)."""
    for s in sentences:
        if s.n == 0:
            raise ConlluError(source, s.start_line, "sentence has no words")


def _decode(lines: Iterable[bytes], label: str) -> Iterator[str]:
    for lineno, raw in enumerate(lines, 1):
        try:
            yield raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise ConlluError(label, lineno, f"not valid UTF-8 ({e.reason} at byte {e.start})") from None


def _blocks(lines: Iterable[str], label: str, strict: bool) -> Iterator[Sentence]:
    block: list[str] = []
    start, lineno, newline, eol, bom = 0, 0, "\n", "\n", False
    try:
        for lineno, raw in enumerate(lines, 1):
            if raw.endswith("\n"):
                eol = "\r\n" if raw.endswith("\r\n") else "\n"
                text = raw[: -len(eol)]
            else:  # last line without a line ending
                text = raw
            if lineno == 1 and text.startswith("\ufeff"):
                text, bom = text[1:], True
            if not text or text.isspace():
                if block:
                    yield _sentence(block, start, newline, bom, label, strict)
                    block, bom = [], False
                continue
            if not block:
                start, newline = lineno, eol
            block.append(text)
    except UnicodeDecodeError as e:  # from a text stream
        raise ConlluError(label, lineno + 1, f"not valid UTF-8 ({e.reason})") from None
    if block:
        yield _sentence(block, start, newline, bom, label, strict)


def iter_conllu(
    source: str | os.PathLike[str] | TextIO, *, name: str | None = None, strict_heads: bool = True
) -> Iterator[Sentence]:
    """Stream sentences from a path (read as UTF-8) or an open text stream.

    ``name`` labels error messages (default: the path or the stream's ``name``). With
    ``strict_heads=False`` HEAD and DEPREL are not validated at all (``heads`` is None unless
    every HEAD is a valid integer); otherwise a HEAD that is neither an integer nor '_' is an error.
    """
    if isinstance(source, (str, os.PathLike)):
        label = name or os.fspath(source)
        with open(source, "rb") as fh:
            yield from _blocks(_decode(fh, label), label, strict_heads)
    else:
        yield from _blocks(source, name or str(getattr(source, "name", "<stream>")), strict_heads)


def read_conllu(
    source: str | os.PathLike[str] | TextIO, *, name: str | None = None, strict_heads: bool = True
) -> list[Sentence]:
    """All sentences of ``source``; see ``iter_conllu``."""
    return list(iter_conllu(source, name=name, strict_heads=strict_heads))


def set_misc(misc_field: str, key: str, value: str | None) -> str:
    """``misc_field`` with ``key=value`` replacing ``key``'s entry in place (or appended); other
    entries keep their order. ``value=None`` removes the key; an empty result is '_'."""
    if not key or "=" in key or _BAD_VALUE.search(key):
        raise ValueError(f"invalid MISC key {key!r}")
    if value is not None and _BAD_VALUE.search(value):
        raise ValueError(f"invalid MISC value {value!r} for {key}")
    entries = [] if misc_field in ("_", "") else misc_field.split("|")
    out: list[str] = []
    done = value is None
    for entry in entries:
        if entry == key or entry.startswith(key + "="):
            if not done:
                out.append(f"{key}={value}")
                done = True
        else:
            out.append(entry)
    if not done:
        out.append(f"{key}={value}")
    return "|".join(out) if out else "_"


def format_sentence(
    sent: Sentence,
    heads: np.ndarray | Sequence[int] | None = None,
    deprels: Sequence[str] | None = None,
    misc: Mapping[str, Sequence[str | None]] | None = None,
    upos: Sequence[str] | None = None,
    xpos: Sequence[str] | None = None,
    lemmas: Sequence[str | None] | None = None,
    feats: Sequence[str | None] | None = None,
) -> str:
    """The block's text including the blank line after it (and the BOM if it began the file).

    Without predictions this is the original block byte-for-byte. ``heads`` (n+1,) with ``heads[0]``
    ignored sets HEAD of every word, ``deprels`` (n,) DEPREL, ``upos``/``xpos`` (n,) the tag columns
    (predicted tags), ``lemmas``/``feats`` (n,) LEMMA and FEATS (None = leave that word's alone), and
    ``misc={"Key": values}`` (n values, None = leave that word alone) sets
    ``Key=value`` in MISC. Other lines and columns are untouched.
    """
    nl, n = sent.newline, sent.n
    prefix = "\ufeff" if sent.bom else ""
    if heads is None and deprels is None and not misc and upos is None and xpos is None and lemmas is None \
            and feats is None:
        return prefix + nl.join(sent.lines) + nl + nl
    head_strs: list[str] | None = None
    if heads is not None:
        h = np.asarray(heads)
        if h.shape != (n + 1,) or not np.issubdtype(h.dtype, np.integer):
            raise ValueError(f"heads must be integers of shape ({n + 1},), got {h.dtype} {h.shape}")
        if n and (h[1:].min() < 0 or h[1:].max() > n):
            raise ValueError(f"heads must be in 0..{n}")
        head_strs = [str(x) for x in h[1:].tolist()]
    if deprels is not None:
        if len(deprels) != n:
            raise ValueError(f"expected {n} deprels, got {len(deprels)}")
        if any(not r or "\t" in r or "\n" in r or "\r" in r for r in deprels):
            raise ValueError("deprels must be non-empty and contain no tab or line break")
    for name, tags in (("upos", upos), ("xpos", xpos)):
        if tags is not None and (len(tags) != n or any(not t or _BAD_VALUE.search(t) for t in tags)):
            raise ValueError(f"{name} must be {n} non-empty tags without tab, line break or '|'")
    for name, values in (("lemmas", lemmas), ("feats", feats)):
        if values is not None and (len(values) != n or any(v is not None and (not v or _BAD_LINE.search(v))
                                                           for v in values)):
            raise ValueError(f"{name} must be {n} non-empty values (or None) without tab or line break")
    for key, values in (misc or {}).items():
        if len(values) != n:
            raise ValueError(f"expected {n} MISC values for {key}, got {len(values)}")
    lines = list(sent.lines)
    for k, li in enumerate(sent.word_line_index):
        cols = lines[li].split("\t")
        if head_strs is not None:
            cols[HEAD] = head_strs[k]
        if deprels is not None:
            cols[DEPREL] = deprels[k]
        if upos is not None:
            cols[UPOS] = upos[k]
        if xpos is not None:
            cols[XPOS] = xpos[k]
        for column, values in ((LEMMA, lemmas), (FEATS, feats)):
            if values is not None and values[k] is not None:
                cols[column] = values[k]  # type: ignore[assignment]  # None checked just above
        for key, values in (misc or {}).items():
            if values[k] is not None:
                cols[MISC] = set_misc(cols[MISC], key, values[k])
        lines[li] = "\t".join(cols)
    return prefix + nl.join(lines) + nl + nl


def write_conllu(sentences: Iterable[Sentence | str], dest: str | os.PathLike[str] | TextIO) -> None:
    """Write sentences (``Sentence`` as read, or ``format_sentence`` text) as UTF-8 without newline
    translation. A path is written atomically (``atomic_text``)."""
    if not isinstance(dest, (str, os.PathLike)):
        for item in sentences:
            dest.write(item if isinstance(item, str) else format_sentence(item))
        return
    with atomic_text(dest) as fh:
        for item in sentences:
            fh.write(item if isinstance(item, str) else format_sentence(item))


@contextmanager
def atomic_text(dest: str | os.PathLike[str]) -> Iterator[TextIO]:
    """A UTF-8 text stream (no newline translation) that becomes the file ``dest`` only when the block ends
    without an exception: a temporary file beside it, fsync, then ``os.replace``; on error it is removed and
    ``dest`` is left as it was."""
    path = os.fspath(dest)
    directory, base = os.path.split(path)
    tmp = os.path.join(directory, f".{base}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with open(fd, "w", encoding="utf-8", newline="") as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
