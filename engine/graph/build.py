"""Build one sentence's factor graph from a model's weights and features.

The graph is TREE or PTREE (hard, global) + LINK (first-order scores) + the requested higher-order
families (GRAND, SIB, CHILDSEQ, NOCROSS) over the arcs kept by pruning, or, for decoding a
first-order model under other hard constraints (Smith & Eisner Table 3), LINK + NOT2 / ATMOST1 /
EXACTLY1 / NO2CYCLE instead of TREE. Each higher-order family comes with its features and two
functions a trainer needs (Smith & Eisner §7): the factor beliefs of its features' events and
their gold values.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from engine.features.extract import Tokens, attribute_hashes_many
from engine.features.second_order import (
    TripleTemplate,
    attribute_codes,
    extract_triples,
    hashed,
    template_attributes,
    triple_tables,
)
from engine.features.tag_mixture import TagMixture
from engine.graph.childseq import ChildSeq
from engine.graph.family import FactorFamily, Messages
from engine.graph.hard import AtMost1, Exactly1, Link
from engine.graph.nocross import NoCross
from engine.graph.pairwise import PairFamily, grand_arcs, hard_pairs, no2cycle_arcs, not2_arcs, sib_arcs
from engine.graph.tree import Tree
from engine.scoring.link_labels import ArcRoles
from engine.scoring.triple_deltas import copy_deltas
from engine.scoring.upos_triples import UposTable, WordCodes

SOFT_FAMILIES = ("grand", "sib", "childseq", "nocross")
CONSTRAINTS = ("tree", "ptree", "exactly1", "atmost1", "not2", "exactly1+no2cycle")


@dataclass
class SoftTerms:
    """A higher-order family with its feature indices (F, K) and, per feature row, the factor belief
    of the event (``expected(incoming) -> (F,)``) and its gold value (``gold(heads) -> (F,)``). ``features``
    is None in a parse-time graph whose potentials were partly looked up (``build_graph(tables=...)``): no
    trainer reads such a graph (``trained_features`` refuses it)."""

    family: FactorFamily
    features: np.ndarray | None
    expected: Callable[[Messages], np.ndarray]
    gold: Callable[[np.ndarray], np.ndarray]


@dataclass
class SentenceGraph:
    """The factor graph of one sentence plus what a trainer needs to turn beliefs into gradients."""

    n: int
    valid: np.ndarray
    families: list[FactorFamily]
    link: Link
    soft: dict[str, SoftTerms] = field(default_factory=dict)
    link_features: np.ndarray | None = None  # (A, K) first-order feature indices of the kept arcs (np.nonzero(valid))
    link_posterior: np.ndarray | None = None  # (Z, A) p(z | edge) of those arcs, a model with latent edge clusters
    roles: ArcRoles | None = None  # label-aware LINK factors: each kept arc's roles (engine.scoring.link_labels)


def trained_features(terms: SoftTerms) -> np.ndarray:
    """``terms.features``, which a trainer needs: a graph built with looked-up potentials has none."""
    if terms.features is None:
        raise ValueError("this graph was built for parsing (potentials looked up, no feature rows); "
                         "training graphs are built without tables")
    return terms.features


def _gold_arcs(heads: np.ndarray) -> np.ndarray:
    y = np.zeros((len(heads), len(heads)))
    y[heads[1:], np.arange(1, len(heads))] = 1.0
    return y


def _feature_weights(weights: np.ndarray, feats: np.ndarray) -> np.ndarray:
    """``weights[feats]`` in float64 whatever the weights' type (a model's float16 weights, 8 MB for the shipped
    second-order block where float64 takes 32, give the same values, and so the same sums: each is exact)."""
    return np.asarray(weights[feats], dtype=np.float64)


MixtureCodes = dict[tuple[str, ...], tuple[np.ndarray, np.ndarray, np.ndarray]]


def _factor_scores(tokens: Tokens, templates: Sequence[TripleTemplate], triples: np.ndarray,
                   weights: np.ndarray, offset: int, mixture: TagMixture | None, codes: MixtureCodes,
                   direction: np.ndarray | None = None, table: UposTable | None = None,
                   words: WordCodes | None = None) -> tuple[np.ndarray | None, np.ndarray]:
    """Feature rows (F, K) of the factors ``triples`` (3, F) under the sentence's tags and their scores: the
    weight sums ``s``, or with a ``mixture`` their weighted
    mean over its taggings, ``s + sum_c w_c (s_c - s)``, where ``s_c - s`` is computed only for the
    triples with a word whose attributes that copy changed (the others have the same features), and there only
    over the templates that read a changed attribute (``engine.scoring.triple_deltas``), every copy's in one
    kernel call. ``codes`` caches per attribute set the words' codes under
    the sentence's tags, under each copy's (stacked) and which words each copy changed. Without a mixture, a
    ``table`` (``engine.scoring.upos_triples``) gives the potentials in one compiled pass, the same bit for bit,
    and no feature rows (None); ``words`` caches the sentence's attribute codes for it."""
    dim = len(weights) - offset
    if mixture is None or not mixture.copies or not triples.shape[1]:
        # parse time: the UPOS-only templates' sums from the table, the rest hashed
        looked = None if table is None or direction is not None else table.scores(tokens, triples, words)
        if looked is not None:
            return None, looked
        feats = extract_triples(tokens, templates, triples, dim, direction=direction) + offset
        return feats, _feature_weights(weights, feats).sum(axis=1)
    attrs = template_attributes(templates)
    if tuple(attrs) not in codes:
        mine = attribute_codes(tokens, attrs)
        theirs = attribute_hashes_many(mixture.copies, attrs)
        codes[tuple(attrs)] = mine, theirs.reshape(-1, len(attrs)), (theirs != mine).any(axis=2)
    mine, stacked, changed = codes[tuple(attrs)]
    tables = triple_tables(tokens, templates, triples, direction, mine)
    feats = hashed(tables, dim) + offset
    own = _feature_weights(weights, feats)
    scores = own.sum(axis=1)
    which, touched = np.nonzero(changed[:, triples].any(axis=1))  # (copy, factor) pairs to score again
    if not touched.size:
        return feats, scores
    deltas = copy_deltas(stacked, tables[1:], touched, which, len(mine), feats, own, weights, offset)
    delta = mixture.weights[1:][which] * deltas
    return feats, scores + np.bincount(touched, weights=delta, minlength=len(scores))


def _pair_terms(name: str, tokens: Tokens, n: int, valid: np.ndarray, weights: np.ndarray,
                templates: Sequence[TripleTemplate], offset: int, mixture: TagMixture | None = None,
                codes: MixtureCodes | None = None, table: UposTable | None = None,
                words: WordCodes | None = None) -> SoftTerms:
    arcs = (grand_arcs if name == "grand" else sib_arcs)(n, valid)
    triples = np.stack([arcs[0], arcs[1], arcs[3]])  # GRAND (g, p, c); SIB (h, m, s)
    feats, scores = _factor_scores(tokens, templates, triples, weights, offset, mixture, {} if codes is None else codes,
                                   table=table, words=words)
    fam = PairFamily(n, valid, arcs, scores, name)

    def gold(heads: np.ndarray) -> np.ndarray:
        y = _gold_arcs(heads)
        return y[fam.ah, fam.am] * y[fam.bh, fam.bm]

    return SoftTerms(fam, feats, lambda inc: fam.both_true(inc), gold)


def childseq_triples(n: int, valid: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(h, a, b) of every consecutive-children event CHILDSEQ can use over the kept arcs, and the
    side (1 right, 0 left). ``a == h``: first child; ``b == h``: after the last child."""
    rows, sides = [], []
    for h in range(n + 1):
        kids = np.flatnonzero(valid[h])
        right = np.concatenate([[h], kids[kids > h]])
        left = np.concatenate([[h], kids[kids < h][::-1]])
        for side, seq_arr in ((1, right), (0, left)):
            ia, ib = np.triu_indices(len(seq_arr), 1)
            a = np.concatenate([seq_arr[ia], seq_arr])
            b = np.concatenate([seq_arr[ib], np.full(len(seq_arr), h)])
            rows.append(np.stack([np.full(len(a), h), a, b]))
            sides.append(np.full(len(a), side))
    return np.concatenate(rows, axis=1), np.concatenate(sides)


def _gold_childseq(heads: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    n1 = len(heads)
    right, left = np.zeros((n1, n1, n1)), np.zeros((n1, n1, n1))
    for h in range(n1):
        kids = np.flatnonzero(heads == h)
        for table, seq in ((right, [h, *kids[kids > h], h]), (left, [h, *kids[kids < h][::-1], h])):
            for a, b in zip(seq[:-1], seq[1:], strict=True):
                table[h, a, b] = 1.0
    return right, left


def _childseq_terms(tokens: Tokens, n: int, valid: np.ndarray, weights: np.ndarray,
                    templates: Sequence[TripleTemplate], offset: int, mixture: TagMixture | None = None,
                codes: MixtureCodes | None = None) -> SoftTerms:
    triples, side = childseq_triples(n, valid)
    h, a, b = triples
    direction = side * 4 + (a == h) * 2 + (b == h)
    feats, scores = _factor_scores(tokens, templates, triples, weights, offset, mixture, {} if codes is None else codes,
                                   direction)
    theta = np.zeros((2, n + 1, n + 1, n + 1))  # [left, right]
    theta[side, h, a, b] = scores
    fam = ChildSeq(n, valid, theta[1], theta[0])

    def expected(inc: Messages) -> np.ndarray:
        right, left = fam.expected_pairs(inc)
        return np.where(side == 1, right[h, a, b], left[h, a, b])

    def gold(heads: np.ndarray) -> np.ndarray:
        right, left = _gold_childseq(heads)
        return np.where(side == 1, right[h, a, b], left[h, a, b])

    return SoftTerms(fam, feats, expected, gold)


def _nocross_terms(tokens: Tokens, n: int, valid: np.ndarray, weights: np.ndarray,
                   templates: Sequence[TripleTemplate], offset: int, mixture: TagMixture | None = None,
                codes: MixtureCodes | None = None) -> SoftTerms:
    j, l = np.triu_indices(n + 1, 1)  # noqa: E741
    keep = j >= 1
    j, l = j[keep], l[keep]  # noqa: E741
    feats, scores = _factor_scores(tokens, templates, np.stack([j, l, j]), weights, offset, mixture,
                                   {} if codes is None else codes)
    theta = np.zeros((n + 1, n + 1))
    theta[j, l] = scores
    fam = NoCross(n, valid, theta)

    def gold(heads: np.ndarray) -> np.ndarray:
        hj, hl = heads[j], heads[l]
        lo_j, hi_j = np.minimum(hj, j), np.maximum(hj, j)
        lo_l, hi_l = np.minimum(hl, l), np.maximum(hl, l)
        cross = ((lo_j < lo_l) & (lo_l < hi_j) & (hi_j < hi_l)) | ((lo_l < lo_j) & (lo_j < hi_l) & (hi_l < hi_j))
        return cross.astype(float)

    return SoftTerms(fam, feats, lambda inc: fam.pair_beliefs(inc)[j, l], gold)


def build_graph(
    tokens: Tokens,
    valid: np.ndarray,
    link_scores: np.ndarray,
    weights: np.ndarray,
    templates: Mapping[str, Sequence[TripleTemplate]],
    *,
    constraint: str = "tree",
    single_root: bool = True,
    offset: int = 0,
    mixture: TagMixture | None = None,
    tables: Mapping[str, UposTable | None] | None = None,
) -> SentenceGraph:
    """Factor graph for one sentence; ``link_scores`` (n+1, n+1) are the first-order arc scores.

    Higher-order features are hashed into ``weights[offset:]`` (their own block of the weights); the
    weights may be float16 (a loaded model's stored values), their sums are float64. With a ``mixture``
    the higher-order potentials are averaged over its taggings (``link_scores`` should be too)."""
    if constraint not in CONSTRAINTS:
        raise ValueError(f"constraint must be one of {CONSTRAINTS}, got {constraint!r}")
    n = len(tokens.forms)
    families: list[FactorFamily] = []
    if constraint in ("tree", "ptree"):
        families.append(Tree(n, valid, projective=constraint == "ptree", single_root=single_root))
    elif constraint.startswith("exactly1"):
        families.append(Exactly1(n, valid))
    elif constraint == "atmost1":
        families.append(AtMost1(n, valid))
    else:
        families.append(hard_pairs(n, valid, not2_arcs(n, valid), "not2"))
    if constraint == "exactly1+no2cycle":
        families.append(hard_pairs(n, valid, no2cycle_arcs(n, valid), "no2cycle"))
    link = Link(n, valid, np.where(valid, link_scores, 0.0))
    families.append(link)
    graph = SentenceGraph(n, valid, families, link)
    codes: MixtureCodes = {}  # the families' shared attribute codes under the mixture's taggings
    words: WordCodes = {}  # and under the sentence's own tags, for the tables
    for name, family_templates in templates.items():
        if not family_templates:
            continue
        if name in ("grand", "sib"):
            terms = _pair_terms(name, tokens, n, valid, weights, family_templates, offset, mixture, codes,
                                None if tables is None else tables.get(name), words)
        elif name == "childseq":
            terms = _childseq_terms(tokens, n, valid, weights, family_templates, offset, mixture, codes)
        elif name == "nocross":
            terms = _nocross_terms(tokens, n, valid, weights, family_templates, offset, mixture, codes)
        else:
            raise ValueError(f"unknown factor family {name!r}; known: {SOFT_FAMILIES}")
        families.append(terms.family)
        graph.soft[name] = terms
    return graph
