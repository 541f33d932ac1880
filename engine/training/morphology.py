"""Training the LEMMA and FEATS components (``engine.text.lemmatizer``, ``engine.text.morph``): as part of
``engine train`` (``train_morphology``, called by ``engine.training.pipeline.train_model``), or added to an
existing pipeline model without retraining anything else (``add_components``, ``python -m engine
train-component``).

Both components learn from the gold UPOS, XPOS and DEPREL of the training treebank and read the predicted
ones at test time. Their settings are declared here, once (chosen on EWT dev, ``docs/results/lemmas-feats.md``).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from engine.data.conllu_io import read_conllu
from engine.model.store import ModelError, file_sha256
from engine.pipeline import Pipeline, component_class

log = logging.getLogger(__name__)

MORPHOLOGY_COMPONENTS = ("lemmatizer", "morph")
# classes seen fewer than min_class_count times are left to the dictionary; features seen fewer than
# min_count times share the rare row; dictionary entries need dict_share of their word's occurrences; the
# lemmatizer's lexicon: a word the dictionary does not know takes, of its lexicon_candidates most probable
# scripts, the best by log probability plus lexicon_bonus for a lemma seen in training with its UPOS (lemmas
# of lexicon_min_length characters or more; engine.text.lemmatizer); 5 is the middle of the flat 3-6 range
# of the bonus on EWT dev
SETTINGS: dict[str, dict[str, Any]] = {
    "lemmatizer": {"min_class_count": 8, "min_count": 10, "dict_share": 0.0, "epochs": 4,
                   "lexicon_bonus": 5.0, "lexicon_candidates": 5, "lexicon_min_length": 3},
    "morph": {"min_class_count": 8, "min_count": 10, "dict_share": 0.9, "epochs": 2},
}


def train_morphology(train: Sequence[Any], names: Sequence[str], *, seed: int = 0,
                     progress: bool = False) -> dict[str, Any]:
    """The components ``names`` (of ``MORPHOLOGY_COMPONENTS``) trained on ``train`` (gold annotation)."""
    parts: dict[str, Any] = {}
    for name in names:
        if name not in MORPHOLOGY_COMPONENTS:
            raise ValueError(f"unknown morphology component {name!r} (known: {', '.join(MORPHOLOGY_COMPONENTS)})")
        start = time.perf_counter()
        parts[name] = component_class(name).train(train, seed=seed, progress=progress, **SETTINGS[name])
        parts[name].info["seconds"] = round(time.perf_counter() - start, 1)
        log.info("%s trained in %.1f s", name, parts[name].info["seconds"])
    return parts


def add_components(model: str | os.PathLike[str], names: Sequence[str], train_path: str | os.PathLike[str],
                   out: str | os.PathLike[str], *, seed: int = 0, progress: bool = False) -> dict[str, Any]:
    """Train ``names`` on ``train_path`` and write ``model`` with them added (replaced if present) to
    ``out`` (may be ``model`` itself: the write is atomic). The parser, tagger, tokenizer and labeller
    are written back unchanged. Raises ``ModelError`` for a model this engine cannot load."""
    pipeline = Pipeline.load(model)
    if pipeline.tagger is None:
        raise ModelError(f"{model}: LEMMA and FEATS are predicted from the tagger's tags; this model has no tagger")
    train = read_conllu(train_path)
    parts = train_morphology(train, names, seed=seed, progress=progress)
    for name, part in parts.items():
        part.info.update(train_file=Path(train_path).name, train_sha256=file_sha256(train_path))
        setattr(pipeline, name, part)
    pipeline.save(out)
    return {"model": os.fspath(out), "components": pipeline.components,
            "added": {name: part.info for name, part in parts.items()}}
