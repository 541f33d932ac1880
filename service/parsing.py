"""Engine calls behind the endpoints: sentences -> inference -> parse results -> JSON-ready dicts.

Everything here is synchronous CPU work; the app runs it in worker threads (``service.admission``) so the
event loop never blocks. Every float leaving here is checked finite (no NaN or inf reaches a client).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from engine.bp_parser import BPParser
from engine.data.conllu_io import Sentence, format_sentence
from engine.decode.calibration import calibrated_all, confidence_comments, model_probabilities
from engine.decode.conformal import word_sets
from engine.decode.joint_tags import write_chosen_tags
from engine.decode.tag_marginal import TagSequence, parse_over_tag_samples, resolve_tag_average
from engine.features.tag_mixture import TagMixture
from engine.inference.relaxed import InferenceConfig, marginal_interval
from engine.inference.settings import method_settings, resolve
from engine.pipeline import Pipeline
from engine.results import ParsedSentence
from engine.text.tag_candidates import TagCandidates
from service.inputs import Tagging
from service.problems import ProblemError
from service.registry import ModelEntry
from service.schemas import InferenceOptions


def resolve_tags(entry: ModelEntry, options: InferenceOptions) -> str:
    """The request's ``tag_average``, else the model's default where it can run with the request's method and
    tag samples (``engine.decode.tag_marginal.resolve_tag_average``); a 422 for joint tags that cannot."""
    try:
        return resolve_tag_average(options.tag_average, entry.pipeline.default_tag_average,
                                   resolve_method(entry, options), options.tag_samples or 0)
    except ValueError as e:
        raise ProblemError(422, "Invalid input", str(e), kind="invalid-input", field="inference.tag_average",
                           rule="joint-tags") from e


def resolve_method(entry: ModelEntry, options: InferenceOptions) -> str:
    method = options.method or entry.default_method
    if method == "exact" and entry.order != 1:
        raise ProblemError(422, "Inference not available", f"model {entry.name!r} has higher-order factors: exact "
                           "inference is only available for first-order models; use method bp",
                           kind="not-available", field="inference.method", rule="model-capability")
    return method


def run_inference(entry: ModelEntry, sentences: list[Sentence], options: InferenceOptions,
                  draws: Sequence[Sequence[TagSequence]],
                  candidates: dict[int, TagCandidates] | None = None) -> list[ParsedSentence]:
    """Parse ``sentences``; those with tag ``draws`` (from the model's tagger) are also parsed under them and
    their marginals averaged (``engine.decode.tag_marginal``). Given ``candidates`` (joint tags: ``resolve_tags``
    gave joint), the sentences with candidates (by index) are tagged and parsed together (``BPParser.parse``)
    and the tags chosen written into them."""
    powers = None if options.calibration == "none" else entry.pipeline.default_powers
    if candidates is not None:
        parsed = _infer(entry, sentences, options, candidates=[candidates.get(i) for i in range(len(sentences))])
        write_chosen_tags(sentences, parsed)
        return calibrated_all(parsed, powers)
    parsed = parse_over_tag_samples(
        sentences, draws, lambda batch: _infer(entry, batch, options), entry.parser.constraint, entry.parser.labeler,
        lambda copies, mixtures=None: _infer(entry, copies, options, labels=False, mixtures=mixtures),
        average=resolve_tags(entry, options))
    return calibrated_all(parsed, powers)


def _infer(entry: ModelEntry, sentences: list[Sentence], options: InferenceOptions, labels: bool = True,
           mixtures: Sequence[TagMixture | None] | None = None,
           candidates: Sequence[TagCandidates | None] | None = None) -> list[ParsedSentence]:
    method = resolve_method(entry, options)
    if method == "exact":
        assert not isinstance(entry.parser, BPParser)
        parsed = entry.parser.parse(sentences, labels=labels, mixtures=mixtures)
        for p in parsed:
            p.diagnostics = {"method": "exact", "iterations": None, "converged": True, "residual": None}
        return parsed
    return entry.bp_parser().parse(sentences, inference_config(entry, method, options), labels=labels,
                                   mixtures=mixtures, candidates=candidates)


def inference_config(entry: ModelEntry, method: str, options: InferenceOptions) -> InferenceConfig:
    """The config of a BP-based ``method``: the request's values where it gave them, else the model's, else the
    method's defaults (``engine.inference.settings``, as on the command line)."""
    table = method_settings(method)
    given = {name: getattr(options, name) for name in options.model_fields_set & set(table)
             if getattr(options, name) is not None or table[name].spec.optional}
    try:
        return resolve(method, entry.manifest, given)
    except ValueError as e:
        raise ProblemError(422, "Invalid input", str(e), kind="invalid-input", field="inference") from e


def _finite(values: np.ndarray, what: str) -> list[Any]:
    if not np.all(np.isfinite(values)):
        raise ProblemError(500, "Numerical failure", f"{what} were not finite; please report the input",
                           kind="numerical-failure")
    return values.tolist()


def inference_report(p: ParsedSentence) -> dict[str, Any]:
    d = p.diagnostics or {}
    report = {"method": d.get("method", "exact"), "iterations": d.get("iterations"),
              "converged": bool(d.get("converged", True))}
    for key in ("residual", "rounds", "factor_fraction", "eta"):
        value = d.get(key)
        report[key] = value if value is None or math.isfinite(value) else None
    report["tag_samples"] = int(d.get("tag_samples", 0))
    return report


def fill_morphology(pipeline: Pipeline, sentences: list[Sentence], parsed: list[ParsedSentence]) -> None:
    """LEMMA and FEATS of the model's lemmatizer and morphological tagger (``Pipeline.analyse``) put into
    ``s.lemmas``/``s.feats`` of each sentence whose column is ``_`` throughout (text, tokens, CoNLL-U without
    them; as on the command line), and the probability of each predicted bundle into
    ``p.diagnostics["feats_probs"]``; nothing for a model without these components."""
    if pipeline.lemmatizer is None and pipeline.morph is None:
        return
    for s, p, (lemmas, feats, probs) in zip(sentences, parsed, pipeline.analyse(sentences, [p.deprels for p in parsed]),
                                            strict=True):
        if lemmas is not None and all(x == "_" for x in s.lemmas):
            s.lemmas = list(lemmas)
        if feats is not None and all(x == "_" for x in s.feats):
            s.feats = list(feats)
            p.diagnostics = {**(p.diagnostics or {}), "feats_probs": probs}


def attach_tag_probabilities(parsed: list[ParsedSentence], tagging: Tagging) -> None:
    """Each sentence the model tagged gets its chosen UPOS tags' probabilities (``upos_probs``) and its whole tag
    marginal matrix (``diagnostics["upos_marginals"]``, with the labels) from the tagger, unless its inference
    set them (joint tags: from the tag beliefs, ``engine.decode.joint_tags``)."""
    for i, p in enumerate(parsed):
        if i in tagging.upos_probs and p.upos_probs is None:
            p.upos_probs = tagging.upos_probs[i]
        if i in tagging.upos_marginals and "upos_marginals" not in (p.diagnostics or {}):
            p.diagnostics = {**(p.diagnostics or {}), "upos_marginals": (tagging.labels, tagging.upos_marginals[i])}


def _upos_probs(p: ParsedSentence, n: int) -> list[float | None]:
    """The probability of each word's UPOS: the model's for the words it tagged, None for given tags."""
    return [None] * n if p.upos_probs is None else _finite(np.clip(p.upos_probs, 0.0, 1.0), "tag probabilities")


def parse_json(sentences: list[Sentence], parsed: list[ParsedSentence]) -> list[dict[str, Any]]:
    out = []
    for s, p in zip(sentences, parsed, strict=True):
        probs = _finite(p.head_probs, "head marginals")
        label_probs = _finite(np.asarray(p.label_probs, dtype=float), "label probabilities")
        feats_probs = (p.diagnostics or {}).get("feats_probs")
        upos_probs = _upos_probs(p, s.n)
        tokens = [{"id": j + 1, "form": s.forms[j], "lemma": s.lemmas[j], "upos": s.upos[j], "xpos": s.xpos[j],
                   "feats": s.feats[j], "head": int(p.heads[j + 1]), "deprel": p.deprels[j], "prob": probs[j],
                   "deprel_prob": label_probs[j], "upos_prob": upos_probs[j],
                   "feats_prob": None if feats_probs is None else feats_probs[j]}
                  for j in range(s.n)]
        out.append({"tokens": tokens, "inference": inference_report(p), **sentence_confidence(p)})
    return out


def sentence_confidence(p: ParsedSentence) -> dict[str, Any]:
    """``p_tree`` (the probability that the sentence's heads are all right: exact or estimated, ``p_tree_source``)
    and ``expected_errors`` (``engine.decode.calibration.calibrated`` puts them in the diagnostics)."""
    d = p.diagnostics or {}
    values = _finite(np.array([d.get("p_tree", 0.0), d.get("expected_errors", 0.0)]), "sentence confidences")
    return {"p_tree": values[0], "p_tree_source": str(d.get("p_tree_source", "estimate")),
            "expected_errors": values[1]}


def parse_conllu(sentences: list[Sentence], parsed: list[ParsedSentence]) -> str:
    """CoNLL-U with HEAD, DEPREL, HeadProb in MISC, the tags, LEMMA and FEATS the model predicted (input values
    kept) and each sentence's ``p_tree`` and ``expected_errors`` as comments."""
    blocks = []
    for s, p in zip(sentences, parsed, strict=True):
        columns = [s.lines[i].split("\t") for i in s.word_line_index]
        retagged = [c[3] for c in columns] != s.upos or [c[4] for c in columns] != s.xpos
        lemmas = s.lemmas if [c[2] for c in columns] != s.lemmas else None
        feats = s.feats if [c[5] for c in columns] != s.feats else None
        text = format_sentence(s, heads=p.heads, deprels=p.deprels,
                               misc={"HeadProb": [f"{x:.4f}" for x in p.head_probs]},
                               upos=s.upos if retagged else None, xpos=s.xpos if retagged else None,
                               lemmas=lemmas, feats=feats)
        blocks.append(with_comments(text, confidence_comments(p)))
    return "".join(blocks)


def with_comments(block: str, comments: list[str]) -> str:
    """A sentence block with ``comments`` after its own comment lines."""
    lines = block.split("\n")
    at = next((k for k, line in enumerate(lines) if not line.startswith("#")), 0)
    return "\n".join(lines[:at] + comments + lines[at:])


def marginals_json(sentences: list[Sentence], parsed: list[ParsedSentence], tag_marginals: bool = False
                   ) -> list[dict[str, Any]]:
    """``marginals[m-1][h] = p(head of m = h)``: the engine's (n+1, n+1) matrix, transposed, ROOT row dropped;
    ``upos_prob`` per word (None for given tags); with ``tag_marginals``, each word's whole UPOS distribution
    (``{tag: p}``, None for a sentence that came with its tags): the tagger's, or under joint tags the tag
    beliefs' (``engine.decode.joint_tags``), whose chosen entry is ``upos_prob``."""
    out = []
    for s, p in zip(sentences, parsed, strict=True):
        rows = np.clip(p.marginals[:, 1:].T, 0.0, 1.0)
        rows = rows / rows.sum(axis=1, keepdims=True)
        item: dict[str, Any] = {"forms": list(s.forms), "marginals": _finite(rows, "marginals"),
                                "upos_prob": _upos_probs(p, s.n)}
        if tag_marginals:
            found = (p.diagnostics or {}).get("upos_marginals")
            item["tag_marginals"] = None if found is None else [
                dict(zip(found[0], _finite(np.clip(row, 0.0, 1.0), "tag marginals"), strict=True)) for row in found[1]]
        out.append(item)
    return out


def model_marginals(p: ParsedSentence) -> np.ndarray:
    """The chosen heads' marginals before the model's head calibration (``model_probabilities``)."""
    return model_probabilities(p)[0]


_COVERS = {
    "exact": "exact marginals of the model",
    "bp": "factors left out of the graph (none); not BP's own approximation error",
    "relaxed": "the higher-order factors relaxed inference left out of the graph (Prop. 2 with BP's beliefs in "
               "place of the sub-graph's exact marginals, and p(both links) taken as the product of their beliefs); "
               "not BP's own approximation error",
}


def confidence_json(sentences: list[Sentence], parsed: list[ParsedSentence]) -> list[dict[str, Any]]:
    """Riedel & Smith (2010) Proposition 2: with eta the bound from the factors left out of the graph
    (``engine.inference.relaxed``), the full model's marginal mu lies in [mu' - (e^eta - 1)(1 - mu'),
    mu' + (e^eta - 1) mu'] clipped to [0, 1] (the paper prints the lower end as mu' - (e^eta - 1) mu', which
    its proof does not support; see ``marginal_interval``).

    Exact inference and full BP leave no factor out, so eta = 0 and the interval is the point mu'. Relaxed
    inference reports its eta. For BP the interval does not cover BP's own approximation error, which
    ``covers`` states. Averaged over tag samples (``parse_over_tag_samples``, as on ``/parse``), mu' is the
    averaged marginal and eta the largest of the taggings' (``engine.decode.tag_marginal``).

    The interval bounds the model's own marginal: it is computed around ``model_prob``, the marginal before the
    model's calibration (``engine.decode.calibration``; ``prob`` is the calibrated one, equal to it when the
    model has no head power or the request asked ``calibration: none``). An interval that covers [0, 1] says
    nothing and is marked ``vacuous`` (per sentence, ``vacuous_share``).
    """
    out = []
    for s, p in zip(sentences, parsed, strict=True):
        diag = p.diagnostics or {}
        method = diag.get("method", "exact")
        eta = float(diag.get("eta", 0.0))
        probs = np.asarray(p.head_probs, dtype=float)
        raw = model_marginals(p)
        lower, upper = marginal_interval(raw, eta)
        vacuous = (lower <= 0.0) & (upper >= 1.0)
        pr, mp, lo, up = (_finite(a, "confidence intervals") for a in (probs, raw, lower, upper))
        (eta_out,) = _finite(np.array([eta]), "the bound eta")
        tokens = [{"id": j + 1, "form": s.forms[j], "head": int(p.heads[j + 1]), "prob": pr[j], "lower": lo[j],
                   "upper": up[j], "model_prob": mp[j], "vacuous": bool(vacuous[j])} for j in range(s.n)]
        out.append({"eta": eta_out, "kl_bound": eta_out, "method": method, "covers": _COVERS.get(method, _COVERS["bp"]),
                    "tag_samples": int(diag.get("tag_samples", 0)), "tokens": tokens,
                    "vacuous_share": float(vacuous.mean()) if s.n else 0.0, **sentence_confidence(p)})
    return out


def with_sets(out: list[dict[str, Any]], sentences: list[Sentence], parsed: list[ParsedSentence], labeler: Any,
              conformal: dict[str, Any], alpha: float) -> list[dict[str, Any]]:
    """``confidence_json``'s sentences with each token's conformal ``head_set``, ``head_set_prob`` and
    ``deprel_set`` at level ``alpha`` (``engine.decode.conformal``; ``deprel_set`` when the model stores label
    thresholds)."""
    for sentence, s, p in zip(out, sentences, parsed, strict=True):
        heads, mass, labels = word_sets(p, s, labeler, conformal, alpha)
        for j, token in enumerate(sentence["tokens"]):
            token["head_set"] = heads[j]
            token["head_set_prob"] = _finite(np.array([mass[j]]), "head set probabilities")[0]
            if labels is not None:
                token["deprel_set"] = labels[j]
    return out


def trees_json(sentences: list[Sentence], parsed: list[ParsedSentence], *, k: int | None = None,
               n: int | None = None, seed: int | None = None) -> list[dict[str, Any]]:
    """k-best trees (sorted by log-probability, best first) or ``n`` samples of each sentence's distribution."""
    out = []
    for i, (s, p) in enumerate(zip(sentences, parsed, strict=True)):
        dist = p.distribution
        if dist is None:
            raise ProblemError(422, "Inference not available", "k-best and sampling need a tree distribution: "
                               "exact inference or BP with a TREE factor", kind="not-available", sentence=i)
        if k is not None:
            trees = dist.kbest(k)
        else:
            trees = dist.sample(n or 1, None if seed is None else seed + i)
        items: list[dict[str, Any]] = [{"heads": [int(h) for h in heads[1:]], "log_prob": float(lp)}
                                       for lp, heads in trees]
        if any(not math.isfinite(t["log_prob"]) for t in items):
            raise ProblemError(500, "Numerical failure", "a tree's log-probability was not finite",
                               kind="numerical-failure")
        out.append({"forms": list(s.forms), "trees": items, "distribution": dist.source})
    return out
