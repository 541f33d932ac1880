"""Everything ``python -m engine calibrate`` fits on a development set, in the order it is applied
(``engine.decode.calibration``): the head power, the isotonic stage after it (``engine.decode.isotonic``),
then, on the parses calibrated by those two, the label power and the tree power; and, for joint parses, the
tag power (``upos_power``, on the tag beliefs alone)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from engine.decode.calibration import calibrated, calibrated_all, fit_label_and_tree_powers, fit_power, fit_upos_power
from engine.decode.isotonic import KEY, check_knots, fit_knots
from engine.results import ParsedSentence


def fit_calibration(parsed: Sequence[ParsedSentence], gold: Sequence[Any]) -> tuple[dict[str, Any],
                                                                                   list[ParsedSentence]]:
    """The manifest ``inference`` entries of the calibration fitted on the uncalibrated ``parsed`` against the
    ``gold`` sentences (their heads, deprels and UPOS), and the parses with heads (and joint tags) calibrated
    by it."""
    gold_heads = [g.heads for g in gold]
    power = fit_power(parsed, gold_heads)
    knots = fit_knots(np.concatenate([calibrated(p, power).head_probs for p in parsed]),
                      np.concatenate([p.heads[1:] == g[1:] for p, g in zip(parsed, gold_heads, strict=True)]))
    upos = fit_upos_power(parsed, gold)
    tags = {} if upos is None else {"upos_power": upos}
    tuned = calibrated_all(parsed, {"head_power": power, KEY: check_knots(knots), **tags})
    return {"head_power": power, KEY: knots, **fit_label_and_tree_powers(tuned, gold), **tags}, tuned
