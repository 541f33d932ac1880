"""A full parsing pipeline: raw text -> sentences and tokens -> UPOS/XPOS -> tree -> labels.

A pipeline model is one model directory: the parser's manifest and arrays, plus every other component's
state under ``manifest["components"][name]`` with its arrays stored as ``<name>.<key>.npy`` (one atomic
write, one checksummed manifest, no pickle). Components:

- ``tokenizer`` (``engine.text.tokenizer.Tokenizer``): sentence splitting, tokens, multiword tokens;
- ``tagger`` (``engine.text.tagger.Tagger``): a linear-chain CRF for UPOS and XPOS;
- ``labeler`` (``engine.decode.loglinear_labeler.LogLinearLabeler``): DEPREL of each arc with its
  probability (without it, the parser's count-based labeller is used);
- ``lemmatizer`` (``engine.text.lemmatizer.Lemmatizer``): LEMMA from the form and the predicted tags;
- ``morph`` (``engine.text.morph.MorphTagger``): FEATS from the form, the tags and the parsed DEPREL.

A model without the last two still loads; LEMMA and FEATS are then left as they came (``_`` for text).

A parser-only model (no ``components``) loads as a pipeline with just the parser, so every model
directory works here.
"""

from __future__ import annotations

import importlib
import io
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from engine.bp_parser import BPParser, load_any
from engine.data.conllu_io import Sentence, read_conllu
from engine.decode.calibration import manifest_calibration
from engine.decode.tag_marginal import DEFAULT_TAG_AVERAGE, TagSequence, check_tag_average
from engine.inference.settings import check_manifest
from engine.model.store import ModelError, load_model
from engine.parser import FirstOrderParser
from engine.text.layout import DEFAULT_BLANK_LINE
from engine.text.tag_candidates import CandidateSettings, TagCandidates

COMPONENTS = ("tokenizer", "tagger", "parser", "labeler", "lemmatizer", "morph")
SAVED_COMPONENTS = tuple(name for name in COMPONENTS if name != "parser")
MAX_TAG_SAMPLES = 100  # a model's default number of tag sequences (manifest ``inference.tag_samples``)


def valid_tag_samples(k: object) -> bool:
    """Whether ``k`` can be a model's default number of tag samples: an integer from 0 to MAX_TAG_SAMPLES."""
    return isinstance(k, int) and not isinstance(k, bool) and 0 <= k <= MAX_TAG_SAMPLES

_CLASSES = {
    "tokenizer": ("engine.text.tokenizer", "Tokenizer"),
    "tagger": ("engine.text.tagger", "Tagger"),
    "labeler": ("engine.decode.loglinear_labeler", "LogLinearLabeler"),
    "lemmatizer": ("engine.text.lemmatizer", "Lemmatizer"),
    "morph": ("engine.text.morph", "MorphTagger"),
}


def component_class(name: str) -> Any:
    module, cls = _CLASSES[name]
    return getattr(importlib.import_module(module), cls)


def untagged(sentence: Sentence) -> bool:
    """True when the sentence carries no UPOS at all (every UPOS is ``_``)."""
    return all(u == "_" for u in sentence.upos)


@dataclass
class Pipeline:
    parser: FirstOrderParser | BPParser
    tokenizer: Any | None = None
    tagger: Any | None = None
    labeler: Any | None = None
    lemmatizer: Any | None = None
    morph: Any | None = None

    def __post_init__(self) -> None:
        # a BP parser with label-aware LINK factors labels with its own role model (engine.scoring.link_labels)
        if self.labeler is not None and getattr(self.parser, "link_labels", None) is None:
            self.parser.labeler = self.labeler

    @property
    def manifest(self) -> dict[str, Any]:
        return self.parser.manifest

    @property
    def default_tag_samples(self) -> int:
        """Tag sequences to average the marginals over when a caller does not say (``engine.decode.tag_marginal``):
        the manifest's ``inference.tag_samples`` for a model with a tagger, else 0 (and 0 for a model whose
        default is joint tagging and parsing, which draws none)."""
        if self.tagger is None or self.default_tag_average == "joint":
            return 0
        return int((self.manifest.get("inference") or {}).get("tag_samples", 0))

    @property
    def default_tag_average(self) -> str:
        """What is averaged over tag samples when a caller does not say (``engine.decode.tag_marginal``): the
        manifest's ``inference.tag_average``, else ``DEFAULT_TAG_AVERAGE``."""
        return str((self.manifest.get("inference") or {}).get("tag_average", DEFAULT_TAG_AVERAGE))

    @property
    def default_head_power(self) -> float:
        """The calibration of head probabilities fitted for this model (``engine.decode.calibration``): the
        manifest's ``inference.head_power``, else 1 (none)."""
        return float(self.default_powers["head_power"])

    @property
    def default_powers(self) -> dict[str, Any]:
        """The calibration fitted for this model (``engine.decode.calibration.manifest_calibration``: the powers
        ``head_power``, ``label_power``, ``tree_power``, 1 (none) for those the manifest does not give, and the
        knots of the isotonic head stage or None); the argument of ``calibrated_all``."""
        return manifest_calibration(self.manifest.get("inference"))

    @property
    def components(self) -> list[str]:
        return [name for name in COMPONENTS if name == "parser" or getattr(self, name) is not None]

    # -- persistence -----------------------------------------------------------------------------
    @classmethod
    def load(cls, directory: str | os.PathLike[str]) -> Pipeline:
        stored = load_model(directory)
        parser = load_any(directory, stored)
        parts: dict[str, Any] = {}
        for name, meta in (stored.manifest.get("components") or {}).items():
            if name not in _CLASSES:
                raise ModelError(f"{directory}: unknown component {name!r} (this engine knows "
                                 f"{', '.join(_CLASSES)})")
            prefix = name + "."
            arrays = {k[len(prefix):]: v for k, v in stored.arrays.items() if k.startswith(prefix)}
            try:
                parts[name] = component_class(name).from_state(meta, arrays)
            except (KeyError, TypeError, ValueError) as e:
                raise ModelError(f"{directory}: component {name!r} cannot be loaded ({e})") from e
        if "component" in (stored.manifest.get("labeler") or {}) and "labeler" not in parts:
            raise ModelError(f"{directory}: the manifest refers to a labeler component that is missing")
        k = (stored.manifest.get("inference") or {}).get("tag_samples", 0)
        if not valid_tag_samples(k):
            raise ModelError(f"{directory}: manifest inference.tag_samples must be an integer from 0 to "
                             f"{MAX_TAG_SAMPLES}, got {k!r}")
        try:
            check_manifest(stored.manifest)
            check_tag_average((stored.manifest.get("inference") or {}).get("tag_average", DEFAULT_TAG_AVERAGE))
            CandidateSettings.resolve(stored.manifest)
            manifest_calibration(stored.manifest.get("inference"))
        except ValueError as e:
            raise ModelError(f"{directory}: {e}") from e
        return cls(parser, **parts)

    def save(self, directory: str | os.PathLike[str], extra: dict[str, Any] | None = None,
             half: bool | None = None) -> None:
        """Write the pipeline as one model directory. ``half`` (default: whenever there is a component
        besides the parser) stores large float arrays as float16: a full EWT pipeline shrinks from 135 to
        85 MB and its dev scores move by less than 0.01 point (``engine.model.store.half_precision``)."""
        components: dict[str, Any] = {}
        arrays: dict[str, np.ndarray] = {}
        for name in SAVED_COMPONENTS:
            part = getattr(self, name)
            if part is None:
                continue
            meta, part_arrays = part.to_state()
            components[name] = meta
            arrays.update({f"{name}.{key}": value for key, value in part_arrays.items()})
        if half is None:
            half = bool(components)
        self.parser.save(directory, {**(extra or {}), "components": components}, arrays, half=half)

    # -- stages ----------------------------------------------------------------------------------
    def tokenize(self, text: str, blank_line: str = DEFAULT_BLANK_LINE) -> list[Sentence]:
        """Raw text -> sentences of words (multiword tokens expanded; ``# text``, ``# newdoc`` / ``# newpar``
        (``blank_line``: what a blank line starts), SpaceAfter and TokenRange kept). The command line's
        ``--input-format text`` and the service's ``text`` field both come here."""
        if self.tokenizer is None:
            raise ModelError("this model has no tokenizer: give tokenised input (CoNLL-U)")
        conllu = self.tokenizer.to_conllu(self.tokenizer.tokenize(text), prefix="", blank_line=blank_line)
        return read_conllu(io.StringIO(conllu), name="<text>", strict_heads=False) if conllu else []

    def tag(self, sentences: Sequence[Sentence], retag: bool = False) -> list[int]:
        """Fill UPOS and XPOS of the sentences that have no UPOS (all of them with ``retag``), in place;
        returns the indices of the sentences tagged. Raises ``ModelError`` if tags are needed and this
        model has no tagger."""
        return self.tag_and_sample(sentences, retag)[0]

    def tag_and_sample(self, sentences: Sequence[Sentence], retag: bool = False, samples: int = 0,
                       upos_probs: dict[int, np.ndarray] | None = None,
                       candidates: tuple[CandidateSettings, dict[int, TagCandidates]] | None = None,
                       upos_marginals: dict[int, np.ndarray] | None = None,
                       ) -> tuple[list[int], list[list[TagSequence]]]:
        """``tag``, and in the same pass ``samples`` (UPOS, XPOS) sequences drawn from the tagger's posterior
        for each sentence it tagged (none for the others): the indices tagged and the ``samples`` argument
        of ``engine.decode.tag_marginal.parse_over_tag_samples``. Given ``upos_probs``, it gets each tagged
        sentence's tagger marginals of its chosen UPOS tags (by index), and ``upos_marginals`` its whole (words,
        UPOS labels) marginal matrix (columns in ``tagger.upos_labels`` order); given ``candidates`` = (settings,
        a dict), the dict gets each tagged sentence's candidate tags for joint parsing (``BPParser.parse``)."""
        draws: list[list[TagSequence]] = [[] for _ in sentences]
        todo = [i for i, s in enumerate(sentences) if retag or untagged(s)]
        if not todo:
            return [], draws
        if self.tagger is None:
            raise ModelError("this model has no tagger: the input needs UPOS tags")
        found = self.tagger.tag([sentences[i] for i in todo], samples=samples,
                                candidates=None if candidates is None else candidates[0])
        for i, result in zip(todo, found, strict=True):
            if candidates is not None and result.candidates is not None:
                candidates[1][i] = result.candidates
            sentences[i].upos = list(result.upos)
            sentences[i].xpos = list(result.xpos)
            draws[i] = result.samples
            if upos_marginals is not None:
                upos_marginals[i] = result.upos_marginals
            if upos_probs is not None:
                column = {tag: k for k, tag in enumerate(self.tagger.upos_labels)}
                upos_probs[i] = result.upos_marginals[np.arange(len(result.upos)),
                                                      [column[t] for t in result.upos]]
        return todo, draws

    def analyse(self, sentences: Sequence[Sentence], deprels: Sequence[Sequence[str]]
                ) -> list[tuple[list[str] | None, list[str] | None, list[float] | None]]:
        """LEMMA, FEATS and the FEATS probabilities of each sentence (None for what this model has no component
        for), from its forms and tags and the ``deprels`` its parse gave. The sentences are not changed."""
        views = [_Analysed(s.forms, s.upos, s.xpos, list(d)) for s, d in zip(sentences, deprels, strict=True)]
        lemmas = self.lemmatizer.lemmatize(views) if self.lemmatizer is not None else [None] * len(views)
        feats = self.morph.analyse(views) if self.morph is not None else [(None, None)] * len(views)
        return [(lem, f, p) for lem, (f, p) in zip(lemmas, feats, strict=True)]


@dataclass
class _Analysed:
    """What the lemmatizer and the morphological tagger read of a parsed sentence."""

    forms: list[str]
    upos: list[str]
    xpos: list[str]
    deprels: list[str]
