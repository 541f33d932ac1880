"""``service.batcher.Batcher`` with a stand-in runner (no model): batches by key and word budget, outcomes
fanned out to their own tickets, tickets abandoned or cancelled before their batch are dropped unparsed."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from service.batcher import Batcher, ShuttingDown, Ticket

DEADLINE = 30.0  # generous: these tests wait on events, the deadline only stops a hung test


class Recorder:
    """A runner that records its batches; ``gate`` (when set) holds a batch until it is released; a payload
    ``"bad"`` gets an exception, any other ``p`` gets ``p.upper()``."""

    def __init__(self, gate: bool = False) -> None:
        self.batches: list[list[str]] = []
        self.entered = threading.Event()
        self.release = threading.Event()
        if not gate:
            self.release.set()

    def __call__(self, payloads: list[str]) -> list[Any]:
        self.batches.append(list(payloads))
        self.entered.set()
        assert self.release.wait(DEADLINE)
        return [ValueError(p) if p == "bad" else p.upper() for p in payloads]


def run(scenario: Callable[[], Awaitable[Any]]) -> Any:
    return asyncio.run(asyncio.wait_for(scenario(), DEADLINE))


async def submit_all(batcher: Batcher, items: list[tuple[str, str, int]]) -> list[Ticket]:
    return [await batcher.submit(key, payload, words) for key, payload, words in items]


def test_a_full_batch_goes_at_once_and_each_ticket_gets_its_own_outcome() -> None:
    runner = Recorder()
    seen: list[tuple[int, int]] = []
    batcher = Batcher(runner, workers=1, wait_s=60.0, max_words=6, on_batch=lambda r, w: seen.append((r, w)))

    async def scenario() -> list[Any]:
        tickets = await submit_all(batcher, [("k", "a", 2), ("other", "x", 1), ("k", "bad", 2), ("k", "c", 2)])
        # key k reached 6 words: its batch goes without waiting 60 s; key "other" is left waiting
        done = await asyncio.gather(*(tickets[i].future for i in (0, 2, 3)), return_exceptions=True)
        assert not tickets[1].future.done() and batcher.queued == 1
        await batcher.stop()
        with pytest.raises(ShuttingDown):
            tickets[1].future.result()
        return done

    a, bad, c = run(scenario)
    assert (a, c) == ("A", "C") and isinstance(bad, ValueError) and str(bad) == "bad"
    assert runner.batches == [["a", "bad", "c"]] and seen == [(3, 6)]


def test_the_word_budget_splits_batches_and_a_large_ticket_goes_alone() -> None:
    runner = Recorder(gate=True)
    batcher = Batcher(runner, workers=1, wait_s=0.0, max_words=5)

    async def scenario() -> None:
        first = await batcher.submit("k", "first", 1)
        await asyncio.to_thread(runner.entered.wait, DEADLINE)  # the worker is busy with "first"
        tickets = await submit_all(batcher, [("k", "big", 9), ("k", "a", 3), ("k", "b", 2), ("k", "c", 1)])
        runner.release.set()
        await asyncio.gather(first.future, *(t.future for t in tickets))
        await batcher.stop()

    run(scenario)
    assert runner.batches == [["first"], ["big"], ["a", "b"], ["c"]]


def test_batching_off_parses_each_request_alone() -> None:
    runner = Recorder(gate=True)
    batcher = Batcher(runner, workers=1, wait_s=60.0, max_words=100, enabled=False)

    async def scenario() -> None:
        first = await batcher.submit("k", "first", 1)
        await asyncio.to_thread(runner.entered.wait, DEADLINE)
        tickets = await submit_all(batcher, [("k", "a", 1), ("k", "b", 1)])
        runner.release.set()
        await asyncio.gather(first.future, *(t.future for t in tickets))
        await batcher.stop()

    run(scenario)
    assert runner.batches == [["first"], ["a"], ["b"]]


def test_abandoned_and_cancelled_tickets_are_dropped_before_their_batch() -> None:
    runner = Recorder(gate=True)
    dropped: list[str] = []
    ended: list[str] = []
    batcher = Batcher(runner, workers=1, wait_s=0.0, max_words=100, on_dropped=dropped.append)

    async def scenario() -> list[bool]:
        running = await batcher.submit("k", "running", 1, on_end=lambda: ended.append("running"))
        await asyncio.to_thread(runner.entered.wait, DEADLINE)
        gone = await batcher.submit("k", "gone", 1, on_end=lambda: ended.append("gone"))
        cancelled = await batcher.submit("k", "cancelled", 1, on_end=lambda: ended.append("cancelled"))
        kept = await batcher.submit("k", "kept", 1, on_end=lambda: ended.append("kept"))
        started = [batcher.abandon(gone, "disconnected"), batcher.abandon(running, "disconnected")]
        assert ended == ["gone"]  # the queued ticket's capacity comes back at once, the running one's later
        cancelled.future.cancel()  # e.g. the awaiting task was cancelled
        runner.release.set()
        assert await kept.future == "KEPT"
        assert running.future.cancelled()  # its outcome was discarded
        await batcher.stop()
        return started

    assert run(scenario) == [False, True]
    assert runner.batches == [["running"], ["kept"]]
    assert dropped == ["disconnected", "cancelled"]
    assert sorted(ended) == ["cancelled", "gone", "kept", "running"]


def test_a_failing_runner_fails_its_batch_only() -> None:
    calls: list[list[str]] = []

    def runner(payloads: list[str]) -> list[Any]:
        calls.append(payloads)
        if "boom" in payloads:
            raise RuntimeError("boom")
        return [p.upper() for p in payloads]

    batcher = Batcher(runner, workers=1, wait_s=0.0, max_words=100)

    async def scenario() -> list[Any]:
        boom = await batcher.submit("a", "boom", 1)
        fine = await batcher.submit("b", "fine", 1)
        out = await asyncio.gather(boom.future, fine.future, return_exceptions=True)
        await batcher.stop()
        return out

    boom, fine = run(scenario)
    assert isinstance(boom, RuntimeError) and fine == "FINE"


def test_idle_workers_split_the_queue() -> None:
    runner = Recorder()
    batcher = Batcher(runner, workers=2, wait_s=60.0, max_words=4)

    async def scenario() -> None:
        first = await batcher.submit("k", "first", 4)  # starts the workers
        assert await first.future == "FIRST"
        while batcher.running or batcher.idle < 2:  # until both workers wait for tickets
            await asyncio.sleep(0)
        tickets = await submit_all(batcher, [("k", p, 1) for p in "abcd"])
        assert await asyncio.gather(*(t.future for t in tickets)) == ["A", "B", "C", "D"]
        await batcher.stop()

    run(scenario)
    assert sorted(runner.batches) == [["a", "b"], ["c", "d"], ["first"]]


@pytest.mark.parametrize("order", [[2, 0], [0, 2], [2, 0, 2, 0], [0, 0]])
def test_requests_of_zero_words_share_a_batch_without_stalling_it(order: list[int]) -> None:
    """A request may count 0 words ({"tokens": [[]]}, refused later by its check). Queued with others of its key
    it took the key's word count to 0 before its own turn: taking it off the queue then failed (KeyError),
    the worker died and every later request waited forever."""
    runner = Recorder()
    batcher = Batcher(runner, workers=1, wait_s=0.01, max_words=100)

    async def scenario() -> list[Any]:
        tickets = await submit_all(batcher, [("k", f"p{i}", words) for i, words in enumerate(order)])
        done = await asyncio.gather(*(t.future for t in tickets))
        later = await batcher.submit("k", "next", 1)  # the worker is still alive
        done.append(await later.future)
        await batcher.stop()
        return done

    assert run(scenario) == [f"P{i}" for i in range(len(order))] + ["NEXT"]


def test_a_waiting_batch_goes_once_its_burst_of_requests_is_over() -> None:
    """While another batch runs, the next one waits for more requests (``wait_s``), but only until they stop
    coming (``gap_s``): the burst it waited for arrives in one batch, and the batch does not sit out ``wait_s``
    (60 s here: without the gap rule the test would time out)."""
    batches: list[list[str]] = []
    entered, second, release = threading.Event(), threading.Event(), threading.Event()

    def runner(payloads: list[str]) -> list[Any]:
        batches.append(list(payloads))
        if len(batches) == 1:  # the batch that keeps the server busy
            entered.set()
            assert release.wait(DEADLINE)
        else:
            second.set()
        return [p.upper() for p in payloads]

    batcher = Batcher(runner, workers=2, wait_s=60.0, max_words=100, wait_only_when_busy=True, gap_s=0.2)

    async def scenario() -> list[Any]:
        first = await batcher.submit("k", "a", 1)  # an idle server: parsed at once
        assert await asyncio.to_thread(entered.wait, DEADLINE)
        burst = await submit_all(batcher, [("k", "b", 1), ("k", "c", 1), ("k", "d", 1)])
        assert await asyncio.to_thread(second.wait, DEADLINE / 2)
        release.set()
        done = await asyncio.gather(first.future, *(t.future for t in burst))
        await batcher.stop()
        return done

    assert run(scenario) == ["A", "B", "C", "D"]
    assert batches == [["a"], ["b", "c", "d"]]
