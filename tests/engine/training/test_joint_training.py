"""Surrogate CLL through the tag variables (``engine.training.joint``): the gold tags join the candidates, one
candidate per word gives today's surrogate gradient, and training fits the gold (tree, tags)."""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import pytest

from engine.data.conllu_io import read_conllu
from engine.inference.bp import BPConfig, run_bp
from engine.pipeline import Pipeline
from engine.scoring.link_labels import LinkLabels, gradient_rows
from engine.text.tag_candidates import CandidateSettings, choose_states
from engine.training.cll import TrainConfig
from engine.training.joint import gold_slots, joint_gradient_terms, joint_l2_gradient_terms, train_joint
from engine.training.surrogate import role_gradient_terms, surrogate_gradient_terms

PIPELINE = Path(__file__).resolve().parents[3] / "models" / "en_ewt-pipeline"
ROOT_O2 = PIPELINE.parent / "en_ewt-o2"
BP = BPConfig(max_iterations=5, schedule="serial")


@pytest.fixture(scope="module")
def shipped() -> Pipeline:
    return Pipeline.load(PIPELINE)


@pytest.fixture(scope="module")
def train(ewt_dir: Path) -> list:
    return read_conllu(ewt_dir / "en_ewt-ud-train.conllu")[:24]


def _trainable(pipeline: Pipeline) -> object:
    parser = copy.copy(pipeline.parser)
    parser.weights = np.array(parser.weights, dtype=np.float64)
    parser.pruner = np.array(parser.pruner, dtype=np.float64)
    parser._scorer = None
    return parser


def test_required_states_join_the_candidates_after_the_best() -> None:
    marginals = np.array([[0.6, 0.3, 0.1, 0.0], [0.0, 0.0, 1.0, 0.0], [0.5, 0.5, 0.0, 0.0]])
    best = np.array([0, 2, 1])
    states, allowed = choose_states(marginals, best, CandidateSettings(k=2, min_marginal=0.2),
                                    required=np.array([3, 2, -1]))
    assert states[0].tolist() == [0, 1, 3] and allowed[0].all()  # a slot more: both of k were used
    assert states[1, 0] == 2 and allowed[1].tolist() == [True, False, False]  # already the 1-best
    assert states[2, :2].tolist() == [1, 0] and allowed[2].tolist() == [True, True, False]  # -1: nothing required
    same = choose_states(marginals, best, CandidateSettings(k=2, min_marginal=0.2))
    assert same[0].shape == (3, 2)


def test_one_candidate_per_word_gives_the_surrogate_gradient(shipped: Pipeline, train: list) -> None:
    """With one candidate per word (k = 1, tags = the 1-best) TAGLINK is LINK and joint BP is BP: the joint
    trainer's gradient equals surrogate CLL's (``surrogate_gradient_terms``, features from ``extract``)."""
    parser = _trainable(shipped)
    sentences = [s.copy() for s in train[:6]]
    found: dict = {}
    shipped.tag_and_sample(sentences, retag=True, candidates=(CandidateSettings(k=1), found))
    for s, gold in zip(sentences, train[:6], strict=True):
        s.heads = gold.heads
    joint = np.zeros(len(parser.weights))
    plain = np.zeros(len(parser.weights))
    by_index = {i: g for i, g, _ in parser.graphs(sentences, gold=True)}
    for batch in parser.graph_batches(sentences, gold=True, link_features=False):
        for i, graph, _ in batch:
            cands = found[i]
            assert cands.allowed.shape[1] == 1
            slots = gold_slots(cands, [u[0] for u in cands.upos], [x[0] for x in cands.xpos])
            assert not slots.any()
            loss = joint_gradient_terms(parser, sentences[i], graph, cands, sentences[i].heads, slots, BP, joint)
            ref = by_index[i]
            result = run_bp(ref.families, ref.valid, BP)
            ref_loss, idx, val = surrogate_gradient_terms(ref, sentences[i].heads, BP, result)
            np.add.at(plain, np.concatenate(idx), np.concatenate(val))
            assert loss == pytest.approx(ref_loss, rel=1e-9)
    assert np.abs(plain).max() > 1.0
    np.testing.assert_allclose(joint, plain, atol=1e-8 * np.abs(plain).max())


def test_label_aware_links_train_jointly_as_in_surrogate_cll(shipped: Pipeline, train: list) -> None:
    """With label-aware LINK factors and one candidate per word, the joint trainer's link gradient and its role
    terms (feature rows, coefficients, loss) equal surrogate CLL's on the same graphs."""
    parser = _trainable(shipped)
    labels = sorted({d for s in train for d in s.deprels})
    roles = LinkLabels(labels, np.random.default_rng(0).normal(scale=0.3, size=(1 << 10, len(labels))))
    parser.link_labels = parser.labeler = roles  # type: ignore[attr-defined]
    sentences = [s.copy() for s in train[:6]]
    found: dict = {}
    shipped.tag_and_sample(sentences, retag=True, candidates=(CandidateSettings(k=1), found))
    for s, gold in zip(sentences, train[:6], strict=True):
        s.heads, s.deprels = gold.heads, gold.deprels
    gold_roles = {i: np.array([labels.index(d) for d in s.deprels]) for i, s in enumerate(sentences)}
    joint = np.zeros(len(parser.weights))
    plain = np.zeros(len(parser.weights))
    by_index = {i: g for i, g, _ in parser.graphs(sentences, gold=True)}
    checked = 0
    for batch in parser.graph_batches(sentences, gold=True, link_features=False):
        for i, graph, _ in batch:
            assert graph.roles is not None
            terms: list = []
            cands = found[i]
            slots = gold_slots(cands, [u[0] for u in cands.upos], [x[0] for x in cands.xpos])
            loss = joint_gradient_terms(parser, sentences[i], graph, cands, sentences[i].heads, slots, BP, joint,
                                        (gold_roles[i], terms))
            ref = by_index[i]
            result = run_bp(ref.families, ref.valid, BP)
            ref_loss, idx, val = surrogate_gradient_terms(ref, sentences[i].heads, BP, result)
            role_loss, ids, coef = role_gradient_terms(ref, result.beliefs, sentences[i].heads, gold_roles[i])
            np.add.at(plain, np.concatenate(idx), np.concatenate(val))
            assert loss == pytest.approx(ref_loss + role_loss, rel=1e-9) and role_loss > 0
            np.testing.assert_array_equal(terms[0][0], ids)
            np.testing.assert_allclose(terms[0][1], coef, rtol=0, atol=1e-9)
            checked += 1
    assert checked == 6
    np.testing.assert_allclose(joint, plain, atol=1e-8 * np.abs(plain).max())


def test_gold_slots_find_the_gold_tags(shipped: Pipeline, train: list) -> None:
    sentences = [s.copy() for s in train[:8]]
    results = shipped.tagger.tag(sentences, candidates=CandidateSettings(k=2, min_marginal=0.5), with_gold=True)
    for s, r in zip(sentences, results, strict=True):
        slots = gold_slots(r.candidates, s.upos, s.xpos)
        assert slots[0] == 0
        for i, (u, x) in enumerate(zip(s.upos, s.xpos, strict=True)):
            assert (r.candidates.upos[i][slots[i + 1]], r.candidates.xpos[i][slots[i + 1]]) == (u, x)
        assert [c[0] for c in r.candidates.upos] == r.upos  # the 1-best stays slot 0


@pytest.mark.parametrize("objective", ["cll", "l2"])
def test_training_raises_the_gold_trees_beliefs(shipped: Pipeline, train: list, objective: str) -> None:
    """A few epochs on 24 sentences (the shipped tagger's candidates, at least two for 1 word in 5 by a low
    threshold) lower the training loss (surrogate CLL, or L2 through joint BP), as any trainer on its own data."""
    parser = _trainable(shipped)
    sentences = [s.copy() for s in train]
    results = shipped.tagger.tag(sentences, candidates=CandidateSettings(k=3, min_marginal=0.01), with_gold=True)
    tagged = [s.copy() for s in sentences]
    for s, r in zip(tagged, results, strict=True):
        s.upos, s.xpos = list(r.upos), list(r.xpos)
    cands = [r.candidates for r in results]
    assert np.mean(np.concatenate([c.allowed.sum(axis=1) > 1 for c in cands])) > 0.05
    out = train_joint(parser, tagged, [(s.upos, s.xpos) for s in sentences], cands,
                      TrainConfig(epochs=3, learning_rate=0.05, batch_size=8, average=False), BP, progress=False,
                      objective=objective)
    losses = [h["loss"] for h in out.history]
    assert losses[-1] < losses[0]
    assert np.isfinite(out.weights).all()


@pytest.mark.parametrize("with_roles", [False, True])
def test_the_l2_gradient_through_joint_bp_matches_finite_differences_in_the_weights(shipped: Pipeline, train: list,
                                                                                    with_roles: bool) -> None:
    """Approximation-aware training's gradient (``joint_l2_gradient_terms``: reverse mode through 3 iterations of
    joint BP, then the features of the TAGLINK pairs and of the higher-order factors) against central differences
    of the loss in the weights it touches most, first-order (TAGLINK) and second-order (GRAND, SIB) alike. With
    label-aware LINK factors the role variables join the L2 (``role_l2``), and the role weights' gradient (directly
    and through every TAGLINK potential of an arc) is checked the same way."""
    parser = _trainable(shipped)
    labels = sorted({d for s in train for d in s.deprels})
    roles = LinkLabels(labels, np.random.default_rng(1).normal(scale=0.3, size=(1 << 10, len(labels))))
    if with_roles:
        parser.link_labels = parser.labeler = roles  # type: ignore[attr-defined]
    bp = BPConfig(max_iterations=3, schedule="serial", tolerance=0.0)
    sentence = next(s.copy() for s in train if 6 <= len(s.forms) <= 12)
    result = shipped.tagger.tag([sentence], candidates=CandidateSettings(k=3, min_marginal=0.01), with_gold=True)[0]
    gold = sentence.copy()
    sentence.upos, sentence.xpos = list(result.upos), list(result.xpos)
    cands = result.candidates
    assert (cands.allowed.sum(axis=1) > 1).any()
    slots = gold_slots(cands, gold.upos, gold.xpos)
    gold_roles = np.array([labels.index(d) for d in gold.deprels])

    def loss(out: np.ndarray, terms: list | None = None) -> float:
        parser._scorer = None
        graph = next(g for batch in parser.graph_batches([sentence], gold=True, link_features=False)
                     for _, g, _ in batch)
        assert (graph.roles is not None) == with_roles
        return joint_l2_gradient_terms(parser, sentence, graph, cands, gold.heads, slots, bp, out,
                                       (gold_roles, [] if terms is None else terms) if with_roles else None)

    def central(array: np.ndarray, at: tuple[int, ...]) -> float:
        saved = array[at]
        array[at] = saved + 1e-5
        up = loss(np.zeros(len(parser.weights)))
        array[at] = saved - 1e-5
        down = loss(np.zeros(len(parser.weights)))
        array[at] = saved
        return (up - down) / 2e-5

    grad, terms = np.zeros(len(parser.weights)), []
    loss(grad, terms)
    first = parser.extractor.dim
    picked = [*np.argsort(-np.abs(grad[:first]))[:4], *(first + np.argsort(-np.abs(grad[first:]))[:4])]
    assert min(abs(grad[j]) for j in picked) > 1e-4
    for j in picked:
        assert grad[j] == pytest.approx(central(parser.weights, (int(j),)), rel=1e-4, abs=1e-7)
    assert len(terms) == with_roles
    if with_roles:
        (ids, coef), = terms
        rows, grad_rows = gradient_rows(ids, coef)
        top = np.argsort(-np.abs(grad_rows).max(axis=1))[:4]
        assert np.abs(grad_rows[top]).max() > 1e-3
        for k in top:
            for r in np.argsort(-np.abs(grad_rows[k]))[:3]:
                assert grad_rows[k, r] == pytest.approx(central(roles.weights, (int(rows[k]), int(r))), rel=1e-4,
                                                        abs=1e-7)


def _head(path: Path, count: int, out: Path) -> Path:
    blocks = path.read_text(encoding="utf-8").split("\n\n")
    out.write_text("\n\n".join(blocks[:count]) + "\n\n", encoding="utf-8")
    return out


def test_train_joint_writes_a_joint_pipeline_that_evaluate_reads(ewt_dir: Path, tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """``train-joint`` end to end on 40 sentences: the pipeline is written with ``tag_average: joint`` and the
    run in its manifest, every other component as it was, and ``evaluate`` parses with it to the UAS the
    trainer measured for the epoch it kept."""
    import json

    from engine.cli import main

    train_file = _head(ewt_dir / "en_ewt-ud-train.conllu", 40, tmp_path / "train.conllu")
    dev_file = _head(ewt_dir / "en_ewt-ud-dev.conllu", 30, tmp_path / "dev.conllu")
    out = tmp_path / "joint"
    assert main(["train-joint", "--model", str(PIPELINE), "--train", str(train_file), "--dev", str(dev_file),
                 "--out", str(out), "--folds", "2", "--epochs", "1", "--tag-min-marginal", "0.3", "--quiet"]) == 0
    summary = json.loads(capsys.readouterr().out)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["inference"]["tag_average"] == "joint"
    assert manifest["inference"]["tag_candidates"] == manifest["training"]["joint"]["candidates"] == {
        "k": 3, "min_marginal": 0.3}  # trained and parsed with the candidates it was given
    assert "bp" not in manifest["inference"]  # surrogate CLL keeps the BP settings it was given (BP's defaults)
    assert manifest["training"]["joint"]["sentences"] == 40 and manifest["training"]["joint"]["folds"] == 2
    shipped_manifest = json.loads((PIPELINE / "manifest.json").read_text())
    assert manifest["components"]["tagger"] == shipped_manifest["components"]["tagger"]
    assert main(["evaluate", "--model", str(out), "--data", str(dev_file), "--tags", "predicted", "--json"]) == 0
    scores = json.loads(capsys.readouterr().out)
    assert scores["uas"] == pytest.approx(summary["history"][0]["dev"], abs=1e-9)
    # its own provenance, not the start model's: what `average` reads per source
    assert manifest["metrics"]["dev"]["uas"] == summary["history"][0]["dev"]
    assert manifest["training"]["seed"] == 0 and manifest["training"]["train_file"] == "train.conllu"
    assert len(manifest["training"]["train_sha256"]) == 64 and manifest["training"]["dev_file"] == "dev.conllu"
    assert manifest["training"]["start"] == shipped_manifest["training"]
    assert main(["train-joint", "--model", str(ROOT_O2), "--train", str(train_file), "--dev", str(dev_file),
                 "--out", str(tmp_path / "no")]) == 2  # no tagger: one line, no model
    assert "needs a pipeline with a tagger" in capsys.readouterr().err
    assert main(["train-joint", "--model", str(PIPELINE), "--train", str(train_file), "--dev", str(dev_file),
                 "--out", str(tmp_path / "no"), "--tag-min-marginal", "2"]) == 2
    assert "min_marginal must be in [0, 1]" in capsys.readouterr().err
    assert not (tmp_path / "no").exists()


def test_train_joint_with_the_approximation_aware_objective(ewt_dir: Path, tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    """``train-joint --objective joint-l2`` end to end on 30 sentences: the run is recorded as such; with
    ``--labels-in-graph`` the role weights train through joint BP too and the written parser labels with them."""
    import json

    from engine.cli import main

    train_file = _head(ewt_dir / "en_ewt-ud-train.conllu", 30, tmp_path / "train.conllu")
    dev_file = _head(ewt_dir / "en_ewt-ud-dev.conllu", 20, tmp_path / "dev.conllu")
    common = ["train-joint", "--model", str(PIPELINE), "--train", str(train_file), "--dev", str(dev_file),
              "--folds", "2", "--epochs", "1", "--quiet", "--objective", "joint-l2"]
    assert main([*common, "--out", str(tmp_path / "joint"), "--bp-iterations", "2"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["objective"] == "joint-l2 (approximation-aware)" and summary["config"]["objective"] == "joint-l2"
    manifest = json.loads((tmp_path / "joint" / "manifest.json").read_text())
    assert manifest["training"]["joint"]["objective"] == "joint-l2 (approximation-aware)"
    # chosen with, and parsed by default with, the BP iterations it was trained through
    assert manifest["inference"]["bp"]["iterations"] == 2 == summary["config"]["bp"]["max_iterations"]
    assert main([*common, "--out", str(tmp_path / "roles"), "--labels-in-graph"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["labels_in_graph"] is True and summary["config"]["objective"] == "joint-l2"
    roles = Pipeline.load(tmp_path / "roles").parser.link_labels  # type: ignore[union-attr]
    assert isinstance(roles, LinkLabels) and np.abs(roles.weights).max() > 0


def test_train_joint_with_labels_in_the_graph(ewt_dir: Path, tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    """``train-joint --labels-in-graph``: the written pipeline's parser carries trained role weights and labels
    with them (its labeller component kept but unused), and ``evaluate`` scores its labels."""
    import json

    from engine.cli import main

    train_file = _head(ewt_dir / "en_ewt-ud-train.conllu", 40, tmp_path / "train.conllu")
    dev_file = _head(ewt_dir / "en_ewt-ud-dev.conllu", 30, tmp_path / "dev.conllu")
    out = tmp_path / "joint-roles"
    assert main(["train-joint", "--model", str(PIPELINE), "--train", str(train_file), "--dev", str(dev_file),
                 "--out", str(out), "--folds", "2", "--epochs", "1", "--labels-in-graph", "--quiet"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["labels_in_graph"] is True
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["link_labels"]["buckets"] == 1 << 17 and "link_label_weights" in manifest["arrays"]
    pipeline = Pipeline.load(out)
    roles = pipeline.parser.labeler
    assert isinstance(roles, LinkLabels) and roles is pipeline.parser.link_labels  # type: ignore[union-attr]
    assert np.abs(roles.weights).max() > 0 and pipeline.labeler is not None  # trained; the labeller still stored
    assert main(["evaluate", "--model", str(out), "--data", str(dev_file), "--tags", "predicted", "--json"]) == 0
    scores = json.loads(capsys.readouterr().out)
    assert 0 < scores["las"] <= scores["uas"]


def test_untagged_sentences_require_no_state(shipped: Pipeline, train: list) -> None:
    """``with_gold`` on sentences without tags (raw input) adds nothing: the candidates are the plain ones."""
    bare = [s.copy() for s in train[:4]]
    for s in bare:
        s.upos = s.xpos = None
    settings = CandidateSettings(k=2, min_marginal=0.3)
    plain = shipped.tagger.tag(bare, candidates=settings)
    gold = shipped.tagger.tag(bare, candidates=settings, with_gold=True)
    for p, g in zip(plain, gold, strict=True):
        assert g.candidates.upos == p.candidates.upos and np.array_equal(g.candidates.states, p.candidates.states)
