"""Label-aware LINK factors (Smith & Eisner 2008 §3.1, link roles; ``engine.scoring.link_labels``).

Against enumeration of every labelled tree (n <= 4 words, 3 labels): BP over LINK + TREE with the roles summed
into LINK gives each link's belief and each (link, role) belief exactly; the surrogate gradient of the labelled
tree's log-likelihood (links and roles) equals finite differences of the enumerated log-likelihood. The role
model's features of any arc are the labeller's arc-local features of a tree holding that arc. A model trained with
``--labels-in-graph`` saves, loads and labels with the same role model. Approximation-aware training (Gormley et
al. 2015): the gradient of the L2 distance of the link and role beliefs after 1-3 BP iterations over LINK + TREE +
GRAND + SIB, back-propagated through BP into the link, higher-order and role weights, equals central finite
differences of that distance computed from BP's beliefs."""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from engine.bp_parser import BPParser, load_any
from engine.data.conllu_io import read_conllu
from engine.decode.labeler import CountLabeler
from engine.features.extract import FeatureExtractor
from engine.features.labeler_features import DEFAULT_TEMPLATES, CompiledTemplates
from engine.features.second_order import default_second_order
from engine.features.templates import ArcTemplate
from engine.inference.bp import BPConfig, run_bp
from engine.kernels.brute_force import enumerate_trees
from engine.kernels.exact import TreeConstraint
from engine.model.store import ModelError
from engine.scoring.link_labels import LinkLabels, arc_local, gradient_rows
from engine.scoring.potentials import arc_scores
from engine.training.erma import bp_gradient_terms
from engine.training.options import TrainOptionsError
from engine.training.pipeline import TrainOptions, train_model
from engine.training.surrogate import role_gradient_terms, surrogate_gradient_terms
from tests.engine.training.test_hidden_model import TOY

LABELS = ["a", "b", "c"]
BUCKETS = 1 << 7
TEMPLATES = (ArcTemplate(("upos",), ("upos",), "dist"), ArcTemplate(("form",), ("upos",), "dir"))
DIM = 1 << 7
SENTENCES = [
    SimpleNamespace(forms="dogs bark .".split(), upos="NOUN VERB PUNCT".split(), xpos="NNS VBP .".split(),
                    heads=np.array([-1, 2, 0, 2]), deprels=["a", "c", "b"]),
    SimpleNamespace(forms="the dog barks loudly".split(), upos="DET NOUN VERB ADV".split(),
                    xpos="DT NN VBZ RB".split(), heads=np.array([-1, 2, 3, 0, 3]), deprels=["b", "a", "c", "b"]),
]


def _parser(seed: int, tree: str = "nonprojective") -> BPParser:
    rng = np.random.default_rng(seed)
    w = rng.normal(scale=0.5, size=DIM)
    w[0] = 0.0
    roles = LinkLabels(LABELS, rng.normal(scale=0.7, size=(BUCKETS, len(LABELS))))
    roles.weights[0] = 0.0
    return BPParser(FeatureExtractor(TEMPLATES, DIM), w, TreeConstraint(tree, "single"), CountLabeler(), {},
                    link_labels=roles)


def _enumerated(parser: BPParser, sentence: SimpleNamespace) -> tuple[np.ndarray, np.ndarray]:
    """(s (n+1, n+1), u (n+1, n+1, R)) for every arc, the role scores from each arc's own feature row."""
    n = len(sentence.forms)
    s = arc_scores(parser.weights, parser.extractor.extract([sentence]))[0]
    heads, deps = np.nonzero(np.isfinite(s))
    assert parser.link_labels is not None
    ids = parser.link_labels.arc_ids(sentence, heads, deps)
    u = np.full((n + 1, n + 1, len(LABELS)), -np.inf)
    u[heads, deps] = parser.link_labels.scores(ids)
    return s, u


def _labelled_trees(n: int, constraint: TreeConstraint) -> list[tuple[np.ndarray, tuple[int, ...]]]:
    trees = enumerate_trees(n, single_root=constraint.single_root, projective=constraint.projective)
    return [(t, lab) for t in trees for lab in itertools.product(range(len(LABELS)), repeat=n)]


def _log_score(s: np.ndarray, u: np.ndarray, tree: np.ndarray, labels: tuple[int, ...]) -> float:
    return math.fsum(s[tree[m], m] + u[tree[m], m, labels[m - 1]] for m in range(1, len(tree)))


@pytest.mark.parametrize("tree", ["nonprojective", "projective"])
def test_bp_beliefs_of_links_and_roles_equal_enumeration(tree: str) -> None:
    parser = _parser(3, tree)
    for sentence in SENTENCES:
        n = len(sentence.forms)
        s, u = _enumerated(parser, sentence)
        everything = _labelled_trees(n, parser.constraint)
        logs = np.array([_log_score(s, u, t, lab) for t, lab in everything])
        p = np.exp(logs - logs.max())
        p /= p.sum()
        link = np.zeros((n + 1, n + 1))
        role = np.zeros((n + 1, n + 1, len(LABELS)))
        for (t, lab), q in zip(everything, p, strict=True):
            for m in range(1, n + 1):
                link[t[m], m] += q
                role[t[m], m, lab[m - 1]] += q
        graph = next(parser.graphs([sentence]))[1]
        assert graph.roles is not None
        result = run_bp(graph.families, graph.valid, BPConfig(max_iterations=5))
        np.testing.assert_allclose(np.where(graph.valid, result.beliefs, 0.0), link, rtol=0, atol=1e-9)
        b = result.beliefs[graph.roles.heads, graph.roles.deps][:, None] * graph.roles.probs
        np.testing.assert_allclose(b, role[graph.roles.heads, graph.roles.deps], rtol=0, atol=1e-9)
        # a parse's labels: the most believed role on each tree arc, its probability given the arc
        parsed = parser.parse([sentence], BPConfig(max_iterations=5))[0]
        for m in range(1, n + 1):
            given = role[parsed.heads[m], m] / role[parsed.heads[m], m].sum()
            assert parsed.deprels[m - 1] == LABELS[int(given.argmax())]
            assert parsed.label_probs[m - 1] == pytest.approx(given.max(), abs=1e-9)


def _labelled_nll(w: np.ndarray, v: np.ndarray, parser: BPParser, sentence: SimpleNamespace) -> float:
    """-log p(gold tree, gold labels) by enumeration, under link weights ``w`` and role weights ``v``."""
    saved_w, saved_v = parser.weights, parser.link_labels.weights  # type: ignore[union-attr]
    parser.weights, parser.link_labels.weights = w, v  # type: ignore[union-attr]
    try:
        s, u = _enumerated(parser, sentence)
    finally:
        parser.weights, parser.link_labels.weights = saved_w, saved_v  # type: ignore[union-attr]
    logs = [_log_score(s, u, t, lab) for t, lab in _labelled_trees(len(sentence.forms), parser.constraint)]
    top = max(logs)
    log_z = top + math.log(math.fsum(math.exp(x - top) for x in logs))
    gold = tuple(LABELS.index(d) for d in sentence.deprels)
    return log_z - _log_score(s, u, sentence.heads, gold)


@pytest.mark.parametrize("tree", ["nonprojective", "projective"])
def test_the_labelled_surrogate_gradient_passes_finite_differences(tree: str) -> None:
    """On LINK + TREE the surrogate gradient is the exact gradient of -log p(tree, labels)."""
    parser = _parser(5, tree)
    assert parser.link_labels is not None
    for sentence in SENTENCES:
        graph = next(parser.graphs([sentence], gold=True))[1]
        result = run_bp(graph.families, graph.valid, BPConfig(max_iterations=5))
        _, idx, val = surrogate_gradient_terms(graph, sentence.heads, BPConfig(), result)
        grad_w = np.bincount(np.concatenate(idx), weights=np.concatenate(val), minlength=DIM)
        grad_w[0] = 0.0
        gold = np.array([LABELS.index(d) for d in sentence.deprels])
        role_loss, ids, coef = role_gradient_terms(graph, result.beliefs, sentence.heads, gold)
        rows, grad_rows = gradient_rows(ids, coef)
        grad_v = np.zeros_like(parser.link_labels.weights)
        grad_v[rows] = grad_rows
        w, v, eps = parser.weights, parser.link_labels.weights, 1e-5
        for f in np.flatnonzero(grad_w)[:12]:
            up, down = w.copy(), w.copy()
            up[f] += eps
            down[f] -= eps
            fd = (_labelled_nll(up, v, parser, sentence) - _labelled_nll(down, v, parser, sentence)) / (2 * eps)
            assert grad_w[f] == pytest.approx(fd, abs=1e-6)
        checked = 0
        for r in rows[:6]:
            for lab in range(len(LABELS)):
                up, down = v.copy(), v.copy()
                up[r, lab] += eps
                down[r, lab] -= eps
                fd = (_labelled_nll(w, up, parser, sentence) - _labelled_nll(w, down, parser, sentence)) / (2 * eps)
                assert grad_v[r, lab] == pytest.approx(fd, abs=1e-6)
                checked += 1
        assert checked == 3 * min(6, len(rows)) and role_loss > 0


def _aware_distance(parser: BPParser, sentence: SimpleNamespace, bp: BPConfig) -> float:
    """Gormley et al. eq. 12 over the links and their roles, restated from BP's beliefs: ``2 sum (b - y)^2`` over
    the kept arcs plus ``2 sum_r (b p_r - y_r)^2`` over each kept arc's roles (y_r = 1 for the gold arc's gold
    label)."""
    graph = next(parser.graphs([sentence], gold=True))[1]
    assert graph.roles is not None
    b = run_bp(graph.families, graph.valid, bp).beliefs
    n = len(sentence.forms)
    y = np.zeros((n + 1, n + 1))
    y[sentence.heads[1:], np.arange(1, n + 1)] = 1.0
    links = math.fsum((2.0 * (b[graph.valid] - y[graph.valid]) ** 2).tolist())
    roles = 0.0
    for a, (h, m) in enumerate(zip(graph.roles.heads, graph.roles.deps, strict=True)):
        for r in range(len(LABELS)):
            target = float(sentence.heads[m] == h and sentence.deprels[m - 1] == LABELS[r])
            roles += 2.0 * (b[h, m] * graph.roles.probs[a, r] - target) ** 2
    return links + roles


@pytest.mark.parametrize("iterations", [1, 3])
@pytest.mark.parametrize("tree", ["nonprojective", "projective"])
def test_the_approximation_aware_gradient_through_roles_passes_finite_differences(iterations: int,
                                                                                  tree: str) -> None:
    """``bp_gradient_terms(..., "l2", roles=...)``: every link and higher-order weight the sentence reads, and the
    role weights of the rows it touches, against central differences of ``_aware_distance`` (loopy BP with GRAND
    and SIB, serial, a fixed number of iterations)."""
    rng = np.random.default_rng(iterations + 10 * (tree == "projective"))
    second = 1 << 6
    w = rng.normal(scale=0.5, size=DIM + second)
    w[0] = 0.0
    roles = LinkLabels(LABELS, rng.normal(scale=0.7, size=(BUCKETS, len(LABELS))))
    roles.weights[0] = 0.0
    templates = {f: tuple(default_second_order([f])) for f in ("grand", "sib")}
    parser = BPParser(FeatureExtractor(TEMPLATES, DIM), w, TreeConstraint(tree, "single"), CountLabeler(),
                      templates, link_labels=roles)
    bp = BPConfig(max_iterations=iterations, schedule="serial", tolerance=0.0)
    sentence = SENTENCES[1]
    gold = np.array([LABELS.index(d) for d in sentence.deprels])
    graph = next(parser.graphs([sentence], gold=True))[1]
    assert graph.soft  # loops: GRAND and SIB factors beside TREE
    terms: list = []
    value, idx, val = bp_gradient_terms(graph, sentence.heads, bp, "l2", roles=(gold, terms))
    assert value == pytest.approx(_aware_distance(parser, sentence, bp), rel=1e-12)
    grad_w = np.bincount(np.concatenate(idx), weights=np.concatenate(val), minlength=len(w))
    grad_w[0] = 0.0
    (ids, coef), = terms
    rows, grad_rows = gradient_rows(ids, coef)
    grad_v = np.zeros_like(roles.weights)
    grad_v[rows] = grad_rows
    eps = 1e-5

    def central(array: np.ndarray, at: tuple[int, ...]) -> float:
        saved = array[at]
        array[at] = saved + eps
        up = _aware_distance(parser, sentence, bp)
        array[at] = saved - eps
        down = _aware_distance(parser, sentence, bp)
        array[at] = saved
        return (up - down) / (2 * eps)

    used = np.flatnonzero(grad_w)
    assert (used >= DIM).any()  # higher-order weights are among them
    fd_w = np.array([central(w, (int(f),)) for f in used])
    np.testing.assert_allclose(grad_w[used], fd_w, rtol=1e-5, atol=1e-8)
    fd_v = np.array([[central(roles.weights, (int(r), lab)) for lab in range(len(LABELS))] for r in rows])
    assert np.abs(fd_v).max() > 1e-3  # the distance does depend on the role weights
    np.testing.assert_allclose(grad_v[rows], fd_v, rtol=1e-5, atol=1e-8)


def test_arc_features_are_the_labellers_on_a_tree_holding_the_arc() -> None:
    model = LinkLabels.new(LABELS, BUCKETS)
    compiled = CompiledTemplates(arc_local())
    sentence = SENTENCES[1]
    n = len(sentence.forms)
    heads, deps = np.nonzero(~np.eye(n + 1, dtype=bool) & (np.arange(n + 1)[None, :] > 0))
    ids = model.arc_ids(sentence, heads, deps)
    for a, (h, m) in enumerate(zip(heads, deps, strict=True)):
        tree = np.zeros(n + 1, dtype=np.int64)  # any heads for the other words: the templates do not read them
        tree[m] = h
        np.testing.assert_array_equal(ids[a], compiled.feature_ids([sentence], [tree], BUCKETS)[m - 1])
    assert len(arc_local()) < len(DEFAULT_TEMPLATES)  # the tree-reading templates are left out
    with pytest.raises(ValueError, match="arc-local"):
        LinkLabels(LABELS, np.zeros((BUCKETS, 3)), (("d.upos", "d.children"),))


@pytest.mark.parametrize("objective", ["cll", "l2"])
def test_a_model_with_labels_in_the_graph_trains_saves_loads_and_labels(tmp_path: Path, objective: str) -> None:
    """Surrogate CLL and approximation-aware L2 alike: the written parser's roles are trained and label its trees."""
    data = tmp_path / "toy.conllu"
    data.write_text(TOY * 6, encoding="utf-8")
    out = tmp_path / "roles"
    summary = train_model(data, data, out, TrainOptions(order=2, labels_in_graph=True, epochs=2, dim=4099,
                                                        second_dim=1031, components=("parser",), objective=objective),
                          progress=False)
    assert json.loads((out / "manifest.json").read_text())["training"]["objective"] == (
        "surrogate-cll" if objective == "cll" else "l2")
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["link_labels"]["labels"] == ["det", "nsubj", "punct", "root"]
    assert manifest["labeler"] == {"link_labels": True}
    parser = load_any(out)
    assert isinstance(parser, BPParser) and isinstance(parser.labeler, LinkLabels)
    assert parser.labeler is parser.link_labels and parser.link_labels.weights.any()
    sentences = read_conllu(data)
    parsed = parser.parse(sentences)
    las = 100.0 * np.mean(np.concatenate([(p.heads[1:] == s.heads[1:]) & (np.array(p.deprels) == np.array(s.deprels))
                                          for s, p in zip(sentences, parsed, strict=True)]))
    assert summary["dev"]["las"] == pytest.approx(las)
    for s, p in zip(sentences, parsed, strict=True):  # the labels given the arcs: the role model on the tree's arcs
        dist = parser.link_labels.distribution(s, p.heads)
        np.testing.assert_allclose(p.label_probs, dist.max(axis=1), rtol=0, atol=1e-12)
    parser.save(tmp_path / "half", half=True)  # large arrays stored as float16: widened once at load
    half = load_any(tmp_path / "half")
    assert isinstance(half, BPParser) and half.link_labels is not None
    assert half.link_labels.weights.dtype == np.float32
    np.testing.assert_array_equal(half.link_labels.weights,
                                  np.asarray(parser.link_labels.weights, dtype=np.float16).astype(np.float32))
    broken = json.loads((out / "manifest.json").read_text())
    broken["link_labels"]["buckets"] = 64
    (out / "manifest.json").write_text(json.dumps(broken))
    with pytest.raises(ModelError, match="role model"):
        load_any(out)
    with pytest.raises(TrainOptionsError, match="labels_in_graph"):
        TrainOptions(order=1, labels_in_graph=True)
    for refused in ("ar", "l2+ar"):  # the annealed risk reads heads only
        with pytest.raises(TrainOptionsError, match="labels_in_graph"):
            TrainOptions(order=2, labels_in_graph=True, objective=refused)


@pytest.mark.parametrize("objective", ["cll", "l2"])
def test_seeds_average_the_role_weights_of_their_runs(tmp_path: Path, objective: str) -> None:
    """``train --seeds 2 --labels-in-graph``: each run starts its roles from zero, and the model's role weights (as
    its link weights) are the mean of the runs with seeds 3 and 4 trained alone on the same pruner."""
    data = tmp_path / "toy.conllu"
    data.write_text(TOY * 6, encoding="utf-8")
    pruner = tmp_path / "pruner"
    train_model(data, data, pruner, TrainOptions(order=1, epochs=2, dim=4099, components=("parser",)), progress=False)
    base = {"order": 2, "labels_in_graph": True, "epochs": 2, "dim": 4099, "second_dim": 1031, "batch_size": 4,
            "components": ("parser",), "objective": objective}
    for seed in (3, 4):
        train_model(data, data, tmp_path / f"s{seed}", TrainOptions(**base, seed=seed), pruner_path=pruner,
                    progress=False)
    train_model(data, data, tmp_path / "both", TrainOptions(**base, seed=3, seeds=2), pruner_path=pruner,
                progress=False)
    runs = [load_any(tmp_path / f"s{seed}") for seed in (3, 4)]
    both = load_any(tmp_path / "both")
    assert all(isinstance(p, BPParser) and p.link_labels is not None for p in [*runs, both])
    roles = [np.asarray(p.link_labels.weights, float) for p in runs]  # type: ignore[union-attr]
    assert not np.array_equal(roles[0], roles[1])  # the seeds do train differently
    np.testing.assert_allclose(both.link_labels.weights, (roles[0] + roles[1]) / 2,  # type: ignore[union-attr]
                               rtol=1e-6, atol=1e-7)  # stored as float32
    np.testing.assert_allclose(both.weights, (np.asarray(runs[0].weights, float) + np.asarray(runs[1].weights, float))
                               / 2, rtol=1e-6, atol=1e-7)


def test_averaging_label_aware_parsers_averages_their_role_weights(tmp_path: Path) -> None:
    """``engine average`` of parsers with roles: the mean of the link weights and of the role weights (before, the
    first model's roles stayed beside the mean links); a parser without roles is refused beside one with them."""
    from engine.training.average import average_parsers

    data = tmp_path / "toy.conllu"
    data.write_text(TOY * 6, encoding="utf-8")
    for name, roles in (("a", True), ("plain", False)):
        train_model(data, data, tmp_path / name, TrainOptions(order=2, labels_in_graph=roles, epochs=1, dim=4099,
                                                              second_dim=1031, components=("parser",)), progress=False)
    other = load_any(tmp_path / "a")  # a second run of the recipe: other link and role weights, the same pruner
    assert isinstance(other, BPParser) and other.link_labels is not None
    rng = np.random.default_rng(0)
    other.weights = np.asarray(other.weights, float) + rng.normal(scale=0.1, size=other.weights.shape)
    other.link_labels.weights = other.link_labels.weights + rng.normal(scale=0.1, size=other.link_labels.weights.shape)
    other.save(tmp_path / "b")
    a, b = (load_any(tmp_path / name) for name in "ab")
    assert isinstance(a, BPParser) and isinstance(b, BPParser) and a.link_labels and b.link_labels
    roles_a, roles_b = (np.asarray(p.link_labels.weights, float) for p in (a, b))  # type: ignore[union-attr]
    assert not np.array_equal(roles_a, roles_b)
    mean = average_parsers([tmp_path / "a", tmp_path / "b"])
    assert isinstance(mean, BPParser) and mean.link_labels is not None and mean.labeler is mean.link_labels
    np.testing.assert_array_equal(mean.weights, (np.asarray(a.weights, float) + np.asarray(b.weights, float)) / 2)
    np.testing.assert_array_equal(mean.link_labels.weights, (roles_a + roles_b) / 2)
    with pytest.raises(ModelError, match="link_labels"):
        average_parsers([tmp_path / "a", tmp_path / "plain"])


def test_role_scores_of_float16_weights_read_as_stored_equal_the_widened_ones() -> None:
    """A loaded model's float16 role weights are summed as stored (their bits, ``kernel_table``), bit for bit
    what the float64 copy gives."""
    rng = np.random.default_rng(1)
    half = (3 * rng.standard_normal((1 << 8, 4))).astype(np.float16)
    ids = rng.integers(0, 1 << 8, (50, 7)).astype(np.int32)
    stored, widened = LinkLabels(list("abcd"), half), LinkLabels(list("abcd"), half.astype(np.float64))
    np.testing.assert_array_equal(stored.scores(ids), widened.scores(ids))
