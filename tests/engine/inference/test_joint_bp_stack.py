"""Stacked joint BP (engine.inference.joint_bp.run_joint_bp_many): each sentence of a stack gets what
``run_joint_bp`` gives it alone, whatever the other sentences' lengths, candidate widths and stopping times."""

from __future__ import annotations

import numpy as np
import pytest

from engine.graph.family import all_arcs
from engine.graph.pairwise import PairFamily, grand_arcs, sib_arcs
from engine.graph.tags import TagChain, TagLink
from engine.graph.tree import Tree
from engine.inference.bp import BPConfig
from engine.inference.joint_bp import JointGraph, JointResult, joint_chunks, run_joint_bp, run_joint_bp_many


def _graph(n: int, counts: list[int], rng: np.random.Generator, prune: float = 0.3) -> JointGraph:
    """A random joint graph: a random subset of arcs kept (every word keeps its arc from ROOT), TREE and
    GRAND, word i with ``counts[i - 1]`` candidate tags (g = the widest)."""
    valid = all_arcs(n) & (rng.random((n + 1, n + 1)) > prune)
    valid[0, 1:] = True
    g = max(counts)
    allowed = np.arange(g)[None, :] < np.array([1, *counts])[:, None]
    heads, deps = np.nonzero(valid)
    taglink = TagLink(n, heads, deps, rng.normal(scale=1.5, size=(len(heads), g, g)), allowed)
    chain = TagChain(rng.normal(size=(n - 1, g, g)), rng.normal(size=g), rng.normal(size=g), allowed)
    emissions = np.where(allowed, rng.normal(size=allowed.shape), -np.inf)
    emissions[0] = np.where(allowed[0], 0.0, -np.inf)
    arcs = grand_arcs(n, valid)
    families = [Tree(n, valid, projective=False, single_root=True),
                PairFamily(n, valid, arcs, rng.normal(size=len(arcs[0])), "grand")]
    return families, valid, taglink, chain, emissions


def _assert_same(stacked: JointResult, alone: JointResult) -> None:
    np.testing.assert_allclose(stacked.links.beliefs, alone.links.beliefs, rtol=0, atol=1e-10)
    np.testing.assert_allclose(stacked.links.log_odds, alone.links.log_odds, rtol=1e-10, atol=1e-9)
    np.testing.assert_allclose(stacked.tags, alone.tags, rtol=0, atol=1e-10)
    np.testing.assert_allclose(stacked.taglink, alone.taglink, rtol=0, atol=1e-10)
    assert stacked.tags.shape == alone.tags.shape and stacked.taglink.shape == alone.taglink.shape
    assert (stacked.links.iterations, stacked.links.converged) == (alone.links.iterations, alone.links.converged)
    assert stacked.links.residual == pytest.approx(alone.links.residual, rel=1e-6, abs=1e-12)
    for got, want in zip(stacked.links.messages + stacked.links.incoming,
                         alone.links.messages + alone.links.incoming, strict=True):
        for a, b in zip(got, want, strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-8)


@pytest.mark.parametrize("schedule", ["serial", "flooding"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_stack_gives_each_sentence_its_own_run(seed: int, schedule: str) -> None:
    """Five sentences of lengths 4, 4, 5, 4, 5 with 1-3 candidates per word (so the stacks pad the narrower
    sentences' slots), run together and alone; a loose tolerance makes them stop at different iterations."""
    rng = np.random.default_rng(seed)
    shapes = [(4, [3, 1, 2, 3]), (4, [1, 2, 1, 2]), (5, [2, 2, 3, 1, 1]), (4, [1, 1, 1, 1]), (5, [3, 3, 3, 3, 3])]
    graphs = [_graph(n, counts, rng) for n, counts in shapes]
    config = BPConfig(max_iterations=12, tolerance=1e-4, schedule=schedule)
    alone = [run_joint_bp(*g, config) for g in graphs]
    stacked = run_joint_bp_many(graphs, config)
    assert len({r.links.iterations for r in alone}) > 1  # the sentences do stop at different times
    for got, want in zip(stacked, alone, strict=True):
        _assert_same(got, want)


def test_a_sentence_alone_is_unchanged_bit_for_bit() -> None:
    """``run_joint_bp`` is ``run_joint_bp_many`` of one graph: nothing is padded or stacked."""
    rng = np.random.default_rng(7)
    graph = _graph(5, [2, 3, 1, 2, 3], rng)
    config = BPConfig(max_iterations=6)
    one, many = run_joint_bp(*graph, config), run_joint_bp_many([graph], config)[0]
    np.testing.assert_array_equal(one.links.beliefs, many.links.beliefs)
    np.testing.assert_array_equal(one.tags, many.tags)


def test_one_word_sentences_stack() -> None:
    rng = np.random.default_rng(3)
    graphs = [_graph(1, [c], rng, prune=0.0) for c in (3, 1, 2)]
    config = BPConfig(max_iterations=5)
    for got, want in zip(run_joint_bp_many(graphs, config), [run_joint_bp(*g, config) for g in graphs], strict=True):
        _assert_same(got, want)


def test_stacks_refuse_damping_and_tapes() -> None:
    graph = _graph(3, [2, 2, 2], np.random.default_rng(0))
    for config in (BPConfig(damping=0.5), BPConfig(keep_tape=True)):
        with pytest.raises(ValueError, match="no damping and no tape"):
            run_joint_bp_many([graph, graph], config)


def test_a_stack_has_no_single_sentence_potential() -> None:
    rng = np.random.default_rng(1)
    graphs = [_graph(3, [2, 1, 2], rng), _graph(3, [1, 3, 1], rng)]
    taglink, chain = TagLink.stack([g[2] for g in graphs]), TagChain.stack([g[3] for g in graphs])
    assert taglink.size == graphs[0][2].size + graphs[1][2].size and taglink.allowed.shape == (8, 3)
    with pytest.raises(ValueError, match="not a stack"):
        taglink.log_potential(np.zeros((4, 4), dtype=bool), np.zeros(4, dtype=int))
    with pytest.raises(ValueError, match="not a stack"):
        chain.log_potential(np.zeros(4, dtype=int))


def _graph_sib(n: int, counts: list[int], rng: np.random.Generator, single_root: bool) -> JointGraph:
    """``_graph`` with SIB beside GRAND and either root mode."""
    families, valid, taglink, chain, emissions = _graph(n, counts, rng)
    arcs = sib_arcs(n, valid)
    tree = Tree(n, valid, projective=False, single_root=single_root)
    return [tree, families[1], PairFamily(n, valid, arcs, rng.normal(size=len(arcs[0])), "sib")], valid, taglink, \
        chain, emissions


@pytest.mark.parametrize("single_root", [True, False])
@pytest.mark.parametrize("seed", [0, 1])
def test_sentences_of_several_lengths_share_a_stack(seed: int, single_root: bool) -> None:
    """Lengths 1 to 14 in one call: ``joint_chunks`` puts sentences of different lengths into one stack (each
    widened: padding words without links, one tag slot), and every sentence still gets its own run."""
    rng = np.random.default_rng(seed)
    lengths = [9, 1, 3, 2, 12, 4, 5, 14, 7, 6, 10, 2]
    graphs = [_graph_sib(n, list(rng.integers(1, 4, size=n)), rng, single_root) for n in lengths]
    chunks = joint_chunks(graphs)
    mixed = [(chunk, size) for chunk, size in chunks if len({lengths[j] for j in chunk}) > 1]
    assert mixed and all(size == max(lengths[j] for j in chunk) for chunk, size in chunks)
    assert sorted(j for chunk, _ in chunks for j in chunk) == list(range(len(graphs)))
    assert all(len({lengths[j] for j in chunk}) == 1 for chunk, _ in joint_chunks(graphs, spread=0))
    config = BPConfig(max_iterations=12, tolerance=1e-4)
    alone = [run_joint_bp(*g, config) for g in graphs]
    for got, want in zip(run_joint_bp_many(graphs, config), alone, strict=True):
        _assert_same(got, want)


def test_a_widened_chain_sends_the_real_words_their_own_messages() -> None:
    """CHAIN through padding words (slot 0, potential 0, ``end`` on the step into the padding): the messages
    to the real words equal the chain's own, bit for bit, and its log-potential of a tagging is unchanged."""
    rng = np.random.default_rng(5)
    for n in (1, 2, 6):
        g = 3
        allowed = np.ones((n + 1, g), dtype=bool)
        chain = TagChain(rng.normal(size=(n - 1, g, g)), rng.normal(size=g), rng.normal(size=g), allowed)
        wide = chain.widened(n + 4)
        incoming = rng.normal(size=(n, g))
        padding = np.where(np.arange(g) == 0, 0.0, -np.inf)[None].repeat(4, axis=0)
        own = chain.propagate(incoming)
        np.testing.assert_array_equal(wide.propagate(np.vstack([incoming, padding]))[:n], own)
        slots = np.concatenate([[0], rng.integers(0, g, size=n)])
        assert wide.log_potential(np.concatenate([slots, np.zeros(4, dtype=int)])) == pytest.approx(
            chain.log_potential(slots), abs=1e-12)
