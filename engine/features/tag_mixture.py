"""Tag-averaged potentials: a sentence scored under several taggings at once.

A tagger's posterior ``p(y | x)`` over tag sequences is summarised by the best sequence and draws from it
(``engine.text.tagger``). ``engine.decode.tag_marginal`` can average the parser's *marginals* over them (one
parse per distinct sequence), or average the *potentials*: every factor's log-potential becomes its weighted
mean over the taggings,

    theta(x) = sum_y w_y theta(x, y),      w_y = (count of y among the best sequence and the draws) / (K + 1),

and the sentence is parsed once, by one BP run, under ``theta(x)``. That is the geometric mixture of the
taggings' factor graphs (each factor the weighted geometric mean of its potentials), a one-parse stand-in
for joint inference over tags (Smith & Eisner 2008, §3.4, TAG factors), where averaging the marginals costs a
parse per tagging. This module holds the mixture and the two steps every scorer shares.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from engine.features.extract import Tokens


@dataclass(frozen=True)
class TagMixture:
    """A sentence's copies under other tag sequences, and the weight of each tagging (the sentence's own
    first; they sum to 1). For inference only: a trainer's features stay those of the sentence's own tags."""

    copies: tuple[Tokens, ...]
    weights: np.ndarray

    def __post_init__(self) -> None:
        if len(self.weights) != 1 + len(self.copies) or not np.isclose(float(np.sum(self.weights)), 1.0):
            raise ValueError("a tag mixture needs one weight per tagging (its own first), summing to 1")


def with_copies(sentences: Sequence[Tokens], mixtures: Sequence[TagMixture | None]) -> list[Tokens]:
    """Each sentence followed by the copies of its mixture: one batch for the scorer, which copies the scores
    of the arcs a copy's tags leave alone from the sentence before it (``engine.scoring.fused``)."""
    return [c for s, m in zip(sentences, mixtures, strict=True) for c in (s, *(m.copies if m else ()))]


def mixed_rows(table: np.ndarray, mixtures: Sequence[TagMixture | None]) -> np.ndarray:
    """Rows of ``table`` laid out as ``with_copies`` lays out the sentences -> one row per sentence: the
    weighted mean of its own row and its copies' (its own row alone without a mixture)."""
    out, start = [], 0
    for m in mixtures:
        k = 1 + (len(m.copies) if m else 0)
        if m is None:
            out.append(table[start])
        else:  # -inf marks an arc that no tagging allows (the root as a dependent, a loop): it stays -inf
            rows = table[start:start + k]
            forbidden = np.isneginf(rows[0])
            out.append(np.where(forbidden, -np.inf, np.tensordot(m.weights, np.where(forbidden, 0.0, rows), axes=1)))
        start += k
    if start != len(table):
        raise ValueError(f"{len(table)} rows for {start} taggings")
    return np.stack(out)
