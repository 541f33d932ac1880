"""How often tag-sample copies agree on a higher-order factor's words (``engine.scoring.triple_deltas``).

    python bench/copy_pairs.py --data ../shared/data/ud/en_ewt/en_ewt-ud-dev.conllu

Runs ``python -m engine evaluate --model MODEL --data DATA --tags predicted`` in this process and watches every
``copy_deltas`` call: the (copy, factor) pairs whose potential change is computed, and how many of them are
distinct, two pairs being the same when they have the same factor and their copies give its three words the same
rows of attribute codes (what the kernel reuses). Prints one JSON line.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
from typing import Any

import numpy as np

import engine.graph.build as build
from engine.cli import main as engine_main


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", required=True)
    ap.add_argument("--model", default="models/en_ewt")
    args = ap.parse_args()
    counts = {"pairs": 0, "distinct": 0, "calls": 0}
    original = build.copy_deltas

    def counting(stacked: np.ndarray, tables: tuple[np.ndarray, ...], factors: np.ndarray, copies: np.ndarray,
                 rows_per_copy: int, *rest: Any) -> np.ndarray:
        codes = stacked.reshape(-1, rows_per_copy, stacked.shape[1])
        variant = np.empty(codes.shape[:2], dtype=np.int64)  # per copy and word: which distinct row of codes
        for i in range(rows_per_copy):
            variant[:, i] = np.unique(codes[:, i, :], axis=0, return_inverse=True)[1].reshape(-1)
        a, b, c = tables[3][:, factors]
        keys = np.stack([factors, variant[copies, a], variant[copies, b], variant[copies, c]], axis=1)
        counts["pairs"] += len(keys)
        counts["distinct"] += len(np.unique(keys, axis=0)) if len(keys) else 0
        counts["calls"] += 1
        return original(stacked, tables, factors, copies, rows_per_copy, *rest)

    build.copy_deltas = counting
    with contextlib.redirect_stdout(io.StringIO()):
        engine_main(["evaluate", "--model", args.model, "--data", args.data, "--tags", "predicted", "--json"])
    print(json.dumps({**counts, "distinct_share": round(counts["distinct"] / max(counts["pairs"], 1), 4)}))


if __name__ == "__main__":
    main()
