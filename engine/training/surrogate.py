"""Surrogate conditional log-likelihood training from BP beliefs (Smith & Eisner 2008 §7).

The CLL gradient is observed minus expected feature counts; under loopy BP the expectations are
replaced by the factors' beliefs (eq. 10): for LINK factors the variable beliefs b(L[h, m] = true),
for a pairwise factor the belief that both of its links are on. So, per sentence,

    grad = sum_arcs (b(L_hm) - y_hm) f_hm + sum_{pair factors} (b_f(on, on) - y_a y_b) f_f + l2 w

with ``y`` the gold tree. Optimised by AdaGrad on mini-batches with per-epoch iterate averaging and
early stopping on dev UAS, like the exact CLL trainer. Ctrl-C keeps the best model so far.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import asdict
from typing import Any

import numpy as np

from engine.bp_parser import BPParser
from engine.data.batching import length_batches
from engine.graph.build import SentenceGraph, trained_features
from engine.inference.bp import BPConfig, BPResult, run_bp, run_bp_many
from engine.scoring.hidden import cluster_gradient_terms
from engine.scoring.link_labels import ROLE_LEARNING_RATE, LinkLabels, gradient_rows
from engine.scoring.potentials import add_into
from engine.training.cll import TrainConfig, TrainResult, usable_trees
from engine.training.loop import EpochLoop, dev_or_loss
from engine.training.optim import AdaGrad
from engine.training.pruned_once import PrunedOnce


def soft_gradient_terms(graph: SentenceGraph, families: Sequence[Any], incoming: Sequence[Any],
                        gold_heads: np.ndarray) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """The higher-order families' part of the gradient (eq. 10): per family of ``graph.soft``, its feature
    indices and their weights ``b_f(on, on) - y_a y_b``, the beliefs read from ``incoming[k]``, the incoming
    messages of ``families[k]`` (the families in the order BP ran them)."""
    pos = {id(f): i for i, f in enumerate(families)}
    idx, val = [], []
    for terms in graph.soft.values():
        feats = trained_features(terms)
        if len(feats) == 0:
            continue
        expected = terms.expected(incoming[pos[id(terms.family)]])
        idx.append(feats.reshape(-1))
        val.append(np.repeat(expected - terms.gold(gold_heads), feats.shape[1]))
    return idx, val


def soft_theta_terms(graph: SentenceGraph, families: Sequence[Any],
                     thetas: Sequence[np.ndarray | None]) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """The higher-order families' part of a weight gradient given d loss / d each factor's theta (``thetas[k]``
    of ``families[k]``, None without one; reverse mode through BP): per family of ``graph.soft``, its feature
    indices and each factor's theta gradient repeated over its features."""
    pos = {id(f): i for i, f in enumerate(families)}
    idx, val = [], []
    for terms in graph.soft.values():
        g, feats = thetas[pos[id(terms.family)]], trained_features(terms)
        if g is not None and len(feats):
            idx.append(feats.reshape(-1))
            val.append(np.repeat(g, feats.shape[1]))
    return idx, val


def gold_head_loss(graph: SentenceGraph, beliefs: np.ndarray, gold_heads: np.ndarray) -> float:
    """-sum over words of log b(gold head), each word's link beliefs normalised over its heads."""
    n1 = graph.n + 1
    b = np.where(graph.valid, beliefs, 0.0)
    gold_b = b[gold_heads[1:], np.arange(1, n1)] / np.maximum(b[:, 1:].sum(axis=0), 1e-300)
    return float(-np.log(np.maximum(gold_b, 1e-300)).sum())


def surrogate_gradient_terms(
    graph: SentenceGraph, gold_heads: np.ndarray, config: BPConfig, result: BPResult | None = None,
    dim: int = 0,
) -> tuple[float, list[np.ndarray], list[np.ndarray]]:
    """Run BP (unless its ``result`` is given); return (-sum log b(gold head), feature indices, their
    gradient weights). A graph with latent edge clusters (``graph.link_posterior``) needs the first-order
    feature dimension ``dim``, the size of each cluster's block."""
    if result is None:
        result = run_bp(graph.families, graph.valid, config)
    n1 = graph.n + 1
    y = np.zeros((n1, n1))
    y[gold_heads[1:], np.arange(1, n1)] = 1.0
    feats = graph.link_features  # the kept arcs' rows: an arc pruned away has b = y = 0, no gradient
    assert feats is not None, "the graph was built without its first-order features"
    coef = result.beliefs[graph.valid] - y[graph.valid]
    soft_idx, soft_val = soft_gradient_terms(graph, graph.families, result.incoming, gold_heads)
    if graph.link_posterior is None:
        idx = [feats.reshape(-1), *soft_idx]
        val = [np.repeat(coef, feats.shape[-1]), *soft_val]
    else:  # latent edge clusters: block z of the flat weights gets (b - y) p(z | edge) f (engine.scoring.hidden)
        if dim < 1:
            raise ValueError("a graph with latent edge clusters needs the feature dimension of a cluster block")
        link_idx, link_val = cluster_gradient_terms(feats, coef, graph.link_posterior, dim)
        idx, val = [*link_idx, *soft_idx], [*link_val, *soft_val]
    return gold_head_loss(graph, result.beliefs, gold_heads), idx, val


def role_gradient_terms(graph: SentenceGraph, beliefs: np.ndarray, gold_heads: np.ndarray,
                        gold_roles: np.ndarray) -> tuple[float, np.ndarray, np.ndarray]:
    """Label-aware LINK factors (``engine.scoring.link_labels``): ``(-sum log p(gold label | gold arc), feature rows
    of the kept arcs, coefficients (A, R))``. The surrogate log-likelihood of the labelled tree gives each kept
    arc's role scores the gradient ``b(L_hm) softmax(u)_r - y_hm [r = gold label of m]`` (Smith & Eisner 2008
    eq. 10 with the roles summed into LINK); ``gold_roles[m - 1]`` is word m's label index, -1 for a label the
    role model does not have (no observed term; the arc's expected term stays)."""
    roles = graph.roles
    assert roles is not None, "the graph was built without label-aware LINK factors"
    n1 = graph.n + 1
    coef = beliefs[roles.heads, roles.deps][:, None] * roles.probs
    where = np.full((n1, n1), -1, dtype=np.int64)
    where[roles.heads, roles.deps] = np.arange(len(roles.heads))
    arc = where[gold_heads[1:], np.arange(1, n1)]
    seen = (arc >= 0) & (gold_roles >= 0)
    coef[arc[seen], gold_roles[seen]] -= 1.0
    gold_p = roles.probs[arc[seen], gold_roles[seen]]
    return float(-np.log(np.maximum(gold_p, 1e-300)).sum()), roles.ids, coef


class RoleSteps:
    """The role weights of label-aware LINK factors trained alongside a BP model's weights (surrogate CLL here,
    joint tags and trees in ``engine.training.joint``): the sentences' gold label indices, AdaGrad on the rows a
    batch touches (``ROLE_LEARNING_RATE``), and the dev evaluation with an epoch's role weights swapped in."""

    def __init__(self, roles: LinkLabels, sentences: Sequence[Any]) -> None:
        self.roles = roles
        roles.weights = np.array(roles.weights, dtype=np.float64)  # trained in float64, whatever was stored
        self.opt = AdaGrad(roles.weights.shape, ROLE_LEARNING_RATE)
        index = {label: r for r, label in enumerate(roles.labels)}
        self.gold = [np.array([index.get(d, -1) for d in s.deprels], dtype=np.int64) for s in sentences]

    def step(self, ids: list[np.ndarray], coef: list[np.ndarray], l2: float) -> None:
        """One AdaGrad step from a batch's ``role_gradient_terms`` (``l2``: the batch's share of the penalty)."""
        rows, grad = gradient_rows(np.concatenate(ids), np.concatenate(coef))
        self.opt.step_rows(self.roles.weights, rows, grad, l2)

    def evaluating(self, base: Callable[[Sequence[np.ndarray], dict[str, Any]], float],
                   ) -> Callable[[Sequence[np.ndarray], dict[str, Any]], float]:
        """``base`` (the loop's evaluation of ``current[0]``) with the epoch's role weights, ``current[1]``."""
        def evaluate(current: Sequence[np.ndarray], entry: dict[str, Any]) -> float:
            saved, self.roles.weights = self.roles.weights, current[1]
            try:
                return base(current, entry)
            finally:
                self.roles.weights = saved
        return evaluate


def train_surrogate(
    parser: BPParser,
    train: Sequence[Any],
    config: TrainConfig,
    bp: BPConfig,
    dev_score: Callable[[np.ndarray], float] | None = None,
    progress: bool = True,
    on_batch: Callable[[int, int], None] | None = None,
) -> TrainResult:
    """Train ``parser.weights`` in place from its current value; returns the best (averaged) weights, also
    left in ``parser``. ``dev_score``, ``progress`` and ``on_batch`` as for ``train_cll``. A parser with
    label-aware LINK factors (``parser.link_labels``) trains its role weights alongside, from the gold labels
    (``role_gradient_terms``; AdaGrad on the rows a batch touches, ``ROLE_LEARNING_RATE``, the same L2), and
    the best epoch's averaged role weights are left in it too."""
    start = time.perf_counter()
    keep, skipped = usable_trees(train, parser.constraint)
    sents = [train[i] for i in keep]
    groups = length_batches([len(s.forms) for s in sents], config.batch_size)
    rng = np.random.default_rng(config.seed)
    dim = len(parser.weights)
    w = parser.weights
    opt = AdaGrad(dim, config.learning_rate)
    buffer = np.zeros(dim)  # every batch's gradient, cleared by the step that reads it
    roles = None if parser.link_labels is None else RoleSteps(parser.link_labels, sents)
    params = [w] if roles is None else [w, roles.roles.weights]
    loop = EpochLoop(params, total_batches=config.epochs * len(groups), total_epochs=config.epochs,
                     average=config.average, progress=progress, on_batch=on_batch, interruptible=True)

    total = loop.sum_of(0)  # the step adds each iterate to the epoch's average itself
    pruned = PrunedOnce(parser)  # each batch's pruned arcs, found at its first step

    def step(g: int) -> list[float]:
        batch = [sents[i] for i in groups[g]]
        idx, val, losses = [], [], []
        role_ids, role_coef = [], []
        for graphs in parser.graph_batches(batch, gold=True, batch_size=len(batch), kept=pruned(g, batch)):
            results = run_bp_many([(graph.families, graph.valid) for _, graph, _ in graphs], bp)
            for (i, graph, _), result in zip(graphs, results, strict=True):
                loss, ii, vv = surrogate_gradient_terms(graph, batch[i].heads, bp, result, parser.extractor.dim)
                if roles is not None:
                    role_loss, ids, coef = role_gradient_terms(graph, result.beliefs, batch[i].heads,
                                                               roles.gold[groups[g][i]])
                    loss += role_loss
                    role_ids.append(ids)
                    role_coef.append(coef)
                losses.append(loss)
                idx += ii
                val += vv
        grad = add_into(buffer, np.concatenate(idx), np.concatenate(val))  # np.bincount's sums, no fresh array
        grad[:parser.first_dim:parser.extractor.dim] = 0.0  # the null feature (of every cluster block)
        share = config.l2 * (len(batch) / len(sents))
        opt.step(w, grad, share, clear=True, accumulate=total)
        if roles is not None:
            roles.step(role_ids, role_coef, share)
        return losses  # the loop adds them one by one, in order

    evaluate = dev_or_loss(dev_score)
    loop.run(config.epochs, lambda: rng.permutation(len(groups)), step,
             evaluate if roles is None else roles.evaluating(evaluate), per=max(len(sents), 1))
    out = loop.result()
    parser.weights = out.params[0]
    if roles is not None:
        roles.roles.weights = out.params[1]
    return TrainResult(out.params[0], out.best_epoch, out.history, out.interrupted, skipped,
                       time.perf_counter() - start, {**asdict(config), "bp": asdict(bp)},
                       None if roles is None else out.params[1])
