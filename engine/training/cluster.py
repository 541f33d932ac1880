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
pickle-free). A worker lost mid-training takes its shard's features with it: ``ShardedCLL`` builds the shard
again elsewhere from the driver's copy of its sentences and computes the batch's part again (the same weights);
the independent trainings run as tasks (``engine.training.tasks``) are rerun by Dask's rescheduling.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import time
from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np
from numba import njit  # type: ignore[import-untyped]

from engine.data.batching import length_batches
from engine.features.extract import FeatureExtractor
from engine.kernels.exact import TreeConstraint
from engine.scoring.kept_features import arc_features

log = logging.getLogger(__name__)

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
    and gold heads. ``marks`` (bool, all False) and ``positions`` (int32) are scratch arrays of the hashed
    dimension, left as they were found for the next piece (a sort of the features, ``np.unique``, costs several
    times more)."""

    def __init__(self, features: np.ndarray, gold: np.ndarray, marks: np.ndarray, positions: np.ndarray) -> None:
        features = np.ascontiguousarray(features, dtype=np.int32)
        self.local = np.empty_like(features)
        self.index = _renumber(features.reshape(-1), marks, positions, self.local.reshape(-1))
        self.gold = gold


@njit(cache=True, nogil=True)
def _renumber(features: np.ndarray, marks: np.ndarray, positions: np.ndarray,
              local: np.ndarray) -> np.ndarray:  # pragma: no cover - compiled
    """The distinct features (and 0) ascending, with ``local[i]`` the position of ``features[i]`` among them: the
    marks set, read in order, and cleared again (``marks`` all False on entry and on return). One compiled pass
    each instead of numpy's scatter, scan, scatter and gather, which took as long as extracting the features
    (docs/results/cluster.md). A feature outside ``marks`` raises ``IndexError`` (numba does not check bounds:
    this does, before the write)."""
    size = len(marks)
    marks[0] = True
    count = 1
    for i in range(len(features)):
        f = features[i]
        if f < 0 or f >= size:
            marks[:] = False
            raise IndexError("a feature index lies outside the hashed dimension")
        if not marks[f]:
            marks[f] = True
            count += 1
    index = np.empty(count, dtype=np.int32)
    j = 0
    for f in range(size):
        if marks[f]:
            index[j] = f
            positions[f] = j
            marks[f] = False
            j += 1
    for i in range(len(features)):
        local[i] = positions[features[i]]
    return index


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
            self.pieces.append(Piece(arc_features(extractor, chosen), np.stack([s.heads for s in chosen]), marks,
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


def _differ(a: np.ndarray | None, b: np.ndarray | None) -> bool:
    """Whether two parts' feature indices differ (``None``: a batch without a part for that shard)."""
    return (a is None) != (b is None) if a is None or b is None else not np.array_equal(a, b)


class ShardedCLL:
    """The training set's mini-batches, sharded over the workers of ``client``; ``objective(w, b)`` is batch
    ``b``'s summed loss and dense gradient, as ``cll_objective`` computes them in one process. The calls go
    straight to the actors, not through the scheduler (a step's latency is what limits the speed-up).

    A worker lost mid-training (its process killed, its machine gone) takes its shard's features with it: the
    shard is built again, from the driver's copy of its sentences, on another worker (the nanny's replacement
    when one appears within ``REPLACEMENT_WAIT``, else a worker that holds another shard), and the batch's part
    is computed again. The rebuilt shard has the same sentences in the same parts, so the same features and the
    same sums in the same order: the weights are those of a run without the loss (tested)."""

    MAX_REBUILDS = 3  # per lost part of one batch: a shard that keeps failing is an error, not bad luck
    REPLACEMENT_WAIT = 60.0  # seconds for the nanny's replacement worker (a loaded machine starts one slowly)
    SCHEDULER_GRACE = 2.0  # seconds for the client to notice that a failed call was the scheduler's loss

    def __init__(self, client: Any, extractor: FeatureExtractor, constraint: TreeConstraint,
                 sentences: Sequence[Any], batch_size: int) -> None:
        self.client, self.extractor, self.constraint, self.sentences = client, extractor, constraint, sentences
        self.dim = extractor.dim
        groups = length_batches([len(s.forms) for s in sentences], batch_size)
        self.sizes = [len(g) for g in groups]
        workers = sorted(client.scheduler_info()["workers"])
        if not workers:
            raise RuntimeError("the Dask cluster has no workers")
        splits = [np.array_split(g, len(workers)) for g in groups]  # batch b's part for worker k
        self.shards: list[tuple[list[int], list[list[int]]]] = []  # per shard: its sentences, its part of each batch
        for k in range(len(workers)):
            mine = [int(i) for parts in splits for i in parts[k]]
            position = {i: p for p, i in enumerate(mine)}
            self.shards.append((mine, [[position[int(i)] for i in parts[k]] for parts in splits]))
        n = len(workers)
        self.workers: list[str] = list(workers)
        self.futures: list[Any] = [None] * n  # the actors live as long as their futures
        self.actors: list[Any] = [None] * n
        self.index: list[list[np.ndarray | None]] = [[] for _ in range(n)]
        self.rebuilds = 0
        self._pending: tuple[int, list[tuple[int, Any]]] | None = None  # (batch, its parts' calls) dispatched
        self._order: list[int] = []  # this epoch's batches (``follow``), and how many were stepped through
        self._done = 0
        for k, worker in enumerate(workers):  # all shards set up at once, then each waited for
            with contextlib.suppress(Exception):  # its worker went away meanwhile: set up elsewhere below
                self.futures[k] = self._start(k, worker)
        for k in range(n):
            with contextlib.suppress(Exception):  # its worker went away while the shards were set up
                if self.futures[k] is not None:
                    self.actors[k] = self.futures[k].result()
                    self.index[k] = self.actors[k].indices().result()
                    continue
            self._rebuild(k)  # not started or not set up: set this one up elsewhere

    def _start(self, k: int, worker: str, again: bool = False) -> Any:
        """Shard ``k``'s sentences sent to ``worker`` (once) and its actor started there (a future); ``again``: new
        keys, not those of the lost shard's data and actor."""
        mine, parts = self.shards[k]
        [shard] = self.client.scatter([[self.sentences[i] for i in mine]], workers=[worker], hash=not again)
        return self.client.submit(Shard, self.extractor, shard, parts, self.constraint, workers=[worker], actor=True,
                                  pure=not again)

    def _rebuild(self, k: int) -> None:
        """Shard ``k`` again on a live worker (the class docstring): up to ``MAX_REBUILDS`` workers are tried, as
        one may go away between being chosen and being used. Raises if the client has lost its scheduler."""
        lost = {self.workers[k]}
        for attempt in range(self.MAX_REBUILDS):
            require_connected(self.client)
            try:
                self.client.wait_for_workers(len(self.workers), timeout=self.REPLACEMENT_WAIT)
            except TimeoutError:
                pass  # no replacement (yet): share a worker that holds another shard
            live = sorted(w for w in self.client.scheduler_info()["workers"] if w not in lost)
            if not live:
                raise RuntimeError("the Dask cluster has no workers left")
            taken = {w for j, w in enumerate(self.workers) if j != k}
            worker = next((w for w in live if w not in taken), live[0])
            try:
                future = self._start(k, worker, again=True)
                actor = future.result()
                index = actor.indices().result()
            except Exception as e:
                lost.add(worker)
                if attempt == self.MAX_REBUILDS - 1:
                    raise RuntimeError(f"could not set up shard {k} on a worker: {type(e).__name__}: {e}") from e
                continue
            if self.index[k] and (len(index) != len(self.index[k]) or any(
                    _differ(a, b) for a, b in zip(index, self.index[k], strict=True))):
                raise RuntimeError(f"shard {k} rebuilt on {worker} has other features than before")
            log.warning("shard %d of the data-parallel training: its worker %s was lost, set up again on %s", k,
                        self.workers[k], worker)
            if self.futures[k] is not None:
                self.futures[k].release()
            self.workers[k], self.actors[k], self.futures[k], self.index[k] = worker, actor, future, index
            self.rebuilds += 1
            return

    def _part(self, k: int, b: int, weights: np.ndarray, call: Any) -> tuple[float, np.ndarray]:
        """Shard ``k``'s part of batch ``b`` from its pending ``call``, computed again on a rebuilt shard if its
        worker was lost (an ``OSError``: a closed connection, a worker that cannot be reached)."""
        for attempt in range(self.MAX_REBUILDS + 1):
            try:
                return call.result()  # type: ignore[no-any-return]
            except OSError as e:
                self._unless_scheduler_lost()
                if attempt == self.MAX_REBUILDS:
                    raise RuntimeError(f"shard {k} failed {attempt + 1} times on batch {b}: {e}") from e
                self._rebuild(k)
                call = self.actors[k].objective(b, weights[self.index[k][b]])
        raise AssertionError("unreachable")

    def _unless_scheduler_lost(self) -> None:
        """Raise ``ConnectionError`` if a failed call was the scheduler's loss, not a worker's: its workers stop with
        it, so their calls fail a moment before the client notices its own connection closed (within ~0.1 s
        measured); asking the scheduler for a replacement would then wait out the client's reconnection (30 s).
        Waits up to ``SCHEDULER_GRACE`` for the client's status to change, and returns if it does not."""
        deadline = time.monotonic() + self.SCHEDULER_GRACE
        while self.client.status == "running" and time.monotonic() < deadline:
            time.sleep(0.02)
        require_connected(self.client)

    def objective(self, weights: np.ndarray, b: int, out: np.ndarray | None = None) -> tuple[float, np.ndarray]:
        """Batch ``b``'s negative log-likelihood and gradient: each worker's part, summed worker by worker (into
        ``out``, a buffer of zeros, when given, as ``cll_objective``)."""
        self.dispatch(b, weights)
        return self.collect(b, weights, out)

    def follow(self, order: Sequence[int]) -> None:
        """The batches of the epoch about to start, in their order (``stepped`` sends each one's successor)."""
        self._order, self._done = list(order), 0

    def stepped(self, b: int, weights: np.ndarray) -> None:
        """After the step of batch ``b`` (the next of ``follow``'s order): send the batch after it from ``weights``,
        so that the trainer's work before its next step (the loop's averaging) overlaps the workers; the weights
        are those of sending each batch when it is needed (tested)."""
        self._done += 1
        if self._done < len(self._order) and self._order[self._done - 1] == b:
            self.dispatch(self._order[self._done], weights)

    def dispatch(self, b: int, weights: np.ndarray) -> None:
        """Start batch ``b``'s parts on the workers from ``weights`` without waiting; ``collect(b, ...)`` gathers
        them. A trainer sends the next batch this way as soon as it has taken a step, so that what it does before
        the next step (the loop's averaging) overlaps the workers. A batch dispatched and never collected is
        dropped at the next dispatch."""
        self._pending = (b, [(k, actor.objective(b, weights[index[b]]))
                             for k, (actor, index) in enumerate(zip(self.actors, self.index, strict=True))
                             if index[b] is not None])

    def collect(self, b: int, weights: np.ndarray, out: np.ndarray | None = None) -> tuple[float, np.ndarray]:
        """Batch ``b``'s negative log-likelihood and gradient from its dispatched parts (dispatched now if ``b`` was
        not the batch last dispatched), summed worker by worker into ``out`` (a buffer of zeros) when given.
        ``weights`` must hold the values the parts were sent (a lost worker's part is computed again from them)."""
        if self._pending is None or self._pending[0] != b:
            self.dispatch(b, weights)
        assert self._pending is not None
        calls, self._pending = self._pending[1], None
        nll, grad = 0.0, np.zeros(self.dim) if out is None else out
        for k, call in calls:
            part_nll, part_grad = self._part(k, b, weights, call)
            nll += part_nll
            grad[self.index[k][b]] += part_grad  # a part's indices are distinct
        return nll, grad

    def close(self) -> None:
        """Release the actors and the features they hold."""
        self._pending = None
        self.actors = []
        for f in self.futures:
            f.release()
        self.futures = []
