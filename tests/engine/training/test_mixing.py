"""First-order CLL by iterative parameter mixing on a Dask ``LocalCluster`` (``engine.training.mixing``): one worker
gives one process's weights bit for bit, two workers give the mix of their shards' epochs as the module defines it,
a worker lost between epochs or during one changes nothing, and the option needs a cluster and one run."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from engine.data.batching import length_batches
from engine.data.conllu_io import read_conllu
from engine.features.extract import FeatureExtractor
from engine.features.templates import default_first_order
from engine.kernels.exact import TreeConstraint
from engine.training.cll import TrainConfig, train_cll, usable_trees
from engine.training.mixing import deal, shard_batches, shard_epoch, train_mixed
from engine.training.options import TrainOptions, TrainOptionsError
from tests.engine.conftest import sample

TIMEOUT = "180s"  # a loaded 2-core machine: starting worker processes can take long
CONSTRAINT = TreeConstraint("nonprojective", "single")


@contextmanager
def _cluster(workers: int) -> Iterator[Any]:
    distributed = pytest.importorskip("distributed", reason="dask.distributed is not installed (the cluster extra)")
    with distributed.LocalCluster(n_workers=workers, processes=True, threads_per_worker=1,
                                  dashboard_address=None) as cl, distributed.Client(cl, timeout=TIMEOUT) as c:
        c.wait_for_workers(workers, timeout=TIMEOUT)
        yield c


@pytest.fixture(scope="module")
def two() -> Iterator[Any]:
    with _cluster(2) as client:
        yield client


def _data(ewt_dir: Path, n: int) -> list[Any]:
    train = read_conllu(ewt_dir / "en_ewt-ud-train.conllu")[:n]
    keep, _ = usable_trees(train, CONSTRAINT)
    return [train[i] for i in keep]


def test_whole_batches_are_dealt_round_robin() -> None:
    groups = [np.array([0, 3]), np.array([1]), np.array([2, 4, 5]), np.array([6])]
    dealt = deal(groups, 3)
    assert [[g.tolist() for g in part] for part in dealt] == [[[0, 3], [6]], [[1]], [[2, 4, 5]]]
    assert len(deal(groups[:2], 4)) == 2  # no empty shard
    assert [g.tolist() for g in deal(groups, 1)[0]] == [g.tolist() for g in groups]  # one shard: as formed


@pytest.mark.slow
def test_one_worker_mixes_to_single_process_training(ewt_dir: Path) -> None:
    """A cluster of one worker holds one shard of every sentence: its epochs are ``train_cll``'s steps in the same
    order, so the weights, losses and dev scores are one process's bit for bit (a different batch order, L2 share
    or averaging would change them)."""
    train = _data(ewt_dir, 60)
    fx = FeatureExtractor(tuple(default_first_order()), 1 << 18)
    config = TrainConfig(epochs=2, batch_size=8)
    one = train_cll(fx, CONSTRAINT, train, config, progress=False)
    with _cluster(1) as client:
        mixed = train_mixed(fx, CONSTRAINT, train, config, client, progress=False)
    assert np.array_equal(mixed.weights, one.weights)
    assert [h["nll"] for h in mixed.history] == [h["nll"] for h in one.history]
    assert mixed.best_epoch == one.best_epoch and mixed.config["parameter_mixing"] == {"shards": 1}


def _by_hand(fx: FeatureExtractor, train: list[Any], config: TrainConfig, shards: int) -> tuple[np.ndarray, list]:
    """Iterative parameter mixing in this process, from the module docstring's definition."""
    parts = deal(length_batches([len(s.forms) for s in train], config.batch_size), shards)
    batches = [shard_batches(fx, [train[i] for g in part for i in g], [len(g) for g in part]) for part in parts]
    share = [sum(len(g) for g in part) / len(train) for part in parts]
    rng = np.random.default_rng(config.seed)
    w, sums = np.zeros(fx.dim), [np.zeros(fx.dim) for _ in parts]
    means, losses = [], []
    for _ in range(config.epochs):
        orders = [rng.permutation(len(b)) for b in batches]
        runs = [shard_epoch(b, w, sums[k], orders[k], CONSTRAINT, config, len(train)) for k, b in enumerate(batches)]
        w = sum(mu * r[0] for mu, r in zip(share, runs, strict=True))
        means.append(sum(mu * r[1] for mu, r in zip(share, runs, strict=True)))
        sums = [r[2] for r in runs]
        losses.append(sum(r[3] for r in runs) / len(train))
    return means[-1], losses


@pytest.mark.slow
def test_two_workers_mix_their_shards_epochs(two: Any, ewt_dir: Path) -> None:
    """Two workers: each epoch's model is the size-weighted mean of the shards' averaged iterates, each shard
    starting from the last epoch's mixed final weights with its own AdaGrad sums: the same computed in this process,
    bit for bit (the same sums in the same order)."""
    train = _data(ewt_dir, 61)
    fx = FeatureExtractor(tuple(default_first_order()), 1 << 18)
    config = TrainConfig(epochs=2, batch_size=8)
    mixed = train_mixed(fx, CONSTRAINT, train, config, two, progress=False)
    expected, losses = _by_hand(fx, train, config, 2)
    assert mixed.best_epoch == 2  # no dev set: the lower training loss, the second epoch's
    assert np.array_equal(mixed.weights, expected)
    assert [h["nll"] for h in mixed.history] == losses
    one = train_cll(fx, CONSTRAINT, train, config, progress=False)
    assert not np.allclose(mixed.weights, one.weights, atol=1e-3)  # mixing is not one process's training


@pytest.mark.slow
def test_a_worker_lost_between_epochs_changes_nothing(ewt_dir: Path) -> None:
    """A worker SIGKILLed after the first epoch takes its shard's features with it: Dask extracts them again
    from the sentences in the shard's task, on the replacement or the other worker, and the second epoch runs
    from the same weights, sums and order: the weights of a run without the loss, bit for bit."""
    train = _data(ewt_dir, 60)
    fx = FeatureExtractor(tuple(default_first_order()), 1 << 18)
    config = TrainConfig(epochs=2, batch_size=8)
    killed: list[str] = []
    with _cluster(2) as client:
        calm = train_mixed(fx, CONSTRAINT, train, config, client, progress=False)

        def kill_after_first(done: int, total: int) -> None:
            if done == 1:
                victim = sorted(client.scheduler_info()["workers"])[0]
                os.kill(client.run(os.getpid, workers=[victim])[victim], signal.SIGKILL)
                killed.append(victim)

        lost = train_mixed(fx, CONSTRAINT, train, config, client, progress=False, on_batch=kill_after_first)
    assert killed
    assert np.array_equal(lost.weights, calm.weights)
    assert [h["nll"] for h in lost.history] == [h["nll"] for h in calm.history]


@pytest.mark.slow
def test_a_worker_lost_during_an_epoch_changes_nothing(ewt_dir: Path) -> None:
    """A worker SIGKILLed while it runs its shard's epoch: Dask reschedules the task (and extracts the lost shard's
    features again), and the run's weights are bit for bit those of a run without the loss. The kill waits for the
    scheduler to report an epoch task in progress (each takes about a second here), not for a fixed time."""
    import threading
    import time

    train = _data(ewt_dir, 400)
    fx = FeatureExtractor(tuple(default_first_order()), 1 << 20)
    config = TrainConfig(epochs=2, batch_size=8)
    killed: list[str] = []
    stop = threading.Event()
    with _cluster(2) as client:
        calm = train_mixed(fx, CONSTRAINT, train, config, client, progress=False)

        def kill_a_running_epoch() -> None:
            deadline = time.monotonic() + 300
            while not stop.is_set() and time.monotonic() < deadline:
                running = [w for w, keys in client.processing().items()
                           if any(str(k).startswith("shard_epoch") for k in keys)]
                if running:
                    os.kill(client.run(os.getpid, workers=[running[0]])[running[0]], signal.SIGKILL)
                    killed.append(running[0])
                    return
                stop.wait(0.005)  # the scheduler's state, polled until an epoch runs

        killer = threading.Thread(target=kill_a_running_epoch)
        killer.start()
        try:
            lost = train_mixed(fx, CONSTRAINT, train, config, client, progress=False)
        finally:
            stop.set()
            killer.join()
    assert killed
    assert np.array_equal(lost.weights, calm.weights)
    assert [h["nll"] for h in lost.history] == [h["nll"] for h in calm.history]


def test_parameter_mixing_needs_a_cluster() -> None:
    with pytest.raises(TrainOptionsError, match="needs --cluster"):
        TrainOptions(parameter_mixing=True)
    for other in ({"seeds": 2}, {"objective": "l2"}):  # seeds as tasks; not CLL
        with pytest.raises(TrainOptionsError, match="one first-order CLL run"):
            TrainOptions(parameter_mixing=True, cluster="local:2", **other)
    assert TrainOptions(parameter_mixing=True, cluster="local:2").parameter_mixing
    assert TrainOptions(parameter_mixing=True, cluster="local:2", order=2, objective="l2").parameter_mixing  # pruner
    fx = FeatureExtractor(tuple(default_first_order()), 1 << 10)
    with pytest.raises(ValueError, match="needs a cluster"):
        train_mixed(fx, CONSTRAINT, [], TrainConfig(epochs=1), None, progress=False)


@pytest.mark.slow
def test_train_records_parameter_mixing_in_the_manifest(tmp_path: Path, ewt_dir: Path) -> None:
    """``train --cluster local:2 --parameter-mixing`` end to end: the model's manifest says how it was trained."""
    pytest.importorskip("distributed", reason="dask.distributed is not installed (the cluster extra)")
    from engine.model.store import read_manifest
    from engine.training.pipeline import train_model

    path = sample(ewt_dir / "en_ewt-ud-train.conllu", tmp_path / "train.conllu", 40)
    options = TrainOptions(epochs=1, dim=1 << 16, components=("parser",), batch_size=8, cluster="local:2",
                           parameter_mixing=True)
    train_model(path, path, tmp_path / "mixed", options, progress=False)
    assert read_manifest(tmp_path / "mixed")["training"]["parameter_mixing"] == {"shards": 2}
