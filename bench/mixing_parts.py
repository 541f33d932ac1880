"""Where an epoch of iterative parameter mixing goes (``engine.training.mixing``; docs/results/cluster.md).

    python bench/mixing_parts.py [--sentences N] [--workers 2]

On a ``LocalCluster`` of ``--workers`` processes: the shards' feature extraction (submit, wait, and the time
inside the workers), one mixing epoch from zero weights (the wall time of all shards at once and each
``shard_epoch``'s own time inside its worker), then the first shard's epoch alone on its worker (no other shard
beside it). Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from engine.data.batching import length_batches  # noqa: E402
from engine.data.conllu_io import read_conllu  # noqa: E402
from engine.features.extract import FeatureExtractor  # noqa: E402
from engine.features.templates import default_first_order  # noqa: E402
from engine.kernels.exact import TreeConstraint  # noqa: E402
from engine.training import mixing  # noqa: E402
from engine.training.cll import TrainConfig, usable_trees  # noqa: E402
from engine.training.cluster import connect  # noqa: E402

TRAIN = ROOT.parent / "shared" / "data" / "ud" / "en_ewt" / "en_ewt-ud-train.conllu"
CONSTRAINT = TreeConstraint("nonprojective", "single")


def _timed(fn: Any, *args: Any) -> tuple[Any, float]:
    start = time.perf_counter()
    out = fn(*args)
    return out, time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--train", type=Path, default=TRAIN)
    ap.add_argument("--sentences", type=int, default=0, help="the first N sentences only (0: all)")
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args()
    train = read_conllu(args.train)[: args.sentences or None]
    keep, _ = usable_trees(train, CONSTRAINT)
    kept = [train[i] for i in keep]
    fx = FeatureExtractor(tuple(default_first_order()), 1 << 22)
    config = TrainConfig(epochs=1)
    import distributed

    with connect(f"local:{args.workers}") as client:
        shards = mixing.deal(length_batches([len(s.forms) for s in kept], config.batch_size), args.workers)
        workers = sorted(client.scheduler_info()["workers"])[: len(shards)]
        t0 = time.perf_counter()
        timed = [client.submit(_timed, mixing.shard_batches, fx, [kept[i] for g in part for i in g],
                               [len(g) for g in part], workers=[w], pure=False)
                 for part, w in zip(shards, workers, strict=True)]
        t1 = time.perf_counter()
        inside = client.gather([client.submit(lambda r: r[1], f, workers=[w])
                                for f, w in zip(timed, workers, strict=True)])
        t2 = time.perf_counter()
        batches = [client.submit(lambda r: r[0], f, workers=[w]) for f, w in zip(timed, workers, strict=True)]
        distributed.wait(batches)
        rng = np.random.default_rng(0)
        zeros = np.zeros(fx.dim)
        orders = [[int(b) for b in rng.permutation(len(part))] for part in shards]
        t3 = time.perf_counter()
        epochs = [client.submit(_timed, mixing.shard_epoch, b, zeros, zeros, order, CONSTRAINT, config, len(kept),
                                pure=False, workers=[w]) for b, order, w in zip(batches, orders, workers, strict=True)]
        together = [f.result()[1] for f in epochs]
        t4 = time.perf_counter()
        alone = client.submit(_timed, mixing.shard_epoch, batches[0], zeros, zeros, orders[0], CONSTRAINT, config,
                              len(kept), pure=False, workers=[workers[0]]).result()[1]
        t5 = time.perf_counter()
    print(json.dumps({"sentences": len(kept), "workers": len(workers), "batches": [len(p) for p in shards],
                      "features_submit_s": round(t1 - t0, 2), "features_wait_s": round(t2 - t1, 2),
                      "features_inside_s": [round(x, 2) for x in inside], "epoch_wall_s": round(t4 - t3, 2),
                      "epoch_inside_s": [round(x, 2) for x in together], "first_shard_alone_wall_s": round(t5 - t4, 2),
                      "first_shard_alone_inside_s": round(alone, 2), "load_average_1min": round(os.getloadavg()[0], 2),
                      "command": shlex.join(["python", *sys.argv])}, indent=1))


if __name__ == "__main__":
    main()
