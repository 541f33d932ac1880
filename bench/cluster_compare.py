"""First-order CLL training on a Dask LocalCluster against one process (docs/results/cluster.md).

    python bench/cluster_compare.py --sentences 300 --epochs 2           # weights: how close
    python bench/cluster_compare.py --sentences 1500 --objective-only    # where the time goes

Trains ``train_cll`` on the first N sentences of EWT train in this process and with ``client=`` a
``LocalCluster(n_workers=2, processes=True, threads_per_worker=1)``, then prints the max |weight difference|,
how many weights differ by more than 1e-6 and 1e-3, and the training losses. ``--objective-only`` instead times
one pass of every batch's objective (zero weights) in one process and over the workers, without the AdaGrad
steps.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from engine.data.conllu_io import read_conllu
from engine.features.extract import FeatureExtractor
from engine.features.templates import default_first_order
from engine.kernels.exact import TreeConstraint
from engine.training.cll import TrainConfig, cll_objective, prepare_batches, train_cll, usable_trees
from engine.training.cluster import ShardedCLL, connect

TRAIN = Path(__file__).resolve().parents[2] / "shared" / "data" / "ud" / "en_ewt" / "en_ewt-ud-train.conllu"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sentences", type=int, default=300)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--objective-only", action="store_true")
    args = ap.parse_args()
    train = read_conllu(TRAIN)[: args.sentences]
    fx = FeatureExtractor(tuple(default_first_order()), 1 << 22)
    constraint = TreeConstraint("nonprojective", "single")
    with connect(f"local:{args.workers}") as client:
        if args.objective_only:
            keep, _ = usable_trees(train, constraint)
            kept = [train[i] for i in keep]
            batches = prepare_batches(fx, kept, 32, progress=False)
            w = np.zeros(fx.dim)
            t = time.perf_counter()
            for batch in batches:
                cll_objective(w, batch, constraint)
            one = time.perf_counter() - t
            t = time.perf_counter()
            sharded = ShardedCLL(client, fx, constraint, kept, 32)
            setup = time.perf_counter() - t
            t = time.perf_counter()
            for b in range(len(batches)):
                sharded.objective(w, b)
            sent = np.mean([sum(i[b].size for i in sharded.index if i[b] is not None) for b in range(len(batches))])
            print(f"{len(batches)} batches: objectives {one:.1f} s in one process, {time.perf_counter() - t:.1f} s "
                  f"on {args.workers} workers (set-up {setup:.1f} s); weights sent per batch {sent:.0f}")
            sharded.close()
            return
        config = TrainConfig(epochs=args.epochs)
        a = train_cll(fx, constraint, train, config, progress=False)
        b = train_cll(fx, constraint, train, config, progress=False, client=client)
    d = np.abs(a.weights - b.weights)
    print(f"max|dw| {d.max():.3g}  max|w| {np.abs(a.weights).max():.3g}  nonzero {np.count_nonzero(a.weights)}  "
          f">1e-6 {int((d > 1e-6).sum())}  >1e-3 {int((d > 1e-3).sum())}")
    print("nll one process", [h["nll"] for h in a.history], "on workers", [h["nll"] for h in b.history])


if __name__ == "__main__":
    main()
