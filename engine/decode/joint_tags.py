"""Tags from the tag beliefs of joint BP (``engine.inference.joint_bp``): minimum Bayes risk per word.

A word's candidates are (UPOS, XPOS) states (``engine.text.tag_candidates``). Its UPOS is the one of
largest belief summed over its candidate states (the MBR choice for UPOS accuracy, as the tagger's
``upos_marginals`` sum its state marginals), and its XPOS the XPOS of its most believed state with that UPOS
(so the two tags agree, as the tagger's states do). ``upos_prob`` is the chosen UPOS's probability under one
distribution over all of the word's states: the joint beliefs on its candidates, scaled to the tagger's
marginal mass of the candidates (``TagCandidates.mass``), and the tagger's marginals on the states pruning
left out (``TagCandidates.rest``). Without that, a word with one candidate would report probability 1
whatever the tagger gave its other states (on EWT dev the UPOS ECE of the joint tags was 0.039 so, against
the tagger's 0.008).
"""

from __future__ import annotations

import numpy as np

from engine.text.tag_candidates import TagCandidates


def decode_tags(beliefs: np.ndarray, candidates: TagCandidates) -> tuple[list[str], list[str], np.ndarray]:
    """(UPOS, XPOS, UPOS probability) per word from tag beliefs (n+1, g) over ``candidates``' slots (row 0 ROOT)."""
    upos, xpos, probs = [], [], []
    for word, (u, x) in enumerate(zip(candidates.upos, candidates.xpos, strict=True), start=1):
        b = beliefs[word, : len(u)]
        totals: dict[str, float] = {}
        for tag, p in zip(u, b, strict=True):
            totals[tag] = totals.get(tag, 0.0) + float(p)
        chosen = max(totals, key=lambda t: (totals[t], -u.index(t)))  # ties: the earlier slot (1-best first)
        slot = max((s for s, tag in enumerate(u) if tag == chosen), key=lambda s: (b[s], -s))
        upos.append(chosen)
        xpos.append(x[slot])
        probs.append(candidates.mass[word - 1] * totals[chosen] + candidates.rest[word - 1, slot])
    return upos, xpos, np.array(probs)
