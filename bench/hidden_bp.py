"""Latent edge clusters inside a second-order BP model's LINK factors: the Table 2 question (Smith & Smith 2007)
asked of the BP parser. Reads model directories trained by

    python -m engine train --train EWT-TRAIN --dev EWT-DEV --out OUT --order 2 --epochs 3 --learning-rate 0.05 \\
        --l2 10 --pruner models/en_ewt-o1 --hidden-clusters K --seed S --components parser --no-calibrate --quiet

and prints one markdown row per model: clusters, seed, dev UAS / LAS (count labeller) / head ECE as the trainer
recorded them (BP's defaults, the best epoch by dev UAS), the best epoch, seconds per training epoch (wall clock,
from the manifest's history) and, for clustered models, the mean over dev gold edges of the entropy of
p(z | edge) divided by log K (1: the clusters are interchangeable, 0: each edge belongs to one)::

    python bench/hidden_bp.py /tmp/hbp/o2-k1-s0 /tmp/hbp/o2-k2-s0 ...
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from engine.bp_parser import BPParser, load_any  # noqa: E402
from engine.data.batching import length_batches  # noqa: E402
from engine.data.conllu_io import read_conllu  # noqa: E402
from engine.scoring.hidden import marginalise_clusters  # noqa: E402

DEV = Path(__file__).resolve().parents[2] / "shared" / "data" / "ud" / "en_ewt" / "en_ewt-ud-dev.conllu"


def cluster_entropy(parser: BPParser, dev: list) -> float:
    """Mean over the dev set's gold edges of H(p(z | edge)) / log K."""
    assert parser.clusters is not None
    parser.link_and_prune_scores([])  # the scorer of the K blocks (and the pruner)
    assert parser._scorer is not None
    total, count = 0.0, 0
    for idx in length_batches([len(s.forms) for s in dev], 64):
        chosen = [dev[i] for i in idx]
        per = parser._scorer(chosen)[:parser.clusters]
        _, post = marginalise_clusters(per)
        for j, s in enumerate(chosen):
            m = np.arange(1, len(s.forms) + 1)
            p = post[:, j, s.heads[1:], m]  # (K, n)
            h = -(np.where(p > 0, p * np.log(np.maximum(p, 1e-300)), 0.0)).sum(axis=0)
            total += float(h.sum())
            count += len(m)
    return total / count / np.log(parser.clusters)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("models", nargs="+")
    ap.add_argument("--dev", default=str(DEV))
    args = ap.parse_args()
    dev = read_conllu(args.dev)
    print("| clusters | seed | dev UAS | LAS (count labeller) | head ECE | best epoch | s / epoch "
          "| H(z given gold edge) / log K |")
    print("|---|---|---|---|---|---|---|---|")
    for directory in args.models:
        manifest = json.loads((Path(directory) / "manifest.json").read_text())
        parser = load_any(directory)
        assert isinstance(parser, BPParser)
        training, dev_m = manifest["training"], manifest["metrics"]["dev"]
        seconds = np.mean([h["seconds"] for h in training["history"]])
        k = parser.clusters or 1
        entropy = f"{cluster_entropy(parser, dev):.3f}" if parser.clusters else "-"
        print(f"| {k if k > 1 else 'none'} | {training['seed']} | {dev_m['uas']:.2f} | {dev_m['las']:.2f} | "
              f"{dev_m['ece']:.4f} | {training['best_epoch']} | {seconds:.0f} | {entropy} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
