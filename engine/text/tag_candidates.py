"""Candidate tags per word for joint tagging and parsing (Smith & Eisner 2008 §3.4; issue 23).

BP over tag variables (``engine.graph.tags``) needs each word's domain small: a word's candidates are its
tagger 1-best state (the Viterbi path's (UPOS, XPOS) state, always slot 0, so that a word with one candidate
keeps today's tag) followed by its other states in decreasing tagger marginal, at most ``TAG_CANDIDATES``
in all, each with a marginal of at least ``CANDIDATE_MIN_MARGINAL`` (a state the tagger gives less is
pruned: on EWT dev most words keep a single candidate, and each of the others multiplies the arc scores to
compute by up to ``TAG_CANDIDATES``). Those two defaults are declared here once (0.2 chosen on EWT dev among
0.001, 0.1, 0.2, 0.3, 0.45: docs/joint-tags.md); a model's manifest can give its own
(``inference.tag_candidates`` = ``{"k": 3, "min_marginal": 0.2}``) and the command line overrides both.

The candidates restrict the tagger's CRF (``engine.text.tagger``): TAG_i is its emission log-potential of
each candidate state, CHAIN its transitions between the candidates of neighbouring words and its start and
end scores. Padding slots (a word with fewer candidates than the sentence's widest) have emission ``-inf``.
``mass`` and ``pruned`` keep what pruning left out of the tagger's posterior, so that a word's reported UPOS
distribution can count it (``engine.decode.joint_tags``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import compress
from typing import Any

import numpy as np

TAG_CANDIDATES = 3  # at most this many candidate states per word
CANDIDATE_MIN_MARGINAL = 0.2  # states below this tagger marginal are not candidates (the 1-best always is)


@dataclass(frozen=True)
class CandidateSettings:
    """How many candidates per word at most (``k`` >= 1) and the smallest tagger marginal of a candidate
    besides the 1-best (``min_marginal`` in [0, 1])."""

    k: int = TAG_CANDIDATES
    min_marginal: float = CANDIDATE_MIN_MARGINAL

    def __post_init__(self) -> None:
        if isinstance(self.k, bool) or not isinstance(self.k, int) or self.k < 1:
            raise ValueError(f"tag_candidates.k must be an integer >= 1, got {self.k!r}")
        if not 0.0 <= float(self.min_marginal) <= 1.0:
            raise ValueError(f"tag_candidates.min_marginal must be in [0, 1], got {self.min_marginal!r}")

    @classmethod
    def resolve(cls, manifest: Mapping[str, Any] | None, k: int | None = None,
                min_marginal: float | None = None) -> CandidateSettings:
        """The user's values where given, else the manifest's ``inference.tag_candidates``, else the defaults."""
        block = ((manifest or {}).get("inference") or {}).get("tag_candidates") or {}
        if not isinstance(block, Mapping) or set(block) - {"k", "min_marginal"}:
            raise ValueError(f"inference.tag_candidates must be an object with k and min_marginal, got {block!r}")
        return cls(k if k is not None else block.get("k", TAG_CANDIDATES),
                   min_marginal if min_marginal is not None else block.get("min_marginal", CANDIDATE_MIN_MARGINAL))


@dataclass
class TagCandidates:
    """One sentence's candidate states (n words, g slots; slot 0 the 1-best) and the CRF restricted to them."""

    states: np.ndarray  # (n, g) int64 tagger state indices (padding: the 1-best state again)
    allowed: np.ndarray  # (n, g) bool
    upos: list[list[str]]  # per word, its candidates' UPOS (allowed slots only)
    xpos: list[list[str]]
    emissions: np.ndarray  # (n, g) TAG log-potentials, -inf on padding
    transitions: np.ndarray  # (n-1, g, g) CHAIN log-potentials between neighbouring words' slots
    start: np.ndarray  # (g,) log-potential of the first word's slots
    end: np.ndarray  # (g,) of the last word's
    mass: np.ndarray  # (n,) the tagger's marginal probability of each word's candidate states together
    pruned: np.ndarray  # (n, U) the tagger's marginal of each UPOS's pruned states (its states not candidates)
    slot_upos: np.ndarray  # (n, g) int64 each slot's UPOS as a column of ``pruned`` (``upos_labels``)
    upos_labels: tuple[str, ...]  # the tagger's UPOS labels: the columns of ``pruned``


def first_candidates_are(tokens: Any, upos: Sequence[Sequence[str]], xpos: Sequence[Sequence[str]]) -> bool:
    """Whether each word's first candidate (``upos[i][0]``, ``xpos[i][0]``) is its own tags (``tokens.upos``,
    ``tokens.xpos``): so when parsing, both being the tagger's Viterbi path; not in training, which keeps the
    gold tags in the sentence."""
    return list(tokens.upos) == [u[0] for u in upos] and list(tokens.xpos or []) == [x[0] for x in xpos]


def _ranked(marginals: np.ndarray, best: np.ndarray, settings: CandidateSettings) -> tuple[np.ndarray, np.ndarray]:
    """Per word (row), ``best`` then its other states by decreasing marginal, ``settings.k`` in all, and which of
    them are kept (the best always; the others down to ``settings.min_marginal``: a prefix of each row)."""
    n, s = marginals.shape
    k = min(settings.k, s)
    others = np.where(np.arange(s)[None, :] == best[:, None], -1.0, marginals)
    order = top_columns(others, k - 1)
    states = np.concatenate([best[:, None], order], axis=1)
    keep = np.concatenate([np.ones((n, 1), bool),
                           np.take_along_axis(others, order, axis=1) >= settings.min_marginal], axis=1)
    return states, keep


def top_columns(values: np.ndarray, r: int) -> np.ndarray:
    """``np.argsort(-values, axis=1, kind="stable")[:, :r]``: per row the columns of the ``r`` largest values, ties
    in column order. For a few columns, ``r`` passes of ``argmax`` (the first of the largest) with the column taken
    set to -inf: the same columns without sorting every row (150 ms a sort for 25,000 words of 102 tagger states)."""
    if r > 8 or r > values.shape[1] or not np.isfinite(values).all():
        return np.argsort(-values, axis=1, kind="stable")[:, :r]
    work = np.array(values, dtype=np.float64)
    rows = np.arange(len(work))
    out = np.empty((len(work), r), dtype=np.intp)
    for j in range(r):
        out[:, j] = work.argmax(axis=1)
        work[rows, out[:, j]] = -np.inf
    return out


def choose_states(marginals: np.ndarray, best: np.ndarray, settings: CandidateSettings,
                  required: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Per word of one sentence, its candidate states (n, g) and which slots are used (n, g): ``best`` (n,)
    first, then the other states by decreasing ``marginals`` (n, S) down to ``settings.min_marginal``.
    ``required`` (n,): a state each word must have among its candidates (training: the gold tags), -1 for
    none; one that is not there takes the word's first free slot (a slot more if every one is used)."""
    n = len(marginals)
    states, keep = _ranked(marginals, best, settings)
    if required is not None:
        states = np.concatenate([states, np.zeros((n, 1), np.int64)], axis=1)
        keep = np.concatenate([keep, np.zeros((n, 1), bool)], axis=1)
        need = np.flatnonzero((required >= 0) & ~((states == required[:, None]) & keep).any(axis=1))
        free = np.argmin(keep[need], axis=1)  # the first unused slot: the last column always is
        states[need, free], keep[need, free] = required[need], True
    width = int(keep.sum(axis=1).max(initial=1))
    states, keep = states[:, :width], keep[:, :width]
    return np.where(keep, states, best[:, None]), keep


def restrict(emissions: np.ndarray, transitions: np.ndarray, states: np.ndarray, allowed: np.ndarray,
             labels: tuple[list[str], list[str], np.ndarray], marginals: np.ndarray) -> TagCandidates:
    """The CRF of one sentence (emissions (n, S), transitions (S+1, S+1) with the start row and end column
    last) restricted to the candidate ``states``; ``labels`` = (UPOS labels, XPOS labels, the (S, 2) states);
    ``marginals`` (n, S) the tagger's state marginals (for ``mass`` and ``pruned``)."""
    found = _restricted(emissions, transitions, marginals, states, allowed, labels, [0, len(states)], states.shape[1])
    assert found[0] is not None, "a sentence of no words has no candidates"
    return found[0]


def candidates_many(emissions: np.ndarray, transitions: np.ndarray, marginals: np.ndarray, best: np.ndarray,
                    offsets: np.ndarray, settings: CandidateSettings,
                    labels: tuple[list[str], list[str], np.ndarray]) -> list[TagCandidates | None]:
    """``restrict(..., *choose_states(...))`` of every sentence of a tagger chunk at once (no required states):
    ``emissions``, ``marginals`` (N, S) and ``best`` (N,) of the chunk's N words, sentence r the words
    ``offsets[r]:offsets[r + 1]`` (None for an empty one). Every step of those two is a function of one word's
    row, so it runs over the chunk's rows together at the widest width, and each sentence takes its rows and its
    own width: the same arrays bit for bit (tested), without their per-sentence numpy calls."""
    states, keep = _ranked(marginals, best, settings)
    states = np.where(keep, states, best[:, None])  # a prefix of each row is kept (the others sorted descending)
    return _restricted(emissions, transitions, marginals, states, keep, labels, offsets.tolist())


def _restricted(emissions: np.ndarray, transitions: np.ndarray, marginals: np.ndarray, states: np.ndarray,
                keep: np.ndarray, labels: tuple[list[str], list[str], np.ndarray], offsets: list[int],
                width: int | None = None) -> list[TagCandidates | None]:
    """``restrict`` of each sentence of consecutive words ``offsets[r]:offsets[r + 1]`` (None for an empty one),
    computed over all their rows at once (each step is a function of one word's row; the sums over a row's states
    are ``np.bincount``'s, in ``np.add.at``'s order), each sentence then taking its rows at ``width`` slots (default:
    the most any of its words keeps)."""
    upos_labels, xpos_labels, pairs = labels
    n_words, s = marginals.shape
    k, n_upos = states.shape[1], len(upos_labels)
    kept = np.where(keep, np.take_along_axis(marginals, states, axis=1), 0.0)
    slot_upos = pairs[states, 0]
    by_upos = np.bincount(np.repeat(np.arange(n_words) * n_upos, s) + np.tile(pairs[:, 0], n_words),
                          marginals.reshape(-1), n_words * n_upos)
    kept_by_upos = np.bincount(np.repeat(np.arange(n_words) * n_upos, k) + slot_upos.reshape(-1), kept.reshape(-1),
                               n_words * n_upos)
    pruned = np.maximum(by_upos - kept_by_upos, 0.0).reshape(n_words, n_upos)
    end_state = transitions.shape[0] - 1
    em = np.where(keep, np.take_along_axis(emissions, states, axis=1), -np.inf)
    trans = transitions[states[:-1, :, None], states[1:, None, :]]  # between each word and the next one
    first, last = transitions[end_state, states], transitions[states, end_state]
    upos_rows = np.array(upos_labels, dtype=object)[slot_upos].tolist()
    xpos_rows = np.array(xpos_labels, dtype=object)[pairs[states, 1]].tolist()
    keep_rows, counts = keep.tolist(), keep.sum(axis=1).tolist()
    out: list[TagCandidates | None] = []
    for a, b in zip(offsets[:-1], offsets[1:], strict=True):
        if b == a:
            out.append(None)
            continue
        g = width if width is not None else max(counts[a:b])
        out.append(TagCandidates(states[a:b, :g], keep[a:b, :g],
                                 [list(compress(r, o)) for r, o in zip(upos_rows[a:b], keep_rows[a:b], strict=True)],
                                 [list(compress(r, o)) for r, o in zip(xpos_rows[a:b], keep_rows[a:b], strict=True)],
                                 em[a:b, :g], trans[a:b - 1, :g, :g], first[a, :g], last[b - 1, :g],
                                 kept[a:b].sum(axis=1), pruned[a:b], slot_upos[a:b, :g], tuple(upos_labels)))
    return out
