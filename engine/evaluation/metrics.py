"""Attachment scores, speed and calibration of the served confidences.

- UAS / LAS over all words, punctuation included (CoNLL 2018 UD shared task evaluation);
- UAS without punctuation (gold UPOS = PUNCT excluded);
- UPOS / XPOS accuracy of predicted tags (``tag_accuracy``);
- expected calibration error (Naeini et al. 2015; Guo et al. 2017) of the chosen heads' marginal
  probabilities against head correctness: 15 equal-width bins over [0, 1],
  ``ECE = sum_b (|b| / N) |accuracy(b) - confidence(b)|``, with an optional reliability table;
- the same ECE of the chosen labels' probabilities against "label right" on the words whose head is right
  (``label_ece``: a label's probability is conditional on its arc), of the tagger's marginal of its chosen
  UPOS against "UPOS right" (``upos_ece``) and of each sentence's ``p_tree`` against exact match of its
  heads (``p_tree_ece``; ``confidence_scores``).
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from typing import Any

import numpy as np

ECE_BINS = 15


def calibration(
    confidence: np.ndarray, correct: np.ndarray, bins: int = ECE_BINS
) -> tuple[float, list[dict[str, Any]]]:
    """``(ece, reliability table)`` for confidences in [0, 1] and boolean correctness."""
    confidence = np.asarray(confidence, dtype=np.float64)
    correct = np.asarray(correct, dtype=np.float64)
    if len(confidence) == 0:
        return 0.0, []
    which = np.minimum((confidence * bins).astype(int), bins - 1)
    ece = 0.0
    table = []
    for b in range(bins):
        sel = which == b
        count = int(sel.sum())
        row = {"bin": [b / bins, (b + 1) / bins], "count": count, "confidence": None, "accuracy": None}
        if count:
            conf, acc = float(confidence[sel].mean()), float(correct[sel].mean())
            ece += count / len(confidence) * abs(acc - conf)
            row.update(confidence=conf, accuracy=acc)
        table.append(row)
    return ece, table


def attachment_scores(
    gold: Sequence[Any], pred_heads: Sequence[np.ndarray], pred_labels: Sequence[Sequence[str]],
    head_probs: Sequence[np.ndarray], *, reliability: bool = False,
) -> dict[str, Any]:
    """Scores in percent (0-100) and ``ece`` in [0, 1]; ``gold`` sentences need heads, deprels, upos."""
    heads_ok, labels_ok, punct, probs = [], [], [], []
    for g, h, lab, p in zip(gold, pred_heads, pred_labels, head_probs, strict=True):
        if g.heads is None:
            raise ValueError("evaluation data must have gold HEAD values")
        ok = np.asarray(h[1:]) == g.heads[1:]
        heads_ok.append(ok)
        gold_rel = [r.split(":")[0] for r in g.deprels]
        labels_ok.append(ok & (np.array([r.split(":")[0] for r in lab]) == np.array(gold_rel)))
        punct.append(np.array([u == "PUNCT" for u in g.upos]))
        probs.append(np.asarray(p))
    hk = np.concatenate(heads_ok) if heads_ok else np.zeros(0, bool)
    lk = np.concatenate(labels_ok) if labels_ok else np.zeros(0, bool)
    pu = np.concatenate(punct) if punct else np.zeros(0, bool)
    pr = np.concatenate(probs) if probs else np.zeros(0)
    ece, table = calibration(pr, hk)
    pct = lambda x: float(100.0 * x.mean()) if len(x) else 0.0  # noqa: E731
    out: dict[str, Any] = {
        "uas": pct(hk), "las": pct(lk), "uas_no_punct": pct(hk[~pu]), "ece": ece,
        "sentences": len(gold), "tokens": int(len(hk)),
    }
    if reliability:
        out["reliability"] = table
    return out


def tag_accuracy(gold: Sequence[Any], predicted: Sequence[Any], field: str = "upos") -> float:
    """Percent of words whose ``field`` (``upos`` or ``xpos``) in ``predicted`` equals the gold one (the same
    sentences and words)."""
    right = words = 0
    for gs, ps in zip(gold, predicted, strict=True):
        g, p = getattr(gs, field), getattr(ps, field)
        if len(g) != len(p):
            raise ValueError(f"gold and predicted sentences of {len(g)} and {len(p)} words")
        right += sum(map(operator.eq, g, p))
        words += len(g)
    return 100.0 * right / max(words, 1)


def confidence_scores(gold: Sequence[Any], pred_heads: Sequence[np.ndarray], pred_labels: Sequence[Sequence[str]],
                      label_probs: Sequence[np.ndarray], p_trees: Sequence[float],
                      upos: tuple[Sequence[Sequence[str]], Sequence[np.ndarray]] | None = None,
                      ) -> tuple[dict[str, Any], dict[str, tuple[np.ndarray, np.ndarray]]]:
    """``label_ece``, ``p_tree_ece``, ``exact_match`` (percent) and, given ``upos`` (predicted tags, their
    probabilities), ``upos_ece`` (module docstring); and the (confidence, correct) arrays behind each, keyed
    ``labels``, ``trees``, ``tags`` (for reliability diagrams)."""
    lq, ly, exact = [], [], []
    for g, h, lab, q in zip(gold, pred_heads, pred_labels, label_probs, strict=True):
        right = np.asarray(h[1:]) == g.heads[1:]
        exact.append(bool(right.all()))
        if len(q):
            same = np.array([a.split(":")[0] == b.split(":")[0] for a, b in zip(lab, g.deprels, strict=True)])
            lq.append(np.asarray(q, dtype=np.float64)[right])
            ly.append(same[right])
    arrays = {"labels": (np.concatenate(lq) if lq else np.zeros(0), np.concatenate(ly) if ly else np.zeros(0, bool)),
              "trees": (np.asarray(p_trees, dtype=np.float64), np.asarray(exact, dtype=bool))}
    if upos is not None:
        tags, probs = upos
        ok = [t == gt for gs, ts in zip(gold, tags, strict=True) for t, gt in zip(ts, gs.upos, strict=True)]
        arrays["tags"] = (np.concatenate([np.asarray(p, dtype=np.float64) for p in probs]) if probs else np.zeros(0),
                          np.asarray(ok, dtype=bool))
    out: dict[str, Any] = {"exact_match": float(100.0 * np.mean(exact)) if exact else 0.0}
    for key, name in (("labels", "label_ece"), ("trees", "p_tree_ece"), ("tags", "upos_ece")):
        if key in arrays:
            out[name] = calibration(*arrays[key])[0]
    return out, arrays


def inference_summary(parsed: list[Any]) -> dict[str, Any]:
    """BP-based inference: total ``inference_seconds`` (inference alone, no features or decoding), mean
    ``factor_fraction`` of the higher-order factors used and mean ``eta`` (Riedel & Smith Prop. 2)."""
    diags = [p.diagnostics or {} for p in parsed]
    if not diags or any("inference_seconds" not in d for d in diags):
        return {}
    return {"inference_seconds": round(sum(d["inference_seconds"] for d in diags), 4),
            "factor_fraction": float(np.mean([d["factor_fraction"] for d in diags])),
            "eta_mean": float(np.mean([d["eta"] for d in diags]))}
