"""Labels inside the factor graph against labels after it (issue 23, "labels in the graph").

Parses EWT dev (gold tags) with a second-order model trained with ``--labels-in-graph`` (``--roles``) and with
one trained the same way without (``--plain``), and labels the plain model's trees three ways: its own count
labeller, a log-linear labeller with the *same arc-local templates* as the graph's role model (the clean
comparison: same features, labels after the tree instead of inside it) and the pipeline's stacked labeller (every
template, five folds; what a pipeline model ships). The labellers train on EWT train with gold tags and trees.
Prints one JSON object: UAS, LAS, label accuracy on the correctly attached words, label ECE (the chosen label's
probability against its correctness, 15 bins, words with the right head), parse words/s of each model (its own
labels included) and, for the labellers after the tree, the plain parse plus their labelling::

    python bench/labels_in_graph.py --roles /tmp/hbp/o2-roles-s0 --plain /tmp/hbp/o2-k1-s0
"""

from __future__ import annotations

import argparse
import json
import platform
import shlex
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from engine.bp_parser import BPParser, load_any  # noqa: E402
from engine.data.conllu_io import read_conllu  # noqa: E402
from engine.decode.labeler import label_many  # noqa: E402
from engine.decode.loglinear_labeler import LogLinearLabeler  # noqa: E402
from engine.evaluation.metrics import attachment_scores, calibration  # noqa: E402
from engine.scoring.link_labels import arc_local  # noqa: E402
from engine.training.pipeline import LABELER_BUCKETS  # noqa: E402

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "ud" / "en_ewt"


def _score(gold: list, heads: list, labels: list, probs: list, head_probs: list) -> dict[str, float]:
    s = attachment_scores(gold, heads, labels, head_probs)
    attached = np.concatenate([h[1:] == g.heads[1:] for g, h in zip(gold, heads, strict=True)])
    right = np.concatenate([np.array(lab) == np.array(g.deprels) for g, lab in zip(gold, labels, strict=True)])
    conf = np.concatenate([np.asarray(p, dtype=float) for p in probs])
    return {"uas": round(s["uas"], 2), "las": round(s["las"], 2),
            "label_accuracy_attached": round(100.0 * float(right[attached].mean()), 2),
            "label_ece_attached": round(calibration(conf[attached], right[attached])[0], 4)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--roles", required=True, help="a model trained with --labels-in-graph")
    ap.add_argument("--plain", required=True, help="the same training without")
    ap.add_argument("--train", default=str(DATA / "en_ewt-ud-train.conllu"))
    ap.add_argument("--dev", default=str(DATA / "en_ewt-ud-dev.conllu"))
    args = ap.parse_args()
    train, dev = read_conllu(args.train), read_conllu(args.dev)
    words = sum(len(s.forms) for s in dev)
    out: dict[str, object] = {"command": "python " + shlex.join(sys.argv), "machine": platform.node(),
                              "dev_words": words}
    for name in ("roles", "plain"):
        parser = load_any(getattr(args, name))
        assert isinstance(parser, BPParser)
        start = time.perf_counter()
        parsed = parser.parse(dev)
        seconds = time.perf_counter() - start
        heads = [p.heads for p in parsed]
        row = _score(dev, heads, [p.deprels for p in parsed], [p.label_probs for p in parsed],
                     [p.head_probs for p in parsed])
        row["parse_words_per_s"] = round(words / seconds)
        out[f"{name}: its own labels ({type(parser.labeler).__name__})"] = row
        if name == "plain":
            for label, kwargs in (("arc-local log-linear labeller (the role model's templates)",
                                   {"templates": arc_local(), "folds": 0}),
                                  ("stacked log-linear labeller (every template, 5 folds)", {"folds": 5})):
                start = time.perf_counter()
                labeller = LogLinearLabeler.train(train, dev=dev, buckets=LABELER_BUCKETS, **kwargs)  # type: ignore[arg-type]
                trained = time.perf_counter() - start
                start = time.perf_counter()
                labelled = label_many(labeller, dev, heads)
                labelling = time.perf_counter() - start
                row = _score(dev, heads, [lab for lab, _ in labelled], [p for _, p in labelled],
                             [p.head_probs for p in parsed])
                row["labeller_train_s"] = round(trained, 1)
                row["parse_and_label_words_per_s"] = round(words / (seconds + labelling))
                out[f"plain + {label}"] = row
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
