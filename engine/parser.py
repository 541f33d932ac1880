"""The first-order parser: features -> arc potentials -> exact marginals -> MBR tree -> labels.

``FirstOrderParser`` ties the pipeline stages together and is what the CLI, the trainer and the
service use. A parse result carries the arc marginals, so it answers "how sure" as well as "which".
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

import numpy as np

import engine
from engine.data.batching import length_batches
from engine.decode.distribution import TreeDistribution
from engine.decode.labeler import CountLabeler
from engine.decode.mbr import mbr_decode
from engine.features.extract import FeatureExtractor, Tokens
from engine.features.templates import ArcTemplate
from engine.inference.exact import TreeConstraint, exact_marginals
from engine.model.store import ModelError, load_model, save_model
from engine.scoring.potentials import arc_scores


@dataclass
class ParsedSentence:
    """One sentence's parse: MBR heads (n+1,), the chosen heads' marginals (n,), marginals
    (n+1, n+1) with ``marginals[h, m] = p(head of m = h)``, labels and their probabilities."""

    heads: np.ndarray
    head_probs: np.ndarray
    marginals: np.ndarray
    log_partition: float | None  # None under approximate inference
    deprels: list[str]
    label_probs: np.ndarray
    diagnostics: dict[str, Any] | None = None  # BP: iterations, converged, residual
    distribution: TreeDistribution | None = None  # the distribution over trees behind the marginals


def model_manifest(base: dict[str, Any], extra: dict[str, Any] | None, order: int, extractor: FeatureExtractor,
                   constraint: TreeConstraint, labeler: CountLabeler) -> dict[str, Any]:
    """The manifest fields every model shares (JSON; arrays are added by ``save_model``)."""
    return {
        **base, **(extra or {}),
        "engine_version": engine.__version__,
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "order": order,
        "tree": {"tree": constraint.tree, "root": constraint.root},
        "features": {"dim": extractor.dim, "templates": [t.name for t in extractor.templates]},
        "labeler": labeler.to_json(),
    }


@dataclass
class FirstOrderParser:
    extractor: FeatureExtractor
    weights: np.ndarray
    constraint: TreeConstraint
    labeler: CountLabeler
    manifest: dict[str, Any]

    def batches(self, sentences: Sequence[Tokens], batch_size: int = 64) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """(sentence indices, arc scores (B, n+1, n+1)) for equal-length batches."""
        for idx in length_batches([len(s.forms) for s in sentences], batch_size):
            feats = self.extractor.extract([sentences[i] for i in idx])
            yield idx, arc_scores(self.weights, feats)

    def parse(self, sentences: Sequence[Tokens], batch_size: int = 64) -> list[ParsedSentence]:
        """Parse sentences (each needs ``forms``, ``upos``, ``xpos``; at least one word)."""
        out: list[ParsedSentence | None] = [None] * len(sentences)
        for idx, scores in self.batches(sentences, batch_size):
            log_z, marg = exact_marginals(scores, self.constraint)
            for j, i in enumerate(idx):
                heads = mbr_decode(marg[j], self.constraint)
                m = np.arange(1, len(heads))
                labels, label_probs = self.labeler.predict(sentences[i].upos, heads)
                dist = TreeDistribution.with_marginals(scores[j], self.constraint, "exact", float(log_z[j]), marg[j])
                out[i] = ParsedSentence(heads, marg[j][heads[1:], m], marg[j], float(log_z[j]), labels, label_probs,
                                        None, dist)
        return out  # type: ignore[return-value]

    # -- persistence ---------------------------------------------------------------------------
    def save(self, directory: str | os.PathLike[str], extra: dict[str, Any] | None = None) -> None:
        manifest = model_manifest(self.manifest, extra, 1, self.extractor, self.constraint, self.labeler)
        save_model(directory, manifest, {"weights": self.weights.astype(np.float32)})

    @classmethod
    def load(cls, directory: str | os.PathLike[str]) -> FirstOrderParser:
        stored = load_model(directory)
        extractor, constraint, labeler = load_common(directory, stored.manifest)
        weights = stored.arrays["weights"].astype(np.float64)
        if weights.shape != (extractor.dim,):
            raise ModelError(f"{directory}: weights have shape {weights.shape}, features need ({extractor.dim},)")
        return cls(extractor, weights, constraint, labeler, stored.manifest)


def load_common(directory: str | os.PathLike[str],
                manifest: dict[str, Any]) -> tuple[FeatureExtractor, TreeConstraint, CountLabeler]:
    """The parts every model's manifest describes: first-order features, tree constraint, labeller."""
    try:
        templates = tuple(ArcTemplate.parse(t) for t in manifest["features"]["templates"])
        extractor = FeatureExtractor(templates, int(manifest["features"]["dim"]))
        return extractor, TreeConstraint(**manifest["tree"]), CountLabeler.from_json(manifest["labeler"])
    except (KeyError, TypeError, ValueError) as e:
        raise ModelError(f"{directory}: manifest is incomplete or inconsistent ({e})") from e
