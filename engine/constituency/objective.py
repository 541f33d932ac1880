"""The training objective of the factored latent model on one sentence and its gradient (Hall & Klein 2012, §6;
``../shared/design/epic.md`` §1.4).

``loss = log Z(w) - log Z_gold(w)``: the partition of the product of the factors over the sentence's (pruned,
gold-kept) items minus that over the gold tree's items, each factor refining the gold tree on its own (given the
tree the factors are independent, so ``log Z_gold = sum_m log Z_gold,m``, Epic's ``epInGold=false``). The
gradient for ``theta_m`` is factor ``m``'s expected counts under the model side minus those under the gold side,
mapped to the weights by ``LatentModel.block_gradient``. ``log Z`` by one of four inferences (:data:`INFERENCE`):

- ``ep``: ``log Z_EP`` (``ep.expectation_propagation``), counts of each factor's augmented distribution ``q^m``
  (the gradient at EP's fixed point), gold bot spans exempt from the projection floor;
- ``adf``: the same after one sweep (``ep.assumed_density_filtering``);
- ``exact``: the product of the factors (``latent.product_factor``, ``K^M`` substates), counts split back;
- ``independent``: each factor a model of its own, ``sum_m (log Z(f_m) - log Z_gold(f_m))`` (the paper's
  "Independent" training: factors trained separately, combined only to parse).

A sentence whose product has no live tree raises ``FloatingPointError`` (the trainer counts and skips it).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from engine.constituency.anchored import AnchoredScores, SpanMask, build_items, items_from_tree, tree_mask
from engine.constituency.contract import INFERENCE
from engine.constituency.ep import EPResult, EPSettings, assumed_density_filtering, expectation_propagation
from engine.constituency.factor import FloatArray
from engine.constituency.grammar import AnchoredTree
from engine.constituency.inside_outside import inside_outside
from engine.constituency.latent import Counts, LatentModel, SentenceFeatures, product_factor, split_product

__all__ = ["INFERENCE", "Prepared", "SentenceResult", "compact_mask", "expand_mask", "sentence_gradient"]



def compact_mask(mask: SpanMask) -> tuple[int, np.ndarray, np.ndarray]:
    """A mask as ``(n, bot indices, top indices)`` (int32 flat indices of the live entries): what the trainer
    keeps in memory for every sentence (2-3 % of the entries live)."""
    return mask.n, np.flatnonzero(mask.bot).astype(np.int32), np.flatnonzero(mask.top).astype(np.int32)


@dataclass(frozen=True)
class Prepared:
    """A training sentence, computed once per run: its features, its pruning mask (gold spans kept, compact)
    and its gold tree."""

    feats: SentenceFeatures
    mask: tuple[int, np.ndarray, np.ndarray]
    gold: AnchoredTree

    def span_mask(self, n_labels: int) -> SpanMask:
        return expand_mask(self.mask, n_labels)


def expand_mask(compact: tuple[int, np.ndarray, np.ndarray], n_labels: int) -> SpanMask:
    """The :class:`SpanMask` of :func:`compact_mask`'s output."""
    n, bot, top = compact
    shape = (n + 1, n + 1, n_labels)
    b, t = np.zeros(shape, dtype=bool), np.zeros(shape, dtype=bool)
    b.ravel()[bot] = True
    t.ravel()[top] = True
    return SpanMask(b, t)


@dataclass(frozen=True)
class SentenceResult:
    """``loss``, the gradient of every weight, EP's sweeps and whether it converged (``None`` without EP)."""

    loss: float
    gradient: FloatArray
    sweeps: int | None = None
    converged: bool | None = None


def _ep(inference: str, items: object, factors: list, settings: EPSettings, keep: np.ndarray) -> EPResult:
    run = assumed_density_filtering if inference == "adf" else expectation_propagation
    return run(items, factors, settings, keep)  # type: ignore[arg-type]


def sentence_gradient(model: LatentModel, sentence: Prepared, inference: str,
                      settings: EPSettings | None = None) -> SentenceResult:
    """The loss and gradient of one sentence (module docstring)."""
    if inference not in INFERENCE:
        raise ValueError(f"inference must be one of {INFERENCE}, got {inference!r}")
    g, m = model.grammar, model.settings.factors
    factors = model.factors(sentence.feats)
    items = build_items(g, sentence.span_mask(g.n_labels))
    gold_items = items_from_tree(g, sentence.gold)
    gold = [inside_outside(gold_items, f, AnchoredScores.zeros(gold_items)) for f in factors]
    sweeps: int | None = None
    converged: bool | None = None
    if inference == "exact" or (m == 1 and inference != "independent"):
        joint = inside_outside(items, product_factor(factors), AnchoredScores.zeros(items))
        log_z, counts = joint.log_z, split_product(joint, model.settings.substates, m)
    elif inference == "independent":
        alone = [inside_outside(items, f, AnchoredScores.zeros(items)) for f in factors]
        log_z, counts = sum(a.log_z for a in alone), [Counts.of(a) for a in alone]
    else:
        result = _ep(inference, items, factors, settings or EPSettings(), tree_mask(g, sentence.gold).bot)
        log_z, counts = result.log_z, [Counts.of(p) for p in result.marginals]
        sweeps, converged = result.sweeps, result.converged
    loss = log_z - sum(p.log_z for p in gold)
    grad = np.concatenate([model.block_gradient(c - Counts.of(p), sentence.feats)
                           for c, p in zip(counts, gold, strict=True)])
    return SentenceResult(float(loss), grad, sweeps, converged)
