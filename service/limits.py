"""Back-pressure: request body size (413) and admission of CPU-bound work (503 + Retry-After).

``BodyLimitMiddleware`` refuses a body larger than the limit from its Content-Length before reading it,
and stops reading a chunked body as soon as it passes the limit. ``Admission`` admits at most ``max_pending``
requests and ``max_words`` words in flight (queued plus running); beyond that it answers 503 at once
instead of queueing without bound. The parsing itself runs in ``service.batcher``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.problems import ProblemError, problem_response


class BodyTooLarge(Exception):
    pass


JSON_ROUTES = ("/parse", "/marginals", "/confidence", "/kbest", "/sample")  # POST bodies are JSON


class JsonContentTypeMiddleware:
    """A POST to a parsing route must say ``Content-Type: application/json`` (415 otherwise, naming the accepted
    type: curl's ``-d`` sends ``application/x-www-form-urlencoded``, which would else be a puzzling 422)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "POST" and scope["path"] in JSON_ROUTES:
            raw = dict(scope["headers"]).get(b"content-type", b"").decode("latin-1")
            media = raw.split(";", 1)[0].strip().lower()
            if media != "application/json":
                response = problem_response(
                    415, "Unsupported media type", f"{scope['path']} takes a JSON body: send it with "
                    f"'Content-Type: application/json' (got {raw or 'no Content-Type'!r})", "unsupported-media-type",
                    accepted=["application/json"])
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


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
        exceeded = False

        async def limited_receive() -> Message:
            nonlocal seen, exceeded
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > limit:
                    exceeded = True
                    raise BodyTooLarge()
            return message

        async def tracking_send(message: Message) -> None:
            nonlocal started
            if exceeded:  # the framework caught BodyTooLarge while reading the body and answers 400: it is a 413
                if message["type"] == "http.response.start" and not started:
                    started = True
                    await self._refuse(scope, receive, send, limit)
                return
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


class Admitted:
    """One admitted request's share of the capacity; ``release`` gives it back (once, however often called)."""

    def __init__(self, admission: Admission, words: int) -> None:
        self.admission, self.words, self.released = admission, words, False

    def release(self) -> None:
        if not self.released:
            self.released = True
            self.admission.pending -= 1
            self.admission.words -= self.words


class Admission:
    """Admits a request while fewer than ``max_pending`` are in flight and its words fit in ``max_words``
    beside the words already in flight (queued plus running); the rest get 503 with Retry-After at once
    instead of queueing without bound. Counting words bounds the queued work in seconds: a 300-word text
    costs what 300 one-word requests cost. A request larger than ``max_words`` is admitted when nothing else
    is in flight (it could never be served otherwise; ``max_request_words`` bounds it).

    Touched only from the event loop thread; the capacity comes back when the request's work has ended
    (parsed, or dropped before it started), not when its client stopped waiting.
    """

    def __init__(self, max_pending: int, max_words: int, retry_after: int, on_reject: Callable[[], Any]) -> None:
        self.max_pending, self.max_words, self.retry_after, self.on_reject = (max_pending, max_words, retry_after,
                                                                              on_reject)
        self.pending = 0
        self.words = 0

    def admit(self, words: int) -> Admitted:
        if self.pending >= self.max_pending:
            reason = f"{self.pending} requests are being served"
        elif self.pending and self.words + words > self.max_words:
            reason = f"{self.words} words are being parsed and this request has {words}"
        else:
            self.pending += 1
            self.words += words
            return Admitted(self, words)
        self.on_reject()
        raise ProblemError(503, "Service at capacity", f"{reason}; retry after {self.retry_after} s",
                           kind="at-capacity", headers={"Retry-After": str(self.retry_after)})
