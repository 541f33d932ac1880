"""Command-line interface: ``python -m engine {train,average,evaluate,parse,score}``.

Every command reads CoNLL-U through ``engine.data.conllu_io`` and reports problems as one line on
stderr with exit status 2 (bad input) instead of a traceback.
"""

from __future__ import annotations

import argparse
import io
import json
import logging
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from engine.bp_parser import BPParser
from engine.data.conllu_io import ConlluError, check_parsable, format_sentence, read_conllu, write_conllu
from engine.decode.calibration import calibrated_all, confidence_comments
from engine.decode.labeler import label_arcs
from engine.decode.tag_marginal import DEFAULT_TAG_AVERAGE, TAG_AVERAGES, parse_over_tag_samples
from engine.evaluation.calibration_fit import fit_calibration
from engine.evaluation.metrics import attachment_scores, confidence_scores, inference_summary, score_files, tag_accuracy
from engine.evaluation.reliability_plot import draw_reliability, reliability_series
from engine.evaluation.ud_align import evaluate_ud
from engine.inference.bp import SCHEDULES
from engine.inference.settings import method_settings, resolve
from engine.model.store import ModelError, file_sha256, update_manifest
from engine.pipeline import MAX_TAG_SAMPLES, Pipeline
from engine.text.layout import BLANK_LINE_MARKS, DEFAULT_BLANK_LINE
from engine.text.treebank_text import raw_text
from engine.training import options as train_options
from engine.training.average import average_parsers
from engine.training.pipeline import train_model

log = logging.getLogger("engine")


def _add_train(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("train", help="train a model (conditional log-likelihood, or approximation-aware --objective)")
    p.add_argument("--train", required=True, help="training treebank (CoNLL-U)")
    p.add_argument("--dev", help="development treebank for choosing the best epoch (CoNLL-U)")
    p.add_argument("--out", required=True, help="model directory to write")
    train_options.add_arguments(p)  # one flag per TrainOptions field (engine.training.options)
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.add_argument("--pruner", help="first-order model for arc pruning and warm start (--order 2); "
                   "default: train one first")


def _add_model_io(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", required=True, help="model directory")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--inference", choices=["exact", "bp", "relaxed", "pruned"], help="default: exact for "
                   "first-order models, bp for higher-order ones (exact is only valid for first-order models); "
                   "relaxed: Riedel & Smith (2010) Algorithm 1, BP over the higher-order factors whose gain exceeds "
                   "--epsilon; pruned: BP without the higher-order factors with |weight| < --prune-threshold")
    # the inference settings: None (not given) -> the model's (manifest inference.<method>), else the method's
    # declared default (engine.inference.settings)
    p.add_argument("--bp-iterations", type=int, help="at most this many BP iterations (per round for relaxed); "
                   f"default: the model's, else {_default('bp', 'iterations')} (pruned "
                   f"{_default('pruned', 'iterations')}, relaxed {_default('relaxed', 'iterations')})")
    p.add_argument("--epsilon", type=float, help="relaxed: gain threshold for adding a factor (default: the "
                   f"model's, else {_default('relaxed', 'epsilon'):g})")
    p.add_argument("--rounds", type=_rounds, default=argparse.SUPPRESS, metavar="R|inf",
                   help="relaxed: at most R rounds of adding factors (default: the model's, else "
                   f"{_default('relaxed', 'rounds') or 'inf'}; inf: until none is added)")
    p.add_argument("--prune-threshold", type=float, help="pruned: drop factors with |weight| below this (default: "
                   f"the model's, else {_default('pruned', 'threshold'):g})")
    p.add_argument("--schedule", choices=SCHEDULES, help="BP's order of updates (default: the model's, else "
                   f"{_default('bp', 'schedule')})")
    p.add_argument("--no-prune", action="store_true", help="with --inference bp: build the factor graph over all "
                   "arcs instead of those the model's first-order pruner keeps")
    p.add_argument("--constraint", choices=["tree", "ptree", "exactly1", "atmost1", "not2", "exactly1+no2cycle"],
                   help="with --inference bp: the hard factor to decode under (default: the model's tree)")
    p.add_argument("--tag-samples", type=int, default=None, metavar="K",
                   help="words tagged by the model's tagger: average the arc marginals and the label distributions "
                   "over the best tags and K tag sequences drawn from the tagger's posterior (up to K + 1 parses; "
                   "better calibrated head and label probabilities); default: the model's (manifest "
                   "inference.tag_samples, 0 if absent), 0 with --kbest, --samples or --constraint")
    p.add_argument("--calibration", choices=["model", "none"], default="model",
                   help="model: map head probabilities through the calibration fitted for the model (manifest "
                   "inference.head_power, `calibrate`; the trees do not change); none: the raw marginals")
    p.add_argument("--tag-average", choices=TAG_AVERAGES, default=None,
                   help="with tag samples, what is averaged over the tag sequences: 'marginals' (a parse per "
                   "distinct sequence; better calibrated) or 'potentials' (one parse per sentence over the "
                   "factors' potentials averaged across the sequences; faster); default: the model's (manifest "
                   f"inference.tag_average, else {DEFAULT_TAG_AVERAGE})")


def _default(method: str, name: str) -> Any:
    """The declared default of an inference setting (for the help texts)."""
    return method_settings(method)[name].default


# command-line flag (argparse dest) -> public name of the inference setting it gives
_INFERENCE_FLAGS = {"bp_iterations": "iterations", "epsilon": "epsilon", "rounds": "rounds",
                    "prune_threshold": "threshold", "schedule": "schedule"}


def _given_settings(args: argparse.Namespace) -> dict[str, Any]:
    """The inference settings given on the command line, by public name (``--rounds inf`` gives None)."""
    return {name: getattr(args, dest) for dest, name in _INFERENCE_FLAGS.items()
            if hasattr(args, dest) and (getattr(args, dest) is not None or dest == "rounds")}


def _rounds(text: str) -> int | None:
    if text.lower() in ("inf", "none"):
        return None
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer or inf, got {text!r}") from None


def _add_average(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("average", help="one parser from several trained alike (different --seed): the mean of "
                       "their weights")
    p.add_argument("--models", nargs="+", required=True, help="parser or pipeline models with the same order, "
                   "features and pruner (one model: its parser unchanged, e.g. to give it --components-from)")
    p.add_argument("--out", required=True, help="output model directory")
    p.add_argument("--components-from", metavar="PIPELINE", help="a pipeline model whose tokenizer, tagger and "
                   "labeler go with the averaged parser (default: the first model's)")
    p.add_argument("--dev", help="score the result on this treebank (re-tagged first when the result has a "
                   "tagger) and record the scores in its manifest")
    p.add_argument("--name", help="model name in the manifest (default: the output directory's name)")
    p.add_argument("--tag-samples", type=int, metavar="K", help="the result's default --tag-samples (manifest "
                   "inference.tag_samples; parse, evaluate and the service use it unless told otherwise)")


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m engine", description=__doc__.splitlines()[0])
    ap.add_argument("-v", "--verbose", action="store_true")
    sub = ap.add_subparsers(dest="command", required=True)
    _add_train(sub)
    _add_average(sub)
    p = sub.add_parser("evaluate", help="parse a treebank and score it against its gold trees")
    _add_model_io(p)
    p.add_argument("--data", required=True, help="gold treebank (CoNLL-U)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--reliability", action="store_true", help="include the reliability (calibration) table")
    p.add_argument("--reliability-plot", metavar="FILE.png", help="draw reliability diagrams of heads, labels, tags "
                   "and trees, calibrated and raw (needs matplotlib: the 'plots' extra; not with --from-text)")
    p.add_argument("--tags", choices=["gold", "predicted"], default="gold",
                   help="predicted: re-tag the gold-tokenised input with the model's tagger before parsing")
    p.add_argument("--from-text", action="store_true", help="run the whole pipeline from the raw '# text' lines "
                   "and score with the CoNLL 2018 UD alignment (tokens, sentences, words, UPOS, UAS, LAS as F1)")
    p.add_argument("--wrap", type=int, metavar="WIDTH", help="with --from-text: wrap the text's lines at WIDTH "
                   "characters (at spaces), as text files and conllu_to_text.pl (80) have it")
    p = sub.add_parser("parse", help="parse CoNLL-U (HEAD/DEPREL are ignored) and write CoNLL-U")
    _add_model_io(p)
    p.add_argument("--input", help="input file (default: stdin)")
    p.add_argument("--input-format", choices=["conllu", "text"], default="conllu",
                   help="conllu (words whose UPOS is '_' are tagged by the model's tagger) or raw text")
    p.add_argument("--text", help="raw text to parse (instead of --input)")
    p.add_argument("--blank-line", choices=BLANK_LINE_MARKS, default=DEFAULT_BLANK_LINE,
                   help="raw text: a blank line starts a paragraph (# newpar) or a document (# newdoc); a single "
                   "line break is a space either way")
    p.add_argument("--retag", action="store_true", help="re-tag every word with the model's tagger")
    p.add_argument("--output", help="output CoNLL-U file (default: stdout)")
    alt = p.add_mutually_exclusive_group()
    alt.add_argument("--kbest", type=int, metavar="K", help="write the K most probable trees of each sentence")
    alt.add_argument("--samples", type=int, metavar="N", help="write N trees sampled from each sentence's distribution")
    p.add_argument("--seed", type=int, help="random seed for --samples")
    p.add_argument("--sentence-confidence", action="store_true", help="write each sentence's p_tree (probability "
                   "that its heads are all right) and expected_errors as comments")
    p = sub.add_parser("calibrate", help="fit the calibration of head probabilities on a development treebank "
                       "(parsed as `evaluate` parses it: re-tagged when the model has a tagger) and store it in "
                       "the model's manifest (inference.head_power); an explicit --tag-samples or --tag-average "
                       "is stored as the model's default too (the calibration holds for the settings it was "
                       "fitted under)")
    _add_model_io(p)
    p.add_argument("--data", required=True, help="development treebank (CoNLL-U), never the test set")
    p = sub.add_parser("score", help="score a parsed CoNLL-U file against the gold file")
    p.add_argument("--gold", required=True)
    p.add_argument("--pred", required=True)
    p.add_argument("--json", action="store_true")
    return ap


class UsageError(ValueError):
    """A combination of options that cannot work, explained."""


def _load_parser(args: argparse.Namespace) -> tuple[Any, Any]:
    """The pipeline and a function ``parse(sentences)`` running the requested inference with its parser."""
    pipeline = Pipeline.load(args.model)
    args.pipeline = pipeline
    model = pipeline.parser
    inference = args.inference or ("bp" if isinstance(model, BPParser) else "exact")
    if inference == "exact":
        if isinstance(model, BPParser):
            raise UsageError(f"{args.model} is a higher-order model: exact inference is only valid for "
                             "first-order models; use --inference bp")
        if args.constraint:
            raise UsageError("--constraint needs --inference bp")
        return pipeline, lambda sentences, labels=True, mixtures=None: model.parse(sentences, args.batch_size, labels,
                                                                                   mixtures)
    if not isinstance(model, BPParser):
        model = BPParser.from_first_order(model)
    model.decode_constraint = args.constraint
    if args.no_prune:
        model.pruner = None
    try:
        config = resolve(inference, pipeline.manifest, _given_settings(args))
    except ValueError as e:
        raise UsageError(f"--inference {inference}: {e}") from e
    return pipeline, lambda sentences, labels=True, mixtures=None: model.parse(sentences, config, args.batch_size,
                                                                               labels, mixtures)


def cmd_train(args: argparse.Namespace) -> int:
    try:
        options = train_options.from_arguments(args)
        summary = train_model(args.train, args.dev, args.out, options, pruner_path=args.pruner,
                              progress=not args.quiet)
    except train_options.TrainOptionsError as e:
        raise UsageError(str(e)) from e
    print(json.dumps(summary, indent=2))
    return 130 if summary["interrupted"] else 0


def cmd_average(args: argparse.Namespace) -> int:
    _check_tag_samples(args)
    parser = average_parsers(args.models)
    source = Pipeline.load(args.components_from or args.models[0])
    parts = {name: getattr(source, name) for name in ("tokenizer", "tagger", "labeler")}
    if args.tag_samples and parts["tagger"] is None:
        raise UsageError("--tag-samples needs a tagger: add --components-from PIPELINE")
    if args.tag_samples is not None:
        parser.manifest["inference"] = {**(parser.manifest.get("inference") or {}), "tag_samples": args.tag_samples}
    pipeline = Pipeline(parser, **parts)
    extra: dict[str, Any] = {"name": args.name or Path(args.out).name}
    if args.components_from:
        trained = source.manifest.get("training") or {}
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


def _tagged(args: argparse.Namespace, sentences: list[Any], retag: bool,
            upos_probs: dict[int, np.ndarray] | None = None) -> tuple[list[int], list[Any]]:
    """Tag the sentences without UPOS (all with ``retag``) with the model's tagger, in place, drawing
    ``--tag-samples`` sequences for each: (indices tagged, draws per sentence); ``upos_probs`` as in
    ``Pipeline.tag_and_sample``."""
    try:
        return args.pipeline.tag_and_sample(sentences, retag=retag, samples=args.tag_samples, upos_probs=upos_probs)
    except ModelError as e:
        raise UsageError(f"{args.model}: {e}") from e


def _parse_tagged(args: argparse.Namespace, parse: Any, sentences: list[Any], draws: list[Any]) -> list[Any]:
    """``parse(sentences)``, the marginals of the sentences with tag ``draws`` averaged over them as well
    (``engine.decode.tag_marginal``)."""
    parser = args.pipeline.parser
    average = getattr(args, "tag_average", None) or args.pipeline.default_tag_average
    parsed = parse_over_tag_samples(sentences, draws, parse, parser.constraint, parser.labeler,
                                    lambda copies, mixtures=None: parse(copies, labels=False, mixtures=mixtures),
                                    average=average)
    return calibrated_all(parsed, None if getattr(args, "calibration", "model") == "none"
                          else args.pipeline.default_powers)


def _check_tag_samples(args: argparse.Namespace) -> None:
    """Check an explicit ``--tag-samples`` (before the model is loaded; ``_resolve_tag_samples`` fills in the
    model's default after)."""
    if args.tag_samples is None:
        return

    if not 0 <= args.tag_samples <= MAX_TAG_SAMPLES:
        raise UsageError(f"--tag-samples must be between 0 and {MAX_TAG_SAMPLES}, got {args.tag_samples}")
    if args.tag_samples and getattr(args, "constraint", None):
        raise UsageError("--tag-samples decodes under the model's tree; it cannot be combined with --constraint")


def _resolve_tag_samples(args: argparse.Namespace, single_tagging: bool = False) -> None:
    """``args.tag_samples`` = the explicit value, else the model's default (0 when the command needs a single
    tagging: a decoding constraint, k-best or sampled trees)."""
    if args.tag_samples is None:
        args.tag_samples = 0 if single_tagging or args.constraint else args.pipeline.default_tag_samples


def _system_conllu(sentences: list[Any], parsed: list[Any]) -> list[Any]:
    """Parsed sentences as CoNLL-U (with predicted tags), read back for the UD evaluation."""
    text = "".join(format_sentence(s, heads=p.heads, deprels=p.deprels, upos=s.upos, xpos=s.xpos)
                   for s, p in zip(sentences, parsed, strict=True))
    return read_conllu(io.StringIO(text), name="<system>", strict_heads=False)


def cmd_evaluate(args: argparse.Namespace) -> int:
    start = time.perf_counter()
    _check_tag_samples(args)
    if args.tag_samples and not (args.from_text or args.tags == "predicted"):
        raise UsageError("--tag-samples needs tags predicted by the model: add --tags predicted or --from-text")
    if args.reliability_plot and args.from_text:
        raise UsageError("--reliability-plot needs gold tokens: leave out --from-text")
    if args.wrap is not None and (not args.from_text or args.wrap < 1):
        raise UsageError("--wrap needs --from-text and a positive width")
    _, parse = _load_parser(args)
    _resolve_tag_samples(args)
    gold = read_conllu(args.data)
    check_parsable(gold, args.data)
    if args.from_text:
        try:
            system = args.pipeline.tokenize(raw_text(gold, width=args.wrap))
        except ModelError as e:
            raise UsageError(f"{args.model}: {e}") from e
        _, draws = _tagged(args, system, retag=True)
        parsed = _parse_tagged(args, parse, system, draws) if system else []
        seconds = time.perf_counter() - start
        scores = evaluate_ud(gold, _system_conllu(system, parsed))
        gold_words = sum(s.n for s in gold)
        scores.update({"tag_samples": args.tag_samples, "seconds": round(seconds, 3), "gold_words": gold_words,
                       "words_per_second": round(gold_words / seconds, 1) if seconds > 0 else None})
    else:
        scores, parsed = _score_gold_tokens(args, parse, gold, predicted=args.tags == "predicted")
        seconds = time.perf_counter() - start
        scores["tags"] = args.tags
        scores.update(inference_summary(parsed))
        scores["seconds"] = round(seconds, 3)
        scores["tokens_per_second"] = round(scores["tokens"] / seconds, 1) if seconds > 0 else None
        if args.reliability_plot:
            try:
                draw_reliability(args.reliability_plot, reliability_series(gold, parsed, args.confidence_arrays),
                                 f"{Path(args.model).name} on {Path(args.data).name}")
            except RuntimeError as e:  # no matplotlib
                raise UsageError(str(e)) from e
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
    """Fit ``inference.head_power`` (``engine.decode.calibration``) on ``--data`` under the model's default
    inference, with the command's inference flags, and write it into the model's manifest."""
    _check_tag_samples(args)
    given_samples = args.tag_samples
    _, parse = _load_parser(args)
    _resolve_tag_samples(args)
    gold = read_conllu(args.data)
    check_parsable(gold, args.data)
    args.calibration = "none"
    before, parsed = _score_gold_tokens(args, parse, gold, predicted=args.pipeline.tagger is not None)
    gold_heads = [g.heads for g in gold if g.heads is not None]
    if len(gold_heads) != len(gold):
        raise UsageError(f"{args.data}: calibration needs gold HEAD values")
    maps, tuned = fit_calibration(parsed, gold)  # engine.evaluation.calibration_fit
    after = attachment_scores(gold, [p.heads for p in tuned], [p.deprels for p in tuned], [p.head_probs for p in tuned])
    fitted = {"data": Path(args.data).name, "data_sha256": file_sha256(args.data),
              "objective": "chosen-head brier (power, then isotonic)",
              "tag_samples": args.tag_samples, "tag_average": args.tag_average or args.pipeline.default_tag_average,
              "ece_before": round(before["ece"], 5), "ece_after": round(after["ece"], 5)}
    inference = {**(args.pipeline.manifest.get("inference") or {}), "head_calibration": fitted, **maps}
    if args.tag_average:  # the calibration holds for the settings it was fitted under: they become the defaults
        inference["tag_average"] = args.tag_average
    if given_samples is not None:
        inference["tag_samples"] = given_samples
    update_manifest(args.model, {"inference": inference})
    powers = {key: value for key, value in maps.items() if key.endswith("_power")}
    print(json.dumps({"model": args.model, **powers, **fitted, "uas": before["uas"], "las": before["las"]}))
    return 0


def _score_gold_tokens(args: argparse.Namespace, parse: Any, gold: list[Any], predicted: bool) -> tuple[dict, list]:
    """Parse the gold-tokenised sentences (re-tagged by the model first if ``predicted``, with
    ``args.tag_samples``) and score them: UAS, LAS, ECE (and UPOS when re-tagged, ``tag_samples`` used)."""
    inputs = [s.copy() for s in gold] if predicted else gold
    upos_probs: dict[int, np.ndarray] = {}
    tagged, draws = (_tagged(args, inputs, retag=True, upos_probs=upos_probs) if predicted
                     else ([], [[] for _ in inputs]))
    parsed = _parse_tagged(args, parse, inputs, draws)
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
    return scores, parsed


def _read_input(args: argparse.Namespace) -> tuple[list[Any], str]:
    """Sentences from ``--text``, or ``--input`` (stdin) as CoNLL-U or raw text."""
    if args.text is not None and args.input:
        raise UsageError("give --text or --input, not both")
    if args.text is not None or args.input_format == "text":
        if args.text is not None:
            text = args.text
        elif args.input:
            text = Path(args.input).read_text(encoding="utf-8")
        else:
            text = sys.stdin.read()
        try:
            return args.pipeline.tokenize(text, args.blank_line), "<text>"
        except ModelError as e:
            raise UsageError(f"{args.model}: {e}") from e
    source = args.input or "<stdin>"
    return read_conllu(args.input if args.input else sys.stdin, name=source, strict_heads=False), source


def cmd_parse(args: argparse.Namespace) -> int:
    _check_tag_samples(args)
    if args.tag_samples and (args.kbest is not None or args.samples is not None):
        raise UsageError("--kbest and --samples need one tree distribution per sentence; --tag-samples averages "
                         "several, so it cannot be combined with them")
    pipeline, parse = _load_parser(args)
    _resolve_tag_samples(args, single_tagging=args.kbest is not None or args.samples is not None)
    sentences, source = _read_input(args)
    check_parsable(sentences, source)
    for flag, value, limit in (("--kbest", args.kbest, 1000), ("--samples", args.samples, 100000)):
        if value is not None and not 1 <= value <= limit:
            raise UsageError(f"{flag} must be between 1 and {limit}, got {value}")
    tagged_order, draws = _tagged(args, sentences, retag=args.retag)
    tagged = set(tagged_order)
    parsed = _parse_tagged(args, parse, sentences, draws) if sentences else []
    labeler = pipeline.parser.labeler
    blocks = []
    for i, (s, p) in enumerate(zip(sentences, parsed, strict=True)):
        tags = (s.upos, s.xpos) if i in tagged else (None, None)
        if args.kbest is None and args.samples is None:
            blocks.append(_block(s, p, p.heads, p.deprels, confidence_comments(p) if args.sentence_confidence
                                 else None, tags=tags))
            continue
        if p.distribution is None:
            raise UsageError("--kbest and --samples need a tree distribution: exact inference, or BP with a "
                             "TREE/PTREE factor")
        if args.kbest is not None:
            trees, key = p.distribution.kbest(args.kbest), "kbest_rank"
        else:
            seed = None if args.seed is None else args.seed + i
            trees, key = p.distribution.sample(args.samples, seed), "sample_index"
        for rank, (log_prob, heads) in enumerate(trees, start=1):
            comments = [f"# {key} = {rank}", f"# log_prob = {log_prob:.6f}",
                        f"# distribution = {p.distribution.source}"]
            blocks.append(_block(s, p, heads, label_arcs(labeler, s, heads)[0], comments, tags=tags))
    write_conllu(blocks, args.output if args.output else sys.stdout)
    return 0


def _block(sentence: Any, parsed: Any, heads: np.ndarray, deprels: list[str],
           comments: list[str] | None = None, tags: tuple[Any, Any] = (None, None)) -> str:
    """A sentence block with the given tree and labels (and predicted ``tags``: UPOS, XPOS), and each
    head's marginal as HeadProb."""
    m = np.arange(1, len(heads))
    probs = parsed.marginals[heads[1:], m]
    text = format_sentence(sentence, heads=heads, deprels=deprels, misc={"HeadProb": [f"{x:.4f}" for x in probs]},
                           upos=tags[0], xpos=tags[1])
    if not comments:
        return text
    lines = text.split("\n")
    at = next((k for k, line in enumerate(lines) if not line.startswith("#")), 0)  # after the block's comments
    return "\n".join(lines[:at] + comments + lines[at:])


def cmd_score(args: argparse.Namespace) -> int:
    """Attachment scores of a parsed file; confidences from MISC ``HeadProb`` (1.0 when absent)."""
    scores = score_files(args.gold, args.pred)
    print(json.dumps(scores) if args.json else "\n".join(f"{k:>14}: {v}" for k, v in scores.items()))
    return 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    command = {"train": cmd_train, "average": cmd_average, "evaluate": cmd_evaluate, "parse": cmd_parse,
               "calibrate": cmd_calibrate, "score": cmd_score}[args.command]
    try:
        return command(args)
    except (ConlluError, ModelError, UsageError, FileNotFoundError, IsADirectoryError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        return 0
