"""Parsing under tag uncertainty: arc marginals averaged over tag sequences drawn from the tagger.

With predicted tags, the parser's marginals ``p(h -> m | x, y*)`` condition on the tagger's best sequence
``y*`` as if it were certain. Averaging them over ``y*`` and ``K`` sequences ``y_1..y_K`` drawn from the
tagger's posterior ``p(y | x)`` (``engine.text.tagger.chain_sample``) estimates

    p(h -> m | x) = sum_y p(y | x) p(h -> m | x, y),

the arc marginals of tagging and parsing together, as joint inference would give them (Smith & Eisner 2008,
§3.4, TAG factors), except that the tree does not feed back into the tags. The tree is then the MBR tree
under the averaged marginals (the maximum spanning tree of their sum, Smith & Eisner 2008 §6), labelled
under ``y*``.

Cost: ``K + 1`` parses of each tagged sentence. On EWT dev the shipped pipeline with 8 samples: expected
calibration error of the head probabilities 0.064 -> 0.028, UAS 85.57 -> 85.71, LAS 82.23 -> 82.38
(README, *From raw text*).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from engine.decode.labeler import label_arcs
from engine.decode.mbr import mbr_decode
from engine.inference.exact import TreeConstraint
from engine.parser import ParsedSentence

TagSequence = tuple[list[str], list[str]]  # UPOS, XPOS


def retagged(sentence: Any, tags: TagSequence) -> Any:
    """A shallow copy of ``sentence`` with other UPOS and XPOS."""
    out = copy.copy(sentence)
    out.upos, out.xpos = list(tags[0]), list(tags[1])
    return out


def draw_tag_samples(tagger: Any, sentences: Sequence[Any], indices: Sequence[int], k: int) -> list[list[TagSequence]]:
    """``k`` tag sequences from ``tagger``'s posterior for each sentence in ``indices`` (those it tagged), none
    for the others: the ``samples`` argument of ``parse_over_tag_samples``."""
    draws: list[list[TagSequence]] = [[] for _ in sentences]
    for i, result in zip(indices, tagger.tag([sentences[i] for i in indices], samples=k), strict=True):
        draws[i] = result.samples
    return draws


def parse_over_tag_samples(
    sentences: Sequence[Any],
    samples: Sequence[Sequence[TagSequence]],
    parse: Callable[[list[Any]], list[ParsedSentence]],
    constraint: TreeConstraint,
    labeler: Any,
) -> list[ParsedSentence]:
    """Parse ``sentences`` (tagged with their best tags) and, for each ``samples[i]`` entry, sentence ``i``
    again with those tags; return parses whose marginals are the mean over all of a sentence's parses,
    with the MBR tree under ``constraint`` of that mean and its labels under the sentence's own tags.

    A sentence without samples (e.g. tags given by the user) keeps its single parse. ``parse`` maps a list
    of sentences to their parses (any inference). The result has no tree distribution (``distribution``
    is None): k-best and sampled trees need the single-tagging parse."""
    if len(samples) != len(sentences):
        raise ValueError(f"{len(sentences)} sentences but {len(samples)} sample lists")
    parsed = parse(list(sentences))
    total = [p.marginals.copy() for p in parsed]
    count = [1] * len(sentences)
    rounds = max((len(s) for s in samples), default=0)
    for k in range(rounds):
        chosen = [i for i, s in enumerate(samples) if len(s) > k]
        for i, p in zip(chosen, parse([retagged(sentences[i], samples[i][k]) for i in chosen]), strict=True):
            total[i] += p.marginals
            count[i] += 1
    out = []
    for sentence, first, acc, c in zip(sentences, parsed, total, count, strict=True):
        if c == 1:
            out.append(first)
            continue
        marginals = acc / c
        heads = mbr_decode(marginals, constraint)
        deprels, label_probs = label_arcs(labeler, sentence, heads)
        diagnostics = {**(first.diagnostics or {}), "tag_samples": c - 1}
        out.append(ParsedSentence(heads, marginals[heads[1:], np.arange(1, len(heads))], marginals, None, deprels,
                                  label_probs, diagnostics, None))
    return out
