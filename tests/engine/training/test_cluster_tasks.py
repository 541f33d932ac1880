"""The independent trainings as Dask tasks (``engine.training.tasks``) on a ``LocalCluster`` of 2 worker
processes: the seeds' parsers, the jackknife's fold taggers and the labeller's stacking folds give a model whose
every array is bit for bit the sequential run's, also when a worker is killed while a seed's task runs."""

from __future__ import annotations

import logging
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cluster_helpers import TIMEOUT, assert_same_model, local_cluster

from engine.training.options import TrainOptions
from engine.training.tasks import ClusterMap, sequential_map


@pytest.fixture(scope="module")
def cluster() -> Iterator[Any]:
    with local_cluster() as cl:
        yield cl


def _subset(ewt_dir: Path, tmp_path: Path, n: int) -> Path:
    path = tmp_path / "train.conllu"
    blocks = (ewt_dir / "en_ewt-ud-train.conllu").read_text(encoding="utf-8").split("\n\n")[:n]
    path.write_text("\n\n".join(blocks) + "\n\n", encoding="utf-8")
    return path


def test_the_cluster_map_returns_the_results_in_order_and_raises_a_tasks_error(cluster: Any) -> None:
    from distributed import Client

    with Client(cluster, timeout=TIMEOUT) as client:
        client.wait_for_workers(2, timeout=TIMEOUT)
        offset = 10  # a closure: shipped by value

        def add(a: int, b: int) -> int:
            if a < 0:
                raise ValueError(f"negative {a}")
            return a + b + offset

        arguments = [(a, 2 * a) for a in range(7)]
        assert ClusterMap(client)(add, arguments) == sequential_map(add, arguments) == [3 * a + 10 for a in range(7)]
        with pytest.raises(ValueError, match="negative -1"):
            ClusterMap(client)(add, [(1, 1), (-1, 0)])


def test_the_tasks_progress_reaches_the_driver(cluster: Any) -> None:
    """Each task's ``report(done, total)`` comes back as Dask events: the driver's last ``on_batch`` counts every
    batch of every task (without the events it would only count finished tasks, ``(2, 2)``), never going back."""
    from distributed import Client

    def count(n: int, report: Any) -> int:
        for i in range(n):
            report(i + 1, n)
        return n

    with Client(cluster, timeout=TIMEOUT) as client:
        client.wait_for_workers(2, timeout=TIMEOUT)
        calls: list[tuple[int, int]] = []
        assert ClusterMap(client)(count, [(4,), (4,)], lambda done, total: calls.append((done, total))) == [4, 4]
        assert calls[-1] == (8, 8) and calls == sorted(calls)
        def cancel(done: int, total: int) -> None:
            raise KeyError("the job was cancelled")  # what the job runner's check raises, in kind

        with pytest.raises(KeyError, match="cancelled"):  # raised by the driver's first check, tasks cancelled
            ClusterMap(client)(count, [(4,), (4,)], cancel)
    here: list[tuple[int, int]] = []
    assert sequential_map(count, [(4,), (4,)], lambda done, total: here.append((done, total))) == [4, 4]
    assert here == [(d, 8) for d in range(1, 9)]


@pytest.mark.slow
def test_seeds_and_folds_on_the_cluster_give_the_sequential_model(cluster: Any, ewt_dir: Path,
                                                                   tmp_path: Path) -> None:
    """Tagger (3 jackknife folds), 2 parser seeds, stacked labeller (3 folds): the same arrays and manifest, bit
    for bit; progress still rises steadily to 1."""
    from engine.training.pipeline import train_model

    path = _subset(ewt_dir, tmp_path, 90)
    options = dict(epochs=2, dim=1 << 18, components=("parser", "tagger", "labeler"), batch_size=8, seeds=2, name="m",
                   folds=3)
    train_model(path, path, tmp_path / "one", TrainOptions(**options), progress=False)
    seen: list[tuple[float, str]] = []
    train_model(path, path, tmp_path / "two", TrainOptions(**options, cluster=cluster.scheduler_address),
                progress=False, on_progress=lambda fraction, stage: seen.append((fraction, stage)))
    assert_same_model(tmp_path / "one", tmp_path / "two")
    fractions = [f for f, _ in seen]
    assert fractions == sorted(fractions) and fractions[-1] == 1.0
    from distributed import Client

    with Client(cluster, timeout=TIMEOUT) as observer:  # the work did run on the cluster's workers
        prefixes = observer.run_on_scheduler(lambda dask_scheduler: dict(dask_scheduler.task_prefixes))
        assert "run_task" in prefixes


@pytest.mark.slow
def test_a_seed_task_whose_worker_is_killed_is_rerun(ewt_dir: Path, tmp_path: Path) -> None:
    """A worker process is killed (SIGKILL) while the seeds' tasks run (after their first progress event): Dask
    reruns its task on a worker (the nanny starts a new one), the training succeeds, the model is the
    sequential one."""
    from distributed import Client

    from engine.training.pipeline import train_model

    path = _subset(ewt_dir, tmp_path, 150)
    options = dict(epochs=3, dim=1 << 18, components=("parser",), batch_size=8, seeds=2, name="m")
    train_model(path, path, tmp_path / "one", TrainOptions(**options), progress=False)
    with local_cluster() as cl, Client(cl, timeout=TIMEOUT) as client:
        client.wait_for_workers(2, timeout=TIMEOUT)
        before = set(client.scheduler_info()["workers"])
        killed: list[int] = []

        def on_progress(fraction: float, stage: str) -> None:
            if stage == "training" and not killed:
                busy = [w for w, keys in client.processing().items() if keys]
                if busy:
                    pid = client.run(os.getpid, workers=busy[:1])[busy[0]]
                    os.kill(pid, signal.SIGKILL)
                    killed.append(pid)

        train_model(path, path, tmp_path / "two", TrainOptions(**options, cluster=cl.scheduler_address),
                    progress=False, on_progress=on_progress)
        assert killed  # a worker was killed mid-task
        client.wait_for_workers(2, timeout=TIMEOUT)
        assert set(client.scheduler_info()["workers"]) != before  # and replaced by a new one
    assert_same_model(tmp_path / "one", tmp_path / "two")


@pytest.mark.slow
def test_a_data_parallel_shard_whose_worker_is_killed_is_rebuilt(ewt_dir: Path, tmp_path: Path,
                                                                 caplog: pytest.LogCaptureFixture) -> None:
    """One seed trains data-parallel (each worker holds a shard's features, ``engine.training.cluster``). A
    worker process is SIGKILLed after the first batch: its shard is built again on another worker, the batch's
    part computed again, and the model equals the one trained on the same cluster without the kill, bit for
    bit (the same parts, the same sums in the same order). Before the rebuild existed the training failed."""
    from distributed import Client

    from engine.training.pipeline import train_model

    path = _subset(ewt_dir, tmp_path, 150)
    options = dict(epochs=2, dim=1 << 18, components=("parser",), batch_size=8, seeds=1, name="m")
    with local_cluster() as cl, Client(cl, timeout=TIMEOUT) as client:
        client.wait_for_workers(2, timeout=TIMEOUT)
        cluster_options = TrainOptions(**options, cluster=cl.scheduler_address)
        train_model(path, path, tmp_path / "one", cluster_options, progress=False)
        killed: list[int] = []
        seen: list[float] = []

        def on_progress(fraction: float, stage: str) -> None:
            # ``fraction`` is the overall progress: the stage's start is already above 0, so wait for it to move
            # (the first batch done); killed at the stage's start, the worker could be back before the shards
            # are set up, and nothing would be lost
            if stage == "training":
                seen.append(fraction)
            if stage == "training" and fraction > seen[0] and not killed:
                worker = sorted(client.scheduler_info()["workers"])[0]
                pid = client.run(os.getpid, workers=[worker])[worker]
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)

        with caplog.at_level(logging.WARNING, logger="engine.training.cluster"):
            train_model(path, path, tmp_path / "two", cluster_options, progress=False, on_progress=on_progress)
        assert killed  # a worker was killed while the epochs ran, and its shard was set up again
        assert any("was lost, set up again on" in r.getMessage() for r in caplog.records)
    assert_same_model(tmp_path / "one", tmp_path / "two")


@pytest.mark.slow
def test_second_order_seeds_on_the_cluster_give_the_sequential_model(cluster: Any, ewt_dir: Path,
                                                                      tmp_path: Path) -> None:
    """Order 2 (surrogate CLL under BP) on a given pruner, 2 seeds as tasks: each task deserialises its own copy
    of the BP parser and starts from the pruner's weights; the model is the sequential one, bit for bit."""
    from engine.training.pipeline import train_model

    path = _subset(ewt_dir, tmp_path, 40)
    base = dict(epochs=2, dim=2048, second_dim=1024, batch_size=4, components=("parser",), name="m")
    train_model(path, path, tmp_path / "pruner", TrainOptions(**base), progress=False)
    options = dict(base, order=2, seeds=2)
    train_model(path, path, tmp_path / "one", TrainOptions(**options), pruner_path=tmp_path / "pruner",
                progress=False)
    train_model(path, path, tmp_path / "two", TrainOptions(**options, cluster=cluster.scheduler_address),
                pruner_path=tmp_path / "pruner", progress=False)
    assert_same_model(tmp_path / "one", tmp_path / "two")


@pytest.mark.slow
@pytest.mark.parametrize("data_parallel", [False, True])
def test_a_killed_scheduler_fails_the_training_with_one_connection_error(ewt_dir: Path, tmp_path: Path,
                                                                         data_parallel: bool) -> None:
    """``train --cluster tcp://...`` whose ``dask scheduler`` is SIGKILLed mid-training (after the first progress
    of the seeds' tasks; of the data-parallel epoch's batches with one seed): ``ConnectionError`` naming the lost
    scheduler, soon (the client cancels its futures at once; no wait on a scheduler that is gone), and no model
    written. The first-order CLL of one seed talks to its workers' actors directly: those stop with their
    scheduler, which fails it alike."""
    from cluster_helpers import SchedulerProcesses

    from engine.training.pipeline import train_model

    path = _subset(ewt_dir, tmp_path, 150)
    killed: list[float] = []
    start: list[float] = []
    with SchedulerProcesses(tmp_path / "dask") as dask:
        def on_progress(fraction: float, stage: str) -> None:
            if stage == "training" and not start:
                start.append(fraction)  # the stage's start: batches are done beyond it
            elif stage == "training" and fraction > start[0] and not killed:
                dask.scheduler.send_signal(signal.SIGKILL)
                killed.append(time.monotonic())

        options = TrainOptions(epochs=20, dim=1 << 18, components=("parser",), batch_size=8,
                               seeds=1 if data_parallel else 2, cluster=dask.address)
        with pytest.raises(ConnectionError, match=f"^lost the Dask scheduler at {dask.address} ") as error:
            train_model(path, None, tmp_path / "model", options, progress=False, on_progress=on_progress)
        # well under a second when the tasks are waited on; 30 s (the connect timeout) at most if a call to the
        # scheduler starts in the instant before the client notices the loss: a deadline for a hang, not a pace
        assert killed and time.monotonic() - killed[0] < 60, error.value
    assert not (tmp_path / "model").exists()
