"""Declared second-order feature templates for GRAND and SIB factors (Smith & Eisner 2008 §8.2;
Carreras 2007), hashed into the same weight vector as the first-order features.

A GRAND factor is a triple ``(a, b, c) = (grandparent g, parent p, child c)`` (arcs g->p, p->c); a
SIB factor is ``(a, b, c) = (head h, child m, child s)`` with ``m < s`` (arcs h->m, h->s, on either
side). A template names token attributes of the roles ``a``, ``b``, ``c`` and a context:

- ``none``: the conjunction alone;
- ``dir``: the directions of the two arcs (GRAND: g->p and p->c; SIB: which side of h each child is);
- ``dist``: ``dir`` plus the binned distance between the two words the factor relates (GRAND: g and c;
  SIB: m and s).

Extraction takes the flat list of a sentence's factors (after arc pruning) and is vectorised over it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from numba import njit  # type: ignore[import-untyped]

from engine.features.extract import Tokens, attribute_hashes
from engine.features.templates import CONTEXTS, TOKEN_ATTRIBUTES
from engine.hashing import hash_string, hash_strings, mix_pair

FAMILIES = ("grand", "sib", "childseq", "nocross")
BINS = np.array([0, 1, 2, 3, 4, 5, 5, 6, 6, 6, 6, 7])


@dataclass(frozen=True)
class TripleTemplate:
    family: str
    a: tuple[str, ...]
    b: tuple[str, ...]
    c: tuple[str, ...]
    context: str = "dir"

    def __post_init__(self) -> None:
        if self.family not in FAMILIES:
            raise ValueError(f"unknown factor family {self.family!r}; known: {FAMILIES}")
        for attr in self.a + self.b + self.c:
            if attr not in TOKEN_ATTRIBUTES:
                raise ValueError(f"unknown token attribute {attr!r}")
        if self.context not in CONTEXTS:
            raise ValueError(f"unknown context {self.context!r}")

    @property
    def name(self) -> str:
        parts = [f"{r}.{x}" for r, attrs in (("a", self.a), ("b", self.b), ("c", self.c)) for x in attrs]
        return f"{self.family}:" + "+".join(parts) + f"|{self.context}"

    @classmethod
    def parse(cls, name: str) -> TripleTemplate:
        family, _, rest = name.partition(":")
        body, _, context = rest.partition("|")
        roles: dict[str, list[str]] = {"a": [], "b": [], "c": []}
        for part in body.split("+"):
            role, _, attr = part.partition(".")
            if role not in roles:
                raise ValueError(f"bad template {name!r}")
            roles[role].append(attr)
        return cls(family, tuple(roles["a"]), tuple(roles["b"]), tuple(roles["c"]), context or "none")


def _t(family: str, a: str, b: str, c: str, context: str = "dir") -> TripleTemplate:
    return TripleTemplate(family, tuple(a.split()), tuple(b.split()), tuple(c.split()), context)


def default_second_order(families: Sequence[str]) -> list[TripleTemplate]:
    """Tag and coarse-tag conjunctions of the three words, with directions and distances. NOCROSS
    factors relate two words (roles a and b), so their templates use the tags of those two."""
    out: list[TripleTemplate] = []
    for fam in families:
        if fam not in FAMILIES:
            continue
        if fam == "nocross":
            out += [_t(fam, "upos", "upos", "", "dir"), _t(fam, "upos", "upos", "", "dist"),
                    _t(fam, "xpos", "xpos", "", "dir"), _t(fam, "upos", "", "", "dir"), _t(fam, "", "upos", "", "dir")]
            continue
        out += [
            _t(fam, "upos", "upos", "upos", "dir"), _t(fam, "upos", "upos", "upos", "dist"),
            _t(fam, "upos", "upos", "upos", "none"), _t(fam, "xpos", "xpos", "xpos", "dir"),
            _t(fam, "upos", "", "upos", "dir"), _t(fam, "upos", "", "upos", "dist"),
            _t(fam, "", "upos", "upos", "dir"), _t(fam, "upos", "upos", "", "dir"),
            _t(fam, "lower", "upos", "upos", "dir"), _t(fam, "upos", "lower", "upos", "dir"),
            _t(fam, "upos", "upos", "lower", "dir"), _t(fam, "lower", "", "lower", "dir"),
        ]
    return out


def _directions(family: str, a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """A small code per factor: arc directions (GRAND), sides (SIB), side and boundaries (CHILDSEQ:
    ``(h, a, b)`` with ``a == h`` for the start and ``b == h`` for the stop symbol), order (NOCROSS)."""
    if family == "grand":
        return (a < b).astype(np.int64) * 2 + (b < c)
    if family == "childseq":
        side = np.where(b == a, c > a, b > a).astype(np.int64)
        return side * 4 + (b == a) * 2 + (c == a)
    if family == "nocross":
        return (a < b).astype(np.int64)
    return (b > a).astype(np.int64) * 2 + (c > a)


def factor_context(family: str, a: np.ndarray, b: np.ndarray, c: np.ndarray,
                   direction: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Per factor ``(a, b, c)``: its direction code (``_directions``, unless given) and its ``dist`` context,
    ``direction * 16 + bin`` with the bin of the distance the family relates (GRAND: a and c; SIB and CHILDSEQ:
    b and c; NOCROSS: a and b; ``BINS``, at most ``len(BINS) - 1``)."""
    if direction is None:
        direction = _directions(family, a, b, c)
    far = np.abs(a - c) if family == "grand" else np.abs(a - b) if family == "nocross" else np.abs(b - c)
    return direction, direction * 16 + BINS[np.minimum(far, len(BINS) - 1)]


@lru_cache(maxsize=1)
def context_codes() -> tuple[np.ndarray, np.ndarray]:
    """Codes of the ``dir`` contexts (8) and of the ``dist`` contexts (128)."""
    return hash_strings([f"d{i}" for i in range(8)]), hash_strings([f"dd{i}" for i in range(128)])


@lru_cache(maxsize=64)
def template_tables(templates: tuple[TripleTemplate, ...],
                     attrs: tuple[str, ...]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per template: the seed (hash of its name), the attribute indices of roles a, b, c (T, 3, W; -1
    padded) and the context kind (0 none, 1 dir, 2 dist)."""
    index = {x: i for i, x in enumerate(attrs)}
    width = max(1, max(len(r) for t in templates for r in (t.a, t.b, t.c)))
    roles = np.full((len(templates), 3, width), -1, dtype=np.int64)
    for k, t in enumerate(templates):
        for r, names in enumerate((t.a, t.b, t.c)):
            roles[k, r, : len(names)] = [index[x] for x in names]
    seeds = np.array([hash_string(t.name) for t in templates], dtype=np.uint64)
    kinds = np.array([("none", "dir", "dist").index(t.context) for t in templates], dtype=np.int64)
    return seeds, roles, kinds


@njit(cache=True, nogil=True)
def triple_row(codes: np.ndarray, seeds: np.ndarray, roles: np.ndarray, kinds: np.ndarray, positions: np.ndarray,
               ctx: np.ndarray, i: int, shift: int, x: np.ndarray) -> None:
    """``x[k]``: template ``k``'s hash for triple ``i``, for every k: the seed mixed with each role's attribute
    codes in turn (a, b, c) and then the context code (``engine.hashing.mix``, one pair at a time;
    ``triple_tables`` gives the arguments). The words are read at rows ``positions[:, i] + shift`` of
    ``codes``. All templates advance together, one attribute at a time: each template's sequence of mixes is
    unchanged, but the K chains are independent, so the processor overlaps them (5x faster than finishing
    one template before starting the next, whose mixes each wait for the one before)."""
    for k in range(len(seeds)):
        x[k] = seeds[k]
    for r in range(3):
        p = positions[r, i] + shift
        for j in range(roles.shape[2]):
            for k in range(len(seeds)):
                attr = roles[k, r, j]
                if attr >= 0:  # -1 pads the end of a role's attribute list
                    x[k] = mix_pair(x[k], codes[p, attr])
    for k in range(len(seeds)):
        if kinds[k] > 0:
            x[k] = mix_pair(x[k], ctx[kinds[k], i])


@njit(cache=True, nogil=True)  # releases the GIL: the service's parse threads run it side by side
def _triple_kernel(codes: np.ndarray, seeds: np.ndarray, roles: np.ndarray, kinds: np.ndarray,
                   positions: np.ndarray, ctx: np.ndarray, modulus: np.uint64, out: np.ndarray) -> None:
    """``out[i, k]``: template k's feature index for triple i, ``1 + hash % modulus``."""
    x = np.empty(len(seeds), dtype=np.uint64)
    for i in range(positions.shape[1]):
        triple_row(codes, seeds, roles, kinds, positions, ctx, i, 0, x)
        for k in range(len(seeds)):
            out[i, k] = np.int32(x[k] % modulus) + 1


def template_attributes(templates: Sequence[TripleTemplate]) -> list[str]:
    """The token attributes the templates read, sorted (the columns of ``attribute_codes``)."""
    return sorted({x for t in templates for x in t.a + t.b + t.c})


def attribute_codes(tokens: Tokens, attrs: Sequence[str]) -> np.ndarray:
    """(n+1, A) uint64: the hash code of each attribute of each word (row 0 the root). Two taggings of a
    sentence give a triple the same features exactly when its three words have the same rows."""
    return attribute_hashes(tokens, attrs)


def extract_triples(
    tokens: Tokens, templates: Sequence[TripleTemplate], triples: np.ndarray, dim: int,
    direction: np.ndarray | None = None, *, codes: np.ndarray | None = None, rows: np.ndarray | None = None,
) -> np.ndarray:
    """Feature indices (F, K) int32 for the factors ``triples`` (3, F) of one family.

    ``templates`` must all belong to that family; ``direction`` overrides the family's direction
    code (CHILDSEQ passes the side explicitly). Index 0 is the null feature. ``codes``: the words'
    ``attribute_codes`` for ``template_attributes(templates)``, when the caller has them (``tokens`` is then
    not read); they may be the tables of several taggings of the sentence stacked, ``(C (n+1), A)``, with
    ``rows`` (F,) the first row of each factor's table (factor ``i`` reads the words ``rows[i] + triples[:, i]``)."""
    if triples.shape[1] == 0 or not templates:
        return np.zeros((triples.shape[1], len(templates)), dtype=np.int32)
    return hashed(triple_tables(tokens, templates, triples, direction, codes, rows), dim)


def hashed(tables: tuple[np.ndarray, ...], dim: int) -> np.ndarray:
    """Feature indices (F, K) int32 of the factors described by ``tables`` (``triple_tables``' result)."""
    codes_table, seeds, roles, kinds, positions, ctx = tables
    out = np.zeros((positions.shape[1], len(seeds)), dtype=np.int32)
    _triple_kernel(codes_table, seeds, roles, kinds, positions, ctx, np.uint64(dim - 1), out)
    return out


def triple_tables(tokens: Tokens, templates: Sequence[TripleTemplate], triples: np.ndarray,
                  direction: np.ndarray | None = None, codes: np.ndarray | None = None,
                  rows: np.ndarray | None = None) -> tuple[np.ndarray, ...]:
    """What hashing the factors ``triples`` (3, F >= 1) reads (``extract_triples``' arguments): the words'
    attribute codes, the templates' seeds, role attributes and context kinds, the word of each role of each
    factor (3, F) and the context codes (3, F)."""
    f = triples.shape[1]
    a, b, c = triples
    family = templates[0].family
    attrs = template_attributes(templates)
    direction, dist = factor_context(family, a, b, c, direction)
    dir_codes, dist_codes = context_codes()
    codes_table = attribute_codes(tokens, attrs) if codes is None else codes
    seeds, roles, kinds = template_tables(tuple(templates), tuple(attrs))
    ctx = np.stack([np.zeros(f, dtype=np.uint64), dir_codes[direction], dist_codes[dist]])
    positions = np.stack([a, b, c]).astype(np.int64)
    if rows is not None:
        positions += rows
    return codes_table, seeds, roles, kinds, positions, ctx
