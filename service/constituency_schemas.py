"""Response schemas of constituency models (``service.constituency``; what each probability is:
``engine.constituency.outputs``)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field


class Constituent(BaseModel):
    label: str
    start: int = Field(description="first word (0-based)")
    end: int = Field(description="one past the last word: the constituent covers words start .. end-1")
    prob: float | None = Field(description="posterior of the labelled span in its layer: bot (the node is the "
                               "bottom of its span's unary chain, or alone on its span) or top (the top of a chain); "
                               "null for a node inside a chain of three or more, or without posteriors (fallback)")
    layer: Literal["bot", "top", "inner"]


class TagOut(BaseModel):
    label: str = Field(description="the word's Penn Treebank tag (the tree's preterminal)")
    start: int
    end: int
    prob: float | None = Field(description="posterior of the tag (null without posteriors)")


class ConstituencySentence(BaseModel):
    """One sentence parsed by a constituency model (``formalism: constituency`` in GET /models)."""

    words: list[str] = Field(description="the words parsed, in the Penn Treebank's spelling (-LRB- for ( ...)")
    tree: str = Field(description="the tree, bracketed on one line: (TOP (S ...)) with tags as preterminals")
    constituents: list[Constituent] = Field(description="every node of the tree but TOP and the preterminals")
    tags: list[TagOut]
    fallback: bool = Field(description="the grammar has no tree for these words: a flat tree of each word's best "
                           "tag, without posteriors")


class SpansSentence(BaseModel):
    """Span marginals of one sentence under a constituency model; matrices are (n+1) x (n+1), indexed [i][j] for
    the words i .. j-1 (0 and null where j <= i); null for a fallback sentence."""

    words: list[str]
    spans: list[list[float]] | None = Field(description="p(some constituent covers exactly words i .. j-1)")
    labels: list[list[str | None]] | None = Field(description="the most probable label of the span (its bot "
                                                  "layer: the label under any unary chain)")
    label_probs: list[list[float]] | None = Field(description="the posterior of that label")
    fallback: bool
