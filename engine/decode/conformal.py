"""Head and label sets with a coverage guarantee: split conformal prediction with adaptive prediction sets.

For a word with a distribution ``p`` over candidates (its calibrated head marginals, ``marginals[:, m]``, or
its label distribution on the chosen arc), rank the candidates by probability, highest first (ties by index)
and score a candidate ``y`` by the total probability of the candidates ranked strictly before it:

    s(p, y) = sum_{k ranked before y} p_k          (0 for the most probable candidate)

This is the adaptive prediction set score of Romano, Sesia & Candes (2020), "Classification with valid and
adaptive coverage", eq. (5)-(6), in its non-randomised form (u = 0, the candidate that crosses the threshold
is included). Split conformal prediction (Vovk et al. 2005; Lei et al. 2018): with the scores ``s_1..s_n`` of
the true candidates of ``n`` calibration words (the dev set), the threshold for level ``alpha`` is

    q(alpha) = the k-th smallest s_i,  k = ceil((n + 1)(1 - alpha))   (+inf when k > n)

and a word's set is ``C(p) = {y : s(p, y) <= q}``: the candidates, in order of probability, until their total
probability first exceeds ``q`` (the crossing candidate included). If the test word and the calibration words
are exchangeable, its true candidate's score is at most ``q`` with probability >= 1 - alpha (ibid., Thm 1;
the rank of the test score among the n + 1 is uniform), so the set covers it with that probability.

The head columns scored (``SCORE``, since 2026-11-27) are those of the power map, before the stage on the chosen
head's probability (``head_columns``): an isotonic map is flat between its knots, and the scores
it makes equal across words all enter the sets when they tie at the threshold (EWT dev, the default model,
alpha 0.1, coverage on the calibration words themselves: 90.49% over the reported columns, 90.01% over the
power-mapped ones, with smaller sets). Thresholds stored under the former score (``LEGACY_SCORE``, the
reported columns) are applied to the reported columns, as they were fitted.

Non-randomised, and why: the randomised score ``s + u p_y`` (u uniform) makes coverage exactly 1 - alpha but
gives empty sets (the shipped EWT model: 4.5% of dev words at alpha = 0.1, ``bench/aps_randomised.py``) and
answers that change from call to call; the non-randomised set is deterministic, never empty (the most
probable candidate has score 0 <= q) and only over-covers, by the mass of the scores that tie at q (the zeros
of the words whose most probable candidate is right, when 1 - alpha is below that accuracy).

The unit of exchangeability is the word. Words of one sentence are not independent: the guarantee is for a
word drawn like the dev words (a random word of a random text of the same kind), not for every sentence.

Stored form: the thresholds for the levels of ``alpha_grid()`` (0.01 to 0.5 by 0.0025). Any ``alpha`` in
[0.01, 1) is answered with the threshold of the largest grid level ``a <= alpha`` (0.5 above 0.5): ``q`` is
non-increasing in alpha (k is), so that threshold is >= q(alpha), the set a superset of alpha's, and its
coverage >= 1 - a >= 1 - alpha (``threshold_for``; tests/engine/decode/test_conformal.py checks it).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from engine.decode.labeler import label_distributions
from engine.results import ParsedSentence

ALPHA_MIN, ALPHA_MAX, ALPHA_STEP = 0.01, 0.5, 0.0025
SCORE = "aps-power-nonrandomised"  # scores over the power-mapped head columns (``head_columns``)
LEGACY_SCORE = "aps-nonrandomised"  # over the reported columns, as models calibrated before 2026-11-27 store it


def alpha_grid() -> np.ndarray:
    """The levels whose thresholds are stored: 0.01, 0.0125, ..., 0.5 (197 levels)."""
    count = int(round((ALPHA_MAX - ALPHA_MIN) / ALPHA_STEP)) + 1
    return np.round(ALPHA_MIN + ALPHA_STEP * np.arange(count), 4)


def check_alpha(value: object) -> float:
    """``value`` as a level if it is a number in (0, 1) the stored thresholds answer (>= ``ALPHA_MIN``), else
    ValueError."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < float(value) < 1:
        raise ValueError(f"alpha must be a number in (0, 1), got {value!r}")
    if float(value) < ALPHA_MIN:
        raise ValueError(f"alpha must be at least {ALPHA_MIN} (the smallest level the model stores), got {value!r}")
    return float(value)


def _ranked(probs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For rows of candidate probabilities (N, K): the candidates by probability, highest first, ties by index,
    and the total probability ranked strictly before each position (N, K)."""
    order = np.argsort(-probs, axis=1, kind="stable")
    ranked = np.take_along_axis(probs, order, axis=1)
    return order, np.cumsum(ranked, axis=1) - ranked


def aps_scores(probs: np.ndarray, truth: np.ndarray) -> np.ndarray:
    """``s(p_i, truth_i)`` for each row ``p_i`` of ``probs`` (N, K): the probability ranked before the truth."""
    probs = np.asarray(probs, dtype=np.float64)
    order, before = _ranked(probs)
    position = np.argmax(order == np.asarray(truth)[:, None], axis=1)
    return before[np.arange(len(probs)), position]


def prediction_sets(probs: np.ndarray, threshold: float) -> list[np.ndarray]:
    """For each row of ``probs`` (N, K), the candidates ``y`` with ``s(p, y) <= threshold``, most probable first."""
    order, before = _ranked(np.asarray(probs, dtype=np.float64))
    return [o[b <= threshold] for o, b in zip(order, before, strict=True)]


def conformal_threshold(scores: np.ndarray, alpha: float) -> float:
    """The k-th smallest score, k = ceil((n + 1)(1 - alpha)); +inf when k > n (too few scores for alpha)."""
    n = len(scores)
    k = math.ceil((n + 1) * (1.0 - alpha))
    return math.inf if k > n else float(np.sort(np.asarray(scores, dtype=np.float64))[k - 1])


def fit_thresholds(scores: np.ndarray) -> list[float | None]:
    """The threshold of every level of ``alpha_grid()`` (None for +inf: every candidate), as stored."""
    return [None if math.isinf(q) else q for q in (conformal_threshold(scores, float(a)) for a in alpha_grid())]


def threshold_for(stored: Sequence[float | None], alpha: float) -> float:
    """The threshold answering ``alpha`` from the stored grid: that of the largest grid level <= alpha."""
    grid = alpha_grid()
    if len(stored) != len(grid):
        raise ValueError(f"expected {len(grid)} stored thresholds, got {len(stored)}")
    index = int(np.searchsorted(grid, check_alpha(alpha) + 1e-12, side="right")) - 1
    value = stored[min(index, len(grid) - 1)]
    return math.inf if value is None else float(value)


def head_columns(parsed: ParsedSentence, score: str = SCORE) -> np.ndarray:
    """(n, n+1): row m-1 is word m's distribution over heads 0..n. ``LEGACY_SCORE``: its column of the marginals
    as reported. ``SCORE``: the column after the power map and before the stage on the chosen head (isotonic or
    Platt knots, ``engine.decode.isotonic.remap_chosen``, undone here from the recorded ``power_head_probs``): an
    isotonic map is flat between its knots, so its probabilities tie across words, and scores that tie at the
    threshold all enter the sets (EWT dev, in-sample, alpha 0.1: 90.49% coverage over the reported columns); the
    power map keeps them apart. Either way a word's heads rank the same but for the chosen head's place."""
    columns = np.asarray(parsed.marginals, dtype=np.float64)[:, 1:].T
    power = (parsed.diagnostics or {}).get("power_head_probs")
    if score == LEGACY_SCORE or power is None or not len(columns):
        return columns
    rows, heads = np.arange(len(columns)), np.asarray(parsed.heads[1:])
    mapped, before = columns[rows, heads], np.asarray(power, dtype=np.float64)
    movable = 1.0 - mapped > 1e-12
    scale = np.where(movable, (1.0 - before) / np.where(movable, 1.0 - mapped, 1.0), 1.0)
    out = columns * scale[:, None]
    out[rows, heads] = np.where(movable, before, mapped)
    return out


def head_sets(parsed: ParsedSentence, threshold: float, score: str = SCORE) -> list[list[int]]:
    """Each word's head set (most probable first); a word is never its own head."""
    sets = prediction_sets(head_columns(parsed, score), threshold)
    return [[int(h) for h in s if h != m] for m, s in enumerate(sets, start=1)]


def label_rows(parsed: ParsedSentence, labeler: Any, sentence: Any) -> np.ndarray:
    """(n, L) label distributions on the parse's tree: those averaged over tag samples when the parse has them
    (``ParsedSentence.label_dists``), else the labeller's."""
    if parsed.label_dists is not None:
        return np.asarray(parsed.label_dists, dtype=np.float64)
    return np.asarray(label_distributions(labeler, [sentence], [parsed.heads])[0], dtype=np.float64)


def fit_conformal(parses: Sequence[ParsedSentence], sentences: Sequence[Any], gold: Sequence[Any],
                  labeler: Any) -> dict[str, Any]:
    """Scores of the gold heads (and gold labels, when the labeller has them) on the parses of ``sentences``
    (the input as parsed: re-tagged or not) against ``gold``, and the thresholds of ``alpha_grid()`` fitted on
    them: the manifest's ``inference.conformal``."""
    head_scores = np.concatenate([aps_scores(head_columns(p), g.heads[1:]) for p, g in zip(parses, gold, strict=True)])
    out: dict[str, Any] = {"score": SCORE, "words": int(len(head_scores)), "alpha_min": ALPHA_MIN,
                           "alpha_max": ALPHA_MAX, "alpha_step": ALPHA_STEP, "heads": fit_thresholds(head_scores)}
    labels = list(getattr(labeler, "labels", None) or [])
    index = {label: i for i, label in enumerate(labels)}
    if labels and all(g.deprels is not None for g in gold):
        rows, truth = [], []
        for p, s, g in zip(parses, sentences, gold, strict=True):
            dist = label_rows(p, labeler, s)
            for j, label in enumerate(g.deprels):
                # a gold label the labeller never saw can be in no set: the largest possible score
                rows.append(dist[j])
                truth.append(index.get(label, -1))
        probs, truth_a = np.array(rows), np.array(truth)
        scores = np.where(truth_a >= 0, aps_scores(probs, np.maximum(truth_a, 0)), np.inf)
        out["deprels"] = fit_thresholds(scores)
    return out


def stored_conformal(manifest: dict[str, Any], alpha: object = None) -> dict[str, Any]:
    """The model's fitted thresholds (manifest ``inference.conformal``); ValueError naming ``calibrate`` when the
    model has none, or when ``alpha`` (if given) is not a level they answer (``check_alpha``)."""
    if alpha is not None:
        check_alpha(alpha)
    data = (manifest.get("inference") or {}).get("conformal")
    if not isinstance(data, dict) or "heads" not in data:
        raise ValueError("the model has no conformal thresholds for head sets: fit them on a development treebank "
                         "with `python -m engine calibrate --model MODEL --data DEV`")
    if data.get("score", LEGACY_SCORE) not in (SCORE, LEGACY_SCORE):
        raise ValueError(f"inference.conformal.score {data.get('score')!r} is not one this engine computes "
                         f"({SCORE}, {LEGACY_SCORE}): fit the thresholds again with `python -m engine calibrate`")
    return data


def word_sets(parsed: ParsedSentence, sentence: Any, labeler: Any, conformal: dict[str, Any],
              alpha: float) -> tuple[list[list[int]], list[float], list[list[str]] | None]:
    """Each word's head set, the set's total (calibrated) probability, and its label set (None when the model
    stores no label thresholds) at level ``alpha``."""
    columns = head_columns(parsed, LEGACY_SCORE)  # the reported probabilities, for the sets' total
    heads = head_sets(parsed, threshold_for(conformal["heads"], alpha), conformal.get("score", LEGACY_SCORE))
    mass = [min(float(columns[j, s].sum()), 1.0) for j, s in enumerate(heads)]
    labels = list(getattr(labeler, "labels", None) or [])
    if not labels or not conformal.get("deprels"):
        return heads, mass, None
    sets = prediction_sets(label_rows(parsed, labeler, sentence), threshold_for(conformal["deprels"], alpha))
    return heads, mass, [[labels[int(i)] for i in s] for s in sets]


def sets_misc(parsed: ParsedSentence, sentence: Any, labeler: Any, conformal: dict[str, Any],
              alpha: float) -> dict[str, list[str | None]]:
    """MISC values ``HeadSet=3,5`` and ``DeprelSet=nsubj,obj`` per word (comma-separated: '|' separates MISC
    attributes)."""
    heads, _, deprels = word_sets(parsed, sentence, labeler, conformal, alpha)
    misc: dict[str, list[str | None]] = {"HeadSet": [",".join(str(h) for h in s) for s in heads]}
    if deprels is not None:
        misc["DeprelSet"] = [",".join(s) for s in deprels]
    return misc
