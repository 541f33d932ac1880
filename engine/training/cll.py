"""Conditional log-likelihood training with exact expectations (Smith & Smith 2007 §3, eq. 3-4).

The objective over training trees ``(x_i, y_i)`` is

    L(w) = sum_i [ log Z(x_i) - score(x_i, y_i) ] + (l2 / 2) ||w||^2

with gradient ``sum_i (E_p[f(x_i, y)] - f(x_i, y_i)) + l2 w``: expected minus observed feature counts,
the expectations being the exact arc marginals (Matrix-Tree or Eisner inside-outside) scattered onto
the arcs' features. Optimised by AdaGrad (Duchi et al. 2011) over equal-length mini-batches for a
number of epochs, averaging the iterates of each epoch (tail averaging, as Polyak-Ruppert averaging
without the poor early iterates); the epoch whose averaged weights have the best dev UAS is kept.
Ctrl-C stops after the current batch and keeps the best model so far.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
from tqdm import tqdm

from engine.data.batching import length_batches
from engine.features.extract import FeatureExtractor
from engine.kernels.brute_force import is_projective
from engine.kernels.exact import TreeConstraint, exact_marginals
from engine.kernels.mst import is_tree
from engine.scoring.hidden import (
    cluster_scores,
    initial_cluster_weights,
    marginalise_clusters,
    scatter_cluster_gradient,
)
from engine.scoring.kept_features import arc_features
from engine.scoring.potentials import arc_scores, scatter_gradient
from engine.training.loop import EpochLoop, dev_or_loss
from engine.training.optim import AdaGrad, OptimSettings

log = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True)
class TrainConfig(OptimSettings):
    """Settings of CLL training (validated once): ``OptimSettings``' fields and defaults."""


@dataclass
class TrainingBatch:
    features: np.ndarray  # (B, n+1, n+1, K) int32
    gold: np.ndarray  # (B, n+1) int64 gold heads


@dataclass
class TrainResult:
    weights: np.ndarray
    best_epoch: int
    history: list[dict[str, float]] = field(default_factory=list)
    interrupted: bool = False
    skipped: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0
    config: dict[str, Any] = field(default_factory=dict)
    roles: np.ndarray | None = None  # label-aware LINK factors: the chosen epoch's role weights (scoring.link_labels)


def tree_nll(scores: np.ndarray, gold: np.ndarray, constraint: TreeConstraint) -> tuple[float, np.ndarray]:
    """Summed ``log Z(x) - score(x, y)`` over a batch of arc log-potentials ``scores`` (B, n+1, n+1) with gold
    heads ``gold`` (B, n+1), and its gradient w.r.t. the scores: arc marginals minus gold indicators."""
    log_z, marg = exact_marginals(scores, constraint)
    b, n1 = gold.shape
    rows = np.repeat(np.arange(b), n1 - 1)
    heads = gold[:, 1:].reshape(-1)
    deps = np.tile(np.arange(1, n1), b)
    gold_score = scores[rows, heads, deps].reshape(b, n1 - 1).sum(axis=1)
    marg[rows, heads, deps] -= 1.0  # expected minus observed
    return float((log_z - gold_score).sum()), marg


def cll_objective(
    weights: np.ndarray, batch: TrainingBatch, constraint: TreeConstraint, out: np.ndarray | None = None
) -> tuple[float, np.ndarray]:
    """Negative conditional log-likelihood of a batch and its gradient w.r.t. the weights (added into ``out``, a
    buffer of zeros, when given: ``scatter_gradient``)."""
    nll, score_grad = tree_nll(arc_scores(weights, batch.features), batch.gold, constraint)
    return nll, scatter_gradient(batch.features, score_grad, len(weights), out)


def hidden_cll_objective(
    weights: np.ndarray, batch: TrainingBatch, constraint: TreeConstraint
) -> tuple[float, np.ndarray]:
    """The same with latent edge clusters (Smith & Smith 2007 §5.1, eq. 17-18; ``engine.scoring.hidden``):
    ``weights`` (K, dim); the negative log-likelihood ``-log sum_z p(y, z | x)`` is the first-order one over the
    marginalised scores, and the gradient w.r.t. ``weights[z]`` scatters ``(p(edge) - [edge in gold]) *
    p(z | edge)``. With K = 1 both equal ``cll_objective``'s bit for bit."""
    scores, posterior = marginalise_clusters(cluster_scores(weights, batch.features))
    nll, score_grad = tree_nll(scores, batch.gold, constraint)
    return nll, scatter_cluster_gradient(batch.features, score_grad, posterior, weights.shape[1])


def usable_trees(sentences: Sequence[Any], constraint: TreeConstraint) -> tuple[list[int], dict[str, int]]:
    """Indices of training trees the model can represent, and counts of those skipped by reason (logged)."""
    keep, skipped = [], {"no_heads": 0, "nonprojective": 0, "root_count": 0, "not_a_tree": 0}
    for i, s in enumerate(sentences):
        if s.heads is None:
            skipped["no_heads"] += 1
        elif not is_tree(s.heads):
            skipped["not_a_tree"] += 1
        elif constraint.single_root and int((s.heads[1:] == 0).sum()) != 1:
            skipped["root_count"] += 1
        elif constraint.projective and not is_projective(s.heads):
            skipped["nonprojective"] += 1
        else:
            keep.append(i)
    for reason, count in skipped.items():
        if count:
            log.warning("skipped %d of %d training trees (%s)", count, len(sentences), reason)
    return keep, skipped


def prepare_batches(
    extractor: FeatureExtractor, sentences: Sequence[Any], batch_size: int, progress: bool = True
) -> list[TrainingBatch]:
    """Extract features once for all training sentences, grouped in equal-length batches."""
    groups = length_batches([len(s.forms) for s in sentences], batch_size)
    return [training_batch(extractor, [sentences[i] for i in idx])
            for idx in tqdm(groups, desc="features", unit="batch", disable=not progress)]


def training_batch(extractor: FeatureExtractor, sentences: Sequence[Any]) -> TrainingBatch:
    """One mini-batch of equal-length training sentences: their arcs' features and gold heads."""
    return TrainingBatch(arc_features(extractor, sentences), np.stack([s.heads for s in sentences]))


# The training batches' features of the latest ``train_cll(..., shared=KEY)`` in this process (a Dask worker's too):
# the runs of ``--seeds N`` read the same sentences, so the first extracts them and the others reuse them. One key
# at most (a training set's features can take gigabytes); ``forget_shared(KEY)`` frees them.
_SHARED: dict[str, list[TrainingBatch]] = {}


def forget_shared(key: str) -> None:
    """Free the features kept under ``key`` in this process, if they are (run on every worker of a cluster too)."""
    _SHARED.pop(key, None)


def shared_batches(extractor: FeatureExtractor, sentences: Sequence[Any], batch_size: int, progress: bool,
                   shared: str | None) -> list[TrainingBatch]:
    """``prepare_batches``, or with ``shared`` the batches kept under that key in this process (kept there when
    they were not: the key replaces any other)."""
    batches = _SHARED.get(shared) if shared is not None else None
    if batches is None:
        batches = prepare_batches(extractor, sentences, batch_size, progress)
        if shared is not None:
            _SHARED.clear()
            _SHARED[shared] = batches
    return batches


def train_cll(
    extractor: FeatureExtractor,
    constraint: TreeConstraint,
    train: Sequence[Any],
    config: TrainConfig,
    dev_score: Callable[[np.ndarray], float] | None = None,
    progress: bool = True,
    on_batch: Callable[[int, int], None] | None = None,
    client: Any = None,
    clusters: int | None = None,
    shared: str | None = None,
) -> TrainResult:
    """Train weights by CLL + AdaGrad; ``dev_score(weights)`` picks the best epoch (higher is better; without
    it, the lowest training loss). ``progress`` shows tqdm bars.

    ``on_batch(done, total)`` is called after every batch with the number of batches done so far and the
    total over all epochs. An exception it raises propagates (unlike Ctrl-C, it does not keep a model).

    ``client`` (a ``distributed.Client``): the batches' losses and gradients are computed data-parallel on its
    workers, each holding a shard of the sentences (``engine.training.cluster``); the same batches, order and
    AdaGrad steps, so the weights equal single-process training's up to the rounding of the gradient sums.

    ``clusters`` = K: latent edge clusters (``hidden_cll_objective``); the weights are then (K, dim), starting
    from ``initial_cluster_weights(K, dim, config.seed)`` (noise for K > 1, zeros for K = 1, which trains
    today's weights bit for bit in a (1, dim) array). Not with ``client``.

    ``shared``: a key the caller makes for runs on the same data and settings (``--seeds N``): the first call with
    it extracts the features, the next reuse them (``shared_batches``; freed by ``forget_shared``).
    """
    if clusters is not None and client is not None:
        raise ValueError("latent edge clusters are not trained on a cluster of workers")
    start = time.perf_counter()
    keep, skipped = usable_trees(train, constraint)
    kept = [train[i] for i in keep]
    sharded = None
    buffer = np.zeros(extractor.dim)  # every batch's gradient, cleared by the step that reads it
    if client is None:
        batches = shared_batches(extractor, kept, config.batch_size, progress, shared)
        sizes = [len(batch.gold) for batch in batches]

        def objective(weights: np.ndarray, b: int) -> tuple[float, np.ndarray]:
            if clusters is not None:
                return hidden_cll_objective(weights, batches[b], constraint)
            return cll_objective(weights, batches[b], constraint, out=buffer)
    else:
        from engine.training.cluster import ShardedCLL

        sharded = ShardedCLL(client, extractor, constraint, kept, config.batch_size)
        sizes = sharded.sizes
    n_sent = len(keep)
    rng = np.random.default_rng(config.seed)
    w = np.zeros(extractor.dim) if clusters is None else initial_cluster_weights(clusters, extractor.dim, config.seed)
    opt = AdaGrad(w.shape if clusters is not None else extractor.dim, config.learning_rate)
    loop = EpochLoop([w], total_batches=config.epochs * len(sizes), total_epochs=config.epochs,
                     average=config.average, progress=progress, on_batch=on_batch, interruptible=True)

    total = loop.sum_of(0) if sharded is None else None  # data-parallel: the loop sums, beside the workers

    def epoch_order() -> list[int]:
        order = [int(b) for b in rng.permutation(len(sizes))]
        if sharded is not None:
            sharded.follow(order)
        return order

    def step(b: int) -> float:
        nll, grad = objective(w, b) if sharded is None else sharded.collect(b, w, out=buffer)
        opt.step(w, grad, config.l2 * (sizes[b] / n_sent), clear=True, accumulate=total)  # buffer zeroed for the next
        if sharded is not None:
            sharded.stepped(b, w)  # the next batch goes to the workers while the loop averages
        return nll

    try:
        loop.run(config.epochs, epoch_order, step, dev_or_loss(dev_score, "nll"), loss_key="nll", per=max(n_sent, 1))
    finally:
        if sharded is not None:
            sharded.close()
    out = loop.result()
    best_w = out.params[0] if out.best_epoch or out.partial is None else out.partial[0]
    return TrainResult(best_w, out.best_epoch, out.history, out.interrupted, skipped,
                       time.perf_counter() - start, asdict(config))
