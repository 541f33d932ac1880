"""Command-line interface: ``python -m engine {train,train-component,train-joint,average,evaluate,parse,calibrate,
score}``.

Every command reads CoNLL-U through ``engine.data.conllu_io`` and reports problems as one line on
stderr with exit status 2 (bad input) instead of a traceback.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from engine.cli_args import build_parser
from engine.cli_args import given_settings as _given_settings  # noqa: F401  (tests import it from here)
from engine.cli_parse import (
    UsageError,
    bulk_collector,
    check_tag_samples,
    load_parser,
    resolve_tag_samples,
    run_parse,
    tag_and_parse,
)
from engine.constituency import contract as constituency
from engine.constituency.contract import EvalbError, TreebankError
from engine.constituency.spelling import ptb_words
from engine.data.conllu_io import (
    ConlluError,
    atomic_text,
    check_parsable,
    read_conllu,
)
from engine.decode.conformal import fit_conformal
from engine.evaluation.calibration_fit import fit_calibration
from engine.evaluation.metrics import attachment_scores, confidence_scores, inference_summary, tag_accuracy
from engine.evaluation.reliability_plot import draw_reliability, reliability_series
from engine.evaluation.scored_file import score_file
from engine.evaluation.ud_align import evaluate_ud
from engine.model.store import ModelError, file_sha256, update_manifest
from engine.pipeline import SAVED_COMPONENTS, Pipeline
from engine.text.treebank_text import raw_text
from engine.training import options as train_options
from engine.training.average import average_parsers
from engine.training.morphology import add_components
from engine.training.pipeline import train_model

log = logging.getLogger("engine")


def _constituency_commands() -> ModuleType:
    """The constituency side of the command line, imported when a command needs it: it brings nltk, whose
    import costs about a second that a dependency command would otherwise pay (issue 20)."""
    from engine.constituency import commands

    return commands


def _one(paths: list[str] | None, flag: str) -> str | None:
    """The single file a dependency command's ``flag`` takes (constituency commands take several)."""
    if paths is not None and len(paths) > 1:
        raise UsageError(f"{flag} takes one CoNLL-U file (several .mrg files are for constituency models)")
    return paths[0] if paths else None


def cmd_train(args: argparse.Namespace) -> int:
    if args.formalism == "constituency":
        return _constituency_commands().train(args)
    args.train, args.dev = _one(args.train, "--train"), _one(args.dev, "--dev")
    try:
        options = train_options.from_arguments(args)
        summary = train_model(args.train, args.dev, args.out, options, pruner_path=args.pruner,
                              progress=not args.quiet)
    except train_options.TrainOptionsError as e:
        raise UsageError(str(e)) from e
    if args.dev and args.calibrate and not summary["interrupted"]:
        summary["calibration"] = calibrate_trained(args.out, args.dev)
    print(json.dumps(summary, indent=2))
    return 130 if summary["interrupted"] else 0


def cmd_train_component(args: argparse.Namespace) -> int:
    summary = add_components(args.model, list(dict.fromkeys(args.components)), args.train, args.out or args.model,
                             seed=args.seed, progress=not args.quiet)
    print(json.dumps(summary, indent=2))
    return 0


def cmd_train_joint(args: argparse.Namespace) -> int:
    from engine.training.joint_finetune import fine_tune_joint, joint_config

    try:
        config = joint_config(args.start, args.epochs, args.learning_rate, args.l2, args.seed)
    except ValueError as e:
        raise UsageError(str(e)) from e
    summary = fine_tune_joint(args.model, args.train, args.dev, args.out, config, folds=args.folds,
                              max_sentences=args.max_sentences, progress=not args.quiet, start=args.start,
                              objective=args.objective, bp_iterations=args.bp_iterations,
                              tag_candidates=(args.tag_candidates, args.tag_min_marginal),
                              labels_in_graph=args.labels_in_graph)
    print(json.dumps(summary, indent=2))
    return 130 if summary["interrupted"] else 0


def cmd_average(args: argparse.Namespace) -> int:
    check_tag_samples(args)
    parser = average_parsers(args.models)
    source = Pipeline.load(args.components_from or args.models[0])
    parts = {name: getattr(source, name) for name in SAVED_COMPONENTS}
    if args.tag_samples and parts["tagger"] is None:
        raise UsageError("--tag-samples needs a tagger: add --components-from PIPELINE")
    if args.tag_samples is not None:
        parser.manifest["inference"] = {**(parser.manifest.get("inference") or {}), "tag_samples": args.tag_samples}
    pipeline = Pipeline(parser, **parts)
    extra: dict[str, Any] = {"name": args.name or Path(args.out).name}
    if args.components_from:
        trained = source.manifest.get("training") or {}
        trained = trained.get("components_from", trained)  # a pipeline whose components came from another
        extra["training"] = {**parser.manifest["training"], "components_from": {
            "model": Path(args.components_from).name, "name": source.manifest.get("name"),
            **{k: trained.get(k) for k in ("train_file", "train_sha256")}}}
    if args.dev:  # scored as `evaluate --tags predicted` (or gold tags without a tagger) would score it
        gold = read_conllu(args.dev)
        check_parsable(gold, args.dev)
        args.pipeline, args.model, args.tag_samples = pipeline, args.out, pipeline.default_tag_samples
        # exact marginals, or BP with the model's settings (engine.inference.settings)
        extra["metrics"] = {"dev": _score_gold_tokens(args, parser.parse, gold,
                                                      predicted=pipeline.tagger is not None)[0]}
    pipeline.save(args.out, extra)
    print(json.dumps({"model": args.out, "averaged": len(args.models), "components": pipeline.components,
                      "dev": extra.get("metrics", {}).get("dev")}, indent=2))
    return 0


def _system_conllu(pipeline: Pipeline, sentences: list[Any], parsed: list[Any]) -> list[Any]:
    """Parsed sentences as the UD evaluation reads them: the input sentences (with their predicted tags) with
    the parse's HEAD and DEPREL and the LEMMA and FEATS of the model's components (``_`` without them). The
    same sentences as writing them as CoNLL-U and reading that back gives, without the text in between
    (tested): the evaluation reads no other column, and only the multiword-token lines of ``lines``."""
    analyses = pipeline.analyse(sentences, [p.deprels for p in parsed])
    out = []
    for s, p, (lemmas, feats, _) in zip(sentences, parsed, analyses, strict=True):
        heads = np.array(p.heads, dtype=np.int64)
        heads[0] = -1
        out.append(dataclasses.replace(s, heads=heads, deprels=list(p.deprels), lemmas=list(lemmas or ["_"] * s.n),
                                       feats=list(feats or ["_"] * s.n)))
    return out


# the CoNLL 2018 scores of LEMMA and FEATS that `evaluate` adds on gold tokens (engine.evaluation.ud_align)
MORPHOLOGY_METRICS = ("lemmas", "ufeats", "alltags", "clas", "mlas", "blex")


def cmd_evaluate(args: argparse.Namespace) -> int:
    if constituency.is_model(args.model):
        if args.cluster:
            raise UsageError(f"--cluster: {args.model} is a constituency model, which evaluates in one process")
        return _constituency_commands().evaluate(args)
    args.data = _one(args.data, "--data")
    start = time.perf_counter()
    check_tag_samples(args)
    if args.tag_samples and not (args.from_text or args.tags == "predicted"):
        raise UsageError("--tag-samples needs tags predicted by the model: add --tags predicted or --from-text")
    if args.wrap is not None and (not args.from_text or args.wrap < 1):
        raise UsageError("--wrap needs --from-text and a positive width")
    if args.reliability_plot and args.from_text:
        raise UsageError("--reliability-plot needs gold tokens: leave out --from-text")
    _, parse = load_parser(args)
    resolve_tag_samples(args)
    gold = read_conllu(args.data)
    check_parsable(gold, args.data)
    if args.from_text:
        try:
            system = args.pipeline.tokenize(raw_text(gold, width=args.wrap))
        except ModelError as e:
            raise UsageError(f"{args.model}: {e}") from e
        _, parsed = tag_and_parse(args, parse, system, retag=True)
        seconds = time.perf_counter() - start
        scores = evaluate_ud(gold, _system_conllu(args.pipeline, system, parsed))
        gold_words = sum(s.n for s in gold)
        scores.update({"tag_samples": args.tag_samples, "seconds": round(seconds, 3), "gold_words": gold_words,
                       "words_per_second": round(gold_words / seconds, 1) if seconds > 0 else None})
    else:
        scores, parsed, inputs = _score_gold_tokens(args, parse, gold, predicted=args.tags == "predicted")
        system = _system_conllu(args.pipeline, inputs, parsed)
        ud = evaluate_ud(gold, system)
        scores.update({m: ud[m] for m in MORPHOLOGY_METRICS})
        seconds = time.perf_counter() - start
        scores["tags"] = args.tags
        scores.update(inference_summary(parsed))
        if args.reliability_plot:
            try:
                draw_reliability(args.reliability_plot, reliability_series(gold, parsed, args.confidence_arrays),
                                 f"{Path(args.model).name} on {Path(args.data).name}")
            except RuntimeError as e:  # no matplotlib
                raise UsageError(str(e)) from e
        scores["seconds"] = round(seconds, 3)
        scores["tokens_per_second"] = round(scores["tokens"] / seconds, 1) if seconds > 0 else None
    if args.json:
        print(json.dumps(scores))
    else:
        for key, value in scores.items():
            if key != "reliability":
                print(f"{key:>18}: {value:.4f}" if isinstance(value, float) else f"{key:>18}: {value}")
        for row in scores.get("reliability", []):
            print(f"  [{row['bin'][0]:.3f}, {row['bin'][1]:.3f})  n={row['count']:>6}  "
                  f"conf={row['confidence'] if row['confidence'] is None else round(row['confidence'], 3)}  "
                  f"acc={row['accuracy'] if row['accuracy'] is None else round(row['accuracy'], 3)}")
    return 0


def cmd_calibrate(args: argparse.Namespace) -> int:
    print(json.dumps(calibrate_model(args)))
    return 0


def calibrate_trained(model: str | Path, dev: str | Path) -> dict[str, Any]:
    """The calibration that ends a training with a dev set (``train --dev``, the service's training jobs): the
    same fit as ``python -m engine calibrate --model MODEL --data DEV``, under the model's default inference."""
    return calibrate_model(build_parser().parse_args(["calibrate", "--model", str(model), "--data", str(dev)]))


def calibrate_model(args: argparse.Namespace) -> dict[str, Any]:
    """Fit the calibration (``engine.evaluation.calibration_fit``: head power, isotonic stage, label and tree
    powers) and the conformal thresholds on ``--data`` under the model's default inference, with the command's
    inference flags, write them into the model's manifest and return the summary ``calibrate`` prints (also
    run by ``train`` on its ``--dev`` set)."""
    check_tag_samples(args)
    given_samples = args.tag_samples
    _, parse = load_parser(args)
    resolve_tag_samples(args)
    gold = read_conllu(args.data)
    check_parsable(gold, args.data)
    args.calibration = "none"
    before, parsed, inputs = _score_gold_tokens(args, parse, gold, predicted=args.pipeline.tagger is not None)
    if any(g.heads is None for g in gold):
        raise UsageError(f"{args.data}: calibration needs gold HEAD values")
    maps, tuned = fit_calibration(parsed, gold)  # engine.evaluation.calibration_fit
    stage = maps.pop("head_stage")
    after = attachment_scores(gold, [p.heads for p in tuned], [p.deprels for p in tuned], [p.head_probs for p in tuned])
    fitted = {"data": Path(args.data).name, "data_sha256": file_sha256(args.data),
              "objective": f"chosen-head brier (power, then {stage['stage']})",
              "stage_held_out_ece": stage["held_out_ece"],
              "tag_samples": args.tag_samples, "tag_average": args.tag_average or args.pipeline.default_tag_average,
              "ece_before": round(before["ece"], 5), "ece_after": round(after["ece"], 5)}
    inference = {**(args.pipeline.manifest.get("inference") or {}), "head_calibration": fitted, **maps,
                 "conformal": {**fit_conformal(tuned, inputs, gold, args.pipeline.parser.labeler),
                               "head_power": maps["head_power"],
                               **{k: fitted[k] for k in ("data", "data_sha256", "tag_samples", "tag_average")}}}
    if args.tag_average:  # the calibration holds for the settings it was fitted under: they become the defaults
        inference["tag_average"] = args.tag_average
    if given_samples is not None:
        inference["tag_samples"] = given_samples
    update_manifest(args.model, {"inference": inference})
    powers = {key: value for key, value in maps.items() if key.endswith("_power")}
    return {"model": args.model, **powers, **fitted, "uas": before["uas"], "las": before["las"]}


def _score_gold_tokens(args: argparse.Namespace, parse: Any, gold: list[Any],
                       predicted: bool) -> tuple[dict, list, list]:
    """Parse the gold-tokenised sentences (re-tagged by the model first if ``predicted``, with
    ``args.tag_samples``) and score them: UAS, LAS, ECE (and UPOS when re-tagged, ``tag_samples`` used);
    returns the scores, the parses and the (re-tagged) input sentences."""
    inputs = [s.copy() for s in gold] if predicted else gold
    upos_probs: dict[int, np.ndarray] = {}
    tagged, parsed = tag_and_parse(args, parse, inputs, retag=predicted, upos_probs=upos_probs)
    for i, p in enumerate(parsed):  # joint tags: the chosen UPOS's belief
        if p.upos_probs is not None:
            upos_probs[i] = p.upos_probs
    scores = attachment_scores(gold, [p.heads for p in parsed], [p.deprels for p in parsed],
                               [p.head_probs for p in parsed], reliability=getattr(args, "reliability", False))
    upos = ([s.upos for s in inputs], [upos_probs[i] for i in range(len(inputs))]) if predicted else None
    more, arrays = confidence_scores(gold, [p.heads for p in parsed], [p.deprels for p in parsed],
                                     [p.label_probs for p in parsed],
                                     [(p.diagnostics or {}).get("p_tree", 0.0) for p in parsed], upos)
    scores.update(more)
    args.confidence_arrays = arrays  # for --reliability-plot
    if predicted:
        scores["upos"] = tag_accuracy(gold, inputs)
    scores["tag_samples"] = args.tag_samples if tagged else 0
    return scores, parsed, inputs


SHIPPED_TOKENIZER = Path(__file__).resolve().parents[1] / "models" / "en_ewt"
"""The model whose tokenizer splits raw text for a constituency model by default (the service uses its default
model's)."""


def _ptb_tokenizer(args: argparse.Namespace) -> Callable[[str], list[list[str]]]:
    """Raw text -> sentences of words in the Penn Treebank's spelling, by ``--tokenizer-model``'s tokenizer."""
    path = Path(args.tokenizer_model) if args.tokenizer_model else SHIPPED_TOKENIZER
    pipeline = Pipeline.load(path)
    if pipeline.tokenizer is None:
        raise UsageError(f"--tokenizer-model {path}: this model has no tokenizer")
    return lambda text: [ptb_words(list(s.forms)) for s in pipeline.tokenize(text, args.blank_line)]


def cmd_parse(args: argparse.Namespace) -> int:
    if constituency.is_model(args.model):
        if args.cluster:
            raise UsageError(f"--cluster: {args.model} is a constituency model, which parses in one process")
        args.input_format = args.input_format or ("text" if args.text is not None else "tokens")
        tokenize = _ptb_tokenizer(args) if args.input_format == "text" else None
        return _constituency_commands().parse(args, tokenize=tokenize)
    args.input_format = args.input_format or "conllu"
    if args.input_format in constituency.INPUT_FORMATS:
        raise UsageError(f"--input-format {args.input_format} is for constituency models; {args.model} is not one")
    if args.output_format is not None:
        raise UsageError(f"--output-format is for constituency models (ptb or json); {args.model} is not one: it "
                         "writes CoNLL-U")
    if args.output:
        with atomic_text(args.output) as out:
            run_parse(args, out)
    else:
        run_parse(args, sys.stdout)
    return 0


def cmd_score(args: argparse.Namespace) -> int:
    """Attachment scores of a parsed file; confidences from MISC ``HeadProb`` (1.0 when absent)."""
    scores = score_file(args.gold, args.pred)
    print(json.dumps(scores) if args.json else "\n".join(f"{k:>14}: {v}" for k, v in scores.items()))
    return 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    bulk_collector()
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    command = {"train": cmd_train, "train-component": cmd_train_component, "train-joint": cmd_train_joint,
               "average": cmd_average,
               "evaluate": cmd_evaluate, "parse": cmd_parse, "calibrate": cmd_calibrate,
               "score": cmd_score}[args.command]
    try:
        return command(args)
    except (ConlluError, ModelError, UsageError, FileNotFoundError, IsADirectoryError, TreebankError, EvalbError,
            constituency.CommandError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        return 0
    except ConnectionError as e:  # --cluster: a scheduler that cannot be reached, or was lost mid-command
        print(f"error: {e}", file=sys.stderr)
        return 1
