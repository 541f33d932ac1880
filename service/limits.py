"""Back-pressure: request body size (413) and admission of CPU-bound work (503 + Retry-After).

``BodyLimitMiddleware`` refuses a body larger than the limit from its Content-Length before reading it,
and stops reading a chunked body as soon as it passes the limit. ``Admission`` runs parsing in a bounded
thread pool and admits at most ``max_pending`` requests (running plus waiting); beyond that it answers
503 at once instead of queueing without bound.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import anyio
from anyio import to_thread
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.problems import ProblemError, problem_response

T = TypeVar("T")


class BodyTooLarge(Exception):
    pass


class BodyLimitMiddleware:
    def __init__(self, app: ASGIApp, limit_for: Callable[[str], int]) -> None:
        self.app, self.limit_for = app, limit_for

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.limit_for(scope["path"])
        length = dict(scope["headers"]).get(b"content-length")
        if length is not None and length.isdigit() and int(length) > limit:
            await self._refuse(scope, receive, send, limit)
            return
        seen = 0
        started = False

        async def limited_receive() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > limit:
                    raise BodyTooLarge()
            return message

        async def tracking_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, limited_receive, tracking_send)
        except BodyTooLarge:
            if not started:
                await self._refuse(scope, receive, send, limit)

    @staticmethod
    async def _refuse(scope: Scope, receive: Receive, send: Send, limit: int) -> None:
        response = problem_response(413, "Request too large", f"the request body exceeds {limit} bytes",
                                    "request-too-large", headers={"Connection": "close"}, limit=limit)
        await response(scope, receive, send)


class Admission:
    """At most ``threads`` requests parse at once; at most ``max_pending`` are admitted (the rest get 503)."""

    def __init__(self, threads: int, max_pending: int, retry_after: int, on_reject: Callable[[], Any]) -> None:
        self.limiter = anyio.CapacityLimiter(threads)
        self.max_pending, self.retry_after, self.on_reject = max_pending, retry_after, on_reject
        self.pending = 0  # touched only from the event loop thread

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        if self.pending >= self.max_pending:
            self.on_reject()
            raise ProblemError(503, "Service at capacity", f"{self.pending} requests are being served; retry "
                               f"after {self.retry_after} s", kind="at-capacity",
                               headers={"Retry-After": str(self.retry_after)})
        self.pending += 1
        try:
            return await to_thread.run_sync(fn, *args, limiter=self.limiter)
        finally:
            self.pending -= 1
