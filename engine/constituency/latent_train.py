"""Training the factored latent model (Hall & Klein 2012, §6; ``../shared/design/epic.md`` §2 "Training").

1. The generative X-bar PCFG of the training trees (``xbar``) gives the grammar, the tag dictionary and the
   pruning masks; the lexical feature vocabulary is read off the training words (``features``).
2. Every training sentence of at most ``max_length`` words is prepared once (``objective.Prepared``): features,
   the X-bar mask with the gold tree's labelled spans kept (``pruning.prune_mask(keep_gold=...)``), the gold
   tree; dev sentences get their masks without gold. Both are kept in memory for the run.
3. Epochs of shuffled mini-batches (``engine.optim.EpochLoop``: progress bar, Ctrl-C keeps the best epoch): a
   batch's summed gradient of ``log Z - log Z_gold`` (``objective.sentence_gradient``), scaled to the whole
   training set, takes one AdaGrad step with the proximal L2 step (``AdaGrad.step_composite``: ``theta <- (H
   theta - eta g) / (H + eta lambda)``, ``delta`` 1e-4, the brief's breeze step). Sentences whose product has
   no live tree are skipped and counted.
4. After each epoch the dev set is parsed (``latent_parser``, the training inference; ``independent`` models
   parse with EP) and scored by EVALB; the best epoch by F1 (<= 40 words) is kept. Each history entry holds the
   epoch's training seconds, its summed loss, dev F1, EP sweeps and the skipped sentences.

With ``workers > 1`` the batch's sentences and the dev sentences are split over a ``multiprocessing`` pool
(fork: the workers inherit the prepared sentences; each task gets the current weights).
"""

from __future__ import annotations

import multiprocessing
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from nltk import Tree  # type: ignore[import-untyped]

from engine.constituency.baseline import XbarParser
from engine.constituency.binarize import binarize, to_anchored
from engine.constituency.ep import EPSettings
from engine.constituency.evalb import evalb
from engine.constituency.features import LexicalFeatures
from engine.constituency.latent import LatentModel, LatentSettings
from engine.constituency.latent_parser import LatentParser
from engine.constituency.objective import INFERENCE, Prepared, compact_mask, expand_mask, sentence_gradient
from engine.constituency.pruning import prune_mask
from engine.constituency.xbar import XbarPCFG, train_xbar
from engine.optim import AdaGrad, EpochLoop, OptimSettings

__all__ = ["TrainSettings", "Trained", "train_latent"]


@dataclass(frozen=True, kw_only=True)
class TrainSettings(OptimSettings):
    """The trainer's settings and bounds, declared once: ``OptimSettings`` (epochs, batch size, learning rate,
    L2 ``lambda``, seed, averaging) with the brief's defaults, ``inference`` (:data:`objective.INFERENCE`),
    ``ep_sweeps`` (>= 1; the paper's 4), ``max_length`` (>= 1; training sentences longer are left out),
    ``workers`` (>= 1 processes), ``delta`` (AdaGrad's, > 0)."""

    epochs: int = 8
    batch_size: int = 100
    learning_rate: float = 0.2
    l2: float = 1.0
    average: bool = False
    inference: str = "ep"
    ep_sweeps: int = 4
    max_length: int = 40
    workers: int = 1
    delta: float = 1e-4

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.inference not in INFERENCE:
            raise ValueError(f"inference must be one of {INFERENCE}, got {self.inference!r}")
        if self.ep_sweeps < 1 or self.max_length < 1 or self.workers < 1 or not self.delta > 0:
            raise ValueError("ep_sweeps, max_length and workers must be >= 1 and delta > 0")

    @property
    def decoding(self) -> str:
        return "ep" if self.inference == "independent" else self.inference


@dataclass
class Trained:
    """The chosen model, the loop's history and best epoch, whether Ctrl-C stopped it, and counts."""

    model: LatentModel
    history: list[dict[str, Any]]
    best_epoch: int
    interrupted: bool
    sentences: int
    prepare_seconds: float


# What fork-started workers inherit: the model (its weights replaced per task) and the prepared sentences.
_STATE: dict[str, Any] = {}


def _prepare(xbar: XbarPCFG, model: LatentModel, trees: Sequence[Tree], gold: bool, max_length: int) -> list[Any]:
    """Training sentences as ``Prepared`` (gold spans kept), dev sentences as ``(words, mask or None)``."""
    pruner = XbarParser(xbar)
    out: list[Any] = []
    for tree in trees:
        words = tree.leaves()
        if gold and len(words) > max_length:
            continue
        try:
            dense = pruner.marginals(words)
        except FloatingPointError:
            if not gold:
                out.append((words, None))
            continue
        if gold:
            anchored = to_anchored(binarize(tree), xbar.grammar)
            mask = prune_mask(xbar.grammar, dense, pruner.threshold, keep_gold=anchored)
            out.append(Prepared(model.sentence(words), compact_mask(mask), anchored))
        else:
            out.append((words, compact_mask(prune_mask(xbar.grammar, dense, pruner.threshold))))
    return out


def _batch(task: tuple[np.ndarray, list[int]]) -> tuple[float, np.ndarray, int, list[int]]:
    """Summed loss and gradient of the training sentences ``indices`` at ``theta``; skipped count; EP sweeps."""
    theta, indices = task
    model: LatentModel = _STATE["model"].with_theta(theta)
    settings: TrainSettings = _STATE["settings"]
    ep = EPSettings(max_sweeps=settings.ep_sweeps)
    loss, grad, skipped, sweeps = 0.0, np.zeros_like(theta), 0, []
    for s in indices:
        try:
            result = sentence_gradient(model, _STATE["train"][s], settings.inference, ep)
        except FloatingPointError:
            skipped += 1
            continue
        if not (np.isfinite(result.loss) and np.isfinite(result.gradient).all()):
            skipped += 1
            continue
        loss += result.loss
        grad += result.gradient
        if result.sweeps is not None:
            sweeps.append(result.sweeps)
    return loss, grad, skipped, sweeps


def _parse(task: tuple[np.ndarray, list[int]]) -> tuple[list[str], list[int], list[bool], int]:
    """Bracketed trees of the dev sentences ``indices`` at ``theta``, EP sweeps, convergence, fallbacks."""
    theta, indices = task
    settings: TrainSettings = _STATE["settings"]
    parser = LatentParser(_STATE["model"].with_theta(theta), settings.decoding, EPSettings(settings.ep_sweeps))
    trees = []
    for d in indices:
        words, mask = _STATE["dev"][d]
        if mask is None:
            tree = parser.parse(words)
        else:
            tree = parser.decode(words, expand_mask(mask, parser.model.grammar.n_labels))[0]
        trees.append(tree.pformat(margin=1 << 30))
    return trees, parser.sweeps, parser.converged, parser.failures


def _ignore_interrupt() -> None:
    """Pool workers leave Ctrl-C to the parent (which keeps the best epoch and stops them)."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _map(pool: Any, fn: Any, theta: np.ndarray, indices: Sequence[int], workers: int) -> list[Any]:
    """``fn`` over ``indices`` at ``theta``: in this process, or split over the pool's workers."""
    if pool is None:
        return [fn((theta, list(indices)))]
    chunks = [c.tolist() for c in np.array_split(np.asarray(indices), workers) if len(c)]
    return list(pool.map(fn, [(theta, c) for c in chunks]))


def _mean(values: list[int] | list[bool]) -> float | None:
    return float(np.mean(values)) if values else None


def train_latent(trees: Sequence[Tree], dev: Sequence[Tree], latent: LatentSettings, settings: TrainSettings,
                 progress: bool = False, dictionary: Mapping[str, int] | None = None,
                 init: LatentModel | None = None) -> Trained:
    """Train the factored latent model on cleaned trees (module docstring); ``dev`` may be empty (the best
    epoch is then the one of lowest training loss). ``dictionary``: the tag dictionary's thresholds
    (``xbar.train_xbar``; tiny test treebanks). ``init``: a trained model of fewer factors (same training
    trees) whose X-bar PCFG, features and weights start this one (``LatentModel.grown``)."""
    start = time.perf_counter()
    if init is not None:
        model = init.grown(latent)
        xbar = model.xbar
    else:
        xbar = train_xbar(trees, dictionary=dictionary)
        words = (w for t in trees for w in t.leaves())
        model = LatentModel.initial(xbar, LexicalFeatures.from_words(words, xbar.tags, latent.word_threshold), latent)
    train = _prepare(xbar, model, trees, True, settings.max_length)
    devs = _prepare(xbar, model, dev, False, settings.max_length)
    _STATE.update(model=model, settings=settings, train=train, dev=devs)
    prepare_seconds = time.perf_counter() - start
    theta = model.theta.copy()
    opt = AdaGrad(theta.shape, settings.learning_rate, delta=settings.delta)
    rng = np.random.default_rng(settings.seed)
    per_epoch = -(-len(train) // settings.batch_size)
    counters: dict[str, list[int]] = {"skipped": [], "sweeps": []}

    def batches() -> list[list[int]]:
        order = rng.permutation(len(train))
        return [order[b:b + settings.batch_size].tolist() for b in range(0, len(train), settings.batch_size)]

    def step(batch: list[int]) -> float:
        results = _map(pool, _batch, theta, batch, settings.workers)
        grad = sum(r[1] for r in results)
        counters["skipped"] += [r[2] for r in results]
        counters["sweeps"] += [s for r in results for s in r[3]]
        opt.step_composite(theta, grad * (len(train) / len(batch)), settings.l2)
        return float(sum(r[0] for r in results))

    def evaluate(current: Sequence[np.ndarray], entry: dict[str, Any]) -> float:
        entry.update(train_skipped=int(sum(counters["skipped"])), train_ep_sweeps_mean=_mean(counters["sweeps"]))
        counters["skipped"], counters["sweeps"] = [], []
        if not devs:
            return -float(entry["loss"])
        t0 = time.perf_counter()
        results = _map(pool, _parse, current[0], range(len(devs)), settings.workers)
        parsed = [Tree.fromstring(s) for r in results for s in r[0]]
        score = evalb(dev, parsed)
        entry.update(dev_f1=score.short.f1, dev_f1_all=score.all.f1, dev_exact_match=score.short.exact_match,
                     dev_ep_sweeps_mean=_mean([s for r in results for s in r[1]]),
                     dev_ep_converged_fraction=_mean([c for r in results for c in r[2]]),
                     dev_fallbacks=sum(r[3] for r in results), dev_seconds=round(time.perf_counter() - t0, 2))
        return float(score.short.f1)

    loop = EpochLoop([theta], total_batches=settings.epochs * per_epoch, total_epochs=settings.epochs,
                     average=settings.average, progress=progress, name="latent ", interruptible=True)
    pool = (multiprocessing.get_context("fork").Pool(settings.workers, initializer=_ignore_interrupt)
            if settings.workers > 1 else None)
    try:
        loop.run(settings.epochs, batches, step, evaluate)
    finally:
        if pool is not None:
            pool.terminate()
        _STATE.clear()
    result = loop.result()
    return Trained(model.with_theta(result.params[0].copy()), result.history, result.best_epoch, result.interrupted,
                   len(train), round(prepare_seconds, 2))
