"""Request bodies -> engine sentences, with every limit and input error reported as a 422 problem that
names the field, the sentence (0-based) and, where it applies, the word or CoNLL-U line.

All three input forms become ``engine.data.conllu_io.Sentence`` objects, so parsing and CoNLL-U output
have one path: ``tokens`` are written as a CoNLL-U block and read back; ``conllu`` is read as given
(HEAD and DEPREL ignored); ``text`` needs a model with a tokenizer.
"""

from __future__ import annotations

import io
import re
from dataclasses import dataclass, field

import numpy as np

from engine.data.conllu_io import ConlluError, Sentence, read_conllu
from engine.decode.tag_marginal import TagSequence
from engine.features.extract import UPOS_TAGS
from engine.text.tag_candidates import CandidateSettings, TagCandidates
from service.problems import ProblemError
from service.registry import ModelEntry
from service.schemas import MAX_FORM_CHARS, ParseRequest
from service.settings import Settings

_BAD_FORM = re.compile(r"[\t\n\r]")
_UPOS = frozenset((*UPOS_TAGS, "_"))


def _invalid(detail: str, field: str, rule: str | None = None, **where: int) -> ProblemError:
    """A 422 naming the field; ``rule`` names the rule broken when JSON Schema cannot state it
    (``service.schemas.BEYOND_SCHEMA``): without one, the request broke its published schema."""
    extra = {"rule": rule} if rule else {}
    return ProblemError(422, "Invalid input", detail, kind="invalid-input", field=field, headers=None,
                        **extra, **where)


def _check_words(words: list[str], field: str, i: int) -> None:
    for j, w in enumerate(words):
        if not isinstance(w, str) or not w.strip():
            raise _invalid(f"{field}[{i}][{j}] is empty", field, sentence=i, word=j)
        if not _encodable(w):
            raise _invalid(f"{field}[{i}][{j}] is not valid Unicode text (a lone surrogate such as \\ud800)", field,
                           sentence=i, word=j)
        if _BAD_FORM.search(w):
            raise _invalid(f"{field}[{i}][{j}] contains a tab or line break", field, sentence=i, word=j)
        if len(w) > MAX_FORM_CHARS:
            raise _invalid(f"{field}[{i}][{j}] is longer than {MAX_FORM_CHARS} characters", field, sentence=i,
                           word=j)


def _encodable(text: str) -> bool:
    """Whether ``text`` can be written as UTF-8 (JSON's \\ud800 escapes decode to lone surrogates, which cannot)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _check_tags(tags: list[list[str]]) -> None:
    """UPOS tags must be the Universal Dependencies tags every model is trained on (or ``_`` for none)."""
    for i, sentence in enumerate(tags):
        for j, tag in enumerate(sentence):
            if tag not in _UPOS:
                raise _invalid(f"tags[{i}][{j}] is {tag!r}, not a UPOS tag; the models' tag set is "
                               f"{', '.join(UPOS_TAGS)} (or _ for none)", "tags", sentence=i, word=j)


def _block(forms: list[str], upos: list[str], xpos: list[str]) -> str:
    rows = [f"{j}\t{f}\t_\t{u}\t{x}\t_\t_\t_\t_\t_"
            for j, (f, u, x) in enumerate(zip(forms, upos, xpos, strict=True), 1)]
    return "\n".join(rows) + "\n\n"


def _per_sentence(values: list[list[str]] | None, field: str, tokens: list[list[str]]) -> list[list[str]] | None:
    if values is None:
        return None
    if len(values) != len(tokens):
        raise _invalid(f"{field} has {len(values)} sentences, tokens has {len(tokens)}", field, "tags-shape")
    for i, (v, t) in enumerate(zip(values, tokens, strict=True)):
        if len(v) != len(t):
            raise _invalid(f"{field}[{i}] has {len(v)} tags for {len(t)} words", field, "tags-shape", sentence=i)
        _check_words(v, field, i)
    return values


@dataclass
class Tagging:
    """What the model's tagger gave a batch of sentences: each one's tag ``draws`` (none for a sentence that came
    with its tags), and, by sentence index, the tagger's marginal of each chosen UPOS (``upos_probs``) and its
    whole (words, UPOS labels) marginal matrix (``upos_marginals``, columns ``labels``); for joint tagging and
    parsing, each one's candidate tags (``candidates``, ``engine.text.tag_candidates``)."""

    draws: list[list[TagSequence]]
    upos_probs: dict[int, np.ndarray] = field(default_factory=dict)
    upos_marginals: dict[int, np.ndarray] = field(default_factory=dict)
    labels: tuple[str, ...] = ()
    candidates: dict[int, TagCandidates] = field(default_factory=dict)


def tag_sentences(entry: ModelEntry, sents: list[Sentence], samples: int, joint: bool = False) -> Tagging:
    """Tag the sentences without UPOS in place (the model's tagger) and draw ``samples`` tag sequences for each
    of them (``joint``: find their candidate tags instead, with the model's candidate settings). Each
    sentence's draws are seeded by its words, so they do not depend on the other sentences tagged with it."""
    tagger = entry.pipeline.tagger
    if tagger is None:
        return Tagging([[] for _ in sents])
    found = Tagging([], labels=tuple(tagger.upos_labels))
    joint_candidates = (CandidateSettings.resolve(entry.manifest), found.candidates) if joint else None
    found.draws = entry.pipeline.tag_and_sample(sents, samples=samples, upos_probs=found.upos_probs,
                                                upos_marginals=found.upos_marginals, candidates=joint_candidates)[1]
    return found


_WORD_ESTIMATE = re.compile(r"\w+|[^\w\s]")


def estimated_words(req: ParseRequest) -> int:
    """The request's words, counted cheaply before any parsing (admission control): exact for ``tokens``
    and ``conllu``; for ``text``, runs of letters and digits plus punctuation marks, close to what the
    tokenizer makes of it."""
    if req.tokens is not None:
        return sum(len(words) for words in req.tokens)
    if req.conllu is not None:
        return sum(1 for line in req.conllu.splitlines() if line[:1].isdigit() and line.split("\t", 1)[0].isdigit())
    return len(_WORD_ESTIMATE.findall(req.text or ""))


def checked_sentences(req: ParseRequest, entry: ModelEntry, settings: Settings,
                      max_words: int | None = None) -> list[Sentence]:
    """The request's sentences (not tagged yet), checked against the model's needs and the service limits."""
    max_words = max_words or settings.max_words
    for name in ("tags", "xpos"):
        if getattr(req, name) is not None and req.tokens is None:
            given = "text" if req.text is not None else "conllu"
            raise _invalid(f"{name} go with tokens (one list per sentence of tokens); with {given} the model "
                           f"tags the words itself" + (" (or give them in the CoNLL-U columns)"
                                                       if given == "conllu" else ""), name)
    if "blank_line" in req.model_fields_set and req.text is None:
        raise _invalid("blank_line goes with text (it says what a blank line in the text starts)", "blank_line")
    if req.text is not None:
        sents = from_text(req.text, entry, settings, max_words, req.blank_line)
    elif req.tokens is not None:
        sents = _from_tokens(req, entry, settings, max_words)
    else:
        sents = _from_conllu(req, entry, settings, max_words)
    field = "text" if req.text is not None else "tokens" if req.tokens is not None else "conllu"
    check_request_words(sum(s.n for s in sents), field, settings)
    return sents


def from_text(text: str, entry: ModelEntry, settings: Settings, max_words: int,
               blank_line: str) -> list[Sentence]:
    if not entry.has_tokenizer:
        raise ProblemError(422, "No tokenizer", f"model {entry.name!r} has no tokenizer, so it cannot parse raw "
                           "text; send `tokens` (with `tags`) or `conllu`", kind="no-tokenizer", field="text",
                           rule="model-capability")
    sents = entry.pipeline.tokenize(text, blank_line)
    if not sents:
        raise _invalid("text holds no words", "text")
    for i, s in enumerate(sents):
        for j, form in enumerate(s.forms):
            if len(form) > MAX_FORM_CHARS:
                raise _invalid(f"word {j} of sentence {i} is longer than {MAX_FORM_CHARS} characters", "text",
                               "text-tokens", sentence=i, word=j)
    if len(sents) > settings.max_sentences:
        raise _invalid(f"text has {len(sents)} sentences; at most {settings.max_sentences} per request", "text",
                       "text-tokens")
    for i, s in enumerate(sents):
        if s.n > max_words:
            raise _invalid(f"sentence {i} has {s.n} words; at most {max_words}", "text", "text-tokens", sentence=i)
    return sents


def check_tokens(tokens: list[list[str]], settings: Settings, max_words: int, rule: str | None = None) -> None:
    """The limits and word rules of ``tokens``: sentences per request, words per sentence (``rule``: the rule
    beyond the schema a lower limit than the schema's is), each word's form."""
    if not tokens:
        raise _invalid("tokens holds no sentences", "tokens")
    if len(tokens) > settings.max_sentences:
        raise _invalid(f"{len(tokens)} sentences; at most {settings.max_sentences} per request", "tokens")
    for i, words in enumerate(tokens):
        if not words:
            raise _invalid(f"sentence {i} has no words", "tokens", sentence=i)
        if len(words) > max_words:
            raise _invalid(f"sentence {i} has {len(words)} words; at most {max_words}", "tokens", rule, sentence=i)
        _check_words(words, "tokens", i)


def check_request_words(total: int, field: str, settings: Settings) -> None:
    """At most ``max_request_words`` words in a request."""
    if total > settings.max_request_words:
        raise _invalid(f"the request has {total} words; at most {settings.max_request_words} per request "
                       "(send the rest in further requests)", field, "request-words")


def _from_tokens(req: ParseRequest, entry: ModelEntry, settings: Settings, max_words: int) -> list[Sentence]:
    assert req.tokens is not None
    tokens = req.tokens
    check_tokens(tokens, settings, max_words)
    tags = _per_sentence(req.tags, "tags", tokens)
    xpos = _per_sentence(req.xpos, "xpos", tokens)
    if tags is not None:
        _check_tags(tags)
    if tags is None and entry.needs_tags:
        raise ProblemError(422, "Tags needed", f"model {entry.name!r} has no tagger: send `tags` (UPOS per "
                           "word), or `conllu` with the UPOS column filled", kind="tags-needed", field="tags",
                           rule="model-capability")
    text = "".join(_block(w, tags[i] if tags else ["_"] * len(w), xpos[i] if xpos else ["_"] * len(w))
                   for i, w in enumerate(tokens))
    return read_conllu(io.StringIO(text), name="tokens", strict_heads=False)


def _from_conllu(req: ParseRequest, entry: ModelEntry, settings: Settings, max_words: int) -> list[Sentence]:
    assert req.conllu is not None
    try:
        sents = read_conllu(io.StringIO(req.conllu), name="conllu", strict_heads=False)
    except ConlluError as e:
        raise ProblemError(422, "Invalid CoNLL-U", e.problem, kind="invalid-conllu", field="conllu",
                           rule="conllu", line=e.line) from e
    if not sents:
        raise _invalid("conllu holds no sentences", "conllu", "conllu")
    if len(sents) > settings.max_sentences:
        raise _invalid(f"{len(sents)} sentences; at most {settings.max_sentences} per request", "conllu", "conllu")
    for i, s in enumerate(sents):
        if s.n == 0:
            raise _invalid(f"sentence {i} (line {s.start_line}) has no words", "conllu", "conllu", sentence=i,
                           line=s.start_line)
        if s.n > max_words:
            raise _invalid(f"sentence {i} has {s.n} words; at most {max_words}", "conllu", "conllu", sentence=i,
                           line=s.start_line)
    if entry.needs_tags:
        for i, s in enumerate(sents):
            if all(u == "_" for u in s.upos):
                raise ProblemError(422, "Tags needed", f"sentence {i} has no UPOS tags and model {entry.name!r} "
                                   "has no tagger: fill the UPOS column", kind="tags-needed",
                                   field="conllu", rule="model-capability", sentence=i, line=s.start_line)
    return sents
