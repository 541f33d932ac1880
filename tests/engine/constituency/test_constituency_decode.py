"""Max-Recall decoding (Goodman 1996; brief §2) against enumeration on tiny grammars, and its tree by hand.

With the top layer left out, the score of a candidate (a binary bracketing with a label per span) is its expected
number of correct labelled bot spans, linear in the trees' probabilities: the test computes it for every
candidate by summing over every enumerated tree, and the decoder's candidate must reach the maximum. With both
layers, CKY must find the bracketing of largest total span score among all bracketings.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import numpy as np
import pytest
from nltk import Tree
from pcfg_helpers import brute_force, enumerate_trees, sentence, tree_from_events

from engine.constituency.anchored import AnchoredScores, build_items, full_mask, tree_mask
from engine.constituency.binarize import from_anchored
from engine.constituency.decode import max_recall_chart, max_recall_tree
from engine.constituency.grammar import Grammar
from engine.constituency.oracle import WRONG, oracle_tree
from engine.constituency.viterbi import viterbi

Span = tuple[int, int]


def bracketings(i: int, j: int) -> Iterator[list[Span]]:
    """Every binary bracketing of ``(i, j)`` as its list of spans (one-word spans included)."""
    if j == i + 1:
        yield [(i, j)]
        return
    for k in range(i + 1, j):
        for left in bracketings(i, k):
            for right in bracketings(k, j):
                yield [(i, j), *left, *right]


def bot_spans(items, events) -> set[tuple[int, int, int]]:
    """The labelled bot spans of one enumerated tree."""
    out = set()
    for event in events:
        if event[0] == "b":
            b = event[1]
            out.add((int(items.bin_i[b]), int(items.bin_j[b]), int(items.bin_a[b])))
        elif event[0] == "t":
            t = event[1]
            out.add((int(items.tag_i[t]), int(items.tag_i[t]) + 1, int(items.tag_t[t])))
    return out


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_max_recall_maximises_expected_labelled_recall(seed: int) -> None:
    rng = np.random.default_rng(seed)
    grammar, items, factor = sentence(rng, 4, 1)
    q = AnchoredScores.zeros(items)
    trees = [(w, bot_spans(items, events)) for w, events in enumerate_trees(items, factor, q)]
    log_z = np.logaddexp.reduce([w for w, _ in trees])
    probs = [float(np.exp(w - log_z)) for w, _ in trees]
    bot = brute_force(items, factor, q).mu_bot
    chart = max_recall_chart(bot, np.zeros_like(bot))
    tags, phrases = np.flatnonzero(grammar.is_tag), [1, 2]  # S, X
    best = -1.0
    for spans in bracketings(0, 4):
        choices = [tags if j == i + 1 else phrases for i, j in spans]
        for labels in itertools.product(*choices):
            candidate = {(i, j, int(a)) for (i, j), a in zip(spans, labels, strict=True)}
            best = max(best, sum(p * len(candidate & t) for p, (_, t) in zip(probs, trees, strict=True)))
    decoded = {(i, j, int(chart.bot[i, j])) for i, j in [(i, i + 1) for i in range(4)] + list(chart.splits)}
    got = sum(p * len(decoded & t) for p, (_, t) in zip(probs, trees, strict=True))
    assert got == pytest.approx(best, abs=1e-12) and chart.objective == pytest.approx(best, abs=1e-12)


@pytest.mark.parametrize("seed", [3, 4])
def test_cky_finds_the_best_bracketing_with_both_layers(seed: int) -> None:
    rng = np.random.default_rng(seed)
    grammar, items, factor = sentence(rng, 5, 1)
    m = brute_force(items, factor, AnchoredScores.zeros(items))
    chart = max_recall_chart(m.mu_bot, m.mu_top)
    bot, top = m.mu_bot.max(axis=2), m.mu_top.max(axis=2)
    differs = m.mu_bot.argmax(axis=2) != m.mu_top.argmax(axis=2)
    score = bot + np.where(differs, top, 0.0)
    score[0, 5] = bot[0, 5]
    totals = [sum(score[s] for s in spans) for spans in bracketings(0, 5)]
    assert chart.objective == pytest.approx(max(totals), abs=1e-12)
    chosen = [(i, i + 1) for i in range(5)] + list(chart.splits)
    assert sum(score[s] for s in chosen) == pytest.approx(max(totals), abs=1e-12)


def test_tree_restores_chains_and_splices_at_nodes() -> None:
    labels = ("TOP", "@S", "DT", "NN", "NP", "S", "VBD", "VP")
    g = Grammar(labels, np.array([[5, 4, 1], [1, 7, 7], [4, 2, 3]]), np.array([[0, 5], [7, 6], [4, 4], [1, 1]]),
                ((), (), (), ()), np.array([False, False, True, True, False, False, True, False]), top=0)
    n = 4
    mu_bot, mu_top = np.zeros((n + 1, n + 1, 8)), np.zeros((n + 1, n + 1, 8))
    for i, j, b, t in [(0, 4, 5, 0), (0, 2, 4, 4), (2, 4, 1, 1), (0, 1, 2, 2), (1, 2, 3, 3), (2, 3, 6, 7),
                       (3, 4, 6, 7)]:
        mu_bot[i, j, b] = mu_top[i, j, t] = 0.9
    mu_bot[1, 3, 4] = 0.95  # a crossing span, worth less than (0, 2) and (2, 4) together
    words = ["the", "dog", "barked", "ran"]
    tree = max_recall_tree(g, max_recall_chart(mu_bot, mu_top), words, {(0, 5): ("SINV",), (7, 6): ()})
    assert tree == Tree.fromstring("(TOP (SINV (S (NP (DT the) (NN dog)) (VP (VBD barked)) (VP (VBD ran)))))")


@pytest.mark.parametrize("seed", [5, 6, 7])
def test_viterbi_is_the_enumerations_best_tree(seed: int) -> None:
    """A PCFG can score two trees alike (the same rules in other places): the tree must be one of the best."""
    rng = np.random.default_rng(seed)
    grammar, items, factor = sentence(rng, 4, 1)
    trees = list(enumerate_trees(items, factor, AnchoredScores.zeros(items)))
    top = max(w for w, _ in trees)
    words = [f"w{i}" for i in range(4)]
    best = [from_anchored(tree_from_events(items, events), grammar, words) for w, events in trees
            if w >= top - 1e-10]
    score, tree = viterbi(grammar, factor, words)
    assert score == pytest.approx(top, abs=1e-10)
    assert tree in best


@pytest.mark.parametrize("seed", [8, 9, 10])
def test_oracle_tree_is_the_best_match_inside_the_mask(seed: int) -> None:
    """Gold: a tree of the full chart; forest: a random pruning. The oracle must be one of the forest's trees of
    largest score (1 per gold labelled span, WRONG per other span; identities, TOP and tags 0)."""
    rng = np.random.default_rng(seed)
    grammar, items, factor = sentence(rng, 4, 1, pruned=True)
    full = build_items(grammar, full_mask(grammar, 4))
    gold_events = list(enumerate_trees(full, factor, AnchoredScores.zeros(full)))
    gold = tree_from_events(full, gold_events[int(rng.integers(len(gold_events)))][1])
    g = tree_mask(grammar, gold)
    words = [f"w{i}" for i in range(4)]

    def score(events: list[tuple]) -> float:
        total = 0.0
        for event in events:
            if event[0] == "b":
                b = event[1]
                total += 1.0 if g.bot[items.bin_i[b], items.bin_j[b], items.bin_a[b]] else WRONG
            elif event[0] == "u":
                v = event[1]
                if items.un_a[v] != items.un_b[v] and items.un_a[v] != grammar.top:
                    total += 1.0 if g.top[items.un_i[v], items.un_j[v], items.un_a[v]] else WRONG
        return total

    scored = [(score(events), events) for _, events in enumerate_trees(items, factor, AnchoredScores.zeros(items))]
    top = max(s for s, _ in scored)
    best = [from_anchored(tree_from_events(items, events), grammar, words) for s, events in scored
            if s >= top - 1e-12]
    assert oracle_tree(grammar, items, gold, words) in best
