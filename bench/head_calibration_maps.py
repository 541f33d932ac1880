"""Which map calibrates the chosen heads' probabilities best, on held-out dev: each candidate is fitted on a
random half of the sentences (by the Brier score, or by isotonic / bin means) and its ECE measured on the other
half, over 4 random splits (seed 0).

    nice -n 5 python bench/head_calibration_maps.py --model models/en_ewt \\
        --data ../shared/data/ud/en_ewt/en_ewt-ud-dev.conllu

The model parses the treebank as ``evaluate --tags predicted --calibration none`` does (its default tag
samples and tag average; a model without a tagger, as with ``--tags gold``). Candidates: the power map
``p^a`` on each word's head distribution (``engine.decode.calibration``); Platt scaling (slope and intercept
on the chosen head's log-odds) alone and after the power map; isotonic regression after the power map
(``engine.decode.isotonic``); 15 equal-count bins after the power map (histogram binning). Prints one JSON
line per candidate: ECE per split and mean.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # this checkout's engine

from scipy.optimize import minimize

from engine.cli import build_parser
from engine.cli_parse import load_parser, parse_tagged, resolve_tag_samples, tag_inputs
from engine.data.conllu_io import read_conllu
from engine.decode.calibration import ChosenHeads, minimise_power
from engine.decode.isotonic import check_knots, fit_knots
from engine.evaluation.metrics import calibration


def _platt(z: np.ndarray, y: np.ndarray, fit: np.ndarray) -> np.ndarray:
    """Platt scaling fitted on ``fit`` by the Brier score, applied to every ``z`` (log-odds)."""
    def loss(ab: np.ndarray) -> float:
        return float(((1 / (1 + np.exp(-(ab[0] * z[fit] + ab[1]))) - y[fit]) ** 2).mean())
    a, b = minimize(loss, [1.0, 0.0], method="Nelder-Mead").x
    return np.asarray(1 / (1 + np.exp(-(a * z + b))))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="models/en_ewt")
    ap.add_argument("--data", required=True)
    a = ap.parse_args()
    args = build_parser().parse_args(["evaluate", "--model", a.model, "--data", a.data, "--calibration", "none"])
    _, parse = load_parser(args)
    resolve_tag_samples(args)
    gold = read_conllu(a.data)
    inputs = [s.copy() for s in gold]
    # as the CLI tags them (a joint model's candidate tags too); a model without a tagger parses the gold tags
    draws = tag_inputs(args, inputs, retag=True)[1] if args.pipeline.tagger is not None else [[] for _ in inputs]
    parsed = parse_tagged(args, parse, inputs, draws)
    right = np.concatenate([p.heads[1:] == g.heads[1:] for p, g in zip(parsed, gold, strict=True)])
    sentence = np.concatenate([np.full(g.n, i) for i, g in enumerate(gold)])
    raw = np.concatenate([p.head_probs for p in parsed])

    heads = ChosenHeads(parsed, [g.heads for g in gold])  # calibrated(p, power).head_probs, all words at once
    powered = heads.probabilities

    def logit(q: np.ndarray) -> np.ndarray:
        q = np.clip(q, 1e-12, 1 - 1e-12)
        return np.log(q) - np.log1p(-q)

    rng = np.random.default_rng(0)
    results: dict[str, list[float]] = {}
    for _ in range(4):
        half = rng.random(len(gold)) < 0.5
        fit, held = half[sentence], ~half[sentence]
        power = minimise_power(lambda x, fit=fit: float(((powered(x)[fit] - right[fit]) ** 2).mean()))
        q = powered(power)
        edges = np.quantile(q[fit], np.linspace(0, 1, 16))
        bins = np.clip(np.searchsorted(edges, q, side="right") - 1, 0, 14)
        means = np.array([right[fit][bins[fit] == b].mean() if np.any(bins[fit] == b) else 0.5 for b in range(15)])
        knots = check_knots(fit_knots(q[fit], right[fit]))
        assert knots is not None
        maps = {"raw": raw, "power": q, "platt": _platt(logit(raw), right, fit),
                "power+platt": _platt(logit(q), right, fit), "power+isotonic": np.interp(q, *knots),
                "power+15 bins": means[bins]}
        for name, values in maps.items():
            results.setdefault(name, []).append(calibration(values[held], right[held])[0])
    for name, eces in results.items():
        print(json.dumps({"map": name, "held_out_ece": [round(e, 4) for e in eces],
                          "mean": round(float(np.mean(eces)), 4)}))


if __name__ == "__main__":
    main()
