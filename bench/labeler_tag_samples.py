"""Labellers trained with tag-sample copies, scored on the shipped parser's own EWT dev trees.

    python bench/labeler_tag_samples.py [--model models/en_ewt] [--samples 0 1 2 4] [--tag-samples 16]

For each K of ``--samples``, a stacked labeller is trained as ``engine train`` trains it with
``--labeler-tag-samples K``: on EWT train with jackknifed tags (5 folds, seed 0) plus K copies of each
sentence under tag sequences drawn from its fold tagger's posterior (``jackknife_tag_draws``). EWT dev is
tagged and parsed once by ``--model`` with ``--tag-samples`` draws (``parse_over_tag_samples``, trees from
the averaged marginals); each labeller then labels those trees twice: under the best tags only, and
averaged over the best tags and the draws (what ``parse_over_tag_samples`` does). Prints one JSON object:
per K, LAS (CoNLL 2018: base relations) both ways, the label accuracy on gold trees under the best tags,
the labeller's best epoch and training seconds; and the command. Dev only: it chose the default K.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import shlex
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from engine.data.conllu_io import read_conllu  # noqa: E402
from engine.decode.loglinear_labeler import LogLinearLabeler  # noqa: E402
from engine.decode.tag_marginal import parse_over_tag_samples, with_tag_copies  # noqa: E402
from engine.evaluation.metrics import attachment_scores  # noqa: E402
from engine.inference.bp import BPConfig  # noqa: E402
from engine.pipeline import Pipeline  # noqa: E402
from engine.text.jackknife import jackknife_tag_draws  # noqa: E402
from engine.training.pipeline import LABELER_BUCKETS  # noqa: E402

EWT = Path(os.environ.get("BP_PARSER_DATA", ROOT.parent / "shared" / "data")) / "ud" / "en_ewt"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=str(ROOT / "models" / "en_ewt"))
    ap.add_argument("--samples", type=int, nargs="+", default=[0, 1, 2, 4])
    ap.add_argument("--tag-samples", type=int, default=16)
    args = ap.parse_args()
    train = read_conllu(EWT / "en_ewt-ud-train.conllu")
    gold = read_conllu(EWT / "en_ewt-ud-dev.conllu")
    pipeline = Pipeline.load(args.model)
    parser = pipeline.parser

    # dev: gold trees, tagged by the model's tagger (the labeller's epoch choice); parsed once per distinct tag
    # sequence (cached), trees as the model's
    dev = [copy.copy(s) for s in gold]
    _, draws = pipeline.tag_and_sample(dev, retag=True, samples=args.tag_samples)
    cache: dict[tuple, object] = {}
    config = BPConfig(max_iterations=5, schedule="serial")

    def parse(batch: list) -> list:
        keys = [(tuple(s.forms), tuple(s.upos), tuple(s.xpos)) for s in batch]
        todo = [i for i, k in enumerate(keys) if k not in cache]
        for i, p in zip(todo, parser.parse([batch[i] for i in todo], config), strict=True):
            cache[keys[i]] = p
        return [cache[k] for k in keys]

    start = time.perf_counter()
    trees = [p.heads for p in parse_over_tag_samples(dev, draws, parse, parser.constraint, parser.labeler)]
    parse_seconds = time.perf_counter() - start

    jackknifed, train_draws = jackknife_tag_draws(train, folds=5, seed=0, samples=max(args.samples))
    report: dict[str, object] = {"parse_seconds": round(parse_seconds, 1)}
    for k in args.samples:
        data = with_tag_copies(jackknifed, [d[:k] for d in train_draws])
        start = time.perf_counter()
        labeler = LogLinearLabeler.train(data, dev=dev, seed=0, folds=5, buckets=LABELER_BUCKETS, group=1 + k)
        seconds = time.perf_counter() - start
        best = [labels for labels, _ in labeler.predict_batch(dev, trees)]
        averaged = parse_over_tag_samples(dev, draws, parse, parser.constraint, labeler)
        on_gold = [labels for labels, _ in labeler.predict_batch(dev, [s.heads for s in gold])]
        ones = [np.ones(s.n) for s in gold]
        report[f"K={k}"] = {
            "las_best_tags": round(attachment_scores(gold, trees, best, ones)["las"], 2),
            "las_averaged": round(attachment_scores(gold, [p.heads for p in averaged],
                                                    [p.deprels for p in averaged], ones)["las"], 2),
            "label_accuracy_gold_trees": round(attachment_scores(gold, [s.heads for s in gold], on_gold, ones)["las"],
                                               2),
            "best_epoch": labeler.info["best_epoch"], "train_seconds": round(seconds, 1)}
        print(json.dumps({f"K={k}": report[f"K={k}"]}), file=sys.stderr, flush=True)
    report["command"] = shlex.join(["python", *sys.argv])
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
