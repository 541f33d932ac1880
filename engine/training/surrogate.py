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
from engine.graph.build import SentenceGraph
from engine.inference.bp import BPConfig, BPResult, run_bp, run_bp_many
from engine.scoring.potentials import add_into
from engine.training.cll import TrainConfig, TrainResult, usable_trees
from engine.training.loop import EpochLoop, dev_or_loss
from engine.training.optim import AdaGrad


def soft_gradient_terms(graph: SentenceGraph, families: Sequence[Any], incoming: Sequence[Any],
                        gold_heads: np.ndarray) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """The higher-order families' part of the gradient (eq. 10): per family of ``graph.soft``, its feature
    indices and their weights ``b_f(on, on) - y_a y_b``, the beliefs read from ``incoming[k]``, the incoming
    messages of ``families[k]`` (the families in the order BP ran them)."""
    pos = {id(f): i for i, f in enumerate(families)}
    idx, val = [], []
    for terms in graph.soft.values():
        if len(terms.features) == 0:
            continue
        expected = terms.expected(incoming[pos[id(terms.family)]])
        idx.append(terms.features.reshape(-1))
        val.append(np.repeat(expected - terms.gold(gold_heads), terms.features.shape[1]))
    return idx, val


def gold_head_loss(graph: SentenceGraph, beliefs: np.ndarray, gold_heads: np.ndarray) -> float:
    """-sum over words of log b(gold head), each word's link beliefs normalised over its heads."""
    n1 = graph.n + 1
    b = np.where(graph.valid, beliefs, 0.0)
    gold_b = b[gold_heads[1:], np.arange(1, n1)] / np.maximum(b[:, 1:].sum(axis=0), 1e-300)
    return float(-np.log(np.maximum(gold_b, 1e-300)).sum())


def surrogate_gradient_terms(
    graph: SentenceGraph, gold_heads: np.ndarray, config: BPConfig, result: BPResult | None = None
) -> tuple[float, list[np.ndarray], list[np.ndarray]]:
    """Run BP (unless its ``result`` is given); return (-sum log b(gold head), feature indices, their
    gradient weights)."""
    if result is None:
        result = run_bp(graph.families, graph.valid, config)
    n1 = graph.n + 1
    y = np.zeros((n1, n1))
    y[gold_heads[1:], np.arange(1, n1)] = 1.0
    b = np.where(graph.valid, result.beliefs, 0.0)
    feats = graph.link_features
    assert feats is not None, "the graph was built without its first-order features"
    soft_idx, soft_val = soft_gradient_terms(graph, graph.families, result.incoming, gold_heads)
    idx = [feats.reshape(-1), *soft_idx]
    val = [np.repeat((b - y).reshape(-1), feats.shape[-1]), *soft_val]
    return gold_head_loss(graph, result.beliefs, gold_heads), idx, val


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
    left in ``parser``. ``dev_score``, ``progress`` and ``on_batch`` as for ``train_cll``."""
    start = time.perf_counter()
    keep, skipped = usable_trees(train, parser.constraint)
    sents = [train[i] for i in keep]
    groups = length_batches([len(s.forms) for s in sents], config.batch_size)
    rng = np.random.default_rng(config.seed)
    dim = len(parser.weights)
    w = parser.weights
    opt = AdaGrad(dim, config.learning_rate)
    buffer = np.zeros(dim)  # every batch's gradient, cleared by the step that reads it
    loop = EpochLoop([w], total_batches=config.epochs * len(groups), total_epochs=config.epochs,
                     average=config.average, progress=progress, on_batch=on_batch, interruptible=True)

    def step(g: int) -> list[float]:
        batch = [sents[i] for i in groups[g]]
        idx, val, losses = [], [], []
        for graphs in parser.graph_batches(batch, gold=True, batch_size=len(batch)):
            results = run_bp_many([(graph.families, graph.valid) for _, graph, _ in graphs], bp)
            for (i, graph, _), result in zip(graphs, results, strict=True):
                loss, ii, vv = surrogate_gradient_terms(graph, batch[i].heads, bp, result)
                losses.append(loss)
                idx += ii
                val += vv
        grad = add_into(buffer, np.concatenate(idx), np.concatenate(val))  # np.bincount's sums, no fresh array
        grad[0] = 0.0
        opt.step(w, grad, config.l2 * (len(batch) / len(sents)), clear=True)
        return losses  # the loop adds them one by one, in order

    loop.run(config.epochs, lambda: rng.permutation(len(groups)), step, dev_or_loss(dev_score),
             per=max(len(sents), 1))
    out = loop.result()
    parser.weights = out.params[0]
    return TrainResult(out.params[0], out.best_epoch, out.history, out.interrupted, skipped,
                       time.perf_counter() - start, {**asdict(config), "bp": asdict(bp)})
