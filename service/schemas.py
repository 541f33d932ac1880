"""Request and response schemas of the HTTP API (separate from the engine's internal types).

Field descriptions and bounds here are what ``/docs`` and ``/openapi.json`` show. Limits that depend on
the settings (words per sentence, sentences per request) are checked again in ``service.inputs``.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, cast, get_args

from annotated_types import Ge, Le
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, JsonValue, WithJsonSchema, model_validator

from engine.decode.conformal import ALPHA_MIN
from engine.features.extract import UPOS_TAGS
from engine.inference.settings import method_settings
from engine.pipeline import MAX_TAG_SAMPLES
from engine.text.layout import BLANK_LINE_MARKS, DEFAULT_BLANK_LINE, IGNORED
from service.constituency_schemas import ConstituencySentence, SpansSentence

MODEL_REF = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}(@[0-9]{1,9})?$"
"""A model reference: a name, optionally ``@version`` (``my-model@2``); the newest version by default."""


_BP, _RELAXED = method_settings("bp"), method_settings("relaxed")  # declared beside the algorithms


def _integral(value: Any) -> Any:
    """``5.0`` -> ``5``: JSON Schema counts a number without a fractional part as an integer, so the documented
    ``"type": "integer"`` admits it; other values go on to the strict check ("5", true, 5.5: 422)."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


Integer = Annotated[int, BeforeValidator(_integral)]
"""An integer request field (strict: no strings or booleans), given as ``5`` or ``5.0``."""


class InferenceOptions(BaseModel):
    """Per-request inference settings: a value left out is the model's (manifest ``inference.<method>``), else
    the method's default (``engine.inference.settings``); the lower bounds are the engine's, the upper ones the
    service's limits (``service.settings``), checked with the request."""

    model_config = ConfigDict(extra="forbid", strict=True)  # "5" or true for a number: 422, not coerced

    method: Literal["exact", "bp", "relaxed"] | None = Field(
        None, description="exact: Matrix-Tree / inside-outside (first-order models only); bp: loopy belief "
        "propagation (Smith & Eisner 2008) over every factor; relaxed: Riedel & Smith 2010 Algorithm 1, BP over "
        "the higher-order factors whose gain exceeds epsilon, with the bound eta of what was left out. "
        "Default: exact for first-order models, bp for higher-order ones.")
    # an optional integer's bounds go on the int, before the validator: on the union (or after the validator) they
    # would reach the schema as "ge" instead of JSON Schema's "minimum"
    iterations: Annotated[int, Ge(_BP["iterations"].spec.minimum), BeforeValidator(_integral)] | None = Field(
        None, json_schema_extra={"x-limit": "max_iterations"}, description="BP iterations (bp; relaxed: at most "
        f"this many per round). Default: the model's, else {_BP['iterations'].default} for bp and "
        f"{_RELAXED['iterations'].default} per round for relaxed")
    epsilon: float | None = Field(None, ge=_RELAXED["epsilon"].spec.minimum, allow_inf_nan=False,
                                  description="gain threshold of relaxed inference (default: the model's, else "
                                  f"{_RELAXED['epsilon'].default:g})")
    rounds: Annotated[int, Ge(_RELAXED["rounds"].spec.minimum), BeforeValidator(_integral)] | None = Field(
        None, json_schema_extra={"x-limit": "max_rounds"}, description="relaxed: at most this many "
                               "rounds of adding factors (default: the model's, else until no factor's gain "
                               "exceeds epsilon; null: no limit)")
    tag_samples: Annotated[int, Ge(0), Le(MAX_TAG_SAMPLES), BeforeValidator(_integral)] | None = Field(
        None, json_schema_extra={"x-limit": "max_tag_samples"}, description="sentences tagged by the model: "
        "average the arc marginals and the label distributions over the best tags and this many tag sequences "
        "drawn from the tagger's posterior (head and label probabilities that account for tagging uncertainty; "
        "/parse, /marginals and /confidence only, which then agree on every head and probability; at most the "
        "service's max_tag_samples). Default: the model's (GET /models), 0 on /kbest and /sample")
    tag_average: Literal["marginals", "potentials", "joint"] | None = Field(
        None, description="with tag samples, what is averaged over the tag sequences: marginals (one parse per "
        "distinct sequence) or potentials (one parse per sentence over the factors' potentials averaged across "
        "the sequences; several times faster); joint: no samples, each word's tag is a variable of the BP "
        "parser's factor graph over its candidate tags (Smith & Eisner 2008 §3.4; method bp and tag_samples 0 "
        "only), and upos, upos_prob and tag_marginals come from the tag beliefs. Default: the model's (GET "
        "/models), where it can run (a model's default of joint gives way to potentials with tag samples or "
        "method relaxed)")
    calibration: Literal["model", "none"] | None = Field(
        None, description="model (the default): head probabilities through the calibration fitted for the "
        "model on development data (GET /models: head_power; the trees do not change); none: the raw marginals")


class SingleTaggingOptions(InferenceOptions):
    """The inference options of /kbest and /sample, which need a single tagging: ``tag_samples`` is 0
    (or left out). The route checks it (``service.routes.parsing``: a 422 that says where tag samples are)."""

    tag_samples: Annotated[int, Ge(0), BeforeValidator(_integral),
                           WithJsonSchema({"type": "integer", "minimum": 0, "maximum": 0})] | None = Field(
        None, description="0: k-best and sampled trees need a single tagging (tag samples are on /parse, "
        "/marginals and /confidence)")


MAX_FORM_CHARS = 200
"""Longest word (tokens, xpos, and the words the tokenizer makes of ``text``), in characters."""
WHITESPACE = r"\t\n\x0b\x0c\r\x1c-\x1f \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000"
r"""Python's whitespace (``str.isspace``: what ``str.strip`` removes and the tokenizer drops) as a regex class body,
spelled out because JSON Schema's ``\s`` (ECMA-262) is another set (it has U+FEFF, lacks U+001C-U+001F and U+0085);
``tests/test_service_schema.py`` checks the two agree on every code point."""
WORD_PATTERN = rf"^[^\t\n\r]*[^{WHITESPACE}][^\t\n\r]*$"
"""A word (``tokens``, ``xpos``): not blank, no tab or line break, as ``service.inputs`` checks it."""
TEXT_PATTERN = rf"[^{WHITESPACE}{IGNORED}]"
"""Raw text holds a character that is neither whitespace nor one the tokenizer leaves out
(``engine.text.layout.IGNORED``: soft hyphens, zero-width and bidirectional marks); it makes a word of every other
character."""
UPOS_ENUM: list[JsonValue] = [*UPOS_TAGS, "_"]
"""The UPOS tags every model is trained on, and ``_`` for none (``service.inputs`` names them on a 422)."""

BEYOND_SCHEMA: dict[str, str] = {
    "tags-shape": "tags and xpos have one list per sentence of tokens and one tag per word",
    "text-tokens": "the words the tokenizer makes of text keep the limits of tokens: at most max_sentences "
                   "sentences of at most max_words words (max_words_kbest on /kbest and /sample), each word "
                   f"at most {MAX_FORM_CHARS} characters",
    "conllu": "conllu is CoNLL-U (10 tab-separated columns, IDs 1, 2, ... per sentence) holding at least one "
              "sentence, each with at least one word, within the limits of tokens",
    "request-words": "all sentences together have at most max_request_words words",
    "model-capability": "the model named (or the default) can do what is asked: text needs a tokenizer, tokens "
                        "or CoNLL-U without UPOS need a tagger, method exact needs a first-order model "
                        "(GET /models: components, default_inference), alpha on /confidence needs the model's "
                        "conformal thresholds (head_sets) and its calibration (not inference.calibration none); "
                        "a constituency model (GET /models: formalism) answers /parse and /marginals only, from "
                        "tokens or text (text split by the default model's tokenizer) of at most "
                        "max_words_constituency words per sentence, without tags, xpos, conllu, output conllu, "
                        "inference options or tag_marginals",
    "one-input": "GET /marginals: exactly one of text or tokens; tags and xpos go with tokens",
    "joint-tags": "inference.tag_average joint goes with BP (method bp, or left out for a model whose default is "
                  "bp) and tag_samples 0 (or left out for a model that draws none by default)",
    "job-config": "config is a JSON object valid under the JobConfig schema, naming no shipped model (a training "
                  "job), or with kind 'parse' under the ParseJobConfig fields of docs/http-api.md",
    "treebank": "a training job has a train file; train and dev are UTF-8 CoNLL-U with at least one sentence, a word "
                "in each, a HEAD for every word",
    "parse-job": "a parse job has an input file (CoNLL-U whose first 1000 sentences read and have words, or UTF-8 "
                 "text of at most 64 MiB), a model that exists (GET /models) with a tokenizer for text, and "
                 "tag_samples within max_tag_samples",
    "idempotency-key": "an Idempotency-Key already used is sent again with the same files and config",
}
"""Rules of a valid request that JSON Schema cannot state (they relate two fields, need a grammar or a tokenizer,
or depend on the model named). Each operation lists the ones that apply in ``x-beyond-schema``, and a 422 for
one of them names it in its ``rule`` member; every other 422 means the request broke its JSON Schema."""


def beyond_schema(*rules: str) -> dict[str, Any]:
    """``openapi_extra`` of an operation: the rules beyond its JSON Schema (``BEYOND_SCHEMA``) that apply to it."""
    return {"x-beyond-schema": {rule: BEYOND_SCHEMA[rule] for rule in rules}}


def limit(setting: str, **schema: JsonValue) -> dict[str, JsonValue]:
    """JSON Schema of a bound that the service's settings fix: ``x-limit`` names the setting, and
    ``service.openapi`` adds it to the published document as ``maxItems`` (arrays) or ``maximum`` (numbers)."""
    return {**schema, "x-limit": setting}


def _sentences(item: dict[str, JsonValue], words: str) -> WithJsonSchema:
    """The schema of a list of sentences (at least one), each a list of ``item`` (at most ``words``, a setting)."""
    return WithJsonSchema(limit("max_sentences", type="array", minItems=1,
                                items=limit(words, type="array", minItems=1, items=item)))


WORD: dict[str, JsonValue] = {"type": "string", "minLength": 1, "maxLength": MAX_FORM_CHARS, "pattern": WORD_PATTERN}
UPOS: dict[str, JsonValue] = {"type": "string", "enum": UPOS_ENUM}
MAX_TEXT_CHARS, MAX_QUERY_TEXT_CHARS, MAX_CONLLU_CHARS = 100_000, 10_000, 1_000_000
"""Longest ``text`` (in a body, in the query of GET /marginals) and ``conllu``, in characters."""
TEXT: dict[str, JsonValue] = {"type": "string", "minLength": 1, "maxLength": MAX_TEXT_CHARS, "pattern": TEXT_PATTERN}
CONLLU: dict[str, JsonValue] = {"type": "string", "minLength": 1, "maxLength": MAX_CONLLU_CHARS, "format": "conllu"}
"""``format: conllu`` names the grammar JSON Schema cannot state (``BEYOND_SCHEMA["conllu"]``)."""

INPUTS: dict[str, JsonValue] = {"text": {"type": "string"}, "tokens": {"type": "array"}, "conllu": {"type": "string"}}
"""The three ways to give the sentences; a request gives exactly one of them (and not as null)."""
ONE_INPUT: list[JsonValue] = [{"required": [name], "properties": {name: schema}} for name, schema in INPUTS.items()]
"""``oneOf`` of the request schemas: ``{}`` and two inputs at once are invalid in the schema as they are in
``ParseRequest._one_input`` (a branch holds when its input is present and not null)."""
TAGS_WITH_TOKENS: list[JsonValue] = [{"required": ["tokens"], "properties": {"tokens": INPUTS["tokens"]}},
                                     {"properties": {"tags": {"type": "null"}, "xpos": {"type": "null"}}}]
"""``anyOf`` of the request schemas: ``tags`` and ``xpos`` go with ``tokens`` (``service.inputs``: with text or
CoNLL-U the model tags the words itself, or the CoNLL-U columns hold the tags)."""
BLANK_LINE_WITH_TEXT: list[JsonValue] = [{"required": ["text"], "properties": {"text": INPUTS["text"]}},
                                         {"not": {"required": ["blank_line"]}}]
"""``anyOf`` (in ``allOf``) of the request schemas: ``blank_line`` goes with ``text`` (``service.inputs``)."""


BlankLine = Literal["newpar", "newdoc"]
if get_args(BlankLine) != BLANK_LINE_MARKS:  # the engine's list is the one source; the type spells it for pydantic
    raise ImportError(f"service.schemas.BlankLine is out of step with engine.text.layout: {BLANK_LINE_MARKS}")


class ParseRequest(BaseModel):
    """Exactly one of ``text``, ``tokens`` or ``conllu``. The word rules (not blank, no tab or line break, at most
    ``MAX_FORM_CHARS`` characters, UPOS tags from the UD set) are checked by ``service.inputs``, which names the
    word on a 422; the schema states them."""

    model_config = ConfigDict(extra="forbid", strict=True, json_schema_extra={
        "oneOf": ONE_INPUT, "anyOf": TAGS_WITH_TOKENS, "allOf": [{"anyOf": BLANK_LINE_WITH_TEXT}], "examples": [{
        "tokens": [["The", "parser", "tells", "you", "how", "sure", "it", "is", "."]],
        "tags": [["DET", "NOUN", "VERB", "PRON", "ADV", "ADJ", "PRON", "AUX", "PUNCT"]],
    }]})

    text: Annotated[str, WithJsonSchema(TEXT)] | None = Field(
        None, max_length=MAX_TEXT_CHARS, description="raw text: split into sentences and tokens and tagged by the "
        "model (needs a model with a tokenizer)")
    blank_line: BlankLine = Field(cast(BlankLine, DEFAULT_BLANK_LINE), description="with text: what a blank "
                                  "line starts in the CoNLL-U output, a paragraph (# newpar) or a document "
                                  "(# newdoc); a single line break is a space either way (as parse --blank-line)")
    tokens: Annotated[list[list[str]], _sentences(WORD, "max_words")] | None = Field(
        None, description="pre-tokenised sentences, each a list of words")
    conllu: Annotated[str, WithJsonSchema(CONLLU)] | None = Field(
        None, max_length=MAX_CONLLU_CHARS, description="CoNLL-U; HEAD and DEPREL are ignored")
    tags: Annotated[list[list[str]], _sentences(UPOS, "max_words")] | None = Field(
        None, description="UPOS per word of each sentence of tokens (optional when the model has a tagger; "
        "needed otherwise)")
    xpos: Annotated[list[list[str]], _sentences(WORD, "max_words")] | None = Field(
        None, description="language-specific tags per word of each sentence of tokens (optional; the shipped "
        "English models are about 3 UAS points better with PTB tags)")
    model: str | None = Field(None, pattern=MODEL_REF, description="model name (default: the service's default)")
    inference: InferenceOptions = Field(default_factory=InferenceOptions)
    output: Literal["json", "conllu"] = Field("json", description="conllu: text/conllu with HeadProb in MISC")

    @model_validator(mode="after")
    def _one_input(self) -> ParseRequest:
        given = [k for k in INPUTS if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError("give exactly one of text, tokens or conllu" +
                             (f" (got {', '.join(given)})" if given else ""))
        return self


class MarginalsRequest(ParseRequest):
    output: Literal["json"] = Field("json", description="JSON only (CoNLL-U output is on /parse)")
    tag_marginals: bool = Field(False, description="also return each tagged word's whole UPOS distribution "
                                "(`tags` is taken: it gives the input's tags)")


class ConfidenceRequest(MarginalsRequest):
    """The input of /confidence: that of /marginals (tag samples included: /parse's inference), and the level of
    the conformal head and label sets."""

    tag_marginals: Literal[False] = Field(False, description="not on /confidence (see /marginals)")

    alpha: float | None = Field(None, ge=ALPHA_MIN, lt=1, allow_inf_nan=False, description="level of the "
                                "conformal head and label sets (engine.decode.conformal): on words like the dev "
                                "set the model was calibrated on, the true head (label) is in the set with "
                                f"probability >= 1 - alpha. At least {ALPHA_MIN} (the smallest level the model "
                                "stores); levels between the stored ones are answered conservatively. Needs the "
                                "model's thresholds (`python -m engine calibrate`) and its calibration. Default: "
                                "no sets")


class TreesRequest(MarginalsRequest):
    """The input of /kbest and /sample, whose sentences are at most ``max_words_kbest`` words."""

    inference: SingleTaggingOptions = Field(default_factory=SingleTaggingOptions)

    tokens: Annotated[list[list[str]], _sentences(WORD, "max_words_kbest")] | None = Field(
        None, description="pre-tokenised sentences, each a list of words")
    tags: Annotated[list[list[str]], _sentences(UPOS, "max_words_kbest")] | None = Field(
        None, description="UPOS per word of each sentence of tokens (optional when the model has a tagger)")
    xpos: Annotated[list[list[str]], _sentences(WORD, "max_words_kbest")] | None = Field(
        None, description="language-specific tags per word of each sentence of tokens (optional)")


class KBestRequest(TreesRequest):
    k: Integer = Field(10, ge=1, le=100, json_schema_extra={"x-limit": "max_k"},
                       description="number of trees per sentence")


class SampleRequest(TreesRequest):
    n: Integer = Field(10, ge=1, le=1000, json_schema_extra={"x-limit": "max_n"},
                       description="number of sampled trees per sentence")
    seed: Annotated[int, Ge(0), Le(2**32 - 1), BeforeValidator(_integral)] | None = Field(
        None, description="seed for reproducible samples")


class ModelRef(BaseModel):
    name: str
    version: int


class Token(BaseModel):
    id: int
    form: str
    lemma: str = Field("_", description="the input's, else (a sentence given without lemmas) the model's "
                       "lemmatizer's (\"_\" without one)")
    upos: str
    xpos: str
    feats: str = Field("_", description="the input's, else (a sentence given without FEATS) the model's "
                       "morphological features (\"_\" without them)")
    head: int = Field(description="0 = ROOT")
    deprel: str
    prob: float = Field(description="marginal probability of the chosen head")
    deprel_prob: float = Field(description="probability of the label given the arc")
    upos_prob: float | None = Field(None, description="probability of the chosen UPOS (the tagger's marginal, or "
                                    "under joint inference the tag beliefs', calibrated with the model's "
                                    "upos_power); null when the tags were given")
    feats_prob: float | None = Field(None, description="probability of the predicted FEATS bundle (null when "
                                     "FEATS were given or the model has no morphological features)")


class InferenceReport(BaseModel):
    method: str
    iterations: int | None = None
    converged: bool
    residual: float | None = Field(None, description="bp, relaxed: the largest change of an arc belief in BP's "
                                   "last iteration")
    rounds: int | None = Field(None, description="relaxed: rounds of adding factors")
    factor_fraction: float | None = Field(None, description="bp, relaxed: fraction of the higher-order factors "
                                          "in the graph BP ran on")
    eta: float | None = Field(None, description="bp, relaxed: Riedel & Smith Prop. 2 bound from the factors left "
                              "out (0: none)")
    tag_samples: int = Field(0, description="tag sequences from the tagger's posterior the marginals and labels "
                             "were also averaged over (0: the best tags only)")


class SentenceConfidence(BaseModel):
    p_tree: float = Field(description="probability that every head of the sentence's tree is right: exact for "
                          "exact first-order inference over one tagging, else estimated from the calibrated head "
                          "probabilities (product to the model's tree_power, fitted on dev against exact match)")
    p_tree_source: Literal["exact", "estimate"]
    expected_errors: float = Field(description="expected number of wrong heads: sum over words of 1 - prob")


class ParsedSentenceOut(SentenceConfidence):
    tokens: list[Token]
    inference: InferenceReport


class ParseResponse(BaseModel):
    model: ModelRef
    sentences: list[ParsedSentenceOut | ConstituencySentence] = Field(description="dependency models: tokens "
                                                                      "with heads; constituency models: tree "
                                                                      "and constituents")


class MarginalsSentence(BaseModel):
    forms: list[str]
    marginals: list[list[float]] = Field(description="marginals[m-1][h] = p(head of word m is h), h = 0 is ROOT")
    upos_prob: list[float | None] | None = Field(None, description="per word, the probability of its UPOS (null "
                                                 "for given tags)")
    tag_marginals: list[dict[str, float]] | None = Field(None, description="with tag_marginals: per word, the "
                                                         "probability of every UPOS tag (the tagger's, or under "
                                                         "joint inference the tag beliefs'; null when the "
                                                         "sentence came with its tags)")


class MarginalsResponse(BaseModel):
    model: ModelRef
    sentences: list[MarginalsSentence | SpansSentence] = Field(description="dependency models: arc marginals; "
                                                               "constituency models: span marginals")


class ConfidenceToken(BaseModel):
    id: int
    form: str
    head: int
    prob: float
    lower: float
    upper: float
    model_prob: float = Field(description="the model's marginal before calibration: the interval bounds the full "
                              "model's marginal around it (equal to prob when no calibration applies)")
    vacuous: bool = Field(description="the interval covers [0, 1]: it says nothing")
    head_set: list[int] | None = Field(None, description="with alpha: the conformal head set, most probable first")
    head_set_prob: float | None = Field(None, description="with alpha: the head set's total probability")
    deprel_set: list[str] | None = Field(None, description="with alpha: the conformal label set of the arc to "
                                         "the chosen head, most probable first")


class ConfidenceSentence(SentenceConfidence):
    eta: float = Field(description="Riedel & Smith Proposition 2 bound from the factors left out (0: none); "
                       "averaged over tag samples, the largest of the taggings' bounds")
    kl_bound: float
    method: str
    covers: str = Field(description="what the interval accounts for")
    tag_samples: int = Field(0, description="tag sequences the marginals were also averaged over, as on /parse "
                             "(0: the best tags only)")
    tokens: list[ConfidenceToken]
    vacuous_share: float = Field(description="share of the sentence's words whose interval is vacuous")


class ConfidenceResponse(BaseModel):
    model: ModelRef
    sentences: list[ConfidenceSentence]


class Tree(BaseModel):
    heads: list[int] = Field(description="head of words 1..n (0 = ROOT)")
    log_prob: float


class TreesSentence(BaseModel):
    forms: list[str]
    trees: list[Tree]
    distribution: Literal["exact", "bp-tree-factor"]


class TreesResponse(BaseModel):
    model: ModelRef
    sentences: list[TreesSentence]


class ModelInfo(BaseModel):
    name: str
    version: int
    formalism: Literal["dependency", "constituency"] = Field("dependency", description="constituency models "
                                                             "answer /parse and /marginals only")
    created: str | None
    metrics: dict[str, Any] | None
    settings: dict[str, Any]
    alias_of: str | None = None
    components: list[str] = Field(description="tokenizer, tagger, parser, labeler: what the model can do")
    needs_tags: bool
    has_tokenizer: bool
    default_inference: str
    inference_defaults: dict[str, dict[str, Any]] = Field(
        default_factory=dict, description="per inference method, the settings a request that leaves them out gets: "
        "the model's, else the method's defaults")
    default_tag_samples: int = Field(0, description="inference.tag_samples of /parse, /marginals and /confidence "
                                     "when a request does not give it")
    default_tag_average: Literal["marginals", "potentials", "joint"] = Field(
        "marginals", description="inference.tag_average when a request does not give it")
    head_power: float = Field(1.0, description="the calibration of head probabilities fitted for the model "
                              "(p(h|m)^a renormalised per word; 1: none), applied unless inference.calibration "
                              "is none")
    head_sets: bool = Field(False, description="the model stores conformal thresholds: /confidence answers alpha "
                            "with head and label sets")


class InferenceLimits(BaseModel):
    """The largest ``inference`` values a request may give (the service's ``PARSER_MAX_*`` settings; above them
    422): what a client offers its users, read here rather than written into the client a second time."""

    iterations: int = Field(description="inference.iterations")
    rounds: int = Field(description="inference.rounds")
    tag_samples: int = Field(description="inference.tag_samples")


class ModelsResponse(BaseModel):
    default: str
    models: list[ModelInfo]
    limits: InferenceLimits


class JobAccepted(BaseModel):
    id: str
    status: str


class JobOut(BaseModel):
    id: str
    kind: Literal["train", "parse"] = "train"
    status: Literal["queued", "running", "succeeded", "failed", "cancelled"]
    progress: float
    stage: str | None = None
    metrics: dict[str, Any] | None = None
    model: ModelRef | None = None
    error: str | None = None
    config: dict[str, Any] | None = None
    created: str | None = None
    updated: str | None = None
    result: str | None = Field(None, description="a parse job that succeeded: where to GET its parsed CoNLL-U")


class JobsResponse(BaseModel):
    jobs: list[JobOut]


class Problem(BaseModel):
    """RFC 9457 problem details; extra members name the offending field, sentence or line."""

    model_config = ConfigDict(extra="allow")

    type: str
    title: str
    status: int
    detail: str
