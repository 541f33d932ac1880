"""Table 1 of Hall & Klein (2012), replicated on the Penn Treebank sample: trained models x decoders, dev EVALB F1
(<= 40 words) with paired-bootstrap confidence intervals (issue 26; ``../shared/design/epic.md`` §3.7).

    OPENBLAS_NUM_THREADS=1 python bench/constituency_table1.py \\
        --model "1-bit=/tmp/epic-models/ptb-1bit" --model "EP=/tmp/epic-models/ptb-ep2x1" ... \\
        [--decoders adf,ep,exact,petrov] [--split dev] [--reference EP:ep] [--samples 10000] [--json OUT.json]

Each ``--model NAME=PATH`` (a model of ``train --formalism constituency``) is decoded with each decoder its factors
allow: ``ep`` / ``adf`` (Max-Recall from EP's / ADF's final anchored grammar), ``exact`` (Max-Recall from the
product of the factors, K^M substates), ``petrov`` (Petrov 2010: the tree maximising the sum of each factor's own
log anchored-rule posteriors, ``decode_product.petrov_decode``); a one-factor model has one distribution, decoded
``exact`` and ``petrov`` (Max-Recall and max-rule). The X-bar pruning mask of a sentence is computed once per model
and shared by its decoders. Every cell is compared with the ``--reference`` cell by a paired bootstrap over
sentences (``engine.constituency.bootstrap``): the difference, its 95% interval, and whether the interval excludes
0. The test split is for the final figure only.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from nltk import Tree  # type: ignore[import-untyped]

from engine.constituency.anchored import build_items
from engine.constituency.bootstrap import paired_bootstrap
from engine.constituency.commands import load
from engine.constituency.decode_product import petrov_decode
from engine.constituency.evalb import CUTOFF, Totals, sentence_scores
from engine.constituency.latent_parser import LatentParser
from engine.constituency.pruning import prune_mask
from engine.constituency.treebank import split_by_file

PTB = Path(__file__).resolve().parents[2] / "shared" / "data" / "ptb_sample"
DECODERS = ("adf", "ep", "exact", "petrov")


def decode_all(parser: LatentParser, gold: list[Tree], decoders: list[str]) -> dict[str, tuple[list[Tree], float]]:
    """Each decoder's trees of ``gold``'s words and its CPU seconds (the shared dense pruning pass excluded)."""
    grammar = parser.model.grammar
    trees: dict[str, list[Tree]] = {d: [] for d in decoders}
    seconds = dict.fromkeys(decoders, 0.0)
    for tree in gold:
        words = tree.leaves()
        try:
            dense = parser.pruner.marginals(words)
        except FloatingPointError:
            for d in decoders:
                trees[d].append(parser.pruner.parse(words))
            continue
        mask = prune_mask(grammar, dense, parser.threshold)
        for d in decoders:
            start = time.process_time()
            if d == "petrov":
                items = build_items(grammar, mask)
                factors = parser.model.factors(parser.model.sentence(words))
                trees[d].append(petrov_decode(grammar, items, factors, words, parser.chains))
            else:
                parser.inference = d
                trees[d].append(parser.decode(words, mask, dense)[0])
            seconds[d] += time.process_time() - start
    return {d: (trees[d], seconds[d]) for d in decoders}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", action="append", required=True, metavar="NAME=PATH")
    ap.add_argument("--decoders", default=",".join(DECODERS))
    ap.add_argument("--split", choices=["dev", "test"], default="dev")
    ap.add_argument("--reference", help="NAME:DECODER the others are compared with (default: the first cell)")
    ap.add_argument("--samples", type=int, default=10_000)
    ap.add_argument("--limit", type=int, help="the first N sentences only (a quick check)")
    ap.add_argument("--json", help="write the table as JSON here")
    args = ap.parse_args()
    gold = [t for t in split_by_file(PTB)[args.split] if len(t.leaves()) <= CUTOFF][: args.limit]
    rows: list[dict[str, Any]] = []
    scores: dict[str, Any] = {}
    for spec in args.model:
        name, path = spec.split("=", 1)
        parser = load(path)
        if not isinstance(parser, LatentParser):
            sys.exit(f"{path}: not a factored latent model")
        m = parser.model.settings.factors
        decoders = [d for d in args.decoders.split(",") if m > 1 or d in ("exact", "petrov")]
        for decoder, (trees, cpu) in decode_all(parser, gold, decoders).items():
            cell = f"{name}:{decoder}"
            scores[cell] = sentence_scores(gold, trees)
            totals = Totals.of(scores[cell])
            rows.append({"model": name, "path": path, "factors": m, "decoder": decoder, "f1": round(totals.f1, 2),
                         "exact_match": round(totals.exact_match, 2), "cpu_seconds": round(cpu, 1)})
            print(f"{cell:>24}  F1 {totals.f1:6.2f}  exact {totals.exact_match:5.2f}  CPU {cpu:7.1f} s", flush=True)
    reference = args.reference or next(iter(scores))
    for row in rows:
        cell = f"{row['model']}:{row['decoder']}"
        if cell != reference:
            row["vs_reference"] = paired_bootstrap(scores[cell], scores[reference], samples=args.samples).to_json()
    table = {"split": args.split, "sentences": len(gold), "reference": reference, "rows": rows}
    print(json.dumps(table, indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps(table, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
