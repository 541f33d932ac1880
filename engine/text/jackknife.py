"""Jackknifed part-of-speech tags for parser training.

A parser trained on gold tags learns to trust them more than it should: at test time the tags are
predicted. Jackknifing (as in Collins & Koo 2005; standard for training parsers on predicted tags) splits
the training set into ``folds`` contiguous parts and tags each part with a tagger trained on the others,
so every training sentence carries tags as noisy as the tags of unseen text.

The fold taggers can also draw tag sequences from their posterior ``p(y | x)`` for the sentences they tag
(``jackknife_tag_draws``): the labeller trains on copies of each sentence under such draws as well
(``engine.training.pipeline``, ``--labeler-tag-samples``), so that it has seen the kinds of tag errors that
the draws averaged at parse time contain (``engine.decode.tag_marginal``).
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Sequence
from typing import Any

import numpy as np
from tqdm import tqdm

from engine.data.conllu_io import Sentence
from engine.text.tagger import Tagger

log = logging.getLogger(__name__)


def fold_bounds(n: int, folds: int) -> list[tuple[int, int]]:
    """``folds`` contiguous ``[start, end)`` ranges covering ``0..n``, sizes differing by at most one."""
    edges = np.linspace(0, n, folds + 1).round().astype(int)
    return [(int(a), int(b)) for a, b in zip(edges[:-1], edges[1:], strict=True)]


def jackknife_tags(
    sentences: Sequence[Sentence],
    folds: int = 5,
    seed: int = 0,
    train_kwargs: dict[str, Any] | None = None,
    progress: bool = False,
) -> list[Sentence]:
    """Deep copies of ``sentences`` (same order) whose ``upos``/``xpos`` are predicted by a tagger trained
    on the other ``folds - 1`` contiguous folds; nothing else changes (``lines`` keep the original text).

    ``train_kwargs`` go to ``Tagger.train`` (``seed`` is passed unless given there). With fewer sentences
    than folds, ``folds`` is reduced; one fold (or one sentence) cannot be jackknifed: ``ValueError``.
    """
    return jackknife_tag_draws(sentences, folds, seed, train_kwargs, progress)[0]


def jackknife_tag_draws(
    sentences: Sequence[Sentence],
    folds: int = 5,
    seed: int = 0,
    train_kwargs: dict[str, Any] | None = None,
    progress: bool = False,
    samples: int = 0,
) -> tuple[list[Sentence], list[list[tuple[list[str], list[str]]]]]:
    """``jackknife_tags``, and for each sentence ``samples`` (UPOS, XPOS) sequences drawn from the posterior
    of the same fold tagger that gave it its best tags (``Tagger.tag(..., samples=)``)."""
    folds = min(folds, len(sentences))
    if folds < 2:
        raise ValueError("jackknifing needs at least 2 folds and 2 sentences")
    kwargs = {"seed": seed, **(train_kwargs or {})}
    out = [copy.deepcopy(s) for s in sentences]
    draws: list[list[tuple[list[str], list[str]]]] = [[] for _ in sentences]
    for k, (start, end) in enumerate(tqdm(fold_bounds(len(sentences), folds), desc="jackknife folds",
                                          unit="fold", disable=not progress)):
        rest = [*sentences[:start], *sentences[end:]]
        tagger = Tagger.train(rest, **kwargs)
        held_out = out[start:end]
        for i, (sent, result) in enumerate(zip(held_out, tagger.tag(held_out, samples=samples), strict=True)):
            sent.upos, sent.xpos = result.upos, result.xpos
            draws[start + i] = [(list(u), list(x)) for u, x in result.samples]
        log.info("jackknife fold %d/%d: sentences %d-%d tagged by a model of %d sentences",
                 k + 1, folds, start, end, len(rest))
    return out, draws
