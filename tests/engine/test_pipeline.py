"""The whole pipeline as one model: train tokenizer + tagger + parser + labeler on a small EWT sample, save,
load, and run it from raw text, from CoNLL-U without tags, and through the CLI's predicted-tag and from-text
evaluations."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from engine.bp_parser import BPParser
from engine.cli import main
from engine.data.conllu_io import read_conllu
from engine.decode.tag_marginal import parse_over_tag_samples, retagged
from engine.kernels.mbr import mbr_decode
from engine.kernels.mst import is_tree
from engine.model.store import ModelError
from engine.pipeline import Pipeline
from engine.training.pipeline import TrainOptions, TrainOptionsError


@pytest.mark.slow
def test_pipeline_trains_every_component(trained: tuple[Path, Path, dict]) -> None:
    model, _, summary = trained
    assert sorted(summary["components"]) == sorted(["parser", "tokenizer", "tagger", "labeler", "lemmatizer", "morph"])
    assert summary["dev"]["upos"] > 70 and summary["dev"]["uas"] > 40
    pipeline = Pipeline.load(model)
    assert pipeline.components == ["tokenizer", "tagger", "parser", "labeler", "lemmatizer", "morph"]
    manifest = json.loads((model / "manifest.json").read_text())
    assert set(manifest["components"]) == {"tokenizer", "tagger", "labeler", "lemmatizer", "morph"}
    assert all(name.split(".")[0] in {"weights", "tokenizer", "tagger", "labeler", "lemmatizer", "morph"}
               for name in manifest["arrays"])
    assert manifest["arrays"]["weights"]["dtype"] == "float16"  # a pipeline is stored at half precision
    # the model's default tag samples, and its dev scores measured with them
    assert manifest["inference"] == {"tag_samples": 2} and pipeline.default_tag_samples == 2
    assert summary["dev"]["tag_samples"] == 2


@pytest.mark.slow
def test_half_precision_pipeline_parses_like_full_precision(trained: tuple[Path, Path, dict], tmp_path: Path) -> None:
    model, dev, _ = trained
    pipeline = Pipeline.load(model)
    rng = np.random.default_rng(0)  # weights with more significant bits than float16 keeps
    pipeline.parser.weights = pipeline.parser.weights * (1.0 + 1e-2 * rng.normal(size=pipeline.parser.weights.shape))
    pipeline.save(tmp_path / "full", half=False)
    pipeline.save(tmp_path / "half")
    kinds = {name: json.loads((tmp_path / name / "manifest.json").read_text())["arrays"]["weights"]["dtype"]
             for name in ("full", "half")}
    assert kinds == {"full": "float32", "half": "float16"}
    sentences = read_conllu(dev)
    full, half = (Pipeline.load(tmp_path / name) for name in ("full", "half"))
    assert not np.array_equal(full.parser.weights, half.parser.weights)
    a, b = full.parser.parse(sentences), half.parser.parse(sentences)
    same = np.mean([np.array_equal(x.heads, y.heads) for x, y in zip(a, b, strict=True)])
    assert same >= 0.95
    assert max(float(np.abs(x.marginals - y.marginals).max()) for x, y in zip(a, b, strict=True)) < 0.05


@pytest.mark.slow
def test_pipeline_parses_raw_text(trained: tuple[Path, Path, dict]) -> None:
    pipeline = Pipeline.load(trained[0])
    sentences = pipeline.tokenize("The dog barked at the mailman. He ran away!")
    assert len(sentences) >= 1 and sum(s.n for s in sentences) >= 10
    assert pipeline.tag(sentences) == list(range(len(sentences)))
    assert all(u != "_" for s in sentences for u in s.upos)
    for s, p in zip(sentences, pipeline.parser.parse(sentences), strict=True):
        assert is_tree(p.heads) and len(p.deprels) == s.n and all(p.deprels)
        assert np.all((p.label_probs > 0) & (p.label_probs <= 1))


def test_pipeline_without_components_still_loads(tmp_path: Path) -> None:
    repo_model = Path(__file__).resolve().parents[2] / "models" / "en_ewt-o1"
    pipeline = Pipeline.load(repo_model)
    assert pipeline.components == ["parser"] and pipeline.tokenizer is None
    with pytest.raises(Exception, match="no tokenizer"):
        pipeline.tokenize("Hello there.")


def test_pipeline_options_reject_a_missing_parser() -> None:
    with pytest.raises(TrainOptionsError):
        TrainOptions(components=("tagger",))
    with pytest.raises(TrainOptionsError):
        TrainOptions(components=("parser", "spellchecker"))


@pytest.mark.slow
def test_cli_parse_text_and_untagged_conllu(trained: tuple[Path, Path, dict], tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    model, dev, _ = trained
    out = tmp_path / "out.conllu"
    assert main(["parse", "--model", str(model), "--text", "Dogs bark. Cats sleep all day.", "--output",
                 str(out)]) == 0
    parsed = read_conllu(out)
    assert len(parsed) >= 1 and all(s.heads is not None and all(d != "_" for d in s.deprels) for s in parsed)
    assert all(u != "_" for s in parsed for u in s.upos)
    untagged = tmp_path / "untagged.conllu"
    text = "1\tDogs\t_\t_\t_\t_\t_\t_\t_\t_\n2\tbark\t_\t_\t_\t_\t_\t_\t_\t_\n\n"
    untagged.write_text(text, encoding="utf-8")
    assert main(["parse", "--model", str(model), "--input", str(untagged), "--output", str(out)]) == 0
    (s,) = read_conllu(out)
    assert s.forms == ["Dogs", "bark"] and "_" not in s.upos and all(s.deprels)
    assert all(x != "_" for x in s.lemmas + s.feats[:1])  # LEMMA and FEATS filled where "_"


def test_cli_parse_keeps_given_lemmas_unless_retagged(trained: tuple[Path, Path, dict], tmp_path: Path) -> None:
    model, _, _ = trained
    given = tmp_path / "given.conllu"
    # sentence 1 has LEMMA and FEATS (its "_" are values: "bark" has no features), sentence 2 neither
    given.write_text("1\tdogs\tDOGGY\tNOUN\tNNS\tFoo=Bar\t_\t_\t_\t_\n2\tbark\t_\tVERB\tVBP\t_\t_\t_\t_\t_\n\n"
                     "1\tdogs\t_\tNOUN\tNNS\t_\t_\t_\t_\t_\n2\tbark\t_\tVERB\tVBP\t_\t_\t_\t_\t_\n\n", encoding="utf-8")
    out = tmp_path / "out.conllu"
    assert main(["parse", "--model", str(model), "--input", str(given), "--output", str(out)]) == 0
    first, second = read_conllu(out)
    assert first.lemmas == ["DOGGY", "_"] and first.feats == ["Foo=Bar", "_"]
    assert second.lemmas == ["dog", "bark"] and second.feats[0] == "Number=Plur" and second.feats[1] != "_"
    assert main(["parse", "--model", str(model), "--input", str(given), "--output", str(out), "--retag"]) == 0
    first, _ = read_conllu(out)
    assert first.lemmas == ["dog", "bark"] and first.feats[0] == "Number=Plur"


def test_model_without_morphology_writes_underscores(trained: tuple[Path, Path, dict], tmp_path: Path) -> None:
    pipeline = Pipeline.load(trained[0])
    pipeline.lemmatizer = pipeline.morph = None
    pipeline.save(tmp_path / "old")
    out = tmp_path / "out.conllu"
    assert main(["parse", "--model", str(tmp_path / "old"), "--text", "Dogs bark.", "--output", str(out)]) == 0
    assert all(x == "_" for s in read_conllu(out) for x in s.lemmas + s.feats)


@pytest.mark.slow
def test_cli_evaluate_predicted_tags_and_from_text(trained: tuple[Path, Path, dict],
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    model, dev, _ = trained
    assert main(["evaluate", "--model", str(model), "--data", str(dev), "--tags", "predicted", "--json"]) == 0
    scores = json.loads(capsys.readouterr().out)
    assert scores["tags"] == "predicted" and 70 < scores["upos"] <= 100 and scores["uas"] > 40
    assert 70 < scores["lemmas"] <= 100 and 50 < scores["ufeats"] <= 100
    assert 0 < scores["mlas"] <= scores["clas"] <= 100 and 0 < scores["blex"] <= scores["clas"]
    assert main(["evaluate", "--model", str(model), "--data", str(dev), "--from-text", "--json"]) == 0
    ud = json.loads(capsys.readouterr().out)
    assert ud["tokens"] > 90 and ud["words"] > 90 and 0 < ud["sentences"] <= 100
    assert 0 < ud["las"] <= ud["uas"] <= 100 and ud["gold_words"] == sum(s.n for s in read_conllu(dev))
    assert ud["lemmas"] > 70 and ud["ufeats"] > 50 and 0 < ud["mlas"] <= 100 and 0 < ud["blex"] <= 100


@pytest.mark.slow
def test_marginals_averaged_over_tag_samples(trained: tuple[Path, Path, dict]) -> None:
    """``parse_over_tag_samples``: the mean of the parses under the best tags and each sample, its MBR tree
    and head probabilities; identical samples change nothing; a sentence without samples keeps its parse."""
    pipeline = Pipeline.load(trained[0])
    parser, tagger = pipeline.parser, pipeline.tagger
    dev = read_conllu(trained[1])[:12]
    results = tagger.tag(dev, samples=3)
    for s, r in zip(dev, results, strict=True):
        s.upos, s.xpos = r.upos, r.xpos
    assert all(len(r.samples) == 3 and all(len(u) == len(x) == len(s.forms) for u, x in r.samples)
               for s, r in zip(dev, results, strict=True))
    assert results[4].samples == tagger.tag(dev[4:5], samples=3)[0].samples  # seeded by the words, not the batch
    assert any(u != s.upos for s, r in zip(dev, results, strict=True) for u, _ in r.samples)
    samples = [r.samples for r in results]
    samples[0] = []  # e.g. tags given by the user
    single = parser.parse(dev)
    averaged = parse_over_tag_samples(dev, samples, parser.parse, parser.constraint, parser.labeler)
    assert averaged[0].heads.tolist() == single[0].heads.tolist()
    for i in range(1, len(dev)):
        runs = [single[i].marginals] + [parser.parse([retagged(dev[i], tags)])[0].marginals for tags in samples[i]]
        expected = np.mean(runs, axis=0)
        p = averaged[i]
        np.testing.assert_allclose(p.marginals, expected, atol=1e-12)
        np.testing.assert_allclose(p.marginals[:, 1:].sum(axis=0), 1.0, atol=1e-9)
        assert is_tree(p.heads) and p.heads.tolist() == mbr_decode(expected, parser.constraint).tolist()
        np.testing.assert_allclose(p.head_probs, expected[p.heads[1:], np.arange(1, len(p.heads))])
        assert len(p.deprels) == len(dev[i].forms) and p.distribution is None
        assert p.diagnostics["tag_samples"] == 3
        # labels: the mean of the labeller's distributions on that tree under the best tags and each sample
        labels = np.mean([parser.labeler.distribution(retagged(dev[i], tags), p.heads)
                          for tags in [(dev[i].upos, dev[i].xpos), *samples[i]]], axis=0)
        np.testing.assert_allclose(labels.sum(axis=1), 1.0, atol=1e-6)
        assert p.deprels == [parser.labeler.labels[j] for j in labels.argmax(axis=1)]
        np.testing.assert_allclose(p.label_probs, labels.max(axis=1), rtol=1e-6)
    # the same with the sentences and their copies parsed together without labels: equal results, and no
    # parse of a copy computes labels
    unlabelled_calls = []

    def unlabelled(batch: list) -> list:
        unlabelled_calls.append(len(batch))
        out = parser.parse(batch, labels=False)
        assert all(p.deprels == [] for p in out)
        return out

    fast = parse_over_tag_samples(dev, samples, parser.parse, parser.constraint, parser.labeler, unlabelled)
    distinct_copies = sum(len({(tuple(u), tuple(x)) for u, x in draws} - {(tuple(s.upos), tuple(s.xpos))})
                          for s, draws in zip(dev, samples, strict=True))
    assert unlabelled_calls == [len(dev) + distinct_copies]  # one call: each sentence, then its copies
    for a, b in zip(averaged, fast, strict=True):
        assert a.heads.tolist() == b.heads.tolist() and a.deprels == b.deprels
        np.testing.assert_array_equal(a.marginals, b.marginals)
        np.testing.assert_array_equal(a.label_probs, b.label_probs)
    parsed_sentences = []

    def counting_parse(batch: list) -> list:
        parsed_sentences.extend(batch)
        return parser.parse(batch)

    same = parse_over_tag_samples(dev, [[(s.upos, s.xpos)] * 2 for s in dev], counting_parse, parser.constraint,
                                  parser.labeler)
    assert len(parsed_sentences) == len(dev)  # a sequence equal to the best tags is not parsed again
    def others(j: int) -> list:
        """Distinct sampled sequences of sentence j other than its best tags."""
        best = (tuple(dev[j].upos), tuple(dev[j].xpos))
        return sorted({(tuple(u), tuple(x)) for u, x in samples[j]} - {best})

    i = next(j for j in range(len(dev)) if len(others(j)) >= 2)
    best = (dev[i].upos, dev[i].xpos)
    a, b = ((list(u), list(x)) for u, x in others(i)[:2])
    parsed_sentences.clear()
    repeated = parse_over_tag_samples([dev[i]], [[a, a, b, best]], counting_parse, parser.constraint, parser.labeler)
    assert len(parsed_sentences) == 3  # best, a and b once each
    runs = [parser.parse([retagged(dev[i], tags)])[0].marginals for tags in (best, a, a, b, best)]
    np.testing.assert_allclose(repeated[0].marginals, np.mean(runs, axis=0), atol=1e-12)
    assert repeated[0].diagnostics["tag_samples"] == 4 and repeated[0].diagnostics["tag_parses"] == 3
    labels = np.mean([parser.labeler.distribution(retagged(dev[i], tags), repeated[0].heads)
                      for tags in (best, a, a, b, best)], axis=0)
    np.testing.assert_allclose(repeated[0].label_probs, labels.max(axis=1), rtol=1e-6)
    for a, b in zip(single, same, strict=True):
        np.testing.assert_allclose(a.marginals, b.marginals, atol=1e-12)
        assert a.heads.tolist() == b.heads.tolist() and a.deprels == b.deprels


@pytest.mark.slow
def test_cli_tag_samples(trained: tuple[Path, Path, dict], capsys: pytest.CaptureFixture[str]) -> None:
    model, dev, _ = trained
    assert main(["evaluate", "--model", str(model), "--data", str(dev), "--tags", "predicted", "--json",
                 "--tag-samples", "2"]) == 0
    scores = json.loads(capsys.readouterr().out)
    assert scores["uas"] > 40 and 0 <= scores["ece"] <= 1
    for argv, message in (
        (["evaluate", "--data", str(dev), "--tag-samples", "2"], "needs tags predicted"),
        (["evaluate", "--data", str(dev), "--tags", "predicted", "--tag-samples", "-1"], "between 0 and 100"),
        (["parse", "--text", "Dogs bark.", "--tag-samples", "2", "--kbest", "2"], "cannot be combined"),
        (["parse", "--text", "Dogs bark.", "--tag-samples", "2", "--inference", "bp", "--constraint", "exactly1"],
         "cannot be combined with --constraint"),
    ):
        assert main([argv[0], "--model", str(model), *argv[1:]]) == 2
        assert message in capsys.readouterr().err


def test_cli_text_needs_a_tokenizer(capsys: pytest.CaptureFixture[str]) -> None:
    repo_model = Path(__file__).resolve().parents[2] / "models" / "en_ewt-o1"
    assert main(["parse", "--model", str(repo_model), "--text", "Hello there."]) == 2
    assert "no tokenizer" in capsys.readouterr().err


@pytest.mark.slow
def test_average_weights_of_parsers(trained: tuple[Path, Path, dict], tmp_path: Path,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    """``engine average``: the mean of the weights, the components kept, the sources recorded, dev scored;
    models whose weights do not mean the same features are refused."""
    model, dev, _ = trained
    other = Pipeline.load(model)
    first_weights = other.parser.weights.copy()
    rng = np.random.default_rng(1)
    other.parser.weights = first_weights + rng.normal(0, 0.05, first_weights.shape)
    other.save(tmp_path / "other")
    second_weights = Pipeline.load(tmp_path / "other").parser.weights  # as stored (float16)
    out = tmp_path / "avg"
    assert main(["average", "--models", str(model), str(tmp_path / "other"), "--out", str(out),
                 "--dev", str(dev), "--tag-samples", "2", "--components-from", str(model)]) == 0
    summary = json.loads(capsys.readouterr().out)
    averaged = Pipeline.load(out)
    expected = (first_weights + second_weights) / 2
    np.testing.assert_allclose(averaged.parser.weights, expected, rtol=2**-10, atol=1e-7)  # float16 storage
    assert averaged.components == ["tokenizer", "tagger", "parser", "labeler", "lemmatizer", "morph"]
    manifest = json.loads((out / "manifest.json").read_text())
    assert [s["model"] for s in manifest["training"]["averaged"]] == [model.name, "other"]
    assert {s["train_file"] for s in manifest["training"]["averaged"]} == {"train.conllu"}
    assert manifest["training"]["components_from"]["train_file"] == "train.conllu"
    assert manifest["name"] == "avg" and manifest["metrics"]["dev"] == summary["dev"]
    assert 0 < summary["dev"]["uas"] <= 100 and 0 < summary["dev"]["upos"] <= 100
    assert averaged.default_tag_samples == 2 and summary["dev"]["tag_samples"] == 2
    # the dev scores are those of `evaluate --tags predicted` on the averaged model, with its 2 tag samples
    assert main(["evaluate", "--model", str(out), "--data", str(dev), "--tags", "predicted", "--json"]) == 0
    scores = json.loads(capsys.readouterr().out)
    assert (scores["uas"], scores["las"]) == pytest.approx((summary["dev"]["uas"], summary["dev"]["las"]))
    assert scores["tag_samples"] == 2
    assert main(["evaluate", "--model", str(out), "--data", str(dev), "--tags", "predicted", "--json",
                 "--tag-samples", "0"]) == 0
    assert json.loads(capsys.readouterr().out)["tag_samples"] == 0
    # a mean of means keeps its sources' own sources, and the training fields they all share
    assert main(["average", "--models", str(out), str(tmp_path / "other"), "--out", str(tmp_path / "avg2")]) == 0
    capsys.readouterr()
    nested = json.loads((tmp_path / "avg2" / "manifest.json").read_text())["training"]["averaged"]
    assert [s["model"] for s in nested[0]["averaged"]] == [model.name, "other"] and "averaged" not in nested[1]
    assert nested[0]["train_file"] == nested[1]["train_file"] == "train.conllu"
    assert nested[0]["train_sha256"] == nested[1]["train_sha256"] and len(nested[0]["train_sha256"]) == 64
    # k-best trees need one tagging: the model's default gives way, an explicit --tag-samples is refused
    assert main(["parse", "--model", str(out), "--text", "Dogs bark.", "--kbest", "2"]) == 0
    assert capsys.readouterr().out.count("# kbest_rank") == 2
    manifest["inference"]["tag_samples"] = -1
    (out / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(ModelError, match="inference.tag_samples"):
        Pipeline.load(out)

    BPParser.from_first_order(Pipeline.load(model).parser).save(tmp_path / "bp")
    BPParser.from_first_order(Pipeline.load(model).parser, prune=True).save(tmp_path / "pruned-a")
    BPParser.from_first_order(Pipeline.load(tmp_path / "other").parser, prune=True).save(tmp_path / "pruned-b")
    pruned = [str(tmp_path / "pruned-a"), str(tmp_path / "pruned-b")]
    for models, message in (([str(model), str(tmp_path / "bp")], "cannot average them"),
                            (pruned, "different first-order pruners")):
        assert main(["average", "--models", *models, "--out", str(tmp_path / "bad")]) == 2
        assert message in capsys.readouterr().err
    assert not (tmp_path / "bad").exists()


@pytest.mark.slow
def test_average_of_one_model_gives_its_parser_other_components(trained: tuple[Path, Path, dict],
                                                                 tmp_path: Path) -> None:
    """``average --models A --components-from B``: A's parser as it is (weights and training record), B's
    tokenizer, tagger and labeller."""
    model, _, _ = trained
    source = Pipeline.load(model)
    source.parser.weights = source.parser.weights + 0.5
    source.labeler.weights = source.labeler.weights * 2
    source.save(tmp_path / "a")
    a_manifest = json.loads((tmp_path / "a" / "manifest.json").read_text())
    assert main(["average", "--models", str(tmp_path / "a"), "--components-from", str(model),
                 "--out", str(tmp_path / "one")]) == 0
    one, a, b = Pipeline.load(tmp_path / "one"), Pipeline.load(tmp_path / "a"), Pipeline.load(model)
    np.testing.assert_array_equal(one.parser.weights, a.parser.weights)
    np.testing.assert_array_equal(one.labeler.weights, b.labeler.weights)
    assert not np.array_equal(one.labeler.weights, a.labeler.weights)
    manifest = json.loads((tmp_path / "one" / "manifest.json").read_text())
    assert manifest["training"]["history"] == a_manifest["training"]["history"]
    assert manifest["training"]["components_from"]["model"] == model.name
    assert "averaged" not in manifest["training"]


def test_train_component_adds_lemma_and_feats_leaving_the_rest(trained: tuple[Path, Path, dict], tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    model, dev, _ = trained
    pipeline = Pipeline.load(model)
    pipeline.lemmatizer = pipeline.morph = None
    pipeline.save(tmp_path / "old")
    train = model.parent / "train.conllu"
    assert main(["train-component", "lemmatizer", "morph", "--model", str(tmp_path / "old"), "--train", str(train),
                 "--out", str(tmp_path / "new"), "--quiet"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["components"][-2:] == ["lemmatizer", "morph"]
    old, new = (json.loads((tmp_path / name / "manifest.json").read_text()) for name in ("old", "new"))
    assert {k: v for k, v in new["arrays"].items() if not k.startswith(("lemmatizer.", "morph."))} == old["arrays"]
    assert set(new["components"]) - set(old["components"]) == {"lemmatizer", "morph"}
    assert Pipeline.load(tmp_path / "new").lemmatizer.info["train_file"] == "train.conllu"
    # a model without a tagger is refused, naming the reason
    repo_model = Path(__file__).resolve().parents[2] / "models" / "en_ewt-o1"
    assert main(["train-component", "lemmatizer", "--model", str(repo_model), "--train", str(train),
                 "--out", str(tmp_path / "x")]) == 2
    assert "no tagger" in capsys.readouterr().err
