"""Prometheus metrics (``GET /metrics``): requests, latency, sentence lengths, batches, work dropped for
clients that went away, words in flight, jobs by state.

Each app has its own ``CollectorRegistry`` so several apps (tests) never share counters. Jobs by state are
read from the job store at scrape time, so they are right even when another process runs the jobs.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector
from starlette.types import ASGIApp, Message, Receive, Scope, Send

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
JOB_STATES = ("queued", "running", "succeeded", "failed", "cancelled")


class _JobsCollector(Collector):
    def __init__(self, counts: Callable[[], dict[str, int]]) -> None:
        self._counts = counts

    def collect(self) -> Iterable[GaugeMetricFamily]:
        family = GaugeMetricFamily("parser_jobs", "training jobs by state", labels=["state"])
        try:
            counts = self._counts()
        except Exception:  # the store is unavailable: report nothing rather than fail the scrape
            counts = {}
        for state in JOB_STATES:
            family.add_metric([state], float(counts.get(state, 0)))
        yield family


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter("parser_requests", "HTTP requests", ["method", "route", "status"],
                                registry=self.registry)
        self.latency = Histogram("parser_request_seconds", "request latency", ["route"], registry=self.registry,
                                 buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30))
        self.words = Histogram("parser_sentence_words", "words per parsed sentence", registry=self.registry,
                               buckets=(1, 5, 10, 20, 30, 40, 60, 80, 100, 150, 200, 300, 500))
        self.rejected = Counter("parser_rejected", "requests answered 503 because the service was at capacity",
                                registry=self.registry)
        self.dropped = Counter("parser_dropped_work", "requests whose parse was dropped before it started, by "
                               "why: disconnected (the client went away), timeout (its time budget ran out), "
                               "cancelled", ["reason"], registry=self.registry)
        self.batch_requests = Histogram("parser_batch_requests", "requests per engine call (micro-batch)",
                                        registry=self.registry, buckets=(1, 2, 4, 8, 16, 32, 64, 128))
        self.batch_words = Histogram("parser_batch_words", "words per engine call (micro-batch)",
                                     registry=self.registry,
                                     buckets=(10, 25, 50, 100, 200, 400, 800, 1600, 3200, 10000))
        self.words_in_flight = Gauge("parser_words_in_flight", "words admitted and not yet parsed or dropped "
                                     "(queued + running)", registry=self.registry)
        self.parse_processes = Gauge("parser_parse_processes", "parse processes running (0: parsing on the "
                                     "server's threads)", registry=self.registry)

    def batch(self, requests: int, words: int) -> None:
        self.batch_requests.observe(requests)
        self.batch_words.observe(words)

    def watch_jobs(self, counts: Callable[[], dict[str, int]]) -> None:
        self.registry.register(_JobsCollector(counts))

    def render(self) -> bytes:
        return generate_latest(self.registry)


class MetricsMiddleware:
    """Counts every request by route template (not raw path, so label cardinality stays bounded)."""

    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app, self.metrics = app, metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status = {"code": 500}

        async def send_wrapper(message: Message) -> None:
            if message["type"] == "http.response.start":
                status["code"] = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_wrapper)
        finally:
            route = scope.get("route")  # FastAPI routes; plain Starlette ones (/openapi.json, /docs) only
            path = getattr(route, "path", None) or (scope["path"] if "endpoint" in scope else "unmatched")
            self.metrics.requests.labels(scope["method"], path, str(status["code"])).inc()
            self.metrics.latency.labels(path).observe(time.perf_counter() - start)
