"""``python -m engine train-joint``: a pipeline's parser fine-tuned as a joint model of tags and trees (issue 23).

Warm start from the pipeline's parser (``--start parser``) or its first-order pruner (``--start pruner``, as
``train --order 2`` starts), and its tagger (Smith & Eisner 2008 §3.4 with §7's surrogate CLL,
``engine.training.joint``): each training sentence gets its candidate tags from a jackknife fold tagger trained
as the pipeline's tagger is (``engine.text.jackknife.jackknife_candidates``; the gold tags added), the
parser's weights are trained under joint BP over links and tags, the epoch with the best dev UAS (the dev set
re-tagged by the pipeline's tagger and parsed jointly) is kept, and the pipeline is written again with those
weights, ``inference.tag_average: joint`` and the candidate settings as its defaults, everything else as it
was. The pipeline's tagger is not retrained (TAG and CHAIN are its CRF). From the parser no L2 by default: its
weights are already fitted, and AdaGrad's normalised L2 step would move every weight the training data does not
touch by the learning rate on every step. What each start and candidate setting gave on EWT: docs/joint-tags.md.
"""

from __future__ import annotations

import os
import time
from dataclasses import replace
from typing import Any

import numpy as np

from engine.bp_parser import BPParser
from engine.data.conllu_io import check_parsable, read_conllu
from engine.inference.bp import BPConfig
from engine.inference.settings import resolve
from engine.model.store import ModelError, file_sha256
from engine.pipeline import Pipeline
from engine.scoring.link_labels import LinkLabels
from engine.text.jackknife import jackknife_candidates
from engine.text.tag_candidates import CandidateSettings
from engine.training.cll import TrainConfig
from engine.training.joint import train_joint
from engine.training.options import JOINT_OBJECTIVES, JOINT_STARTS, TrainOptions
from engine.training.surrogate import train_surrogate

PathLike = str | os.PathLike[str]

JOINT_DEFAULTS = {  # per start: from the trained parser a fine-tune (few epochs, small steps, no L2); from the
    # pruner what `train --order 2` does (engine.training.options: 3 epochs at 0.05, L2 10)
    "parser": TrainConfig(epochs=2, learning_rate=0.01, l2=0.0),
    "pruner": TrainConfig(epochs=3, learning_rate=0.05, l2=10.0),
}
TRAIN_BP_ITERATIONS: int = TrainOptions.bp_iterations  # BP iterations per training sentence, as `train --order 2`


def fine_tune_joint(model: PathLike, train_path: PathLike, dev_path: PathLike, out: PathLike,
                    config: TrainConfig | None = None, folds: int = 5, max_sentences: int = 0,
                    progress: bool = True, start: str = "parser", objective: str = "joint",
                    bp_iterations: int = TRAIN_BP_ITERATIONS,
                    tag_candidates: tuple[int | None, float | None] = (None, None),
                    labels_in_graph: bool = False) -> dict[str, Any]:
    """Fine-tune ``model``'s parser jointly with tags (module docstring) and write the pipeline to ``out``;
    returns the summary the command prints. ``start``: ``parser`` (its weights) or ``pruner`` (the pipeline's
    first-order pruner weights and zero higher-order weights, as ``train --order 2`` starts its parsers).
    ``objective``: ``joint`` (surrogate CLL through joint BP), ``joint-l2`` (approximation-aware: L2 of the link
    and tag beliefs, back-propagated through joint BP, ``engine.training.joint.joint_l2_gradient_terms``), or
    ``surrogate`` (the control: the same start, the same jackknifed 1-best tags, plain surrogate CLL without tag
    variables, ``engine.training.surrogate``). The dev UAS that chooses the
    epoch is the joint parse's either way. ``tag_candidates`` = (k, min_marginal) overrides the model's candidate
    settings for training and the dev parses, kept as the written default. ``labels_in_graph``: ``with_link_labels``."""
    if start not in JOINT_STARTS or objective not in JOINT_OBJECTIVES:
        raise ValueError(f"start must be one of {JOINT_STARTS} and objective one of {tuple(JOINT_OBJECTIVES)}")
    config = config or JOINT_DEFAULTS[start]
    began = time.perf_counter()
    pipeline, parser, settings = _starting_point(model, tag_candidates)
    # the dev parses: the model's inference settings; an approximation-aware model is chosen (and written) with
    # the BP iterations it is trained through, as `train --objective` does (Gormley et al. 2015 §6: test as trained)
    aware = {"iterations": bp_iterations} if objective == "joint-l2" else None
    bp = resolve("bp", parser.manifest, aware)
    assert isinstance(bp, BPConfig)
    train_bp = BPConfig(max_iterations=bp_iterations, schedule="serial")
    if start == "pruner":
        if parser.pruner is None:
            raise ModelError(f"{model}: its parser has no pruner to start from")
        parser.weights = np.concatenate([np.asarray(parser.pruner[:parser.extractor.dim], dtype=np.float64),
                                         np.zeros(len(parser.weights) - parser.extractor.dim)])
    gold = read_conllu(train_path)[: max_sentences or None]
    check_parsable(gold, train_path)
    if labels_in_graph:
        with_link_labels(parser, gold)
    dev_gold = read_conllu(dev_path)
    check_parsable(dev_gold, dev_path)
    jackknifed, candidates = jackknife_candidates(gold, settings, folds=folds, seed=config.seed, progress=progress)
    several = np.concatenate([c.allowed.sum(axis=1) > 1 for c in candidates if c is not None])
    dev = [s.copy() for s in dev_gold]
    found: dict[int, Any] = {}
    pipeline.tag_and_sample(dev, retag=True, candidates=(settings, found))
    dev_candidates = [found.get(i) for i in range(len(dev))]
    dev_words = sum(len(s.forms) for s in dev_gold)

    def dev_uas(weights: np.ndarray) -> float:
        saved, parser.weights = parser.weights, weights
        try:
            parsed = parser.parse(dev, bp, labels=False, candidates=dev_candidates)
        finally:
            parser.weights = saved
        right = sum(int((np.asarray(p.heads)[1:] == np.asarray(g.heads)[1:]).sum())
                    for p, g in zip(parsed, dev_gold, strict=True))
        return 100.0 * right / dev_words

    before = dev_uas(np.asarray(parser.weights, dtype=np.float64))
    if objective == "surrogate":
        parser.weights = np.array(parser.weights, dtype=np.float64)
        result = train_surrogate(parser, jackknifed, config, train_bp, dev_uas, progress)
    else:
        result = train_joint(parser, jackknifed, [(s.upos, s.xpos) for s in gold], candidates,
                             config, train_bp, dev_uas, progress, objective="l2" if objective == "joint-l2" else "cll")
    parser.weights = result.weights
    inference = {**(parser.manifest.get("inference") or {}), "tag_average": "joint",
                 "tag_candidates": {"k": settings.k, "min_marginal": settings.min_marginal}}
    if aware:
        inference["bp"] = {**(inference.get("bp") or {}), **aware}
    joint = {
        "objective": JOINT_OBJECTIVES[objective],
        "warm_start": f"{os.fspath(model)} ({start})", "train_file": os.path.basename(train_path),
        "sentences": len(gold), "folds": folds, "candidates": {"k": settings.k, "min_marginal": settings.min_marginal},
        "words_with_several_candidates": round(float(several.mean()), 4), "dev_uas_before": round(before, 4),
        "labels_in_graph": parser.link_labels is not None,
        "best_epoch": result.best_epoch, "history": result.history, "interrupted": result.interrupted,
        "config": {**result.config}, "seconds": round(time.perf_counter() - began, 1)}
    training, metrics = joint_provenance(parser.manifest, joint, dev_path, config.seed, file_sha256(train_path))
    parser.manifest.update(inference=inference, training=training, metrics=metrics)
    pipeline.save(out, {"name": os.path.basename(os.fspath(out).rstrip("/")), "inference": inference,
                        "training": training, "metrics": metrics})
    return {"model": os.fspath(out), **joint}


def _starting_point(model: PathLike,
                    tag_candidates: tuple[int | None, float | None]) -> tuple[Pipeline, BPParser, CandidateSettings]:
    """The pipeline to fine-tune, its parser and the candidate settings, refused clearly before any work."""
    pipeline = Pipeline.load(model)
    parser = pipeline.parser
    if pipeline.tagger is None or not isinstance(parser, BPParser):
        raise ModelError(f"{model}: joint training needs a pipeline with a tagger and a second-order BP parser")
    try:
        return pipeline, parser, CandidateSettings.resolve(parser.manifest, *tag_candidates)
    except ValueError as e:
        raise ModelError(str(e)) from e


def with_link_labels(parser: BPParser, sentences: list[Any]) -> None:
    """Give ``parser`` label-aware LINK factors over the labels of ``sentences`` (``engine.scoring.link_labels``,
    weights from zero) unless it has them; the written pipeline labels with them, its labeller component unused."""
    if parser.link_labels is None:
        parser.link_labels = LinkLabels.new(sorted({r for s in sentences for r in (s.deprels or [])}))
        parser.labeler = parser.link_labels


def joint_provenance(manifest: dict[str, Any], joint: dict[str, Any], dev_path: str | os.PathLike[str],
                     seed: int, train_sha256: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The ``training`` and ``metrics`` blocks of a joint-trained model's manifest: this run's train (and its
    sha256) and dev files, seed, best epoch and summary (``joint``), the start model's training block under
    ``start``, and as ``metrics.dev`` the best epoch's dev UAS (joint inference; labels not scored): the start
    model's metrics describe another parser (``python -m engine average`` reads ``metrics.dev.uas`` per source)."""
    best = [h["dev"] for h in joint["history"] if h.get("epoch") == joint["best_epoch"] and "dev" in h]
    training = {"train_file": joint["train_file"], "train_sha256": train_sha256,
                "dev_file": os.path.basename(dev_path), "seed": seed,
                "best_epoch": joint["best_epoch"], "joint": joint, "start": manifest.get("training") or {}}
    metrics = {"dev": {"uas": best[0], "tags": "predicted", "tag_average": "joint"}} if best else {}
    return training, metrics


def joint_config(start: str, epochs: int | None, learning_rate: float | None, l2: float | None,
                 seed: int) -> TrainConfig:
    """``JOINT_DEFAULTS[start]`` with what the user gave."""
    d = JOINT_DEFAULTS[start]
    return replace(d, seed=seed, epochs=d.epochs if epochs is None else epochs,
                   learning_rate=d.learning_rate if learning_rate is None else learning_rate,
                   l2=d.l2 if l2 is None else l2)
