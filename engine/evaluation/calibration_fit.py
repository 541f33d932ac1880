"""Everything ``python -m engine calibrate`` fits on a development set, in the order it is applied
(``engine.decode.calibration``): the head power, the stage after it on the chosen head's probability
(``engine.decode.isotonic``: isotonic regression or Platt scaling, whichever has the lower expected calibration
error on held-out halves of the development set), then, on the parses calibrated by those two, the label power
and the tree power; and, for joint parses, the tag power (``upos_power``, on the tag beliefs alone)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from engine.decode.calibration import (
    ChosenHeads,
    calibrated_all,
    fit_label_and_tree_powers,
    fit_upos_power,
    minimise_power,
)
from engine.decode.isotonic import KEY, check_knots, fit_knots, fit_platt_knots
from engine.evaluation.metrics import calibration
from engine.results import ParsedSentence

STAGE_SPLITS, STAGE_SEED = 4, 0  # held-out halves of the development set that choose the chosen-head stage


def choose_stage(probs: np.ndarray, right: np.ndarray, sentence: np.ndarray) -> tuple[str, dict[str, float]]:
    """``isotonic`` or ``platt``: the stage whose map, fitted on a random half of the sentences, has the lower
    mean ECE on the other half over ``STAGE_SPLITS`` splits (seeded), and each stage's mean held-out ECE. A split
    that leaves a half without words is skipped; with none left (a development set of one sentence) the stage is
    ``isotonic`` and no ECE is reported."""
    rng = np.random.default_rng(STAGE_SEED)
    fits = {"isotonic": fit_knots, "platt": fit_platt_knots}
    eces: dict[str, list[float]] = {name: [] for name in fits}
    sentences = int(sentence.max()) + 1 if len(sentence) else 0
    for _ in range(STAGE_SPLITS):
        half = (rng.random(sentences) < 0.5)[sentence]
        if half.all() or not half.any():
            continue
        for name, fit in fits.items():
            knots = check_knots(fit(probs[half], right[half]))
            assert knots is not None
            eces[name].append(calibration(np.interp(probs[~half], *knots), right[~half])[0])
    means = {name: round(float(np.mean(values)), 5) for name, values in eces.items() if values}
    return (min(means, key=lambda name: (means[name], name)) if means else "isotonic"), means


def fit_calibration(parsed: Sequence[ParsedSentence], gold: Sequence[Any]) -> tuple[dict[str, Any],
                                                                                   list[ParsedSentence]]:
    """The manifest ``inference`` entries of the calibration fitted on the uncalibrated ``parsed`` against the
    ``gold`` sentences (their heads, deprels and UPOS), the parses with heads (and joint tags) calibrated by it,
    and, as ``head_stage``, which chosen-head stage was chosen and the held-out ECEs that chose it."""
    gold_heads = [g.heads for g in gold]
    heads = ChosenHeads(parsed, gold_heads)  # every word's head column laid out once, for the power and the stage
    power = minimise_power(heads.brier)  # fit_power, without laying the columns out a second time
    probs, right = heads.probabilities(power), heads.right
    sentence = np.concatenate([np.full(len(p.heads) - 1, i) for i, p in enumerate(parsed)]).astype(np.int64)
    stage, held_out = choose_stage(probs, right, sentence)
    knots = (fit_knots if stage == "isotonic" else fit_platt_knots)(probs, right)
    upos = fit_upos_power(parsed, gold)
    tags = {} if upos is None else {"upos_power": upos}
    tuned = calibrated_all(parsed, {"head_power": power, KEY: check_knots(knots), **tags})
    return {"head_power": power, KEY: knots, **fit_label_and_tree_powers(tuned, gold), **tags,
            "head_stage": {"stage": stage, "held_out_ece": held_out}}, tuned
