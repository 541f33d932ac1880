"""Arc pruning (Gormley et al. 2015 §5.1) on EWT dev: how many arcs survive, the oracle UAS of the
kept arc set, and the second-order model's UAS and speed with and without pruning.

    python bench/pruning.py --model models/en_ewt-o2

The oracle UAS is the percentage of words whose gold head survives pruning (the best any parser
restricted to the kept arcs can do). Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import numpy as np

from engine.bp_parser import BPParser
from engine.data.conllu_io import read_conllu

ROOT = Path(__file__).resolve().parents[1]
DEV = ROOT.parent / "shared" / "data" / "ud" / "en_ewt" / "en_ewt-ud-dev.conllu"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=str(ROOT / "models" / "en_ewt-o2"))
    ap.add_argument("--data", default=str(DEV))
    args = ap.parse_args()
    parser = BPParser.load(args.model)
    gold = read_conllu(args.data)
    kept = covered = words = candidates = 0
    for i, graph, _ in parser.graphs(gold):
        n = graph.n
        heads = gold[i].heads
        kept += int(graph.valid.sum())
        candidates += n * n
        covered += int(graph.valid[heads[1:], np.arange(1, n + 1)].sum())
        words += n
    result = {"oracle_uas": round(100 * covered / words, 2), "kept_heads_per_word": round(kept / words, 2),
              "candidate_heads_per_word": round(candidates / words, 2),
              "ratio": parser.prune.ratio, "max_heads": parser.prune.max_heads}
    for label, extra in (("pruned", []), ("unpruned", ["--no-prune"])):
        out = subprocess.run([sys.executable, str(ROOT / "bench" / "parse_speed.py"), "--model", args.model, "--data",
                              args.data, "--repeat", "1", "--", "--inference", "bp", "--bp-iterations", "5", *extra],
                             check=True, capture_output=True, text=True)
        res = json.loads(out.stdout)
        result[label] = {"uas": round(res["uas"], 2), "tokens_per_second": round(res["tokens_per_second"])}
    print(json.dumps(result))


if __name__ == "__main__":
    main()
