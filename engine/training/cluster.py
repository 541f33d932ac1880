"""Data-parallel first-order CLL training on a Dask cluster (``dask.distributed``), issue 27.

Each worker holds a shard of the training sentences: the driver scatters a shard's sentences to its worker
once, a Dask actor there (``Shard``) extracts their features and keeps them in the worker's memory (never
sent back). Per AdaGrad step the driver sends each worker only the weights its part of the batch reads, the
worker returns its part's negative log-likelihood and gradient, and the driver sums them and takes the step
of single-process training (``engine.training.cll.train_cll``, which runs this through ``ShardedCLL``).

What is equal to single-process training: the mini-batches are the same (``length_batches`` over the same
usable trees, visited in the same shuffled order), each global batch is split into one contiguous piece per
worker, and a batch's gradient is the sum of its pieces' gradients. Per sentence the scores, marginals and
gradient terms are computed exactly as in one process (a piece's features are renumbered into the piece's
own feature index space, which changes no value); only the association of the sums over a batch's sentences
differs (piece by piece, then across pieces), so the weights agree up to the rounding of float64 sums
(measured in ``docs/results/cluster.md``; ``tests/engine/training/test_cluster.py`` bounds it).

Sizes: a worker returns one float64 per feature its piece touches, not a dense gradient over the hashed
dimension (4M weights = 32 MB per step would swamp the gain); the driver keeps each piece's feature indices.

``dask`` and ``distributed`` are an optional extra (``pip install .[cluster]``): they are imported only inside
the functions that need them, so the engine installs and runs without them. Dask moves the sentences and the
arrays between its own processes with its serialisation; nothing is persisted that way (models stay
pickle-free). A worker lost mid-training is not recovered from here (its shard's scattered sentences go with
it); the independent trainings run as tasks (``engine.training.tasks``) are, by Dask's rescheduling.
"""

from __future__ import annotations

import os
import re
from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np

from engine.data.batching import length_batches
from engine.features.extract import FeatureExtractor
from engine.kernels.exact import TreeConstraint

CLUSTER_SPEC = re.compile(r"local:(?P<n>[1-9][0-9]*)|tcp://[^\s:/]+:[0-9]+")
TIMEOUT = "120s"  # starting a LocalCluster's workers and waiting for them
CONNECT_TIMEOUT = "30s"  # reaching an existing scheduler (it answers in milliseconds when it is up)
# Dask starts its workers with MALLOC_TRIM_THRESHOLD_=65536 (to hand freed memory back to the OS). Setting any
# malloc threshold turns off glibc's dynamic mmap threshold, so every numpy temporary above 128 KB is mapped and
# unmapped again and its pages faulted in afresh: training ran 1.3x slower per seed in a worker than in a plain
# process, and exactly as slow in a plain process given that variable (docs/results/cluster.md). Our local
# workers start without it, and so do `dask worker` processes given `--preload-nanny engine.training.dask_nanny`.
WORKER_ENVIRON = {"distributed.nanny.pre-spawn-environ.MALLOC_TRIM_THRESHOLD_": None}


def check_spec(spec: str) -> None:
    """Raise ``ValueError`` unless ``spec`` is ``local:N`` (N >= 1) or ``tcp://HOST:PORT``."""
    if not CLUSTER_SPEC.fullmatch(spec):
        raise ValueError(f"cluster must be local:N (N worker processes) or tcp://HOST:PORT, got {spec!r}")


@contextmanager
def connect(spec: str) -> Iterator[Any]:
    """A ``distributed.Client``: to a new ``LocalCluster`` of N single-threaded worker processes for
    ``local:N`` (closed on exit), or to the existing scheduler at ``tcp://HOST:PORT``."""
    check_spec(spec)
    try:
        import dask
        from distributed import Client, LocalCluster  # optional dependency (the `cluster` extra): imported here only
    except ImportError as e:
        raise ImportError(f"--cluster needs dask and distributed: pip install 'bp-parser[cluster]' ({e})") from e

    match = CLUSTER_SPEC.fullmatch(spec)
    assert match is not None
    if match.group("n"):
        n = int(match.group("n"))
        with dask.config.set(WORKER_ENVIRON), _without_malloc_trim(), \
                LocalCluster(n_workers=n, threads_per_worker=1, processes=True, dashboard_address=None) as cluster, \
                Client(cluster, timeout=TIMEOUT) as client:
            client.wait_for_workers(n, timeout=TIMEOUT)
            yield client
    else:
        try:
            client = Client(spec, timeout=CONNECT_TIMEOUT)
        except OSError as e:  # distributed raises OSError("Timed out trying to connect ...")
            raise ConnectionError(f"cannot reach the Dask scheduler at {spec} ({e})".replace("\n", " ")) from e
        with client, _scheduler_loss(client, spec):
            yield client


@contextmanager
def _without_malloc_trim() -> Iterator[None]:
    """The worker processes started inside inherit no ``MALLOC_TRIM_THRESHOLD_`` from this process either: a
    Dask nanny started here before (another cluster) writes Dask's default into ``os.environ``. Put back after."""
    saved = os.environ.pop("MALLOC_TRIM_THRESHOLD_", None)
    try:
        yield
    finally:
        if saved is not None:
            os.environ["MALLOC_TRIM_THRESHOLD_"] = saved


@contextmanager
def _scheduler_loss(client: Any, spec: str) -> Iterator[None]:
    """Turn what the work inside raises after the scheduler at ``spec`` was lost into one clear
    ``ConnectionError``. When its connection closes (a killed scheduler; a silent loss, a machine gone, is
    noticed by TCP keepalive within ``distributed.comm.timeouts.tcp``, 30 s, which Dask sets on its sockets:
    not tested here), the client cancels every future at once, which raises
    in whoever waits on them (``FuturesCancelledError``), and tries to reconnect for ``CONNECT_TIMEOUT`` before
    it closes itself; its workers stop. Whatever fails meanwhile says so in Dask's words (a cancelled future, a
    closed connection pool, a closed worker): here it says which scheduler was lost."""
    try:
        yield
    except Exception as e:
        if client.status == "running":
            raise
        cause = " ".join(f"{type(e).__name__}: {e}".split())
        cause = cause if len(cause) <= 200 else cause[:197] + "..."
        raise ConnectionError(f"lost the Dask scheduler at {spec} (the client is {client.status}; {cause})") from e


def require_connected(client: Any) -> None:
    """Raise ``ConnectionError`` unless ``client`` is connected to its scheduler: work submitted while it tries
    to reconnect would wait for the reconnection (``CONNECT_TIMEOUT``) and then fail in Dask's words."""
    if client.status != "running":
        raise ConnectionError(f"the Dask client is {client.status}, not connected to its scheduler")


def ordered_map(client: Any, fn: Any, items: Iterable[tuple[Any, tuple[Any, ...]]], window: int
                ) -> Iterator[tuple[Any, Any]]:
    """``(tag, fn(*arguments))`` for each ``(tag, arguments)`` of ``items``, computed on the cluster's workers
    with at most ``window`` tasks in flight, yielded in input order (``items`` is read lazily, so a large input
    is never all in memory). A task whose worker dies is rerun elsewhere by the scheduler (Dask reschedules the
    tasks of a lost worker); an exception in ``fn`` is raised here, and a lost scheduler stops the loop before
    the next submission (``require_connected``)."""
    pending: deque[tuple[Any, Any]] = deque()
    for tag, arguments in items:
        require_connected(client)
        pending.append((tag, client.submit(fn, *arguments, pure=False)))
        if len(pending) >= window:
            first, future = pending.popleft()
            yield first, future.result()
    while pending:
        first, future = pending.popleft()
        yield first, future.result()


class Piece:
    """One worker's part of one mini-batch: features renumbered into the part's own index space
    (``local[..] = j`` for global feature ``index[j]``; ``index`` ascending, ``index[0]`` the null feature 0)
    and gold heads. ``marks`` and ``positions`` are scratch arrays of the hashed dimension (a sort of the
    features, ``np.unique``, costs several times more)."""

    def __init__(self, features: np.ndarray, gold: np.ndarray, marks: np.ndarray, positions: np.ndarray) -> None:
        marks[:] = False
        marks[0] = True
        marks[features.reshape(-1)] = True
        self.index = np.flatnonzero(marks).astype(np.int32)
        positions[self.index] = np.arange(len(self.index), dtype=np.int32)
        self.local = positions[features]
        self.gold = gold


class Shard:
    """A Dask actor on one worker: its sentences' features per batch part, kept in the worker's memory.
    ``parts[b]``: the positions in ``sentences`` of this worker's part of batch ``b`` (empty for a batch smaller
    than the number of workers)."""

    def __init__(self, extractor: FeatureExtractor, sentences: Sequence[Any], parts: list[list[int]],
                 constraint: TreeConstraint) -> None:
        self.constraint = constraint
        marks, positions = np.zeros(extractor.dim, dtype=bool), np.zeros(extractor.dim, dtype=np.int32)
        self.pieces: list[Piece | None] = []
        for part in parts:
            chosen = [sentences[i] for i in part]
            self.pieces.append(Piece(extractor.extract(chosen), np.stack([s.heads for s in chosen]), marks,
                                     positions) if chosen else None)

    def indices(self) -> list[np.ndarray | None]:
        """The global feature indices of each part (those the driver sends weights for)."""
        return [p.index if p is not None else None for p in self.pieces]

    def objective(self, b: int, weights: np.ndarray) -> tuple[float, np.ndarray]:
        """The negative log-likelihood of part ``b`` and its gradient over the part's features (``weights``:
        the weights of ``indices()[b]``)."""
        from engine.training.cll import TrainingBatch, cll_objective  # cll imports this module

        piece = self.pieces[b]
        assert piece is not None
        return cll_objective(weights, TrainingBatch(piece.local, piece.gold), self.constraint)


class ShardedCLL:
    """The training set's mini-batches, sharded over the workers of ``client``; ``objective(w, b)`` is batch
    ``b``'s summed loss and dense gradient, as ``cll_objective`` computes them in one process. The calls go
    straight to the actors, not through the scheduler (a step's latency is what limits the speed-up)."""

    def __init__(self, client: Any, extractor: FeatureExtractor, constraint: TreeConstraint,
                 sentences: Sequence[Any], batch_size: int) -> None:
        self.dim = extractor.dim
        groups = length_batches([len(s.forms) for s in sentences], batch_size)
        self.sizes = [len(g) for g in groups]
        workers = sorted(client.scheduler_info()["workers"])
        if not workers:
            raise RuntimeError("the Dask cluster has no workers")
        splits = [np.array_split(g, len(workers)) for g in groups]  # batch b's part for worker k
        futures = []
        for k, worker in enumerate(workers):
            mine = [int(i) for parts in splits for i in parts[k]]
            position = {i: p for p, i in enumerate(mine)}
            parts = [[position[int(i)] for i in parts[k]] for parts in splits]
            [shard] = client.scatter([[sentences[i] for i in mine]], workers=[worker])  # sent once
            futures.append(client.submit(Shard, extractor, shard, parts, constraint, workers=[worker], actor=True))
        self.workers, self.actors = workers, [f.result() for f in futures]
        self.futures = futures  # the actors live as long as their futures
        self.index: list[list[np.ndarray | None]] = [a.indices().result() for a in self.actors]

    def objective(self, weights: np.ndarray, b: int, out: np.ndarray | None = None) -> tuple[float, np.ndarray]:
        """Batch ``b``'s negative log-likelihood and gradient: each worker's part, summed worker by worker (into
        ``out``, a buffer of zeros, when given, as ``cll_objective``)."""
        calls = [(index[b], actor.objective(b, weights[index[b]]))
                 for actor, index in zip(self.actors, self.index, strict=True) if index[b] is not None]
        nll, grad = 0.0, np.zeros(self.dim) if out is None else out
        for index, call in calls:
            part_nll, part_grad = call.result()
            nll += part_nll
            grad[index] += part_grad  # a part's indices are distinct
        return nll, grad

    def close(self) -> None:
        """Release the actors and the features they hold."""
        self.actors = []
        for f in self.futures:
            f.release()
        self.futures = []
