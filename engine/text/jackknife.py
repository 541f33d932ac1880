"""Jackknifed part-of-speech tags for parser training.

A parser trained on gold tags learns to trust them more than it should: at test time the tags are
predicted. Jackknifing (as in Collins & Koo 2005; standard for training parsers on predicted tags) splits
the training set into ``folds`` contiguous parts and tags each part with a tagger trained on the others,
so every training sentence carries tags as noisy as the tags of unseen text.

The fold taggers can also draw tag sequences from their posterior ``p(y | x)`` for the sentences they tag
(``jackknife_tag_draws``): the labeller trains on copies of each sentence under such draws as well
(``engine.training.pipeline``, ``--labeler-tag-samples``), so that it has seen the kinds of tag errors that
the draws averaged at parse time contain (``engine.decode.tag_marginal``).

The folds are independent: ``map_tasks`` (``engine.training.tasks``: a Dask task per fold with ``train
--cluster``) runs them, each fold returning its held-out sentences' tags; the driver writes them back in fold
order, so the result is that of the sequential loop.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from tqdm import tqdm

from engine.data.conllu_io import Sentence
from engine.text.tag_candidates import CandidateSettings, TagCandidates
from engine.text.tagger import Tagger

log = logging.getLogger(__name__)

TaskMap = Callable[..., list[Any]]  # map(fn, arguments) -> [fn(*a) for a in arguments], maybe on a cluster
# per sentence: UPOS, XPOS, draws, candidates (None unless asked)
FoldTags = list[tuple[list[str], list[str], list[tuple[list[str], list[str]]], TagCandidates | None]]


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
    map_tasks: TaskMap | None = None,
) -> tuple[list[Sentence], list[list[tuple[list[str], list[str]]]]]:
    """``jackknife_tags``, and for each sentence ``samples`` (UPOS, XPOS) sequences drawn from the posterior
    of the same fold tagger that gave it its best tags (``Tagger.tag(..., samples=)``). ``map_tasks`` runs the
    folds (default: one after the other here)."""
    out, draws, _ = _jackknife(sentences, folds, seed, train_kwargs, progress, samples, map_tasks, None)
    return out, draws


def jackknife_candidates(
    sentences: Sequence[Sentence],
    settings: CandidateSettings,
    folds: int = 5,
    seed: int = 0,
    train_kwargs: dict[str, Any] | None = None,
    progress: bool = False,
) -> tuple[list[Sentence], list[TagCandidates | None]]:
    """``jackknife_tags`` and each sentence's candidate tags from the same fold tagger (``Tagger.tag(...,
    candidates=settings, with_gold=True)``: the gold tags are always among them), for training a joint
    model of tags and trees (``engine.training.joint``); None for an empty sentence."""
    out, _, cands = _jackknife(sentences, folds, seed, train_kwargs, progress, 0, None, settings)
    return out, cands


def _jackknife(sentences: Sequence[Sentence], folds: int, seed: int, train_kwargs: dict[str, Any] | None,
               progress: bool, samples: int, map_tasks: TaskMap | None, settings: CandidateSettings | None,
               ) -> tuple[list[Sentence], list[list[tuple[list[str], list[str]]]], list[TagCandidates | None]]:
    """The fold loop of both: best tags, ``samples`` draws and, with ``settings``, candidates (gold added)."""
    folds = min(folds, len(sentences))
    if folds < 2:
        raise ValueError("jackknifing needs at least 2 folds and 2 sentences")
    kwargs = {"seed": seed, **(train_kwargs or {})}
    out = [copy.deepcopy(s) for s in sentences]
    draws: list[list[tuple[list[str], list[str]]]] = [[] for _ in sentences]
    cands: list[TagCandidates | None] = [None] * len(sentences)
    bounds = fold_bounds(len(sentences), folds)

    def fold(start: int, end: int) -> FoldTags:
        rest = [*sentences[:start], *sentences[end:]]
        tagger = Tagger.train(rest, **kwargs)
        tagged = [(list(r.upos), list(r.xpos), [(list(u), list(x)) for u, x in r.samples], r.candidates)
                  for r in tagger.tag(sentences[start:end], samples=samples, candidates=settings,
                                      with_gold=settings is not None)]
        log.info("jackknife fold: sentences %d-%d tagged by a model of %d sentences", start, end, len(rest))
        return tagged

    if map_tasks is None:  # here, one fold after the other, with a progress bar
        bar = tqdm(total=folds, desc="jackknife folds", unit="fold", disable=not progress)
        results = []
        for b in bounds:
            results.append(fold(*b))
            bar.update()
        bar.close()
    else:
        results = map_tasks(fold, bounds)
    for (start, _), tagged in zip(bounds, results, strict=True):
        for i, (upos, xpos, drawn, found) in enumerate(tagged):
            out[start + i].upos, out[start + i].xpos = upos, xpos
            draws[start + i] = drawn
            cands[start + i] = found
    return out, draws, cands
