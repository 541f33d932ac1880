"""The parse command's machinery, shared by ``python -m engine parse``, ``evaluate``, ``calibrate`` and
``average`` (``engine.cli``) and the service's batch parse jobs (``service.jobs.parse_job``).

``load_parser`` turns the command line's inference options into a ``parse(sentences)`` function under the
model's defaults; ``tag_inputs`` and ``parse_tagged`` tag what needs tagging (drawing tag samples, or finding
the joint model's tag candidates) and parse over it; ``run_parse`` reads the input a chunk of sentences at a time
(``CHUNK_SENTENCES``), parses each chunk here or on a Dask cluster (``--cluster``), and writes its CoNLL-U
before reading the next.
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from itertools import islice
from pathlib import Path
from typing import Any, TextIO

import numpy as np

from engine.bp_parser import BPParser
from engine.cli_args import given_settings as _given_settings
from engine.data.conllu_io import check_parsable, format_sentence, iter_conllu
from engine.decode.calibration import calibrated_all, confidence_comments
from engine.decode.conformal import sets_misc, stored_conformal
from engine.decode.joint_tags import write_chosen_tags
from engine.decode.labeler import label_arcs
from engine.decode.tag_marginal import parse_over_tag_samples, resolve_tag_average
from engine.inference.settings import resolve
from engine.model.store import ModelError
from engine.pipeline import MAX_TAG_SAMPLES, Pipeline
from engine.text.tag_candidates import CandidateSettings
from engine.training.cluster import ordered_map

# Python's cyclic collector at its default thresholds (700, 10, 10) ran six full collections during `evaluate`
# of EWT dev with the default model, 0.5 s of a 10-12 s command (timed with gc.callbacks): a parse allocates
# millions of short-lived containers, and each full collection walks every object alive. With a young generation
# of 10,000 objects none ran and all collections together took 0.18 s. Garbage in cycles waits a little longer
# to be freed; nothing else changes.
GC_THRESHOLDS = (10_000, 10, 10)


def bulk_collector() -> None:
    """Set the collector's thresholds of a process that parses or trains in bulk (``GC_THRESHOLDS``): the
    command line's commands and the service's parse processes."""
    gc.set_threshold(*GC_THRESHOLDS)


class UsageError(ValueError):
    """A combination of options that cannot work, explained."""


def load_parser(args: argparse.Namespace) -> tuple[Any, Any]:
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
        tag_average(args, inference)
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
    tag_average(args, inference)
    return pipeline, lambda sentences, labels=True, mixtures=None, candidates=None: model.parse(
        sentences, config, args.batch_size, labels, mixtures, candidates)


def tag_average(args: argparse.Namespace, inference: str | None = None) -> str:
    """What is averaged over tag sequences (``resolve_tag_average``): ``--tag-average``, else the model's default
    where it can run with ``--inference`` and ``--tag-samples``."""
    method = inference or getattr(args, "inference", None) or (
        "bp" if isinstance(args.pipeline.parser, BPParser) else "exact")
    try:
        return resolve_tag_average(getattr(args, "tag_average", None), args.pipeline.default_tag_average, method,
                                   getattr(args, "tag_samples", None) or 0)
    except ValueError as e:
        raise UsageError(f"--tag-average: {e}") from e


def tag_inputs(args: argparse.Namespace, sentences: list[Any], retag: bool,
            upos_probs: dict[int, np.ndarray] | None = None) -> tuple[list[int], list[Any]]:
    """Tag the sentences without UPOS (all with ``retag``) with the model's tagger, in place, drawing
    ``--tag-samples`` sequences for each: (indices tagged, draws per sentence); ``upos_probs`` as in
    ``Pipeline.tag_and_sample``."""
    args.joint_candidates = None
    joint: tuple[CandidateSettings, dict[int, Any]] | None = None
    if tag_average(args) == "joint":  # tag variables in the parser's graph: candidates, no draws
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


def parse_tagged(args: argparse.Namespace, parse: Any, sentences: list[Any], draws: list[Any]) -> list[Any]:
    """``parse(sentences)``, the marginals of the sentences with tag ``draws`` averaged over them as well
    (``engine.decode.tag_marginal``)."""
    parser = args.pipeline.parser
    average = tag_average(args)
    if average == "joint":
        return calibrated_all(_parse_joint(args, parse, sentences), None if getattr(args, "calibration", "model")
                              == "none" else args.pipeline.default_powers)
    parsed = parse_over_tag_samples(sentences, draws, parse, parser.constraint, parser.labeler,
                                    lambda copies, mixtures=None: parse(copies, labels=False, mixtures=mixtures),
                                    average=average)
    return calibrated_all(parsed, None if getattr(args, "calibration", "model") == "none"
                          else args.pipeline.default_powers)


def _parse_joint(args: argparse.Namespace, parse: Any, sentences: list[Any]) -> list[Any]:
    """Parse the sentences jointly with their tags over the candidates ``tagged`` found (the others, tagged by
    the user, as they are), and write the tags chosen into the sentences."""
    found: dict[int, Any] = args.joint_candidates[1] if args.joint_candidates else {}
    parsed = parse(sentences, candidates=[found.get(i) for i in range(len(sentences))])
    write_chosen_tags(sentences, parsed)
    return parsed


def check_tag_samples(args: argparse.Namespace) -> None:
    """Check an explicit ``--tag-samples`` (before the model is loaded; ``resolve_tag_samples`` fills in the
    model's default after)."""
    if args.tag_samples is None:
        return

    if not 0 <= args.tag_samples <= MAX_TAG_SAMPLES:
        raise UsageError(f"--tag-samples must be between 0 and {MAX_TAG_SAMPLES}, got {args.tag_samples}")
    if args.tag_samples and getattr(args, "constraint", None):
        raise UsageError("--tag-samples decodes under the model's tree; it cannot be combined with --constraint")


def resolve_tag_samples(args: argparse.Namespace, single_tagging: bool = False) -> None:
    """``args.tag_samples`` = the explicit value, else the model's default (0 when the command needs a single
    tagging: a decoding constraint, k-best or sampled trees)."""
    if args.tag_samples is None:
        args.tag_samples = 0 if single_tagging or args.constraint or getattr(args, "tag_average", None) == "joint" \
            else args.pipeline.default_tag_samples


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


def run_parse(args: argparse.Namespace, out: TextIO, on_chunk: Callable[[int, int], None] | None = None,
              chunk_size: int | None = None) -> dict[str, int]:
    """``parse``: the input read and parsed a chunk at a time, each chunk's CoNLL-U written to ``out`` before
    the next is read. ``on_chunk(sentences, words)`` follows each chunk (the service's batch jobs report
    progress and stop there). Returns the numbers of sentences and words parsed."""
    check_tag_samples(args)
    if args.tag_samples and (args.kbest is not None or args.samples is not None):
        raise UsageError("--kbest and --samples need one tree distribution per sentence; --tag-samples averages "
                         "several, so it cannot be combined with them")
    for flag, value, limit in (("--kbest", args.kbest, 1000), ("--samples", args.samples, 100000)):
        if value is not None and not 1 <= value <= limit:
            raise UsageError(f"{flag} must be between 1 and {limit}, got {value}")
    pipeline, parse = load_parser(args)
    conformal = _conformal(args)
    resolve_tag_samples(args, single_tagging=args.kbest is not None or args.samples is not None)
    done = {"sentences": 0, "words": 0}

    def numbered() -> Iterator[tuple[list[Any], int]]:  # each chunk checked here, with its place in the input
        first = 0
        for sentences, source in _input_chunks(args, chunk_size or CHUNK_SENTENCES):
            check_parsable(sentences, source)
            yield sentences, first
            first += len(sentences)

    if getattr(args, "cluster", None):
        settings = _settings(args)
        with _cluster(args) as (client, window):
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


def tag_and_parse(args: argparse.Namespace, parse: Any, sentences: list[Any], retag: bool,
                  upos_probs: dict[int, np.ndarray] | None = None, chunk_size: int | None = None
                  ) -> tuple[list[int], list[Any]]:
    """``tag_inputs`` (every sentence re-tagged with ``retag``, none tagged without) then ``parse_tagged``, a
    chunk of ``chunk_size`` sentences (``CHUNK_SENTENCES``) at a time: (the indices tagged, the parses); the tags
    chosen are written into ``sentences``, ``upos_probs`` gets the tagger's marginals of the chosen UPOS. With
    ``--cluster`` (``evaluate``) the chunks go to the Dask workers, and the result is the one-process result to
    the last bit: the same chunks, the same arithmetic (tagging and parsing batch sentences of a chunk together,
    so a different chunking could move a marginal by a rounding error)."""
    size = chunk_size or CHUNK_SENTENCES
    starts = range(0, len(sentences), size)
    if not getattr(args, "cluster", None):
        return _merge(args, sentences, ((start, _tag_and_parse_chunk(args, parse, sentences[start:start + size],
                                                                     retag)) for start in starts), upos_probs)
    settings = _settings(args)
    with _cluster(args) as (client, window):
        return _merge(args, sentences, ordered_map(client, _remote_tag_and_parse, (
            (start, (settings, sentences[start:start + size], retag)) for start in starts), window), upos_probs)


def _tag_and_parse_chunk(args: argparse.Namespace, parse: Any, sentences: list[Any], retag: bool) -> tuple[Any, ...]:
    """One chunk of ``tag_and_parse``: the indices tagged, the parses, each sentence's (UPOS, XPOS) after tagging,
    the tagger's marginals of the chosen UPOS by index, and ``tag_samples`` as used (joint tagging draws none)."""
    probs: dict[int, np.ndarray] = {}
    tagged, draws = (tag_inputs(args, sentences, retag=True, upos_probs=probs) if retag
                     else ([], [[] for _ in sentences]))
    parsed = parse_tagged(args, parse, sentences, draws) if sentences else []
    return tagged, parsed, [(s.upos, s.xpos) for s in sentences], probs, args.tag_samples


def _merge(args: argparse.Namespace, sentences: list[Any], chunks: Iterable[tuple[int, tuple[Any, ...]]],
           upos_probs: dict[int, np.ndarray] | None) -> tuple[list[int], list[Any]]:
    """The chunks' results (``_tag_and_parse_chunk``, each with its first sentence's index) put together."""
    tagged: list[int] = []
    parsed: list[Any] = []
    for start, (indices, parses, tags, probs, samples) in chunks:
        for i, (upos, xpos) in enumerate(tags, start=start):  # a worker tagged copies of these sentences
            sentences[i].upos, sentences[i].xpos = upos, xpos
        tagged += [start + i for i in indices]
        parsed += parses
        if upos_probs is not None:
            upos_probs.update({start + i: p for i, p in probs.items()})
        args.tag_samples = samples
    return tagged, parsed


@contextmanager
def _cluster(args: argparse.Namespace) -> Iterator[tuple[Any, int]]:
    """The client of ``--cluster`` and how many chunks to keep in flight (two per worker)."""
    from engine.training.cluster import check_spec, connect

    try:
        check_spec(args.cluster)
    except ValueError as e:
        raise UsageError(f"--cluster: {e}") from e
    with connect(args.cluster) as client:
        yield client, 2 * max(1, len(client.scheduler_info()["workers"]))


_DRIVER_ONLY = ("pipeline", "func", "joint_candidates", "confidence_arrays")
"""Attributes the commands add to their arguments that stay in the driver (a loaded model, results)."""


def _settings(args: argparse.Namespace) -> str:
    """The command's arguments as JSON: what a worker needs to load the same model with the same settings."""
    return json.dumps({k: v for k, v in vars(args).items() if k not in _DRIVER_ONLY})


_WORKER_MODELS: dict[str, tuple[Any, ...]] = {}
"""On a Dask worker: the loaded model and settings of each ``parse|evaluate --cluster`` command it served."""


def _worker_model(settings: str) -> tuple[Any, ...]:
    """(arguments, pipeline, parse, conformal thresholds) of a command on a Dask worker, which loads the model
    once per command (``settings``: its arguments as JSON) and keeps it for the command's next chunks."""
    if settings not in _WORKER_MODELS:
        args = argparse.Namespace(**{**json.loads(settings), "cluster": None})
        pipeline, parse = load_parser(args)
        _WORKER_MODELS[settings] = (args, pipeline, parse, _conformal(args) if hasattr(args, "head_sets") else None)
    return _WORKER_MODELS[settings]


def _remote_chunk(settings: str, sentences: list[Any], first: int) -> str:
    """``_parse_chunk`` on a Dask worker (``parse --cluster``)."""
    args, pipeline, parse, conformal = _worker_model(settings)
    return "".join(_parse_chunk(args, pipeline, parse, conformal, sentences, first))


def _remote_tag_and_parse(settings: str, sentences: list[Any], retag: bool) -> tuple[Any, ...]:
    """``_tag_and_parse_chunk`` on a Dask worker (``evaluate --cluster``)."""
    args, _, parse, _ = _worker_model(settings)
    return _tag_and_parse_chunk(args, parse, sentences, retag)


def _parse_chunk(args: argparse.Namespace, pipeline: Pipeline, parse: Any, conformal: dict[str, Any] | None,
                 sentences: list[Any], first: int) -> list[str]:
    """The CoNLL-U blocks of some sentences (``first``: the index of the first in the whole input, which seeds
    ``--samples``)."""
    tagged_order, draws = tag_inputs(args, sentences, retag=args.retag)
    tagged = set(tagged_order)
    parsed = parse_tagged(args, parse, sentences, draws) if sentences else []
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
