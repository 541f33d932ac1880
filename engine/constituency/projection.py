"""Projection of an augmented distribution onto an anchored PCFG (Hall & Klein 2012, §5.4; brief §1.2).

Given the coarse anchored marginals of ``q^m ~ f_m * q\\m`` (``inside_outside``), the projection is the anchored
PCFG of relative frequencies of the expected anchored counts (Epic's ``AnchoredPCFGProjector``):

- ``log q(i, k, j, r) = log mu_b(i, k, j, r) - log mu_bot(i, j, A(r))``: each bot parent's splits and rules;
- ``log q(i, j, u) = log mu_u(i, j, u) - log mu_top(i, j, A(u))``: each top label's unary rules;
- tag items score 0 where their marginal is positive (the unary above a tag carries the choice), ``-inf`` else.

It minimises ``KL(q^m || q)`` over anchored PCFGs; being locally normalised its ``log Z`` is 0, and inside-outside
of it gives back the marginals it was built from (flow is conserved), both tested. Epic drops bot parents whose
``log mu_bot`` is below ``PROJECTION_FLOOR`` (their binary items and tags become ``-inf``); parents in ``keep``
(gold spans in training, brief §5) are exempt. ``floor=None`` keeps every parent with positive mass.
"""

from __future__ import annotations

import numpy as np

from engine.constituency.anchored import AnchoredItems, AnchoredScores, BoolArray, FloatArray
from engine.constituency.factor import FactorMarginals

__all__ = ["PROJECTION_FLOOR", "project"]

PROJECTION_FLOOR = -15.0  # Epic: bot parents with log marginal below are dropped from the projection


def _log_ratio(numerator: FloatArray, denominator: FloatArray) -> FloatArray:
    """``log(numerator / denominator)``, ``-inf`` where either is not positive."""
    with np.errstate(divide="ignore", invalid="ignore"):  # log 0, -inf - -inf where not positive: masked
        return np.where((numerator > 0) & (denominator > 0), np.log(numerator) - np.log(denominator), -np.inf)


def project(items: AnchoredItems, marginals: FactorMarginals, floor: float | None = PROJECTION_FLOOR,
            keep: BoolArray | None = None) -> AnchoredScores:
    """The anchored PCFG of relative frequencies of ``marginals`` (brief §1.2). ``keep[i, j, A]`` (shape ``(n+1,
    n+1, L)``) marks bot parents exempt from ``floor``."""
    parent_b = marginals.mu_bot[items.bin_i, items.bin_j, items.bin_a]
    parent_u = marginals.mu_top[items.un_i, items.un_j, items.un_a]
    binary = _log_ratio(marginals.mu_b, parent_b)
    unary = _log_ratio(marginals.mu_u, parent_u)
    tag = np.where(marginals.mu_tag > 0, 0.0, -np.inf)
    if floor is not None:
        threshold = np.exp(floor)
        low_b = parent_b < threshold
        low_t = marginals.mu_tag < threshold
        if keep is not None:
            low_b &= ~keep[items.bin_i, items.bin_j, items.bin_a]
            low_t &= ~keep[items.tag_i, items.tag_i + 1, items.tag_t]
        binary[low_b] = -np.inf
        tag[low_t] = -np.inf
    return AnchoredScores(binary, unary, tag)
