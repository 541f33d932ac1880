"""The GRAND and SIB templates that read only UPOS, summed once per model and looked up per factor.

Seven of the twelve default templates of each family (``engine.features.second_order.default_second_order``)
read nothing but the three words' UPOS, the factor's direction code and its binned distance: their summed
weight is a function of (direction, distance bin, UPOS of a, b and c), 4 x 8 x 18^3 values (17 tags and ROOT)
for each family. ``upos_table`` hashes those values once (the same kernel and the same indices as
``extract_triples``) and sums their weights. At parse time ``UposTable.scores`` gives each factor's potential
(Smith & Eisner 2008 §8.2's factor score) in one compiled pass: the table entry plus the weights of the
family's other templates, hashed as ``extract_triples`` hashes them, instead of hashing, gathering and summing
all twelve in numpy passes.

**Why it is bit for bit the same.** Only for float16 weights (the shipped models' stored block): every float16
value is an integer multiple of 2^-24 below 2^16 in magnitude, so any sum of up to 2^13 of them is an integer
multiple of 2^-24 below 2^29, which float64 holds exactly. Every partial sum is exact, so the order of the
additions cannot change the total: the table's entry plus the other templates' weights equals the twelve
weights summed as ``engine.graph.build`` sums them. Wider weights (a trainer's float64, a float32 block) get no
table (``upos_table`` returns None) and keep the hashing path; so does a sentence with a UPOS outside the table
(``scores`` returns None). No feature rows are made, so such graphs are for parsing, not training.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numba import njit  # type: ignore[import-untyped]

from engine.features.extract import ROOT_CODE, UPOS_TAGS, Tokens
from engine.features.second_order import (
    BINS,
    TripleTemplate,
    attribute_codes,
    context_codes,
    factor_context,
    hashed,
    template_attributes,
    template_tables,
    triple_row,
)
from engine.hashing import hash_strings
from engine.model.widen import HALF_VALUES

FAMILIES = ("grand", "sib")  # four direction codes each (``second_order.factor_context``)
_DIRECTIONS = 4
_BIN_COUNT = int(BINS.max()) + 1

WordCodes = dict[tuple[str, ...], np.ndarray]  # one sentence's ``attribute_codes`` per attribute list


@dataclass(frozen=True)
class UposTable:
    """One family's UPOS-only templates summed: ``values`` (32 V^3,) at ``((d * 8 + bin) V + ua) V ...`` for
    direction code ``d`` (8 bins: ``second_order.BINS``); ``rest``: the family's other templates, which a factor
    still hashes, in ``bits`` (the float16 block as uint16) past ``offset``."""

    family: str
    values: np.ndarray  # (32 V^3,) float64
    codes: np.ndarray  # (V,) uint64, sorted: the UPOS codes the table covers
    slots: np.ndarray  # (V,) the table index of each of ``codes``
    rest: tuple[TripleTemplate, ...]
    attrs: tuple[str, ...]  # the attributes ``rest`` reads, with "upos"
    rest_tables: tuple[np.ndarray, np.ndarray, np.ndarray]  # ``template_tables(rest, attrs)``: seeds, roles, kinds
    bits: np.ndarray
    offset: int

    def scores(self, tokens: Tokens, triples: np.ndarray, cache: WordCodes | None = None) -> np.ndarray | None:
        """Each factor's potential (F,) for ``triples`` (3, F), or None when a word's UPOS is not in the table.
        ``cache``: the sentence's attribute codes, shared by the families of one graph."""
        cache = {} if cache is None else cache
        if self.attrs not in cache:
            cache[self.attrs] = attribute_codes(tokens, self.attrs)
        codes = cache[self.attrs]
        upos = codes[:, self.attrs.index("upos")]
        at = np.minimum(np.searchsorted(self.codes, upos), len(self.codes) - 1)
        if not np.array_equal(self.codes[at], upos):
            return None
        direction, dist = factor_context(self.family, *triples)
        context = direction * _BIN_COUNT + dist % 16  # the table's first axis (``dist`` is direction * 16 + bin)
        dir_codes, dist_codes = context_codes()
        out = np.empty(triples.shape[1])
        _scores_kernel(codes, *self.rest_tables, np.ascontiguousarray(triples, dtype=np.int64), direction, dist,
                       context, dir_codes, dist_codes, self.slots[at], self.values, len(self.codes),
                       np.uint64(len(self.bits) - self.offset - 1), self.bits, self.offset, HALF_VALUES, out)
        return out


@njit(cache=True, nogil=True)
def _scores_kernel(codes: np.ndarray, seeds: np.ndarray, roles: np.ndarray, kinds: np.ndarray, triples: np.ndarray,
                   direction: np.ndarray, dist: np.ndarray, context: np.ndarray, dir_codes: np.ndarray,
                   dist_codes: np.ndarray, slots: np.ndarray, values: np.ndarray, v: int, modulus: np.uint64,
                   bits: np.ndarray, offset: int, decode: np.ndarray,
                   out: np.ndarray) -> None:  # pragma: no cover - compiled
    """``out[i]``: the table entry of factor i plus the weights of the other templates' features, each
    ``offset + 1 + hash % modulus`` with the hash of ``triple_row`` (``extract_triples``' indices)."""
    f = triples.shape[1]
    ctx = np.zeros((3, f), dtype=np.uint64)
    for i in range(f):
        ctx[1, i] = dir_codes[direction[i]]
        ctx[2, i] = dist_codes[dist[i]]
    x = np.empty(len(seeds), dtype=np.uint64)
    for i in range(f):
        cell = context[i] * v + slots[triples[0, i]]
        acc = values[(cell * v + slots[triples[1, i]]) * v + slots[triples[2, i]]]
        triple_row(codes, seeds, roles, kinds, triples, ctx, i, 0, x)
        for k in range(len(seeds)):
            acc += decode[bits[offset + np.int64(x[k] % modulus) + 1]]
        out[i] = acc


def upos_only(template: TripleTemplate) -> bool:
    """Whether the template reads UPOS and nothing else."""
    roles = template.a + template.b + template.c
    return bool(roles) and all(x == "upos" for x in roles)


def upos_table(family: str, templates: Sequence[TripleTemplate], weights: np.ndarray,
               offset: int = 0) -> UposTable | None:
    """The table of ``templates``' UPOS-only members over the float16 ``weights[offset:]`` (the block the
    templates are hashed into), or None: another family, another weight type, or no such template."""
    inside = tuple(t for t in templates if upos_only(t))
    if family not in FAMILIES or weights.dtype != np.float16 or not inside:
        return None
    codes = np.append(hash_strings(list(UPOS_TAGS)), np.uint64(ROOT_CODE))
    v = len(codes)
    grid = np.indices((v, v, v)).reshape(3, -1)
    d, k = np.divmod(np.arange(_DIRECTIONS * _BIN_COUNT), _BIN_COUNT)
    per = grid.shape[1]
    dir_codes, dist_codes = context_codes()
    ctx = np.stack([np.zeros(per * len(d), dtype=np.uint64), np.repeat(dir_codes[d], per),
                    np.repeat(dist_codes[d * 16 + k], per)])
    seeds, roles, kinds = template_tables(inside, ("upos",))
    positions = np.tile(grid, len(d)).astype(np.int64)
    feats = hashed((codes[:, None], seeds, roles, kinds, positions, ctx), len(weights) - offset) + offset
    values = np.asarray(weights[feats], dtype=np.float64).sum(axis=1)
    rest = tuple(t for t in templates if not upos_only(t))
    attrs = tuple(sorted({"upos", *template_attributes(rest)}))
    order = np.argsort(codes)
    return UposTable(family, values, codes[order], order, rest, attrs, template_tables(rest, attrs),
                     weights.view(np.uint16), offset)
