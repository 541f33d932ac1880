"""First-order CLL by iterative parameter mixing on a Dask cluster (McDonald, Hall & Mann 2010, §3, Fig. 3).

Exact data parallelism (``engine.training.cluster``) sums the workers' gradients at every mini-batch, so that the
weights are those of one process; on a 2-core machine it is slower than one process (the dense AdaGrad step and
the iterate averaging stay serial in the driver and every step waits for a round trip: docs/results/cluster.md).
Iterative parameter mixing exchanges weights once per epoch instead, and gives other weights than one process.

The mini-batches one process would form (``length_batches`` over the N usable trees) are dealt round-robin into one
shard per worker (``deal``: shard k holds batches k, k + K, ...; its share of the sentences mu_k = |S_k| / N). Per
epoch t every shard runs, on its own worker, one epoch of single-process CLL training (``engine.training.cll``: its
mini-batches in a shuffled order, AdaGrad, the epoch's iterates averaged) starting from the mixed weights of the
last epoch,

    w_k = epoch_k(w^(t-1), G_k),        w^(t) = sum_k mu_k w_k,

where G_k are shard k's AdaGrad sums, carried from epoch to epoch (McDonald et al. mix perceptron weights, which
carry no such state); the epoch's model, scored on dev and kept if best, is sum_k mu_k mean_k of the shards'
averaged iterates. Each batch b adds l2 |b| / N of the penalty, as in one process, so a shard's epoch minimises
its share of the objective, ``sum_{i in S_k} loss_i + mu_k (l2 / 2) |w|^2``.

A shard's epoch is a function of its sentences and the driver's (w^(t-1), G_k, batch order) alone: the driver
draws every shard's order from one generator seeded by ``config.seed`` and keeps the sums, so a shard whose worker
is lost has its features extracted again from the sentences in its task and its epoch run elsewhere with the same
inputs, giving the same weights (tested for a worker killed between epochs and during one: Dask reschedules the
running task). On a cluster of one worker the weights are one process's bit for bit (tested). Traffic per epoch
and worker: w and G_k out, w_k, mean_k and G_k back (five float64 arrays of the hashed dimension, 160 MB at 2^22),
against two per mini-batch for exact data parallelism.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict
from typing import Any

import numpy as np

from engine.data.batching import length_batches
from engine.features.extract import FeatureExtractor
from engine.kernels.exact import TreeConstraint
from engine.training.cll import (
    TrainConfig,
    TrainingBatch,
    TrainResult,
    cll_objective,
    training_batch,
    usable_trees,
)
from engine.training.cluster import require_connected
from engine.training.loop import EpochLoop, dev_or_loss
from engine.training.optim import AdaGrad


def deal(groups: Sequence[np.ndarray], shards: int) -> list[list[np.ndarray]]:
    """The mini-batches ``groups`` (``length_batches``' sentence indices) dealt round-robin into ``shards`` shards
    (empty shards dropped): shard k holds batches k, k + K, ... in their order. Whole batches, so that a shard takes
    no more AdaGrad steps than its share (dealing sentences would split each length's last, partial batch in two:
    504 batches for EWT train instead of 450, and a slower epoch). Balancing the shards by an estimate of each
    batch's work (largest first to the least loaded) was measured no faster on EWT train (docs/results/cluster.md)."""
    return [part for part in (list(groups[k::shards]) for k in range(shards)) if part]


def shard_batches(extractor: FeatureExtractor, sentences: Sequence[Any], sizes: Sequence[int]
                  ) -> list[TrainingBatch]:
    """A shard's training batches, extracted on its worker (a Dask task, kept there): ``sentences`` are its batches'
    sentences one batch after the other, ``sizes`` how many each batch has (the features of ``prepare_batches``)."""
    ends = np.cumsum(sizes)
    return [training_batch(extractor, sentences[end - size:end]) for size, end in zip(sizes, ends, strict=True)]


def shard_epoch(batches: Sequence[TrainingBatch], weights: np.ndarray, sums: np.ndarray, order: Sequence[int],
                constraint: TreeConstraint, config: TrainConfig, total: int
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    """One epoch of ``train_cll``'s steps over ``batches`` in ``order`` from ``weights`` and the AdaGrad ``sums``
    (neither is changed): the final weights, the epoch's mean iterate (the final weights without
    ``config.average``), the new sums and the summed loss. ``total``: the sentences of all shards (each batch adds
    its share of the L2 penalty of the whole objective)."""
    w = np.array(weights, dtype=np.float64)  # a copy: Dask's arguments may be read-only
    opt = AdaGrad(len(w), config.learning_rate)
    opt.g2 = np.array(sums, dtype=np.float64)
    mean = np.zeros_like(w) if config.average else None
    buffer = np.zeros_like(w)
    nll = 0.0
    for b in order:
        part, grad = cll_objective(w, batches[b], constraint, out=buffer)
        nll += part
        opt.step(w, grad, config.l2 * (len(batches[b].gold) / total), clear=True, accumulate=mean)
    if mean is None or not len(order):
        return w, w.copy(), opt.g2, nll
    mean /= len(order)
    return w, mean, opt.g2, nll


@contextmanager
def _large_arguments() -> Iterator[None]:
    """Dask's warning about large task arguments silenced: the sentences, weights and sums travel inside the tasks
    on purpose (not scattered), so that Dask can run a lost shard's tasks again from them."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*[Ll]arge.*")
        yield


def train_mixed(extractor: FeatureExtractor, constraint: TreeConstraint, train: Sequence[Any], config: TrainConfig,
                client: Any, dev_score: Callable[[np.ndarray], float] | None = None, progress: bool = True,
                on_batch: Callable[[int, int], None] | None = None) -> TrainResult:
    """``train_cll`` on the usable trees of ``train`` by iterative parameter mixing over the workers of ``client``
    (the module docstring); the result's ``config`` records ``parameter_mixing`` (the number of shards).
    ``on_batch(done, total)`` counts epochs (a shard's epoch is one task)."""
    if client is None:
        raise ValueError("parameter mixing needs a cluster of workers (client)")
    import distributed  # optional dependency (the cluster extra), as in engine.training.cluster

    start = time.perf_counter()
    keep, skipped = usable_trees(train, constraint)
    kept = [train[i] for i in keep]
    workers = sorted(client.scheduler_info()["workers"])
    if not workers:
        raise RuntimeError("the Dask cluster has no workers")
    shards = deal(length_batches([len(s.forms) for s in kept], config.batch_size), len(workers))
    n_total = len(kept)
    share = [sum(len(g) for g in part) / n_total for part in shards]
    counts = [len(part) for part in shards]
    require_connected(client)
    with _large_arguments():
        features = [client.submit(shard_batches, extractor, [kept[i] for g in part for i in g],
                                  [len(g) for g in part], workers=[worker], allow_other_workers=True, pure=False)
                    for part, worker in zip(shards, workers, strict=False)]
    rng = np.random.default_rng(config.seed)
    current = np.zeros(extractor.dim)  # the mixed final weights w^(t): each epoch starts from them
    scored = np.zeros(extractor.dim)  # the mixed mean iterates: the epoch's model
    sums = [np.zeros(extractor.dim) for _ in shards]
    loop = EpochLoop([scored], total_batches=config.epochs, total_epochs=config.epochs, average=False,
                     progress=progress, on_batch=on_batch, interruptible=True)
    pending: list[Any] = []

    def epoch(_: int) -> float:
        orders = [[int(b) for b in rng.permutation(c)] for c in counts]  # one generator, shard after shard
        require_connected(client)
        with _large_arguments():
            pending[:] = [client.submit(shard_epoch, batches, current.copy(), sums[k], orders[k], constraint, config,
                                        n_total, pure=False, workers=[workers[k]], allow_other_workers=True)
                          for k, batches in enumerate(features)]
        results = [f.result() for f in pending]
        pending.clear()
        mixed, mean, nll = np.zeros_like(current), np.zeros_like(current), 0.0
        for k, (w_k, mean_k, sums_k, nll_k) in enumerate(results):
            mixed += share[k] * w_k
            mean += share[k] * mean_k
            sums[k] = sums_k
            nll += nll_k
        current[:] = mixed
        scored[:] = mean
        return nll

    try:
        distributed.wait(features)  # extracted before the first epoch starts (its seconds are the epoch's own)
        loop.run(config.epochs, lambda: [0], epoch, dev_or_loss(dev_score, "nll"), loss_key="nll",
                 per=max(n_total, 1))
    finally:
        for f in pending + features:
            f.cancel()
    out = loop.result()
    best = out.params[0] if out.best_epoch or out.partial is None else out.partial[0]
    return TrainResult(best, out.best_epoch, out.history, out.interrupted, skipped, time.perf_counter() - start,
                       {**asdict(config), "parameter_mixing": {"shards": len(shards)}})

