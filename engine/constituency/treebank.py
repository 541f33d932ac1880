"""Reading and cleaning Penn Treebank ``.mrg`` files (issue 26; ``../shared/design/epic.md`` §0).

A file is a sequence of top-level bracketed trees; each is parsed by ``nltk.Tree.fromstring``, the well-kept
reader of this format. We split the file into its top-level brackets ourselves (a few lines of counting) so that
every problem is reported with the line it is on: ``TreebankError`` prints ``FILE:LINE: problem``, like the
CoNLL-U reader, at the line of the problem: unbalanced brackets, text outside brackets, an empty tree, a
constituent without a label or without children, a tag over several words or over a word and constituents, a
word directly under the root; a tree with no words once traces are gone is reported at its first line.

Cleaning follows what EVALB and the paper's pipeline (Epic's ``StandardTreeProcessor``) expect:

1. ``-NONE-`` leaves (traces, null elements) are dropped, then every constituent left without words;
2. function tags and indices are stripped (``NP-SBJ-1`` -> ``NP``, ``PP-LOC=2`` -> ``PP``), but labels that
   start with ``-`` are names (``-LRB-``, ``-RRB-``, ``-NONE-``); ``ADVP|PRT`` keeps the first alternative;
3. ``X -> X`` unaries are removed (a node whose only child has the same label is replaced by that child);
4. the outer bracket becomes ``TOP`` (the PTB's unlabelled ``( (S ...) )``; a tree without one is wrapped).

``split_by_file`` gives the issue's split of the sample: train wsj_0001-0159, dev 0160-0179, test 0180-0199.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from nltk import Tree  # type: ignore[import-untyped]

from engine.constituency.contract import TreebankError

TOP = "TOP"
NONE = "-NONE-"
SPLITS: dict[str, tuple[int, int]] = {"train": (1, 159), "dev": (160, 179), "test": (180, 199)}
_FILE_NUMBER = re.compile(r"wsj_(\d{4})\.mrg$")
_ROOT_LABELS = ("", "ROOT", TOP)


def _brackets(text: str, path: str) -> Iterator[tuple[int, int, int]]:
    """``(line, start, end)`` of each top-level bracket of ``text`` (``text[start:end]`` is the tree)."""

    def no_stray(start: int, end: int) -> None:
        stray = re.search(r"\S+", text[start:end])
        if stray:
            at = start + stray.start()
            raise TreebankError(path, text.count("\n", 0, at) + 1, f"text outside brackets: {stray.group()!r}")

    depth, start, start_line, line, last_end = 0, 0, 1, 1, 0
    for m in re.finditer(r"[()\n]", text):
        ch = m.group()
        if ch == "\n":
            line += 1
        elif ch == "(":
            if depth == 0:
                no_stray(last_end, m.start())
                start, start_line = m.start(), line
            depth += 1
        else:
            if depth == 0:
                raise TreebankError(path, line, "unbalanced ')': no bracket is open here")
            depth -= 1
            if depth == 0:
                last_end = m.end()
                yield start_line, start, m.end()
    if depth:
        raise TreebankError(path, start_line, f"unbalanced '(': this tree is never closed ({depth} open at the end)")
    no_stray(last_end, len(text))


def _check(chunk: str, path: str, first_line: int) -> None:
    """Raise at the exact line unless every word is the only child of a labelled tag under a labelled
    constituent (only the root may be unlabelled) and every constituent has children."""
    stack: list[list[Any]] = []  # [label, line, constituents, words] per open bracket
    line, expect_label = first_line, False
    for m in re.finditer(r"\n|[()]|[^\s()]+", chunk):
        tok = m.group()
        if tok == "\n":
            line += 1
        elif tok == "(":
            if stack and stack[-1][3]:
                raise TreebankError(path, line, f"{stack[-1][0]!r} mixes a word and constituents")
            if stack:
                stack[-1][2] += 1
            stack.append(["", line, 0, 0])
            expect_label = True
        elif tok == ")":
            label, at, constituents, words = stack.pop()
            if not constituents and not words:
                raise TreebankError(path, at, f"{label!r} has no children" if label or stack else "empty tree")
            if stack and not label:
                raise TreebankError(path, at, "a constituent without a label")
            if not stack and words:
                raise TreebankError(path, at, f"a word directly under the root {label!r}: a tree needs constituents")
            expect_label = False
        elif expect_label:
            stack[-1][0], expect_label = tok, False
        else:
            if stack[-1][2] or stack[-1][3]:
                problem = "mixes words and constituents" if stack[-1][2] else "has several words"
                raise TreebankError(path, line, f"{stack[-1][0]!r} {problem} at {tok!r} (a word must be the only"
                                                " child of its tag)")
            stack[-1][3] += 1


def parse_text(text: str, path: str = "<string>") -> list[tuple[int, Tree]]:
    """``(line, raw tree)`` of every top-level bracket of ``text``, checked but not cleaned."""
    out = []
    for line, start, end in _brackets(text, path):
        chunk = text[start:end]
        _check(chunk, path, line)
        try:
            tree = Tree.fromstring(chunk)
        except ValueError as e:
            where = re.search(r"index (\d+)", str(e))
            at = line + chunk[: int(where.group(1))].count("\n") if where else line
            raise TreebankError(path, at, f"unreadable tree: {' '.join(str(e).split())}") from None
        out.append((line, tree))
    return out


def clean_label(label: str) -> str:
    """``NP-SBJ-1`` -> ``NP``, ``PP=2`` -> ``PP``, ``ADVP|PRT`` -> ``ADVP``; ``-LRB-``, ``-NONE-`` unchanged."""
    if label.startswith("-"):
        return label
    return re.split(r"[-=|]", label, maxsplit=1)[0]


def _clean(node: Tree) -> Tree | None:
    """The cleaned copy of ``node``, or ``None`` when no word is left under it."""
    if not isinstance(node[0], Tree):  # a tag over its word
        return None if node.label() == NONE else Tree(clean_label(node.label()), [node[0]])
    children = [c for c in (_clean(child) for child in node) if c is not None]
    if not children:
        return None
    label = clean_label(node.label())
    while len(children) == 1 and isinstance(children[0][0], Tree) and children[0].label() == label:
        children = list(children[0])  # X -> X: keep one X
    return Tree(label, children)


def clean_tree(tree: Tree) -> Tree | None:
    """The cleaned tree rooted in ``TOP`` (module docstring), or ``None`` if it has no word besides traces."""
    if tree.label() in _ROOT_LABELS:
        children = [c for c in (_clean(child) for child in tree) if c is not None]
    else:
        child = _clean(tree)
        children = [] if child is None else [child]
    if not children:
        return None
    while len(children) == 1 and children[0].label() == TOP and isinstance(children[0][0], Tree):
        children = list(children[0])
    return Tree(TOP, children)


def mrg_files(paths: Iterable[str | os.PathLike[str]]) -> list[Path]:
    """The ``.mrg`` files named: files as given, folders by their ``*.mrg`` files in name order."""
    out: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            found = sorted(p.glob("*.mrg"))
            if not found:
                raise FileNotFoundError(f"{p}: no .mrg file in this folder")
            out += found
        elif p.is_file():
            out.append(p)
        else:
            raise FileNotFoundError(f"{p}: no such file or folder")
    return out


def read_file(path: str | os.PathLike[str]) -> list[Tree]:
    """The cleaned trees of one ``.mrg`` file; a tree of traces only is an error (it has no sentence)."""
    label = os.fspath(path)
    with open(path, encoding="utf-8") as f:
        text = f.read()
    out = []
    for line, raw in parse_text(text, label):
        tree = clean_tree(raw)
        if tree is None:
            raise TreebankError(label, line, "no words left once -NONE- elements are removed")
        out.append(tree)
    return out


def read_trees(paths: Iterable[str | os.PathLike[str]]) -> list[Tree]:
    """The cleaned trees of every ``.mrg`` file of ``paths`` (files or folders, several allowed), in order."""
    return [tree for path in mrg_files(paths) for tree in read_file(path)]


def file_number(path: str | os.PathLike[str]) -> int:
    """``wsj_0123.mrg`` -> 123."""
    m = _FILE_NUMBER.search(os.fspath(path))
    if not m:
        raise ValueError(f"{path}: not a wsj_NNNN.mrg file name")
    return int(m.group(1))


def split_by_file(folder: str | os.PathLike[str]) -> dict[str, list[Tree]]:
    """Cleaned trees of ``folder``'s ``wsj_NNNN.mrg`` files by ``SPLITS`` (train 1-159, dev 160-179, test
    180-199); files outside every range are left out."""
    out: dict[str, list[Tree]] = {name: [] for name in SPLITS}
    for path in mrg_files([folder]):
        number = file_number(path)
        for name, (lo, hi) in SPLITS.items():
            if lo <= number <= hi:
                out[name] += read_file(path)
    return out
