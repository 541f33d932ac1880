"""Looked-up higher-order potentials (engine.scoring.upos_triples) against hashing every template.

With float16 weights every partial sum of the potentials is exact in float64, so the table's entry plus the other
templates' weights must equal the twelve weights summed as ``engine.graph.build`` sums them, bit for bit; wider
weights, other families and UPOS outside the table fall back to hashing."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.bp_parser import BPParser
from engine.data.conllu_io import read_conllu
from engine.features.extract import UPOS_TAGS
from engine.features.second_order import default_second_order, extract_triples
from engine.graph.build import SoftTerms, build_graph, trained_features
from engine.graph.family import all_arcs
from engine.graph.pairwise import PairFamily
from engine.scoring.upos_triples import upos_only, upos_table

FORMS = ["The", "dog", "barks", ",", "RUN", "x", "é"]
XPOS = ["NN", "VB", "DT", "-LRB-"]
MODEL = Path(__file__).resolve().parents[3] / "models" / "en_ewt-joint"


class Toks:
    def __init__(self, forms: list[str], upos: list[str], xpos: list[str]) -> None:
        self.forms, self.upos, self.xpos = forms, upos, xpos


def _theta(terms: SoftTerms) -> np.ndarray:
    assert isinstance(terms.family, PairFamily)
    return terms.family.theta


def _hashed_scores(tokens: Toks, family: str, triples: np.ndarray, weights: np.ndarray, offset: int) -> np.ndarray:
    feats = extract_triples(tokens, default_second_order([family]), triples, len(weights) - offset) + offset
    return np.asarray(weights[feats], dtype=np.float64).sum(axis=1)


@settings(max_examples=60, deadline=None)
@given(st.data(), st.integers(1, 14), st.sampled_from(["grand", "sib"]), st.integers(0, 5))
def test_looked_up_potentials_equal_hashing_every_template(data: st.DataObject, n: int, family: str,
                                                            offset: int) -> None:
    def words(pool: list[str] | tuple[str, ...]) -> list[str]:
        return data.draw(st.lists(st.sampled_from(list(pool)), min_size=n, max_size=n))

    tokens = Toks(words(FORMS), words(UPOS_TAGS), words(XPOS))
    rng = np.random.default_rng(n * 7 + offset)
    weights = (rng.normal(size=offset + (1 << 10)) * rng.choice([1e-4, 1.0, 300.0], offset + (1 << 10))).astype(
        np.float16)
    table = upos_table(family, default_second_order([family]), weights, offset)
    assert table is not None and len(table.rest) == 5  # seven of the twelve default templates are UPOS-only
    f = data.draw(st.integers(1, 60))  # any (a, b, c), distances up to n: every direction and bin
    triples = np.stack([rng.integers(0, n + 1, f), rng.integers(1, n + 1, f), rng.integers(0, n + 1, f)])
    got = table.scores(tokens, triples)
    assert got is not None
    np.testing.assert_array_equal(got, _hashed_scores(tokens, family, triples, weights, offset))


def test_no_table_for_wider_weights_other_families_or_no_upos_template() -> None:
    weights = np.random.default_rng(0).normal(size=1 << 10)
    grand = default_second_order(["grand"])
    assert upos_table("grand", grand, weights) is None  # float64: sums would depend on their order
    assert upos_table("grand", grand, weights.astype(np.float32)) is None
    assert upos_table("childseq", default_second_order(["childseq"]), weights.astype(np.float16)) is None
    assert upos_table("grand", [t for t in grand if not upos_only(t)], weights.astype(np.float16)) is None


def test_a_word_outside_the_table_falls_back_to_hashing() -> None:
    weights = np.random.default_rng(1).normal(size=1 << 10).astype(np.float16)
    templates = {"grand": tuple(default_second_order(["grand"])), "sib": tuple(default_second_order(["sib"]))}
    tables = {name: upos_table(name, t, weights) for name, t in templates.items()}
    odd = Toks(["a", "b", "c"], ["NOUN", "_", "VERB"], ["NN", "_", "VB"])  # "_" is no UPOS
    assert tables["sib"] is not None and tables["sib"].scores(odd, np.array([[0], [1], [2]])) is None
    valid = all_arcs(3)
    graph = build_graph(odd, valid, np.zeros((4, 4)), weights, templates, tables=tables)
    plain = build_graph(odd, valid, np.zeros((4, 4)), weights, templates)
    for name in templates:  # hashed as before, with their feature rows
        np.testing.assert_array_equal(trained_features(graph.soft[name]), trained_features(plain.soft[name]))
        np.testing.assert_array_equal(_theta(graph.soft[name]), _theta(plain.soft[name]))


def test_parse_time_graphs_of_the_shipped_default_equal_hashed_ones_and_cannot_train(ewt_dir: Path) -> None:
    parser = BPParser.load(MODEL)
    sentences = read_conllu(ewt_dir / "en_ewt-ud-dev.conllu")[:150]
    tables = parser.upos_tables()
    assert tables is not None and tables["grand"] is not None and tables["sib"] is not None
    looked = {i: g for batch in parser.graph_batches(sentences) for i, g, _ in batch}
    parser.upos_tables = lambda: None  # type: ignore[method-assign]  # the hashing path, as trainers take
    hashed = {i: g for batch in parser.graph_batches(sentences) for i, g, _ in batch}
    assert looked.keys() == hashed.keys() == set(range(len(sentences)))
    for i, graph in looked.items():
        for name in ("grand", "sib"):
            np.testing.assert_array_equal(_theta(graph.soft[name]), _theta(hashed[i].soft[name]))
            assert hashed[i].soft[name].features is not None
            if _theta(graph.soft[name]).size:  # (without factors the hashing path is taken)
                with pytest.raises(ValueError, match="built for parsing"):
                    trained_features(graph.soft[name])


def test_writable_weights_get_no_tables() -> None:
    parser = BPParser.load(MODEL)
    parser.weights = np.array(parser.weights, dtype=np.float64)  # a trainer's copy
    assert parser.upos_tables() is None
