"""Smith & Eisner (2008) Table 3 on non-projective treebanks: a first-order TREE-trained model decoded
under different hard constraints, and a second-order TREE model.

    python bench/table3.py --out /tmp/table3

Danish (da_ddt) and Dutch (nl_alpino) train on their dev set and test on their test set (the shared
data has no training split for them); Hungarian (hu_szeged) trains on train and tests on test. No
dev set is used for model selection (first-order: 5 epochs; second-order: 2 epochs). Decoding
constraints: NOT2, ATMOST1, EXACTLY1, EXACTLY1+NO2CYCLE (BP, 5 iterations, then the MBR tree),
TREE (exact Matrix-Tree), PTREE (BP with the projective tree factor; one iteration is exact).
Prints JSON lines, then a Markdown table of test UAS.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
UD = ROOT.parent / "shared" / "data" / "ud"
SETS = [("Danish", "da_ddt", "dev"), ("Dutch", "nl_alpino", "dev"), ("Hungarian", "hu_szeged", "train")]
DECODERS = [("NOT2", ["--inference", "bp", "--constraint", "not2"]),
            ("ATMOST1", ["--inference", "bp", "--constraint", "atmost1"]),
            ("EXACTLY1", ["--inference", "bp", "--constraint", "exactly1"]),
            ("EXACTLY1+NO2CYCLE", ["--inference", "bp", "--constraint", "exactly1+no2cycle"]),
            ("TREE", ["--inference", "exact"]),
            ("PTREE", ["--inference", "bp", "--constraint", "ptree"])]


def run(cmd: list[str]) -> str:
    return subprocess.run(cmd, check=True, capture_output=True, text=True, cwd=ROOT).stdout


def evaluate(model: Path, data: Path, extra: list[str]) -> float:
    out = run([sys.executable, "-m", "engine", "evaluate", "--model", str(model), "--data", str(data), "--json",
               "--bp-iterations", "5", *extra])
    return round(json.loads(out)["uas"], 2)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="/tmp/table3")
    args = ap.parse_args()
    out = Path(args.out)
    results: dict[str, dict[str, float]] = {}
    for lang, name, split in SETS:
        train, test = UD / name / f"{name}-ud-{split}.conllu", UD / name / f"{name}-ud-test.conllu"
        o1, o2 = out / f"{name}-o1", out / f"{name}-o2"
        if not (o1 / "manifest.json").exists():
            run([sys.executable, "-m", "engine", "train", "--train", str(train), "--out", str(o1), "--epochs", "5",
                 "--components", "parser", "--quiet"])
        if not (o2 / "manifest.json").exists():
            run([sys.executable, "-m", "engine", "train", "--train", str(train), "--out", str(o2), "--order", "2",
                 "--factors", "grand,sib", "--pruner", str(o1), "--epochs", "2",
                 "--components", "parser", "--quiet"])
        results[lang] = {}
        for decoder, extra in DECODERS:
            results[lang][decoder] = evaluate(o1, test, extra)
            print(json.dumps({"language": lang, "decoder": decoder, "uas": results[lang][decoder]}), flush=True)
        results[lang]["2nd-order TREE"] = evaluate(o2, test, ["--inference", "bp"])
        print(json.dumps({"language": lang, "decoder": "2nd-order TREE", "uas": results[lang]["2nd-order TREE"]}),
              flush=True)
    langs = [lang for lang, _, _ in SETS]
    print("\n| decoder | " + " | ".join(langs) + " |")
    print("|---|" + "---|" * len(langs))
    for decoder in [d for d, _ in DECODERS] + ["2nd-order TREE"]:
        print(f"| {decoder} | " + " | ".join(f"{results[lang][decoder]:.2f}" for lang in langs) + " |")


if __name__ == "__main__":
    main()
