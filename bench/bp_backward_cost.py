"""Cost of reverse mode through BP against BP alone, on real factor graphs.

    python bench/bp_backward_cost.py [--model models/en_ewt-o2] [--sentences 300]

Builds the pruned TREE + LINK + GRAND + SIB graphs of the first EWT dev sentences with the shipped
second-order model and times, per iteration count T (serial schedule): ``run_bp``; ``bp_forward``
(the same computation, keeping the tape); ``bp_backward`` (the reverse pass, gradient of the L2
objective). Best of 3 passes over all sentences, one process, seconds; prints one JSON line per T.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from _timing import best_of  # noqa: E402  (bench/ is on sys.path when this script runs)

from engine.bp_parser import BPParser  # noqa: E402
from engine.data.conllu_io import read_conllu  # noqa: E402
from engine.inference.bp import BPConfig, run_bp  # noqa: E402
from engine.inference.bp_backward import bp_backward, bp_forward  # noqa: E402
from engine.training.objectives import gold_indicators, l2_distance  # noqa: E402

DEV = Path(os.environ.get("BP_PARSER_DATA", ROOT.parent / "shared" / "data")) / "ud/en_ewt/en_ewt-ud-dev.conllu"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=str(ROOT / "models" / "en_ewt-o2"))
    ap.add_argument("--sentences", type=int, default=300)
    ap.add_argument("--iterations", default="1,2,4,8")
    args = ap.parse_args()
    model = BPParser.load(args.model)
    dev = read_conllu(DEV)[: args.sentences]
    graphs = [(g, dev[i].heads) for i, g, _ in model.graphs(dev, gold=True)]
    words = sum(len(s.forms) for s in dev)
    for t in (int(x) for x in args.iterations.split(",")):
        config = BPConfig(max_iterations=t, schedule="serial", tolerance=0.0)
        tapes = [(bp_forward(g.families, g.valid, config), g, heads) for g, heads in graphs]

        def backward(tapes: list = tapes, config: BPConfig = config) -> None:
            for (result, tape), g, heads in tapes:
                _, grad = l2_distance(result.beliefs, gold_indicators(heads), g.valid)
                bp_backward(g.families, g.valid, tape, config, grad)

        plain = best_of(lambda c=config: [run_bp(g.families, g.valid, c) for g, _ in graphs])
        forward = best_of(lambda c=config: [bp_forward(g.families, g.valid, c) for g, _ in graphs])
        reverse = best_of(backward)
        print(json.dumps({"iterations": t, "sentences": len(graphs), "words": words, "run_bp_s": round(plain, 3),
                          "bp_forward_s": round(forward, 3), "bp_backward_s": round(reverse, 3),
                          "backward_over_run_bp": round(reverse / plain, 2),
                          "forward_plus_backward_over_run_bp": round((forward + reverse) / plain, 2)}), flush=True)


if __name__ == "__main__":
    main()
