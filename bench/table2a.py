"""Smith & Eisner (2008) Table 2a on EWT dev: which higher-order factor families help, and how UAS and
speed change with the number of BP iterations.

    python bench/table2a.py --epochs 1 --out /tmp/table2a

Trains one second-order model per row (pruned by and warm-started from models/en_ewt-o1, so rows
differ only in their higher-order factors), then parses EWT dev (HEAD/DEPREL blanked, gold tags)
with 1, 2, 5 and 10 BP iterations through bench/parse_speed.py (whole command, model loading
included). TREE+LINK is models/en_ewt-o1 through BP. Prints JSON lines, then a Markdown table.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EWT = ROOT.parent / "shared" / "data" / "ud" / "en_ewt"
ROWS = [("TREE+LINK", ""), ("+GRAND", "grand"), ("+SIB", "sib"), ("+CHILDSEQ", "childseq"),
        ("+NOCROSS", "nocross"), ("all four", "grand,sib,childseq,nocross")]


def run(cmd: list[str]) -> str:
    return subprocess.run(cmd, check=True, capture_output=True, text=True, cwd=ROOT).stdout


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--out", default="/tmp/table2a")
    ap.add_argument("--iterations", default="1,2,5,10")
    ap.add_argument("--rows", default=",".join(r for r, _ in ROWS))
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    table = []
    for row, factors in ROWS:
        if row not in args.rows.split(","):
            continue
        model = ROOT / "models" / "en_ewt-o1"
        if factors:
            model = out / factors.replace(",", "+")
            if not (model / "manifest.json").exists():
                run([sys.executable, "-m", "engine", "train", "--train", str(EWT / "en_ewt-ud-train.conllu"),
                     "--dev", str(EWT / "en_ewt-ud-dev.conllu"), "--out", str(model), "--order", "2",
                     "--factors", factors, "--pruner", str(ROOT / "models" / "en_ewt-o1"),
                     "--epochs", str(args.epochs), "--components", "parser", "--quiet"])
        cells = {}
        for t in args.iterations.split(","):
            res = json.loads(run([sys.executable, str(ROOT / "bench" / "parse_speed.py"), "--model", str(model),
                                  "--data", str(EWT / "en_ewt-ud-dev.conllu"), "--repeat", "1", "--",
                                  "--inference", "bp", "--bp-iterations", t]))
            cells[t] = {"uas": round(res["uas"], 2), "tokens_per_second": round(res["tokens_per_second"])}
            print(json.dumps({"row": row, "iterations": int(t), **cells[t]}), flush=True)
        table.append((row, cells))
    its = args.iterations.split(",")
    print("\n| factors | " + " | ".join(f"UAS, {t} it. | tok/s, {t} it." for t in its) + " |")
    print("|---|" + "---|---|" * len(its))
    for row, cells in table:
        print(f"| {row} | " + " | ".join(f"{cells[t]['uas']:.2f} | {cells[t]['tokens_per_second']:,}" for t in its)
              + " |")


if __name__ == "__main__":
    main()
