"""The first-order parser: features -> arc potentials -> exact marginals -> MBR tree -> labels.

``FirstOrderParser`` ties the pipeline stages together and is what the CLI, the trainer and the
service use. A parse result carries the arc marginals, so it answers "how sure" as well as "which".
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

import numpy as np

import engine
from engine.data.batching import length_batches
from engine.decode.labeler import CountLabeler, label_many
from engine.features.extract import FeatureExtractor, Tokens
from engine.features.tag_mixture import TagMixture, mixed_rows, with_copies
from engine.features.templates import ArcTemplate
from engine.kernels.exact import TreeConstraint, exact_marginals
from engine.kernels.mbr import mbr_decode
from engine.model.store import ModelError, StoredModel, half_precision, load_model, save_model
from engine.model.widen import Widened, kernel_array, loaded
from engine.results import UNLABELLED, ParsedSentence, TreeDistribution
from engine.scoring.fused import ArcScorer, stored_table
from engine.scoring.hidden import marginalise_clusters


def model_manifest(base: dict[str, Any], extra: dict[str, Any] | None, order: int, extractor: FeatureExtractor,
                   constraint: TreeConstraint, labeler: Any) -> dict[str, Any]:
    """The manifest fields every model shares (JSON; arrays are added by ``save_model``)."""
    return {
        **base, **(extra or {}),
        "engine_version": engine.__version__,
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "order": order,
        "tree": {"tree": constraint.tree, "root": constraint.root},
        "features": {"dim": extractor.dim, "templates": [t.name for t in extractor.templates]},
        # a pipeline's log-linear labeller is stored as its own component (engine.pipeline)
        "labeler": labeler.to_json() if isinstance(labeler, CountLabeler) else {"component": "labeler"},
    }


@dataclass
class FirstOrderParser:
    extractor: FeatureExtractor
    if TYPE_CHECKING:
        weights: np.ndarray  # float64
    else:  # a loaded model's as stored until something reads it (engine.model.widen)
        weights: Widened = Widened()
    constraint: TreeConstraint
    labeler: Any  # CountLabeler, or a pipeline's LogLinearLabeler (see engine.decode.labeler.label_arcs)
    manifest: dict[str, Any]
    _scorer: ArcScorer | None = field(default=None, repr=False, compare=False)
    _rows: tuple[np.ndarray, list[np.ndarray]] | None = field(default=None, repr=False, compare=False)

    @property
    def clusters(self) -> int | None:
        """K for a model with latent edge clusters (weights (K, dim), ``engine.scoring.hidden``), else None."""
        weights = kernel_array(self, "weights")
        return int(weights.shape[0]) if weights.ndim == 2 else None

    def _vectors(self) -> list[np.ndarray]:
        """The weight vectors the scorer reads (a loaded model's as stored): the weights, or one row per
        cluster (kept, so that a scorer built for a read-only model's rows keeps serving them)."""
        weights = kernel_array(self, "weights")
        if weights.ndim == 1:
            return [weights]
        if self._rows is None or self._rows[0] is not weights:
            self._rows = (weights, list(weights))
        return self._rows[1]

    def _scores(self, sentences: Sequence[Tokens]) -> np.ndarray:
        """Arc log-potentials (B, n+1, n+1); with clusters, log sum_z exp of the clusters' (eq. 18)."""
        vectors = self._vectors()
        if self._scorer is None or not self._scorer.serves(vectors):
            self._scorer = ArcScorer(self.extractor, vectors)
        per = self._scorer(sentences)
        return per[0] if self.clusters is None else marginalise_clusters(per)[0]

    def batches(self, sentences: Sequence[Tokens], batch_size: int = 64,
                mixtures: Sequence[TagMixture | None] | None = None) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """(sentence indices, arc scores (B, n+1, n+1)) for equal-length batches, straight from the tokens
        (``engine.scoring.fused``; the values ``arc_scores(weights, extractor.extract(...))`` gives, summed
        over the clusters for a model with them); ``mixtures[i]``: sentence ``i``'s scores are their weighted
        mean over those taggings."""
        for idx in length_batches([len(s.forms) for s in sentences], batch_size):
            chosen = [sentences[i] for i in idx]
            if mixtures is None or all(mixtures[i] is None for i in idx):
                yield idx, self._scores(chosen)
                continue
            mix = [mixtures[i] for i in idx]
            yield idx, mixed_rows(self._scores(with_copies(chosen, mix)), mix)

    def parse(self, sentences: Sequence[Tokens], batch_size: int = 64, labels: bool = True,
              mixtures: Sequence[TagMixture | None] | None = None) -> list[ParsedSentence]:
        """Parse sentences (each needs ``forms``, ``upos``, ``xpos``; at least one word); without ``labels``
        the parses carry none (``UNLABELLED``); ``mixtures``: tag-averaged potentials (``batches``)."""
        out: list[ParsedSentence | None] = [None] * len(sentences)
        for idx, scores in self.batches(sentences, batch_size, mixtures):
            log_z, marg = exact_marginals(scores, self.constraint)
            for j, i in enumerate(idx):
                heads = mbr_decode(marg[j], self.constraint)
                m = np.arange(1, len(heads))
                deprels, label_probs = UNLABELLED
                dist = TreeDistribution.with_marginals(scores[j], self.constraint, "exact", float(log_z[j]), marg[j])
                out[i] = ParsedSentence(heads, marg[j][heads[1:], m], marg[j], float(log_z[j]), deprels, label_probs,
                                        None, dist)
        parsed = [p for p in out if p is not None]
        assert len(parsed) == len(out)  # every sentence is in exactly one batch
        if labels and parsed:  # every sentence's labels in one pass (label_many)
            for p, (deprels, probs) in zip(parsed, label_many(self.labeler, sentences, [p.heads for p in parsed]),
                                           strict=True):
                p.deprels, p.label_probs = deprels, probs
        return parsed

    # -- persistence ---------------------------------------------------------------------------
    def save(self, directory: str | os.PathLike[str], extra: dict[str, Any] | None = None,
             arrays: dict[str, np.ndarray] | None = None, half: bool = False) -> None:
        """Write the model; ``arrays`` adds other components' arrays (``engine.pipeline``); ``half`` stores
        large float arrays as float16 (``engine.model.store.half_precision``)."""
        manifest = model_manifest(self.manifest, extra, 1, self.extractor, self.constraint, self.labeler)
        if self.clusters is not None:  # latent edge clusters: weights (K, dim), read back by ``from_stored``
            manifest["hidden"] = {"clusters": self.clusters}
        out = {"weights": self.weights.astype(np.float32), **(arrays or {})}
        save_model(directory, manifest, half_precision(out) if half else out)

    @classmethod
    def load(cls, directory: str | os.PathLike[str]) -> FirstOrderParser:
        return cls.from_stored(directory, load_model(directory))

    @classmethod
    def from_stored(cls, directory: str | os.PathLike[str], stored: StoredModel) -> FirstOrderParser:
        extractor, constraint, labeler = load_common(directory, stored.manifest)
        clusters = hidden_clusters(directory, stored.manifest)
        raw = stored.arrays["weights"]
        shape = (extractor.dim,) if clusters is None else (clusters, extractor.dim)
        if raw.shape != shape:
            raise ModelError(f"{directory}: weights have shape {raw.shape}, features need {shape}")
        # read-only as stored: the scorer lays them out once; widened to float64 only if something reads them
        parser = cls(extractor, loaded(raw), constraint, labeler, stored.manifest)
        vectors = parser._vectors()
        table = stored_table(vectors, extractor.dim)
        if table is not None:
            parser._scorer = ArcScorer(extractor, vectors, table)
        return parser


def hidden_clusters(directory: str | os.PathLike[str], manifest: dict[str, Any]) -> int | None:
    """K from the manifest's ``hidden`` block (a model with latent edge clusters), else None."""
    block = manifest.get("hidden")
    if block is None:
        return None
    clusters = block.get("clusters") if isinstance(block, dict) else None
    if not isinstance(clusters, int) or isinstance(clusters, bool) or clusters < 1:
        raise ModelError(f"{directory}: manifest hidden.clusters must be an integer of at least 1, got {clusters!r}")
    return clusters


def load_common(directory: str | os.PathLike[str],
                manifest: dict[str, Any]) -> tuple[FeatureExtractor, TreeConstraint, CountLabeler]:
    """The parts every model's manifest describes: first-order features, tree constraint, labeller."""
    try:
        templates = tuple(ArcTemplate.parse(t) for t in manifest["features"]["templates"])
        extractor = FeatureExtractor(templates, int(manifest["features"]["dim"]))
        stored = manifest["labeler"]
        # a pipeline's labeller (Pipeline.load) or a BP model's label-aware links (BPParser.from_stored) replace it
        own = "component" in stored or "link_labels" in stored
        labeler = CountLabeler() if own else CountLabeler.from_json(stored)
        return extractor, TreeConstraint(**manifest["tree"]), labeler
    except (KeyError, TypeError, ValueError) as e:
        raise ModelError(f"{directory}: manifest is incomplete or inconsistent ({e})") from e
