"""Parsing under tag uncertainty: arc marginals averaged over tag sequences drawn from the tagger.

With predicted tags, the parser's marginals ``p(h -> m | x, y*)`` condition on the tagger's best sequence
``y*`` as if it were certain. Averaging them over ``y*`` and ``K`` sequences ``y_1..y_K`` drawn from the
tagger's posterior ``p(y | x)`` (``engine.text.tagger.chain_sample``) estimates

    p(h -> m | x) = sum_y p(y | x) p(h -> m | x, y),

the arc marginals of tagging and parsing together, as joint inference would give them (Smith & Eisner 2008,
§3.4, TAG factors), except that the tree does not feed back into the tags. The tree is then the MBR tree
under the averaged marginals (the maximum spanning tree of their sum, Smith & Eisner 2008 §6). Its labels
are averaged the same way: each arc's label distribution is the mean of the labeller's distributions
under ``y*`` and each draw (the tree fixed), and the label is its most probable one,

    p(l | h -> m, x) = sum_y p(y | x) p(l | h -> m, x, y).

**Confidence intervals.** Under inference that leaves factors out (relaxed), each tagging ``y`` has its own
bound ``eta_y`` and Riedel & Smith (2010) Proposition 2 puts the full model's marginal in
``[mu'_y - c_y (1 - mu'_y), mu'_y + c_y mu'_y]`` with ``c_y = e^eta_y - 1``. Both ends grow with ``eta_y`` and are
linear in ``mu'_y``, so with ``eta = max_y eta_y`` and ``c = e^eta - 1`` the average of the full model's
marginals lies in ``[mu' - c (1 - mu'), mu' + c mu']`` around the averaged ``mu'`` (clipping to [0, 1] after
averaging only widens it). The averaged parse therefore reports that largest ``eta`` (``diagnostics["eta"]``):
intervals then bound the same averaged marginals the tree and its head probabilities come from.

The draws come from ``engine.pipeline.Pipeline.tag_and_sample`` (in the same pass as the best tags).
Cost: one parse of each tagged sentence per distinct tag sequence among the best one and the ``K`` draws
(at most ``K + 1``; with ``K = 8``, 5.2 per sentence on EWT dev, weighted by length). On EWT dev the
shipped pipeline (its default is ``K = 16``): expected calibration error of the head probabilities
0.062 -> 0.023, UAS 85.86 -> 86.19, LAS 82.57 -> 82.86 with a labeller trained on the best jackknifed tags
and labels under ``y*`` (``K = 8``: 0.027, 86.06, 82.76). Averaging the labels as well gives 82.95 with that
labeller, and 83.07 with the shipped one, which also trained on sentences under tags drawn from the
tagger's posterior (``--labeler-tag-samples``; docs/results/pipeline.md, *Labels under tag uncertainty*).
"""

from __future__ import annotations

import copy
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from engine.decode.labeler import label_arcs, label_distributions
from engine.features.tag_mixture import TagMixture
from engine.kernels.exact import TreeConstraint
from engine.kernels.mbr import mbr_decode
from engine.results import ParsedSentence

TagSequence = tuple[list[str], list[str]]  # UPOS, XPOS


def retagged(sentence: Any, tags: TagSequence) -> Any:
    """A shallow copy of ``sentence`` with other UPOS and XPOS."""
    out = copy.copy(sentence)
    out.upos, out.xpos = list(tags[0]), list(tags[1])
    return out


def with_tag_copies(sentences: Sequence[Any], draws: Sequence[Sequence[TagSequence]]) -> list[Any]:
    """Each sentence followed by its copies under its drawn tag sequences (the labeller's training data with
    ``--labeler-tag-samples``; a sentence and its copies stay next to each other)."""
    return [c for s, d in zip(sentences, draws, strict=True) for c in (s, *(retagged(s, tags) for tags in d))]


# what is averaged over the tag sequences (module docstring); "joint" averages nothing: the tags are variables
# of the parser's factor graph (engine.inference.joint_bp, BPParser.parse_joint) and no sequence is drawn
TAG_AVERAGES = ("marginals", "potentials", "joint")
DEFAULT_TAG_AVERAGE = "marginals"


def check_tag_average(value: object) -> str:
    """``value`` if it names a way of averaging over tag sequences (``TAG_AVERAGES``), else ValueError."""
    if value not in TAG_AVERAGES:
        raise ValueError(f"tag_average must be one of {', '.join(TAG_AVERAGES)}, got {value!r}")
    return str(value)


def resolve_tag_average(given: str | None, default: str, method: str, samples: int) -> str:
    """What a parse averages over tag sequences: the caller's ``given``, else the model's ``default``. Joint
    tagging and parsing runs plain BP and draws no samples: asked for (``given``) with another ``method`` or
    with tag ``samples`` it is a ValueError; a model's default of joint gives way to ``potentials`` (averaging
    over the samples asked for, or over none: the tagger's 1-best tags) where it cannot run."""
    if given is not None:
        check_tag_average(given)
        if given == "joint" and method != "bp":
            raise ValueError(f"tag_average joint runs plain BP over tags and links, not method {method}")
        if given == "joint" and samples:
            raise ValueError("tag_average joint draws no tag samples: give tag_samples 0 or another tag_average")
        return given
    if check_tag_average(default) == "joint" and (method != "bp" or samples):
        return "potentials"
    return default


Weighted = list[tuple[TagSequence, int]]  # distinct tag sequences of one sentence and how often each was drawn


def distinct_draws(sentences: Sequence[Any], samples: Sequence[Sequence[TagSequence]]) -> tuple[list[int],
                                                                                                 list[Weighted]]:
    """Per sentence: the weight of its best tags (1 + the draws equal to them) and its other distinct drawn
    sequences with their counts. A sequence drawn several times is parsed once and weighted by its count
    (parsing is deterministic): on EWT dev 16 draws hold 5.2 distinct sequences besides the best one."""
    best_weight: list[int] = []
    distinct: list[Weighted] = []
    for sentence, draws in zip(sentences, samples, strict=True):
        counts = Counter((tuple(u), tuple(x)) for u, x in draws)
        best_weight.append(1 + counts.pop((tuple(sentence.upos), tuple(sentence.xpos)), 0))
        distinct.append([((list(u), list(x)), c) for (u, x), c in counts.items()])
    return best_weight, distinct


def parse_over_tag_samples(
    sentences: Sequence[Any],
    samples: Sequence[Sequence[TagSequence]],
    parse: Callable[[list[Any]], list[ParsedSentence]],
    constraint: TreeConstraint,
    labeler: Any,
    parse_unlabelled: Callable[..., list[ParsedSentence]] | None = None,
    average: str = DEFAULT_TAG_AVERAGE,
) -> list[ParsedSentence]:
    """Parse ``sentences`` (tagged with their best tags) under their tag ``samples`` too and return parses
    whose marginals are averaged over the best tags and every sample (a sequence drawn ``c`` times counts
    ``c`` times), with labels from the label distributions averaged the same way (the mean over the best
    tags and every sample of ``labeler``'s distributions on the tree).

    ``average="marginals"``: sentence ``i`` is parsed again under each distinct sequence of ``samples[i]``,
    the marginals are the mean of the parses' and the tree is the MBR tree under ``constraint`` of that
    mean. ``average="potentials"``: each sentence is parsed once over its potentials averaged across the
    taggings (``engine.features.tag_mixture``), its tree the parse's own.

    A sentence without samples (e.g. tags given by the user) keeps its single parse; with no samples at all
    this is ``parse(sentences)``. ``parse`` maps a list of sentences to their parses (any inference);
    ``parse_unlabelled(sentences, mixtures=None)``, if given, is the same parse without labels (and, for
    ``potentials``, over the given tag mixtures; required then), used for the sentences that have samples
    and their copies (only their marginals count: the labels come from the averaged distributions). The
    result has no tree distribution (``distribution`` is None): k-best and sampled trees need the
    single-tagging parse."""
    if len(samples) != len(sentences):
        raise ValueError(f"{len(sentences)} sentences but {len(samples)} sample lists")
    if check_tag_average(average) == "joint":
        raise ValueError("joint tags are parsed by BPParser.parse with candidates, not over tag samples")
    best_weight, distinct = distinct_draws(sentences, samples)
    if not any(samples):
        return parse(list(sentences))
    if average == "potentials":
        if parse_unlabelled is None:
            raise ValueError("averaging the potentials needs parse_unlabelled(sentences, mixtures)")
        parsed, total = _parse_mixed(sentences, samples, best_weight, distinct, parse_unlabelled)
        labelled = False
    else:
        parsed, total, labelled = _parse_copies(sentences, samples, best_weight, distinct, parse, parse_unlabelled)
    for sentence, p, draws in zip(sentences, parsed, samples, strict=True):
        if not draws and not labelled:  # keeps this parse as it is: labelled here as ``parse`` would have
            p.deprels, p.label_probs = label_arcs(labeler, sentence, p.heads)
    trees = {i: (parsed[i].heads if average == "potentials" else mbr_decode(total[i] / (1 + len(d)), constraint))
             for i, d in enumerate(samples) if d}
    return _with_averaged_labels(sentences, samples, parsed, total, trees, best_weight, distinct, labeler)


def _parse_copies(sentences: Sequence[Any], samples: Sequence[Sequence[TagSequence]], best_weight: list[int],
                  distinct: list[Weighted], parse: Callable[[list[Any]], list[ParsedSentence]],
                  parse_unlabelled: Callable[..., list[ParsedSentence]] | None,
                  ) -> tuple[list[ParsedSentence], list[np.ndarray], bool]:
    """Marginal averaging: each sentence's parse, the sum of its taggings' marginals weighted by count, and
    whether the parses are labelled."""
    copies = [(i, tags, c) for i, d in enumerate(distinct) for tags, c in d]
    if parse_unlabelled is not None and copies:
        # one call for every sentence followed by its copies: the parser batches sentences of one length
        # together, a sentence next to its copies (which share the scoring of the arcs their tags leave alone,
        # engine.scoring.fused); only the marginals count, labels come from the averaged distributions
        items = [c for i, sentence in enumerate(sentences)
                 for c in (sentence, *(retagged(sentence, tags) for tags, _ in distinct[i]))]
        results = iter(parse_unlabelled(items))
        parsed: list[ParsedSentence] = []
        copy_parses: list[ParsedSentence] = []
        for d in distinct:  # the same order: a sentence, then its copies (``copies`` is in that order too)
            parsed.append(next(results))
            copy_parses.extend(next(results) for _ in d)
    else:
        parsed = parse(list(sentences))
        copy_parses = list((parse_unlabelled or parse)([retagged(sentences[i], tags) for i, tags, _ in copies])
                           if copies else [])
    total = [p.marginals * w for p, w in zip(parsed, best_weight, strict=True)]
    for (i, _, c), cp in zip(copies, copy_parses, strict=True):
        total[i] += c * cp.marginals
    etas: dict[int, list[float]] = {}
    for (i, _, _), cp in zip(copies, copy_parses, strict=True):
        if cp.diagnostics and "eta" in cp.diagnostics:
            etas.setdefault(i, []).append(cp.diagnostics["eta"])
    for i, theirs in etas.items():  # Prop. 2 for the mixture: the largest eta of its parts (module docstring)
        diagnostics = dict(parsed[i].diagnostics or {})
        diagnostics["eta"] = max(([diagnostics["eta"]] if "eta" in diagnostics else []) + theirs)
        if "kl_bound" in diagnostics:
            diagnostics["kl_bound"] = diagnostics["eta"]
        parsed[i].diagnostics = diagnostics
    return parsed, total, not (parse_unlabelled is not None and copies)


def _parse_mixed(sentences: Sequence[Any], samples: Sequence[Sequence[TagSequence]], best_weight: list[int],
                 distinct: list[Weighted], parse_unlabelled: Callable[..., list[ParsedSentence]],
                 ) -> tuple[list[ParsedSentence], list[np.ndarray]]:
    """Potential averaging: one parse per sentence over its taggings' mean potentials; ``total`` is its
    marginals times the number of taggings (as ``_parse_copies`` sums them)."""
    mixtures: list[TagMixture | None] = []
    for sentence, w, d in zip(sentences, best_weight, distinct, strict=True):
        weights = np.array([w, *(c for _, c in d)], dtype=np.float64)
        mixtures.append(TagMixture(tuple(retagged(sentence, tags) for tags, _ in d), weights / weights.sum())
                        if d else None)
    parsed = parse_unlabelled(list(sentences), mixtures=mixtures)
    return parsed, [p.marginals * (1 + len(s)) for p, s in zip(parsed, samples, strict=True)]


def _with_averaged_labels(sentences: Sequence[Any], samples: Sequence[Sequence[TagSequence]],
                          parsed: list[ParsedSentence], total: list[np.ndarray], trees: dict[int, np.ndarray],
                          best_weight: list[int], distinct: list[Weighted], labeler: Any) -> list[ParsedSentence]:
    """The parses of the sentences with samples rebuilt on ``trees``, with the marginals ``total`` / count and
    the labels of the label distributions averaged over the taggings (the others as they are)."""
    jobs: list[tuple[int, Any, np.ndarray, int]] = []  # (sentence, its copy under one tag sequence, tree, count)
    for i, heads in trees.items():
        jobs.append((i, sentences[i], heads, best_weight[i]))
        jobs.extend((i, retagged(sentences[i], tags), heads, n) for tags, n in distinct[i])
    label_sums: dict[int, np.ndarray] = {}
    if jobs and getattr(labeler, "labels", None):
        dists = label_distributions(labeler, [s for _, s, _, _ in jobs], [h for _, _, h, _ in jobs])
        for (i, _, _, n), dist in zip(jobs, dists, strict=True):
            label_sums[i] = label_sums.get(i, 0.0) + n * dist
    out = list(parsed)
    for i, heads in trees.items():
        c = 1 + len(samples[i])
        avg: np.ndarray | None = None
        if i in label_sums:
            avg = label_sums[i] / c
            best = avg.argmax(axis=1)
            deprels, label_probs = [labeler.labels[j] for j in best], avg[np.arange(len(best)), best]
        else:  # a labeller without labels: nothing to average
            deprels, label_probs = label_arcs(labeler, sentences[i], heads)
        marginals = total[i] / c
        diagnostics = {**(parsed[i].diagnostics or {}), "tag_samples": c - 1, "tag_parses": 1 + len(distinct[i])}
        out[i] = ParsedSentence(heads, marginals[heads[1:], np.arange(1, len(heads))], marginals, None, deprels,
                                label_probs, diagnostics, None, label_dists=avg)
    return out
