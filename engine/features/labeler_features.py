"""The log-linear labeller's features (``engine.decode.loglinear_labeler``): token attributes of the dependent,
its head, the head's head, its children and its siblings (optionally the first-stage labels of a stacked
labeller), their templates, and the vectorised extraction of every arc's hashed feature ids (one hash of every
token attribute, then every template at once per arity; no Python loop over arcs or templates).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Protocol

import numpy as np

from engine.features.labeler_kernel import group_ids
from engine.hashing import hash_string, hash_strings

if TYPE_CHECKING:
    from scipy import sparse

# Token attributes, for the dependent ("d."), the head ("h."), the head's head ("g."), each child of the dependent
# ("c.", a bag) and each other child of the head ("s.", siblings, a bag). "deprel" is the token's label from a
# first-stage labeller (stacking; see the module docstring).
TOKEN_ATOMS = (
    "lower", "upos", "xpos", "suf3", "upos_prev", "upos_next", "punct", "position",
    "children", "lc_upos", "rc_upos", "lc_lower", "rc_lower", "deprel",
)
SINGLE, BAGS = "dhg", "cs"
# Arc attributes: direction of h -> m, direction plus binned distance, direction of the head's own arc; for bag
# members their side: a child left/right of the dependent, a sibling left/right of the dependent and of the head.
ARC_ATOMS = ("dir", "dist", "g.dir")
SIDE_ATOMS = ("c.side", "s.side")
ATOMS = (*(f"{p}.{a}" for p in SINGLE + BAGS for a in TOKEN_ATOMS), *ARC_ATOMS, *SIDE_ATOMS)
CHUNK = 256  # sentences per feature-extraction call (chunks keep the working set in cache)
BAG_SLOTS = 6  # a bag holds the first BAG_SLOTS children (by position) of a word
_DIST_BINS = np.array([0, 1, 2, 3, 4, 5, 6, 6, 7, 7, 7, 8, 8, 8, 8, 9, 9, 9, 9, 9, 10])  # by |h - m|


def _t(spec: str) -> tuple[str, ...]:
    return tuple(spec.split()) if spec else ()


DEFAULT_TEMPLATES: tuple[tuple[str, ...], ...] = tuple(_t(s) for s in (
    "",  # bias
    # dependent and head alone, and with direction
    "d.lower", "d.upos", "d.xpos", "d.suf3", "h.lower", "h.upos", "h.xpos",
    "d.lower dir", "d.upos dir", "d.xpos dir", "d.suf3 d.upos dir", "h.lower dir", "h.upos dir", "h.xpos dir",
    "dist", "d.upos dist", "d.xpos dist",
    # head-dependent conjunctions
    "d.upos h.upos dir", "d.xpos h.xpos dir", "d.lower h.upos dir", "d.upos h.lower dir",
    "d.lower h.lower dir", "d.lower h.xpos dir", "d.xpos h.lower dir", "d.suf3 h.upos dir",
    "d.upos h.upos dist", "d.xpos h.xpos dist",
    # neighbouring tags
    "d.upos_prev d.upos h.upos dir", "d.upos_next d.upos h.upos dir",
    "h.upos_prev h.upos d.upos dir", "h.upos_next h.upos d.upos dir",
    "d.upos_prev d.upos_next d.upos", "d.upos_prev d.lower", "d.upos_next d.lower",
    # the dependent's children
    "d.children d.upos h.upos dir", "d.lc_upos d.upos h.upos dir", "d.rc_upos d.upos h.upos dir",
    "d.lc_lower d.upos dir", "d.rc_lower d.upos dir", "d.lc_lower d.xpos h.xpos dir",
    "d.rc_lower d.xpos h.xpos dir", "d.lc_upos d.rc_upos d.upos",
    "c.lower c.side d.upos dir", "c.upos c.side d.upos h.upos dir",
    # the head's other children and its own head
    "h.children h.upos d.upos dir", "h.lc_lower h.upos d.upos dir", "h.rc_lower h.upos d.upos dir",
    "s.lower s.side d.upos h.upos", "s.upos s.side d.upos h.upos", "s.upos s.lc_upos s.side d.upos h.upos",
    "s.lc_lower s.side d.upos",
    "g.upos h.upos d.upos dir", "g.upos g.dir h.upos d.upos", "g.dir h.xpos d.xpos dir",
    "g.lower h.upos d.upos dir",
    # punctuation and position
    "d.punct d.lower", "d.punct h.upos dir", "d.position d.upos h.upos", "d.position d.lower",
))

# What a second-stage labeller adds: the first stage's labels of the head, its other children (siblings) and the
# dependent's children. The dependent's own first-stage label was tried and dropped (EWT dev: 95.02 against 95.16).
CONTEXT_TEMPLATES: tuple[tuple[str, ...], ...] = tuple(_t(s) for s in (
    "h.deprel d.upos dir", "h.deprel d.upos h.upos dir", "h.deprel d.lower dir", "g.upos h.deprel d.upos",
    "s.deprel s.side d.upos h.upos", "s.deprel s.side d.lower", "s.deprel s.lower s.side d.upos",
    "c.deprel c.side d.upos h.upos dir", "c.deprel c.lower d.upos dir",
))


class Tokens(Protocol):
    """What the labeller reads from a sentence (``engine.data.conllu_io.Sentence`` fits)."""

    forms: list[str]
    upos: list[str]
    xpos: list[str]


def _head_positions(lens: np.ndarray, heads: Sequence[np.ndarray]) -> np.ndarray:
    """Every word's head position, the sentences' ``heads[1:]`` concatenated (int64), once their shapes are
    checked (``_tree_layout`` checks the values)."""
    parts = []
    for n, h in zip(lens.tolist(), heads, strict=True):
        h = np.asarray(h)
        if h.shape != (n + 1,):
            raise ValueError(f"heads must have shape ({n + 1},) for a {n}-word sentence, got {h.shape}")
        parts.append(h[1:])
    return np.concatenate(parts).astype(np.int64)


_NONE = hash_string("<NONE>")
_ROOT = "<ROOT>"
_SMALL = {name: hash_strings([f"{name}{i}" for i in range(32)])
          for name in ("punct", "position", "children", "dir", "dist", "gdir", "cside", "sside")}


@lru_cache(maxsize=1 << 16)
def _is_punct(word: str) -> bool:
    return not any(c.isalnum() for c in word)


@dataclass
class _Arcs:
    """Hashed token attributes of a batch and the arcs of its trees, in flat token indices.

    Tokens are flat, one ROOT token before each sentence's words and one "none" row at the end (index
    ``none``, what a missing child or grandparent points to).
    """

    codes: np.ndarray  # (T + 1, n_token_atoms) uint64
    dep: np.ndarray  # (N,) each word, i.e. its arc's dependent
    head: np.ndarray  # (N,) its head
    grand: np.ndarray  # (N,) its head's head (none for arcs from ROOT)
    pos: np.ndarray  # (N,) position of the word in its sentence (1-based)
    head_pos: np.ndarray  # (N,) position of its head
    children: np.ndarray  # (T + 1, BAG_SLOTS) the first children of each token by position, none-padded

    @property
    def none(self) -> int:
        return self.codes.shape[0] - 1


@dataclass
class _Layout:
    """The trees of a batch in flat token indices (see ``_Arcs``), before any attribute is hashed."""

    lens: np.ndarray  # (S,) words per sentence
    starts: np.ndarray  # (S,) flat index of each sentence's ROOT token
    total: int  # tokens of the batch (words and ROOTs); the none row is ``total``
    dep: np.ndarray  # (N,) each word
    pos: np.ndarray  # (N,) its position in its sentence (1-based)
    head: np.ndarray  # (N,) its head
    head_pos: np.ndarray  # (N,) its head's position
    grand: np.ndarray  # (N,) its head's head
    count: np.ndarray  # (total + 1,) children of each token
    children: np.ndarray  # (total + 1, BAG_SLOTS) the first children by position, none-padded
    rightmost: np.ndarray  # (total + 1,) the last child, none if childless


def _tree_layout(sentences: Sequence[Tokens], heads: Sequence[np.ndarray]) -> _Layout:
    """Flat token indices of every word, its head, grandparent and children (a few numpy calls per batch)."""
    lens = np.fromiter((len(s.forms) for s in sentences), dtype=np.int64, count=len(sentences))
    starts = np.zeros(len(lens), dtype=np.int64)
    np.cumsum(lens[:-1] + 1, out=starts[1:])
    total = int(lens.sum()) + len(lens)
    head_pos = _head_positions(lens, heads)
    offset = np.repeat(starts, lens)
    is_word = np.ones(total, dtype=bool)
    is_word[starts] = False
    dep = np.flatnonzero(is_word)
    pos = dep - offset
    if ((head_pos < 0) | (head_pos > np.repeat(lens, lens)) | (head_pos == pos)).any():
        raise ValueError("heads must be in 0..n and no word may head itself")
    head = offset + head_pos
    parent = np.full(total + 1, total, dtype=np.int64)  # ROOT tokens and the none row point to none
    parent[dep] = head
    grand = parent[head]
    # children by position: stable sort of the words (already in position order) by head
    order = np.argsort(head, kind="stable")
    by_head, kids = head[order], dep[order]
    count = np.bincount(head, minlength=total + 1)
    rank = np.arange(len(order)) - (np.cumsum(count) - count)[by_head]
    children = np.full((total + 1, BAG_SLOTS), total, dtype=np.int64)
    keep = rank < BAG_SLOTS
    children[by_head[keep], rank[keep]] = kids[keep]
    rightmost = np.full(total + 1, total, dtype=np.int64)
    has = count > 0
    rightmost[has] = kids[np.cumsum(count)[has] - 1]
    return _Layout(lens, starts, total, dep, pos, head, head_pos, grand, count, children, rightmost)


def _flat(values: Iterable[Sequence[str]], root: str, none: str) -> list[str]:
    """One string per flat token: ``root`` before each sentence's ``values``, ``none`` at the end."""
    out: list[str] = []
    for v in values:
        out.append(root)
        out.extend(v)
    out.append(none)
    return out


def _same_words(a: Sequence[str], b: Sequence[str]) -> bool:
    return a is b or list(a) == list(b)  # (lists, tuples or arrays of strings)


def _word_columns(sentences: Sequence[Tokens], need: set[str], lens: np.ndarray,
                  starts: np.ndarray) -> dict[str, np.ndarray]:
    """Codes of the attributes of the words themselves (lowercased form, suffix, punctuation), one row per flat
    token. A sentence with the same words as the one before it (a copy under other tags) shares its codes:
    they are computed for the first sentence of each run and copied."""
    new = np.fromiter((i == 0 or not _same_words(s.forms, sentences[i - 1].forms) for i, s in enumerate(sentences)),
                      dtype=bool, count=len(sentences))
    distinct = [s for s, first in zip(sentences, new, strict=True) if first]
    own = np.zeros(len(distinct), dtype=np.int64)  # the flat index of each distinct sentence's ROOT
    np.cumsum(lens[new][:-1] + 1, out=own[1:])
    lower = _flat(([f.lower() for f in s.forms] for s in distinct), "<root>", "<none>")
    cols = {"lower": hash_strings(lower)}
    if "suf3" in need:
        cols["suf3"] = hash_strings([w[-3:] for w in lower])
    if "punct" in need:
        flags = np.fromiter(map(_is_punct, lower), dtype=np.int64, count=len(lower))
        flags[own] = 2
        cols["punct"] = _SMALL["punct"][flags]
    if len(distinct) == len(sentences):
        return cols
    shift = own[np.cumsum(new) - 1] - starts  # from each sentence's flat tokens to its run's first sentence's
    index = np.arange(int(lens.sum()) + len(lens)) + np.repeat(shift, lens + 1)
    index = np.append(index, len(lower) - 1)  # the none row
    return {name: col[index] for name, col in cols.items()}


def _string_columns(sentences: Sequence[Tokens], need: set[str], lens: np.ndarray, starts: np.ndarray,
                    context: Sequence[Sequence[str]] | None) -> dict[str, np.ndarray]:
    """Codes of the attributes read from the tokens' strings (word, suffix, punctuation, tags, first-stage
    labels), one row per flat token."""
    cols: dict[str, np.ndarray] = {}
    if need & {"lower", "suf3", "punct", "lc_lower", "rc_lower"}:
        cols.update(_word_columns(sentences, need, lens, starts))
    if need & {"upos", "upos_prev", "upos_next", "lc_upos", "rc_upos"}:
        up = cols["upos"] = hash_strings(_flat((s.upos for s in sentences), _ROOT, "<NONE>"))
        edge = np.uint64(_NONE)
        cols["upos_prev"] = np.concatenate([[edge], up[:-2], [edge]])  # a ROOT marks a sentence's edges
        cols["upos_prev"][starts] = edge  # and has nothing before it
        cols["upos_next"] = np.concatenate([up[1:-1], [np.uint64(hash_string(_ROOT)), edge]])
    if "xpos" in need:
        cols["xpos"] = hash_strings(_flat((s.xpos for s in sentences), _ROOT, "<NONE>"))
    if "deprel" in need:
        if context is None or len(context) != len(sentences):
            raise ValueError("the deprel features need every sentence's first-stage labels")
        for s, labels in zip(sentences, context, strict=True):
            if len(labels) != len(s.forms):
                raise ValueError(f"{len(labels)} first-stage labels for a {len(s.forms)}-word sentence")
        cols["deprel"] = hash_strings(_flat(context, _ROOT, "<NONE>"))
    return cols


def _token_codes(sentences: Sequence[Tokens], heads: Sequence[np.ndarray], atoms: Sequence[str],
                 context: Sequence[Sequence[str]] | None = None) -> _Arcs:
    """Hash every token attribute in ``atoms`` once per token of the batch (a few numpy calls per attribute);
    ``context`` holds each sentence's first-stage labels, for the ``deprel`` atom."""
    t = _tree_layout(sentences, heads)
    need = set(atoms)
    cols = _string_columns(sentences, need, t.lens, t.starts, context)
    if "position" in need:
        p = np.zeros(t.total + 1, dtype=np.int64)  # 0 ROOT/none, 1 middle, 2 first, 3 last, 4 only word
        p[t.dep] = 1
        full = t.lens > 0
        p[t.starts[full] + 1] = 2
        p[(t.starts + t.lens)[full]] = np.where(t.lens[full] == 1, 4, 3)
        cols["position"] = _SMALL["position"][p]
    cols["children"] = _SMALL["children"][np.minimum(t.count, 3)]
    for side, idx in (("lc", t.children[:, 0]), ("rc", t.rightmost)):
        if "upos" in cols:
            cols[f"{side}_upos"] = cols["upos"][idx]
        if "lower" in cols:
            cols[f"{side}_lower"] = cols["lower"][idx]
    codes = np.empty((t.total + 1, len(atoms)), dtype=np.uint64)
    for i, a in enumerate(atoms):
        codes[:, i] = cols[a]
    return _Arcs(codes, t.dep, t.head, t.grand, t.pos, t.head_pos, t.children)


def touched_design(ids: np.ndarray) -> tuple[np.ndarray, sparse.csr_matrix]:
    """``(rows, design)``: the distinct feature ids ``ids`` (N, K) holds (id 0, the null feature, left out) and the
    0/1 (N, len(rows)) matrix of which of them each row has: a gradient ``design.T @ g`` over the touched weight
    rows only."""
    from scipy import sparse  # here: only training uses it, parsing does not

    present = ids != 0
    rows, columns = np.unique(ids[present], return_inverse=True)
    indptr = np.zeros(len(ids) + 1, dtype=np.int64)
    np.cumsum(present.sum(axis=1), out=indptr[1:])
    return rows, sparse.csr_matrix((np.ones(len(columns)), columns.ravel(), indptr), shape=(len(ids), len(rows)))


class CompiledTemplates:
    """Templates as rows of column indices into per-arc atom matrices.

    The single-token part of every template indexes ``[codes[dep] | codes[head] | codes[grand] | arc atoms |
    0]``; a bag template's member part indexes ``[codes[member] | side | 0]`` for each of the ``BAG_SLOTS``
    members (slots without a member give the null feature 0).
    """

    def __init__(self, templates: Sequence[Sequence[str]]) -> None:
        self.templates = [tuple(t) for t in templates]
        if not self.templates:
            raise ValueError("at least one feature template is needed")
        unknown = sorted({a for t in self.templates for a in t} - set(ATOMS))
        if unknown:
            raise ValueError(f"unknown feature atoms {unknown}; known: {', '.join(ATOMS)}")
        used = {a for t in self.templates for a in t}
        self.token_atoms = sorted({a.split(".", 1)[1] for a in used if a not in ARC_ATOMS + SIDE_ATOMS})
        k = len(self.token_atoms)
        single = {f"{who}.{a}": j * k + i for j, who in enumerate(SINGLE) for i, a in enumerate(self.token_atoms)}
        single.update({a: 3 * k + i for i, a in enumerate(ARC_ATOMS)})
        self.single_pad = 3 * k + len(ARC_ATOMS)
        member = {a: i for i, a in enumerate(self.token_atoms)}
        self.member_pad = k + 1
        self.groups: list[tuple[str, np.ndarray, np.ndarray, np.ndarray]] = []  # bag, seeds, single, member cols
        by_bag: dict[str, list[tuple[str, ...]]] = {}
        for t in self.templates:
            bags = {a[0] for a in t if a[:2] in ("c.", "s.")}
            if len(bags) > 1:
                raise ValueError(f"a template may draw on one bag only: {t}")
            by_bag.setdefault(bags.pop() if bags else "", []).append(t)
        for bag, chosen in sorted(by_bag.items()):
            seeds = hash_strings(["tmpl:" + " ".join(t) for t in chosen])
            one = [[single[a] for a in t if a in single] for t in chosen]
            many = [[k if a.endswith(".side") else member[a[2:]] for a in t if a not in single] for t in chosen]
            self.groups.append((bag, seeds, self._pad(one, self.single_pad), self._pad(many, self.member_pad)))
        self.width = sum(len(g[1]) * (BAG_SLOTS if g[0] else 1) for g in self.groups)

    @staticmethod
    def _pad(rows: list[list[int]], pad: int) -> np.ndarray:
        out = np.full((len(rows), max((len(r) for r in rows), default=0)), pad, dtype=np.int64)
        for i, r in enumerate(rows):
            out[i, : len(r)] = r
        return out

    @property
    def needs_context(self) -> bool:
        """Whether some template reads first-stage labels (``deprel``)."""
        return "deprel" in self.token_atoms

    def feature_ids(self, sentences: Sequence[Tokens], heads: Sequence[np.ndarray], buckets: int,
                    context: Sequence[Sequence[str]] | None = None) -> np.ndarray:
        """(total words, width) int32 hashed feature rows in ``[1, buckets)`` (a power of two), 0 = null
        (the templates hashed arc by arc in ``engine.features.labeler_kernel``; the same ids as hashing each
        template atom in numpy, the reference in ``tests/engine/decode/test_labeler_kernel.py``)."""
        a, arc = self._arcs(sentences, heads, context)
        out = np.empty((len(a.dep), self.width), dtype=np.int32)
        first = 0
        for bag, seeds, one, many in self.groups:
            group_ids(a.codes, a.dep, a.head, a.grand, arc, a.children, _SMALL[f"{bag}side"] if bag else seeds,
                      " cs".index(bag or " "), seeds, one, many, np.uint64(buckets - 1), out, first)
            first += len(seeds) * (BAG_SLOTS if bag else 1)
        return out

    def chunked_ids(self, sentences: Sequence[Tokens], heads: Sequence[np.ndarray], buckets: int,
                    context: Sequence[Sequence[str]] | None = None) -> np.ndarray:
        """``feature_ids`` of ``CHUNK`` sentences at a time (the working set stays in cache), concatenated."""
        parts = [self.feature_ids(sentences[i:i + CHUNK], heads[i:i + CHUNK], buckets,
                                  None if context is None else context[i:i + CHUNK])
                 for i in range(0, len(sentences), CHUNK)]
        return np.concatenate(parts) if parts else np.zeros((0, self.width), dtype=np.int32)

    def _arcs(self, sentences: Sequence[Tokens], heads: Sequence[np.ndarray],
              context: Sequence[Sequence[str]] | None) -> tuple[_Arcs, np.ndarray]:
        """The batch's token codes and trees, and the (N, 4) arc atoms (direction, distance, the head's
        direction, 0)."""
        a = _token_codes(sentences, heads, self.token_atoms, context)
        right = a.head_pos < a.pos
        dist = _DIST_BINS[np.minimum(np.abs(a.head_pos - a.pos), len(_DIST_BINS) - 1)] + 16 * right
        gdir = np.where(a.grand == a.none, 2, a.grand < a.head)
        arc = np.stack([_SMALL["dir"][right.astype(np.int64)], _SMALL["dist"][dist], _SMALL["gdir"][gdir],
                        np.zeros(len(a.dep), dtype=np.uint64)], axis=1)
        return a, arc
