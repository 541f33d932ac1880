"""Second-order features, arc pruning, and the surrogate-CLL gradient."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from engine.features.extract import FeatureExtractor
from engine.features.second_order import (
    TripleTemplate,
    default_second_order,
    extract_triples,
    template_attributes,
    triple_tables,
)
from engine.features.templates import ArcTemplate
from engine.graph.build import build_graph
from engine.graph.pairwise import grand_arcs
from engine.hashing import hash_string, mix
from engine.inference.bp import BPConfig
from engine.kernels.exact import TreeConstraint
from engine.scoring.potentials import arc_scores
from engine.scoring.pruning import PruneConfig, prune_arcs
from engine.training.cll import TrainingBatch, cll_objective
from engine.training.surrogate import surrogate_gradient_terms

SENT = SimpleNamespace(forms="the dog barks loudly".split(), upos="DET NOUN VERB ADV".split(),
                       xpos="DT NN VBZ RB".split(), heads=np.array([-1, 2, 3, 0, 3]))


def test_triple_features() -> None:
    templates = default_second_order(["grand"])
    assert all(TripleTemplate.parse(t.name) == t for t in templates)
    valid = np.ones((5, 5), dtype=bool)
    valid[:, 0] = False
    np.fill_diagonal(valid, False)
    arcs = grand_arcs(4, valid)
    triples = np.stack([arcs[0], arcs[1], arcs[3]])
    feats = extract_triples(SENT, templates, triples, 1 << 16)
    assert feats.shape == (triples.shape[1], len(templates))
    assert (feats >= 1).all() and (feats < 1 << 16).all()
    np.testing.assert_array_equal(feats, extract_triples(SENT, templates, triples, 1 << 16))
    # the direction context tells g->p->c apart from its mirror image
    t = TripleTemplate("grand", ("upos",), ("upos",), ("upos",), "dir")
    one = extract_triples(SENT, [t], np.array([[2], [3], [4]]), 1 << 20)
    two = extract_triples(SENT, [t], np.array([[4], [3], [2]]), 1 << 20)
    assert one[0, 0] != two[0, 0]
    with pytest.raises(ValueError, match="family"):
        TripleTemplate("cousin", ("upos",), (), ())


def test_pruning_keeps_best_and_bounds_heads() -> None:
    rng = np.random.default_rng(0)
    n = 30
    marg = rng.dirichlet(np.full(n + 1, 0.3), size=n).T  # (n+1, n) columns sum to 1
    full = np.zeros((n + 1, n + 1))
    full[:, 1:] = marg
    keep = np.array([-1, *rng.integers(0, n + 1, size=n)])
    keep[1:][keep[1:] == np.arange(1, n + 1)] = 0
    valid = prune_arcs(full, PruneConfig(ratio=1e-4, max_heads=5), keep)
    assert (valid[:, 0] == 0).all() and not valid[np.arange(n + 1), np.arange(n + 1)].any()
    assert (valid[:, 1:].sum(axis=0) <= 6).all()  # 5 plus a forced one
    best = full[:, 1:].argmax(axis=0)
    assert valid[best, np.arange(1, n + 1)].all()
    assert valid[keep[1:], np.arange(1, n + 1)].all()
    strict = prune_arcs(full, PruneConfig(ratio=0.5, max_heads=10))
    assert (strict[:, 1:][full[:, 1:] < 0.5 * full[:, 1:].max(axis=0)] == 0).all()


@pytest.mark.parametrize("tree", ["nonprojective", "projective"])
def test_surrogate_gradient_is_exact_for_first_order_graphs(tree: str) -> None:
    """With only LINK + TREE, BP is exact, so the surrogate gradient equals the exact CLL gradient."""
    fx = FeatureExtractor((ArcTemplate(("upos",), ("upos",), "dist"), ArcTemplate(("form",), ("upos",), "dir")), 128)
    rng = np.random.default_rng(1)
    w = rng.normal(size=128)
    w[0] = 0.0
    constraint = TreeConstraint(tree, "single")
    feats = fx.extract([SENT])
    scores = arc_scores(w, feats)[0]
    valid = np.isfinite(scores)
    graph = build_graph(SENT, valid, scores, w, {}, constraint="ptree" if tree == "projective" else "tree")
    graph.link_features = feats[0][graph.valid]  # the kept arcs' rows, as graph_batches gives them
    loss, idx, val = surrogate_gradient_terms(graph, SENT.heads, BPConfig(max_iterations=1))
    grad = np.bincount(np.concatenate(idx), weights=np.concatenate(val), minlength=128)
    grad[0] = 0.0
    nll, exact = cll_objective(w, TrainingBatch(feats, SENT.heads[None]), constraint)
    np.testing.assert_allclose(grad, exact, atol=1e-10)
    assert loss > 0


@pytest.mark.parametrize("family", ["grand", "sib", "childseq", "nocross"])
def test_gold_events_score_the_gold_tree(family: str) -> None:
    """Sum over feature rows of (row weight x gold event) equals the family's log-potential of the gold
    tree, so ``expected - gold`` is the right gradient weight for every higher-order family."""
    sent = SimpleNamespace(forms="a b c d e".split(), upos="DET NOUN VERB ADP NOUN".split(),
                           xpos="DT NN VBZ IN NN".split(), heads=np.array([-1, 2, 3, 0, 5, 2]))
    n = 5
    valid = np.ones((n + 1, n + 1), dtype=bool)
    valid[:, 0] = False
    np.fill_diagonal(valid, False)
    rng = np.random.default_rng(3)
    weights = rng.normal(size=1 << 12)
    graph = build_graph(sent, valid, np.zeros((n + 1, n + 1)), weights,
                        {family: tuple(default_second_order([family]))}, offset=1 << 10)
    terms = graph.soft[family]
    row_weight = weights[terms.features].sum(axis=1)
    y = np.zeros((n + 1, n + 1), dtype=bool)
    y[sent.heads[1:], np.arange(1, n + 1)] = True
    assert float(row_weight @ terms.gold(sent.heads)) == pytest.approx(terms.family.log_potential(y))
    incoming = tuple(np.zeros_like(g) for g in terms.family.gather(np.zeros((n + 1, n + 1))))
    expected = terms.expected(incoming)
    assert expected.shape == (len(terms.features),) and ((expected >= 0) & (expected <= 1 + 1e-12)).all()


def test_triple_hashing_follows_each_template_in_turn() -> None:
    """The compiled kernel advances all templates together (``triple_row``); each template's index must still be
    its seed mixed with role a's, b's and c's attribute codes in order, then its context code (here computed one
    template at a time in numpy), for roles of different widths and every context kind."""
    templates = [TripleTemplate("sib", ("upos", "lower"), ("xpos",), ("upos",), "dist"),
                 TripleTemplate("sib", (), ("lower", "upos", "xpos"), ("shape",), "dir"),
                 TripleTemplate("sib", ("xpos",), (), ("lower", "upos"), "none"),
                 TripleTemplate("sib", ("upos",), ("upos",), ("upos",), "dir")]
    rng = np.random.default_rng(3)
    triples = np.stack([rng.integers(0, 5, 40), rng.integers(1, 5, 40), rng.integers(0, 5, 40)])
    dim = 1 << 20
    got = extract_triples(SENT, templates, triples, dim)
    codes, _, _, _, positions, ctx = triple_tables(SENT, templates, triples)
    attrs = template_attributes(templates)
    kinds = {"none": 0, "dir": 1, "dist": 2}
    for k, t in enumerate(templates):
        for i in range(triples.shape[1]):
            x = np.uint64(hash_string(t.name))
            for role, names in enumerate((t.a, t.b, t.c)):
                for name in names:
                    x = mix(x, codes[positions[role, i], attrs.index(name)])
            if t.context != "none":
                x = mix(x, ctx[kinds[t.context], i])
            assert got[i, k] == 1 + int(x) % (dim - 1)


def test_training_graphs_from_remembered_pruning_equal_those_pruned_again() -> None:
    """A trainer finds each batch's pruned arcs once (``gold_pruned``) and passes them back as ``kept``: the
    graphs are those ``graph_batches(gold=True)`` builds by running the pruner, and a graph's first-order
    features are its kept arcs' rows of ``extract`` (pruned arcs, which have no gradient, left out)."""
    from engine.bp_parser import BPParser
    from engine.decode.labeler import CountLabeler
    from engine.features.templates import default_first_order
    from engine.parser import FirstOrderParser

    rng = np.random.default_rng(5)
    words, tags = ["the", "dog", "barks", "at", "a", "cat", "loudly"], ["DET", "NOUN", "VERB", "ADP", "ADV"]
    sentences = []
    for n in (6, 6, 9, 6, 9):
        heads = np.array([-1, *[int(rng.integers(0, m)) for m in range(1, n + 1)]])  # each word heads to its left
        sentences.append(SimpleNamespace(forms=list(rng.choice(words, n)), upos=list(rng.choice(tags, n)),
                                         xpos=list(rng.choice(["NN", "VB"], n)), heads=heads))
    fx = FeatureExtractor(tuple(default_first_order()), 1 << 10)
    first = FirstOrderParser(fx, rng.normal(size=fx.dim), TreeConstraint(), CountLabeler(), {})
    parser = BPParser.from_first_order(first, {"sib": tuple(default_second_order(["sib"]))}, 1 << 10, prune=True)
    parser.weights = rng.normal(size=len(parser.weights))
    parser.prune = PruneConfig(ratio=0.05, max_heads=3)  # prunes these sentences' arcs
    kept = parser.gold_pruned(sentences, batch_size=8)
    again = [g for batch in parser.graph_batches(sentences, gold=True, batch_size=8) for g in batch]
    remembered = [g for batch in parser.graph_batches(sentences, gold=True, batch_size=8, kept=kept) for g in batch]
    pruned_some = False
    for (i, graph, keep), (j, other, other_keep) in zip(again, remembered, strict=True):
        assert i == j and np.array_equal(keep, other_keep) and np.array_equal(graph.valid, other.valid)
        assert np.array_equal(graph.valid, kept[i][1]) and graph.valid[sentences[i].heads[1:], np.arange(1, 1 + len(
            sentences[i].forms))].all()
        assert np.array_equal(graph.link.theta, other.link.theta)
        full = fx.extract([sentences[i]])[0]
        assert np.array_equal(graph.link_features, full[graph.valid])
        assert np.array_equal(other.link_features, full[graph.valid])
        pruned_some |= bool(graph.valid.sum() < len(sentences[i].forms) ** 2)
    assert pruned_some
