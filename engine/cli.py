"""Command-line interface: ``python -m engine {train,train-component,average,evaluate,parse,calibrate,score}``.

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
from collections.abc import Callable, Iterator
from itertools import islice
from pathlib import Path
from typing import Any, TextIO

import numpy as np

from engine.bp_parser import BPParser
from engine.cli_args import build_parser
from engine.cli_args import given_settings as _given_settings
from engine.data.conllu_io import (
    ConlluError,
    atomic_text,
    check_parsable,
    format_sentence,
    iter_conllu,
    read_conllu,
)
from engine.decode.calibration import calibrated_all, confidence_comments
from engine.decode.conformal import fit_conformal, sets_misc, stored_conformal
from engine.decode.labeler import label_arcs
from engine.decode.tag_marginal import parse_over_tag_samples
from engine.evaluation.calibration_fit import fit_calibration
from engine.evaluation.metrics import attachment_scores, confidence_scores, inference_summary, tag_accuracy
from engine.evaluation.reliability_plot import draw_reliability, reliability_series
from engine.evaluation.scored_file import score_file
from engine.evaluation.ud_align import evaluate_ud
from engine.inference.settings import resolve
from engine.model.store import ModelError, file_sha256, update_manifest
from engine.pipeline import MAX_TAG_SAMPLES, SAVED_COMPONENTS, Pipeline
from engine.text.tag_candidates import CandidateSettings
from engine.text.treebank_text import raw_text
from engine.training import options as train_options
from engine.training.average import average_parsers
from engine.training.morphology import add_components
from engine.training.pipeline import train_model

log = logging.getLogger("engine")


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
        if _tag_average(args) == "joint":
            raise UsageError("--tag-average joint runs BP over tags and links: use --inference bp")
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
    if _tag_average(args) == "joint" and inference != "bp":
        raise UsageError(f"--tag-average joint runs plain BP over tags and links, not --inference {inference}")
    return pipeline, lambda sentences, labels=True, mixtures=None, candidates=None: model.parse(
        sentences, config, args.batch_size, labels, mixtures, candidates)


def _tag_average(args: argparse.Namespace) -> str:
    """What is averaged over tag sequences: ``--tag-average``, else the model's default."""
    return getattr(args, "tag_average", None) or args.pipeline.default_tag_average


def cmd_train(args: argparse.Namespace) -> int:
    try:
        options = train_options.from_arguments(args)
        summary = train_model(args.train, args.dev, args.out, options, pruner_path=args.pruner,
                              progress=not args.quiet)
    except train_options.TrainOptionsError as e:
        raise UsageError(str(e)) from e
    if args.dev and args.calibrate and not summary["interrupted"]:
        # the same fit as `python -m engine calibrate --model OUT --data DEV`, under the model's default inference
        summary["calibration"] = calibrate_model(build_parser().parse_args(
            ["calibrate", "--model", str(args.out), "--data", str(args.dev)]))
    print(json.dumps(summary, indent=2))
    return 130 if summary["interrupted"] else 0


def cmd_train_component(args: argparse.Namespace) -> int:
    summary = add_components(args.model, list(dict.fromkeys(args.components)), args.train, args.out or args.model,
                             seed=args.seed, progress=not args.quiet)
    print(json.dumps(summary, indent=2))
    return 0


def cmd_average(args: argparse.Namespace) -> int:
    _check_tag_samples(args)
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
    args.joint_candidates = None
    joint: tuple[CandidateSettings, dict[int, Any]] | None = None
    if _tag_average(args) == "joint":  # tag variables in the parser's graph: candidates, no draws
        try:
            settings = CandidateSettings.resolve(args.pipeline.manifest, getattr(args, "tag_candidates", None),
                                                 getattr(args, "tag_min_marginal", None))
        except ValueError as e:
            raise UsageError(str(e)) from e
        args.joint_candidates = joint = (settings, {})
        args.tag_samples = 0  # nothing is drawn: what the scores and parses report
    try:
        return args.pipeline.tag_and_sample(sentences, retag=retag, samples=args.tag_samples, upos_probs=upos_probs,
                                            candidates=joint)
    except ModelError as e:
        raise UsageError(f"{args.model}: {e}") from e


def _parse_tagged(args: argparse.Namespace, parse: Any, sentences: list[Any], draws: list[Any]) -> list[Any]:
    """``parse(sentences)``, the marginals of the sentences with tag ``draws`` averaged over them as well
    (``engine.decode.tag_marginal``)."""
    parser = args.pipeline.parser
    average = _tag_average(args)
    if average == "joint":
        return calibrated_all(_parse_joint(args, parse, sentences), None if getattr(args, "calibration", "model")
                              == "none" else args.pipeline.default_powers)
    parsed = parse_over_tag_samples(sentences, draws, parse, parser.constraint, parser.labeler,
                                    lambda copies, mixtures=None: parse(copies, labels=False, mixtures=mixtures),
                                    average=average)
    return calibrated_all(parsed, None if getattr(args, "calibration", "model") == "none"
                          else args.pipeline.default_powers)


def _parse_joint(args: argparse.Namespace, parse: Any, sentences: list[Any]) -> list[Any]:
    """Parse the sentences jointly with their tags over the candidates ``_tagged`` found (the others, tagged by
    the user, as they are), and write the tags chosen into the sentences."""
    found: dict[int, Any] = args.joint_candidates[1] if args.joint_candidates else {}
    parsed = parse(sentences, candidates=[found.get(i) for i in range(len(sentences))])
    for sentence, p in zip(sentences, parsed, strict=True):
        if p.upos is not None:
            sentence.upos, sentence.xpos = list(p.upos), list(p.xpos)
    return parsed


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


def _system_conllu(pipeline: Pipeline, sentences: list[Any], parsed: list[Any]) -> list[Any]:
    """Parsed sentences as CoNLL-U (with predicted tags, and LEMMA and FEATS from the model's components,
    ``_`` without them), read back for the UD evaluation."""
    analyses = pipeline.analyse(sentences, [p.deprels for p in parsed])
    text = "".join(format_sentence(s, heads=p.heads, deprels=p.deprels, upos=s.upos, xpos=s.xpos,
                                   lemmas=lemmas or ["_"] * s.n, feats=feats or ["_"] * s.n)
                   for s, p, (lemmas, feats, _) in zip(sentences, parsed, analyses, strict=True))
    return read_conllu(io.StringIO(text), name="<system>", strict_heads=False)


# the CoNLL 2018 scores of LEMMA and FEATS that `evaluate` adds on gold tokens (engine.evaluation.ud_align)
MORPHOLOGY_METRICS = ("lemmas", "ufeats", "alltags", "clas", "mlas", "blex")


def cmd_evaluate(args: argparse.Namespace) -> int:
    start = time.perf_counter()
    _check_tag_samples(args)
    if args.tag_samples and not (args.from_text or args.tags == "predicted"):
        raise UsageError("--tag-samples needs tags predicted by the model: add --tags predicted or --from-text")
    if args.wrap is not None and (not args.from_text or args.wrap < 1):
        raise UsageError("--wrap needs --from-text and a positive width")
    if args.reliability_plot and args.from_text:
        raise UsageError("--reliability-plot needs gold tokens: leave out --from-text")
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


def calibrate_model(args: argparse.Namespace) -> dict[str, Any]:
    """Fit the calibration (``engine.evaluation.calibration_fit``: head power, isotonic stage, label and tree
    powers) and the conformal thresholds on ``--data`` under the model's default inference, with the command's
    inference flags, write them into the model's manifest and return the summary ``calibrate`` prints (also
    run by ``train`` on its ``--dev`` set)."""
    _check_tag_samples(args)
    given_samples = args.tag_samples
    _, parse = _load_parser(args)
    _resolve_tag_samples(args)
    gold = read_conllu(args.data)
    check_parsable(gold, args.data)
    args.calibration = "none"
    before, parsed, inputs = _score_gold_tokens(args, parse, gold, predicted=args.pipeline.tagger is not None)
    if any(g.heads is None for g in gold):
        raise UsageError(f"{args.data}: calibration needs gold HEAD values")
    maps, tuned = fit_calibration(parsed, gold)  # engine.evaluation.calibration_fit
    after = attachment_scores(gold, [p.heads for p in tuned], [p.deprels for p in tuned], [p.head_probs for p in tuned])
    fitted = {"data": Path(args.data).name, "data_sha256": file_sha256(args.data),
              "objective": "chosen-head brier (power, then isotonic)",
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
    tagged, draws = (_tagged(args, inputs, retag=True, upos_probs=upos_probs) if predicted
                     else ([], [[] for _ in inputs]))
    parsed = _parse_tagged(args, parse, inputs, draws)
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


CHUNK_SENTENCES = 512
"""Sentences parsed at a time by ``parse``: its memory is one chunk's, whatever the input's size (each
sentence's parse does not depend on the others', so the output does not depend on the chunk size)."""


def _input_chunks(args: argparse.Namespace, size: int) -> Iterator[tuple[list[Any], str]]:
    """Sentences from ``--text``, or ``--input`` (stdin) as CoNLL-U (streamed, ``size`` sentences at a time) or
    raw text (read whole: the tokenizer sees paragraphs across the input), with the name errors cite."""
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
            sentences = args.pipeline.tokenize(text, args.blank_line)
        except ModelError as e:
            raise UsageError(f"{args.model}: {e}") from e
        for start in range(0, len(sentences), size):
            yield sentences[start:start + size], "<text>"
        return
    source = args.input or "<stdin>"
    stream = iter_conllu(args.input if args.input else sys.stdin, name=source, strict_heads=False)
    while chunk := list(islice(stream, size)):
        yield chunk, source


def cmd_parse(args: argparse.Namespace) -> int:
    if args.output:
        with atomic_text(args.output) as out:
            run_parse(args, out)
    else:
        run_parse(args, sys.stdout)
    return 0


def run_parse(args: argparse.Namespace, out: TextIO, on_chunk: Callable[[int, int], None] | None = None,
              chunk_size: int = CHUNK_SENTENCES) -> dict[str, int]:
    """``parse``: the input read and parsed a chunk at a time, each chunk's CoNLL-U written to ``out`` before
    the next is read. ``on_chunk(sentences, words)`` follows each chunk (the service's batch jobs report
    progress and stop there). Returns the numbers of sentences and words parsed."""
    _check_tag_samples(args)
    if args.tag_samples and (args.kbest is not None or args.samples is not None):
        raise UsageError("--kbest and --samples need one tree distribution per sentence; --tag-samples averages "
                         "several, so it cannot be combined with them")
    for flag, value, limit in (("--kbest", args.kbest, 1000), ("--samples", args.samples, 100000)):
        if value is not None and not 1 <= value <= limit:
            raise UsageError(f"{flag} must be between 1 and {limit}, got {value}")
    pipeline, parse = _load_parser(args)
    conformal = _conformal(args)
    _resolve_tag_samples(args, single_tagging=args.kbest is not None or args.samples is not None)
    done = {"sentences": 0, "words": 0}

    def numbered() -> Iterator[tuple[list[Any], int]]:  # each chunk checked here, with its place in the input
        first = 0
        for sentences, source in _input_chunks(args, chunk_size):
            check_parsable(sentences, source)
            yield sentences, first
            first += len(sentences)

    if getattr(args, "cluster", None):
        from engine.training.cluster import check_spec, connect, ordered_map

        try:
            check_spec(args.cluster)
        except ValueError as e:
            raise UsageError(f"--cluster: {e}") from e
        settings = json.dumps({k: v for k, v in vars(args).items() if k not in ("pipeline", "func")})
        with connect(args.cluster) as client:
            window = 2 * max(1, len(client.scheduler_info()["workers"]))
            parsed = ordered_map(client, _remote_chunk, ((c, (settings, c[0], c[1])) for c in numbered()), window)
            for (sentences, _), text in parsed:
                _write_chunk(out, text, sentences, done, on_chunk)
        return done
    for sentences, first in numbered():
        text = "".join(_parse_chunk(args, pipeline, parse, conformal, sentences, first))
        _write_chunk(out, text, sentences, done, on_chunk)
    return done


def _write_chunk(out: TextIO, text: str, sentences: list[Any], done: dict[str, int],
                 on_chunk: Callable[[int, int], None] | None) -> None:
    out.write(text)
    done["sentences"] += len(sentences)
    done["words"] += sum(s.n for s in sentences)
    if on_chunk is not None:
        on_chunk(done["sentences"], done["words"])


_WORKER_MODELS: dict[str, tuple[Any, ...]] = {}
"""On a Dask worker: the loaded model and settings of each ``parse --cluster`` command it served."""


def _remote_chunk(settings: str, sentences: list[Any], first: int) -> str:
    """``_parse_chunk`` on a Dask worker, which loads the model once per command (``settings``: the command's
    arguments as JSON) and keeps it for the command's next chunks."""
    if settings not in _WORKER_MODELS:
        args = argparse.Namespace(**{**json.loads(settings), "cluster": None})
        pipeline, parse = _load_parser(args)
        _WORKER_MODELS[settings] = (args, pipeline, parse, _conformal(args))
    args, pipeline, parse, conformal = _WORKER_MODELS[settings]
    return "".join(_parse_chunk(args, pipeline, parse, conformal, sentences, first))


def _parse_chunk(args: argparse.Namespace, pipeline: Pipeline, parse: Any, conformal: dict[str, Any] | None,
                 sentences: list[Any], first: int) -> list[str]:
    """The CoNLL-U blocks of some sentences (``first``: the index of the first in the whole input, which seeds
    ``--samples``)."""
    tagged_order, draws = _tagged(args, sentences, retag=args.retag)
    tagged = set(tagged_order)
    parsed = _parse_tagged(args, parse, sentences, draws) if sentences else []
    labeler = pipeline.parser.labeler
    analyses = pipeline.analyse(sentences, [p.deprels for p in parsed])
    blocks = []
    for i, (s, p) in enumerate(zip(sentences, parsed, strict=True)):
        tags = (s.upos, s.xpos) if i in tagged else (None, None)
        morph = _morphology(s, analyses[i][0], analyses[i][1], overwrite=args.retag)
        if args.kbest is None and args.samples is None:
            sets = sets_misc(p, s, labeler, conformal, args.head_sets) if conformal else None
            blocks.append(_block(s, p, p.heads, p.deprels, confidence_comments(p) if args.sentence_confidence
                                 else None, tags=tags, morph=morph, extra=sets))
            continue
        if p.distribution is None:
            raise UsageError("--kbest and --samples need a tree distribution: exact inference, or BP with a "
                             "TREE/PTREE factor")
        if args.kbest is not None:
            trees, key = p.distribution.kbest(args.kbest), "kbest_rank"
        else:
            seed = None if args.seed is None else args.seed + first + i
            trees, key = p.distribution.sample(args.samples, seed), "sample_index"
        for rank, (log_prob, heads) in enumerate(trees, start=1):
            comments = [f"# {key} = {rank}", f"# log_prob = {log_prob:.6f}",
                        f"# distribution = {p.distribution.source}"]
            blocks.append(_block(s, p, heads, label_arcs(labeler, s, heads)[0], comments, tags=tags, morph=morph))
    return blocks


def _morphology(sentence: Any, lemmas: list[str] | None, feats: list[str] | None,
                overwrite: bool) -> tuple[Any, Any]:
    """The LEMMA and FEATS columns to write (None = keep the input's): the model's for a sentence whose column is
    ``_`` throughout (as tags are predicted for sentences without UPOS; a ``_`` among given FEATS means "no
    features"), or always with ``overwrite`` (``--retag``: a fully predicted analysis)."""

    def fill(predicted: list[str] | None, given: list[str]) -> list[str] | None:
        return predicted if predicted is not None and (overwrite or all(g == "_" for g in given)) else None

    return fill(lemmas, sentence.lemmas), fill(feats, sentence.feats)


def _block(sentence: Any, parsed: Any, heads: np.ndarray, deprels: list[str],
           comments: list[str] | None = None, tags: tuple[Any, Any] = (None, None),
           morph: tuple[Any, Any] = (None, None), extra: dict[str, Any] | None = None) -> str:
    """A sentence block with the given tree and labels (and predicted ``tags``: UPOS, XPOS; ``morph``:
    LEMMA, FEATS), each head's marginal as HeadProb and the ``extra`` MISC values."""
    probs = parsed.marginals[heads[1:], np.arange(1, len(heads))]
    text = format_sentence(sentence, heads=heads, deprels=deprels, misc={"HeadProb": [f"{x:.4f}" for x in probs],
                           **(extra or {})}, upos=tags[0], xpos=tags[1], lemmas=morph[0], feats=morph[1])
    if not comments:
        return text
    lines = text.split("\n")
    at = next((k for k, line in enumerate(lines) if not line.startswith("#")), 0)  # after the block's comments
    return "\n".join(lines[:at] + comments + lines[at:])


def _conformal(args: argparse.Namespace) -> dict[str, Any] | None:
    """The model's conformal thresholds when ``--head-sets`` is given (``engine.decode.conformal``)."""
    if args.head_sets is not None and (args.kbest or args.samples or args.calibration == "none"):
        raise UsageError("--head-sets (sets around the MBR tree, under the calibration they were fitted with) "
                         "cannot be combined with --kbest, --samples or --calibration none")
    try:
        return None if args.head_sets is None else stored_conformal(args.pipeline.manifest, args.head_sets)
    except ValueError as e:
        raise UsageError(f"--head-sets: {args.model}: {e}") from e


def cmd_score(args: argparse.Namespace) -> int:
    """Attachment scores of a parsed file; confidences from MISC ``HeadProb`` (1.0 when absent)."""
    scores = score_file(args.gold, args.pred)
    print(json.dumps(scores) if args.json else "\n".join(f"{k:>14}: {v}" for k, v in scores.items()))
    return 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    command = {"train": cmd_train, "train-component": cmd_train_component, "average": cmd_average,
               "evaluate": cmd_evaluate, "parse": cmd_parse, "calibrate": cmd_calibrate,
               "score": cmd_score}[args.command]
    try:
        return command(args)
    except (ConlluError, ModelError, UsageError, FileNotFoundError, IsADirectoryError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        return 0
