"""Inference time by sentence length for full BP, pruned BP and relaxed BP (Riedel & Smith 2010 Fig. 1).

    python bench/relaxed_figure.py /tmp/relaxed-ewt-all.json /tmp/relaxed-ewt-pruned.json --out docs/relaxed-time.png

Reads the per-sentence times that ``bench/relaxed.py --out`` writes (one panel per file), groups
sentences into length bins of 5 words and plots the mean inference milliseconds of each configuration
per bin on a log scale (``bench/relaxed.py`` times inference as process CPU time). Needs matplotlib
(``pip install -e ".[bench]"``).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

SHOWN = ("BP (10 iterations)", "Pruned(0.1)", "Rel(inf, 1e-4, 50)", "Rel(1, 1e-4, 50)")
STYLE = {"BP (10 iterations)": ("black", "o"), "Pruned(0.1)": ("tab:orange", "s"),
         "Rel(inf, 1e-4, 50)": ("tab:blue", "^"), "Rel(1, 1e-4, 50)": ("tab:green", "v")}
BIN = 5


def binned(records: list[dict], name: str, max_words: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(bin centres, mean ms, sentences per bin) over bins of BIN words, the last bin open-ended."""
    n = np.array([min(r["n"], max_words) for r in records])
    ms = np.array([1000.0 * r["seconds"][name] for r in records])
    bins = (n - 1) // BIN
    keep = np.unique(bins)
    means = np.array([ms[bins == b].mean() for b in keep])
    counts = np.array([(bins == b).sum() for b in keep])
    return keep * BIN + (BIN + 1) / 2, means, counts


def main() -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results", nargs="+", help="JSON files written by bench/relaxed.py --out")
    ap.add_argument("--out", default="docs/relaxed-time.png")
    ap.add_argument("--max-words", type=int, default=60, help="longer sentences join the last bin")
    args = ap.parse_args()
    docs = [json.loads(Path(p).read_text(encoding="utf-8")) for p in args.results]
    fig, axes = plt.subplots(1, len(docs), figsize=(5.2 * len(docs), 4.2), sharey=True, squeeze=False)
    for ax, doc in zip(axes[0], docs, strict=True):
        for name in SHOWN:
            x, y, _ = binned(doc["per_sentence"], name, args.max_words)
            color, marker = STYLE[name]
            ax.plot(x, y, marker=marker, color=color, label=name, markersize=4, linewidth=1.2)
        data = Path(doc["data"]).name.replace(".conllu", "")
        ax.set_title(f"{data}, {'all arcs' if doc['arcs'] == 'all' else 'pruned arcs'} "
                     f"({doc['sentences']} sentences)", fontsize=10)
        ax.set_xlabel(f"sentence length (words; bins of {BIN}, last bin {args.max_words}+)")
        ax.set_yscale("log")
        ax.grid(True, which="both", alpha=0.3)
    axes[0][0].set_ylabel("inference CPU time per sentence (ms, mean)")
    axes[0][0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(args.out, dpi=120)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
