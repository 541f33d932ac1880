"""Constituency models in the service (issue 26, "Service"): ``POST /parse`` answers each sentence's ``tree`` and
``constituents``, ``/marginals`` its span marginals (``engine.constituency.outputs``: what each probability is).

A request to a constituency model gives ``tokens`` (words spelled as in the Penn Treebank) or ``text``. Text is
split into sentences and words by the tokenizer of the service's default model (``engine.text.tokenizer``, learned
from UD English EWT, whose words are close to the treebank's: ``n't`` and punctuation are words of their own), and
both inputs are mapped to the treebank's spelling where it is plain (``engine.constituency.spelling.ptb_words``). The
limits are those of dependency models (``max_sentences`` and ``max_request_words`` per request), but for the words
per sentence, ``max_words_constituency`` (the chart grows as n^2 labels, the time as n^3). Everything only a
dependency model has (``tags``, ``xpos``, ``conllu``, ``output: conllu``, the ``inference`` options,
``tag_marginals``, and the routes ``/confidence``, ``/kbest``, ``/sample``) is a 422 that says the model is a
constituency model (``rule: model-capability``).

Requests go through admission control and the batcher as dependency ones do (``service.routes.parsing``); a
:class:`ConstituencyWork` is parsed by itself, a sentence at a time, on a batcher thread.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any

from engine.constituency.outputs import parse_answer, span_answer
from engine.constituency.spelling import ptb_words
from service.inputs import check_request_words, check_tokens, from_text
from service.problems import ProblemError
from service.registry import AnyEntry, ConstituencyEntry, ModelEntry, ModelRegistry
from service.schemas import MarginalsRequest, ParseRequest
from service.settings import Settings

log = logging.getLogger("service.constituency")

def refusal(entry: ConstituencyEntry, what: str, field: str) -> ProblemError:
    """A 422 for something only dependency models do."""
    return ProblemError(422, "Not for a constituency model", f"model {entry.name!r} is a constituency model: "
                        f"{what} is for dependency models (a constituency model answers /parse with the tree and "
                        "its constituents, /marginals with span marginals)", kind="constituency-model",
                        field=field, rule="model-capability")


def check_request(req: ParseRequest, entry: ConstituencyEntry) -> None:
    """422 for the fields of ``req`` only dependency models read."""
    given = [name for name in ("tags", "xpos", "conllu") if getattr(req, name) is not None]
    if given:
        what = "conllu input" if given[0] == "conllu" else f"{given[0]} (tags given with tokens)"
        raise refusal(entry, what, given[0])
    if req.output != "json":
        raise refusal(entry, f"output={req.output}", "output")
    options = sorted(name for name in req.inference.model_fields_set if getattr(req.inference, name) is not None)
    if options:
        raise refusal(entry, f"inference.{options[0]}", f"inference.{options[0]}")
    if isinstance(req, MarginalsRequest) and req.tag_marginals:
        raise refusal(entry, "tag_marginals", "tag_marginals")


def tokenizer_of(registry: ModelRegistry) -> ModelEntry | None:
    """The model whose tokenizer splits ``text`` for a constituency model: the service's default model, if it has
    a tokenizer."""
    try:
        entry = registry.get(None)
    except LookupError:
        return None
    return entry if isinstance(entry, ModelEntry) and entry.has_tokenizer else None


def sentence_words(req: ParseRequest, entry: ConstituencyEntry, settings: Settings,
                   tokenizer: ModelEntry | None) -> list[list[str]]:
    """The words of each sentence of the request in the treebank's spelling, checked against the limits."""
    if "blank_line" in req.model_fields_set and req.text is None:
        raise ProblemError(422, "Invalid input", "blank_line goes with text (it says what a blank line in the text "
                           "starts)", kind="invalid-input", field="blank_line")
    if req.text is not None:
        if tokenizer is None:
            raise ProblemError(422, "No tokenizer", f"model {entry.name!r} is a constituency model and the "
                               "service's default model has no tokenizer to split text with: send `tokens`",
                               kind="no-tokenizer", field="text", rule="model-capability")
        sentences = [list(s.forms) for s in from_text(req.text, tokenizer, settings,
                                                       settings.max_words_constituency, req.blank_line)]
        field = "text"
    else:
        if req.tokens is None:
            raise refusal(entry, "conllu input", "conllu")
        check_tokens(req.tokens, settings, settings.max_words_constituency, "model-capability")
        sentences, field = req.tokens, "tokens"
    check_request_words(sum(len(words) for words in sentences), field, settings)
    return [ptb_words(words) for words in sentences]


@dataclass(frozen=True)
class ConstituencyWork:
    """One request to a constituency model: ``/parse`` (``spans`` False) or ``/marginals`` (``spans`` True)."""

    req: ParseRequest
    entry: ConstituencyEntry
    spans: bool
    settings: Settings
    tokenizer: ModelEntry | None
    observe: Callable[[int], None] = lambda n: None

    def key(self) -> Hashable:
        return ("constituency", self.entry.path, id(self.entry.parser), self.spans)

    def respond(self) -> dict[str, Any]:
        """The response body; raises ``ProblemError`` for bad input."""
        parser, grammar = self.entry.parser, self.entry.parser.model.grammar
        out = []
        for words in sentence_words(self.req, self.entry, self.settings, self.tokenizer):
            self.observe(len(words))
            tree, marginals = parser.parse_with_marginals(words)
            try:
                out.append(span_answer(words, marginals, grammar) if self.spans
                           else parse_answer(tree, marginals, grammar))
            except FloatingPointError:  # never NaN or inf to a client: the answer without posteriors
                log.error("model %s: marginals not finite for %r", self.entry.name, " ".join(words))
                out.append(span_answer(words, None, grammar) if self.spans else parse_answer(tree, None, grammar))
        return {"model": {"name": self.entry.name, "version": self.entry.version}, "sentences": out}


def run_works(works: list[ConstituencyWork]) -> list[Any]:
    """The batcher's outcomes of constituency requests: each response, or the exception it gets."""
    outcomes: list[Any] = []
    for work in works:
        try:
            outcomes.append(work.respond())
        except Exception as e:
            outcomes.append(e)
    return outcomes


def is_constituency(entry: AnyEntry) -> bool:
    return isinstance(entry, ConstituencyEntry)
