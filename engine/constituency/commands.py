"""The constituency side of ``python -m engine train / parse / evaluate`` (issue 26): ``engine.cli`` calls these
when ``train`` is given ``--formalism constituency`` or ``parse`` / ``evaluate`` a model whose manifest says
``formalism: "constituency"``.

A constituency model is either the factored latent model (``latent``, model name ``latent-pcfg``: ``--factors M``
one-bit factors, M >= 1, trained by ``latent_train`` with ``--inference``, parsed by ``latent_parser``), the
default, or with ``--factors 0`` the generative X-bar PCFG (``xbar``, ``xbar-pcfg``; ``../shared/design/epic.md``
§4 "Measured baseline") decoded by Max-Recall over its posteriors (``baseline``). ``load`` returns the parser of
either, both with ``parse_with_marginals(words) -> (Tree, DenseMarginals | None)``. The model is plain arrays plus
a JSON manifest (``model.store``): grammar, tag dictionary, settings, training files and their SHA-256, the
epochs' history (training seconds, dev F1) and dev scores.

``train`` shares its flags with the dependency trainer: ``--factors`` there is a list of factor families (default
``grand,sib``), here an integer; ``--batch-size``, ``--learning-rate``, ``--l2`` and ``--seed`` override the
latent trainer's own defaults (``latent_train.TrainSettings``) only when they differ from the dependency
defaults (32, none, 10, 0), which the command line cannot tell from values not given; ``--epochs`` is always
taken. Bad input raises ``TreebankError`` (``FILE:LINE: problem``) or
:class:`CommandError`; the CLI prints ``error: ...`` and exits with status 2.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict
from pathlib import Path
from typing import Any, TextIO

from engine.constituency.baseline import SentenceParser, XbarParser, parse_trees
from engine.constituency.contract import FORMALISM, INPUT_FORMATS, OUTPUT_FORMATS, CommandError, is_model
from engine.constituency.ep import EPSettings
from engine.constituency.latent import LatentModel, LatentSettings
from engine.constituency.latent_parser import LatentParser
from engine.constituency.latent_train import TrainSettings, train_latent
from engine.constituency.outputs import parse_answer
from engine.constituency.treebank import TreebankError, clean_tree, mrg_files, parse_text, read_trees
from engine.constituency.xbar import XbarPCFG, train_xbar
from engine.data.conllu_io import atomic_text
from engine.model.store import ModelError, file_sha256, load_model, save_model

__all__ = ["FORMALISM", "INPUT_FORMATS", "OUTPUT_FORMATS", "CommandError", "evaluate", "is_model", "parse",
           "read_sentences", "train"]

MODEL = "xbar-pcfg"
LATENT_MODEL = "latent-pcfg"
LATENT_VERSION = 1  # the layout of theta and the manifest's "latent" section (latent.Layout)
_DEPENDENCY_DEFAULTS = {"batch_size": 32, "learning_rate": None, "l2": 10.0, "seed": 0}
def load(path: str | os.PathLike[str]) -> XbarParser | LatentParser:
    """The parser of a constituency model directory (X-bar or factored latent, by the manifest's ``model``)."""
    stored = load_model(path)
    name = stored.manifest.get("model")
    if name == MODEL:
        return XbarParser(XbarPCFG.load(stored.manifest, stored.arrays))
    if name == LATENT_MODEL:
        version = stored.manifest.get("model_version")
        if version != LATENT_VERSION:
            raise ModelError(f"{path}: {LATENT_MODEL} version {version} is not supported; this engine reads version "
                             f"{LATENT_VERSION}")
        inference = stored.manifest["inference"]
        return LatentParser(LatentModel.load(stored.manifest, stored.arrays), inference["method"],
                            EPSettings(max_sweeps=int(inference["ep_sweeps"])))
    raise ModelError(f"{path}: constituency model {name!r} is not known to this engine (it reads {MODEL!r} and "
                     f"{LATENT_MODEL!r})")


def _files(paths: list[str]) -> list[dict[str, str]]:
    return [{"file": p.name, "sha256": file_sha256(p)} for p in mrg_files(paths)]


def _factors(args: argparse.Namespace) -> int:
    """``--factors`` as the number of latent factors (module docstring): the dependency default means not given."""
    value = getattr(args, "factors", None)
    if value is None or value == "grand,sib" or value == ("grand", "sib"):
        return LatentSettings().factors
    try:
        factors = int(value)
    except ValueError:
        raise CommandError(f"--factors takes the number of latent factors of a constituency model, not {value!r}") \
            from None
    if factors < 0:
        raise CommandError(f"--factors must be >= 0, got {factors}")
    return factors


def _settings(args: argparse.Namespace) -> TrainSettings:
    """The latent trainer's settings: its declared defaults, overridden by what the command line gave."""
    given: dict[str, Any] = {}
    for name, default in _DEPENDENCY_DEFAULTS.items():
        value = getattr(args, name, default)
        if value != default:
            given[name] = value
    for name in ("epochs", "inference", "ep_sweeps", "workers"):
        if getattr(args, name, None) is not None:
            given[name] = getattr(args, name)
    try:
        return TrainSettings(**given)
    except ValueError as e:
        raise CommandError(str(e)) from e


def train(args: argparse.Namespace) -> int:
    """``train --formalism constituency``: the factored latent model (``--factors M``, M >= 1) or the X-bar PCFG
    (``--factors 0``) of ``--train`` (files or folders), scored on ``--dev`` if given (EVALB), saved to
    ``--out``; prints a JSON summary."""
    factors = _factors(args)
    if factors > 0:
        return _train_latent(args, factors)
    start = time.perf_counter()
    trees = read_trees(args.train)
    dev = read_trees(args.dev) if args.dev else []
    model = train_xbar(trees)
    seconds = time.perf_counter() - start
    manifest: dict[str, Any] = {
        "formalism": FORMALISM, "model": MODEL, "name": Path(args.out).name,
        "training": {"train_files": _files(args.train), "sentences": len(trees), "seconds": round(seconds, 2)},
        **model.manifest(),
    }
    summary: dict[str, Any] = {"model": str(args.out), "formalism": FORMALISM, "kind": MODEL,
                               "sentences": len(trees), "labels": model.grammar.n_labels,
                               "binary_rules": len(model.grammar.binary), "unary_rules": len(model.grammar.unary),
                               "train_seconds": round(seconds, 2)}
    if dev:
        scores = parse_trees(XbarParser(model), dev)
        manifest["training"]["dev_files"] = _files(args.dev)
        manifest["metrics"] = {"dev": scores}
        summary["dev"] = {key: scores[key] for key in ("f1", "precision", "recall", "exact_match", "f1_all")}
    save_model(args.out, manifest, model.arrays())
    print(json.dumps(summary, indent=2))
    return 0


def _train_latent(args: argparse.Namespace, factors: int) -> int:
    """The factored latent model (``latent_train``): history per epoch and the best epoch's dev scores into the
    manifest, the best epoch's weights saved (also after Ctrl-C)."""
    settings = _settings(args)
    start = time.perf_counter()
    trees = read_trees(args.train)
    dev = read_trees(args.dev) if args.dev else []
    init = None
    if getattr(args, "init", None):
        parser = load(args.init)
        if not isinstance(parser, LatentParser):
            raise CommandError(f"--init {args.init}: not a {LATENT_MODEL} model")
        init = parser.model
    substates = getattr(args, "substates", None)
    try:
        shape = LatentSettings(factors=factors) if substates is None else LatentSettings(factors=factors,
                                                                                          substates=substates)
    except ValueError as e:
        raise CommandError(str(e)) from e
    trained = train_latent(trees, dev, shape, settings, progress=not args.quiet, init=init)
    seconds = time.perf_counter() - start
    model = trained.model
    best = next((h for h in trained.history if h["epoch"] == trained.best_epoch), None)
    manifest: dict[str, Any] = {
        "formalism": FORMALISM, "model": LATENT_MODEL, "model_version": LATENT_VERSION, "name": Path(args.out).name,
        "inference": {"method": settings.decoding, "ep_sweeps": settings.ep_sweeps},
        "training": {"train_files": _files(args.train), "sentences": trained.sentences,
                     "settings": asdict(settings), "init": str(args.init) if init else None,
                     "prepare_seconds": trained.prepare_seconds,
                     "seconds": round(seconds, 2), "best_epoch": trained.best_epoch,
                     "interrupted": trained.interrupted, "history": trained.history},
        **model.manifest(),
    }
    summary: dict[str, Any] = {"model": str(args.out), "formalism": FORMALISM, "kind": LATENT_MODEL,
                               "factors": factors, "inference": settings.inference, "sentences": trained.sentences,
                               "weights": len(model.theta), "best_epoch": trained.best_epoch,
                               "epoch_seconds": [round(h["seconds"], 1) for h in trained.history],
                               "train_seconds": round(seconds, 2)}
    if dev:
        manifest["training"]["dev_files"] = _files(args.dev)
        if best is not None and "dev_f1" in best:
            manifest["metrics"] = {"dev": {"f1": best["dev_f1"], "f1_all": best["dev_f1_all"],
                                           "exact_match": best["dev_exact_match"]}}
            summary["dev"] = manifest["metrics"]["dev"]  # the best epoch's, as the X-bar summary's "dev"
        summary["dev_f1"] = [round(h["dev_f1"], 2) for h in trained.history if "dev_f1" in h]
    save_model(args.out, manifest, model.arrays())
    print(json.dumps(summary, indent=2))
    return 0


def read_sentences(text: str, name: str, input_format: str) -> Iterator[list[str]]:
    """The sentences of an input: ``tokens`` (one sentence a line, words separated by single spaces, blank lines
    skipped) or ``ptb`` (bracketed trees, cleaned, their words)."""
    if input_format == "ptb":
        for at, raw in parse_text(text, name):
            tree = clean_tree(raw)
            if tree is None:
                raise TreebankError(name, at, "no words left once -NONE- elements are removed")
            yield tree.leaves()
        return
    for number, content in enumerate(text.splitlines(), start=1):
        if not content.strip():
            continue
        words = content.strip().split(" ")
        if "" in words or any(w != w.strip() for w in words):
            raise TreebankError(name, number, "words must be separated by single spaces")
        yield words


def _write_trees(parser: XbarParser | LatentParser, sentences: Iterator[list[str]], out: TextIO,
                 output_format: str = "ptb") -> None:
    """One line per sentence: its bracketed tree (``ptb``) or its ``outputs.parse_answer`` as JSON (``json``)."""
    for words in sentences:
        if output_format == "json":
            tree, marginals = parser.parse_with_marginals(words)
            out.write(json.dumps(parse_answer(tree, marginals, parser.model.grammar), allow_nan=False) + "\n")
        else:
            out.write(parser.parse(words).pformat(margin=sys.maxsize) + "\n")


def parse(args: argparse.Namespace, tokenize: Callable[[str], list[list[str]]] | None = None) -> int:
    """``parse`` with a constituency model: one bracketed ``(TOP ...)`` tree per input sentence, or with
    ``--output-format json`` one JSON object (``outputs.parse_answer``). ``--input-format text`` (or ``--text``):
    ``tokenize`` splits the raw text into sentences of words in the treebank's spelling (the command line gives a
    dependency model's tokenizer)."""
    formats = (*INPUT_FORMATS, "text") if tokenize is not None else INPUT_FORMATS
    if args.input_format not in formats:
        raise CommandError(f"a constituency model reads --input-format {' or '.join(formats)}, "
                           f"not {args.input_format}")
    if args.text is not None and tokenize is None:
        raise CommandError("--text is raw text: a constituency model reads it with --input-format text")
    output_format = getattr(args, "output_format", None) or "ptb"
    parser = load(args.model)
    if args.text is not None:
        text, name = args.text, "<text>"
    elif args.input:
        with open(args.input, encoding="utf-8") as f:
            text, name = f.read(), str(args.input)
    else:
        text, name = sys.stdin.read(), "<stdin>"
    if tokenize is not None and args.input_format == "text":
        sentences = [words for words in tokenize(text) if words]
    else:
        sentences = list(read_sentences(text, name, args.input_format))  # every input error before any output
    if args.output:
        with atomic_text(args.output) as out:
            _write_trees(parser, iter(sentences), out, output_format)
    else:
        _write_trees(parser, iter(sentences), sys.stdout, output_format)
    return 0


def _ep_fields(parser: SentenceParser) -> dict[str, float | None]:
    sweeps = getattr(parser, "sweeps", [])
    converged = getattr(parser, "converged", [])
    return {"ep_sweeps_mean": round(sum(sweeps) / len(sweeps), 3) if sweeps else None,
            "ep_converged_fraction": round(sum(converged) / len(converged), 4) if converged else None}


EVALUATE_KEYS = ("f1", "precision", "recall", "exact_match", "tag_accuracy", "f1_all", "sentences", "words",
                 "seconds", "words_per_second", "ep_sweeps_mean", "ep_converged_fraction")


def evaluate(args: argparse.Namespace) -> int:
    """``evaluate`` with a constituency model: parse the words of ``--data`` (files or folders) and score with
    EVALB; ``seconds`` is the whole command (loading and reading included); ``ep_sweeps_mean`` and
    ``ep_converged_fraction`` over the sentences EP ran on (null for the X-bar model, a one-factor model or
    ``exact`` decoding, which run no EP)."""
    start = time.perf_counter()
    parser = load(args.model)
    gold = read_trees(args.data)
    scores = parse_trees(parser, gold)
    seconds = time.perf_counter() - start
    scores.update(parse_seconds=scores["seconds"], seconds=round(seconds, 3),
                  words_per_second=round(scores["words"] / seconds, 1) if seconds > 0 else None,
                  sentences_per_second=round(scores["sentences_all"] / seconds, 2) if seconds > 0 else None,
                  **_ep_fields(parser))
    ordered = {key: scores[key] for key in EVALUATE_KEYS} | scores
    if args.json:
        print(json.dumps(ordered))
    else:
        for key, value in ordered.items():
            print(f"{key:>24}: {value:.4f}" if isinstance(value, float) else f"{key:>24}: {value}")
    return 0
