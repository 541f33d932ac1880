"""Request and response schemas of the HTTP API (separate from the engine's internal types).

Field descriptions and bounds here are what ``/docs`` and ``/openapi.json`` show. Limits that depend on
the settings (words per sentence, sentences per request) are checked again in ``service.inputs``.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from annotated_types import Ge, Le
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, JsonValue, model_validator

from engine.inference.settings import method_settings
from engine.pipeline import MAX_TAG_SAMPLES

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
        None, description="BP iterations (bp; relaxed: at most this many per "
        f"round). Default: the model's, else {_BP['iterations'].default} for bp and "
        f"{_RELAXED['iterations'].default} per round for relaxed")
    epsilon: float | None = Field(None, ge=_RELAXED["epsilon"].spec.minimum, allow_inf_nan=False,
                                  description="gain threshold of relaxed inference (default: the model's, else "
                                  f"{_RELAXED['epsilon'].default:g})")
    rounds: Annotated[int, Ge(_RELAXED["rounds"].spec.minimum), BeforeValidator(_integral)] | None = Field(
        None, description="relaxed: at most this many "
                               "rounds of adding factors (default: the model's, else until no factor's gain "
                               "exceeds epsilon; null: no limit)")
    tag_samples: Annotated[int, Ge(0), Le(MAX_TAG_SAMPLES), BeforeValidator(_integral)] | None = Field(
        None, description="sentences tagged by the model: average the arc "
        "marginals and the label distributions over the best tags and this many tag sequences drawn from the "
        "tagger's posterior (head and label probabilities that account for tagging uncertainty; one more parse "
        "per distinct sequence; /parse and "
        "/marginals only; at most the service's max_tag_samples). Default: the model's (GET /models), 0 on the "
        "other routes")


INPUTS: dict[str, JsonValue] = {"text": {"type": "string"}, "tokens": {"type": "array"}, "conllu": {"type": "string"}}
"""The three ways to give the sentences; a request gives exactly one of them (and not as null)."""
ONE_INPUT: list[JsonValue] = [{"required": [name], "properties": {name: schema}} for name, schema in INPUTS.items()]
"""``oneOf`` of the request schemas: ``{}`` and two inputs at once are invalid in the schema as they are in
``ParseRequest._one_input`` (a branch holds when its input is present and not null)."""


class ParseRequest(BaseModel):
    """Exactly one of ``text``, ``tokens`` or ``conllu``."""

    model_config = ConfigDict(extra="forbid", strict=True, json_schema_extra={"oneOf": ONE_INPUT, "examples": [{
        "tokens": [["The", "parser", "tells", "you", "how", "sure", "it", "is", "."]],
        "tags": [["DET", "NOUN", "VERB", "PRON", "ADV", "ADJ", "PRON", "AUX", "PUNCT"]],
    }]})

    text: str | None = Field(None, max_length=100_000, description="raw text: split into sentences and tokens "
                             "and tagged by the model (needs a model with a tokenizer)")
    tokens: list[list[str]] | None = Field(None, description="pre-tokenised sentences, each a list of words")
    conllu: str | None = Field(None, max_length=1_000_000, description="CoNLL-U; HEAD and DEPREL are ignored")
    tags: list[list[str]] | None = Field(None, description="UPOS per word of each sentence (optional when the "
                                         "model has a tagger; needed otherwise unless the CoNLL-U has them)")
    xpos: list[list[str]] | None = Field(None, description="language-specific tags per word (optional; the "
                                         "shipped English models are about 3 UAS points better with PTB tags)")
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


class KBestRequest(ParseRequest):
    k: Integer = Field(10, ge=1, le=100, description="number of trees per sentence")


class SampleRequest(ParseRequest):
    n: Integer = Field(10, ge=1, le=1000, description="number of sampled trees per sentence")
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


class ParsedSentenceOut(BaseModel):
    tokens: list[Token]
    inference: InferenceReport


class ParseResponse(BaseModel):
    model: ModelRef
    sentences: list[ParsedSentenceOut]


class MarginalsSentence(BaseModel):
    forms: list[str]
    marginals: list[list[float]] = Field(description="marginals[m-1][h] = p(head of word m is h), h = 0 is ROOT")


class MarginalsResponse(BaseModel):
    model: ModelRef
    sentences: list[MarginalsSentence]


class ConfidenceToken(BaseModel):
    id: int
    form: str
    head: int
    prob: float
    lower: float
    upper: float


class ConfidenceSentence(BaseModel):
    eta: float = Field(description="Riedel & Smith Proposition 2 bound from the factors left out (0: none)")
    kl_bound: float
    method: str
    covers: str = Field(description="what the interval accounts for")
    tokens: list[ConfidenceToken]


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
    default_tag_samples: int = Field(0, description="inference.tag_samples of /parse and /marginals when a request "
                                     "does not give it")


class ModelsResponse(BaseModel):
    default: str
    models: list[ModelInfo]


class JobAccepted(BaseModel):
    id: str
    status: str


class JobOut(BaseModel):
    id: str
    status: Literal["queued", "running", "succeeded", "failed", "cancelled"]
    progress: float
    stage: str | None = None
    metrics: dict[str, Any] | None = None
    model: ModelRef | None = None
    error: str | None = None
    config: dict[str, Any] | None = None
    created: str | None = None
    updated: str | None = None


class JobsResponse(BaseModel):
    jobs: list[JobOut]


class Problem(BaseModel):
    """RFC 9457 problem details; extra members name the offending field, sentence or line."""

    model_config = ConfigDict(extra="allow")

    type: str
    title: str
    status: int
    detail: str
