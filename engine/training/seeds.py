"""One recipe trained from several seeds, and the mean of the runs' weights (``train --seeds N``).

The runs differ only in the seed of the batch order; each keeps its own best epoch on dev, and the model is
the mean of their weights (and of their role weights, for label-aware links), as ``engine average`` builds it
from separately trained models
(``engine.training.average``; "model soups", Wortsman et al. 2022). Doing it inside ``train`` lets a
training job build the same kind of model as the shipped default (docs/models.md, *From raw text*: 7 seeds, dev
UAS 85.86 against 85.33-85.64 for each run alone) in one command, with one pruner and one jackknife.

Ctrl-C during a run stops there: the model is the mean of the runs finished so far and the interrupted run's
best epoch (if it finished one), and ``interrupted`` is set.

With a task map (``engine.training.tasks``, ``train --cluster``) the runs are independent Dask tasks, run at the
same time on the workers; each computes exactly what the same run computes here, and the mean is taken over the
runs in seed order as here, so the weights are bit for bit the sequential ones when both run BLAS on one thread,
as Dask's workers do: a sequential command left at OpenBLAS's default thread count splits the matrix operations of
long sentences differently (all of EWT train: 50 of 4.2M stored weights off by at most 3.7e-9;
docs/results/cluster.md, 2026-11-28). Ctrl-C then cancels the tasks
and stops the command without a model.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from engine.training.cll import TrainResult

OnBatch = Callable[[int, int], None]
TaskMap = Callable[..., list[Any]]  # engine.training.tasks: map(fn, arguments, on_batch)


def train_seeds(run: Callable[[int, OnBatch], TrainResult], seeds: Sequence[int],
                on_batch: OnBatch | None = None,
                map_tasks: TaskMap | None = None) -> tuple[TrainResult, list[dict[str, Any]]]:
    """``run(seed, on_batch)`` for each seed in turn; return the result whose weights are the mean of the runs'
    (the first run's history, skipped trees and settings; the summed seconds) and one record per run.

    With one seed, the run's own result and no records. ``on_batch(done, total)`` reports the batches of all
    runs together. ``map_tasks``: run them as the tasks of this map (``run`` must then survive serialisation)."""
    if not seeds:
        raise ValueError("at least one seed is needed")
    results: list[tuple[int, TrainResult]] = []
    if map_tasks is not None:
        results = list(zip(seeds, map_tasks(run, [(seed,) for seed in seeds], on_batch), strict=True))
    for k, seed in enumerate(seeds if map_tasks is None else []):
        def batch(done: int, total: int, k: int = k) -> None:
            if on_batch is not None:
                on_batch(k * total + done, len(seeds) * total)

        result = run(seed, batch)
        results.append((seed, result))
        if result.interrupted:
            break
    if len(seeds) == 1:
        return results[0][1], []
    # a run stopped before its first epoch ended has no trained weights of its own
    kept = [(seed, r) for seed, r in results if r.best_epoch > 0] or results[:1]
    first = results[0][1]
    averaged = {id(r) for _, r in kept}
    records = [{"seed": seed, "best_epoch": r.best_epoch, "dev": max((e["dev"] for e in r.history), default=None),
                "seconds": round(r.seconds, 1), "interrupted": r.interrupted, "averaged": id(r) in averaged}
               for seed, r in results]
    mean = np.mean([r.weights for _, r in kept], axis=0)
    roles_of = [r.roles for _, r in kept if r.roles is not None]  # label-aware links: every run has them or none
    roles = np.mean(roles_of, axis=0) if roles_of else None
    return TrainResult(mean, first.best_epoch, first.history, any(r.interrupted for _, r in results), first.skipped,
                       sum(r.seconds for _, r in results), first.config, roles), records
