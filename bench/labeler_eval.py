"""Log-linear labeller benchmark: train on EWT train, label EWT dev arcs with gold heads (and gold tags).

    python bench/labeler_eval.py [--data ../shared/data/ud/en_ewt] [--parser models/en_ewt-o1]

Prints one JSON object: full-DEPREL label accuracy (subtypes such as ``nmod:poss`` count), the same on base
relations, LAS, UAS and their ratio from ``attachment_scores`` (gold heads, so UAS is 100), the count-based
labeller trained on the same data for comparison, training seconds, words/s of batch and one-sentence
prediction, and the command. With ``--parser`` (a first-order model directory) dev is also parsed and
scored with predicted trees, labelled by the model's own labeller and by this one.
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

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from engine.data.conllu_io import read_conllu  # noqa: E402
from engine.decode.labeler import CountLabeler  # noqa: E402
from engine.decode.loglinear_labeler import LogLinearLabeler  # noqa: E402
from engine.evaluation.metrics import attachment_scores  # noqa: E402

DEFAULT_DATA = Path(os.environ.get("BP_PARSER_DATA", Path(__file__).resolve().parents[2] / "shared" / "data"))


def label_accuracy(gold: list, labels: list[list[str]], base: bool = False) -> float:
    strip = (lambda r: r.split(":")[0]) if base else (lambda r: r)  # noqa: E731
    g = np.array([strip(r) for s in gold for r in s.deprels])
    p = np.array([strip(r) for lab in labels for r in lab])
    return round(100.0 * float((g == p).mean()), 3)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA / "ud" / "en_ewt", help="folder with en_ewt-ud-*.conllu")
    ap.add_argument("--epochs", type=int, default=4)
    ap.add_argument("--buckets", type=int, default=1 << 18)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--parser", type=Path, help="first-order model: also score dev with its predicted trees")
    ap.add_argument("--progress", action="store_true")
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    train = [s for s in read_conllu(args.data / "en_ewt-ud-train.conllu") if s.heads is not None]
    dev = [s for s in read_conllu(args.data / "en_ewt-ud-dev.conllu") if s.heads is not None]
    words = sum(len(s.forms) for s in dev)

    start = time.perf_counter()
    model = LogLinearLabeler.train(train, dev=dev, epochs=args.epochs, buckets=args.buckets, seed=args.seed,
                                   progress=args.progress)
    train_seconds = time.perf_counter() - start

    heads = [s.heads for s in dev]
    model.predict_batch(dev[:50], heads[:50])  # warm-up
    start = time.perf_counter()
    predicted = model.predict_batch(dev, heads)
    batch_seconds = time.perf_counter() - start
    start = time.perf_counter()
    for s in dev:
        model.predict(s, s.heads)
    single_seconds = time.perf_counter() - start
    labels = [lab for lab, _ in predicted]
    scores = attachment_scores(dev, heads, labels, [np.ones(len(s.forms)) for s in dev])
    count = CountLabeler.fit(train)
    count_labels = [count.predict(s.upos, s.heads)[0] for s in dev]
    meta, arrays = model.to_state()
    result: dict = {
        "label_accuracy": label_accuracy(dev, labels),
        "base_label_accuracy": label_accuracy(dev, labels, base=True),
        "las": round(scores["las"], 3), "uas": round(scores["uas"], 3),
        "las_uas_ratio": round(scores["las"] / scores["uas"], 5),
        "count_labeler_accuracy": label_accuracy(dev, count_labels),
        "best_epoch": model.info["best_epoch"],
        "dev_accuracy_by_epoch": [round(h["dev_label_accuracy"], 3) for h in model.info["history"]],
        "labels": len(model.labels), "templates": len(model.templates),
        "state_megabytes": round(sum(a.nbytes for a in arrays.values()) / 2**20, 1),
        "training_seconds": round(train_seconds, 1),
        "words_per_second_batch": round(words / batch_seconds),
        "words_per_second_one_sentence": round(words / single_seconds),
        "dev_words": words,
    }
    if args.parser:
        from engine.parser import FirstOrderParser

        parser = FirstOrderParser.load(args.parser)
        parsed = parser.parse(dev)
        pred_heads = [p.heads for p in parsed]
        probs = [p.head_probs for p in parsed]
        ours = [lab for lab, _ in model.predict_batch(dev, pred_heads)]
        theirs = attachment_scores(dev, pred_heads, [p.deprels for p in parsed], probs)
        mine = attachment_scores(dev, pred_heads, ours, probs)
        result["predicted_trees"] = {
            "parser": str(args.parser), "uas": round(mine["uas"], 3),
            "las_parser_labeler": round(theirs["las"], 3), "las": round(mine["las"], 3),
            "las_uas_ratio": round(mine["las"] / mine["uas"], 5),
        }
    result["machine"] = f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"
    result["command"] = " ".join(["python", *map(shlex.quote, sys.argv)])
    print(json.dumps(result))


if __name__ == "__main__":
    main()
