"""Tagger benchmark: train the CRF tagger on EWT train, tag EWT dev (gold tokenization), score UPOS/XPOS.

    python bench/tagger_eval.py --data ../shared/data/ud/en_ewt

Prints one JSON object: dev UPOS/XPOS accuracy, training seconds, tagging words/s (best of --repeat runs,
features included), the model's array size and the exact command. Training uses the default settings and
no dev-based epoch selection, so the dev figures are not tuned on by this run.
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

from engine.data.conllu_io import read_conllu
from engine.text.tagger import Tagger

DEFAULT_DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "ud" / "en_ewt"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA, help="folder with en_ewt-ud-{train,dev}.conllu")
    ap.add_argument("--epochs", type=int, default=None, help="training epochs (default: the tagger's)")
    ap.add_argument("--repeat", type=int, default=3, help="tagging runs; the fastest is reported")
    ap.add_argument("--progress", action="store_true")
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    train = read_conllu(args.data / "en_ewt-ud-train.conllu")
    dev = read_conllu(args.data / "en_ewt-ud-dev.conllu")
    kwargs = {} if args.epochs is None else {"epochs": args.epochs}
    start = time.perf_counter()
    tagger = Tagger.train(train, progress=args.progress, **kwargs)
    train_seconds = time.perf_counter() - start
    words = sum(len(s.forms) for s in dev)
    times = []
    for _ in range(args.repeat):
        start = time.perf_counter()
        results = tagger.tag(dev)
        times.append(time.perf_counter() - start)
    upos = sum(g == p for s, r in zip(dev, results, strict=True) for g, p in zip(s.upos, r.upos, strict=True))
    xpos = sum(g == p for s, r in zip(dev, results, strict=True) for g, p in zip(s.xpos, r.xpos, strict=True))
    _, arrays = tagger.to_state()
    print(json.dumps({
        "upos": round(100 * upos / words, 2),
        "xpos": round(100 * xpos / words, 2),
        "dev_words": words,
        "train_sentences": tagger.training["sentences"],
        "train_words": tagger.training["words"],
        "epochs": tagger.training["config"]["epochs"],
        "features": len(tagger.features),
        "model_mb": round(sum(a.nbytes for a in arrays.values()) / 2**20, 1),
        "train_seconds": round(train_seconds, 1),
        "tag_words_per_second": round(words / min(times)),
        "command": shlex.join([Path(sys.executable).name, *sys.argv]),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}",
    }))


if __name__ == "__main__":
    main()
