"""Micro-batching: concurrent requests that can share one engine call are parsed together.

A request becomes a ``Ticket`` (its payload, its number of words, a future for its outcome) queued under a
key; requests with the same key (same model, same inference settings) may share a batch. ``workers``
coroutines each take a batch and run it on a worker thread, one batch per thread at a time:

- the oldest queued ticket decides the key; its batch is taken as soon as the tickets of that key hold
  ``max_words`` words, or the oldest has waited ``wait_s`` seconds, or no request has arrived for ``gap_s``
  seconds, whichever comes first; with ``wait_only_when_busy`` it waits only while another batch is running (an
  idle server parses a lone request at once, a busy one lets requests gather into larger batches, which parse
  more words per CPU second). The gap ends the wait once a burst of requests is over: under steady load the
  clients answered by one batch send their next requests together, and waiting on after they have all come
  would only leave a parse process idle;
- a batch is the oldest ticket and then, in arrival order, every further ticket of the key that still fits
  in ``max_words`` and in an equal share of the key's queued words among the idle workers (so that idle
  threads split the queue instead of one taking it all; the first ticket always goes, however large);
- ``run(payloads)`` (on a thread) returns one outcome per payload, a result or the exception that request
  gets, and each outcome goes to its own ticket's future.

Under load the workers are busy, tickets pile up meanwhile and the next batch takes them all: load turns
into larger batches rather than a longer queue. With ``enabled=False`` every batch is one ticket.

A ticket whose client has gone (``abandon``, or its future cancelled) is dropped if its batch has not
started: it is removed from the queue and counted (``on_dropped``); one already running finishes with its
batch and its outcome is discarded. ``on_end`` callbacks run once a ticket's work is over either way
(admission control gives its words back there). Everything but ``run`` happens on the event loop thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Callable, Hashable
from typing import Any

from anyio import to_thread

Runner = Callable[[list[Any]], list[Any]]


log = logging.getLogger("service.batcher")

class ShuttingDown(Exception):
    """The outcome of a ticket still queued when the batcher stops."""


class Ticket:
    """One request in the batcher: ``future`` gets its outcome; ``started`` once its batch runs."""

    def __init__(self, key: Hashable, payload: Any, words: int, future: asyncio.Future[Any], enqueued: float,
                 on_end: Callable[[], None] | None) -> None:
        self.key, self.payload, self.words, self.future, self.enqueued = key, payload, words, future, enqueued
        self.started = False
        self.due = False  # left over when idle workers split a due batch: taken without waiting again
        self._on_end = on_end

    def end(self) -> None:
        """The ticket's work is over (finished or dropped): run its ``on_end`` once."""
        callback, self._on_end = self._on_end, None
        if callback is not None:
            callback()


class Batcher:
    def __init__(self, run: Runner, *, workers: int, wait_s: float, max_words: int, enabled: bool = True,
                 wait_only_when_busy: bool = False, gap_s: float | None = None,
                 on_batch: Callable[[int, int], None] | None = None,
                 on_dropped: Callable[[str], None] | None = None) -> None:
        self.run, self.workers, self.wait_s, self.max_words, self.enabled = run, workers, wait_s, max_words, enabled
        self.gap_s = wait_s if gap_s is None else gap_s
        self._last_arrival = 0.0
        self.wait_only_when_busy = wait_only_when_busy
        self.on_batch = on_batch or (lambda requests, words: None)
        self.on_dropped = on_dropped or (lambda reason: None)
        self._queue: deque[Ticket] = deque()
        self._queued_words: dict[Hashable, int] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._changed: asyncio.Condition | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self.running = 0  # batches on a thread now
        self._idle = 0  # workers looking for a batch

    @property
    def queued(self) -> int:
        return len(self._queue)

    @property
    def idle(self) -> int:
        """Workers waiting for a batch."""
        return self._idle

    async def submit(self, key: Hashable, payload: Any, words: int,
                     on_end: Callable[[], None] | None = None) -> Ticket:
        """Queue ``payload`` under ``key``; await ``ticket.future`` for its outcome."""
        changed = self._start()
        loop = asyncio.get_running_loop()
        ticket = Ticket(key, payload, words, loop.create_future(), loop.time(), on_end)
        self._last_arrival = ticket.enqueued
        self._queue.append(ticket)
        self._queued_words[key] = self._queued_words.get(key, 0) + words
        async with changed:
            changed.notify_all()
        return ticket

    def abandon(self, ticket: Ticket, reason: str) -> bool:
        """The request no longer wants its outcome. A queued ticket is dropped (``on_dropped(reason)``);
        returns whether its batch had already started (its work then finishes and is discarded)."""
        if ticket.started:
            ticket.future.cancel()
            return True
        if ticket in self._queue:
            self._unqueue(ticket)
            self.on_dropped(reason)
            ticket.future.cancel()
            ticket.end()
        return False

    async def stop(self) -> None:
        """Stop the workers; tickets still queued get ``ShuttingDown``."""
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._tasks = []
        while self._queue:
            ticket = self._queue[0]
            self._unqueue(ticket)
            if not ticket.future.done():
                ticket.future.set_exception(ShuttingDown("the service is shutting down"))
            ticket.end()
        self._loop = self._changed = None

    # -- the workers -----------------------------------------------------------------------------
    def _start(self) -> asyncio.Condition:
        """Start the workers on the running loop (again if the loop changed, e.g. a new test client)."""
        loop = asyncio.get_running_loop()
        if self._loop is not loop or self._changed is None:
            self._queue.clear()
            self._queued_words.clear()
            self._idle = self.running = 0
            self._loop, self._changed = loop, asyncio.Condition()
            self._tasks = [loop.create_task(self._work(), name=f"batcher-{i}") for i in range(self.workers)]
        return self._changed

    async def _work(self) -> None:
        while True:
            try:
                batch = await self._next_batch()
                if batch:
                    await self._execute(batch)
            except asyncio.CancelledError:
                raise
            except Exception:  # a worker that died would leave every later request waiting: log and go on
                log.exception("batcher worker failed; it carries on with the next batch")

    async def _next_batch(self) -> list[Ticket]:
        """Wait until the oldest ticket's batch is due (full, or waited long enough), then take it."""
        changed = self._changed
        assert changed is not None and self._loop is not None
        async with changed:
            self._idle += 1
            try:
                return await self._wait_for_batch(changed)
            finally:
                self._idle -= 1
                if self._queue:
                    changed.notify_all()  # another idle worker may take what is left

    async def _wait_for_batch(self, changed: asyncio.Condition) -> list[Ticket]:
        assert self._loop is not None
        while True:
            self._drop_cancelled()
            if not self._queue:
                await changed.wait()
                continue
            head = self._queue[0]
            due_in = min(head.enqueued + self.wait_s, self._last_arrival + self.gap_s) - self._loop.time()
            waits = self.enabled and not head.due and (self.running > 0 or not self.wait_only_when_busy)
            if waits and due_in > 0 and self._queued_words[head.key] < self.max_words:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(changed.wait(), due_in)
                continue
            return self._take(head.key)

    def _take(self, key: Hashable) -> list[Ticket]:
        batch: list[Ticket] = []
        words = 0
        share = -(-self._queued_words[key] // max(1, self._idle))  # rounded up
        budget = min(self.max_words, share)
        for ticket in list(self._queue):
            if ticket.key != key or (batch and (not self.enabled or words + ticket.words > budget)):
                continue
            batch.append(ticket)
            words += ticket.words
            self._unqueue(ticket)
        for ticket in batch:
            ticket.started = True
        for ticket in self._queue:
            if ticket.key == key:
                ticket.due = True
        return batch

    def _drop_cancelled(self) -> None:
        """A ticket whose future was cancelled (its request's task was) is dropped, not parsed."""
        for ticket in [t for t in self._queue if t.future.done()]:
            self._unqueue(ticket)
            self.on_dropped("cancelled")
            ticket.end()

    def _unqueue(self, ticket: Ticket) -> None:
        """Take ``ticket`` off the queue; a key's word count lives exactly as long as it has tickets queued (a
        request may count 0 words, e.g. an empty sentence that its check will refuse: the count reaching 0
        does not mean the key's last ticket has gone)."""
        self._queue.remove(ticket)
        left = self._queued_words.get(ticket.key, 0) - ticket.words
        if any(t.key == ticket.key for t in self._queue):
            self._queued_words[ticket.key] = left
        else:
            self._queued_words.pop(ticket.key, None)

    async def _execute(self, batch: list[Ticket]) -> None:
        """Run one batch on a thread and hand each ticket its outcome (a failure of the whole call goes to
        every ticket of the batch)."""
        self.on_batch(len(batch), sum(t.words for t in batch))
        self.running += 1
        try:
            outcomes: list[Any] = await to_thread.run_sync(self.run, [t.payload for t in batch])
            if len(outcomes) != len(batch):
                raise RuntimeError(f"the runner gave {len(outcomes)} outcomes for {len(batch)} requests")
        except asyncio.CancelledError:  # stopping: the thread finishes on its own, nobody gets its outcome
            for ticket in batch:
                if not ticket.future.done():
                    ticket.future.set_exception(ShuttingDown("the service is shutting down"))
            raise
        except Exception as e:
            outcomes = [e] * len(batch)
        finally:
            self.running -= 1
        for ticket, outcome in zip(batch, outcomes, strict=True):
            if not ticket.future.done():
                if isinstance(outcome, BaseException):
                    ticket.future.set_exception(outcome)
                else:
                    ticket.future.set_result(outcome)
            ticket.end()
