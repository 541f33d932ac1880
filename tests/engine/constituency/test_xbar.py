"""The generative X-bar PCFG, the dense pruning pass and coarse pruning (issue 26; brief §2 "Coarse pruning").

Relative frequencies and the unknown-word model are checked by hand on a tiny treebank; the dense one-substate
inside-outside against ``inside_outside`` over the full item list (tiny random grammars, and the grammar of a few
PTB files on a short sentence); the model's arrays and manifest survive ``save_model`` / ``load_model``.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from nltk import Tree
from pcfg_helpers import random_factor, tiny_grammar

from engine.constituency.anchored import AnchoredScores, build_items, full_mask
from engine.constituency.baseline import XbarParser, parse_trees
from engine.constituency.binarize import binarize, to_anchored
from engine.constituency.dense import dense_inside_outside
from engine.constituency.inside_outside import inside_outside
from engine.constituency.pruning import PRUNING_THRESHOLD, gold_coverage, prune_mask
from engine.constituency.treebank import read_trees
from engine.constituency.xbar import XbarPCFG, signature, train_xbar
from engine.model.store import load_model, save_model

TREES = [Tree.fromstring(t) for t in (
    "(TOP (S (NP (DT the) (NN dog)) (VP (VBD barked)) (. .)))",
    "(TOP (S (NP (DT the) (NN cat)) (VP (VBD saw) (NP (DT a) (NN dog)))))",
    "(TOP (S (NP (NNP John)) (VP (VBD ran))))",
)]
OPEN = {"open_tag_threshold": 1}  # tags seen with 2 word types or more are open (DT, NN, VBD)


def model() -> XbarPCFG:
    return train_xbar(TREES, dictionary=OPEN)


def unary_prob(m: XbarPCFG, top: str, bot: str) -> float:
    g = m.grammar
    (u,) = [u for u, (a, b) in enumerate(g.unary) if g.labels[a] == top and g.labels[b] == bot]
    return float(np.exp(m.log_unary[u]))


def test_rule_probabilities_are_relative_frequencies() -> None:
    m, g = model(), model().grammar
    assert unary_prob(m, "NP", "NP") == pytest.approx(3 / 4)  # NP spans: 3 of one node, 1 over NNP
    assert unary_prob(m, "NP", "NNP") == pytest.approx(1 / 4)
    assert unary_prob(m, "VP", "VBD") == pytest.approx(2 / 3)
    for a in range(g.n_labels):
        if (g.binary[:, 0] == a).any():
            assert np.exp(m.log_binary[g.binary[:, 0] == a]).sum() == pytest.approx(1.0)
        if (g.unary[:, 0] == a).any():
            assert np.exp(m.log_unary[g.unary[:, 0] == a]).sum() == pytest.approx(1.0)


def test_signatures() -> None:
    assert signature("barked") == "UNK-LC-ed"
    assert signature("Walking") == "UNK-INITC-ing"
    assert signature("IBM") == "UNK-CAPS"
    assert signature("3.5-inch") == "UNK-LC-NUM-DASH"
    assert signature("1989") == "UNK-NUM"
    assert signature("eBay") == "UNK-MIXC-y"
    assert signature("iPod") == "UNK-MIXC"


def test_emissions_by_hand() -> None:
    m, g = model(), model().grammar
    tag = g.index
    # 11 tokens, 3 of them VBD, 3 NN, 3 DT; 7 hapaxes (barked . cat saw a John ran), 3 of them VBD, 1 NN, 1 DT.
    # "walked" is unknown: p(t | UNK-LC-ed) = (c_rare(t, sig) + p_rare(t)) / (1 + 1), sig of "barked" alone
    e = m.emissions(["walked", "the", "John"])
    assert e[0, tag["VBD"]] == pytest.approx(math.log((1 + 3 / 7) / 2 / (3 / 11)))
    assert e[0, tag["NN"]] == pytest.approx(math.log((0 + 1 / 7) / 2 / (3 / 11)))
    assert np.isneginf(e[0, tag["NNP"]])  # not an open tag, not seen with the word
    # "the" (seen twice as DT): p(DT | the) = (2 + p(DT | UNK-LC)) / (2 + 1), UNK-LC: cat, saw, a, ran
    p_sig = (1 + 1 / 7) / (4 + 1)
    assert e[1, tag["DT"]] == pytest.approx(math.log((2 + p_sig) / 3 / (3 / 11)))
    assert np.isneginf(e[:, ~g.is_tag]).all()


def test_model_arrays_and_manifest_round_trip(tmp_path: Path) -> None:
    m = model()
    save_model(tmp_path / "xbar", {"formalism": "constituency", **m.manifest()}, m.arrays())
    stored = load_model(tmp_path / "xbar")
    back = XbarPCFG.load(stored.manifest, stored.arrays)
    words = ["the", "cat", "walked", "."]
    np.testing.assert_array_equal(back.emissions(words), m.emissions(words))
    np.testing.assert_array_equal(back.log_binary, m.log_binary)
    assert back.grammar.labels == m.grammar.labels and back.settings == m.settings


def test_parses_an_unambiguous_sentence_exactly() -> None:
    """Only one tree of the grammar covers these words: the parser must find it, chain and @S included."""
    parser = XbarParser(model())
    assert parser.parse(TREES[0].leaves()) == TREES[0]
    scores = parse_trees(parser, TREES[:1], pruning=True)
    assert scores["f1"] == 100.0 and scores["exact_match"] == 100.0 and scores["pruning_gold_tree_live"] == 1.0
    assert scores["pruning_f1"] == 100.0 and scores["pruning_no_tree"] == 0


@pytest.mark.parametrize("n", [1, 2, 4, 6])
def test_dense_pass_equals_inside_outside(n: int) -> None:
    rng = np.random.default_rng(n)
    grammar = tiny_grammar(rng)
    factor = random_factor(grammar, n, 1, rng, scale=2.0)
    items = build_items(grammar, full_mask(grammar, n))
    ref = inside_outside(items, factor, AnchoredScores.zeros(items))
    got = dense_inside_outside(grammar, factor)
    assert got.log_z == pytest.approx(ref.log_z, abs=1e-10)
    np.testing.assert_allclose(got.mu_bot, ref.mu_bot, atol=1e-10)
    np.testing.assert_allclose(got.mu_top, ref.mu_top, atol=1e-10)


def test_prune_mask_thresholds_and_keeps_gold() -> None:
    m = model()
    tree = TREES[1]
    parser = XbarParser(m)
    marginals = parser.marginals(tree.leaves())
    gold = to_anchored(binarize(tree), m.grammar)
    mask = prune_mask(m.grammar, marginals, threshold=math.log(0.5))
    full = full_mask(m.grammar, len(tree.leaves()))
    np.testing.assert_array_equal(mask.bot, full.bot & (marginals.mu_bot >= 0.5))
    with_gold = prune_mask(m.grammar, marginals, threshold=0.0, keep_gold=gold)
    assert gold_coverage(m.grammar, with_gold, gold).tree_live
    cover = gold_coverage(m.grammar, mask, gold)
    assert cover.bot_total == cover.top_total == 2 * len(tree.leaves()) - 1
    assert PRUNING_THRESHOLD == -9.0


def test_dense_pass_on_the_ptb_grammar(ptb_dir: Path) -> None:
    """A few PTB files: the dense pass equals the item-list pass on a short sentence, and pruning at e^-9 keeps
    the gold tree of a few training sentences (a grammar trained on them)."""
    trees = read_trees([ptb_dir / f"wsj_{i:04d}.mrg" for i in range(1, 6)])
    m = train_xbar(trees)
    words = min((t.leaves() for t in trees), key=len)
    assert 2 <= len(words) <= 10
    items = build_items(m.grammar, full_mask(m.grammar, len(words)))
    ref = inside_outside(items, m.factor(words), AnchoredScores.zeros(items))
    got = dense_inside_outside(m.grammar, m.factor(words))
    assert got.log_z == pytest.approx(ref.log_z, abs=1e-9)
    np.testing.assert_allclose(got.mu_bot, ref.mu_bot, atol=1e-10)
    np.testing.assert_allclose(got.mu_top, ref.mu_top, atol=1e-10)
    short = [t for t in trees if len(t.leaves()) <= 12][:3]
    scores = parse_trees(XbarParser(m), short, pruning=True)
    assert scores["pruning_gold_tree_live"] == 1.0 and scores["pruning_oracle_f1_bound"] == 100.0
    assert scores["pruning_no_tree"] == 0 and scores["no_tree"] == 0 and scores["pruning_oracle_f1"] == 100.0
