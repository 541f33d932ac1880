"""One model from several: the mean of the weights of parsers trained alike from different seeds.

Parsers trained with the same features, pruner and recipe but different shuffles (``--seed``) reach
nearby weight vectors; their mean is again a parser of the same size and speed, usually better than
each (a "model soup", Wortsman et al. 2022; the same reason as averaging the iterates of one run,
Collins 2002, which ``train`` already does). Averaging is only meaningful between models that score the
same features the same way, so every model must have the same order, tree, feature templates and
dimensions, and the same first-order pruner: ``average_parsers`` refuses anything else and says why.

On EWT dev with predicted tags, the shipped default's parser is the mean of 7 seeds of one recipe: each
alone scores 85.33-85.64 UAS, the mean 85.86 (3 seeds 85.72, 5 seeds 85.94, 9 seeds 85.78;
docs/results/pipeline.md, *From raw text*). ``train --seeds N`` builds the same kind of model in one training run
(``engine.training.seeds``).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from engine.bp_parser import BPParser, load_any
from engine.model.store import ModelError, file_sha256, load_model
from engine.parser import FirstOrderParser

# manifest fields that decide what a weight means; models must agree on all of them (``link_labels``: the role
# model's labels, templates and rows, whose weights are averaged with the parser's)
_SAME = ("order", "tree", "features", "pruning", "hidden", "link_labels")


def average_parsers(directories: list[str | os.PathLike[str]]) -> FirstOrderParser | BPParser:
    """The parser of ``directories[0]`` with the mean of all their weights (and of their role weights, for
    label-aware links); its manifest records the sources
    under ``training.averaged`` and drops ``metrics`` (they were measured for one source, not the mean).
    One directory: its parser as it is, training record kept (so that ``average --components-from`` can give
    a parser other components)."""
    if not directories:
        raise ModelError("averaging needs at least one model")
    if len(directories) == 1:
        parser = load_any(directories[0], load_model(directories[0]))
        parser.manifest = {k: v for k, v in parser.manifest.items() if k not in ("metrics", "components")}
        return parser
    parsers: list[FirstOrderParser | BPParser] = []
    for directory in directories:
        parser = load_any(directory, load_model(directory))
        if parsers:
            _check_compatible(directories[0], parsers[0], directory, parser)
        parsers.append(parser)
    first = parsers[0]
    first.weights = np.mean([p.weights for p in parsers], axis=0)
    roles = getattr(first, "link_labels", None)
    if roles is not None:  # label-aware links: the role weights are averaged too (the same rows and labels)
        roles.weights = np.mean([np.asarray(p.link_labels.weights, dtype=np.float64)  # type: ignore[union-attr]
                                 for p in parsers], axis=0)
    sources = [_source(d, p.manifest) for d, p in zip(directories, parsers, strict=True)]
    first.manifest = {k: v for k, v in first.manifest.items() if k not in ("metrics", "training", "components")}
    first.manifest["training"] = {"averaged": sources, "method": "mean of the weights"}
    return first


def _check_compatible(a_dir: str | os.PathLike[str], a: Any, b_dir: str | os.PathLike[str], b: Any) -> None:
    if type(a) is not type(b):
        raise ModelError(f"{b_dir} is a {type(b).__name__} but {a_dir} a {type(a).__name__}: cannot average them")
    for key in _SAME:
        if a.manifest.get(key) != b.manifest.get(key):
            raise ModelError(f"{b_dir} and {a_dir} differ in {key!r}: their weights do not mean the same features")
    if getattr(a, "clusters", None) is not None and (a.weights.ndim == 1 or a.weights.shape[0] > 1):
        raise ModelError(f"{a_dir} has latent edge clusters: runs number their clusters arbitrarily (cluster z of "
                         "one is not cluster z of another), so the mean of their weights means nothing")
    if a.weights.shape != b.weights.shape:
        raise ModelError(f"{b_dir} has {b.weights.shape} weights but {a_dir} {a.weights.shape}")
    pa, pb = getattr(a, "pruner", None), getattr(b, "pruner", None)
    if (pa is None) != (pb is None) or (pa is not None and pb is not None and not np.array_equal(pa, pb)):
        raise ModelError(f"{b_dir} and {a_dir} have different first-order pruners: train them with the same "
                         "--pruner to average them")


def _source(directory: str | os.PathLike[str], manifest: dict[str, Any]) -> dict[str, Any]:
    """What ``training.averaged`` records of one source. A source that is itself a mean keeps its own sources
    (``averaged``, nested), and takes a training field from them where they all agree (else None)."""
    training = manifest.get("training", {})
    dev = manifest.get("metrics", {}).get("dev", {})
    fields = ("train_file", "train_sha256", "dev_file", "seed", "best_epoch")
    nested = training.get("averaged")
    if nested:
        shared = {k: nested[0].get(k) if all(s.get(k) == nested[0].get(k) for s in nested) else None for k in fields}
    else:
        shared = {k: training.get(k) for k in fields}
    return {"model": Path(directory).name, "name": manifest.get("name"),
            "weights_sha256": file_sha256(Path(directory) / manifest["arrays"]["weights"]["file"]),
            **shared, "dev_uas": dev.get("uas"), **({"averaged": nested} if nested else {})}
