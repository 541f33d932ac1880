"""The constituency side of ``python -m engine train / parse / evaluate`` (issue 26): ``engine.cli`` calls these
when ``train`` is given ``--formalism constituency`` or ``parse`` / ``evaluate`` a model whose manifest says
``formalism: "constituency"``.

For now a constituency model is the generative X-bar PCFG (``xbar``; ``../shared/design/epic.md`` §4 "Measured
baseline") decoded by Max-Recall over its posteriors (``baseline``); the factored latent models and EP come next.
The model is plain arrays plus a JSON manifest (``model.store``): grammar, tag dictionary, settings, training
files and their SHA-256, dev scores. Bad input raises ``TreebankError`` (``FILE:LINE: problem``) or
:class:`CommandError`; the CLI prints ``error: ...`` and exits with status 2.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TextIO

from engine.constituency.baseline import XbarParser, parse_trees
from engine.constituency.outputs import parse_answer
from engine.constituency.treebank import TreebankError, clean_tree, mrg_files, parse_text, read_trees
from engine.constituency.xbar import XbarPCFG, train_xbar
from engine.data.conllu_io import atomic_text
from engine.model.store import ModelError, file_sha256, load_model, read_manifest, save_model

__all__ = ["FORMALISM", "INPUT_FORMATS", "OUTPUT_FORMATS", "CommandError", "evaluate", "is_model", "parse",
           "read_sentences", "train"]

FORMALISM = "constituency"
MODEL = "xbar-pcfg"
INPUT_FORMATS = ("tokens", "ptb")
OUTPUT_FORMATS = ("ptb", "json")


class CommandError(ValueError):
    """A command-line request a constituency model cannot serve (``error: ...``, exit status 2)."""


def is_model(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is a model directory whose manifest says ``formalism: "constituency"``."""
    try:
        return read_manifest(path).get("formalism") == FORMALISM
    except ModelError:
        return False


def load(path: str | os.PathLike[str]) -> XbarParser:
    stored = load_model(path)
    if stored.manifest.get("model") != MODEL:
        raise ModelError(f"{path}: constituency model {stored.manifest.get('model')!r} is not known to this engine "
                         f"(it reads {MODEL!r})")
    return XbarParser(XbarPCFG.load(stored.manifest, stored.arrays))


def _files(paths: list[str]) -> list[dict[str, str]]:
    return [{"file": p.name, "sha256": file_sha256(p)} for p in mrg_files(paths)]


def train(args: argparse.Namespace) -> int:
    """``train --formalism constituency``: the X-bar PCFG of ``--train`` (files or folders), scored on ``--dev``
    if given (EVALB), saved to ``--out``; prints a JSON summary."""
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


def _write_trees(parser: XbarParser, sentences: Iterator[list[str]], out: TextIO, output_format: str = "ptb") -> None:
    """One line per sentence: its bracketed tree (``ptb``) or its ``outputs.parse_answer`` as JSON (``json``)."""
    for words in sentences:
        if output_format == "json":
            tree, marginals = parser.parse_with_marginals(words)
            out.write(json.dumps(parse_answer(tree, marginals, parser.model.grammar), allow_nan=False) + "\n")
        else:
            out.write(parser.parse(words).pformat(margin=sys.maxsize) + "\n")


def parse(args: argparse.Namespace) -> int:
    """``parse`` with a constituency model: one bracketed ``(TOP ...)`` tree per input sentence, or with
    ``--output-format json`` one JSON object (``outputs.parse_answer``)."""
    if args.input_format not in INPUT_FORMATS:
        raise CommandError(f"a constituency model reads --input-format {' or '.join(INPUT_FORMATS)}, "
                           f"not {args.input_format}")
    if args.text is not None:
        raise CommandError("--text is raw text: a constituency model reads --input-format tokens or ptb")
    output_format = getattr(args, "output_format", None) or "ptb"
    parser = load(args.model)
    if args.input:
        with open(args.input, encoding="utf-8") as f:
            text, name = f.read(), str(args.input)
    else:
        text, name = sys.stdin.read(), "<stdin>"
    sentences = list(read_sentences(text, name, args.input_format))  # every input error before any output
    if args.output:
        with atomic_text(args.output) as out:
            _write_trees(parser, iter(sentences), out, output_format)
    else:
        _write_trees(parser, iter(sentences), sys.stdout, output_format)
    return 0


EVALUATE_KEYS = ("f1", "precision", "recall", "exact_match", "tag_accuracy", "f1_all", "sentences", "words",
                 "seconds", "words_per_second", "ep_sweeps_mean", "ep_converged_fraction")


def evaluate(args: argparse.Namespace) -> int:
    """``evaluate`` with a constituency model: parse the words of ``--data`` (files or folders) and score with
    EVALB; ``seconds`` is the whole command (loading and reading included), EP fields are null (no EP yet)."""
    start = time.perf_counter()
    parser = load(args.model)
    gold = read_trees(args.data)
    scores = parse_trees(parser, gold)
    seconds = time.perf_counter() - start
    scores.update(parse_seconds=scores["seconds"], seconds=round(seconds, 3),
                  words_per_second=round(scores["words"] / seconds, 1) if seconds > 0 else None,
                  sentences_per_second=round(scores["sentences_all"] / seconds, 2) if seconds > 0 else None,
                  ep_sweeps_mean=None, ep_converged_fraction=None)
    ordered = {key: scores[key] for key in EVALUATE_KEYS} | scores
    if args.json:
        print(json.dumps(ordered))
    else:
        for key, value in ordered.items():
            print(f"{key:>24}: {value:.4f}" if isinstance(value, float) else f"{key:>24}: {value}")
    return 0
