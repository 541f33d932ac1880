"""The shipped default model loads, is small, records its provenance, and parses EWT dev sensibly."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from engine.data.conllu_io import read_conllu
from engine.evaluation.metrics import attachment_scores
from engine.parser import FirstOrderParser

MODEL = Path(__file__).resolve().parents[2] / "models" / "en_ewt-o1"


def test_shipped_model_manifest() -> None:
    size = sum(p.stat().st_size for p in MODEL.iterdir())
    assert size < 50 * 2**20
    parser = FirstOrderParser.load(MODEL)
    man = parser.manifest
    assert parser.constraint.tree == "nonprojective" and parser.constraint.root == "single"
    assert len(man["training"]["train_sha256"]) == 64
    assert man["training"]["train_file"] == "en_ewt-ud-train.conllu"
    assert man["metrics"]["dev"]["uas"] >= 85.0


def test_shipped_model_parses_ewt_dev(ewt_dir: Path) -> None:
    gold = read_conllu(ewt_dir / "en_ewt-ud-dev.conllu")[:300]
    parser = FirstOrderParser.load(MODEL)
    parsed = parser.parse(gold)
    for p in parsed:
        np.testing.assert_allclose(p.marginals[:, 1:].sum(axis=0), 1.0, atol=1e-8)
        assert ((p.head_probs > 0) & (p.head_probs <= 1)).all()
    scores = attachment_scores(gold, [p.heads for p in parsed], [p.deprels for p in parsed],
                               [p.head_probs for p in parsed])
    assert scores["uas"] > 80.0  # the full dev figure is in docs/results/; this guards against regressions
    assert scores["ece"] < 0.05


PIPELINE = Path(__file__).resolve().parents[2] / "models" / "en_ewt-pipeline"


JOINT = PIPELINE.parent / "en_ewt-joint"


def test_default_model_is_the_joint_pipeline_and_the_old_one_stays_by_name() -> None:
    from engine.pipeline import Pipeline

    default = PIPELINE.parent / "en_ewt"
    assert default.is_symlink() and default.resolve() == JOINT.resolve()
    for directory in (JOINT, PIPELINE):
        assert sum(p.stat().st_size for p in directory.iterdir()) < 120 * 2**20  # half-precision arrays
    pipeline = Pipeline.load(default)
    assert pipeline.components == ["tokenizer", "tagger", "parser", "labeler", "lemmatizer", "morph"]
    # the parser is the mean of several seeds' weights (engine average); every source records its training
    # data, and the tokenizer, tagger and labeller come from a pipeline trained on EWT train
    training = pipeline.manifest["training"]
    sources = training.get("averaged", [training])
    assert all(len(source["train_sha256"]) == 64 and len(source.get("weights_sha256", "x" * 64)) == 64
               for source in sources)
    origin = training.get("components_from", training)
    assert origin["train_file"] == "en_ewt-ud-train.conllu" and len(origin["train_sha256"]) == 64
    # tags are variables of the parser's graph (issue 23), with the tag calibration fitted for them
    assert pipeline.default_tag_average == "joint" and pipeline.default_tag_samples == 0
    assert pipeline.manifest["inference"]["tag_candidates"] == {"k": 3, "min_marginal": 0.1}
    assert pipeline.default_powers["upos_power"] != 1.0
    assert pipeline.labeler.info["tag_samples"] == 1  # trained on one tag-sample copy of each sentence too
    assert pipeline.parser.constraint.tree == "nonprojective" and pipeline.parser.constraint.root == "single"
    assert pipeline.manifest["metrics"]["dev"]["upos"] >= 95.0  # recorded by `average --dev`, predicted tags
    old = Pipeline.load(PIPELINE)  # the previous default, by name
    assert old.default_tag_average == "potentials" and old.default_tag_samples == 16


def test_default_pipeline_parses_raw_text_end_to_end() -> None:
    from engine.kernels.mst import is_tree
    from engine.pipeline import Pipeline

    pipeline = Pipeline.load(PIPELINE)
    sentences = pipeline.tokenize("I can't believe it's already November. The parser doesn't mind, though!")
    assert [s.n for s in sentences] == [9, 8]  # can't -> ca n't, it's -> it 's, doesn't -> does n't
    assert pipeline.tag(sentences) == [0, 1]
    assert sentences[0].upos[:4] == ["PRON", "AUX", "PART", "VERB"]
    for s, parsed in zip(sentences, pipeline.parser.parse(sentences), strict=True):
        assert is_tree(parsed.heads) and len(parsed.deprels) == s.n
        assert ((parsed.head_probs > 0) & (parsed.head_probs <= 1)).all()
        np.testing.assert_allclose(parsed.marginals[:, 1:].sum(axis=0), 1.0, atol=1e-6)
    # LEMMA and FEATS (the analysis EWT gives these words; "ca"/"n't" lemmatised to can/not, "'s" to be)
    parsed = pipeline.parser.parse(sentences)
    (lemmas, feats, probs), _ = pipeline.analyse(sentences, [p.deprels for p in parsed])
    assert lemmas == ["I", "can", "not", "believe", "it", "be", "already", "November", "."]
    assert feats[0] == "Case=Nom|Number=Sing|Person=1|PronType=Prs" and feats[2] == "Polarity=Neg"
    assert probs is not None and all(0 < x <= 1 for x in probs)


def test_the_shipped_constituency_model_is_the_documented_one() -> None:
    """``models/ptb-epic``: the factored latent PCFG trained on wsj_0001-0159 of the PTB sample, best epoch on
    wsj_0160-0179 (issue 26), arrays + manifest only, small; it parses a sentence into a tree of its words."""
    from engine.constituency.commands import load
    from engine.model.store import read_manifest

    path = Path(__file__).resolve().parents[2] / "models" / "ptb-epic"
    manifest = read_manifest(path)
    assert manifest["formalism"] == "constituency" and manifest["model"] == "latent-pcfg"
    assert manifest["name"] == "ptb-epic"
    assert [f["file"] for f in manifest["training"]["train_files"]] == [f"wsj_{i:04d}.mrg" for i in range(1, 160)]
    assert [f["file"] for f in manifest["training"]["dev_files"]] == [f"wsj_{i:04d}.mrg" for i in range(160, 180)]
    assert sum(p.stat().st_size for p in path.iterdir()) < 12 * 2**20
    assert not [p for p in path.iterdir() if p.suffix not in (".npy", ".json")]
    words = "The company said its profit rose 5 % in the third quarter .".split()
    assert load(path).parse(words).leaves() == words
