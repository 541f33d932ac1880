"""A first-order model with latent edge clusters end to end: ``--hidden-clusters K`` is checked, trained,
recorded in the manifest, read back at load time, and parsing sums the clusters out of the same scores the
trainer's objective used."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from engine.bp_parser import BPParser, load_any
from engine.data.conllu_io import read_conllu
from engine.kernels.exact import exact_marginals
from engine.model.store import ModelError, update_manifest
from engine.parser import FirstOrderParser
from engine.scoring.hidden import cluster_scores, marginalise_clusters
from engine.training.pipeline import TrainOptions, TrainOptionsError, train_model

TOY = """# sent_id = 1
1\tthe\tthe\tDET\tDT\t_\t2\tdet\t_\t_
2\tdog\tdog\tNOUN\tNN\t_\t3\tnsubj\t_\t_
3\tbarks\tbark\tVERB\tVBZ\t_\t0\troot\t_\t_
4\t.\t.\tPUNCT\t.\t_\t3\tpunct\t_\t_

# sent_id = 2
1\tcats\tcat\tNOUN\tNNS\t_\t2\tnsubj\t_\t_
2\tsleep\tsleep\tVERB\tVBP\t_\t0\troot\t_\t_

"""


@pytest.mark.parametrize("bad", [
    {"hidden_clusters": 0},
    {"hidden_clusters": 2, "order": 2, "objective": "l2"},
    {"hidden_clusters": 2, "seeds": 2},
    {"hidden_clusters": 2, "objective": "l2"},
])
def test_hidden_cluster_options_are_checked(bad: dict) -> None:
    with pytest.raises(TrainOptionsError, match="hidden_clusters"):
        TrainOptions(**bad)


def test_a_clustered_model_trains_saves_loads_and_parses(tmp_path: Path) -> None:
    data = tmp_path / "toy.conllu"
    data.write_text(TOY * 6, encoding="utf-8")
    out = tmp_path / "hidden"
    options = TrainOptions(hidden_clusters=3, epochs=2, dim=4099, components=("parser",), seed=5)
    summary = train_model(data, data, out, options, progress=False)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["hidden"] == {"clusters": 3}
    assert manifest["training"]["hidden"]["clusters"] == 3 and manifest["training"]["hidden"]["init_seed"] == 5
    parser = load_any(out)
    assert isinstance(parser, FirstOrderParser) and parser.clusters == 3
    assert parser.weights.shape == (3, 4099) and not np.array_equal(parser.weights[0], parser.weights[1])
    sentences = read_conllu(data)[:2]
    scorer = parser._scorer
    parsed = parser.parse(sentences)
    assert scorer is not None and parser._scorer is scorer  # the stored table serves every parse
    for sent, p in zip(sentences, parsed, strict=True):
        features = parser.extractor.extract([sent])
        scores, _ = marginalise_clusters(cluster_scores(parser.weights, features))
        _, marg = exact_marginals(scores, parser.constraint)
        assert np.allclose(p.marginals, marg[0], atol=1e-9)
        assert np.allclose(p.marginals.sum(axis=0)[1:], 1.0)
    assert summary["dev"]["uas"] == pytest.approx(100.0 * np.mean(np.concatenate(
        [p.heads[1:] == s.heads[1:] for s, p in zip(read_conllu(data), parser.parse(read_conllu(data)), strict=True)])))
    with pytest.raises(ValueError, match="latent edge clusters"):
        BPParser.from_first_order(parser)


def test_a_manifest_that_disagrees_with_the_weights_is_refused(tmp_path: Path) -> None:
    data = tmp_path / "toy.conllu"
    data.write_text(TOY * 3, encoding="utf-8")
    out = tmp_path / "hidden"
    train_model(data, None, out, TrainOptions(hidden_clusters=2, epochs=1, dim=257, components=("parser",)),
                progress=False)
    update_manifest(out, {"hidden": {"clusters": 4}})
    with pytest.raises(ModelError, match=r"weights have shape \(2, 257\)"):
        load_any(out)
    update_manifest(out, {"hidden": {"clusters": "two"}})
    with pytest.raises(ModelError, match="hidden.clusters"):
        load_any(out)


def test_one_cluster_parses_byte_identically_to_the_plain_model(tmp_path: Path) -> None:
    from engine.decode.labeler import CountLabeler
    from engine.features.extract import FeatureExtractor
    from engine.features.templates import default_first_order
    from engine.kernels.exact import TreeConstraint

    data = tmp_path / "toy.conllu"
    data.write_text(TOY, encoding="utf-8")
    sentences = read_conllu(data)
    fx = FeatureExtractor(tuple(default_first_order()), 1 << 12)
    w = np.random.default_rng(0).normal(size=fx.dim)
    w[0] = 0.0
    w.flags.writeable = False
    one = w[None].copy()
    one.flags.writeable = False
    labeler = CountLabeler.fit(sentences)
    plain = FirstOrderParser(fx, w, TreeConstraint(), labeler, {}).parse(sentences)
    hidden = FirstOrderParser(fx, one, TreeConstraint(), labeler, {}).parse(sentences)
    for a, b in zip(plain, hidden, strict=True):
        assert a.marginals.tobytes() == b.marginals.tobytes() and a.log_partition == b.log_partition
        assert a.heads.tolist() == b.heads.tolist() and a.deprels == b.deprels
