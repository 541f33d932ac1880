"""Helpers for the tests of training on a Dask cluster: the 2-process ``LocalCluster`` they use, and the
comparison of two trained model directories array by array."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

TIMEOUT = "180s"  # a loaded 2-core machine: starting worker processes can take long
TIMING = ("seconds", "train_seconds", "created")  # manifest fields that differ between two equal runs


def local_cluster() -> Any:
    """A ``LocalCluster`` of 2 single-threaded worker processes (a context manager); skips without Dask."""
    distributed = pytest.importorskip("distributed", reason="dask.distributed is not installed (the cluster extra)")
    return distributed.LocalCluster(n_workers=2, processes=True, threads_per_worker=1, dashboard_address=None)


def _without_timing(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_timing(v) for k, v in value.items() if k not in TIMING}
    if isinstance(value, list):
        return [_without_timing(v) for v in value]
    return value


def assert_same_arrays(one: Path, two: Path) -> None:
    """Every array file of the two model directories is equal bit for bit (same dtype, shape and values)."""
    arrays = sorted(p.name for p in one.glob("*.npy"))
    assert arrays and arrays == sorted(p.name for p in two.glob("*.npy"))
    for name in arrays:
        a, b = np.load(one / name, allow_pickle=False), np.load(two / name, allow_pickle=False)
        assert a.dtype == b.dtype and a.shape == b.shape, name
        assert np.array_equal(a, b), f"{name}: max |difference| {np.abs(a.astype(float) - b.astype(float)).max()}"


def assert_same_model(one: Path, two: Path, *, blocks: tuple[str, ...] | None = None) -> None:
    """``assert_same_arrays``, and the manifests equal but for timings (only their ``blocks`` if given)."""
    assert_same_arrays(one, two)
    manifests = [json.loads((d / "manifest.json").read_text(encoding="utf-8")) for d in (one, two)]
    if blocks is not None:
        manifests = [{k: m.get(k) for k in blocks} for m in manifests]
    assert _without_timing(manifests[0]) == _without_timing(manifests[1])


class SchedulerProcesses:
    """``dask scheduler`` and ``workers`` ``dask worker`` processes (single-threaded) on this machine, as the
    compose file runs them: the scheduler can be SIGKILLed alone. A context manager; skips without Dask."""

    def __init__(self, log_dir: Path, workers: int = 2) -> None:
        import os
        import socket
        import subprocess
        import sys

        pytest.importorskip("distributed", reason="dask.distributed is not installed (the cluster extra)")
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        self.address = f"tcp://127.0.0.1:{port}"
        # the scheduler unpickles the task graphs (the engine's task functions) and the workers run them
        env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
        # a Dask nanny started earlier in this test process wrote Dask's MALLOC_TRIM_THRESHOLD_ into os.environ; a
        # machine that starts `dask worker` has no such variable, and its workers would inherit it
        env.pop("MALLOC_TRIM_THRESHOLD_", None)
        dask = [sys.executable, "-m", "dask"]
        log_dir.mkdir(parents=True, exist_ok=True)
        self.logs = [open(log_dir / f"dask-{k}.log", "wb") for k in range(workers + 1)]  # noqa: SIM115
        self.scheduler = subprocess.Popen([*dask, "scheduler", "--host", "127.0.0.1", "--port", str(port),
                                           "--dashboard-address", ":0", "--no-show"], env=env,
                                          stdout=self.logs[0], stderr=subprocess.STDOUT)
        self.workers = [subprocess.Popen([*dask, "worker", self.address, "--nworkers", "1", "--nthreads", "1",
                                          "--dashboard-address", ":0", "--preload-nanny", "engine.training.dask_nanny"],
                                         env=env, stdout=log, stderr=subprocess.STDOUT)
                        for log in self.logs[1:]]

    def __enter__(self) -> SchedulerProcesses:
        from distributed import Client

        with Client(self.address, timeout=TIMEOUT) as client:
            client.wait_for_workers(len(self.workers), timeout=TIMEOUT)
        return self

    def __exit__(self, *exc: object) -> None:
        for proc in [self.scheduler, *self.workers]:
            if proc.poll() is None:
                proc.kill()
            proc.wait(30)
        for log in self.logs:
            log.close()
