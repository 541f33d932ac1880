"""Differentiable training objectives on arc beliefs (Gormley, Dredze & Eisner 2015 §3.2, §4).

Each objective maps beliefs ``b[..., h, m] = b(L[h, m] = true)`` (BP's normalised variable beliefs, or
exact marginals; shape (n+1, n+1) or a batch (B, n+1, n+1), 0 where ``valid`` is False) and the gold
trees to ``(value, d value / d b)``; the gradient is then sent back through BP (``bp_backward``) or
through exact inference (a Hessian-vector product, ``tree_hessian``). Every value is a loss (lower is
better), summed over the sentences of a batch.

- ``l2_distance`` (eq. 12): ``sum over arcs and both values v of (b_hm(v) - b*_hm(v))^2`` with the
  target beliefs ``b*_hm(on) = 1`` for gold arcs and 0 otherwise; as ``b(off) = 1 - b(on)`` this is
  ``2 sum (b - y)^2``. It removes the decoder and loss from the circuit (layer-wise training).
- ``annealed_risk`` (eq. 10-11): the decoder samples a tree with probability
  ``q_T(y) ~ exp(sum_{hm in y} b_hm / T)``; the risk is its expected loss, ``n - sum_gold q_T(y_hm)``
  (the negated expected recall). ``q_T``'s marginals come from the Matrix-Tree theorem or Eisner's
  inside-outside, and its gradient is ``-(1/T) H_q y*`` (``tree_hessian``). As ``T -> 0`` the risk
  approaches the loss of the MBR decoder (eq. 3) used at test time.
- ``role_l2``: eq. 12 over the role variables of label-aware LINK factors (``engine.scoring.link_labels``):
  each kept arc's role beliefs ``b(L_hm on) softmax(u_hm)_r`` against the gold (arc, label), with its gradient
  in the link beliefs and in the role scores; added to ``l2_distance`` when a model infers labels in the graph.
- ``AnnealSchedule``: ``T`` annealed linearly from ``start`` to ``end`` over the optimisation steps
  (§5.1; the paper's exact values were lost in extraction: ours are settings, stated in docs/results/gormley-2015.md).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from engine.kernels.exact import TreeConstraint, exact_marginals
from engine.kernels.tree_hessian import tree_hvp


def gold_indicators(heads: np.ndarray) -> np.ndarray:
    """``y[..., h, m] = 1`` for the gold arcs of ``heads`` (n+1,) or (B, n+1) (``heads[..., 0]`` ignored)."""
    heads = np.asarray(heads)
    batch = heads[None] if heads.ndim == 1 else heads
    b, n1 = batch.shape
    y = np.zeros((b, n1, n1))
    y[np.repeat(np.arange(b), n1 - 1), batch[:, 1:].reshape(-1), np.tile(np.arange(1, n1), b)] = 1.0
    return y[0] if heads.ndim == 1 else y


def l2_distance(beliefs: np.ndarray, gold: np.ndarray, valid: np.ndarray) -> tuple[float, np.ndarray]:
    """Gormley et al. eq. 12 over the ``valid`` arcs: ``(2 sum (b - y)^2, 4 (b - y))``."""
    diff = np.where(valid, beliefs - gold, 0.0)
    return float(2.0 * (diff * diff).sum()), 4.0 * diff


def annealed_risk(beliefs: np.ndarray, gold: np.ndarray, valid: np.ndarray, temperature: float,
                  constraint: TreeConstraint) -> tuple[float, np.ndarray]:
    """Gormley et al. eq. 10-11: expected number of wrong heads of a tree drawn from
    ``q_T(y) ~ exp(sum b / T)`` over the trees of ``constraint`` using ``valid`` arcs, and its gradient
    in ``b``. ``beliefs``, ``gold``, ``valid``: (n+1, n+1) or (B, n+1, n+1). O(n^3) per sentence."""
    single = beliefs.ndim == 2
    b, y, ok = (np.asarray(x)[None] if single else np.asarray(x) for x in (beliefs, gold, valid))
    scores = np.where(ok, b / temperature, -np.inf)
    _, mu = exact_marginals(scores, constraint)
    words = b.shape[-1] - 1
    risk = float((words - (mu * y).sum(axis=(1, 2))).sum())
    grad = np.where(ok, -tree_hvp(scores, y, constraint) / temperature, 0.0)
    return risk, grad[0] if single else grad


def role_targets(heads: np.ndarray, deps: np.ndarray, gold_heads: np.ndarray, gold_roles: np.ndarray,
                 roles: int) -> tuple[np.ndarray, np.ndarray]:
    """The gold of the role variables of the arcs ``heads[a] -> deps[a]``: ``(y (A, R), scored (A,))`` with
    ``y[a, r] = 1`` iff arc ``a`` is a gold arc and ``r`` its dependent's gold label (``gold_roles[m - 1]``, -1
    for a label the role model does not have). A gold arc whose label is unknown is left out (``scored`` False):
    its role beliefs have no target, and a zero one would pull its link belief down against the link term."""
    deps = np.asarray(deps, dtype=np.int64)
    gold = np.asarray(gold_heads)[deps] == heads
    label = np.asarray(gold_roles)[deps - 1]
    y = np.zeros((len(deps), roles))
    hit = np.flatnonzero(gold & (label >= 0))
    y[hit, label[hit]] = 1.0
    return y, ~(gold & (label < 0))


def role_l2(on: np.ndarray, probs: np.ndarray, gold: np.ndarray,
            scored: np.ndarray) -> tuple[float, np.ndarray, np.ndarray]:
    """Gormley et al. eq. 12 over the role variables ``L_hrm`` of label-aware LINK factors (Smith & Eisner 2008
    §3.1): an arc's role beliefs are ``beta_r = b(L_hm on) p_r`` with ``p = softmax(u_hm)``, each role variable is
    binary, so the distance is ``2 sum_{scored arcs, r} (beta_r - y_r)^2``. ``on`` (A,) the arcs' link beliefs,
    ``probs`` (A, R) their role distributions, ``gold`` (A, R) and ``scored`` (A,) from ``role_targets``.
    Returns the value, its gradient in the link beliefs (A,), and in the role scores u (A, R) through the
    softmax alone (what reaches u through b comes back by BP's reverse mode, as ``theta_link = s + lse(u)``)."""
    diff = np.where(scored[:, None], on[:, None] * probs - gold, 0.0)
    g_beta = 4.0 * diff
    g_on = (g_beta * probs).sum(axis=1)
    g_p = g_beta * on[:, None]
    g_u = probs * (g_p - (probs * g_p).sum(axis=1, keepdims=True))
    return float(2.0 * (diff * diff).sum()), g_on, g_u


@dataclass(frozen=True)
class AnnealSchedule:
    """Temperature ``T`` of the annealed risk, linear from ``start`` to ``end`` over ``steps`` steps."""

    start: float = 1.0
    end: float = 0.1

    def __post_init__(self) -> None:
        if not (self.start > 0 and self.end > 0):
            raise ValueError(f"annealing temperatures must be > 0, got {self.start} -> {self.end}")

    def at(self, step: int, steps: int) -> float:
        """The temperature of step ``step`` (0-based) of ``steps``."""
        frac = step / (steps - 1) if steps > 1 else 1.0
        return self.start + (self.end - self.start) * min(max(frac, 0.0), 1.0)
