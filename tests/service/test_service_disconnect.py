"""The real server process: requests whose clients give up before their parse starts are dropped, not
parsed (``service.batcher``), and the server is free for the next request at once."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from service_helpers import TAGS, WORDS, ServerProcess

ABANDONED = 8


@pytest.fixture()
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    # one parsing process; a batch's first request waits 1 s for others, even on an idle server and with no
    # requests arriving, so the requests below are still queued when their clients give up after 0.2 s
    proc = ServerProcess(tmp_path / "data", workers=0, env={"PARSER_BATCH_WAIT_MS": "1000",
                                                            "PARSER_BATCH_GAP_MS": "1000",
                                                            "PARSER_BATCH_WAIT_IDLE": "true",
                                                            "PARSER_PARSE_PROCESSES": "1"})
    try:
        proc.wait_ready()
        yield proc
    finally:
        proc.stop()


def metric(url: str, name: str, labels: str = "") -> float:
    text = httpx.get(url + "/metrics", timeout=10).text
    match = re.search(rf"^{re.escape(name + labels)} (\S+)$", text, re.MULTILINE)
    return float(match.group(1)) if match else 0.0


def give_up(url: str) -> str:
    """POST /parse with a client that waits 0.2 s and then closes its connection."""
    with httpx.Client(base_url=url, timeout=0.2) as client:
        try:
            client.post("/parse", json={"tokens": [WORDS], "tags": [TAGS]})
        except httpx.TimeoutException as e:
            return type(e).__name__
    return "answered"


def test_abandoned_requests_are_dropped_and_do_not_keep_the_server_busy(server: ServerProcess) -> None:
    url = server.url
    with ThreadPoolExecutor(ABANDONED) as pool:
        outcomes = list(pool.map(lambda _: give_up(url), range(ABANDONED)))
    assert outcomes == ["ReadTimeout"] * ABANDONED
    dropped = 'parser_dropped_work_total{reason="disconnected"}'
    deadline = time.monotonic() + 30
    while metric(url, dropped) < ABANDONED:  # the server notices the disconnects on its own
        assert time.monotonic() < deadline, f"dropped: {metric(url, dropped)} of {ABANDONED}"
        time.sleep(0.1)
    assert metric(url, "parser_batch_requests_count") == 0  # none of them was parsed
    assert metric(url, "parser_words_in_flight") == 0
    start = time.monotonic()
    r = httpx.post(url + "/parse", json={"tokens": [WORDS], "tags": [TAGS]}, timeout=60)
    assert r.status_code == 200, r.text
    # it waited its own batching window and parsed, not behind the abandoned ones (one batch of one request)
    assert metric(url, "parser_batch_requests_count") == 1 and metric(url, "parser_batch_requests_sum") == 1
    assert time.monotonic() - start < 30
    assert metric(url, dropped) == ABANDONED
