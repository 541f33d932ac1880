"""A parsed sentence as JSON-ready answers: ``parse --output-format json`` and the service's ``/parse`` and
``/marginals`` (issue 26, "Service").

Hall & Klein (2012) §3: every span ``(i, j)`` of a binarised tree has two layers, a **bot** label (the parent of a
binary rule, or the tag of a one-word span) and a **top** label above it (a collapsed unary chain, or the same
label). The parser gives the coarse posteriors of both layers, ``mu_bot[i, j, A]`` and ``mu_top[i, j, A]``
(``dense.DenseMarginals``; ``../shared/design/epic.md`` §1.1): the probability under the model that the tree's
span ``(i, j)`` has bot (top) label ``A``. In one tree a span has at most one bot label, so the ``mu_bot[i, j, :]``
are probabilities of disjoint events.

:func:`parse_answer` (``tree``, ``constituents``, ``tags``): every node of the debinarised tree but ``TOP`` and
the preterminals is a constituent ``{label, start, end, prob, layer}``; the nodes that cover one span form the
span's unary chain (top to bottom), and

- the bottom node of a chain (a chain of one node included) gets ``mu_bot`` of its label (``layer: "bot"``);
- the top node of a chain of two or more nodes gets ``mu_top`` of its label (``layer: "top"``);
- a node inside a chain of three or more (``NP -> SBAR -> S -> VP``: ``SBAR`` and ``S``) gets ``prob: null``
  (``layer: "inner"``): the marginals hold each span's top and bot label distributions only, not the chain
  between them.

Preterminals go to ``tags`` (``{label, start, end, prob}``, ``prob`` the tag's ``mu_bot``).

:func:`span_answer` (``spans``, ``labels``, ``label_probs``), each ``(n+1) x (n+1)`` indexed ``[i][j]`` for words
``i .. j-1``: ``spans[i][j]`` = p(some node of the debinarised tree covers exactly words ``i .. j-1``) =
``sum over A not an @ label of mu_bot[i, j, A]``. A span of the binarised tree is a node of the debinarised one
unless its bot label is an ``@`` label (an intermediate of binarisation, spliced out, whose top layer is the same
``@`` label), and the bot labels of a span are disjoint events, so the sum is exact. One-word spans are always
covered (by their tag), ``(0, n)`` always (by ``TOP``). ``labels[i][j]`` is the most probable non-``@`` bot label
of the span and ``label_probs[i][j]`` its ``mu_bot``; entries with ``j <= i`` are 0 and ``null``. Tested against
the enumeration of every tree of a tiny grammar (``tests/engine/constituency/test_constituency_outputs.py``).

Every probability is clipped to [0, 1]; marginals that are not finite raise ``FloatingPointError``. A sentence
the grammar has no tree for (the parser's flat fallback, no marginals) gets ``prob: null`` everywhere and
``spans``, ``labels`` and ``label_probs`` null, with ``fallback: true``.
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np
from nltk import Tree  # type: ignore[import-untyped]

from engine.constituency.binarize import AT, is_preterminal
from engine.constituency.dense import DenseMarginals
from engine.constituency.grammar import Grammar

__all__ = ["ROOT", "chains", "parse_answer", "span_answer"]

ROOT = "TOP"

Node = tuple[str, int, int, bool]  # label, start, end, preterminal


def chains(tree: Tree) -> list[list[Node]]:
    """The nodes of ``tree`` grouped by span, each group top to bottom (a unary chain), in pre-order."""
    nodes: list[Node] = []

    def visit(node: Tree, start: int) -> int:
        at = len(nodes)
        nodes.append((node.label(), start, start, False))
        if is_preterminal(node):
            end = start + 1
        else:
            end = start
            for child in node:
                if not isinstance(child, Tree):
                    raise ValueError(f"word {child!r} beside constituents under {node.label()!r}")
                end = visit(child, end)
        nodes[at] = (node.label(), start, end, is_preterminal(node))
        return end

    visit(tree, 0)
    groups: dict[tuple[int, int], list[Node]] = {}
    for node in nodes:
        groups.setdefault((node[1], node[2]), []).append(node)
    return list(groups.values())


def _checked(values: np.ndarray, what: str) -> np.ndarray:
    if not np.all(np.isfinite(values)):
        raise FloatingPointError(f"the {what} are not finite")
    return np.clip(values, 0.0, 1.0)


def parse_answer(tree: Tree, marginals: DenseMarginals | None, grammar: Grammar) -> dict[str, Any]:
    """``words``, ``tree`` (one line), ``constituents``, ``tags`` and ``fallback`` of one parsed sentence (module
    docstring); ``marginals`` ``None`` for the parser's flat fallback tree."""
    index = grammar.index
    bot = top = None
    if marginals is not None:
        bot, top = _checked(marginals.mu_bot, "bot marginals"), _checked(marginals.mu_top, "top marginals")
    constituents: list[dict[str, Any]] = []
    tags: list[dict[str, Any]] = []
    for c, chain in enumerate(chains(tree)):
        for position, (label, start, end, preterminal) in enumerate(chain):
            if c == 0 and position == 0 and label == ROOT and not preterminal:
                continue  # the root
            if position == len(chain) - 1:
                layer, table = "bot", bot
            elif position == 0:
                layer, table = "top", top
            else:
                layer, table = "inner", None
            a = index.get(label)
            prob = None if table is None or a is None else float(table[start, end, a])
            if preterminal:
                tags.append({"label": label, "start": start, "end": end, "prob": prob})
            else:
                constituents.append({"label": label, "start": start, "end": end, "prob": prob, "layer": layer})
    tags.sort(key=lambda t: t["start"])
    return {"words": tree.leaves(), "tree": tree.pformat(margin=sys.maxsize), "constituents": constituents,
            "tags": tags, "fallback": marginals is None}


def span_answer(words: list[str], marginals: DenseMarginals | None, grammar: Grammar) -> dict[str, Any]:
    """``words``, ``spans``, ``labels``, ``label_probs`` and ``fallback`` of one sentence (module docstring)."""
    if marginals is None:
        return {"words": list(words), "spans": None, "labels": None, "label_probs": None, "fallback": True}
    bot = _checked(marginals.mu_bot, "bot marginals")
    n = bot.shape[0] - 1
    if n != len(words):
        raise ValueError(f"marginals of {n} words for {len(words)} words")
    phrasal = np.array([not label.startswith(AT) for label in grammar.labels])
    mass = bot[:, :, phrasal]
    upper = np.triu(np.ones((n + 1, n + 1), dtype=bool), k=1)
    spans = np.where(upper, np.clip(mass.sum(axis=2), 0.0, 1.0), 0.0)
    best = mass.argmax(axis=2)
    best_prob = np.where(upper, np.take_along_axis(mass, best[:, :, None], axis=2)[:, :, 0], 0.0)
    names = np.array(grammar.labels, dtype=object)[phrasal]
    labels = names[best]
    labels[~(upper & (best_prob > 0))] = None
    return {"words": list(words), "spans": spans.tolist(), "labels": labels.tolist(), "label_probs": best_prob.tolist(),
            "fallback": False}
