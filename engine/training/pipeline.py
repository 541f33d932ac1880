"""Training a model end to end: read the treebanks, train (first-order CLL, or a first-order pruner then
surrogate CLL under BP for order 2), score on dev and save the model directory.

This is what ``python -m engine train`` runs, and what the service's training jobs run in a child
process. ``on_progress(fraction, stage)`` reports the overall progress (0..1) across the stages
``loading``, ``training pruner`` (order 2 without a given pruner), ``training``, ``evaluating``,
``saving`` and ``done``; an exception it raises stops training and propagates, with no model saved.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from engine.data.conllu_io import ConlluError, read_conllu
from engine.pipeline import MAX_TAG_SAMPLES, valid_tag_samples

log = logging.getLogger(__name__)

FACTOR_FAMILIES = ("grand", "sib", "childseq", "nocross")
COMPONENTS = ("tokenizer", "tagger", "parser", "labeler")
TREES = ("nonprojective", "projective")
ROOTS = ("single", "multi")
OBJECTIVES = ("cll", "l2", "ar", "l2+ar")  # engine.training.erma.OBJECTIVES
# Hashed rows per stage of the stacked labeller: two stages of 2^17 rows weigh what one stage of 2^18 did. On EWT
# dev (gold trees, predicted tags) 2^17 gives 95.05% of labels right against 95.07 for 2^18.
LABELER_BUCKETS = 1 << 17
# Copies of each training sentence under tags drawn from its jackknife fold tagger's posterior that the labeller
# also trains on, by default (when the tagger and the labeller are trained): chosen on EWT dev (README, *Labels
# under tag uncertainty*).
LABELER_TAG_SAMPLES = 1
MAX_LABELER_TAG_SAMPLES = 16

ProgressCallback = Callable[[float, str], None]
PathLike = str | os.PathLike[str]


class TrainOptionsError(ValueError):
    """Training options that cannot work together, explained."""


@dataclass(frozen=True)
class TrainOptions:
    """Everything that decides how a model is trained (the CLI flags of ``train``), validated once."""

    order: int = 1
    tree: str = "nonprojective"
    root: str = "single"
    epochs: int = 8
    batch_size: int = 32
    learning_rate: float | None = None  # None: 0.2 first-order, 0.05 for BP training
    l2: float = 10.0
    dim: int = 1 << 22
    seed: int = 0
    average: bool = True
    max_sentences: int | None = None
    factors: tuple[str, ...] = ("grand", "sib")  # higher-order factor families (order 2 only)
    bp_iterations: int = 3
    second_dim: int = 1 << 21
    name: str | None = None  # model name in the manifest (None: the output directory's name)
    components: tuple[str, ...] = COMPONENTS  # the parser always; tokenizer, tagger, labeler optional
    folds: int = 5  # jackknifing folds: the parser and labeler train on tags predicted by unseen-fold taggers,
    # and the labeler's second stage on first-stage labels predicted the same way (stacking)
    objective: str = "cll"  # cll, or approximation-aware l2, ar, l2+ar (engine.training.erma)
    anneal: tuple[float, float] = (1.0, 0.1)  # annealed-risk temperature, start -> end
    tag_samples: int = 0  # the model's default --tag-samples (manifest inference.tag_samples; needs a tagger)
    seeds: int = 1  # the parser is the mean of the weights of this many runs, seeds seed .. seed + seeds - 1
    # the labeller also trains on this many copies of each sentence under tags drawn by its jackknife fold tagger
    # (None: LABELER_TAG_SAMPLES when the tagger and the labeler are trained, else 0)
    labeler_tag_samples: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "factors", tuple(self.factors))
        object.__setattr__(self, "components", tuple(self.components))
        unknown_parts = sorted(set(self.components) - set(COMPONENTS))
        if unknown_parts or "parser" not in self.components:
            raise TrainOptionsError(f"components must include parser and come from {', '.join(COMPONENTS)}"
                                    + (f" (unknown: {', '.join(unknown_parts)})" if unknown_parts else ""))
        if not isinstance(self.folds, int) or self.folds < 2:
            raise TrainOptionsError(f"folds must be an integer of at least 2, got {self.folds!r}")
        if self.order not in (1, 2):
            raise TrainOptionsError(f"order must be 1 or 2, got {self.order!r}")
        if self.tree not in TREES:
            raise TrainOptionsError(f"tree must be one of {', '.join(TREES)}, got {self.tree!r}")
        if self.root not in ROOTS:
            raise TrainOptionsError(f"root must be one of {', '.join(ROOTS)}, got {self.root!r}")
        for field in ("epochs", "batch_size", "dim", "second_dim", "bp_iterations", "seeds"):
            value = getattr(self, field)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise TrainOptionsError(f"{field} must be an integer of at least 1, got {value!r}")
        if self.max_sentences is not None and self.max_sentences < 1:
            raise TrainOptionsError(f"max_sentences must be at least 1, got {self.max_sentences!r}")
        if self.learning_rate is not None and not (np.isfinite(self.learning_rate) and self.learning_rate > 0):
            raise TrainOptionsError(f"learning_rate must be > 0, got {self.learning_rate!r}")
        if not (np.isfinite(self.l2) and self.l2 >= 0):
            raise TrainOptionsError(f"l2 must be >= 0, got {self.l2!r}")
        if not valid_tag_samples(self.tag_samples):
            raise TrainOptionsError(f"tag_samples must be an integer from 0 to {MAX_TAG_SAMPLES}, "
                                    f"got {self.tag_samples!r}")
        if self.tag_samples and "tagger" not in self.components:
            raise TrainOptionsError("tag_samples needs the tagger component (tag sequences come from it)")
        k = self.labeler_tag_samples
        if k is not None:
            if not isinstance(k, int) or isinstance(k, bool) or not 0 <= k <= MAX_LABELER_TAG_SAMPLES:
                raise TrainOptionsError(f"labeler_tag_samples must be an integer from 0 to "
                                        f"{MAX_LABELER_TAG_SAMPLES}, got {k!r}")
            if k and not {"tagger", "labeler"} <= set(self.components):
                raise TrainOptionsError("labeler_tag_samples needs the tagger and labeler components (the "
                                        "labeller trains on tags drawn by the jackknife's fold taggers)")
        if self.objective not in OBJECTIVES:
            raise TrainOptionsError(f"objective must be one of {', '.join(OBJECTIVES)}, got {self.objective!r}")
        object.__setattr__(self, "anneal", tuple(self.anneal))
        if len(self.anneal) != 2 or not all(np.isfinite(t) and t > 0 for t in self.anneal):
            raise TrainOptionsError(f"anneal must be two temperatures > 0 (start, end), got {self.anneal!r}")
        if self.objective == "l2+ar" and self.epochs < 2:
            raise TrainOptionsError("objective l2+ar needs at least 2 epochs (L2 first, then annealed risk)")
        if self.order == 2:
            unknown = sorted(set(self.factors) - set(FACTOR_FAMILIES))
            if unknown:
                raise TrainOptionsError(f"unknown factor families: {', '.join(unknown)} "
                                        f"(available: {', '.join(FACTOR_FAMILIES)})")

    @property
    def effective_labeler_tag_samples(self) -> int:
        if self.labeler_tag_samples is not None:
            return self.labeler_tag_samples
        return LABELER_TAG_SAMPLES if {"tagger", "labeler"} <= set(self.components) else 0

    @property
    def effective_learning_rate(self) -> float:
        if self.learning_rate is not None:
            return self.learning_rate
        return 0.2 if self.order == 1 else 0.05


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


def check_parsable(sentences: Sequence[Any], source: PathLike) -> None:
    """Raise ``ConlluError`` for a sentence without words (nothing to parse or train on)."""
    for s in sentences:
        if s.n == 0:
            raise ConlluError(source, s.start_line, "sentence has no words")


def attachment(gold: Sequence[Any], parsed: Sequence[Any]) -> dict[str, Any]:
    """UAS/LAS/ECE of parsed sentences against gold ones."""
    from engine.evaluation.metrics import attachment_scores

    return attachment_scores(gold, [p.heads for p in parsed], [p.deprels for p in parsed],
                             [p.head_probs for p in parsed])


def erma_config(options: TrainOptions) -> Any:
    """The approximation-aware trainer's settings from the training options."""
    from engine.training.erma import ErmaConfig
    from engine.training.objectives import AnnealSchedule

    return ErmaConfig(options.objective, options.epochs, options.batch_size, options.effective_learning_rate,
                      options.l2, options.seed, options.average, AnnealSchedule(*options.anneal))


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
    """
    from engine.bp_parser import BPParser, load_any
    from engine.decode.labeler import CountLabeler
    from engine.features.extract import FeatureExtractor
    from engine.features.second_order import default_second_order
    from engine.features.templates import default_first_order
    from engine.inference.bp import BPConfig
    from engine.inference.exact import TreeConstraint
    from engine.model.store import file_sha256
    from engine.parser import FirstOrderParser
    from engine.training.cll import TrainConfig, train_cll
    from engine.training.seeds import train_seeds
    from engine.training.surrogate import train_surrogate

    order = options.order
    report = _Progress(on_progress, _spans(order, pruner_path is None, options.components))
    report("loading")
    config = TrainConfig(options.epochs, options.batch_size, options.effective_learning_rate, options.l2,
                         options.seed, options.average)
    constraint = TreeConstraint(options.tree, options.root)
    families = list(options.factors) if order == 2 else []
    train = read_conllu(train_path)
    if options.max_sentences:
        train = train[: options.max_sentences]
    dev = read_conllu(dev_path) if dev_path else None
    check_parsable(train, train_path)
    parts: dict[str, Any] = {}
    if "tokenizer" in options.components:
        from engine.text.tokenizer import Tokenizer

        report("training tokenizer")
        parts["tokenizer"] = Tokenizer.train(train, dev=dev, seed=options.seed, progress=progress)
    dev_gold = dev
    labeler_samples = options.effective_labeler_tag_samples
    train_draws: list[Any] = []  # tag samples of each (jackknifed) training sentence, for the labeller
    dev_draws: list[Any] = []  # tag samples of each dev sentence (with a tagger and options.tag_samples)
    if "tagger" in options.components:
        # the parser and labeler see predicted tags in training, as they will at test time
        import copy

        from engine.text.jackknife import jackknife_tag_draws
        from engine.text.tagger import Tagger

        report("training tagger")
        jackknifed, train_draws = jackknife_tag_draws(train, folds=options.folds, seed=options.seed,
                                                      progress=progress, samples=labeler_samples)
        report("training tagger", 0.8)
        parts["tagger"] = Tagger.train(train, dev=dev, seed=options.seed, progress=progress)
        train = jackknifed
        if dev is not None:  # tagged as `evaluate --tags predicted` will tag it, with the model's tag samples
            dev = copy.deepcopy(dev)
            for s, tagged in zip(dev, parts["tagger"].tag(dev, samples=options.tag_samples), strict=True):
                s.upos, s.xpos = list(tagged.upos), list(tagged.xpos)
                dev_draws.append(tagged.samples)
    labeler = CountLabeler.fit(train)
    provenance = {"train_file": Path(train_path).name, "train_sha256": file_sha256(train_path),
                  "train_sentences": len(train), "dev_file": Path(dev_path).name if dev_path else None,
                  "dev_sha256": file_sha256(dev_path) if dev_path else None}

    seeds = [options.seed + k for k in range(options.seeds)]
    runs: list[dict[str, Any]] = []
    if order == 2 and pruner_path:
        first = load_any(pruner_path)
        if not isinstance(first, FirstOrderParser) or first.constraint != constraint:
            raise TrainOptionsError(f"--pruner {pruner_path} must be a first-order model with --tree "
                                    f"{options.tree} --root {options.root}")
        first.labeler = labeler
    else:
        extractor = FeatureExtractor(tuple(default_first_order()), options.dim)
        first = FirstOrderParser(extractor, np.zeros(options.dim), constraint, labeler, {})

        def dev_uas_first(weights: np.ndarray) -> float:
            first.weights = weights
            return attachment(dev, first.parse(dev))["uas"]

        stage = "training" if order == 1 else "training pruner"
        report(stage)

        def run_first(seed: int, on_batch: Callable[[int, int], None]) -> Any:
            if order == 1 and options.objective != "cll":  # loss-aware training with exact inference (§4)
                from engine.training.erma import train_erma_exact

                return train_erma_exact(extractor, constraint, train, replace(erma_config(options), seed=seed),
                                        dev_uas_first if dev else None, progress, on_batch)
            return train_cll(extractor, constraint, train, replace(config, seed=seed) if order == 1 else
                             TrainConfig(8, options.batch_size, 0.2, options.l2, seed),
                             dev_uas_first if dev else None, progress, on_batch)

        # a first-order model is the mean of --seeds runs; a pruner for order 2 is one run
        result, runs = train_seeds(run_first, seeds if order == 1 else [options.seed], report.batches(stage))
        first.weights = result.weights
        if result.interrupted and order == 2:
            order = 1  # stopped while training the pruner: save what we have as a first-order model
    model: Any = first
    training: dict[str, Any] = {}
    if order == 2:
        model = BPParser.from_first_order(first, {f: tuple(default_second_order([f])) for f in families},
                                          options.second_dim, prune=True)
        bp = BPConfig(max_iterations=options.bp_iterations, schedule="serial")
        # approximation-aware models are chosen (and scored) with the BP iterations they were trained for
        inference = bp if options.objective != "cll" else BPConfig()  # BP's defaults for the others

        def dev_uas(weights: np.ndarray) -> float:
            saved, model.weights = model.weights, weights
            try:
                return attachment(dev, model.parse(dev, inference))["uas"]
            finally:
                model.weights = saved

        report("training")
        warm_start = model.weights.copy()

        def run_second(seed: int, on_batch: Callable[[int, int], None]) -> Any:
            model.weights = warm_start.copy()  # every run starts from the pruner's weights
            if options.objective == "cll":
                return train_surrogate(model, train, replace(config, seed=seed), bp, dev_uas if dev else None,
                                       progress, on_batch)
            from engine.training.erma import train_erma

            return train_erma(model, train, replace(erma_config(options), seed=seed), bp, dev_uas if dev else None,
                              progress, on_batch)

        result, runs = train_seeds(run_second, seeds, report.batches("training"))
        model.weights = result.weights
        if options.objective == "cll":
            training = {"objective": "surrogate-cll", "factors": families}
        else:
            training = {"objective": options.objective, "factors": families,
                        "inference_iterations": options.bp_iterations}
    else:
        training = {"objective": options.objective}
    if runs:  # --seeds N: the model's weights are the mean of N runs'
        if not dev:  # a run's "dev" score is then its negative training loss: not worth recording
            runs = [{k: v for k, v in r.items() if k != "dev"} for r in runs]
        training.update(method="mean of the weights of --seeds runs", runs=runs)
    if "labeler" in options.components:
        from engine.decode.loglinear_labeler import LogLinearLabeler
        from engine.decode.tag_marginal import with_tag_copies

        report("training labeler")
        copies = labeler_samples if train_draws else 0  # draws exist only when the tagger was trained
        labeler_train = with_tag_copies(train, train_draws) if copies else train
        parts["labeler"] = LogLinearLabeler.train(labeler_train, dev=dev, seed=options.seed, progress=progress,
                                                     folds=options.folds, buckets=LABELER_BUCKETS, group=1 + copies)
        parts["labeler"].info["tag_samples"] = copies
        model.labeler = parts["labeler"]
    dev_scores = None
    if dev:
        report("evaluating")
        from engine.decode.tag_marginal import parse_over_tag_samples

        def parse(sentences: list[Any]) -> list[Any]:
            return model.parse(sentences) if order == 1 else model.parse(sentences, inference)

        draws = dev_draws or [[] for _ in dev]
        dev_scores = attachment(dev, parse_over_tag_samples(dev, draws, parse, model.constraint, model.labeler))
        if options.tag_samples:
            dev_scores["tag_samples"] = options.tag_samples
    extra = extra_manifest() if callable(extra_manifest) else extra_manifest
    if dev_scores is not None and dev_gold is not dev:
        from engine.evaluation.metrics import tag_accuracy

        dev_scores["upos"] = tag_accuracy(dev_gold, dev)
    report("saving")
    from engine.pipeline import Pipeline

    # the model's inference defaults (engine.inference.settings): its tag samples, and an approximation-aware
    # BP model's iterations, those it was trained through
    inference_block: dict[str, Any] = {"tag_samples": options.tag_samples} if options.tag_samples else {}
    if "inference_iterations" in training:
        inference_block["bp"] = {"iterations": training["inference_iterations"]}

    Pipeline(model, **parts).save(out_dir, {
        "name": options.name or Path(out_dir).name,
        "training": {**training, **result.config, **provenance, "skipped_trees": result.skipped,
                     "best_epoch": result.best_epoch, "history": result.history,
                     "seconds": round(result.seconds, 1), "interrupted": result.interrupted},
        "metrics": {"dev": dev_scores},
        **({"inference": inference_block} if inference_block else {}),
        **(extra or {}),
    })
    report("done")
    return {"model": os.fspath(out_dir), "order": order, "components": ["parser", *parts],
            "best_epoch": result.best_epoch,
            "seconds": round(result.seconds, 1), "skipped_trees": result.skipped,
            "interrupted": result.interrupted, "dev": dev_scores, **({"runs": runs} if runs else {})}
