"""Parse processes: the engine's part of each batch runs in forked child processes, so that one server uses
every core.

Most of a parse is Python code driving numpy and compiled kernels, and it holds the GIL: a second parse thread
in one process adds CPU time but no throughput (docs/results/service-load.md). So once the models are loaded and
the kernels warmed up, the service forks ``PARSER_PARSE_PROCESSES`` children. Fork, not spawn: a child starts
with the server's loaded models and compiled kernels, and shares their memory pages with the server
copy-on-write (the objects alive at the fork are frozen in the children, ``gc.freeze``, so that their collector
does not write into the inherited objects and copy their pages).

A batch of dependency requests whose model was loaded before the fork goes to an idle child over a pipe: the
requests (``ParseRequest``, settings, limits; pickled) and the model's key. The child checks, tags and parses
them and fills LEMMA and FEATS (``parse_batch.parse_works``, the very code a parse thread runs) and sends the
parses back; the server then counts the sentences (metrics) and builds each response (a route's builder may be
a closure, and k-best and sampling happen there). Everything else runs on the server's threads as before:
constituency models, and models loaded after the fork (a training job's model, a model directory replaced),
which a child does not have.

A child that dies (killed, out of memory) fails no request: its batch is parsed again on the server's thread,
and a new child is forked in its place for later batches (up to ``RESPAWN_LIMIT`` times in a row without a
finished batch between them; then the server parses on its threads alone). A child that has not answered
within the request time budget (every request of its batch has had its 504 by then) is killed and replaced the
same way. A child exits when its pipe closes (the server stops or dies) and ignores Ctrl-C, which its server
handles.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import multiprocessing
import pickle
import queue
import signal
import threading
from collections.abc import Callable, Sequence
from multiprocessing.connection import Connection
from typing import Any

from engine.cli_parse import bulk_collector
from service.parse_batch import Parsed, ParseWork, parse_works, respond_all, run_batch
from service.registry import ModelEntry

log = logging.getLogger("service.parse_processes")

RESPAWN_LIMIT = 3  # children that may die in a row (no batch finished in between) before the pool stops forking
ModelKey = tuple[str, int, int]


def model_key(entry: ModelEntry) -> ModelKey:
    """Which loaded model: its directory, version and the very pipeline object (a model loaded again after the
    fork is a new object, which the children do not have)."""
    return (str(entry.path), entry.version, id(entry.pipeline))


def _unused_builder(sentences: Any, parsed: Any) -> Any:  # a child never builds responses
    raise AssertionError("responses are built by the server")


def _portable(outcome: Parsed | BaseException) -> Parsed | BaseException:
    """The outcome as it can cross the pipe: an exception that does not survive pickling becomes a RuntimeError
    naming it (an unexpected failure stays one: the route answers it as it would on a thread)."""
    if not isinstance(outcome, BaseException):
        return outcome
    try:
        pickle.loads(pickle.dumps(outcome))
    except Exception:
        return RuntimeError(f"{type(outcome).__name__}: {outcome}")
    return outcome


def _serve(conn: Connection, entries: dict[ModelKey, ModelEntry], servers_ends: list[Connection]) -> None:
    """A child's loop: receive (model key, requests), send back one outcome per request, until the pipe closes.
    ``servers_ends``: the server's ends of every child's pipe, inherited by the fork; closed here, or the server's
    death would not close this child's pipe."""
    for end in servers_ends:
        end.close()
    signal.set_wakeup_fd(-1)  # the server's event loop's: a signal here must not wake (and stop) the server
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the whole process group: the server decides
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # not the server's handler, which would only flag a copy
    bulk_collector()  # the collector's thresholds of bulk parsing (the objects of the fork are frozen already)
    while True:
        try:
            key, requests = conn.recv()
        except (EOFError, OSError):
            return
        entry = entries[key]
        works = [ParseWork(req, entry, _unused_builder, settings, max_words, morphology=morphology)
                 for req, settings, max_words, morphology in requests]
        try:
            outcomes = [_portable(o) for o in parse_works(works, observe=False)]
        except Exception as e:  # parse_works answers per request; this is a bug: every request gets it
            outcomes = [_portable(e)] * len(works)
        conn.send(outcomes)


class _Child:
    def __init__(self, context: Any, entries: dict[ModelKey, Any], number: int, siblings: list[_Child]) -> None:
        self.conn, child_end = context.Pipe(duplex=True)
        servers_ends = [self.conn, *(sibling.conn for sibling in siblings)]
        self.process = context.Process(target=_serve, args=(child_end, entries, servers_ends),
                                       name=f"parse-{number}", daemon=True)
        self.process.start()
        child_end.close()

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.conn.close()


class ParseProcesses:
    """``count`` forked parse processes holding the models of ``entries()`` at ``start()``; ``run`` is a batcher
    runner (called on a batcher thread) that sends a batch to an idle child when one can parse it."""

    def __init__(self, count: int, entries: Callable[[], Sequence[Any]], timeout_s: float,
                 fallback: Callable[[list[Any]], list[Any]] = run_batch) -> None:
        self.count, self._entries, self.timeout_s, self._fallback = count, entries, timeout_s, fallback
        self._context = multiprocessing.get_context("fork")
        self._snapshot: dict[ModelKey, Any] = {}
        self._idle: queue.SimpleQueue[_Child] = queue.SimpleQueue()
        self._children: list[_Child] = []
        self._lock = threading.Lock()
        self._fork_lock = threading.Lock()  # one fork at a time (batcher threads may replace children together)
        self._forked = self._deaths_in_a_row = 0
        self._stopped = False

    @property
    def alive(self) -> int:
        """Children running now."""
        with self._lock:
            return sum(child.process.is_alive() for child in self._children)

    def start(self) -> None:
        """Fork the children (on the event loop's thread, once the models are loaded and the kernels compiled)."""
        if self.count < 1:
            return
        self._snapshot = {model_key(e): e for e in self._entries() if isinstance(e, ModelEntry)}
        self._fork(self.count)
        log.info("%d parse processes forked (%d models each)", self.count, len(self._snapshot))

    def _fork(self, count: int = 1) -> None:
        """Fork ``count`` children. The objects alive now are frozen while forking (``gc.freeze``): a child's
        collector leaves them alone, so their pages stay shared with the server; the server unfreezes its own at
        once, so that what it later drops is still collected."""
        with self._fork_lock:
            if not self._stopped:
                self._fork_locked(count)

    def _fork_locked(self, count: int) -> None:
        gc.collect()
        gc.freeze()
        try:
            for _ in range(count):
                with self._lock:
                    siblings = list(self._children)
                child = _Child(self._context, self._snapshot, self._forked, siblings)
                self._forked += 1
                with self._lock:
                    self._children.append(child)
                self._idle.put(child)
        finally:
            gc.unfreeze()

    def handles(self, works: list[Any]) -> bool:
        """Whether a child can parse this batch: dependency requests of a model loaded before the fork."""
        return bool(self._children) and bool(works) and all(
            isinstance(w, ParseWork) and model_key(w.entry) in self._snapshot for w in works)

    def run(self, works: list[Any]) -> list[Any]:
        """The batch's outcomes (``parse_batch.run_batch``'s), parsed in a child when one can."""
        if not self.handles(works):
            return self._fallback(works)
        child = self._take()
        if child is None:
            return self._fallback(works)
        try:
            requests = [(w.req, w.settings, w.max_words, w.morphology) for w in works]
            child.conn.send((model_key(works[0].entry), requests))
            if not child.conn.poll(self.timeout_s):  # every request of the batch has had its 504 by now
                child.process.kill()
                self._lost(child, TimeoutError(f"no answer in {self.timeout_s:g} s"))
                return [TimeoutError("the parse process did not answer in time")] * len(works)
            parses: list[Parsed | BaseException] = child.conn.recv()
        except (EOFError, OSError, pickle.PicklingError) as e:
            self._lost(child, e)
            return self._fallback(works)
        self._idle.put(child)
        self._deaths_in_a_row = 0
        for work, parse in zip(works, parses, strict=True):
            if isinstance(parse, Parsed):
                for s in parse.sentences:
                    work.observe(s.n)
        return respond_all(works, parses)

    def _take(self) -> _Child | None:
        """An idle child, once one is free; None when none is left."""
        while self._children:
            with contextlib.suppress(queue.Empty):
                return self._idle.get(timeout=1.0)
        return None

    def _lost(self, child: _Child, error: BaseException) -> None:
        """A child died with a batch, its pipe broke or it hung: forget it and fork another, unless they keep dying
        or the service is stopping."""
        child.close()
        child.process.join(timeout=5)
        with self._lock:
            if child not in self._children:  # stop() has taken it already
                return
            self._children.remove(child)
        self._deaths_in_a_row += 1
        log.error("parse process %s stopped (%s: %s; exit code %s)", child.process.name, type(error).__name__, error,
                  child.process.exitcode)
        if self._deaths_in_a_row <= RESPAWN_LIMIT:
            self._fork()
        else:
            log.error("parse processes keep stopping: parsing in the server's threads from now on")

    def stop(self) -> None:
        """Close the pipes (each child exits after its batch) and wait for the children a little."""
        with self._fork_lock, self._lock:
            self._stopped = True
            children, self._children = self._children, []
        for child in children:
            child.close()
        for child in children:
            child.process.join(timeout=5)
            if child.process.is_alive():
                child.process.kill()

