"""Attachment scores of a parsed CoNLL-U file against the gold file (``python -m engine score``)."""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from engine.data.conllu_io import ConlluError, read_conllu
from engine.evaluation.metrics import attachment_scores


def _head_prob(misc: str) -> float:
    """A word's MISC ``HeadProb`` (1.0 when absent)."""
    for item in misc.split("|"):
        if item.startswith("HeadProb="):
            return float(item.split("=", 1)[1])
    return 1.0


def score_file(gold_path: str | os.PathLike[str], pred_path: str | os.PathLike[str]) -> dict[str, Any]:
    """UAS, LAS and calibration of ``pred_path``'s trees, confidences from MISC ``HeadProb``; ConlluError when
    the files do not have the same sentences and words or a predicted sentence has no HEAD values."""
    gold, pred = read_conllu(gold_path), read_conllu(pred_path)
    if len(gold) != len(pred) or any(g.forms != p.forms for g, p in zip(gold, pred, strict=False)):
        raise ConlluError(str(pred_path), 1, f"does not have the same sentences and words as {gold_path}")
    pred_heads: list[np.ndarray] = []
    for p in pred:
        if p.heads is None:
            raise ConlluError(str(pred_path), p.start_line, "sentence has no predicted HEAD values")
        pred_heads.append(p.heads)
    return attachment_scores(gold, pred_heads, [p.deprels for p in pred],
                             [np.array([_head_prob(m) for m in p.misc]) for p in pred])
