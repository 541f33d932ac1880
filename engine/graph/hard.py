"""Unary and hard factors (Smith & Eisner 2008 §3.1-3.2, Table 1): LINK, EXACTLY1, ATMOST1.

NOT2 and NO2CYCLE are hard pairwise factors: see ``engine.graph.pairwise``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from engine.graph.family import ArcFamily, FactorFamily, Messages, exclusive_logsumexp


class Link(ArcFamily):
    """LINK: one unary factor per arc with potential ``exp(theta[h, m])`` when ``L[h, m]`` is true.

    Its message is its log-odds ``theta`` whatever it receives.
    """

    name = "link"
    constant = True
    stackable = True

    def __init__(self, n: int, valid: np.ndarray, theta: np.ndarray) -> None:
        super().__init__(n, valid)
        self.theta = np.where(valid, theta, 0.0)

    @classmethod
    def stack(cls, parts: Sequence[FactorFamily]) -> FactorFamily:
        if len(parts) == 1:
            return parts[0]
        return cls._stack_of(parts[0].n, np.stack([p.valid for p in parts]),
                             np.stack([p.theta for p in parts]))  # type: ignore[attr-defined]

    @classmethod
    def _stack_of(cls, n: int, valid: np.ndarray, theta: np.ndarray) -> Link:
        out = object.__new__(cls)
        out._stacked(n, valid)
        out.theta = theta
        return out

    def sentences(self, keep: np.ndarray) -> FactorFamily:
        if self.bounds is None:
            return super().sentences(keep)
        return self._stack_of(self.n, self.valid[keep], self.theta[keep])

    def propagate(self, incoming: Messages) -> Messages:
        return (self.theta,)

    def initial(self) -> Messages:
        return (self.theta,)  # a unary factor's message never changes: send it from the start

    def message_bound(self) -> float:
        return float(np.abs(self.theta).max(initial=0.0))

    def vjp(self, incoming: Messages, grad_out: Messages) -> tuple[Messages, np.ndarray | None]:
        """The message is ``theta`` whatever comes in: the adjoint goes to ``theta`` only."""
        return (np.zeros_like(incoming[0]),), np.where(self.valid, grad_out[0], 0.0)

    def initial_vjp(self, grad: Messages) -> np.ndarray | None:
        return np.where(self.valid, grad[0], 0.0)

    def log_potential(self, y: np.ndarray) -> float:
        return float(self.theta[y & self.valid].sum())


class _OneHeadConstraint(ArcFamily):
    """One factor per dependent ``m`` over the variables ``L[*, m]``."""

    def _others(self, incoming: Messages) -> np.ndarray:
        r = np.where(self.valid, incoming[0], -np.inf)
        return exclusive_logsumexp(r, axis=0)  # log sum over the other heads' odds


class Exactly1(_OneHeadConstraint):
    """EXACTLY1_m: word ``m`` has exactly one head. O(n) per factor.

    Message to ``L[h, m]``: odds ``1 / sum_{h' != h} odds(h')`` (Smith & Eisner §5.1).
    """

    name = "exactly1"

    def propagate(self, incoming: Messages) -> Messages:
        return (np.where(self.valid, -self._others(incoming), 0.0),)

    def log_potential(self, y: np.ndarray) -> float:
        ok = ((y & self.valid)[:, 1:].sum(axis=0) == 1).all()
        return 0.0 if ok else -np.inf


class AtMost1(_OneHeadConstraint):
    """ATMOST1_m: word ``m`` has at most one head. Message odds ``1 / (1 + sum_{h' != h} odds(h'))``."""

    name = "atmost1"

    def propagate(self, incoming: Messages) -> Messages:
        return (np.where(self.valid, -np.logaddexp(0.0, self._others(incoming)), 0.0),)

    def log_potential(self, y: np.ndarray) -> float:
        ok = ((y & self.valid)[:, 1:].sum(axis=0) <= 1).all()
        return 0.0 if ok else -np.inf
