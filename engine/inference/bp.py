"""Loopy sum-product belief propagation over link variables (Smith & Eisner 2008 §4, eq. 3-6).

All messages are log-odds. One iteration updates every factor family's outgoing messages from the
variable-to-factor messages ``gather(beliefs) - outgoing`` (eq. 3: a variable's message to a factor is
the product of its other incoming messages, here its belief divided by that factor's message).

Schedules (one frozen ``BPConfig``):

- ``flooding``: every family reads the same beliefs, then all update (parallel);
- ``serial``: families are visited one at a time in an order rooted at the tree factor - the tree
  factor, then the others, then back in reverse (Gormley et al. 2015 fn. 4) - each reading the
  beliefs left by the previous update.

An update that would repeat a family's previous update exactly is skipped (``Repeats``): LINK after
its first update, and in the serial schedule the tree factor's visit that opens an iteration (it
reads what the visit closing the previous iteration read). Optional damping mixes new and old
messages in log-odds space (no update is skipped then). Iteration stops after ``max_iterations``
or when the largest message change falls below ``tolerance``. With ``keep_tape`` every
iteration's messages are kept for reverse-mode differentiation.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

from engine.graph.family import ArcFamily, FactorFamily, Messages

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
    messages of each family, and diagnostics. ``settled``: the families whose next update would repeat
    their last one exactly (see ``Repeats``), for a caller that continues BP from these messages."""

    beliefs: np.ndarray
    log_odds: np.ndarray
    messages: list[Messages]
    incoming: list[Messages]
    iterations: int
    converged: bool
    residual: float
    tape: list[list[Messages]] = field(default_factory=list)
    settled: frozenset[int] = frozenset()


def stages(count: int, schedule: str) -> list[list[int]]:
    """One iteration as stages of family indices; the families of a stage read the same beliefs.
    Flooding: one stage of every family. Serial: the tree factor (index 0), the others, then back."""
    if schedule == "flooding" or count == 1:
        return [list(range(count))]
    order = list(range(count))
    return [[i] for i in order + order[-2::-1]]


class Repeats:
    """Which updates would repeat a family's last update exactly, so that BP can skip them.

    An update maps a family's incoming messages ``gather(b) - m`` to new outgoing messages; it repeats
    the family's last update when those incoming messages have not changed since. Two cases, both
    exact (the skipped update would compute the same function of the parameters, not merely the same
    numbers), and only without damping (damping mixes the old messages in, so nothing is a fixed point):

    - a ``constant`` family (LINK: its message is theta whatever it receives) never changes after its
      first update;
    - a family with one message per arc (``ArcFamily``: TREE, PTREE, ...) leaves its own incoming
      messages unchanged when it updates (b and m change by the same amount on every arc), so its
      next update repeats this one unless another family's messages have changed in between. In the
      serial schedule the tree factor closes one iteration and opens the next: one of its two O(n^3)
      calls per iteration is a repeat.

    A constant family's update counts as a change only if it changed a message (its first one can,
    through the clip). ``settled`` holds the families whose next update would be a repeat.
    """

    def __init__(self, families: Sequence[FactorFamily], config: BPConfig, settled: Iterable[int] = ()) -> None:
        self.enabled = config.damping == 0.0
        self.constant = [f.constant for f in families]
        self.per_arc = [isinstance(f, ArcFamily) for f in families]
        self.settled = set(settled) if self.enabled else set()

    def pending(self, stage: Sequence[int]) -> list[int]:
        """The families of ``stage`` whose update is not a repeat."""
        return [i for i in stage if i not in self.settled]

    def record(self, updated: Sequence[int], residuals: Sequence[float]) -> None:
        """After the families ``updated`` updated from the same beliefs, with these message changes."""
        if not self.enabled:
            return
        changed = [i for i, r in zip(updated, residuals, strict=True) if not self.constant[i] or r > 0.0]
        if not changed:
            self.settled.update(updated)
            return
        keep = {i for i in self.settled.union(updated) if self.constant[i]}
        if len(changed) == 1 and self.per_arc[changed[0]]:
            keep.add(changed[0])
        self.settled = keep


def _update(family: FactorFamily, beliefs: np.ndarray, old: Messages, config: BPConfig,
            clip: bool = True) -> tuple[Messages, Messages]:
    incoming = tuple(g - o for g, o in zip(family.gather(beliefs), old, strict=True))
    new = family.propagate(incoming)
    if clip:
        new = tuple(np.clip(m, -config.clip, config.clip) for m in new)
    if config.damping:
        new = tuple(config.damping * o + (1.0 - config.damping) * m for o, m in zip(old, new, strict=True))
    return incoming, new


def _change(new: Messages, old: Messages) -> float:
    return max((float(np.abs(n - o).max(initial=0.0)) for n, o in zip(new, old, strict=True)), default=0.0)


def run_bp(families: Sequence[FactorFamily], valid: np.ndarray, config: BPConfig = BPConfig(), *,
           initial: Sequence[Messages | None] | None = None, settled: Iterable[int] = ()) -> BPResult:
    """Run BP on one sentence's factor graph; ``families[0]`` should be the tree factor when present.

    ``initial`` gives some families' starting messages (None: ``family.initial()``), to continue an
    earlier run; ``settled`` names families whose starting messages are already what their update
    would send on the starting beliefs (an earlier result's ``settled``), so their first visit is
    skipped. Cost per iteration: one update per family and visit, less the repeats (``Repeats``)."""
    starts = initial if initial is not None else [None] * len(families)
    messages: list[Messages] = [f.initial() if m is None else m for f, m in zip(families, starts, strict=True)]
    scattered = [f.scatter(m) for f, m in zip(families, messages, strict=True)]  # each family's share of b
    tape: list[list[Messages]] = []
    repeats = Repeats(families, config, settled)
    clips = [not f.message_bound() + 1.0 < config.clip for f in families]  # False: the clip would be a no-op

    def beliefs_of() -> np.ndarray:
        total = np.zeros(valid.shape)
        for s in scattered:
            total += s
        return total

    residual, iterations, converged = np.inf, 0, False
    serial = config.schedule == "serial"
    plan = stages(len(families), config.schedule)
    for iterations in range(1, config.max_iterations + 1):  # noqa: B007
        residual = 0.0
        b = beliefs_of()
        for stage in plan:
            pending = repeats.pending(stage)
            if not pending:
                continue
            updates = [_update(families[i], b, messages[i], config, clips[i])[1] for i in pending]
            changes = [_change(new, messages[i]) for i, new in zip(pending, updates, strict=True)]
            for i, new in zip(pending, updates, strict=True):
                share = families[i].scatter(new)
                if serial:  # the next visit reads the beliefs after this one (b is this loop's own array)
                    b += share
                    b -= scattered[i]
                messages[i], scattered[i] = new, share
            residual = max(residual, *changes)
            repeats.record(pending, changes)
        if config.keep_tape:
            tape.append(list(messages))
        if residual < config.tolerance:
            converged = True
            break
    total = beliefs_of()
    incoming = [tuple(g - o for g, o in zip(f.gather(total), m, strict=True))
                for f, m in zip(families, messages, strict=True)]
    log_odds = np.where(valid, total, -np.inf)
    beliefs = np.where(valid, 1.0 / (1.0 + np.exp(-np.clip(log_odds, -700, 700))), 0.0)
    return BPResult(beliefs, log_odds, messages, incoming, iterations, converged, residual, tape,
                    frozenset(repeats.settled))
