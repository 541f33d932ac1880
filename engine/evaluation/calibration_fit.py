"""Everything ``python -m engine calibrate`` fits on a development set, in the order it is applied
(``engine.decode.calibration``): the head power, the isotonic stage after it (``engine.decode.isotonic``),
then, on the parses calibrated by those two, the label power and the tree power."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from engine.decode.calibration import calibrated, calibrated_all, fit_label_and_tree_powers, fit_power
from engine.decode.isotonic import KEY, check_knots, fit_knots
from engine.results import ParsedSentence


def fit_calibration(parsed: Sequence[ParsedSentence], gold: Sequence[Any]) -> tuple[dict[str, Any],
                                                                                   list[ParsedSentence]]:
    """The manifest ``inference`` entries of the calibration fitted on the uncalibrated ``parsed`` against the
    ``gold`` sentences (their heads and deprels), and the parses with heads calibrated by it."""
    gold_heads = [g.heads for g in gold]
    power = fit_power(parsed, gold_heads)
    knots = fit_knots(np.concatenate([calibrated(p, power).head_probs for p in parsed]),
                      np.concatenate([p.heads[1:] == g[1:] for p, g in zip(parsed, gold_heads, strict=True)]))
    tuned = calibrated_all(parsed, {"head_power": power, KEY: check_knots(knots)})
    return {"head_power": power, KEY: knots, **fit_label_and_tree_powers(tuned, gold)}, tuned
