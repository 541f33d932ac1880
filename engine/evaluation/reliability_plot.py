"""Reliability diagrams (DeGroot & Fienberg 1983; Guo et al. 2017 Fig. 1) of the confidences a parse reports:
for heads, labels, tags and whole trees, the mean predicted probability against the observed accuracy in 15
equal-width bins (``engine.evaluation.metrics.calibration``), each point's area proportional to its count, the
counts drawn as bars below, and the ECE in the legend; the model's calibrated probabilities beside the raw ones
(``engine.decode.calibration.model_probabilities`` inverts the maps, so one parse draws both).

matplotlib is an optional dependency (the ``plots`` extra, ``pip install .[plots]``), imported only here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from engine.decode.calibration import model_probabilities
from engine.evaluation.metrics import calibration, confidence_scores

Series = Mapping[str, tuple[np.ndarray, np.ndarray]]  # variant -> (confidences, correct)
PANELS = {"heads": "head (chosen head's marginal)", "labels": "label (given the right head)",
          "tags": "UPOS (chosen tag's probability)", "trees": "tree (p_tree vs exact match)"}


def reliability_series(gold: Sequence[Any], parsed: Sequence[Any], arrays: Mapping[str, tuple[np.ndarray, np.ndarray]],
                       ) -> dict[str, dict[str, tuple[np.ndarray, np.ndarray]]]:
    """Panel -> variant ("calibrated", "raw") -> (confidence, correct): ``arrays`` are the calibrated ones of
    ``confidence_scores``; the raw ones are the model's probabilities before calibration (raw ``p_tree`` of an
    estimate: the product of the raw head probabilities)."""
    raw_heads, raw_labels, raw_trees = [], [], []
    for p in parsed:
        h, lab = model_probabilities(p)
        raw_heads.append(h)
        raw_labels.append(lab)
        d = p.diagnostics or {}
        raw_trees.append(d.get("p_tree", 0.0) if d.get("p_tree_source") == "exact" else float(np.prod(h)))
    right = np.concatenate([np.asarray(p.heads[1:]) == g.heads[1:] for p, g in zip(parsed, gold, strict=True)])
    calibrated_heads = np.concatenate([np.asarray(p.head_probs, dtype=np.float64) for p in parsed])
    _, raw_arrays = confidence_scores(gold, [p.heads for p in parsed], [p.deprels for p in parsed], raw_labels,
                                      raw_trees)
    out = {"heads": {"calibrated": (calibrated_heads, right), "raw": (np.concatenate(raw_heads), right)}}
    for key in ("labels", "trees"):
        out[key] = {"calibrated": arrays[key], "raw": raw_arrays[key]}
    if "tags" in arrays:
        out["tags"] = tag_series(gold, parsed, arrays["tags"])
    return out


def tag_series(gold: Sequence[Any], parsed: Sequence[Any], tags: tuple[np.ndarray, np.ndarray],
                ) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """The UPOS panel: the chosen tags' probabilities as reported, and, where a joint parse's were mapped
    (``upos_power``, ``engine.decode.calibration.calibrated_tags``), as the model gave them."""
    conf, right = tags
    model = [(p.diagnostics or {}).get("model_upos_probs") for p in parsed]
    if all(m is None for m in model):
        return {"raw (not mapped)": tags}
    bounds = np.cumsum([0, *(len(g.upos) for g in gold)])
    raw = [conf[a:b] if m is None else np.asarray(m, dtype=np.float64)
           for m, a, b in zip(model, bounds[:-1], bounds[1:], strict=True)]
    return {"calibrated": tags, "raw": (np.concatenate(raw), right)}


def draw_reliability(path: str, panels: Mapping[str, Series], title: str = "") -> None:
    """Write the diagrams of ``panels`` (panel -> variant -> (confidence, correct)) to ``path`` (PNG)."""
    try:
        import matplotlib
    except ImportError as e:
        raise RuntimeError("--reliability-plot needs matplotlib: pip install 'matplotlib>=3.8' (the 'plots' "
                           "extra)") from e
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [k for k in PANELS if k in panels]
    fig, axes = plt.subplots(2, len(names), figsize=(3.2 * len(names), 4.6), squeeze=False,
                             gridspec_kw={"height_ratios": [3, 1]}, sharex=True)
    for col, name in enumerate(names):
        top, bottom = axes[0][col], axes[1][col]
        top.plot([0, 1], [0, 1], color="0.6", lw=0.8, ls="--")
        for k, (variant, (conf, correct)) in enumerate(panels[name].items()):
            ece, table = calibration(conf, correct)
            rows = [r for r in table if r["count"]]
            xs = [r["confidence"] for r in rows]
            total = max(sum(r["count"] for r in rows), 1)
            top.plot(xs, [r["accuracy"] for r in rows], marker="o", ms=3, lw=1, label=f"{variant} ECE {ece:.3f}")
            centres = [(r["bin"][0] + r["bin"][1]) / 2 for r in rows]
            bottom.bar(np.asarray(centres) + (k - 0.5) * 0.025, [r["count"] / total for r in rows], width=0.025)
        top.set_title(PANELS[name], fontsize=8)
        top.set_xlim(0, 1)
        top.set_ylim(0, 1)
        top.legend(fontsize=6, loc="upper left")
        top.tick_params(labelsize=6)
        bottom.tick_params(labelsize=6)
        bottom.set_xlabel("predicted probability", fontsize=7)
    axes[0][0].set_ylabel("accuracy", fontsize=7)
    axes[1][0].set_ylabel("share of items", fontsize=7)
    if title:
        fig.suptitle(title, fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
