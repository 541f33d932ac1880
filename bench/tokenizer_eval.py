"""Tokenizer benchmark: train on a treebank's train file, tokenize the raw text of its dev file, score it with
the CoNLL 2018 aligned evaluation.

    python bench/tokenizer_eval.py --train ../shared/data/ud/en_ewt/en_ewt-ud-train.conllu \
        --dev ../shared/data/ud/en_ewt/en_ewt-ud-dev.conllu

The dev text is the documents as ``conllu_to_text.pl`` writes them (sentences of a paragraph joined by a
space, paragraphs and documents by an empty line), tokenized in one call; the same model is also scored on
the text with every break a single space (``no_paragraphs``: sentence ends have no layout to lean on) and
on the text with its lines wrapped at 80 characters (``wrapped_80``, as ``conllu_to_text.pl`` writes it; a
single line break is a space to the tokenizer). The whole pipeline on both layouts: ``bench/text_layout.py``.
Prints one JSON object: F1 of tokens, sentences and words, training and tokenizing seconds, model size.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import shlex
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from engine.data.conllu_io import read_conllu  # noqa: E402
from engine.evaluation.ud_align import evaluate_ud, sentences_from_conllu  # noqa: E402
from engine.text.tokenizer import Tokenizer  # noqa: E402
from engine.text.treebank_text import raw_text  # noqa: E402

METRICS = ("tokens", "sentences", "words")


def score(tok: Tokenizer, gold: list, text: str) -> tuple[dict[str, float], float]:
    start = time.perf_counter()
    out = tok.tokenize(text)
    seconds = time.perf_counter() - start
    scores = evaluate_ud(gold, sentences_from_conllu(tok.to_conllu(out)))
    return {m: round(scores[m], 2) for m in METRICS}, seconds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--train", required=True, type=Path)
    ap.add_argument("--dev", required=True, type=Path)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--progress", action="store_true")
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    train, dev = read_conllu(args.train), read_conllu(args.dev)
    start = time.perf_counter()
    tok = Tokenizer.train(train, seed=args.seed, progress=args.progress)
    train_seconds = time.perf_counter() - start
    text = raw_text(dev)
    dev_scores, seconds = score(tok, dev, text)
    flat_scores, _ = score(tok, dev, raw_text(dev, paragraph_sep=" ", document_sep=" "))
    wrapped_scores, _ = score(tok, dev, raw_text(dev, width=80))
    _, arrays = tok.to_state()
    result = {
        "command": " ".join(shlex.quote(a) for a in [os.path.basename(sys.executable), *sys.argv]),
        "train": str(args.train), "dev": str(args.dev),
        "dev_scores": dev_scores, "no_paragraphs": flat_scores, "wrapped_80": wrapped_scores,
        "train_seconds": round(train_seconds, 1), "tokenize_seconds": round(seconds, 2),
        "dev_characters": len(text), "characters_per_second": round(len(text) / seconds),
        "model_megabytes": round(sum(a.nbytes for a in arrays.values()) / 1e6, 1),
        "features": {"characters": len(tok.chars.keys), "sentence_ends": len(tok.sentences.keys)},
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}",
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
