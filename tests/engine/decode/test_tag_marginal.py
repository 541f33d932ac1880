"""``engine.decode.tag_marginal``: the bound eta of a parse averaged over tag samples, and the soundness of
the Riedel & Smith Prop. 2 interval built from it (the module docstring's argument, checked numerically)."""

from __future__ import annotations

import zlib
from types import SimpleNamespace
from typing import Any

import numpy as np

from engine.decode.tag_marginal import parse_over_tag_samples
from engine.inference.relaxed import marginal_interval
from engine.kernels.exact import TreeConstraint
from engine.results import ParsedSentence

N = 4


class _Labeller:
    labels = None  # no label set: the averaged parse labels its tree with ``predict``

    def predict(self, sentence: Any, heads: np.ndarray) -> tuple[list[str], np.ndarray]:
        return ["dep"] * (len(heads) - 1), np.ones(len(heads) - 1)


def _marginals(upos: list[str]) -> np.ndarray:
    """A valid (n+1, n+1) head-marginal matrix that depends on the tags (each column sums to 1)."""
    rng = np.random.default_rng(zlib.crc32(" ".join(upos).encode()))
    m = rng.random((N + 1, N + 1))
    np.fill_diagonal(m, 0.0)
    m[:, 0] = 0.0
    return m / m.sum(axis=0, keepdims=True).clip(1e-300)


def _parse(etas: dict[str, float]) -> Any:
    """A stub parser: its marginals depend on the tags, its relaxed-inference ``eta`` on the first tag."""
    def parse(batch: list[Any]) -> list[ParsedSentence]:
        out = []
        for s in batch:
            m = _marginals(s.upos)
            heads = np.concatenate([[-1], m[:, 1:].argmax(axis=0)])
            out.append(ParsedSentence(heads, m[heads[1:], np.arange(1, N + 1)], m, None, [], np.zeros(0),
                                      {"method": "relaxed", "eta": etas[s.upos[0]], "kl_bound": etas[s.upos[0]]}))
        return out
    return parse


def test_averaged_parse_reports_the_largest_eta_of_its_taggings() -> None:
    """The best tagging's eta alone (what the averaged parse reported before) understates the bound when a
    sampled tagging's relaxed inference left out more: the mixture's bound is the largest of them."""
    sentence = SimpleNamespace(forms=["w"] * N, upos=["A"] * N, xpos=["_"] * N)
    etas = {"A": 0.01, "B": 0.2, "C": 0.05}
    draws = [(["B"] * N, ["_"] * N), (["C"] * N, ["_"] * N), (["B"] * N, ["_"] * N)]
    parse = _parse(etas)
    (averaged,) = parse_over_tag_samples([sentence], [draws], parse, TreeConstraint(), _Labeller(), parse)
    assert averaged.diagnostics["tag_samples"] == 3
    assert averaged.diagnostics["eta"] == averaged.diagnostics["kl_bound"] == 0.2
    (single,) = parse_over_tag_samples([sentence], [[]], parse, TreeConstraint(), _Labeller(), parse)
    assert single.diagnostics["eta"] == 0.01  # without samples the parse is the best tagging's


def test_interval_of_the_averaged_marginal_holds_every_taggings_interval() -> None:
    """For any taggings' marginals mu'_y and bounds eta_y, the interval of the averaged mu' under the largest
    eta contains the average of the taggings' own (clipped) intervals: every average of full-model marginals
    that Prop. 2 allows lies in it."""
    rng = np.random.default_rng(0)
    for _ in range(200):
        k = int(rng.integers(1, 6))
        mu = rng.random((k, 7))
        eta = rng.exponential(0.3, size=k) * (rng.random(k) < 0.7)
        weights = rng.integers(1, 4, size=k).astype(float)
        lows, ups = zip(*(marginal_interval(mu[y], eta[y]) for y in range(k)), strict=True)
        lo_avg, up_avg = (np.average(np.array(a), axis=0, weights=weights) for a in (lows, ups))
        lo, up = marginal_interval(np.average(mu, axis=0, weights=weights), float(eta.max()))
        assert np.all(lo <= lo_avg + 1e-12) and np.all(up_avg <= up + 1e-12)
