"""Approximation-aware training: every objective's weight gradient through 1-3 BP iterations (TREE and
PTREE with GRAND and SIB) against central finite differences; log-likelihood through exact inference =
CLL; the objectives under exact inference; the AdaGrad composite mirror descent step; tiny runs."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from test_training_pipeline import TOY

from engine.features.extract import FeatureExtractor
from engine.features.second_order import default_second_order
from engine.features.templates import ArcTemplate, default_first_order
from engine.graph.build import SentenceGraph, build_graph
from engine.graph.family import all_arcs
from engine.inference.bp import BPConfig, run_bp
from engine.kernels.exact import TreeConstraint, exact_marginals
from engine.scoring.potentials import arc_scores
from engine.training.cll import TrainingBatch, cll_objective
from engine.training.erma import (
    ErmaConfig,
    bp_gradient_terms,
    exact_objective,
    train_erma_exact,
    tree_constraint,
    tree_log_likelihood,
)
from engine.training.objectives import AnnealSchedule, annealed_risk, gold_indicators, l2_distance
from engine.training.optim import AdaGrad

FIRST = (ArcTemplate(("upos",), ("upos",), "dist"), ArcTemplate(("form",), ("upos",), "dir"))
DIM1, DIM2 = 48, 48  # small hashed blocks: every weight is used, so every weight is checked
EPS = 1e-5
TEMPERATURE = 0.5

SENTENCES = {
    2: SimpleNamespace(forms="dogs bark".split(), upos="NOUN VERB".split(), xpos="NNS VBP".split(),
                       heads=np.array([-1, 2, 0])),
    3: SimpleNamespace(forms="the dog barks".split(), upos="DET NOUN VERB".split(), xpos="DT NN VBZ".split(),
                       heads=np.array([-1, 2, 3, 0])),
    4: SimpleNamespace(forms="the dog barks loudly".split(), upos="DET NOUN VERB ADV".split(),
                       xpos="DT NN VBZ RB".split(), heads=np.array([-1, 2, 3, 0, 3])),
    5: SimpleNamespace(forms="a cat saw the dog".split(), upos="DET NOUN VERB DET NOUN".split(),
                       xpos="DT NN VBD DT NN".split(), heads=np.array([-1, 2, 3, 0, 5, 3])),
}


def _graph(sent: SimpleNamespace, w: np.ndarray, constraint: str, second: bool = True) -> SentenceGraph:
    fx = FeatureExtractor(FIRST, DIM1)
    feats = fx.extract([sent])
    scores = arc_scores(w[:DIM1], feats)[0]
    templates = {f: tuple(default_second_order([f])) for f in ("grand", "sib")} if second else {}
    graph = build_graph(sent, all_arcs(len(sent.forms)), scores, w, templates, constraint=constraint, offset=DIM1)
    graph.link_features = feats[0][graph.valid]  # the kept arcs' rows, as graph_batches gives them
    return graph


def _objective_value(graph: SentenceGraph, heads: np.ndarray, bp: BPConfig, objective: str) -> float:
    result = run_bp(graph.families, graph.valid, bp)
    y = gold_indicators(heads)
    if objective == "l2":
        return l2_distance(result.beliefs, y, graph.valid)[0]
    if objective == "ar":
        return annealed_risk(result.beliefs, y, graph.valid, TEMPERATURE, tree_constraint(graph))[0]
    return tree_log_likelihood(graph, result, heads)[0]


def _gradient(graph: SentenceGraph, heads: np.ndarray, bp: BPConfig, objective: str, dim: int) -> np.ndarray:
    _, idx, val = bp_gradient_terms(graph, heads, bp, objective, TEMPERATURE)
    return np.bincount(np.concatenate(idx), weights=np.concatenate(val), minlength=dim)


def _check_against_finite_differences(sent: SimpleNamespace, w: np.ndarray, constraint: str, bp: BPConfig,
                                      objective: str, second: bool = True) -> None:
    got = _gradient(_graph(sent, w, constraint, second), sent.heads, bp, objective, len(w))
    fd = np.zeros_like(w)
    for i in range(1, len(w)):  # weight 0 is the null feature
        up, down = w.copy(), w.copy()
        up[i] += EPS
        down[i] -= EPS
        fd[i] = (_objective_value(_graph(sent, up, constraint, second), sent.heads, bp, objective)
                 - _objective_value(_graph(sent, down, constraint, second), sent.heads, bp, objective)) / (2 * EPS)
    got[0] = 0.0
    assert np.abs(fd).max() > 1e-3  # the objective does depend on the weights
    if second:
        assert np.abs(fd[DIM1:]).max() > 1e-4  # ... and on the GRAND/SIB weights
    rel = np.abs(got - fd).max() / np.abs(fd).max()
    assert rel < 1e-5, rel


@pytest.mark.parametrize("objective", ["l2", "ar", "ll"])
@pytest.mark.parametrize("iterations", [1, 2, 3])
@pytest.mark.parametrize("constraint", ["tree", "ptree"])
def test_objective_gradient_through_bp_matches_finite_differences(objective: str, iterations: int,
                                                                  constraint: str) -> None:
    """Weight gradient of each objective through TREE/PTREE + LINK + GRAND + SIB and 1-3 serial BP
    iterations, every weight perturbed; sentences of 2-5 words (one per case, cycling)."""
    n = 2 + (iterations + (constraint == "ptree") + ["l2", "ar", "ll"].index(objective)) % 4
    rng = np.random.default_rng(iterations)
    w = rng.normal(scale=0.5, size=DIM1 + DIM2)
    bp = BPConfig(max_iterations=iterations, schedule="serial", tolerance=0.0)
    _check_against_finite_differences(SENTENCES[n], w, constraint, bp, objective)


def test_objective_gradient_with_flooding_and_damping() -> None:
    w = np.random.default_rng(9).normal(scale=0.5, size=DIM1 + DIM2)
    bp = BPConfig(max_iterations=2, schedule="flooding", damping=0.25, tolerance=0.0)
    _check_against_finite_differences(SENTENCES[4], w, "tree", bp, "l2")


@pytest.mark.parametrize("iterations", [1, 2, 3])
@pytest.mark.parametrize("tree", ["nonprojective", "projective"])
def test_log_likelihood_through_exact_bp_is_the_cll_gradient(iterations: int, tree: str) -> None:
    """TREE/PTREE + LINK: BP is exact, and back-propagating the log-likelihood gives exactly the CLL
    gradient (expected minus observed features) of ``cll_objective`` (Gormley et al. §5.2)."""
    sent = SENTENCES[5]
    w = np.random.default_rng(1).normal(scale=0.5, size=DIM1)
    graph = _graph(sent, w, "ptree" if tree == "projective" else "tree", second=False)
    bp = BPConfig(max_iterations=iterations, schedule="serial", tolerance=0.0)
    value, idx, val = bp_gradient_terms(graph, sent.heads, bp, "ll")
    grad = np.bincount(np.concatenate(idx), weights=np.concatenate(val), minlength=DIM1)
    grad[0] = 0.0
    batch = TrainingBatch(FeatureExtractor(FIRST, DIM1).extract([sent]), sent.heads[None])
    nll, cll_grad = cll_objective(w, batch, TreeConstraint(tree))
    assert value == pytest.approx(nll, abs=1e-10)
    np.testing.assert_allclose(grad, cll_grad, atol=1e-10)
    assert np.abs(cll_grad).max() > 0.1


@pytest.mark.parametrize("objective", ["l2", "ar"])
@pytest.mark.parametrize("tree", ["nonprojective", "projective"])
@pytest.mark.parametrize("root", ["single", "multi"])
def test_exact_objective_gradient_matches_finite_differences(objective: str, tree: str, root: str) -> None:
    """§4: the same objectives on exact marginals, a batch of two 4-word sentences."""
    fx = FeatureExtractor(FIRST, DIM1)
    sents = [SENTENCES[4], SimpleNamespace(forms="cats chase the mice".split(), upos="NOUN VERB DET NOUN".split(),
                                           xpos="NNS VBP DT NNS".split(), heads=np.array([-1, 2, 0, 4, 2]))]
    batch = TrainingBatch(fx.extract(sents), np.stack([s.heads for s in sents]))
    constraint = TreeConstraint(tree, root)
    w = np.random.default_rng(2).normal(scale=0.5, size=DIM1)
    _, grad = exact_objective(w, batch, constraint, objective, TEMPERATURE)
    fd = np.zeros_like(w)
    for i in range(1, DIM1):
        up, down = w.copy(), w.copy()
        up[i] += EPS
        down[i] -= EPS
        fd[i] = (exact_objective(up, batch, constraint, objective, TEMPERATURE)[0]
                 - exact_objective(down, batch, constraint, objective, TEMPERATURE)[0]) / (2 * EPS)
    assert np.abs(fd).max() > 1e-3
    assert np.abs(grad - fd).max() / np.abs(fd).max() < 1e-5
    assert exact_objective(w, batch, constraint, "cll")[0] == cll_objective(w, batch, constraint)[0]


@pytest.mark.parametrize("constraint", ["tree", "ptree"])
def test_l2_through_exact_bp_equals_l2_on_exact_marginals(constraint: str) -> None:
    """With TREE/PTREE + LINK the BP circuit computes the exact marginals, so its L2 gradient is the
    exact-inference one (the Hessian-vector product) as well."""
    sent = SENTENCES[5]
    w = np.random.default_rng(4).normal(scale=0.5, size=DIM1)
    graph = _graph(sent, w, constraint, second=False)
    through_bp = _gradient(graph, sent.heads, BPConfig(max_iterations=2, schedule="serial"), "l2", DIM1)
    through_bp[0] = 0.0
    batch = TrainingBatch(FeatureExtractor(FIRST, DIM1).extract([sent]), sent.heads[None])
    tree = TreeConstraint("projective" if constraint == "ptree" else "nonprojective")
    _, exact = exact_objective(w, batch, tree, "l2")
    np.testing.assert_allclose(through_bp, exact, atol=1e-10)


def test_annealed_risk_approaches_the_mbr_loss() -> None:
    """As T -> 0 the risk tends to the number of wrong heads of the MBR tree (eq. 3, 11)."""
    from engine.kernels.mbr import mbr_decode

    rng = np.random.default_rng(0)
    n = 6
    scores = rng.normal(size=(1, n + 1, n + 1))
    scores[:, :, 0] = -np.inf
    scores[:, np.arange(n + 1), np.arange(n + 1)] = -np.inf
    constraint = TreeConstraint()
    _, mu = exact_marginals(scores, constraint)
    heads = np.array([-1, 2, 0, 2, 3, 4, 4])
    y = gold_indicators(heads)
    mbr = mbr_decode(mu[0], constraint)
    loss = int((mbr[1:] != heads[1:]).sum())
    risk, _ = annealed_risk(mu[0], y, np.isfinite(scores[0]), 1e-3, constraint)
    assert risk == pytest.approx(loss, abs=1e-6)
    warm, _ = annealed_risk(mu[0], y, np.isfinite(scores[0]), 10.0, constraint)
    assert 0 < warm < n and abs(warm - loss) > 0.1


def test_l2_distance_counts_both_values() -> None:
    b = np.array([[0.0, 0.3, 0.0], [0.0, 0.0, 1.0], [0.0, 0.7, 0.0]])
    valid = all_arcs(2)
    y = gold_indicators(np.array([-1, 2, 0]))
    value, grad = l2_distance(b, y, valid)
    # arcs 0->1 (0.3 vs 0), 2->1 (0.7 vs 1), 0->2 (0 vs 1), 1->2 (1 vs 0); each counted for on and off
    assert value == pytest.approx(2 * (0.09 + 0.09 + 1 + 1))
    np.testing.assert_allclose(grad, 4 * np.where(valid, b - y, 0.0))


def test_adagrad_composite_step_solves_its_proximal_problem() -> None:
    """w' = argmin eta g.w + eta l2/2 |w|^2 + 1/2 (w - w0)' H (w - w0), H = delta + sqrt(sum g^2)."""
    rng = np.random.default_rng(0)
    w0 = rng.normal(size=20)
    opt = AdaGrad(20, 0.3)
    g1, g2 = rng.normal(size=(2, 20))
    w = w0.copy()
    opt.step_composite(w, g1, 0.5)
    h = 1e-8 + np.abs(g1)
    np.testing.assert_allclose(0.3 * g1 + 0.3 * 0.5 * w + h * (w - w0), 0.0, atol=1e-12)
    w_prev = w.copy()
    opt.step_composite(w, g2, 0.0)  # no regulariser: plain AdaGrad
    np.testing.assert_allclose(w, w_prev - 0.3 * g2 / (1e-8 + np.sqrt(g1 ** 2 + g2 ** 2)))
    untouched = w.copy()
    opt.step_composite(w, np.zeros(20), 1.0)  # no gradient: only the L2 shrinkage
    np.testing.assert_allclose(w, untouched * opt.g2 ** 0.5 / (opt.g2 ** 0.5 + 0.3), rtol=1e-6)


def test_config_stages_and_schedule() -> None:
    assert ErmaConfig("l2+ar", epochs=5).stages() == [("l2", 3), ("ar", 2)]
    assert ErmaConfig("l2+ar", epochs=5, l2_epochs=1).stages() == [("l2", 1), ("ar", 4)]
    assert ErmaConfig("l2", epochs=4).stages() == [("l2", 4)]
    for bad in ({"objective": "mse"}, {"objective": "l2+ar", "epochs": 1}, {"l2_epochs": 5, "epochs": 5},
                {"learning_rate": 0.0}):
        with pytest.raises(ValueError):
            ErmaConfig(**bad)  # type: ignore[arg-type]
    anneal = AnnealSchedule(2.0, 0.5)
    assert [anneal.at(i, 4) for i in range(4)] == pytest.approx([2.0, 1.5, 1.0, 0.5])
    with pytest.raises(ValueError):
        AnnealSchedule(1.0, 0.0)


@pytest.mark.parametrize("objective", ["l2", "l2+ar"])
def test_exact_training_learns_a_toy_grammar(objective: str) -> None:
    fx = FeatureExtractor(tuple(default_first_order()), 1 << 14)
    train = [SENTENCES[3], SENTENCES[4], SENTENCES[5]] * 4
    config = ErmaConfig(objective, epochs=4, batch_size=4, learning_rate=0.5, l2=0.1)
    result = train_erma_exact(fx, TreeConstraint(), train, config, progress=False)
    assert [h["objective"] for h in result.history] == (["l2"] * 4 if objective == "l2" else ["l2"] * 2 + ["ar"] * 2)
    assert result.history[1]["loss"] < result.history[0]["loss"]
    if objective == "l2+ar":
        assert result.history[-1]["temperature"] == pytest.approx(0.1)
    test = SimpleNamespace(forms="the cat sleeps".split(), upos="DET NOUN VERB".split(), xpos="DT NN VBZ".split(),
                           heads=np.array([-1, 2, 3, 0]))
    _, mu = exact_marginals(arc_scores(result.weights, fx.extract([test])), TreeConstraint())
    assert (mu[0, test.heads[1:], np.arange(1, 4)] > 0.5).all()


def test_cli_trains_with_each_objective(tmp_path, capsys: pytest.CaptureFixture[str]) -> None:
    """``train --objective`` for a first-order model (exact inference) and a second-order BP model."""
    import json

    from engine.cli import main

    toy = tmp_path / "toy.conllu"
    toy.write_text(TOY * 6, encoding="utf-8")
    common = ["--train", str(toy), "--dev", str(toy), "--quiet", "--components", "parser", "--batch-size", "4"]
    first = tmp_path / "o1"
    assert main(["train", *common, "--out", str(first), "--epochs", "2", "--dim", "4096", "--objective", "l2"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["dev"]["uas"] > 50
    manifest = json.loads((first / "manifest.json").read_text())
    assert manifest["training"]["objective"] == "l2" and manifest["training"]["history"][0]["objective"] == "l2"
    second = tmp_path / "o2"
    assert main(["train", *common, "--out", str(second), "--order", "2", "--pruner", str(first), "--dim", "4096",
                 "--second-dim", "2048", "--epochs", "2", "--bp-iterations", "2", "--objective", "l2+ar",
                 "--anneal", "0.5,0.05"]) == 0
    summary = json.loads(capsys.readouterr().out)
    training = json.loads((second / "manifest.json").read_text())["training"]
    assert [h["objective"] for h in training["history"]] == ["l2", "ar"]
    assert training["inference_iterations"] == 2 and training["anneal"] == {"start": 0.5, "end": 0.05}
    assert summary["order"] == 2 and summary["dev"]["uas"] > 50
    assert main(["train", *common, "--out", str(tmp_path / "x"), "--anneal", "hot"]) == 2
    assert "--anneal must be T0,T1 values, got 'hot'" in capsys.readouterr().err
    assert main(["train", *common, "--out", str(tmp_path / "x"), "--objective", "l2+ar", "--epochs", "1"]) == 2


def test_approximation_aware_model_is_decoded_with_its_training_iterations(tmp_path, capsys) -> None:
    """A model trained through T BP iterations (here 2) is decoded with T iterations by the CLI and the service
    unless the caller gives another number: the beliefs equal those of BP run with T iterations explicitly,
    and differ from those of the usual default (5), which the caller still gets by asking for it."""
    import io

    from service_helpers import running_app

    from engine.cli import build_parser, main
    from engine.cli_parse import load_parser
    from engine.data.conllu_io import read_conllu
    from engine.pipeline import Pipeline

    toy = tmp_path / "toy.conllu"
    toy.write_text(TOY * 6, encoding="utf-8")
    common = ["--train", str(toy), "--quiet", "--components", "parser", "--batch-size", "4", "--dim", "4096"]
    first, second = tmp_path / "o1", tmp_path / "models" / "erma"
    assert main(["train", *common, "--out", str(first), "--epochs", "1"]) == 0
    assert main(["train", *common, "--out", str(second), "--order", "2", "--pruner", str(first), "--epochs", "1",
                 "--second-dim", "2048", "--bp-iterations", "2", "--objective", "l2"]) == 0
    capsys.readouterr()
    # on 12 toy sentences the trained higher-order weights stay 0 and BP settles in 2 iterations whatever the
    # limit: give them values (the manifest, with what training recorded, is kept) so that the limit matters
    pipeline = Pipeline.load(second)
    weights, dim = pipeline.parser.weights.copy(), pipeline.parser.extractor.dim  # a loaded model's are read-only
    weights[dim:] = np.random.default_rng(0).normal(0.0, 2.0, len(weights) - dim)
    pipeline.parser.weights = weights
    pipeline.save(second)
    words = "the dog barks . cats sleep the cats".split()
    tags = "DET NOUN VERB PUNCT NOUN VERB DET NOUN".split()
    xpos = "DT NN VBZ . NNS VBP DT NNS".split()
    conllu = "".join(f"{i}\t{w}\t_\t{u}\t{x}\t_\t_\t_\t_\t_\n"
                     for i, (w, u, x) in enumerate(zip(words, tags, xpos, strict=True), start=1)) + "\n"
    sentences = read_conllu(io.StringIO(conllu), name="<test>", strict_heads=False)
    model = Pipeline.load(second).parser
    trained, usual = (model.parse(sentences, BPConfig(max_iterations=t, schedule="serial"))[0].marginals
                      for t in (2, 5))
    assert np.abs(trained - usual).max() > 1e-6  # the number of iterations matters for this sentence

    def cli(*extra: str) -> np.ndarray:
        _, parse = load_parser(build_parser().parse_args(["parse", "--model", str(second), *extra]))
        return parse(sentences)[0].marginals

    np.testing.assert_allclose(cli(), trained, rtol=0, atol=1e-12)
    np.testing.assert_allclose(cli("--bp-iterations", "5"), usual, rtol=0, atol=1e-12)

    def served(client: object, **options: object) -> np.ndarray:
        r = client.post("/marginals", json={"conllu": conllu, "inference": options})  # type: ignore[attr-defined]
        assert r.status_code == 200, r.text
        return np.array(r.json()["sentences"][0]["marginals"])

    def rows(marginals: np.ndarray) -> np.ndarray:  # the /marginals layout
        out = np.clip(marginals[:, 1:].T, 0.0, 1.0)
        return out / out.sum(axis=1, keepdims=True)

    with running_app(tmp_path, models_dir=second.parent, default_model="erma") as client:
        np.testing.assert_allclose(served(client), rows(trained), rtol=0, atol=1e-12)
        np.testing.assert_allclose(served(client, iterations=5), rows(usual), rtol=0, atol=1e-12)
        (info,) = client.get("/models").json()["models"]
        assert info["inference_defaults"]["bp"] == {"iterations": 2, "schedule": "serial"}
