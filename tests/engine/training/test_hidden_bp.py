"""Latent edge clusters inside a BP model's LINK factors (Smith & Smith 2007 §5.1 in Smith & Eisner 2008's BP).

On a loop-free graph (LINK + TREE) BP is exact, so a BP model with K cluster blocks must give the exact
marginals of the first-order hidden-variable model over the same blocks, and its surrogate gradient must equal
that model's exact CLL gradient (``hidden_cll_objective``, itself checked against brute-force enumeration and
finite differences in ``test_hidden_cll.py``). Then the whole command: a second-order model with clusters
trains, records them, loads and parses with the trainer's scores; what cannot hold clusters refuses them."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import cast

import numpy as np
import pytest

from engine.bp_parser import BPParser, load_any
from engine.data.conllu_io import read_conllu
from engine.decode.labeler import CountLabeler
from engine.features.extract import FeatureExtractor
from engine.features.templates import default_first_order
from engine.inference.bp import BPConfig
from engine.kernels.exact import TreeConstraint, exact_marginals
from engine.model.store import ModelError, update_manifest
from engine.parser import FirstOrderParser
from engine.scoring.hidden import cluster_scores, flat_cluster_weights, marginalise_clusters
from engine.text.tag_candidates import TagCandidates
from engine.training.cll import TrainingBatch, hidden_cll_objective
from engine.training.pipeline import TrainOptions, train_model
from engine.training.surrogate import surrogate_gradient_terms
from tests.engine.training.test_hidden_model import TOY

SENTENCES = [
    SimpleNamespace(forms="the old dog barks at cats".split(), upos="DET ADJ NOUN VERB ADP NOUN".split(),
                    xpos="DT JJ NN VBZ IN NNS".split(), heads=np.array([-1, 3, 3, 4, 0, 6, 4])),
    SimpleNamespace(forms="a cat sleeps here now .".split(), upos="DET NOUN VERB ADV ADV PUNCT".split(),
                    xpos="DT NN VBZ RB RB .".split(), heads=np.array([-1, 2, 3, 0, 3, 3, 3])),
]
DIM = 1 << 11


def _clustered(clusters: int, tree: str, seed: int = 0, second: int = 64) -> BPParser:
    """A BP model with ``clusters`` random first-order blocks, no higher-order factors and no pruner: its graph
    is LINK + TREE, where BP is exact."""
    extractor = FeatureExtractor(tuple(default_first_order()), DIM)
    rng = np.random.default_rng(seed)
    weights = rng.normal(scale=0.3, size=clusters * DIM + second)
    weights[:clusters * DIM:DIM] = 0.0  # the null feature of every block
    return BPParser(extractor, weights, TreeConstraint(tree, "single"), CountLabeler(), {}, clusters=clusters)


def _exact(parser: BPParser, sentences: list) -> tuple[np.ndarray, np.ndarray]:
    """The first-order hidden-variable model over the parser's blocks: marginalised scores and exact marginals."""
    assert parser.clusters is not None
    blocks = parser.weights[:parser.first_dim].reshape(parser.clusters, parser.extractor.dim)
    scores, _ = marginalise_clusters(cluster_scores(blocks, parser.extractor.extract(sentences)))
    return scores, exact_marginals(scores, parser.constraint)[1]


@pytest.mark.parametrize("tree", ["nonprojective", "projective"])
@pytest.mark.parametrize("clusters", [2, 3])
def test_bp_over_link_and_tree_gives_the_exact_marginals_of_the_hidden_model(tree: str, clusters: int) -> None:
    parser = _clustered(clusters, tree, seed=clusters)
    scores, exact = _exact(parser, SENTENCES)
    link = parser.link_and_prune_scores(SENTENCES)  # the fused scorer's K blocks, summed out
    assert len(link) == 1
    np.testing.assert_allclose(link[0], scores, rtol=0, atol=1e-9)
    for j, parsed in enumerate(parser.parse(SENTENCES, BPConfig(max_iterations=5))):
        np.testing.assert_allclose(parsed.marginals, exact[j], rtol=0, atol=1e-8)


@pytest.mark.parametrize("tree", ["nonprojective", "projective"])
def test_surrogate_gradient_with_clusters_is_the_exact_hidden_gradient(tree: str) -> None:
    """Block z of the flat gradient gets (b - y) p(z | edge) f: on LINK + TREE it is ``hidden_cll_objective``'s."""
    clusters = 3
    parser = _clustered(clusters, tree, seed=7)
    blocks = parser.weights[:parser.first_dim].reshape(clusters, DIM)
    for graph_batch in parser.graph_batches(SENTENCES, gold=True):
        for i, graph, _ in graph_batch:
            assert graph.link_posterior is not None and graph.link_posterior.shape[0] == clusters
            loss, idx, val = surrogate_gradient_terms(graph, SENTENCES[i].heads, BPConfig(max_iterations=5),
                                                      dim=DIM)
            grad = np.bincount(np.concatenate(idx), weights=np.concatenate(val), minlength=len(parser.weights))
            grad[:parser.first_dim:DIM] = 0.0
            batch = TrainingBatch(parser.extractor.extract([SENTENCES[i]]), SENTENCES[i].heads[None])
            nll, exact = hidden_cll_objective(blocks, batch, parser.constraint)
            np.testing.assert_allclose(grad[:parser.first_dim].reshape(clusters, DIM), exact, rtol=0, atol=1e-9)
            assert not grad[parser.first_dim:].any()  # no higher-order factors, nothing for their block
            # the surrogate's loss is -sum log b(gold head); the CLL's is -log p(tree): both positive here
            assert loss > 0 and nll > 0
            with pytest.raises(ValueError, match="feature dimension"):
                surrogate_gradient_terms(graph, SENTENCES[i].heads, BPConfig(max_iterations=5))


def test_clusters_grow_from_the_pruner_with_noise() -> None:
    w = np.random.default_rng(0).normal(size=DIM)
    w[0] = 0.0
    flat = flat_cluster_weights(w, 3, seed=4)
    blocks = flat.reshape(3, DIM)
    assert (blocks[:, 0] == 0).all()
    assert np.abs(blocks - w).max() < 0.1 and not np.array_equal(blocks[0], blocks[1])
    np.testing.assert_array_equal(flat, flat_cluster_weights(w, 3, seed=4))  # the seed fixes the noise
    extractor = FeatureExtractor(tuple(default_first_order()), DIM)
    first = FirstOrderParser(extractor, w, TreeConstraint(), CountLabeler(), {})
    model = BPParser.from_first_order(first, {}, 32, prune=True, clusters=3, seed=4)
    np.testing.assert_array_equal(model.weights, np.concatenate([flat, np.zeros(32)]))
    assert model.first_dim == 3 * DIM and model.pruner is not None and np.array_equal(model.pruner, w)
    with pytest.raises(ValueError, match="at least 2"):
        BPParser.from_first_order(first, {}, 32, clusters=1)


def test_a_second_order_model_with_clusters_trains_saves_loads_and_parses(tmp_path: Path) -> None:
    data = tmp_path / "toy.conllu"
    data.write_text(TOY * 6, encoding="utf-8")
    out = tmp_path / "hidden-o2"
    options = TrainOptions(order=2, hidden_clusters=2, epochs=2, dim=4099, second_dim=1031,
                           components=("parser",), seed=3)
    summary = train_model(data, data, out, options, progress=False)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["hidden"] == {"clusters": 2}
    assert manifest["training"]["hidden"]["clusters"] == 2 and manifest["training"]["hidden"]["init_seed"] == 3
    parser = load_any(out)
    assert isinstance(parser, BPParser) and parser.clusters == 2 and parser.first_dim == 2 * 4099
    assert len(parser.weights) == 2 * 4099 + 1031
    blocks = np.asarray(parser.weights[:parser.first_dim], dtype=np.float64).reshape(2, 4099)
    assert not np.array_equal(blocks[0], blocks[1])
    sentences = read_conllu(data)
    parsed = parser.parse(sentences)
    uas = 100.0 * np.mean(np.concatenate([p.heads[1:] == s.heads[1:] for s, p in zip(sentences, parsed, strict=True)]))
    assert summary["dev"]["uas"] == pytest.approx(uas)
    # the stored model's LINK potentials are the marginalised scores of its blocks
    for sent, link in zip(sentences[:2], [parser.link_and_prune_scores([s])[0][0] for s in sentences[:2]],
                          strict=True):
        expected, _ = marginalise_clusters(cluster_scores(blocks, parser.extractor.extract([sent])))
        finite = np.isfinite(expected[0])
        np.testing.assert_allclose(link[finite], expected[0][finite], rtol=0, atol=1e-9)
    graph = next(parser.graphs(sentences[:1]))[1]
    with pytest.raises(ValueError, match="latent edge clusters"):  # refused before the candidates are read
        parser.joint_graph(sentences[0], graph, cast(TagCandidates, None))
    update_manifest(out, {"hidden": {"clusters": 3}})  # 3 blocks of 4099 do not fit in the stored weights
    with pytest.raises(ModelError, match="cluster block"):
        load_any(out)


def test_what_cannot_hold_clusters_refuses_them(tmp_path: Path) -> None:
    from engine.training.average import average_parsers
    from engine.training.cll import TrainConfig
    from engine.training.erma import ErmaConfig, train_erma
    from engine.training.joint import train_joint

    parser = _clustered(2, "nonprojective")
    with pytest.raises(ValueError, match="latent edge clusters"):
        train_erma(parser, SENTENCES, ErmaConfig(epochs=1), BPConfig(max_iterations=2), progress=False)
    with pytest.raises(ValueError, match="latent edge clusters"):
        train_joint(parser, SENTENCES, [([], [])] * 2, [None] * 2, TrainConfig(), BPConfig(), progress=False)
    for name in ("a", "b"):
        parser.save(tmp_path / name)
    with pytest.raises(ModelError, match="latent edge clusters"):
        average_parsers([tmp_path / "a", tmp_path / "b"])
