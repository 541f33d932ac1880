"""Randomised APS (Romano et al. 2020, u uniform) on the shipped model's EWT dev parses: calibrate on the first
half of the words and report how often the second half's head sets would be empty, the reason the shipped sets
are non-randomised (engine/decode/conformal.py). One parse of EWT dev as `calibrate` parses it (about 25 s).

    python bench/aps_randomised.py
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from engine.cli import _score_gold_tokens, build_parser  # noqa: E402
from engine.cli_parse import load_parser, resolve_tag_samples  # noqa: E402
from engine.data.conllu_io import read_conllu  # noqa: E402
from engine.decode.conformal import _ranked, conformal_threshold, head_columns  # noqa: E402

DEV = "/work/shared/data/ud/en_ewt/en_ewt-ud-dev.conllu"


def main() -> None:
    args = build_parser().parse_args(["calibrate", "--model", "models/en_ewt", "--data", DEV])
    _, parse = load_parser(args)
    resolve_tag_samples(args)
    gold = read_conllu(DEV)
    _, parsed = _score_gold_tokens(args, parse, gold, predicted=True)  # calibrated, as parse and the service
    rng = np.random.default_rng(0)
    scores, tops = [], []
    for p, g in zip(parsed, gold, strict=True):
        columns, truth = head_columns(p), g.heads[1:]
        order, before = _ranked(columns)
        position = np.argmax(order == truth[:, None], axis=1)
        rows = np.arange(len(columns))
        scores.append(before[rows, position] + rng.uniform(size=len(rows)) * columns[rows, truth])
        tops.append(columns.max(axis=1))
    score, top = np.concatenate(scores), np.concatenate(tops)
    half = len(score) // 2
    for alpha in (0.1, 0.05):
        q = conformal_threshold(score[:half], alpha)
        empty = np.mean(rng.uniform(size=len(score) - half) * top[half:] > q)
        print(f"alpha {alpha}: randomised threshold {q:.4f}, empty head sets {100 * empty:.2f}% of "
              f"{len(score) - half} words")


if __name__ == "__main__":
    main()
