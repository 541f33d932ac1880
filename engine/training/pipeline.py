"""Training a model end to end: read the treebanks, train (first-order CLL, or a first-order pruner then
surrogate CLL under BP for order 2), score on dev and save the model directory.

This is what ``python -m engine train`` runs, and what the service's training jobs run in a child
process. ``on_progress(fraction, stage)`` reports the overall progress (0..1) across the stages
``loading``, ``training pruner`` (order 2 without a given pruner), ``training``, ``evaluating``,
``saving`` and ``done``; an exception it raises stops training and propagates, with no model saved.
"""

from __future__ import annotations

import contextlib
import copy
import logging
import os
import uuid
from collections.abc import Callable, Mapping, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field, replace
from itertools import islice
from pathlib import Path
from typing import Any

import numpy as np

from engine.bp_parser import BPParser, load_any
from engine.data.conllu_io import ConlluError, check_parsable, iter_conllu, read_conllu  # noqa: F401 (re-exported)
from engine.decode.labeler import CountLabeler
from engine.decode.loglinear_labeler import LogLinearLabeler
from engine.decode.tag_marginal import parse_over_tag_samples, with_tag_copies
from engine.evaluation.metrics import attachment_scores, tag_accuracy
from engine.evaluation.ud_align import evaluate_ud, sentences_from_conllu
from engine.features.extract import FeatureExtractor
from engine.features.second_order import default_second_order
from engine.features.templates import default_first_order
from engine.inference.bp import BPConfig
from engine.kernels.exact import TreeConstraint
from engine.model.store import file_sha256
from engine.parser import FirstOrderParser
from engine.pipeline import Pipeline
from engine.scoring.hidden import HIDDEN_INIT_SCALE
from engine.scoring.link_labels import ROLE_LEARNING_RATE, LinkLabels
from engine.text.jackknife import jackknife_tag_draws
from engine.text.tagger import Tagger
from engine.text.tokenizer import Tokenizer
from engine.text.treebank_text import raw_text
from engine.training.cll import TrainConfig, forget_shared, train_cll
from engine.training.cluster import connect
from engine.training.erma import ErmaConfig, train_erma, train_erma_exact
from engine.training.mixing import train_mixed
from engine.training.morphology import MORPHOLOGY_COMPONENTS, train_morphology
from engine.training.objectives import AnnealSchedule
from engine.training.options import TrainOptions, TrainOptionsError  # declared there; imported from here too
from engine.training.seeds import train_seeds
from engine.training.surrogate import train_surrogate
from engine.training.tasks import task_map

log = logging.getLogger(__name__)

# Hashed rows per stage of the stacked labeller: two stages of 2^17 rows weigh what one stage of 2^18 did. On EWT
# dev (gold trees, predicted tags) 2^17 gives 95.05% of labels right against 95.07 for 2^18.
LABELER_BUCKETS = 1 << 17

ProgressCallback = Callable[[float, str], None]
PathLike = str | os.PathLike[str]


class _Progress:
    """Maps each stage's own progress (0..1) onto its span of the overall progress."""

    def __init__(self, callback: ProgressCallback | None, spans: dict[str, tuple[float, float]]) -> None:
        self.callback, self.spans = callback, spans

    def __call__(self, stage: str, fraction: float = 0.0) -> None:
        if self.callback is not None:
            lo, hi = self.spans.get(stage, (1.0, 1.0))
            self.callback(lo + (hi - lo) * min(max(fraction, 0.0), 1.0), stage)

    def batches(self, stage: str) -> Callable[[int, int], None]:
        """An ``on_batch(done, total)`` callback reporting ``stage``."""
        return lambda done, total: self(stage, done / total if total else 1.0)


def _spans(order: int, train_pruner: bool, components: Sequence[str] = ("parser",)) -> dict[str, tuple[float, float]]:
    """Where each stage lies in the overall progress: BP training is far slower per sentence than
    first-order training, so the pruner gets a fifth of the parser's span; the tokenizer, the jackknifed
    tagger and the labeler get fixed shares when they are trained."""
    start, end = 0.02, 0.95
    spans = {"loading": (0.0, start), "evaluating": (end, 0.98), "saving": (0.98, 1.0), "done": (1.0, 1.0)}
    for stage, share in (("training tokenizer", 0.05), ("training tagger", 0.2)):
        if stage.split()[1] in components:
            spans[stage] = (start, start + share)
            start += share
    if "labeler" in components:
        spans["training labeler"] = (end - 0.08, end)
        end -= 0.08
    if order == 2 and train_pruner:
        middle = start + 0.2 * (end - start)
        spans.update({"training pruner": (start, middle), "training": (middle, end)})
    else:
        spans["training"] = (start, end)
    return spans


def attachment(gold: Sequence[Any], parsed: Sequence[Any]) -> dict[str, Any]:
    """UAS/LAS/ECE of parsed sentences against gold ones."""
    return attachment_scores(gold, [p.heads for p in parsed], [p.deprels for p in parsed],
                             [p.head_probs for p in parsed])


def erma_config(options: TrainOptions) -> Any:
    """The approximation-aware trainer's settings from the training options."""
    return ErmaConfig(options.objective, epochs=options.epochs, batch_size=options.batch_size,
                      learning_rate=options.effective_learning_rate, l2=options.l2, seed=options.seed,
                      average=options.average, anneal=AnnealSchedule(*options.anneal))


def _score_tokenizer(tokenizer: Any, dev: Sequence[Any]) -> None:
    """Log the tokenizer's raw-text scores on ``dev`` (CoNLL 2018 aligned F1) and keep them in its
    ``info["dev"]``."""
    system = sentences_from_conllu(tokenizer.to_conllu(tokenizer.tokenize(raw_text(dev))))
    scores = evaluate_ud(dev, system)
    tokenizer.info["dev"] = {k: round(scores[k], 2) for k in ("tokens", "sentences", "words")}
    log.info("tokenizer dev (raw text): tokens %.2f sentences %.2f words %.2f", scores["tokens"],
             scores["sentences"], scores["words"])


@dataclass
class _Data:
    """The treebanks as the components see them: with a tagger, ``train`` is jackknife-tagged and ``dev``
    tagged by the final tagger (``dev_gold`` keeps the gold tags); the draws are their tag samples."""

    train: list[Any]
    dev: list[Any] | None
    dev_gold: list[Any] | None
    train_draws: list[Any] = field(default_factory=list)  # per training sentence, for the labeller
    dev_draws: list[Any] = field(default_factory=list)  # per dev sentence (options.tag_samples of them)
    client: Any = None  # the Dask client of --cluster, which the components train on


@dataclass
class _Parser:
    """The trained parser: the model, the order it was saved at (1 if an order-2 run was stopped while
    training its pruner), the trainers' result and runs, the manifest's ``training`` block and, for order 2,
    the BP settings it is scored with."""

    model: Any
    order: int
    result: Any
    runs: list[dict[str, Any]]
    training: dict[str, Any]
    inference: BPConfig | None = None


def _train_config(options: TrainOptions) -> TrainConfig:
    return TrainConfig(epochs=options.epochs, batch_size=options.batch_size,
                       learning_rate=options.effective_learning_rate, l2=options.l2, seed=options.seed,
                       average=options.average)


def _load(train_path: PathLike, dev_path: PathLike | None, options: TrainOptions) -> _Data:
    # --max-sentences N: only the first N sentences are read (and checked)
    train = list(islice(iter_conllu(train_path), options.max_sentences)) if options.max_sentences else \
        read_conllu(train_path)
    dev = read_conllu(dev_path) if dev_path else None
    check_parsable(train, train_path)
    return _Data(train, dev, dev)


def _train_tagger(data: _Data, options: TrainOptions, report: _Progress, progress: bool) -> Tagger:
    """Train the tagger, and tag the treebanks as they will be tagged at test time: the parser and the
    labeller train on jackknifed tags, dev is tagged as ``evaluate --tags predicted`` will tag it."""
    report("training tagger")
    jackknifed, data.train_draws = jackknife_tag_draws(data.train, folds=options.folds, seed=options.seed,
                                                       progress=progress and data.client is None,
                                                       samples=options.effective_labeler_tag_samples,
                                                       map_tasks=task_map(data.client))
    report("training tagger", 0.8)
    tagger = Tagger.train(data.train, dev=data.dev, seed=options.seed, progress=progress)
    data.train = jackknifed
    if data.dev is not None:  # with the model's tag samples
        data.dev = copy.deepcopy(data.dev)
        for s, tagged in zip(data.dev, tagger.tag(data.dev, samples=options.tag_samples), strict=True):
            s.upos, s.xpos = list(tagged.upos), list(tagged.xpos)
            data.dev_draws.append(tagged.samples)
    return tagger


def _train_first_order(data: _Data, options: TrainOptions, labeler: CountLabeler, report: _Progress,
                       progress: bool) -> _Parser:
    """The first-order parser (CLL, or approximation-aware under exact inference), the mean of ``--seeds``
    runs; for order 2 its pruner, one CLL run of 8 epochs."""
    order, dev, train = options.order, data.dev, data.train
    constraint = TreeConstraint(options.tree, options.root)
    extractor = FeatureExtractor(tuple(default_first_order()), options.dim)
    first = FirstOrderParser(extractor, np.zeros(options.dim), constraint, labeler, {})

    def dev_uas_first(weights: np.ndarray) -> float:
        assert dev is not None  # passed to the trainers only with a dev set
        first.weights = weights
        return attachment(dev, first.parse(dev))["uas"]

    stage = "training" if order == 1 else "training pruner"
    report(stage)

    cll = order == 2 or options.objective == "cll"
    seeds = [options.seed + k for k in range(options.seeds)] if order == 1 else [options.seed]
    # --cluster: several seeds run as Dask tasks (each in one process); one seed's first-order CLL is data-parallel
    tasks = task_map(data.client) if data.client is not None and len(seeds) > 1 else None
    client = data.client if cll and tasks is None else None
    progress = progress and tasks is None

    features = uuid.uuid4().hex  # the seeds' runs in one process (or worker) extract the features once

    def run_first(seed: int, on_batch: Callable[[int, int], None]) -> Any:
        if not cll:  # loss-aware training with exact inference (§4)
            return train_erma_exact(extractor, constraint, train, replace(erma_config(options), seed=seed),
                                    dev_uas_first if dev else None, progress, on_batch)
        config = (replace(_train_config(options), seed=seed) if order == 1
                  else TrainConfig(epochs=8, batch_size=options.batch_size, learning_rate=0.2, l2=options.l2,
                                   seed=seed))
        if client is not None and options.parameter_mixing:  # one exchange per epoch (engine.training.mixing)
            return train_mixed(extractor, constraint, train, config, client, dev_uas_first if dev else None, progress,
                               on_batch)
        return train_cll(extractor, constraint, train, config, dev_uas_first if dev else None, progress, on_batch,
                         client, clusters, shared=features if client is None else None)

    # latent edge clusters (engine.scoring.hidden): the parser's weights become (K, dim); none for a pruner
    clusters = options.hidden_clusters if order == 1 and options.hidden_clusters > 1 else None

    try:
        result, runs = train_seeds(run_first, seeds, report.batches(stage), tasks)
    finally:
        forget_shared(features)
        if tasks is not None:
            with contextlib.suppress(Exception):  # a lost cluster has freed them already
                data.client.run(forget_shared, features)
    first.weights = result.weights
    if result.interrupted and order == 2:
        order = 1  # stopped while training the pruner: save what we have as a first-order model
    training: dict[str, Any] = {"objective": options.objective}
    if clusters is not None:
        training["hidden"] = {"clusters": clusters, "init_scale": HIDDEN_INIT_SCALE, "init_seed": options.seed}
    return _Parser(first, order, result, runs, training)


def _load_pruner(pruner_path: PathLike, options: TrainOptions, labeler: CountLabeler) -> FirstOrderParser:
    first = load_any(pruner_path)
    if not isinstance(first, FirstOrderParser) or first.constraint != TreeConstraint(options.tree, options.root):
        raise TrainOptionsError(f"--pruner {pruner_path} must be a first-order model with --tree "
                                f"{options.tree} --root {options.root}")
    first.labeler = labeler
    return first


def _train_second_order(first: FirstOrderParser, data: _Data, options: TrainOptions, report: _Progress,
                        progress: bool) -> _Parser:
    """The second-order BP parser, pruned by and warm-started from ``first``: surrogate CLL, or
    approximation-aware through ``options.bp_iterations`` of BP; the mean of ``--seeds`` runs."""
    families = list(options.factors)
    dev, train = data.dev, data.train
    # latent edge clusters inside LINK (engine.scoring.hidden): K blocks grown from the pruner's weights
    clusters = options.hidden_clusters if options.hidden_clusters > 1 else None
    model = BPParser.from_first_order(first, {f: tuple(default_second_order([f])) for f in families},
                                      options.second_dim, prune=True, clusters=clusters, seed=options.seed)
    if options.labels_in_graph:  # label-aware LINK factors: a role model trained with the parser
        model.link_labels = LinkLabels.new(sorted({r for s in train for r in (s.deprels or [])}))
        model.labeler = model.link_labels
    bp = BPConfig(max_iterations=options.bp_iterations, schedule="serial")
    # approximation-aware models are chosen (and scored) with the BP iterations they were trained for
    inference = bp if options.objective != "cll" else BPConfig()  # BP's defaults for the others

    def dev_uas(weights: np.ndarray) -> float:
        assert dev is not None  # passed to the trainers only with a dev set
        saved, model.weights = model.weights, weights
        try:
            return attachment(dev, model.parse(dev, inference))["uas"]
        finally:
            model.weights = saved

    report("training")
    warm_start = model.weights.copy()
    seeds = [options.seed + k for k in range(options.seeds)]
    tasks = task_map(data.client) if data.client is not None and len(seeds) > 1 else None  # seeds as Dask tasks
    progress = progress and tasks is None

    def run_second(seed: int, on_batch: Callable[[int, int], None]) -> Any:
        model.weights = warm_start.copy()  # every run starts from the pruner's weights
        if model.link_labels is not None:  # ... and its roles from zero
            model.link_labels.weights = np.zeros(model.link_labels.weights.shape)
        if options.objective == "cll":
            return train_surrogate(model, train, replace(_train_config(options), seed=seed), bp,
                                   dev_uas if dev else None, progress, on_batch)

        return train_erma(model, train, replace(erma_config(options), seed=seed), bp, dev_uas if dev else None,
                          progress, on_batch)

    result, runs = train_seeds(run_second, seeds, report.batches("training"), tasks)
    model.weights = result.weights
    if model.link_labels is not None and result.roles is not None:  # the runs' mean, as the weights
        model.link_labels.weights = result.roles
    if options.objective == "cll":
        training: dict[str, Any] = {"objective": "surrogate-cll", "factors": families}
    else:
        training = {"objective": options.objective, "factors": families,
                    "inference_iterations": options.bp_iterations}
    if model.link_labels is not None:
        training["link_labels"] = {"learning_rate": ROLE_LEARNING_RATE, "labels": len(model.link_labels.labels),
                                   "templates": len(model.link_labels.templates)}
    if clusters is not None:
        training["hidden"] = {"clusters": clusters, "init_scale": HIDDEN_INIT_SCALE, "init_seed": options.seed,
                              "start": "the pruner's weights in every block, plus the noise"}
    return _Parser(model, 2, result, runs, training, inference)


def _train_labeler(data: _Data, options: TrainOptions, report: _Progress, progress: bool) -> LogLinearLabeler:
    """The stacked log-linear labeller, on the training trees with (when the tagger was trained) copies of
    each sentence under its jackknifed tag samples."""
    report("training labeler")
    copies = options.effective_labeler_tag_samples if data.train_draws else 0  # draws only with a tagger
    labeler_train = with_tag_copies(data.train, data.train_draws) if copies else data.train
    labeler = LogLinearLabeler.train(labeler_train, dev=data.dev, seed=options.seed, progress=progress,
                                     folds=options.folds, buckets=LABELER_BUCKETS, group=1 + copies,
                                     map_tasks=task_map(data.client))
    labeler.info["tag_samples"] = copies
    return labeler


def _evaluate(parser: _Parser, data: _Data, options: TrainOptions) -> dict[str, Any]:
    """Dev scores of the parser over the dev set's tag samples (and the tagger's UPOS accuracy)."""
    dev, model, inference = data.dev, parser.model, parser.inference
    assert dev is not None

    def parse(sentences: list[Any], labels: bool = True) -> list[Any]:
        return model.parse(sentences, labels=labels) if parser.order == 1 else model.parse(sentences, inference,
                                                                                          labels=labels)

    draws = data.dev_draws or [[] for _ in dev]
    scores = attachment(dev, parse_over_tag_samples(dev, draws, parse, model.constraint, model.labeler,
                                                    lambda copies: parse(copies, labels=False)))
    if options.tag_samples:
        scores["tag_samples"] = options.tag_samples
    return scores


def train_model(
    train_path: PathLike,
    dev_path: PathLike | None,
    out_dir: PathLike,
    options: TrainOptions,
    *,
    pruner_path: PathLike | None = None,
    progress: bool = True,
    on_progress: ProgressCallback | None = None,
    extra_manifest: Mapping[str, Any] | Callable[[], Mapping[str, Any]] | None = None,
) -> dict[str, Any]:
    """Train a model on ``train_path`` (best epoch chosen on ``dev_path`` when given) and save it to
    ``out_dir``; return the summary (``model``, ``order``, ``best_epoch``, ``seconds``, ``skipped_trees``,
    ``interrupted``, ``dev``, and with ``options.seeds`` > 1 ``runs``, one record per run).

    ``pruner_path`` (order 2): a first-order model to prune with and warm-start from instead of training
    one first. ``progress`` shows progress bars. ``extra_manifest`` adds fields to the manifest; a
    callable is called once, just before saving, so a caller can reserve e.g. a version number only for
    a model that is about to be written. Ctrl-C stops training and saves the best model so far
    (``interrupted`` is then true; an order-2 run stopped while training its pruner saves the pruner).
    Raises ``ConlluError`` for bad treebanks, ``ModelError`` for a bad pruner and
    ``TrainOptionsError`` for a pruner that does not match the options.

    ``options.cluster``: the independent trainings (the seeds' parsers, the jackknife folds, the labeller's
    first-stage folds) run as Dask tasks on that cluster (``engine.training.tasks``), and a single first-order
    CLL run data-parallel (``engine.training.cluster``); the cluster is connected to first, so an unreachable
    scheduler fails the training before any work, and nothing is saved.
    """
    with connect(options.cluster) if options.cluster else nullcontext() as client:
        return _train_model(train_path, dev_path, out_dir, options, client, pruner_path=pruner_path,
                            progress=progress, on_progress=on_progress, extra_manifest=extra_manifest)


def _train_model(train_path: PathLike, dev_path: PathLike | None, out_dir: PathLike, options: TrainOptions,
                 client: Any, *, pruner_path: PathLike | None, progress: bool, on_progress: ProgressCallback | None,
                 extra_manifest: Mapping[str, Any] | Callable[[], Mapping[str, Any]] | None) -> dict[str, Any]:
    """``train_model``'s work, with ``client`` the Dask client of ``--cluster`` (or None)."""
    report = _Progress(on_progress, _spans(options.order, pruner_path is None, options.components))
    report("loading")
    data = _load(train_path, dev_path, options)
    data.client = client
    parts: dict[str, Any] = {}
    if "tokenizer" in options.components:
        report("training tokenizer")
        parts["tokenizer"] = Tokenizer.train(data.train, seed=options.seed, progress=progress)
        if data.dev:
            _score_tokenizer(parts["tokenizer"], data.dev)
    parts.update(train_morphology(data.train, [c for c in MORPHOLOGY_COMPONENTS if c in options.components],
                                  seed=options.seed, progress=progress))  # on gold tags, before jackknifing
    if "tagger" in options.components:
        parts["tagger"] = _train_tagger(data, options, report, progress)
    labeler = CountLabeler.fit(data.train)
    provenance = {"train_file": Path(train_path).name, "train_sha256": file_sha256(train_path),
                  "train_sentences": len(data.train), "dev_file": Path(dev_path).name if dev_path else None,
                  "dev_sha256": file_sha256(dev_path) if dev_path else None}
    if options.order == 2 and pruner_path:
        parser = _train_second_order(_load_pruner(pruner_path, options, labeler), data, options, report, progress)
    else:
        parser = _train_first_order(data, options, labeler, report, progress)
        if parser.order == 2:
            parser = _train_second_order(parser.model, data, options, report, progress)
    if parser.runs:  # --seeds N: the model's weights are the mean of N runs'
        runs = parser.runs
        if not data.dev:  # a run's "dev" score is then its negative training loss: not worth recording
            runs = parser.runs = [{k: v for k, v in r.items() if k != "dev"} for r in runs]
        parser.training.update(method="mean of the weights of --seeds runs", runs=runs)
    if "labeler" in options.components:
        parts["labeler"] = parser.model.labeler = _train_labeler(data, options, report, progress)
    dev_scores = None
    if data.dev:
        report("evaluating")
        dev_scores = _evaluate(parser, data, options)
    extra = extra_manifest() if callable(extra_manifest) else extra_manifest
    if dev_scores is not None and data.dev_gold is not data.dev:
        assert data.dev is not None and data.dev_gold is not None  # dev_scores: there is a dev set
        dev_scores["upos"] = tag_accuracy(data.dev_gold, data.dev)
    report("saving")
    _save(out_dir, parser, parts, options, provenance, dev_scores, extra)
    report("done")
    result = parser.result
    return {"model": os.fspath(out_dir), "order": parser.order, "components": ["parser", *parts],
            "best_epoch": result.best_epoch,
            "seconds": round(result.seconds, 1), "skipped_trees": result.skipped,
            "interrupted": result.interrupted, "dev": dev_scores, **({"runs": parser.runs} if parser.runs else {})}


def _save(out_dir: PathLike, parser: _Parser, parts: dict[str, Any], options: TrainOptions,
          provenance: dict[str, Any], dev_scores: dict[str, Any] | None, extra: Mapping[str, Any] | None) -> None:
    """Write the model directory with its manifest."""
    training, result = parser.training, parser.result
    # the model's inference defaults (engine.inference.settings): its tag samples, and an approximation-aware
    # BP model's iterations, those it was trained through
    inference_block: dict[str, Any] = {"tag_samples": options.tag_samples} if options.tag_samples else {}
    if "inference_iterations" in training:
        inference_block["bp"] = {"iterations": training["inference_iterations"]}
    Pipeline(parser.model, **parts).save(out_dir, {
        "name": options.name or Path(out_dir).name,
        "training": {**training, **result.config, **provenance, "skipped_trees": result.skipped,
                     "best_epoch": result.best_epoch, "history": result.history,
                     "seconds": round(result.seconds, 1), "interrupted": result.interrupted},
        "metrics": {"dev": dev_scores},
        **({"inference": inference_block} if inference_block else {}),
        **(extra or {}),
    })
