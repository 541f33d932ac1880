"""The engine's compiled (numba) kernels, compiled or loaded from numba's cache before the first parse.

Each kernel is compiled on its first call for each combination of argument types, and the machine code is
cached on disk (``cache=True``: beside the sources, or under ``NUMBA_CACHE_DIR`` where they are read-only).
``warm_up`` makes those first calls on tiny inputs of every type the parsers use, so that a service answers
its first request at full speed and a container image can carry the compiled code (the Dockerfile runs it
at build time). Kernels: ``engine.scoring.fused`` (arc potentials straight from the tokens, one per weight
table type), ``engine.features.second_order`` (hashing of higher-order features),
``engine.scoring.triple_deltas`` (what a copy of a sentence under other tags changes in them),
``engine.scoring.upos_triples`` (higher-order potentials with the UPOS-only templates looked up),
``engine.features.labeler_kernel`` (the log-linear labeller's hashing and scoring), ``engine.hashing`` (the
tagger's feature ids), ``engine.text.linear``
(the word classifiers' and the tokenizer's scores), ``engine.text.crf_ragged`` (the tagger's chains),
``engine.graph.tags`` (TAGLINK and CHAIN messages of joint tagging and parsing), ``engine.inference.relaxed_scan``
(relaxed inference's gain screen and eta) and ``engine.constituency.kernel`` (inside-outside over
anchored items, the live binary items of a pruning mask).
"""

from __future__ import annotations

import time

import numpy as np

from engine.constituency.anchored import AnchoredScores, build_items, full_mask
from engine.constituency.factor import make_factor, substates
from engine.constituency.grammar import Grammar
from engine.constituency.inside_outside import inside_outside
from engine.decode.loglinear_labeler import LogLinearLabeler
from engine.features.extract import FeatureExtractor
from engine.features.labeler_features import CONTEXT_TEMPLATES, DEFAULT_TEMPLATES
from engine.features.second_order import (
    attribute_codes,
    default_second_order,
    extract_triples,
    template_attributes,
    triple_tables,
)
from engine.features.templates import ArcTemplate
from engine.graph.family import all_arcs
from engine.graph.pairwise import PairFamily, grand_arcs
from engine.graph.tags import TagChain, TagLink
from engine.hashing import CodeIndex
from engine.inference.relaxed_scan import left_out_eta, screen
from engine.scoring.fused import ArcScorer
from engine.scoring.link_labels import LinkLabels
from engine.scoring.triple_deltas import copy_deltas
from engine.scoring.upos_triples import upos_table
from engine.text import crf_ragged
from engine.text.linear import HashedLogLinear, row_sums


class _Tokens:
    def __init__(self) -> None:
        self.forms, self.upos, self.xpos = ["A", "dog", "barks"], ["DET", "NOUN", "VERB"], ["DT", "NN", "VBZ"]


def _constituency() -> None:
    """One inside-outside pass over the items of a two-word sentence of a three-label grammar."""
    grammar = Grammar(("TOP", "S", "a"), np.array([[1, 2, 2]]), np.array([[0, 1], [1, 1], [2, 2], [1, 2]]),
                      ((),) * 4, np.array([False, False, True]), top=0)
    items = build_items(grammar, full_mask(grammar, 2))
    factor = make_factor(grammar, np.zeros((1, 2, 2, 2)), np.zeros((4, 2, 2)), np.zeros((2, 3, 2)),
                         substates(grammar, 2))
    inside_outside(items, factor, AnchoredScores.zeros(items))


def _relaxed() -> None:
    """The relaxed controller's gain screen and eta pass on a two-word sentence's GRAND family."""
    valid = all_arcs(2)
    one = PairFamily(2, valid, grand_arcs(2, valid), np.ones(2), "grand")  # read-only weights
    stacked: PairFamily = PairFamily.stack([one, one])  # type: ignore[assignment]
    for family in (one, stacked):  # a stack's weights are writable: another signature
        beliefs, active = np.full(family.valid.size, 0.5), np.zeros(family.size, dtype=np.bool_)
        screen(family, beliefs, active, 1e-4)
        screen(family, beliefs, None, 1e-4)
        left_out_eta(family, beliefs, active, np.array([0, family.size]), np.zeros(1))


def _copy_deltas(tokens: _Tokens, triples: np.ndarray) -> None:
    """The higher-order potentials' change under a copy of the sentence, for each weight table type."""
    templates = tuple(default_second_order(["sib"]))
    attrs = template_attributes(templates)
    codes = attribute_codes(tokens, attrs)
    tables = triple_tables(tokens, templates, triples, codes=codes)
    feats = extract_triples(tokens, templates, triples, 1 << 10)
    one = np.zeros(1, dtype=np.int64)
    for dtype in (np.float16, np.float32, np.float64):
        weights = np.zeros(1 << 10, dtype=dtype)
        copy_deltas(codes, tables[1:], one, one, len(codes), feats, np.zeros(feats.shape), weights, 0)


def _labeller(tokens: _Tokens) -> None:
    """The log-linear labeller's kernels (template hashing, distinct rows, row scores) for its weight types."""
    heads = [np.array([-1, 2, 0, 2])]
    for dtype in (np.float16, np.float32, np.float64):  # float16: a loaded model's, as stored
        first = LogLinearLabeler(["det", "root", "obj"], np.zeros((1 << 4, 3), dtype=dtype))
        stacked = LogLinearLabeler(["det", "root", "obj"], np.zeros((1 << 4, 3), dtype=dtype),
                                   [*DEFAULT_TEMPLATES, *CONTEXT_TEMPLATES], context=first)
        stacked.predict_batch([tokens], heads)
        roles = LinkLabels(["det", "root", "obj"], np.zeros((1 << 4, 3), dtype=dtype))  # label-aware LINK factors
        roles.predict_batch([tokens], heads)


def _tagger_chains() -> None:
    """The tagger's forward-backward, Viterbi and sampling over two ragged chains."""
    emissions, transitions, offsets = np.zeros((3, 2)), np.zeros((3, 3)), np.array([0, 1, 3])
    alpha = crf_ragged.forward(emissions, transitions, offsets)
    crf_ragged.marginals(emissions, transitions, offsets, alpha)
    crf_ragged.viterbi(emissions, transitions, np.zeros((3, 1), dtype=np.int64), offsets)
    crf_ragged.sample(alpha, transitions, np.zeros((1, 3)), offsets)


def warm_up() -> float:
    """Compile (or load) every kernel for every argument type in use; returns the seconds it took."""
    start = time.perf_counter()
    tokens = [_Tokens()]
    extractor = FeatureExtractor((ArcTemplate(("upos",), ("upos",), "dist"),
                                  ArcTemplate(("upos",), ("upos",), "dir", between=True)), 1 << 10)
    rng = np.random.default_rng(0)
    for dtype in (np.float16, np.float32, np.float64):  # the weight tables: float16 bits, float32, float64
        vectors = [rng.normal(size=extractor.dim).astype(dtype).astype(np.float64) for _ in range(2)]
        for v in vectors:
            v.flags.writeable = False
        ArcScorer(extractor, vectors)(tokens)
    ArcScorer(extractor, [np.zeros(extractor.dim)])(tokens)  # writable weights: float64 views
    triples = np.array([[0, 1], [1, 2], [2, 3]])
    for family in ("grand", "sib"):
        extract_triples(tokens[0], tuple(default_second_order([family])), triples, 1 << 10)
    table = upos_table("sib", default_second_order(["sib"]), np.zeros(1 << 10, dtype=np.float16))
    assert table is not None
    table.scores(tokens[0], triples)
    _copy_deltas(tokens[0], triples)
    _labeller(tokens[0])
    for dtype in (np.float16, np.float32, np.float64):  # the tokenizer's, lemmatizer's and morph tagger's scores
        HashedLogLinear(np.array([5], dtype=np.uint64), np.zeros((2, 3), dtype=dtype)).scores(
            np.array([[5, 6]], dtype=np.uint64))
    for dtype in (np.float16, np.float32):  # the tagger's emission sums (a loaded model's float16, a trained float32)
        row_sums(np.zeros((2, 3), dtype=dtype), np.zeros((1, 2), dtype=np.int32), np.zeros((1, 3)))
    CodeIndex(np.array([1, 5], dtype=np.uint64)).positions(np.array([5, 2], dtype=np.uint64))  # and its feature ids
    allowed = np.array([[True, False], [True, True], [True, True]])
    TagLink(2, np.array([0, 1]), np.array([1, 2]), np.zeros((2, 2, 2)), allowed).propagate(
        np.zeros(2), np.zeros((2, 2)), np.zeros((2, 2)))
    TagChain(np.zeros((1, 2, 2)), np.zeros(2), np.zeros(2), allowed).propagate(np.zeros((2, 2)))
    _tagger_chains()
    _constituency()
    _relaxed()
    return time.perf_counter() - start


if __name__ == "__main__":  # python -m engine.compiled
    print(f"compiled kernels ready in {warm_up():.2f} s")
