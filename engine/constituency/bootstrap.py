"""Paired bootstrap of EVALB F1 differences (Efron & Tibshirani 1993, ch. 16; Berg-Kirkpatrick, Burkett & Klein
2012 for parsers), for the Table 1 replica of Hall & Klein (2012): with ~250 test sentences a difference of a few
tenths of F1 is within the noise (``../shared/design/epic.md`` §3.7), so every comparison says how sure it is.

Sentences are resampled with replacement, the same draw for both systems (paired); each replicate's F1 is
micro-averaged as EVALB does (summed matched, gold and test brackets). For systems A and B over the same gold
sentences, :func:`paired_bootstrap` gives the observed difference F1(A) - F1(B), a percentile confidence interval
of the difference, and the share of replicates in which A does not beat B (a one-sided bootstrap p-value of
"A is better", the reading of Berg-Kirkpatrick et al.: the replicates' difference is centred on the observed one,
so the share with ``delta(x*) > 2 delta(x)`` is the test of their §2; both are returned).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from engine.constituency.evalb import CUTOFF, SentenceScore

__all__ = ["BootstrapResult", "counts", "f1_of", "paired_bootstrap"]

DEFAULT_SAMPLES = 10_000
DEFAULT_LEVEL = 0.95


@dataclass(frozen=True)
class BootstrapResult:
    """``delta``: F1(A) - F1(B) on the sentences (points); ``low``/``high``: the percentile interval of the
    difference at ``level``; ``p_not_better``: share of replicates with F1(A) <= F1(B); ``p_value``: share with
    ``delta* > 2 delta`` (Berg-Kirkpatrick et al. 2012, §2; for ``delta <= 0`` it is 1); ``significant``: the
    interval excludes 0."""

    delta: float
    low: float
    high: float
    p_not_better: float
    p_value: float
    samples: int
    level: float
    sentences: int

    @property
    def significant(self) -> bool:
        return self.low > 0.0 or self.high < 0.0

    def to_json(self) -> dict[str, float | int | bool]:
        return {"delta": self.delta, "low": self.low, "high": self.high, "p_not_better": self.p_not_better,
                "p_value": self.p_value, "samples": self.samples, "level": self.level, "sentences": self.sentences,
                "significant": self.significant}


def counts(scores: Sequence[SentenceScore], cutoff: int | None = CUTOFF) -> np.ndarray:
    """The ``(sentences, 3)`` int array of (matched, gold, test) brackets of the sentences of at most ``cutoff``
    words (all with ``None``)."""
    kept = [s for s in scores if cutoff is None or s.length <= cutoff]
    return np.array([(s.matched, s.gold, s.test) for s in kept], dtype=np.int64).reshape(-1, 3)


def f1_of(totals: np.ndarray) -> np.ndarray:
    """Micro-averaged F1 in percent of summed (matched, gold, test) counts, over the last axis (0 where
    precision + recall is 0, as ``evalb.Totals.f1``)."""
    matched, gold, test = (totals[..., i].astype(np.float64) for i in range(3))
    with np.errstate(divide="ignore", invalid="ignore"):
        f1 = np.where(gold + test > 0, 200.0 * matched / (gold + test), 0.0)
    return f1


def paired_bootstrap(a: Sequence[SentenceScore], b: Sequence[SentenceScore], *, samples: int = DEFAULT_SAMPLES,
                     level: float = DEFAULT_LEVEL, seed: int = 0, cutoff: int | None = CUTOFF,
                     chunk: int = 1_000) -> BootstrapResult:
    """Paired bootstrap of F1(A) - F1(B) (module docstring). ``a`` and ``b``: ``evalb.sentence_scores`` of two
    systems on the same gold trees, in the same order. F1 = 2 matched / (gold + test), which equals
    2PR / (P + R) of EVALB. Replicates are drawn ``chunk`` at a time (a ``(chunk, sentences)`` index matrix)."""
    if len(a) != len(b):
        raise ValueError(f"{len(a)} and {len(b)} sentences: a paired bootstrap needs the same sentences")
    if any(x.length != y.length or x.gold != y.gold for x, y in zip(a, b, strict=True)):
        raise ValueError("the two systems were scored against different gold trees")
    if not 0.0 < level < 1.0 or samples < 1:
        raise ValueError(f"level must be in (0, 1) and samples >= 1, got {level} and {samples}")
    ca, cb = counts(a, cutoff), counts(b, cutoff)
    n = len(ca)
    if n == 0:
        raise ValueError("no sentences within the cutoff")
    delta = float(f1_of(ca.sum(0)) - f1_of(cb.sum(0)))
    rng = np.random.default_rng(seed)
    diffs = np.empty(samples)
    for start in range(0, samples, chunk):
        size = min(chunk, samples - start)
        draw = rng.integers(0, n, size=(size, n))
        diffs[start:start + size] = f1_of(ca[draw].sum(1)) - f1_of(cb[draw].sum(1))
    tail = (1.0 - level) / 2.0
    low, high = np.quantile(diffs, [tail, 1.0 - tail])
    p_value = float(np.mean(diffs > 2.0 * delta)) if delta > 0 else 1.0
    return BootstrapResult(delta=delta, low=float(low), high=float(high), p_not_better=float(np.mean(diffs <= 0.0)),
                           p_value=p_value, samples=samples, level=level, sentences=n)
