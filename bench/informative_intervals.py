"""How often the Riedel & Smith Prop. 2 interval that ``/confidence`` serves says something: relaxed inference
on a second-order model at a few settings, over a treebank's first sentences (gold tags, gold tokens).

    nice -n 5 python bench/informative_intervals.py --model models/en_ewt-o2 \\
        --data ../shared/data/ud/en_ewt/en_ewt-ud-dev.conllu --limit 500

For each setting Rel(R, epsilon) (at most R rounds of adding factors, gain threshold epsilon; ``inf``: until
none is added) every sentence is parsed as ``/confidence`` parses it (``engine parse --inference relaxed``; the
model has no head calibration, so the interval is around the marginal the parse reports) and each word's
interval ``marginal_interval(p(head), eta)`` is computed. Reports: the share of intervals that are vacuous
(cover [0, 1]: ``vacuous: true`` on ``/confidence``), the share of sentences with no vacuous interval, the
median and 90th percentile of eta, the mean width of the informative intervals, the mean fraction of the
higher-order factors used, and the seconds the run took (shared machine: indicative only). One JSON line
per setting.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # this checkout's engine


from engine.cli import build_parser
from engine.cli_parse import load_parser
from engine.data.conllu_io import read_conllu
from engine.inference.relaxed_gain import marginal_interval

SETTINGS = [("1", 1e-4), ("3", 1e-4), ("inf", 1e-4), ("inf", 1e-6), ("inf", 1e-8), ("inf", 0.0)]


def run(model: str, data: str, sentences: list, rounds: str, epsilon: float) -> dict:
    """One setting's figures (module docstring)."""
    args = build_parser().parse_args(["parse", "--model", model, "--inference", "relaxed", "--rounds", rounds,
                                      "--epsilon", str(epsilon)])
    _, parse = load_parser(args)
    start = time.perf_counter()
    parsed = parse(sentences)
    seconds = time.perf_counter() - start
    vacuous, widths, etas, clean, fractions = [], [], [], [], []
    for p in parsed:
        eta = float((p.diagnostics or {}).get("eta", 0.0))
        lower, upper = marginal_interval(np.asarray(p.head_probs), eta)
        v = (lower <= 0.0) & (upper >= 1.0)
        vacuous.append(v)
        widths.append((upper - lower)[~v])
        etas.append(eta)
        clean.append(not v.any())
        fractions.append(float((p.diagnostics or {}).get("factor_fraction", 1.0)))
    v_all, w_all = np.concatenate(vacuous), np.concatenate(widths)
    return {"setting": f"Rel({rounds}, {epsilon:g})", "sentences": len(parsed), "words": int(len(v_all)),
            "vacuous_share": round(float(v_all.mean()), 4),
            "sentences_without_vacuous": round(float(np.mean(clean)), 4),
            "eta_median": round(float(np.median(etas)), 3), "eta_p90": round(float(np.percentile(etas, 90)), 3),
            "informative_mean_width": round(float(w_all.mean()), 4) if len(w_all) else None,
            "factor_fraction": round(float(np.mean(fractions)), 4), "seconds": round(seconds, 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="models/en_ewt-o2")
    ap.add_argument("--data", required=True)
    ap.add_argument("--limit", type=int, default=None, help="the treebank's first LIMIT sentences (default: all)")
    a = ap.parse_args()
    sentences = read_conllu(a.data)[:a.limit]
    print(json.dumps({"model": a.model, "data": a.data, "limit": a.limit, "machine": platform.machine(),
                      "python": platform.python_version()}))
    for rounds, epsilon in SETTINGS:
        print(json.dumps(run(a.model, a.data, sentences, rounds, epsilon)), flush=True)


if __name__ == "__main__":
    main()
