"""Loopy sum-product belief propagation over link variables (Smith & Eisner 2008 §4, eq. 3-6).

All messages are log-odds. One iteration updates every factor family's outgoing messages from the
variable-to-factor messages ``gather(beliefs) - outgoing`` (eq. 3: a variable's message to a factor is
the product of its other incoming messages, here its belief divided by that factor's message).

Schedules (one frozen ``BPConfig``):

- ``flooding``: every family reads the same beliefs, then all update (parallel);
- ``serial``: families are visited one at a time in an order rooted at the tree factor - the tree
  factor, then the others, then back in reverse (Gormley et al. 2015 fn. 4) - each reading the
  beliefs left by the previous update.

Optional damping mixes new and old messages in log-odds space. Iteration stops after
``max_iterations`` or when the largest message change falls below ``tolerance``. With
``keep_tape`` every iteration's messages are kept for reverse-mode differentiation.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from engine.graph.family import FactorFamily, Messages

SCHEDULES = ("flooding", "serial")


@dataclass(frozen=True)
class BPConfig:
    """Settings of loopy BP, validated once."""

    max_iterations: int = 5
    tolerance: float = 1e-6
    damping: float = 0.0
    schedule: str = "flooding"
    keep_tape: bool = False
    clip: float = 1e4  # bound on |message log-odds|: hard factors send +-inf otherwise

    def __post_init__(self) -> None:
        if self.max_iterations < 1:
            raise ValueError("max_iterations must be at least 1")
        if not 0.0 <= self.damping < 1.0:
            raise ValueError("damping must be in [0, 1)")
        if self.schedule not in SCHEDULES:
            raise ValueError(f"schedule must be one of {SCHEDULES}, got {self.schedule!r}")
        if self.tolerance < 0 or self.clip <= 0:
            raise ValueError("tolerance must be >= 0 and clip > 0")


@dataclass
class BPResult:
    """Beliefs ``b(L[h, m] = true)`` (n+1, n+1; 0 where no variable), their log-odds, the final
    messages of each family, and diagnostics."""

    beliefs: np.ndarray
    log_odds: np.ndarray
    messages: list[Messages]
    incoming: list[Messages]
    iterations: int
    converged: bool
    residual: float
    tape: list[list[Messages]] = field(default_factory=list)


def _update(family: FactorFamily, beliefs: np.ndarray, old: Messages, config: BPConfig) -> tuple[Messages, Messages]:
    incoming = tuple(g - o for g, o in zip(family.gather(beliefs), old, strict=True))
    new = tuple(np.clip(m, -config.clip, config.clip) for m in family.propagate(incoming))
    if config.damping:
        new = tuple(config.damping * o + (1.0 - config.damping) * m for o, m in zip(old, new, strict=True))
    return incoming, new


def run_bp(families: Sequence[FactorFamily], valid: np.ndarray, config: BPConfig = BPConfig()) -> BPResult:
    """Run BP on one sentence's factor graph; ``families[0]`` should be the tree factor when present."""
    messages: list[Messages] = [f.initial() for f in families]
    incoming: list[Messages] = list(messages)
    tape: list[list[Messages]] = []

    def beliefs_of(msgs: list[Messages]) -> np.ndarray:
        total = np.zeros(valid.shape)
        for f, m in zip(families, msgs, strict=True):
            total += f.scatter(m)
        return total

    order = list(range(len(families)))
    if config.schedule == "serial" and len(order) > 1:
        order = order + order[-2::-1]
    residual, iterations, converged = np.inf, 0, False
    for iterations in range(1, config.max_iterations + 1):  # noqa: B007
        residual = 0.0
        if config.schedule == "flooding":
            b = beliefs_of(messages)
            updates = [_update(f, b, messages[i], config) for i, f in enumerate(families)]
            for i, (inc, new) in enumerate(updates):
                residual = max(residual, max((float(np.abs(n - o).max(initial=0.0))
                                              for n, o in zip(new, messages[i], strict=True)), default=0.0))
                incoming[i], messages[i] = inc, new
        else:
            b = beliefs_of(messages)
            for i in order:
                inc, new = _update(families[i], b, messages[i], config)
                b = b + families[i].scatter(new) - families[i].scatter(messages[i])  # beliefs after this visit
                residual = max(residual, max((float(np.abs(n - o).max(initial=0.0))
                                              for n, o in zip(new, messages[i], strict=True)), default=0.0))
                incoming[i], messages[i] = inc, new
        if config.keep_tape:
            tape.append(list(messages))
        if residual < config.tolerance:
            converged = True
            break
    total = beliefs_of(messages)
    incoming = [tuple(g - o for g, o in zip(f.gather(total), m, strict=True))
                for f, m in zip(families, messages, strict=True)]
    log_odds = np.where(valid, total, -np.inf)
    beliefs = np.where(valid, 1.0 / (1.0 + np.exp(-np.clip(log_odds, -700, 700))), 0.0)
    return BPResult(beliefs, log_odds, messages, incoming, iterations, converged, residual, tape)
