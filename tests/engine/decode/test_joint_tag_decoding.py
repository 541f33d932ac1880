"""``engine.decode.joint_tags.decode_tags`` (all words at once) against the word-by-word definition."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.decode.joint_tags import decode_tags
from engine.text.tag_candidates import TagCandidates

LABELS = ("NOUN", "VERB", "ADJ", "PROPN")


def reference(beliefs: np.ndarray, c: TagCandidates) -> tuple[list[str], list[str], np.ndarray, np.ndarray]:
    """The MBR tags word by word: the UPOS of largest summed belief over its slots (ties: the earlier slot's),
    then that UPOS's slot of largest belief (ties: the earlier)."""
    n, g = c.allowed.shape
    b = np.where(c.allowed, beliefs[1: n + 1, :g], 0.0)
    dist = c.pruned.copy()
    np.add.at(dist, (np.repeat(np.arange(n), g), c.slot_upos.reshape(-1)), (b * c.mass[:, None]).reshape(-1))
    upos, xpos, probs = [], [], np.empty(n)
    for word, (u, x) in enumerate(zip(c.upos, c.xpos, strict=True)):
        totals: dict[str, float] = {}
        for tag, p in zip(u, b[word], strict=False):
            totals[tag] = totals.get(tag, 0.0) + float(p)
        chosen = max(totals, key=lambda t: (totals[t], -u.index(t)))
        slot = max((s for s, tag in enumerate(u) if tag == chosen), key=lambda s: (b[word, s], -s))
        upos.append(chosen)
        xpos.append(x[slot])
        probs[word] = dist[word, c.slot_upos[word, slot]]
    return upos, xpos, probs, dist


@st.composite
def cases(draw: st.DrawFn) -> tuple[np.ndarray, TagCandidates]:
    n, g = draw(st.integers(1, 6)), draw(st.integers(1, 4))
    counts = [draw(st.integers(1, g)) for _ in range(n)]
    allowed = np.arange(g)[None, :] < np.array(counts)[:, None]
    slot_upos = np.array([[draw(st.integers(0, len(LABELS) - 1)) for _ in range(g)] for _ in range(n)])
    upos = [[LABELS[slot_upos[i, s]] for s in range(counts[i])] for i in range(n)]
    xpos = [[f"X{i}.{s}" for s in range(counts[i])] for i in range(n)]
    values = st.sampled_from([0.0, 0.125, 0.25, 0.5, 0.375]) | st.floats(0.0, 1.0)  # ties are likely
    beliefs = np.array([[draw(values) for _ in range(g)] for _ in range(n + 1)])
    mass = np.array([draw(st.floats(0.5, 1.0)) for _ in range(n)])
    pruned = np.array([[draw(st.floats(0.0, 0.1)) for _ in LABELS] for _ in range(n)])
    empty = np.zeros(0)
    return beliefs, TagCandidates(np.zeros((n, g), dtype=np.int64), allowed, upos, xpos, np.zeros((n, g)),
                                  np.zeros((max(n - 1, 0), g, g)), empty, empty, mass, pruned, slot_upos, LABELS)


@settings(max_examples=300, deadline=None)
@given(cases())
def test_all_words_at_once_equal_the_word_by_word_choice(case: tuple[np.ndarray, TagCandidates]) -> None:
    beliefs, candidates = case
    upos, xpos, probs, dist = decode_tags(beliefs, candidates)
    want = reference(beliefs, candidates)
    assert (upos, xpos) == (want[0], want[1])
    np.testing.assert_array_equal(probs, want[2])
    np.testing.assert_array_equal(dist, want[3])


def test_ties_go_to_the_earlier_slot() -> None:
    n, g = 1, 3
    allowed = np.ones((n, g), dtype=bool)
    slot_upos = np.array([[1, 0, 0]])  # VERB, NOUN, NOUN: NOUN's 0.25 + 0.25 ties VERB's 0.5, VERB is first
    c = TagCandidates(np.zeros((n, g), dtype=np.int64), allowed, [["VERB", "NOUN", "NOUN"]], [["VB", "NN", "NNS"]],
                      np.zeros((n, g)), np.zeros((0, g, g)), np.zeros(g), np.zeros(g), np.ones(n),
                      np.zeros((n, len(LABELS))), slot_upos, LABELS)
    assert decode_tags(np.array([[1.0, 0, 0], [0.5, 0.25, 0.25]]), c)[:2] == (["VERB"], ["VB"])
    assert decode_tags(np.array([[1.0, 0, 0], [0.25, 0.375, 0.375]]), c)[:2] == (["NOUN"], ["NN"])
