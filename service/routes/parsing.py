"""Parsing routes: ``POST /parse``, ``GET|POST /marginals``, ``POST /confidence``, ``POST /kbest``, ``POST /sample``.

Handlers are thin: look up the model and check the options, admit the request (``ServiceState.admission``
counts words in flight), and hand it to the micro-batcher (``service.batcher``; input checking, inference and
JSON building run on its worker threads, ``service.parse_batch``), waiting at most
``PARSER_REQUEST_TIMEOUT_S`` and no longer than the client does.
"""

from __future__ import annotations

import asyncio
import time
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from pydantic import ValidationError, WithJsonSchema

from engine.decode.conformal import stored_conformal
from engine.pipeline import MAX_TAG_SAMPLES
from service import constituency, parsing
from service.batcher import ShuttingDown, Ticket
from service.constituency import ConstituencyWork
from service.inputs import estimated_words
from service.parse_batch import Builder, ParseWork
from service.problems import ProblemError
from service.registry import ConstituencyEntry, ModelEntry
from service.schemas import (
    MAX_QUERY_TEXT_CHARS,
    MODEL_REF,
    TEXT,
    UPOS,
    WORD,
    ConfidenceRequest,
    ConfidenceResponse,
    KBestRequest,
    MarginalsRequest,
    MarginalsResponse,
    ParseRequest,
    ParseResponse,
    Problem,
    SampleRequest,
    TreesResponse,
    beyond_schema,
    limit,
)
from service.state import ServiceState, State

router = APIRouter(tags=["parsing"])
ERRORS: dict[int | str, dict[str, Any]] = {
    code: {"model": Problem, "description": text} for code, text in (
        (400, "malformed JSON"), (404, "unknown model"), (413, "request body too large"),
        (422, "invalid input (the problem names the field, sentence, word or line)"),
        (503, "at capacity, still loading, or the parse could not start in time (Retry-After)"),
        (504, "the parse did not finish within the time budget (PARSER_REQUEST_TIMEOUT_S)"))}


async def _run(state: ServiceState, request: Request, req: ParseRequest, build: Builder, *,
               max_words: int | None = None, conllu_ok: bool = False,
               tag_samples_ok: bool = False, morphology: bool = False, route: str = "/parse"
               ) -> dict[str, Any] | str:
    """Check the request's options, admit it (words in flight), queue it for the batcher and wait for its
    response within the time budget, or until its client goes away. A constituency model answers ``/parse`` and
    ``/marginals`` (``service.constituency``) and refuses the other routes (422)."""
    deadline = time.monotonic() + state.settings.request_timeout_s
    entry = state.model(req.model)
    if isinstance(entry, ConstituencyEntry):
        if route not in ("/parse", "/marginals"):
            raise constituency.refusal(entry, route, "model")
        constituency.check_request(req, entry)
        return await _submit(state, request, deadline, constituency.ConstituencyWork(
            req, entry, route == "/marginals", state.settings, constituency.tokenizer_of(state.registry),
            state.metrics.words.observe), estimated_words(req))
    if req.inference.tag_samples and not tag_samples_ok:
        raise ProblemError(422, "Invalid input", "inference.tag_samples is available on /parse, /marginals and "
                           "/confidence only (k-best and sampled trees need a single tagging)",
                           kind="invalid-input", field="inference.tag_samples")
    if req.inference.tag_samples is None:  # the model's default where it applies
        default = entry.default_tag_samples if tag_samples_ok else 0
        req = req.model_copy(update={"inference": req.inference.model_copy(update={"tag_samples": default})})
    parsing.resolve_method(entry, req.inference)
    parsing.resolve_tags(entry, req.inference)  # joint tags asked for where they cannot run: 422 now, not queued
    limits = state.settings  # the service's caps; the engine's bounds are the schema's
    for name, cap in (("iterations", limits.max_iterations), ("rounds", limits.max_rounds),
                      ("tag_samples", limits.max_tag_samples)):
        value = getattr(req.inference, name)
        if value is not None and value > cap:
            raise ProblemError(422, "Invalid input", f"inference.{name} is at most {cap}", kind="invalid-input",
                               field=f"inference.{name}")
    if req.output == "conllu" and not conllu_ok:
        raise ProblemError(422, "Invalid input", "output=conllu is available on /parse only", kind="invalid-input",
                           field="output")
    work = ParseWork(req, entry, build, state.settings, max_words, state.metrics.words.observe, morphology)
    return await _submit(state, request, deadline, work, estimated_words(req))


async def _submit(state: ServiceState, request: Request, deadline: float, work: ParseWork | ConstituencyWork,
                  words: int) -> dict[str, Any] | str:
    """Admit the request's ``words`` (words in flight), queue its work and wait for its outcome."""
    admitted = state.admission.admit(words)
    try:
        ticket = await state.batcher.submit(work.key(), work, words, on_end=admitted.release)
    except BaseException:
        admitted.release()
        raise
    result: dict[str, Any] | str = await _outcome(state, request, ticket, deadline)
    return result


async def _disconnected(request: Request) -> None:
    """Returns when the client has gone (the body has been read, so the next message is the disconnect)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def _outcome(state: ServiceState, request: Request, ticket: Ticket, deadline: float) -> Any:
    """The ticket's outcome; if the client goes away or the time budget runs out first, the ticket is
    abandoned (dropped if its parse has not started) and the request answered 499 (nobody reads it), or
    504 (started) or 503 (never started) as a problem document."""
    gone = asyncio.ensure_future(_disconnected(request))
    try:
        await asyncio.wait({ticket.future, gone}, timeout=max(0.0, deadline - time.monotonic()),
                           return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:
        state.batcher.abandon(ticket, "cancelled")
        raise
    finally:
        gone.cancel()
    if ticket.future.done() and not ticket.future.cancelled():
        try:
            return ticket.future.result()
        except ShuttingDown as e:
            raise ProblemError(503, "Shutting down", str(e), kind="shutting-down",
                               headers={"Retry-After": str(state.settings.retry_after_seconds)}) from e
    if gone.done() and not gone.cancelled():
        state.batcher.abandon(ticket, "disconnected")
        raise ProblemError(499, "Client closed request", "the client went away before its parse was ready",
                           kind="client-closed-request")
    budget = f"{state.settings.request_timeout_s:g} s"
    if state.batcher.abandon(ticket, "timeout"):
        raise ProblemError(504, "Parse timed out", f"the parse did not finish within the time budget of {budget}",
                           kind="timeout")
    raise ProblemError(503, "Service at capacity", f"the parse could not start within the time budget of "
                       f"{budget}; retry after {state.settings.retry_after_seconds} s", kind="at-capacity",
                       headers={"Retry-After": str(state.settings.retry_after_seconds)})


BODY_RULES = beyond_schema("tags-shape", "text-tokens", "conllu", "request-words", "model-capability", "joint-tags")
"""The rules of a parsing request JSON Schema cannot state (``service.schemas.BEYOND_SCHEMA``)."""


@router.post("/parse", response_model=ParseResponse, openapi_extra=BODY_RULES, responses={
    **ERRORS, 200: {"content": {"text/conllu": {}}, "description": "parsed sentences (JSON or CoNLL-U)"}})
async def parse(req: ParseRequest, state: State, request: Request) -> Response:
    """The MBR tree of each sentence, every word with its head, label and the head's marginal probability (and
    LEMMA and FEATS, with the bundle's probability, when the model has those components)."""
    build: Builder = parsing.parse_conllu if req.output == "conllu" else parsing.parse_json
    result = await _run(state, request, req, build, conllu_ok=True, tag_samples_ok=True, morphology=True)
    if isinstance(result, str):
        return Response(result, media_type="text/conllu; charset=utf-8")
    return JSONResponse(result)


@router.post("/marginals", response_model=MarginalsResponse, responses=ERRORS, openapi_extra=BODY_RULES)
async def marginals_post(req: MarginalsRequest, state: State, request: Request) -> JSONResponse:
    """Arc marginals: ``marginals[m-1][h]`` is the probability that word m's head is h (h = 0 is ROOT); each
    word's ``upos_prob``, and with ``tag_marginals`` its whole UPOS distribution."""
    return JSONResponse(await _run(state, request, req, _marginals_builder(req.tag_marginals), tag_samples_ok=True,
                                   route="/marginals"))


def _marginals_builder(tag_marginals: bool) -> Builder:
    return lambda sentences, parsed: parsing.marginals_json(sentences, parsed, tag_marginals)


def _one_sentence(item: dict[str, Any]) -> WithJsonSchema:
    """The schema of a query parameter repeated once per word of the sentence (at most ``max_words``)."""
    return WithJsonSchema(limit("max_words", type="array", minItems=1, items=item))


@router.get("/marginals", response_model=MarginalsResponse, responses=ERRORS, openapi_extra=beyond_schema(
    "one-input", "tags-shape", "text-tokens", "request-words", "model-capability"))
async def marginals_get(
    state: State,
    request: Request,
    text: Annotated[str | None, Query(max_length=MAX_QUERY_TEXT_CHARS, description="raw text (needs a tokenizer)"),
                    WithJsonSchema({**TEXT, "maxLength": MAX_QUERY_TEXT_CHARS})] = None,
    tokens: Annotated[list[str] | None, Query(description="the words of one sentence, repeated"),
                      _one_sentence(WORD)] = None,
    tags: Annotated[list[str] | None, Query(description="UPOS of each word, repeated (with tokens)"),
                    _one_sentence(UPOS)] = None,
    xpos: Annotated[list[str] | None, Query(description="XPOS of each word, repeated (with tokens)"),
                    _one_sentence(WORD)] = None,
    model: Annotated[str | None, Query(pattern=MODEL_REF)] = None,
    method: Annotated[str | None, Query(pattern="^(exact|bp|relaxed)$")] = None,
    iterations: Annotated[int | None, Query(ge=1, description="as inference.iterations of POST /marginals",
                                            json_schema_extra={"x-limit": "max_iterations"})] = None,
    tag_samples: Annotated[int | None, Query(ge=0, le=MAX_TAG_SAMPLES,
                                             description="as inference.tag_samples of POST /marginals",
                                             json_schema_extra={"x-limit": "max_tag_samples"})] = None,
    tag_marginals: Annotated[bool, Query(description="as tag_marginals of POST /marginals")] = False,
) -> JSONResponse:
    """The same as ``POST /marginals`` for one sentence given in the query string: exactly one of ``text`` or
    ``tokens`` (which a query string's schema cannot say: ``x-beyond-schema``)."""
    if (text is None) == (tokens is None) or (text is not None and (tags, xpos) != (None, None)):
        raise ProblemError(422, "Invalid input", "give exactly one of text or tokens; tags and xpos go with tokens",
                           kind="invalid-input", field="text" if text is not None else "tokens", rule="one-input")
    try:
        # validated as a whole, as the body of POST /marginals is (the inference options arrive as a dict)
        req = MarginalsRequest.model_validate({
            "text": text, "tokens": [tokens] if tokens is not None else None,
            "tags": [tags] if tags is not None else None, "xpos": [xpos] if xpos is not None else None,
            "model": model, "inference": {k: v for k, v in (("method", method), ("iterations", iterations),
                                                            ("tag_samples", tag_samples)) if v is not None},
            "tag_marginals": tag_marginals})
    except ValidationError as e:
        raise RequestValidationError([{**err, "loc": ("query", *err["loc"])} for err in e.errors()]) from e
    return JSONResponse(await _run(state, request, req, _marginals_builder(tag_marginals), tag_samples_ok=True,
                                   route="/marginals"))


@router.post("/confidence", response_model=ConfidenceResponse, responses=ERRORS, openapi_extra=BODY_RULES)
async def confidence(req: ConfidenceRequest, state: State, request: Request) -> JSONResponse:
    """Each chosen head's probability with the interval of Riedel & Smith (2010) Proposition 2: the same
    inference as ``/parse`` and ``/marginals`` (with the same ``inference.tag_samples`` default), so the heads
    and probabilities are theirs."""
    build: Builder = parsing.confidence_json
    entry = state.model(req.model)
    if req.alpha is not None and isinstance(entry, ModelEntry):
        build = _with_sets(entry, req)
    return JSONResponse(await _run(state, request, req, build, tag_samples_ok=True, route="/confidence"))


def _with_sets(entry: ModelEntry, req: ConfidenceRequest) -> Builder:
    """``confidence_json`` with the conformal sets at ``req.alpha``: 422 when the model stores no thresholds or
    the request turns off the calibration they were fitted with."""
    try:
        conformal = stored_conformal(entry.manifest, req.alpha)
    except ValueError as e:
        raise ProblemError(422, "Invalid input", f"model {entry.name!r}: {e}", kind="not-available", field="alpha",
                           rule="model-capability") from e
    if req.inference.calibration == "none":
        raise ProblemError(422, "Invalid input", "alpha: the sets' thresholds were fitted on calibrated head "
                           "probabilities; they cannot be combined with inference.calibration none",
                           kind="invalid-input", field="alpha", rule="model-capability")
    alpha, labeler = float(req.alpha or 0), entry.parser.labeler
    return lambda sentences, parsed: parsing.with_sets(parsing.confidence_json(sentences, parsed), sentences, parsed,
                                                       labeler, conformal, alpha)


@router.post("/kbest", response_model=TreesResponse, responses=ERRORS, openapi_extra=BODY_RULES)
async def kbest(req: KBestRequest, state: State, request: Request) -> JSONResponse:
    """The k most probable trees of each sentence, best first, with their log-probabilities."""
    if req.k > state.settings.max_k:
        raise ProblemError(422, "Invalid input", f"k is at most {state.settings.max_k}", kind="invalid-input",
                           field="k")
    return JSONResponse(await _run(state, request, req, lambda s, p: parsing.trees_json(s, p, k=req.k),
                                   max_words=state.settings.max_words_kbest, route="/kbest"))


@router.post("/sample", response_model=TreesResponse, responses=ERRORS, openapi_extra=BODY_RULES)
async def sample(req: SampleRequest, state: State, request: Request) -> JSONResponse:
    """``n`` trees drawn from each sentence's distribution (reproducible with ``seed``)."""
    if req.n > state.settings.max_n:
        raise ProblemError(422, "Invalid input", f"n is at most {state.settings.max_n}", kind="invalid-input",
                           field="n")
    return JSONResponse(await _run(state, request, req, lambda s, p: parsing.trees_json(s, p, n=req.n, seed=req.seed),
                                   max_words=state.settings.max_words_kbest, route="/sample"))
