"""What a parse returns: ``ParsedSentence``, and the distribution over trees behind it.

``ParsedSentence`` is one sentence's parse from either parser (``engine.parser``, ``engine.bp_parser``),
from the pipeline and from parsing over tag samples (``engine.decode.tag_marginal``). Layering: this module
sits above the exact kernels and the inference algorithms and below ``engine.decode``; it imports only
``engine.kernels``.

A parse as a distribution over trees: log partition, marginals, MBR and MAP trees, k-best, samples.

``TreeDistribution`` is ``p(tree) = exp(sum of arc scores over the tree) / Z`` over the trees a
``TreeConstraint`` allows (non-projective or projective, single- or multi-root). For a first-order
model the arc scores are the model's, so the distribution is the model's exactly (``source =
"exact"``). After BP it is the distribution that the TREE/PTREE factor's final belief defines: arc
weights are the odds of the messages the tree factor receives (Smith & Eisner 2008 §6), an
approximation of the higher-order model (``source = "bp-tree-factor"``). Everything is computed
lazily and cached; each method maps to one service endpoint.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np

from engine.kernels.exact import TreeConstraint, exact_marginals
from engine.kernels.kbest_nonprojective import kbest_arborescences
from engine.kernels.kbest_projective import kbest_projective
from engine.kernels.mbr import best_tree, mbr_decode
from engine.kernels.sample import sample_trees

SOURCES = ("exact", "bp-tree-factor")


@dataclass
class TreeDistribution:
    scores: np.ndarray  # (n+1, n+1) log-potentials; -inf forbids an arc
    constraint: TreeConstraint = field(default_factory=TreeConstraint)
    source: str = "exact"

    def __post_init__(self) -> None:
        if self.source not in SOURCES:
            raise ValueError(f"source must be one of {SOURCES}")
        self.scores = np.array(self.scores, dtype=np.float64)
        n1 = self.scores.shape[0]
        self.scores[:, 0] = -np.inf
        self.scores[np.arange(n1), np.arange(n1)] = -np.inf

    @classmethod
    def with_marginals(cls, scores: np.ndarray, constraint: TreeConstraint, source: str, log_partition: float,
                       marginals: np.ndarray) -> TreeDistribution:
        """A distribution whose log partition and marginals were already computed (e.g. batched)."""
        dist = cls(scores, constraint, source)
        dist.__dict__["_exact"] = (log_partition, marginals)
        return dist

    @cached_property
    def _exact(self) -> tuple[float, np.ndarray]:
        log_z, marg = exact_marginals(self.scores[None], self.constraint)
        return float(log_z[0]), marg[0]

    @property
    def log_partition(self) -> float:
        return self._exact[0]

    @property
    def marginals(self) -> np.ndarray:
        """``marginals[h, m] = p(head of m = h)``; each column m >= 1 sums to 1."""
        return self._exact[1]

    def log_prob(self, heads: np.ndarray) -> float:
        m = np.arange(1, len(heads))
        return float(self.scores[heads[1:], m].sum() - self.log_partition)

    def mbr(self) -> np.ndarray:
        """The tree maximising the sum of arc marginals (Smith & Smith 2007 §4)."""
        return mbr_decode(self.marginals, self.constraint)

    def argmax(self) -> np.ndarray:
        """The most probable tree."""
        return best_tree(self.scores, self.constraint)

    def kbest(self, k: int) -> list[tuple[float, np.ndarray]]:
        """The ``k`` most probable trees as ``(log_prob, heads)``, best first (all trees if fewer)."""
        if self.constraint.projective:
            found = kbest_projective(self.scores, k, single_root=self.constraint.single_root)
        else:
            found = kbest_arborescences(self.scores, k, single_root=self.constraint.single_root)
        return [(float(score - self.log_partition), heads) for score, heads in found]

    def sample(self, num: int, seed: int | None = None) -> list[tuple[float, np.ndarray]]:
        """``num`` independent exact samples as ``(log_prob, heads)``; a seed makes them reproducible."""
        trees = sample_trees(self.scores, num, single_root=self.constraint.single_root,
                             projective=self.constraint.projective, rng=seed)
        return [(self.log_prob(t), t) for t in trees]


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
    # (n, L) label distributions on the tree when they were averaged over tag samples (engine.decode.tag_marginal);
    # None: the labeller's on the tree (engine.decode.conformal.label_rows computes them when needed)
    label_dists: np.ndarray | None = None
    # joint tagging and parsing (``--tag-average joint``): the tags chosen from the tag beliefs and the chosen
    # UPOS's belief per word; None when the tags came from the tagger alone (or the user)
    upos: list[str] | None = None
    xpos: list[str] | None = None
    upos_probs: np.ndarray | None = None


UNLABELLED: tuple[list[str], np.ndarray] = ([], np.zeros(0))  # the labels of a parse asked for without them
