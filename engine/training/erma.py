"""Approximation-aware training (Gormley, Dredze & Eisner 2015): follow the gradient of the actual
objective through the inference that the parser will run.

The circuit per sentence (§3.1, Fig. 2): weights -> potentials (LINK log-potentials, each pairwise
factor's theta) -> T iterations of BP -> beliefs -> objective. The gradient comes back by reverse mode
(``engine.inference.bp_backward``; for the tree factor an exact Hessian-vector product), and, the
model being linear in hashed features, the weight gradient is the feature-summed adjoint of every
potential. For a first-order model the same objectives are trained on *exact* marginals (§4,
"loss-aware training with exact inference"): the gradient in the scores is ``H (d objective / d mu)``.

Objectives (``engine.training.objectives``): ``l2`` (eq. 12), ``ar`` (annealed risk, eq. 10-11, the
temperature annealed linearly over the steps), ``l2+ar`` (layer-wise: L2 first, then annealed risk
from the best L2 model, §3.2, keeping the optimiser's state), and ``cll`` (the baseline, §4: exact CLL
for first-order models, surrogate CLL from BP beliefs, Smith & Eisner 2008 §7, under BP).

Optimiser (§3, eq. 8): AdaGrad with composite mirror descent and the squared L2 regulariser (Duchi,
Hazan & Singer 2011, the composite mirror descent update with ``H_t = delta I + diag(G_t)^(1/2)``),
on mini-batches of equal-length sentences; the regulariser of a batch is ``l2 * (batch size / N)``.
Its closed form per weight is

    w <- (H w - eta g) / (H + eta l2_batch)

applied densely (the paper's lazy sparse form applies the same shrinkage to untouched weights, in
one step when they are next touched; the result is the same). Each epoch's iterates are averaged
(optional) and the epoch with the best dev score is kept (early stopping, §5.1). Ctrl-C keeps the
best model so far.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import KW_ONLY, asdict, dataclass, field
from typing import Any

import numpy as np

from engine.data.batching import length_batches
from engine.graph.build import SentenceGraph
from engine.graph.tree import Tree
from engine.inference.bp import BPConfig, BPResult, run_bp
from engine.inference.bp_backward import bp_backward, bp_forward
from engine.kernels.exact import TreeConstraint, exact_marginals
from engine.kernels.tree_hessian import tree_hvp
from engine.scoring.potentials import arc_scores, scatter_gradient
from engine.training.cll import TrainingBatch, TrainResult, cll_objective, prepare_batches, usable_trees
from engine.training.loop import EpochLoop, dev_or_loss
from engine.training.objectives import (
    AnnealSchedule,
    annealed_risk,
    gold_indicators,
    l2_distance,
    role_l2,
    role_targets,
)
from engine.training.optim import AdaGrad, OptimSettings
from engine.training.pruned_once import PrunedOnce
from engine.training.surrogate import RoleSteps, role_gradient_terms, soft_theta_terms, surrogate_gradient_terms

log = logging.getLogger(__name__)

OBJECTIVES = ("cll", "l2", "ar", "l2+ar")


@dataclass(frozen=True)
class ErmaConfig(OptimSettings):
    """Settings of approximation-aware training, validated once: the objective, then ``OptimSettings``' fields
    (other defaults for ``epochs`` and ``learning_rate``) and the following ones, by keyword."""

    objective: str = "l2"
    _: KW_ONLY
    epochs: int = 5
    learning_rate: float = 0.05
    anneal: AnnealSchedule = field(default_factory=AnnealSchedule)
    l2_epochs: int | None = None  # l2+ar: epochs of L2 before the annealed risk (None: half, rounded up)
    delta: float = 1e-8  # AdaGrad's H = delta + sqrt(sum of squared gradients)

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.objective not in OBJECTIVES:
            raise ValueError(f"objective must be one of {', '.join(OBJECTIVES)}, got {self.objective!r}")
        if self.delta <= 0:
            raise ValueError("delta must be > 0")
        if self.objective == "l2+ar" and self.epochs < 2:
            raise ValueError("l2+ar needs at least 2 epochs (L2 first, then annealed risk)")
        if self.l2_epochs is not None and not 1 <= self.l2_epochs < self.epochs:
            raise ValueError(f"l2_epochs must be in 1..{self.epochs - 1}, got {self.l2_epochs}")

    def stages(self) -> list[tuple[str, int]]:
        """(objective, epochs) of each training stage."""
        if self.objective != "l2+ar":
            return [(self.objective, self.epochs)]
        first = self.l2_epochs if self.l2_epochs is not None else math.ceil(self.epochs / 2)
        return [("l2", first), ("ar", self.epochs - first)]


def tree_constraint(graph: SentenceGraph) -> TreeConstraint:
    """The tree space of a graph's TREE/PTREE factor (where the MBR decoder and ``q_T`` range)."""
    for f in graph.families:
        if isinstance(f, Tree):
            return TreeConstraint("projective" if f.projective else "nonprojective",
                                  "single" if f.single_root else "multi")
    raise ValueError("the annealed risk needs a TREE or PTREE factor in the graph")


def tree_log_likelihood(graph: SentenceGraph, result: BPResult,
                        gold_heads: np.ndarray) -> tuple[float, np.ndarray, np.ndarray]:
    """``-log p(gold)`` read off BP as ``log Z_tree(r) - sum_gold theta_link`` with ``r`` the tree
    factor's final incoming messages: exact for a TREE/PTREE + LINK graph (r = theta after one
    iteration), where its gradient through BP is the CLL gradient (Gormley et al. §5.2, Stoyanov et
    al. 2011); it ignores higher-order factors. Returns (value, d/d r, direct d/d theta_link)."""
    tree_pos, tree = next((i, f) for i, f in enumerate(graph.families) if isinstance(f, Tree))
    log_z, mu = tree.marginals(result.incoming[tree_pos])
    y = gold_indicators(gold_heads)
    value = float(log_z - (graph.link.theta * y).sum())
    return value, np.where(graph.valid, mu, 0.0), -y


def bp_gradient_terms(graph: SentenceGraph, gold_heads: np.ndarray, bp: BPConfig, objective: str,
                      temperature: float | None = None,
                      roles: tuple[np.ndarray, list[tuple[np.ndarray, np.ndarray]]] | None = None,
                      ) -> tuple[float, list[np.ndarray], list[np.ndarray]]:
    """One sentence: run BP with a tape, evaluate ``objective`` on its beliefs, back-propagate.

    Returns (objective value, feature indices, their gradient weights), like
    ``surrogate_gradient_terms`` (which ``cll`` uses). ``objective``: ``l2``, ``ar`` (needs
    ``temperature``) or ``ll`` (``tree_log_likelihood``, for tests). ``roles`` = (the words' gold label
    indices, a list), for a graph with label-aware LINK factors (``graph.roles``): ``cll`` adds the surrogate
    role terms (``role_gradient_terms``), ``l2`` the L2 distance of the role beliefs (``role_l2``), back-propagated
    into the role scores both directly and through BP (``theta_link = s + log sum_r exp u``, so d/du = d/d theta
    p + the softmax's own part); the arcs' feature rows and role-score gradients (A, R) are appended to the
    list and the role loss added to the value."""
    if roles is not None and (graph.roles is None or objective not in ("cll", "l2")):
        raise ValueError("role terms need a graph with label-aware LINK factors and the cll or l2 objective")
    if objective == "cll":
        beliefs = run_bp(graph.families, graph.valid, bp)
        value, idx, val = surrogate_gradient_terms(graph, gold_heads, bp, beliefs)
        if roles is not None:
            role_loss, ids, coef = role_gradient_terms(graph, beliefs.beliefs, gold_heads, roles[0])
            roles[1].append((ids, coef))
            value += role_loss
        return value, idx, val
    result, tape = bp_forward(graph.families, graph.valid, bp)
    y = gold_indicators(gold_heads)
    grad_incoming: dict[int, tuple[np.ndarray, ...]] | None = None
    direct: float | np.ndarray = 0.0
    tree_pos = 0
    role_u: np.ndarray | None = None
    if objective == "l2":
        value, g_b = l2_distance(result.beliefs, y, graph.valid)
        if roles is not None:
            assert graph.roles is not None
            arcs = graph.roles
            gold, scored = role_targets(arcs.heads, arcs.deps, gold_heads, roles[0], arcs.probs.shape[1])
            role_value, g_on, role_u = role_l2(result.beliefs[arcs.heads, arcs.deps], arcs.probs, gold, scored)
            value += role_value
            g_b = g_b.copy()
            g_b[arcs.heads, arcs.deps] += g_on
    elif objective == "ar":
        assert temperature is not None, "the annealed risk needs a temperature"
        value, g_b = annealed_risk(result.beliefs, y, graph.valid, temperature, tree_constraint(graph))
    elif objective == "ll":
        tree_pos = next(i for i, f in enumerate(graph.families) if isinstance(f, Tree))
        value, g_r, direct = tree_log_likelihood(graph, result, gold_heads)
        grad_incoming, g_b = {tree_pos: (g_r,)}, None
    else:
        raise ValueError(f"unknown objective {objective!r}")
    thetas = bp_backward(graph.families, graph.valid, tape, bp, g_b, grad_incoming)
    pos = {id(f): i for i, f in enumerate(graph.families)}
    feats = graph.link_features
    assert feats is not None, "the graph was built without its first-order features"
    g_theta = thetas[pos[id(graph.link)]]
    g_link = (0.0 if g_theta is None else g_theta) + direct
    valid = graph.valid
    if roles is not None and role_u is not None:
        assert graph.roles is not None
        arcs = graph.roles
        through = np.broadcast_to(g_link, valid.shape)[arcs.heads, arcs.deps]
        roles[1].append((arcs.ids, through[:, None] * arcs.probs + role_u))
    idx, val = soft_theta_terms(graph, graph.families, thetas)
    return value, [feats.reshape(-1), *idx], [np.repeat(np.broadcast_to(g_link, valid.shape)[valid],
                                                        feats.shape[-1]), *val]


def exact_objective(weights: np.ndarray, batch: TrainingBatch, constraint: TreeConstraint, objective: str,
                    temperature: float | None = None) -> tuple[float, np.ndarray]:
    """A first-order batch under exact inference (§4): value and weight gradient.

    ``cll`` is ``cll_objective``; ``l2`` / ``ar`` differentiate through the exact marginals with
    ``d/d scores = H (d/d mu)`` (``tree_hessian``, batched Matrix-Tree or per-sentence Eisner)."""
    if objective == "cll":
        return cll_objective(weights, batch, constraint)
    scores = arc_scores(weights, batch.features)
    valid = np.isfinite(scores)
    y = gold_indicators(batch.gold)
    _, mu = exact_marginals(scores, constraint)
    if objective == "l2":
        value, g_mu = l2_distance(mu, y, valid)
    elif objective == "ar":
        assert temperature is not None, "the annealed risk needs a temperature"
        value, g_mu = annealed_risk(mu, y, valid, temperature, constraint)
    else:
        raise ValueError(f"unknown objective {objective!r}")
    g_s = np.where(valid, tree_hvp(scores, g_mu, constraint), 0.0)
    return value, scatter_gradient(batch.features, g_s, len(weights))


BatchGradient = Callable[[np.ndarray, int, str, float | None], tuple[float, np.ndarray]]


def _optimise(w: np.ndarray, batch_gradient: BatchGradient, sizes: Sequence[int], config: ErmaConfig,
              dev_score: Callable[[np.ndarray], float] | None, progress: bool,
              on_batch: Callable[[int, int], None] | None,
              roles: RoleSteps | None = None) -> tuple[list[np.ndarray], int, list[dict[str, Any]], bool]:
    """The stages of BP and exact training, one ``EpochLoop`` run each; ``w`` is updated in place (and the role
    weights of ``roles``, which ``batch_gradient`` steps itself, averaged and chosen with ``w``).
    Returns (best arrays: the weights, then the role weights with ``roles``; best epoch, history, interrupted)."""
    n_sent = max(sum(sizes), 1)
    rng = np.random.default_rng(config.seed)
    stages = config.stages()
    params = [w] if roles is None else [w, roles.roles.weights]
    loop = EpochLoop(params, total_batches=sum(e for _, e in stages) * len(sizes), total_epochs=config.epochs,
                     average=config.average, progress=progress, on_batch=on_batch, interruptible=True)
    # One optimiser state for all stages: restarting AdaGrad's accumulators for the annealed risk made its
    # first steps as large as a cold start's (about eta per touched weight) and, on EWT dev, took the L2
    # model from 88.02 to 84.28 UAS in one epoch (1 BP iteration, full train set).
    opt = AdaGrad(len(w), config.learning_rate, delta=config.delta)
    for stage, (objective, epochs) in enumerate(stages):
        if stage > 0 and loop.best is not None:
            for p, best in zip(params, loop.best, strict=True):
                p[:] = best  # layer-wise: start the next objective from the best model so far
        steps, first_epoch, done = epochs * len(sizes), loop.epoch, [0]

        def step(g: int, objective: str = objective, steps: int = steps, done: list[int] = done) -> float:
            temperature = config.anneal.at(done[0], steps) if objective == "ar" else None
            done[0] += 1
            loss, grad = batch_gradient(w, int(g), objective, temperature)
            grad[0] = 0.0
            opt.step_composite(w, grad, config.l2 * sizes[g] / n_sent)
            return loss

        def evaluate(current: Sequence[np.ndarray], entry: dict[str, Any], objective: str = objective,
                     steps: int = steps, first_epoch: int = first_epoch) -> float:
            if objective == "ar":  # the temperature reached at the end of this epoch
                entry["temperature"] = config.anneal.at((entry["epoch"] - first_epoch) * len(sizes) - 1, steps)
            return dev_or_loss(dev_score)(current, entry)

        if not loop.run(epochs, lambda: rng.permutation(len(sizes)), step,
                        evaluate if roles is None else roles.evaluating(evaluate), per=n_sent,
                        fields={"objective": objective}, note=objective):
            break
    out = loop.result()
    return out.params, out.best_epoch, out.history, out.interrupted


def train_erma(parser: Any, train: Sequence[Any], config: ErmaConfig, bp: BPConfig,
               dev_score: Callable[[np.ndarray], float] | None = None, progress: bool = True,
               on_batch: Callable[[int, int], None] | None = None) -> TrainResult:
    """Train a ``BPParser``'s weights in place from their current value (e.g. warm-started from its
    pruner) through ``bp`` (fixed iterations); returns the best weights, also left in ``parser``. A parser with
    label-aware LINK factors (``parser.link_labels``) trains its role weights alongside, by the L2 distance of
    the role beliefs (``role_l2``, objective ``l2`` only) back-propagated through BP, with AdaGrad on the rows a
    batch touches (``RoleSteps``, as surrogate CLL's roles); the best epoch's averaged role weights are left in
    it too."""
    if getattr(parser, "clusters", None) is not None:
        raise ValueError("approximation-aware training does not back-propagate through latent edge clusters; "
                         "train a model with them by surrogate CLL (objective cll)")
    with_roles = getattr(parser, "link_labels", None) is not None
    if with_roles and {objective for objective, _ in config.stages()} != {"l2"}:
        raise ValueError("approximation-aware training of label-aware links takes the l2 objective (the L2 "
                         f"distance of link and role beliefs), not {config.objective}")
    start = time.perf_counter()
    keep, skipped = usable_trees(train, parser.constraint)
    sents = [train[i] for i in keep]
    groups = length_batches([len(s.forms) for s in sents], config.batch_size)
    roles = RoleSteps(parser.link_labels, sents) if with_roles else None

    pruned = PrunedOnce(parser)  # each batch's pruned arcs, found at its first step

    def batch_gradient(w: np.ndarray, g: int, objective: str, temperature: float | None) -> tuple[float, np.ndarray]:
        parser.weights = w
        batch = [sents[i] for i in groups[g]]
        idx, val, total = [], [], 0.0
        role_terms: list[tuple[np.ndarray, np.ndarray]] = []
        for i, graph, _ in parser.graphs(batch, gold=True, batch_size=len(batch), kept=pruned(g, batch)):
            loss, ii, vv = bp_gradient_terms(graph, batch[i].heads, bp, objective, temperature,
                                             None if roles is None else (roles.gold[groups[g][i]], role_terms))
            total += loss
            idx += ii
            val += vv
        if roles is not None:  # the roles' own step, with the batch's share of the same L2
            roles.step([ids for ids, _ in role_terms], [coef for _, coef in role_terms],
                       config.l2 * len(batch) / max(len(sents), 1))
        return total, np.bincount(np.concatenate(idx), weights=np.concatenate(val), minlength=len(w))

    w = parser.weights
    best, best_epoch, history, interrupted = _optimise(w, batch_gradient, [len(g) for g in groups], config,
                                                       dev_score, progress, on_batch, roles)
    parser.weights = best[0]
    if roles is not None:
        roles.roles.weights = best[1]
    return TrainResult(best[0], best_epoch, history, interrupted, skipped, time.perf_counter() - start,
                       {**asdict(config), "bp": asdict(bp)}, None if roles is None else best[1])


def train_erma_exact(extractor: Any, constraint: TreeConstraint, train: Sequence[Any], config: ErmaConfig,
                     dev_score: Callable[[np.ndarray], float] | None = None, progress: bool = True,
                     on_batch: Callable[[int, int], None] | None = None,
                     initial: np.ndarray | None = None) -> TrainResult:
    """Train a first-order model under exact inference (§4) from ``initial`` (default zeros)."""
    start = time.perf_counter()
    keep, skipped = usable_trees(train, constraint)
    batches = prepare_batches(extractor, [train[i] for i in keep], config.batch_size, progress)
    w = np.zeros(extractor.dim) if initial is None else initial.astype(np.float64, copy=True)

    def batch_gradient(weights: np.ndarray, g: int, objective: str,
                       temperature: float | None) -> tuple[float, np.ndarray]:
        return exact_objective(weights, batches[g], constraint, objective, temperature)

    best, best_epoch, history, interrupted = _optimise(w, batch_gradient, [len(b.gold) for b in batches], config,
                                                       dev_score, progress, on_batch)
    return TrainResult(best[0], best_epoch, history, interrupted, skipped, time.perf_counter() - start, asdict(config))
