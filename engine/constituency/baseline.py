"""The X-bar baseline parser end to end (``../shared/design/epic.md`` §4 "Measured baseline"): the generative
X-bar PCFG (``xbar``), its posteriors over the unpruned chart (``dense``), Max-Recall decoding (``decode``), and
the coarse pruning mask the factored models will run on (``pruning``).

:class:`XbarParser` parses a sentence of words into a ``(TOP ...)`` tree; :func:`parse_trees` parses the words of
gold trees and scores them with EVALB, with the pruning statistics on request (items kept per sentence, gold
labelled spans kept, gold trees entirely inside the mask, the oracle F1 of the pruned forest (EVALB of the best
tree among the mask's items, ``oracle``), and an upper bound on it: EVALB of the Max-Recall tree of the gold
tree's labelled spans that the mask keeps; that tree need not be one of the mask's trees, as a pruned tag or
``@`` span, which EVALB does not count, can make the gold tree itself dead),
and EVALB of Max-Recall decoding from the inside-outside of the X-bar PCFG over the mask's items alone, with the
sentences whose mask holds no tree.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
from nltk import Tree  # type: ignore[import-untyped]

from engine.constituency.anchored import AnchoredScores, SpanMask, build_items, tree_mask
from engine.constituency.binarize import binarize, to_anchored
from engine.constituency.decode import max_recall
from engine.constituency.dense import DenseMarginals, dense_inside_outside
from engine.constituency.evalb import evalb
from engine.constituency.grammar import AnchoredTree
from engine.constituency.inside_outside import inside_outside
from engine.constituency.oracle import oracle_tree
from engine.constituency.pruning import PRUNING_THRESHOLD, gold_coverage, prune_mask
from engine.constituency.viterbi import viterbi
from engine.constituency.xbar import XbarPCFG, chain_choice

__all__ = ["SentenceParser", "XbarParser", "parse_trees"]


class SentenceParser(Protocol):
    """What :func:`parse_trees` (and the service) need of a constituency parser: the tree and the coarse
    marginals of a sentence, and a count of the sentences it could only parse by a fallback."""

    failures: int

    def parse_with_marginals(self, words: Sequence[str]) -> tuple[Tree, DenseMarginals | None]: ...


@dataclass
class XbarParser:
    """Parses with an X-bar PCFG: posteriors (dense pass), Max-Recall tree; :meth:`mask` gives the pruning mask."""

    model: XbarPCFG
    threshold: float = PRUNING_THRESHOLD
    chains: dict[tuple[int, int], tuple[str, ...]] = field(init=False)
    failures: int = field(init=False, default=0)

    def __post_init__(self) -> None:
        self.chains = chain_choice(self.model.grammar, self.model.log_unary)

    def marginals(self, words: Sequence[str]) -> DenseMarginals:
        return dense_inside_outside(self.model.grammar, self.model.factor(words))

    def parse(self, words: Sequence[str]) -> Tree:
        """The Max-Recall ``(TOP ...)`` tree of ``words`` under the X-bar PCFG's posteriors."""
        return self.parse_with_marginals(words)[0]

    def parse_with_marginals(self, words: Sequence[str]) -> tuple[Tree, DenseMarginals | None]:
        """The tree and the marginals it was decoded from; when the grammar has no tree for the words (a word
        without an allowed tag, rules missing), the flat tree ``(TOP (tag word) ...)`` of each word's best tag
        (``XX`` if none) and ``None``, counted in ``failures``."""
        try:
            marginals = self.marginals(words)
        except FloatingPointError:
            self.failures += 1
            scores = self.model.emissions(words)
            tags = [self.model.grammar.labels[int(row.argmax())] if np.isfinite(row.max()) else "XX" for row in scores]
            return Tree("TOP", [Tree(t, [w]) for t, w in zip(tags, words, strict=True)]), None
        return max_recall(self.model.grammar, marginals.mu_bot, marginals.mu_top, words, self.chains), marginals

    def parse_viterbi(self, words: Sequence[str]) -> Tree:
        """The most probable tree of ``words`` under the X-bar PCFG (``viterbi``)."""
        return viterbi(self.model.grammar, self.model.factor(words), words)[1]

    def mask(self, marginals: DenseMarginals, keep_gold: AnchoredTree | None = None) -> SpanMask:
        return prune_mask(self.model.grammar, marginals, self.threshold, keep_gold)


def _gold_anchored(parser: XbarParser, gold: Tree) -> AnchoredTree | None:
    """The gold tree's anchored items, ``None`` when it uses a rule or label the grammar lacks."""
    try:
        return to_anchored(binarize(gold), parser.model.grammar)
    except ValueError:
        return None


def _oracle(parser: XbarParser, mask: SpanMask, gold: AnchoredTree, words: Sequence[str]) -> Tree:
    """An upper bound on the best tree inside ``mask`` for EVALB: Max-Recall over the gold labelled spans the mask
    keeps (the bracketing of the kept gold spans, not necessarily a tree of the mask)."""
    g = tree_mask(parser.model.grammar, gold)
    return max_recall(parser.model.grammar, (g.bot & mask.bot).astype(float), (g.top & mask.top).astype(float),
                      words, parser.chains)


class _PruningReport:
    """The pruning statistics of :func:`parse_trees`, sentence by sentence: the mask's items, the gold labelled
    spans it keeps (trees the grammar can build), the oracle bound, and Max-Recall decoding from the inside-outside
    of the X-bar factor over the mask's items (``inside_outside``: what the factored models will run on), with the
    sentences whose mask holds no tree."""

    def __init__(self, parser: XbarParser) -> None:
        self.parser, self.grammar = parser, parser.model.grammar
        self.stats: dict[str, list[float]] = {key: [] for key in (
            "items", "items_full", "bot_kept", "bot_total", "top_kept", "top_total", "live", "bot_spans",
            "bot_spans_full")}
        self.oracle_gold: list[Tree] = []
        self.oracle_test: list[Tree] = []
        self.pruned_test: list[Tree] = []
        self.oracle: list[Tree] = []
        self.no_tree = 0

    def add(self, tree: Tree, parsed: Tree, marginals: DenseMarginals | None) -> None:
        words = tree.leaves()
        if marginals is None:
            self.pruned_test.append(parsed)
            return
        mask = self.parser.mask(marginals)
        items = build_items(self.grammar, mask)
        try:
            coarse = inside_outside(items, self.parser.model.factor(words), AnchoredScores.zeros(items))
            self.pruned_test.append(max_recall(self.grammar, coarse.mu_bot, coarse.mu_top, words, self.parser.chains))
        except FloatingPointError:
            self.no_tree += 1
            self.pruned_test.append(parsed)
        anchored = _gold_anchored(self.parser, tree)
        if anchored is None:
            return
        cover = gold_coverage(self.grammar, mask, anchored)
        n = len(words)
        full = np.triu(np.ones((n + 1, n + 1), dtype=bool), 2)
        for key, value in (("items", items.n_binary), ("items_full", (n**3 - n) // 6 * len(self.grammar.binary)),
                           ("bot_kept", cover.bot_kept), ("bot_total", cover.bot_total),
                           ("top_kept", cover.top_kept), ("top_total", cover.top_total), ("live", cover.tree_live),
                           ("bot_spans", mask.bot[full].sum()),
                           ("bot_spans_full", full.sum() * ((~self.grammar.is_tag).sum() - 1))):
            self.stats[key].append(float(value))
        self.oracle_gold.append(tree)
        self.oracle_test.append(_oracle(self.parser, mask, anchored, words))
        best = oracle_tree(self.grammar, items, anchored, words)
        self.oracle.append(best if best is not None else Tree("TOP", [Tree("XX", [w]) for w in words]))

    def summary(self, gold: Sequence[Tree]) -> dict[str, Any]:
        s = {key: np.array(value) for key, value in self.stats.items()}
        some = len(s["items"]) > 0
        return {
            "pruning_threshold": self.parser.threshold,
            "pruning_f1": evalb(gold, self.pruned_test).short.f1,
            "pruning_no_tree": self.no_tree,
            "pruning_sentences": len(s["items"]),
            "pruning_binary_items_mean": float(s["items"].mean()) if some else None,
            "pruning_binary_items_full_mean": float(s["items_full"].mean()) if some else None,
            "pruning_binary_items_kept_fraction": float(s["items"].sum() / s["items_full"].sum()) if some else None,
            "pruning_bot_spans_kept_fraction": float(s["bot_spans"].sum() / s["bot_spans_full"].sum()) if some
            else None,
            "pruning_gold_bot_kept": float(s["bot_kept"].sum() / s["bot_total"].sum()) if some else None,
            "pruning_gold_top_kept": float(s["top_kept"].sum() / s["top_total"].sum()) if some else None,
            "pruning_gold_tree_live": float(s["live"].mean()) if some else None,
            "pruning_oracle_f1": evalb(self.oracle_gold, self.oracle).short.f1 if some else None,
            "pruning_oracle_f1_bound": evalb(self.oracle_gold, self.oracle_test).short.f1 if some else None,
        }


def parse_trees(parser: SentenceParser, gold: Sequence[Tree], pruning: bool = False) -> dict[str, Any]:
    """Parse the words of ``gold`` and score with EVALB (``evalb.EvalbResult.to_json``: ``sentences`` are those
    of at most 40 words, ``sentences_all`` all) plus ``words`` (all), ``seconds`` (parsing alone, wall clock),
    ``cpu_seconds`` (the same in CPU time of the process), ``words_per_second``, ``sentences_per_second`` (wall
    clock), ``no_tree`` (sentences parsed flat, no tree in the grammar); with ``pruning``, the pruning statistics
    (:class:`_PruningReport`, ``pruning_*``; their time is not counted)."""
    test, seconds, cpu, failures_before = [], 0.0, 0.0, parser.failures
    if pruning and not isinstance(parser, XbarParser):
        raise TypeError("pruning statistics are those of the X-bar parser's masks")
    report = _PruningReport(parser) if pruning and isinstance(parser, XbarParser) else None
    for tree in gold:
        start, cpu_start = time.perf_counter(), time.process_time()
        parsed, marginals = parser.parse_with_marginals(tree.leaves())
        test.append(parsed)
        seconds += time.perf_counter() - start
        cpu += time.process_time() - cpu_start
        if report is not None:
            report.add(tree, parsed, marginals)
    out = evalb(gold, test).to_json()
    out["no_tree"] = parser.failures - failures_before
    n_words = sum(len(t.leaves()) for t in gold)
    out.update(words=n_words, seconds=round(seconds, 3), cpu_seconds=round(cpu, 3),
               words_per_second=round(n_words / seconds, 1) if seconds > 0 else None,
               sentences_per_second=round(len(gold) / seconds, 2) if seconds > 0 else None)
    if report is not None:
        out.update(report.summary(gold))
    return out
