"""Tags from the tag beliefs of joint BP (``engine.inference.joint_bp``): minimum Bayes risk per word.

A word's candidates are (UPOS, XPOS) states (``engine.text.tag_candidates``). Its UPOS is the one of
largest belief summed over its candidate states (the MBR choice for UPOS accuracy, as the tagger's
``upos_marginals`` sum its state marginals), and its XPOS the XPOS of its most believed state with that UPOS
(so the two tags agree, as the tagger's states do). The word's UPOS distribution (``upos_marginals``, over the
tagger's UPOS labels, as the tagger's are reported) is one distribution over all of its states: the joint
beliefs on its candidates, scaled to the tagger's marginal mass of the candidates (``TagCandidates.mass``),
plus the tagger's marginals on the states pruning left out (``TagCandidates.pruned``); ``upos_prob`` is the
chosen UPOS's entry. Without the pruned states, a word with one candidate would report probability 1
whatever the tagger gave its other states (on EWT dev the UPOS ECE of the joint tags was 0.039 so, against
the tagger's 0.008).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from engine.results import ParsedSentence
from engine.text.tag_candidates import TagCandidates


def decode_tags(beliefs: np.ndarray, candidates: TagCandidates
                ) -> tuple[list[str], list[str], np.ndarray, np.ndarray]:
    """(UPOS, XPOS, UPOS probability, UPOS distribution (n, U) over ``candidates.upos_labels``) per word from tag
    beliefs (n+1, g) over ``candidates``' slots (row 0 ROOT).

    Each word's UPOS is the one whose candidate slots hold the largest summed belief (ties: the UPOS of the
    earlier slot; slot 0 is the 1-best), its XPOS that of the UPOS's slot of largest belief (ties: the earlier
    slot), every word at once: slots of one UPOS are the slots with one ``slot_upos`` column, and a slot's UPOS
    total adds those slots' beliefs in slot order, as a word-by-word loop adds them (the same float sums)."""
    n, g = candidates.allowed.shape
    allowed = candidates.allowed
    b = np.where(allowed, beliefs[1: n + 1, :g], 0.0)
    dist = candidates.pruned.copy()
    np.add.at(dist, (np.repeat(np.arange(n), g), candidates.slot_upos.reshape(-1)),
              (b * candidates.mass[:, None]).reshape(-1))
    su = candidates.slot_upos
    same = (su[:, :, None] == su[:, None, :]) & allowed[:, :, None] & allowed[:, None, :]  # (n, slot, slot)
    totals = np.where(same, b[:, None, :], 0.0).sum(axis=2)  # per slot, its UPOS's summed belief
    first = same.argmax(axis=2)  # per slot, the first slot of its UPOS
    totals = np.where(allowed, totals, -np.inf)
    top = allowed & (totals == totals.max(axis=1, keepdims=True))
    chosen = np.where(top, first, g).min(axis=1)  # the first slot of the chosen UPOS
    words = np.arange(n)
    slot = np.where(same[words, chosen], b, -np.inf).argmax(axis=1)  # its slot of largest belief, the first of ties
    upos = [u[k] for u, k in zip(candidates.upos, slot.tolist(), strict=True)]
    xpos = [x[k] for x, k in zip(candidates.xpos, slot.tolist(), strict=True)]
    return upos, xpos, dist[words, su[words, slot]], dist


def write_chosen_tags(sentences: Sequence[Any], parsed: Sequence[Any]) -> None:
    """Each sentence gets the UPOS and XPOS its joint parse chose (``ParsedSentence.upos``, ``.xpos``; a parse
    without tags, e.g. of a sentence that came with its own, leaves it as it is)."""
    for sentence, p in zip(sentences, parsed, strict=True):
        if p.upos is not None:
            sentence.upos, sentence.xpos = list(p.upos), list(p.xpos or [])


def fixed_tags(parsed: ParsedSentence, candidates: TagCandidates) -> None:
    """The tags of a joint parse whose words have one candidate each: those, with belief 1 (``BPParser.parse_joint``
    gives the same: BP over single-slot tag variables is BP over LINK, ``engine.inference.joint_bp``)."""
    set_tags(parsed, np.ones((len(candidates.upos) + 1, 1)), candidates)
    assert parsed.diagnostics is not None
    parsed.diagnostics.update(method="bp-joint", tag_candidates=len(candidates.upos))


def set_tags(parsed: ParsedSentence, beliefs: np.ndarray, candidates: TagCandidates) -> None:
    """The MBR tags of the tag ``beliefs`` (``decode_tags``) into ``parsed``: ``upos``, ``xpos``, ``upos_probs``
    and each word's UPOS distribution as ``diagnostics["upos_marginals"]`` = (the labels, (n, U) matrix)."""
    parsed.upos, parsed.xpos, parsed.upos_probs, dist = decode_tags(beliefs, candidates)
    parsed.diagnostics = {**(parsed.diagnostics or {}), "upos_marginals": (candidates.upos_labels, dist)}
