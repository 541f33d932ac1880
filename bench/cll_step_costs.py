"""What one first-order CLL step costs, part by part, and the best speed-up data parallelism could give.

Issue 27 asks a data-parallel epoch on 2 workers to be >= 1.6x one process. A step of single-process training
(``engine.training.cll.train_cll``) is the batch's objective and gradient, the dense AdaGrad step over every
weight (the L2 term touches them all) and the epoch's iterate averaging (``sums += w``, ``engine.optim.loop``;
since 2026-11-28 the one-process trainer adds it inside the step's pass, ``AdaGrad.step(accumulate=...)``, and
only the data-parallel driver still makes it a pass of its own; this bench times it apart for both, as before).
Data parallelism splits only the first over the workers; the other two are one pass each over the 2^22
weights, made by whoever holds them. So with free communication a step costs at least
``half objective + step + averaging``, and the speed-up is at most::

    (objective + step + averaging) / (half objective + step + averaging)

This prints each part (means over the batches of the first ``--sentences`` EWT train sentences: an epoch's
time is their sum) and that bound; ``--parallel`` also times the dense passes spread over the machine's cores
with numba's ``prange`` (one gradient row per worker, summed in the pass, as a shared-memory design would
need), to see whether the serial part itself can shrink::

    OPENBLAS_NUM_THREADS=1 python bench/cll_step_costs.py --parallel

``--cluster local:N`` (or ``tcp://HOST:PORT``) also runs the same batches data-parallel
(``engine.training.cluster.ShardedCLL``) and times the driver's share of each step: gathering and sending each
part's weights, waiting for the parts, adding their gradients into the dense buffer, the step and the averaging::

    OPENBLAS_NUM_THREADS=1 python bench/cll_step_costs.py --cluster local:2
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from engine.data.conllu_io import iter_conllu  # noqa: E402
from engine.features.extract import FeatureExtractor  # noqa: E402
from engine.features.templates import default_first_order  # noqa: E402
from engine.kernels.exact import TreeConstraint  # noqa: E402
from engine.optim.adagrad import AdaGrad  # noqa: E402
from engine.training.cll import TrainingBatch, cll_objective, prepare_batches, usable_trees  # noqa: E402

TRAIN = ROOT.parent / "shared" / "data" / "ud" / "en_ewt" / "en_ewt-ud-train.conllu"


@contextmanager
def timed(into: list[float]) -> Iterator[None]:
    """Append the seconds the ``with`` block took to ``into``."""
    start = time.perf_counter()
    yield
    into.append(time.perf_counter() - start)


def mean_ms(samples: list[float]) -> float:
    return round(1000 * statistics.fmean(samples), 2)


def parallel_passes(dim: int, workers: int, repeat: int = 30) -> dict[str, float]:
    """The dense AdaGrad step reading one gradient row per worker, and the averaging add, over numba threads."""
    from numba import njit, prange  # type: ignore[import-untyped]

    @njit(parallel=True, error_model="numpy")  # type: ignore[misc]
    def step(w, rows, g2, lr, delta, l2):  # type: ignore[no-untyped-def]
        for i in prange(w.size):
            g = 0.0
            for k in range(rows.shape[0]):
                g = g + rows[k, i]
            g = g + l2 * w[i]
            s = g2[i] + g * g
            g2[i] = s
            w[i] = w[i] - lr * g / (np.sqrt(s) + delta)

    @njit(parallel=True)  # type: ignore[misc]
    def add(sums, w):  # type: ignore[no-untyped-def]
        for i in prange(w.size):
            sums[i] += w[i]

    rng = np.random.default_rng(0)
    w, g2, sums = rng.normal(size=dim), np.ones(dim), np.zeros(dim)
    rows = np.zeros((workers, dim))
    rows[:, ::7] = 1e-3
    step(w, rows, g2, 0.1, 1e-8, 1e-4)
    add(sums, w)
    times: dict[str, list[float]] = {"step": [], "averaging": []}
    for _ in range(repeat):
        with timed(times["step"]):
            step(w, rows, g2, 0.1, 1e-8, 1e-4)
        with timed(times["averaging"]):
            add(sums, w)
    return {f"parallel_{k}_ms": mean_ms(v) for k, v in times.items()}


def cluster_parts(spec: str, extractor: FeatureExtractor, constraint: TreeConstraint, sentences: list[object],
                  batch_size: int) -> dict[str, object]:
    """The driver's share of each data-parallel step (``ShardedCLL.objective``'s parts, then the step and the
    averaging), means over the batches in order; ``distinct_features`` is the mean size of a part."""
    from engine.training.cluster import ShardedCLL, connect

    with connect(spec) as client:
        sharded = ShardedCLL(client, extractor, constraint, sentences, batch_size)
        w = np.random.default_rng(0).normal(scale=0.01, size=extractor.dim)
        buffer, sums, opt = np.zeros(extractor.dim), np.zeros(extractor.dim), AdaGrad(extractor.dim, 0.1)
        parts: dict[str, list[float]] = {"send": [], "wait": [], "add_parts": [], "step": [], "averaging": []}
        sizes: list[int] = []
        try:
            for b in range(len(sharded.sizes)):
                with timed(parts["send"]):
                    pieces = [(actor, index[b]) for actor, index in zip(sharded.actors, sharded.index, strict=True)]
                    calls = [(part, actor.objective(b, w[part])) for actor, part in pieces if part is not None]
                with timed(parts["wait"]):
                    results = [(index, call.result()) for index, call in calls]
                with timed(parts["add_parts"]):
                    for index, (_, part_grad) in results:
                        buffer[index] += part_grad
                        sizes.append(len(index))
                with timed(parts["step"]):
                    opt.step(w, buffer, 1e-4, clear=True)
                with timed(parts["averaging"]):
                    sums += w
        finally:
            sharded.close()
    out: dict[str, object] = {f"cluster_{k}_ms": mean_ms(v) for k, v in parts.items()}
    out["cluster_total_ms"] = round(sum(statistics.fmean(v) for v in parts.values()) * 1000, 2)
    out["cluster_distinct_features"] = round(statistics.fmean(sizes))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--train", type=Path, default=TRAIN)
    ap.add_argument("--sentences", type=int, default=3000)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--dim", type=int, default=1 << 22)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--parallel", action="store_true", help="also time the dense passes over numba threads")
    ap.add_argument("--cluster", help="also time the data-parallel steps on this cluster (local:N, tcp://HOST:PORT)")
    args = ap.parse_args()
    constraint = TreeConstraint()
    sentences = [s for _, s in zip(range(args.sentences), iter_conllu(args.train), strict=False)]
    keep, _ = usable_trees(sentences, constraint)
    extractor = FeatureExtractor(tuple(default_first_order()), args.dim)
    batches = prepare_batches(extractor, [sentences[i] for i in keep], args.batch_size, progress=False)
    w = np.random.default_rng(0).normal(scale=0.01, size=args.dim)
    buffer, sums, opt = np.zeros(args.dim), np.zeros(args.dim), AdaGrad(args.dim, 0.1)
    parts: dict[str, list[float]] = {"objective": [], "part_objective": [], "step": [], "averaging": []}
    for batch in batches:
        with timed(parts["objective"]):
            _, grad = cll_objective(w, batch, constraint, out=buffer)
        with timed(parts["step"]):
            opt.step(w, grad, 1e-4, clear=True)
        with timed(parts["averaging"]):
            sums += w
        share = -(-len(batch.gold) // args.workers)  # the largest worker's part of the batch
        with timed(parts["part_objective"]):
            cll_objective(w, TrainingBatch(batch.features[:share], batch.gold[:share]), constraint, out=buffer)
        buffer[:] = 0.0
    out: dict[str, object] = {f"{k}_ms": mean_ms(v) for k, v in parts.items()}
    whole = sum(statistics.fmean(parts[k]) for k in ("objective", "step", "averaging"))
    best = sum(statistics.fmean(parts[k]) for k in ("part_objective", "step", "averaging"))
    out["bound_serial_passes"] = round(whole / best, 3)
    if args.parallel:
        out.update(parallel_passes(args.dim, args.workers))
        best = statistics.fmean(parts["part_objective"]) + (out["parallel_step_ms"]  # type: ignore[operator]
                                                             + out["parallel_averaging_ms"]) / 1000
        out["bound_parallel_passes"] = round(whole / best, 3)
    if args.cluster:
        out.update(cluster_parts(args.cluster, extractor, constraint, [sentences[i] for i in keep], args.batch_size))
    out.update(batches=len(batches), workers=args.workers, dim=args.dim, cores=os.cpu_count(),
               load_average=os.getloadavg()[0])
    print(json.dumps(out))


if __name__ == "__main__":
    main()
