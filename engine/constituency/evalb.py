"""EVALB (Sekine and Collins 1997) with the ``COLLINS.prm`` parameters, our own implementation.

Per sentence, gold and test trees must have the same words (else ``EvalbError``, where EVALB would count an
error sentence). Then, as ``COLLINS.prm`` asks:

- ``-NONE-`` elements are removed from both trees with the constituents they leave empty
  (``DELETE_LABEL_FOR_LENGTH -NONE-``); the sentence's length for the cutoff is counted after that, punctuation
  included (``CUTOFF_LEN 40``);
- words whose **gold** tag is one of ``, : `` '' .`` are deleted from both trees, at the same positions
  (``DELETE_LABEL``), and a bracket left without words is dropped;
- a bracket is ``(label, start, end)`` over the remaining words for every node that is neither a preterminal nor
  ``TOP`` (nor the PTB's unlabelled root); every level of a unary chain is a bracket of its own; labels lose their
  function tags and indices (``NP-SBJ-1`` -> ``NP``) and ``PRT`` counts as ``ADVP`` (``EQ_LABEL ADVP PRT``);
- brackets are a multiset: matched = sum over brackets of min(gold count, test count).

Corpus scores are micro-averaged (sums of matched, gold and test brackets), in percent like EVALB's report:
labelled precision, recall, F1 = 2PR / (P + R), exact match (matched = gold = test brackets) and tagging accuracy
over the words not deleted; for the sentences of at most 40 words and for all.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from nltk import Tree  # type: ignore[import-untyped]

from engine.constituency.contract import EvalbError
from engine.constituency.treebank import NONE, TOP, clean_label

DELETED_TAGS = frozenset({",", ":", "``", "''", "."})
EQUAL_LABELS = {"PRT": "ADVP"}
EXCLUDED_LABELS = frozenset({TOP, ""})
CUTOFF = 40

Bracket = tuple[str, int, int]


def without_traces(node: Tree) -> Tree | None:
    """``node`` without ``-NONE-`` preterminals and the constituents they leave empty (no other change)."""
    if len(node) == 1 and not isinstance(node[0], Tree):
        return None if node.label() == NONE else node
    children = [c for c in (without_traces(child) for child in node) if c is not None]
    return Tree(node.label(), children) if children else None


def _label(label: str) -> str:
    label = clean_label(label)
    return EQUAL_LABELS.get(label, label)


def brackets(tree: Tree, kept: Sequence[bool]) -> Counter[Bracket]:
    """The multiset of labelled brackets of a trace-free tree, over the words whose ``kept`` is true."""
    rank = [0]
    for keep in kept:
        rank.append(rank[-1] + int(keep))
    out: Counter[Bracket] = Counter()

    def visit(node: Tree, i: int) -> int:  # counts the brackets under ``node``, returns the end of its span
        if len(node) == 1 and not isinstance(node[0], Tree):
            return i + 1
        j = i
        for child in node:
            j = visit(child, j)
        label = _label(node.label())
        if label not in EXCLUDED_LABELS and rank[j] > rank[i]:
            out[(label, rank[i], rank[j])] += 1
        return j

    if visit(tree, 0) != len(kept):
        raise ValueError(f"{len(kept)} flags for a tree of {len(tree.leaves())} words")
    return out


@dataclass(frozen=True)
class SentenceScore:
    """One sentence's counts: ``length`` (words without traces, for the cutoff), brackets, tags."""

    length: int
    gold: int
    test: int
    matched: int
    words: int  # words not deleted
    tags_correct: int

    @property
    def exact(self) -> bool:
        return self.matched == self.gold == self.test


def score_sentence(gold: Tree, test: Tree, where: str = "") -> SentenceScore:
    """EVALB's counts for one pair of trees (module docstring); ``where`` prefixes error messages."""
    gold_clean, test_clean = without_traces(gold), without_traces(test)
    gold_pos = gold_clean.pos() if gold_clean is not None else []
    test_pos = test_clean.pos() if test_clean is not None else []
    if len(gold_pos) != len(test_pos):
        raise EvalbError(f"{where}length mismatch: gold has {len(gold_pos)} words, test has {len(test_pos)}")
    for i, ((gw, _), (tw, _)) in enumerate(zip(gold_pos, test_pos, strict=True)):
        if gw != tw:
            raise EvalbError(f"{where}words differ at word {i}: gold {gw!r}, test {tw!r}")
    if gold_clean is None or test_clean is None:
        return SentenceScore(0, 0, 0, 0, 0, 0)
    kept = [tag not in DELETED_TAGS for _, tag in gold_pos]
    gold_b, test_b = brackets(gold_clean, kept), brackets(test_clean, kept)
    return SentenceScore(
        length=len(gold_pos),
        gold=sum(gold_b.values()),
        test=sum(test_b.values()),
        matched=sum((gold_b & test_b).values()),
        words=sum(kept),
        tags_correct=sum(k and g == t for k, (_, g), (_, t) in zip(kept, gold_pos, test_pos, strict=True)),
    )


def sentence_scores(gold: Sequence[Tree], test: Sequence[Tree]) -> list[SentenceScore]:
    """``score_sentence`` of each pair (paired bootstrap resamples these)."""
    if len(gold) != len(test):
        raise EvalbError(f"{len(gold)} gold trees but {len(test)} test trees")
    return [score_sentence(g, t, f"sentence {s + 1}: ") for s, (g, t) in enumerate(zip(gold, test, strict=True))]


@dataclass(frozen=True)
class Totals:
    """Micro-averaged scores of a set of sentences, in percent."""

    sentences: int
    gold: int
    test: int
    matched: int
    exact: int
    words: int
    tags_correct: int

    @classmethod
    def of(cls, scores: Iterable[SentenceScore]) -> Totals:
        s = list(scores)
        return cls(len(s), sum(x.gold for x in s), sum(x.test for x in s), sum(x.matched for x in s),
                   sum(x.exact for x in s), sum(x.words for x in s), sum(x.tags_correct for x in s))

    @property
    def precision(self) -> float:
        return 100.0 * self.matched / self.test if self.test else 0.0

    @property
    def recall(self) -> float:
        return 100.0 * self.matched / self.gold if self.gold else 0.0

    @property
    def f1(self) -> float:
        p, r = self.precision, self.recall
        return 2 * p * r / (p + r) if p + r else 0.0

    @property
    def exact_match(self) -> float:
        return 100.0 * self.exact / self.sentences if self.sentences else 0.0

    @property
    def tag_accuracy(self) -> float:
        return 100.0 * self.tags_correct / self.words if self.words else 0.0


@dataclass(frozen=True)
class EvalbResult:
    """EVALB's two summaries: sentences of at most ``cutoff`` words, and all."""

    short: Totals
    all: Totals
    cutoff: int = CUTOFF

    def to_json(self) -> dict[str, Any]:
        """``f1``, ``precision``, ``recall``, ``exact_match``, ``tag_accuracy`` (<= cutoff), the same with
        ``_all``, and the sentence counts."""
        out: dict[str, Any] = {}
        for suffix, totals in (("", self.short), ("_all", self.all)):
            for name in ("f1", "precision", "recall", "exact_match", "tag_accuracy"):
                out[name + suffix] = getattr(totals, name)
            out["sentences" + suffix] = totals.sentences
        out["cutoff"] = self.cutoff
        return out


def evalb(gold: Sequence[Tree], test: Sequence[Tree], cutoff: int = CUTOFF) -> EvalbResult:
    """EVALB (``COLLINS.prm``) of test trees against gold trees, pair by pair."""
    scores = sentence_scores(gold, test)
    return EvalbResult(short=Totals.of(s for s in scores if s.length <= cutoff), all=Totals.of(scores), cutoff=cutoff)
