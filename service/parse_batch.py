"""The work of a batch of parsing requests (``service.batcher``'s runner): ``parse_works`` (checking, tagging,
parsing, LEMMA and FEATS; on a worker thread, or in a parse process, ``service.parse_processes``) and
``respond_all`` (the responses, always in the server).

Requests in one batch share the model and the inference settings (``ParseWork.key``). Each request's input
is checked on its own (a 422 goes to that request only); the sentences of all the valid ones are then
tagged together (``service.inputs.tag_sentences``: each sentence's tag draws are seeded by its words) and
parsed in one engine call (``service.parsing.run_inference``, which stacks sentences of one length), their
LEMMA and FEATS filled in one call, and the parses are split back and each request's response built on its
own. If the stacked call fails, every
request of the batch is run again alone, so that a failure reaches only the request that causes it.

A sentence's parse does not depend on the other sentences of its batch except for floating-point rounding:
the engine's stacked BP (``infer_many``) sums in an order that depends on the stack's size (on EWT dev
sentences, probabilities differ by 1e-16 to 2e-14; trees, labels and tags are the same);
``tests/service/test_service_batching.py`` checks this.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any

from engine.data.conllu_io import Sentence
from engine.results import ParsedSentence
from service import parsing
from service.constituency import ConstituencyWork, run_works
from service.inputs import checked_sentences, tag_sentences
from service.registry import ModelEntry
from service.schemas import ParseRequest
from service.settings import Settings

Builder = Callable[[list[Sentence], list[ParsedSentence]], Any]


@dataclass(frozen=True)
class ParseWork:
    """One request: its body (``inference.tag_samples`` already resolved), model, response builder, the
    words-per-sentence limit of its route, a callback told each sentence's length (metrics), and whether
    its response carries LEMMA and FEATS."""

    req: ParseRequest
    entry: ModelEntry
    build: Builder
    settings: Settings
    max_words: int | None = None
    observe: Callable[[int], None] = lambda n: None
    morphology: bool = False  # fill LEMMA and FEATS (where the input has "_") with the model's components

    def key(self) -> Hashable:
        """Requests with equal keys can be parsed in one engine call: same model, same inference settings."""
        return (self.entry.path, id(self.entry.pipeline), self.req.inference.model_dump_json())

    def respond(self, sentences: list[Sentence], parsed: list[ParsedSentence],
                filled: bool = False) -> dict[str, Any] | str:
        """The request's response; ``filled``: its LEMMA and FEATS were already filled with its batch's."""
        if self.morphology and not filled:
            parsing.fill_morphology(self.entry.pipeline, sentences, parsed)
        result = self.build(sentences, parsed)
        if isinstance(result, str):
            return result
        return {"model": {"name": self.entry.name, "version": self.entry.version}, "sentences": result}


def run_batch(works: list[ParseWork] | list[ConstituencyWork]) -> list[Any]:
    """One outcome per request, in order: its response (dict or CoNLL-U text) or the exception it gets. A batch
    shares its key, so its works are all of dependency models or all of one constituency model."""
    if works and isinstance(works[0], ConstituencyWork):
        return run_works([w for w in works if isinstance(w, ConstituencyWork)])
    dependency = [w for w in works if isinstance(w, ParseWork)]
    return respond_all(dependency, parse_works(dependency))


@dataclass(frozen=True)
class Parsed:
    """One request's parse before its response is built: its sentences, their parses, and whether LEMMA and
    FEATS were already filled with its batch's."""

    sentences: list[Sentence]
    parsed: list[ParsedSentence]
    filled: bool


def parse_works(works: list[ParseWork], observe: bool = True) -> list[Parsed | BaseException]:
    """The engine's part of a batch (checking, tagging, parsing, LEMMA and FEATS): one ``Parsed`` or exception
    per request, in order. ``observe=False`` leaves the sentence-length callbacks to the caller (a parse
    process, whose callbacks would count in the wrong process)."""
    outcomes: list[Parsed | BaseException | None] = [None] * len(works)
    ready: list[tuple[int, list[Sentence]]] = []
    for i, work in enumerate(works):
        try:
            sentences = checked_sentences(work.req, work.entry, work.settings, work.max_words)
        except Exception as e:
            outcomes[i] = e
            continue
        if observe:
            for s in sentences:
                work.observe(s.n)
        ready.append((i, sentences))
    try:
        parses = _parse_together(works[ready[0][0]], [sentences for _, sentences in ready]) if ready else []
    except Exception as e:
        for i, _ in ready:  # find the request that fails: each alone, from its input again
            outcomes[i] = e if len(ready) == 1 else _parse_alone(works[i])
    else:
        filled = _fill_morphology_together(works, ready, parses)
        for (i, sentences), parsed in zip(ready, parses, strict=True):
            outcomes[i] = Parsed(sentences, parsed, filled)
    return [o for o in outcomes if o is not None]


def respond_all(works: list[ParseWork], parses: list[Parsed | BaseException]) -> list[Any]:
    """Each request's response from its parse (``parse_works``), or the exception it gets."""
    outcomes: list[Any] = []
    for work, parse in zip(works, parses, strict=True):
        if isinstance(parse, BaseException):
            outcomes.append(parse)
            continue
        try:
            outcomes.append(work.respond(parse.sentences, parse.parsed, parse.filled))
        except Exception as e:
            outcomes.append(e)
    return outcomes


def _fill_morphology_together(works: list[ParseWork], ready: list[tuple[int, list[Sentence]]],
                              parses: list[list[ParsedSentence]]) -> bool:
    """LEMMA and FEATS of every request of the batch that wants them in one call (one sentence's analysis
    does not depend on the others', and one call for the batch costs a third of one per request); False if
    it failed, so that each request fills its own and a failure reaches only the request that causes it."""
    wanted = [(sentences, parsed) for (i, sentences), parsed in zip(ready, parses, strict=True) if works[i].morphology]
    if not wanted:
        return True
    try:
        parsing.fill_morphology(works[ready[0][0]].entry.pipeline, [s for group, _ in wanted for s in group],
                                [p for _, group in wanted for p in group])
    except Exception:
        return False
    return True


def run_alone(work: ParseWork) -> Any:
    """One request parsed by itself: its response or the exception it gets."""
    return respond_all([work], [_parse_alone(work)])[0]


def _parse_alone(work: ParseWork) -> Parsed | BaseException:
    try:
        sentences = checked_sentences(work.req, work.entry, work.settings, work.max_words)
        return Parsed(sentences, _parse_together(work, [sentences])[0], False)
    except Exception as e:
        return e


def _parse_together(work: ParseWork, groups: list[list[Sentence]]) -> list[list[ParsedSentence]]:
    """Tag and parse the sentences of every group in one engine call; the parses split back by group."""
    flat = [s for group in groups for s in group]
    joint = parsing.resolve_tags(work.entry, work.req.inference) == "joint"
    tagging = tag_sentences(work.entry, flat, work.req.inference.tag_samples or 0, joint)
    parsed = parsing.run_inference(work.entry, flat, work.req.inference, tagging.draws,
                                   tagging.candidates if joint else None)
    parsing.attach_tag_probabilities(parsed, tagging)
    out, start = [], 0
    for group in groups:
        out.append(parsed[start:start + len(group)])
        start += len(group)
    return out
