"""Independent trainings as Dask tasks (issue 27): the parsers of ``--seeds N``, the jackknife's fold taggers and
the labeller's first-stage folds.

A *task map* is a callable ``map(fn, arguments, on_batch=None) -> [fn(*a) for a in arguments]``. Without a
cluster it is ``sequential_map``, that very loop. With one (``train --cluster``) it is a ``ClusterMap``: each
``fn(*a)`` runs as one Dask task on the workers, and the results come back in the order of ``arguments``. The
trainers (``engine.training.seeds``, ``engine.text.jackknife``, ``engine.decode.loglinear_labeler``) receive
the map as a parameter, so they need not know about Dask, and the work a task does is the very code the
sequential loop runs: a task's result is bit for bit the sequential one (the same seeds, the same data, the same
single-threaded arithmetic), and so is what the driver builds from them (it combines them in the same order).

``fn`` is usually a closure over the training data. ``ClusterMap`` serialises it once (Dask's own pickling,
between Dask's processes only: nothing is persisted that way) and replicates those bytes on every worker
(``scatter(broadcast=True)``); each task deserialises its own private copy, so tasks sharing a worker share no
mutable state (but for what a trainer keeps on purpose: the first-order seeds' runs on one worker extract their
features once, ``engine.training.cll.train_cll``'s ``shared``, freed on every worker when the runs are done).
A task whose worker dies is rescheduled by Dask on another worker (the replicated input is still on the others)
and rerun from its start: its result is the same.

Progress: with ``on_batch``, each task calls ``fn(*a, report)`` and ``report(done, total)`` reaches the driver
as a Dask event (``Worker.log_event``, throttled); the driver sums the tasks' counts (a rerun task's count never
goes back) and calls ``on_batch(done, total)`` after each wait (every ``POLL_SECONDS`` at least, so that a
cancellation raised by it is seen within that time, even before the first event). When ``on_batch`` raises (a
cancelled job) or the driver is interrupted, the tasks not finished are cancelled and the exception propagates.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from engine.training.cluster import require_connected

OnBatch = Callable[[int, int], None]
POLL_SECONDS = 0.5  # the driver's wait between progress reports (and cancellation checks)
REPORT_SECONDS = 0.5  # a task's least interval between progress events


def sequential_map(fn: Callable[..., Any], arguments: Sequence[tuple[Any, ...]],
                   on_batch: OnBatch | None = None) -> list[Any]:
    """``[fn(*a) for a in arguments]`` in this process; with ``on_batch``, ``fn(*a, report)`` where ``report``
    counts task ``k``'s batches after those of the tasks before it (``k * total + done`` of ``n * total``)."""
    if on_batch is None:
        return [fn(*a) for a in arguments]
    n = len(arguments)
    out = []
    for k, a in enumerate(arguments):
        def report(done: int, total: int, k: int = k) -> None:
            assert on_batch is not None
            on_batch(k * total + done, n * total)

        out.append(fn(*a, report))
    return out


class _EventReport:
    """On a worker: ``report(done, total)`` sends ``(task, done, total)`` to the driver as a Dask event, at most
    every ``REPORT_SECONDS`` (and always the last batch)."""

    def __init__(self, topic: str, task: int) -> None:
        from distributed import get_worker

        self.worker, self.topic, self.task, self.last = get_worker(), topic, task, 0.0

    def __call__(self, done: int, total: int) -> None:
        now = time.monotonic()
        if done >= total or now - self.last >= REPORT_SECONDS:
            self.last = now
            self.worker.log_event(self.topic, {"task": self.task, "done": done, "total": total})


def run_task(blob: bytes, task: int, arguments: tuple[Any, ...], topic: str | None) -> Any:
    """On a worker: deserialise the shipped function (a private copy) and run it on ``arguments``."""
    from distributed.protocol.pickle import loads

    fn = loads(blob)
    return fn(*arguments, _EventReport(topic, task)) if topic else fn(*arguments)


class ClusterMap:
    """The task map on the Dask cluster of ``client`` (see the module's docstring)."""

    def __init__(self, client: Any) -> None:
        self.client = client

    def __call__(self, fn: Callable[..., Any], arguments: Sequence[tuple[Any, ...]],
                 on_batch: OnBatch | None = None) -> list[Any]:
        from distributed.protocol.pickle import dumps

        if not arguments:
            return []
        client = self.client
        require_connected(client)
        [shipped] = client.scatter([dumps(fn)], broadcast=True, hash=False)
        topic = f"bp-tasks-{uuid.uuid4().hex}" if on_batch is not None else None
        futures = [client.submit(run_task, shipped, k, tuple(a), topic, pure=False, key=f"run_task-{uuid.uuid4().hex}")
                   for k, a in enumerate(arguments)]
        try:
            self._wait(futures, topic, on_batch)
            return [f.result() for f in futures]
        except BaseException:
            client.cancel(futures)
            raise
        finally:
            shipped.release()

    def _wait(self, futures: list[Any], topic: str | None, on_batch: OnBatch | None) -> None:
        """Wait for every future, raising a failed task's exception at once, and report the progress."""
        from distributed import wait

        counts: dict[int, tuple[int, int]] = {}
        seen = 0
        pending = list(futures)
        while pending:
            try:
                wait(pending, timeout=POLL_SECONDS, return_when="FIRST_COMPLETED")
            except TimeoutError:
                pass
            for f in pending:
                if f.status in ("error", "cancelled"):
                    f.result()  # raises the task's exception (or CancelledError)
            pending = [f for f in pending if f.status != "finished"]
            if on_batch is not None and topic is not None:
                require_connected(self.client)  # a call to a lost scheduler would wait out the connect timeout
                events = self.client.get_events(topic)
                for _, event in events[seen:]:
                    done, total = counts.get(event["task"], (0, event["total"]))
                    counts[event["task"]] = (max(done, event["done"]), event["total"])
                seen = len(events)
                finished = len(futures) - len(pending)
                total = max((t for _, t in counts.values()), default=0)
                if total:
                    on_batch(min(sum(d for d, _ in counts.values()), len(futures) * total), len(futures) * total)
                elif finished:
                    on_batch(finished, len(futures))
                else:  # nothing counted yet (e.g. the tasks are extracting features): still a cancellation check
                    on_batch(0, 1)


def task_map(client: Any | None) -> Callable[..., list[Any]]:
    """``ClusterMap(client)`` with a client, else ``sequential_map``."""
    return ClusterMap(client) if client is not None else sequential_map
