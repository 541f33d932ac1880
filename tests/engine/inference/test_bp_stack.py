"""BP on stacks of sentences (``run_bp_many``, ``relaxed_bp_many``, ``pruned_bp_many``) against BP on each
sentence alone: the same beliefs, iteration counts and diagnostics, whatever the mix of lengths, pruned
arc sets, schedules and families."""

from __future__ import annotations

import numpy as np
import pytest

from engine.graph.childseq import ChildSeq
from engine.graph.family import FactorFamily
from engine.graph.family import all_arcs as _valid
from engine.graph.hard import Link
from engine.graph.pairwise import _STACK_LOOP, PairFamily, grand_arcs, sib_arcs
from engine.graph.tree import Tree
from engine.inference.bp import BPConfig, Graph, run_bp, run_bp_many
from engine.inference.relaxed import PrunedConfig, RelaxedConfig, infer, infer_many


def _graph(n: int, rng: np.random.Generator, *, projective: bool = False, childseq: bool = False,
           prune: float = 0.0, scale: float = 1.0) -> Graph:
    valid = _valid(n)
    if prune:
        drop = rng.random(valid.shape) < prune
        drop[0, 1:] = False  # every word keeps ROOT as a possible head
        valid &= ~drop
    families: list[FactorFamily] = [Tree(n, valid, projective=projective, single_root=True),
                                    Link(n, valid, rng.normal(scale=2.0, size=valid.shape))]
    for name, arcs in (("grand", grand_arcs(n, valid)), ("sib", sib_arcs(n, valid))):
        families.append(PairFamily(n, valid, arcs, rng.normal(scale=scale, size=arcs.shape[1]), name))
    if childseq:
        shape = (n + 1, n + 1, n + 1)
        families.append(ChildSeq(n, valid, rng.normal(size=shape), rng.normal(size=shape)))
    return families, valid


def _graphs(seed: int, **kwargs: object) -> list[Graph]:
    rng = np.random.default_rng(seed)
    lengths = [1, 3, 5, 3, 5, 5, 2, 6, 3, 5]  # repeated lengths form stacks, the others run alone
    return [_graph(n, rng, **kwargs) for n in lengths]  # type: ignore[arg-type]


def _same(many: object, single: object, atol: float = 1e-10) -> None:
    assert many.iterations == single.iterations  # type: ignore[attr-defined]
    assert many.converged == single.converged  # type: ignore[attr-defined]
    np.testing.assert_allclose(many.beliefs, single.beliefs, rtol=0.0, atol=atol)  # type: ignore[attr-defined]
    np.testing.assert_allclose(many.residual, single.residual, rtol=1e-6, atol=1e-12)  # type: ignore[attr-defined]
    for got, want in zip(many.messages, single.messages, strict=True):  # type: ignore[attr-defined]
        for g, w in zip(got, want, strict=True):
            np.testing.assert_allclose(g, w, rtol=0.0, atol=1e-9)


@pytest.mark.parametrize("projective", [False, True])
@pytest.mark.parametrize("schedule, damping", [("serial", 0.0), ("flooding", 0.0), ("serial", 0.3)])
def test_bp_stack_matches_each_sentence_alone(projective: bool, schedule: str, damping: float) -> None:
    graphs = _graphs(1, projective=projective, prune=0.2, scale=1.5)
    config = BPConfig(max_iterations=30, tolerance=1e-7, schedule=schedule, damping=damping)
    single = [run_bp(f, v, config) for f, v in graphs]
    many = run_bp_many(graphs, config)
    for got, want in zip(many, single, strict=True):
        _same(got, want)
    # the sentences of a stack stop at different iterations, each on its own test
    assert len({r.iterations for r in single}) > 2


def test_bp_stack_small_stacks_and_families_that_do_not_stack() -> None:
    """A stack limit of a few messages splits stacks; a CHILDSEQ family (not stackable) runs alone."""
    config = BPConfig(max_iterations=12, tolerance=1e-6, schedule="serial")
    graphs = _graphs(2) + _graphs(3, childseq=True)
    single = [run_bp(f, v, config) for f, v in graphs]
    for limit in (1, 200, 1 << 16):
        for got, want in zip(run_bp_many(graphs, config, stack_messages=limit), single, strict=True):
            _same(got, want)


def test_bp_stack_continues_from_given_messages() -> None:
    """``initial`` and ``settled`` per graph, as relaxed inference continues a solve."""
    config = BPConfig(max_iterations=3, tolerance=0.0, schedule="serial")
    graphs = _graphs(4)
    first = [run_bp(f, v, config) for f, v in graphs]
    initial = [r.messages for r in first]
    settled = [sorted(r.settled) for r in first]
    single = [run_bp(f, v, config, initial=i, settled=s) for (f, v), i, s in zip(graphs, initial, settled, strict=True)]
    many = run_bp_many(graphs, config, initial=initial, settled=settled)
    for got, want in zip(many, single, strict=True):
        _same(got, want)


def test_bp_stack_of_one_is_the_family_and_splits_back() -> None:
    rng = np.random.default_rng(5)
    parts = [_graph(4, rng, prune=0.3)[0] for _ in range(3)]
    for k in range(4):
        column = [fams[k] for fams in parts]
        assert type(column[0]).stack(column[:1]) is column[0]
        stacked = type(column[0]).stack(column)
        packed = [f.initial_packed() + rng.normal(size=f.initial_packed().shape) * (k != 1) for f in column]
        whole = np.concatenate(packed, axis=-1)
        for got, want in zip(stacked.split(whole), packed, strict=True):
            np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(stacked.take(whole, np.array([0, 2])),
                                      np.concatenate([packed[0], packed[2]], axis=-1))


@pytest.mark.parametrize("config", [RelaxedConfig(epsilon=1e-3, rounds=None, bp_iterations=20),
                                    RelaxedConfig(epsilon=1e-4, rounds=1, bp_iterations=50),
                                    RelaxedConfig(epsilon=0.0, rounds=2, bp_iterations=5, warm_start=False),
                                    PrunedConfig(threshold=0.5, bp_iterations=10)])
def test_relaxed_and_pruned_stacks_match_each_sentence_alone(config: RelaxedConfig | PrunedConfig) -> None:
    graphs = _graphs(6, prune=0.1, scale=1.0)
    single = [infer(f, v, config) for f, v in graphs]
    many = infer_many(graphs, config)
    for got, want in zip(many, single, strict=True):
        _same(got, want)
        assert (got.rounds, got.factors_used, got.factors_total) == (want.rounds, want.factors_used,  # type: ignore
                                                                     want.factors_total)  # type: ignore
        assert got.eta == pytest.approx(want.eta, rel=1e-9, abs=1e-12)  # type: ignore[attr-defined]
        for name, mask in want.selected.items():  # type: ignore[attr-defined]
            np.testing.assert_array_equal(got.selected[name], mask)  # type: ignore[attr-defined]
    if isinstance(config, RelaxedConfig) and config.rounds is None:  # sentences stop after different rounds
        assert len({r.rounds for r in single}) > 1  # type: ignore[attr-defined]


@pytest.mark.parametrize("length, count", [(4, 5), (18, 4)])
def test_pair_family_stack_offsets_each_sentence_and_runs_like_each_alone(length: int, count: int) -> None:
    """``PairFamily.stack`` (either way of offsetting the arc indices): factor f of sentence j reads arc
    ``j (n+1)^2 + a_f``, and relaxed BP on the stack equals each sentence alone."""
    rng = np.random.default_rng(length)
    graphs = [_graph(length, rng, prune=0.2) for _ in range(count)]
    area = (length + 1) ** 2
    sizes = [sum(g[0][k].size for g in graphs) for k in (2, 3)]
    assert max(sizes) >= _STACK_LOOP if length > 10 else max(sizes) < _STACK_LOOP  # both ways of stacking
    for k in (2, 3):
        parts = [g[0][k] for g in graphs]
        stacked = PairFamily.stack(parts)
        assert isinstance(stacked, PairFamily)
        np.testing.assert_array_equal(stacked._a, np.concatenate([p._a + j * area for j, p in enumerate(parts)]))
        np.testing.assert_array_equal(stacked._b, np.concatenate([p._b + j * area for j, p in enumerate(parts)]))
        np.testing.assert_array_equal(stacked.bounds, np.cumsum([0] + [p.size for p in parts]))
    config = RelaxedConfig(epsilon=1e-3, rounds=None, bp_iterations=20)
    for got, want in zip(infer_many(graphs, config), [infer(f, v, config) for f, v in graphs], strict=True):
        _same(got, want)
