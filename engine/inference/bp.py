"""Loopy sum-product belief propagation over link variables (Smith & Eisner 2008 §4, eq. 3-6).

All messages are log-odds. One iteration updates every factor family's outgoing messages from the
variable-to-factor messages ``gather(beliefs) - outgoing`` (eq. 3: a variable's message to a factor is
the product of its other incoming messages, here its belief divided by that factor's message).

Schedules (one frozen ``BPConfig``):

- ``flooding``: every family reads the same beliefs, then all update (parallel);
- ``serial``: families are visited one at a time in an order rooted at the tree factor - the tree
  factor, then the others, then back in reverse (Gormley et al. 2015 fn. 4) - each reading the
  beliefs left by the previous update.

An update that would repeat a family's previous update exactly is skipped (``Repeats``): LINK (its
messages start at its update), and in the serial schedule the tree factor's visit that opens an
iteration (it reads what the visit closing the previous iteration read). Optional damping mixes new
and old messages in log-odds space (no update is skipped then). Iteration stops after
``max_iterations``, or once no belief b(L[h, m] = true) has changed by more than ``tolerance`` in an
iteration (the residual; measured on the beliefs, the quantities BP is run for, as libDAI does: a
message to an arc whose belief is 1e-9 may still move in log-odds long after every belief has
settled). With ``keep_tape`` every iteration's messages are kept for reverse-mode differentiation.

``run_bp_many`` runs many sentences' graphs at once, stacked (``engine.graph.family``), each sentence
stopping on its own test.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from engine.graph.family import ArcFamily, FactorFamily, Messages
from engine.inference.fields import Setting, check_settings, setting
from engine.kernels.logistic import expit

SCHEDULES = ("flooding", "serial")
ITERATIONS = Setting("iterations", int, "at most this many BP iterations", minimum=1)
SCHEDULE = Setting("schedule", str, "order of the factor updates in an iteration", choices=SCHEDULES)


@dataclass(frozen=True)
class BPConfig:
    """Settings of loopy BP, validated once. ``iterations`` (``max_iterations``) and ``schedule`` are the
    user-facing ones (``engine.inference.fields``): these defaults are BP's for the parser, the command
    line and the service alike, unless a model's manifest states its own (``engine.inference.settings``)."""

    max_iterations: int = setting(5, ITERATIONS)
    # stop once no belief moves by more than this in an iteration: the parser prints marginals to four
    # decimals (HeadProb), and BP's own error against exact marginals is of order 1e-2
    tolerance: float = 1e-5
    damping: float = 0.0
    schedule: str = setting("serial", SCHEDULE)
    keep_tape: bool = False
    clip: float = 1e4  # bound on |message log-odds|: hard factors send +-inf otherwise

    def __post_init__(self) -> None:
        check_settings(self)
        if not 0.0 <= self.damping < 1.0:
            raise ValueError("damping must be in [0, 1)")
        if self.tolerance < 0 or self.clip <= 0:
            raise ValueError("tolerance must be >= 0 and clip > 0")


@dataclass
class BPResult:
    """Beliefs ``b(L[h, m] = true)`` (n+1, n+1; 0 where no variable), their log-odds, the final
    messages of each family, and diagnostics: ``residual`` is the largest change of a belief in the last
    iteration, ``converged`` whether it fell below the tolerance. ``settled``: the families whose next
    update would repeat their last one exactly (see ``Repeats``), for a caller that continues BP from
    these messages."""

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
      first update, and needs none when it starts from ``initial()`` (which is that update) and its
      messages are within the clip;
    - a family with one message per arc (``ArcFamily``: TREE, PTREE, ...) leaves its own incoming
      messages unchanged when it updates (b and m change by the same amount on every arc), so its
      next update repeats this one unless another family's messages have changed in between. In the
      serial schedule the tree factor closes one iteration and opens the next: one of its two O(n^3)
      calls per iteration is a repeat.

    A constant family's update counts as a change only if it changed a message (its first one can,
    through the clip). ``settled`` holds the families whose next update would be a repeat.
    """

    def __init__(self, families: Sequence[FactorFamily], config: BPConfig, settled: Iterable[int] = (),
                 fresh: Iterable[int] = ()) -> None:
        """``settled``: as in ``run_bp``; ``fresh``: the families whose messages start at ``initial()`` and
        need no clip."""
        self.enabled = config.damping == 0.0
        self.constant = {i for i, f in enumerate(families) if f.constant}
        self.per_arc = [isinstance(f, ArcFamily) for f in families]
        self.settled = set(settled).union(self.constant.intersection(fresh)) if self.enabled else set()

    def pending(self, stage: Sequence[int]) -> list[int]:
        """The families of ``stage`` whose update is not a repeat."""
        return [i for i in stage if i not in self.settled]

    def record(self, updated: Sequence[int], residuals: Sequence[float]) -> None:
        """After the families ``updated`` updated from the same beliefs, with these message changes (only
        a constant family's is read)."""
        if not self.enabled:
            return
        if len(updated) == 1 and updated[0] not in self.constant:  # the serial schedule's usual case
            self.settled = self.settled & self.constant
            if self.per_arc[updated[0]]:
                self.settled.add(updated[0])
            return
        changed = [i for i, r in zip(updated, residuals, strict=True) if i not in self.constant or r > 0.0]
        if not changed:
            self.settled.update(updated)
            return
        self.settled = self.settled.union(updated) & self.constant
        if len(changed) == 1 and self.per_arc[changed[0]]:
            self.settled.add(changed[0])


def _visit(family: FactorFamily, beliefs: np.ndarray, old: np.ndarray, config: BPConfig,
           clip: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One update of a family on packed messages (``FactorFamily.pack``): (incoming ``gather(b) - m``,
    raw outgoing ``propagate(incoming)``, new messages after the clip and damping)."""
    incoming = family.gather_flat(beliefs) - old
    raw = family.propagate_flat(incoming)
    new = np.minimum(np.maximum(raw, -config.clip), config.clip) if clip else raw  # np.clip, in fewer calls
    if config.damping:
        new = config.damping * old + (1.0 - config.damping) * new
    return incoming, raw, new


def _change(delta: np.ndarray) -> float:
    """The largest absolute message change in ``delta`` (0 if empty)."""
    return float(np.maximum.reduce(np.abs(delta), initial=0.0))


def _beliefs(families: Sequence[FactorFamily], packed: Sequence[np.ndarray], size: int) -> np.ndarray:
    """Log-odds beliefs as a flat vector of ``size`` arcs: the sum of every family's scattered messages."""
    total = np.zeros(size)
    for f, m in zip(families, packed, strict=True):
        total += f.scatter_flat(m)
    return total


def run_bp(families: Sequence[FactorFamily], valid: np.ndarray, config: BPConfig = BPConfig(), *,
           initial: Sequence[Messages | None] | None = None, settled: Iterable[int] = (),
           visits: list[list[tuple[int, np.ndarray, np.ndarray]]] | None = None) -> BPResult:
    """Run BP on one sentence's factor graph; ``families[0]`` should be the tree factor when present.

    ``initial`` gives some families' starting messages (None: ``family.initial()``), to continue an
    earlier run; ``settled`` names families whose starting messages are already what their update
    would send on the starting beliefs (an earlier result's ``settled``), so their first visit is
    skipped. ``visits``, when given, receives every stage's updates as ``(family, incoming, raw
    outgoing)`` packed arrays, for reverse-mode differentiation (``engine.inference.bp_backward``).

    Messages are kept packed (one array per family) and the flat beliefs are updated in place
    after each stage by the scattered *change* of its families' messages, one scatter per update. Cost
    per iteration: one update per family and visit, less the repeats (``Repeats``) and the visits of
    families without factors."""
    starts = initial if initial is not None else [None] * len(families)
    packed = [_packed(f, m) for f, m in zip(families, starts, strict=True)]
    fresh = [i for i, m in enumerate(starts) if m is None]
    return run_stack(list(families), valid, config, packed, settled, fresh, visits).results()[0]


# Stacks hold at most about this many messages (arcs plus pairwise factors): larger arrays fall out of the
# CPU's caches, and long sentences gain nothing from stacking (their updates are already large).
STACK_MESSAGES = 1 << 16

Graph = tuple[Sequence[FactorFamily], np.ndarray]  # one sentence's families and its valid-arc mask


def stack_chunks(graphs: Sequence[Graph], keys: Sequence[object] | None = None,
                 stack_messages: int = STACK_MESSAGES) -> list[list[int]]:
    """Groups of ``graphs`` (indices, in order) that can run as one stack: one sentence length, the same
    family classes (all stackable) and the same ``keys``, at most about ``stack_messages`` messages (arcs
    plus factors) per group; a graph with a family that cannot be stacked is a group of its own."""
    groups: dict[tuple[object, ...], list[int]] = {}
    for j, (families, valid) in enumerate(graphs):
        if all(f.stackable for f in families):
            key: tuple[object, ...] = (valid.shape, tuple((type(f), f.name) for f in families),
                                       None if keys is None else keys[j])
        else:
            key = (j,)
        groups.setdefault(key, []).append(j)
    chunks: list[list[int]] = []
    for members in groups.values():
        size = stack_messages
        for j in members:
            families, valid = graphs[j]
            messages = valid.size + sum(getattr(f, "size", 0) for f in families)
            if size + messages > stack_messages:
                chunks.append([])
                size = 0
            chunks[-1].append(j)
            size += messages
    return chunks


def stack_graphs(graphs: Sequence[Graph]) -> tuple[list[FactorFamily], np.ndarray]:
    """The families of equal-length ``graphs`` stacked family by family (``FactorFamily.stack``) and their
    valid masks (B, n+1, n+1); one graph: its own families and mask."""
    if len(graphs) == 1:
        return list(graphs[0][0]), graphs[0][1]
    families = [type(parts[0]).stack(parts) for parts in zip(*(g[0] for g in graphs), strict=True)]
    return families, np.stack([g[1] for g in graphs])


def run_bp_many(graphs: Sequence[Graph], config: BPConfig = BPConfig(), *,
                initial: Sequence[Sequence[Messages | None] | None] | None = None,
                settled: Sequence[Iterable[int]] | None = None,
                stack_messages: int = STACK_MESSAGES) -> list[BPResult]:
    """``run_bp`` on each ``(families, valid)`` of ``graphs`` (with its ``initial`` and ``settled``), in order.

    Graphs of one sentence length with the same family classes and the same ``settled`` are stacked
    (``stack_chunks``, ``FactorFamily.stack``) and run together (``run_stack``): every update is one set
    of array operations for the whole stack, and each sentence stops on its own test (its residual
    below ``config.tolerance``, or ``max_iterations``), exactly as alone. The results are ``run_bp``'s up
    to rounding (a stack of tree factors takes the batched Matrix-Tree kernel)."""
    count = len(graphs)
    starts = list(initial) if initial is not None else [None] * count
    done = [tuple(s) for s in settled] if settled is not None else [()] * count
    results: list[BPResult | None] = [None] * count
    for chunk in stack_chunks(graphs, done, stack_messages):
        families, valid = stack_graphs([graphs[j] for j in chunk])
        parts: list[Sequence[Messages | None]] = [starts[j] or [None] * len(families) for j in chunk]
        packed = [np.concatenate([_packed(graphs[j][0][i], part[i]) for j, part in zip(chunk, parts, strict=True)],
                                 axis=-1) for i in range(len(families))]
        fresh = [i for i in range(len(families)) if all(part[i] is None for part in parts)]
        for j, result in zip(chunk, run_stack(families, valid, config, packed, done[chunk[0]], fresh).results(),
                             strict=True):
            results[j] = result
    return results  # type: ignore[return-value]


def _packed(family: FactorFamily, messages: Messages | None) -> np.ndarray:
    """The family's packed starting messages: ``messages``, or ``initial()`` when None."""
    return family.initial_packed() if messages is None else family.pack(messages)


@dataclass
class StackResult:
    """BP's final state on a stack of sentences (one sentence: a stack of one): the stack's families and
    valid mask, each family's packed messages (every sentence's as they were when it stopped), and per
    sentence the iterations run, whether it converged and its last residual."""

    families: list[FactorFamily]
    valid: np.ndarray  # (n+1, n+1), or (B, n+1, n+1) for a stack
    packed: list[np.ndarray]
    iterations: np.ndarray
    converged: np.ndarray
    residual: np.ndarray
    settled: frozenset[int]
    tape: list[list[Messages]]

    @cached_property
    def log_odds(self) -> np.ndarray:
        """Belief log-odds afresh from the messages, flat over the stack (0 off the variables): ``b`` of
        the BP loop carries the rounding of every update."""
        return _beliefs(self.families, self.packed, self.valid.size)

    def beliefs(self) -> np.ndarray:
        """``b(L[h, m] = true)`` shaped like ``valid``; 0 where no variable."""
        return np.where(self.valid, expit(self.log_odds.reshape(self.valid.shape)), 0.0)

    def results(self) -> list[BPResult]:
        """One ``BPResult`` per sentence of the stack."""
        total = self.log_odds
        valid = self.valid.reshape(-1, *self.valid.shape[-2:])
        log_odds = np.where(valid, total.reshape(valid.shape), -np.inf)
        beliefs = expit(log_odds)  # 0 where no variable (log-odds -inf)
        stacked = self.valid.ndim == 3
        messages = [f.split(m) if stacked else [m] for f, m in zip(self.families, self.packed, strict=True)]
        incoming = [f.gather_flat(total) - m for f, m in zip(self.families, self.packed, strict=True)]
        incoming_parts = [f.split(m) if stacked else [m] for f, m in zip(self.families, incoming, strict=True)]
        unpack = [f.unpack_part if stacked else f.unpack for f in self.families]
        out = []
        for j in range(len(valid)):
            out.append(BPResult(beliefs[j], log_odds[j], [u(m[j]) for u, m in zip(unpack, messages, strict=True)],
                                [u(m[j]) for u, m in zip(unpack, incoming_parts, strict=True)],
                                int(self.iterations[j]), bool(self.converged[j]), float(self.residual[j]),
                                self.tape, self.settled))
        return out


def run_stack(families: list[FactorFamily], valid: np.ndarray, config: BPConfig, packed: list[np.ndarray],
              settled: Iterable[int] = (), fresh: Iterable[int] = (),
              visits: list[list[tuple[int, np.ndarray, np.ndarray]]] | None = None) -> StackResult:
    """BP on a stack of sentences (``FactorFamily.stack``; ``valid`` (B, n+1, n+1), or one sentence's
    families and (n+1, n+1) mask) from the packed messages ``packed``, each sentence stopping on its own
    test; the stack shrinks to the sentences still running once half of it has stopped (the others'
    updates in between are wasted but change no result). ``fresh``: the families whose messages start
    at ``initial()``. A tape (``visits``, ``keep_tape``) needs a single sentence."""
    count = 1 if valid.ndim == 2 else len(valid)
    if count > 1 and (visits is not None or config.keep_tape):
        raise ValueError("a tape of BP's updates needs one sentence at a time (run_bp)")
    packed = list(packed)
    b = _beliefs(families, packed, valid.size)
    tape: list[list[Messages]] = []
    clips = [not f.message_bound() + 1.0 < config.clip for f in families]  # False: the clip would be a no-op
    repeats = Repeats(families, config, settled, [i for i in fresh if not clips[i]])
    plan = [[i for i in stage if _has_messages(families[i])] for stage in stages(len(families), config.schedule)]
    final: list[list[np.ndarray]] = [[] for _ in families]  # per family, each stopped sentence's messages
    order: list[int] = []  # the sentences in the order they stopped
    iterations, residuals = np.zeros(count, dtype=int), np.zeros(count)
    probability = expit(b)  # the beliefs b(L = 1), flat over the stack (0.5 off the variables)
    present = np.arange(count)  # the stack's sentences, as indices into the original stack
    running = np.ones(count, dtype=bool)  # per sentence of the stack: not yet stopped
    current = families
    for iteration in range(1, config.max_iterations + 1):
        for stage in plan:
            pending = repeats.pending(stage)
            if not pending:
                continue
            done = [_visit(current[i], b, packed[i], config, clips[i]) for i in pending]  # all read b
            changes = []
            for i, (_, _, new) in zip(pending, done, strict=True):
                delta = new - packed[i]
                changes.append(_change(delta) if i in repeats.constant else np.inf)  # only a constant one's counts
                b += current[i].scatter_flat(delta)
                packed[i] = new
            repeats.record(pending, changes)
            if visits is not None:
                visits.append([(i, incoming, raw) for i, (incoming, raw, _) in zip(pending, done, strict=True)])
        updated = expit(b)
        residual = np.maximum.reduce(np.abs(updated - probability).reshape(len(present), -1), axis=1)
        probability = updated
        if config.keep_tape:
            tape.append([f.unpack(m) for f, m in zip(current, packed, strict=True)])
        stop = running & ((residual < config.tolerance) | (iteration == config.max_iterations))
        if not stop.any():
            continue
        stopped = np.flatnonzero(stop)
        for i, (f, m) in enumerate(zip(current, packed, strict=True)):
            final[i].append(f.take(m, stopped) if len(present) > 1 else m.copy())
        order.extend(present[stopped].tolist())
        iterations[present[stopped]] = iteration
        residuals[present[stopped]] = residual[stopped]
        running &= ~stop
        if not running.any():
            break
        if 2 * running.sum() <= len(present):  # shrink the stack to the sentences still running
            keep = np.flatnonzero(running)
            packed = [f.take(m, keep) for f, m in zip(current, packed, strict=True)]
            current = [f.sentences(keep) for f in current]
            b = b.reshape(len(present), -1)[keep].reshape(-1)
            probability = probability.reshape(len(present), -1)[keep].reshape(-1)
            present, running = present[keep], running[keep]
    packed = [_in_order(f, parts, order) for f, parts in zip(families, final, strict=True)]
    return StackResult(families, valid, packed, iterations, residuals < config.tolerance, residuals,
                       frozenset(repeats.settled), tape)


def _has_messages(family: FactorFamily) -> bool:
    """False for a family without factors (an empty selection): its visits change nothing and are skipped
    (it keeps its place in the schedule, so the other families' order does not depend on it)."""
    return getattr(family, "size", 1) > 0


def _in_order(family: FactorFamily, parts: list[np.ndarray], order: list[int]) -> np.ndarray:
    """A family's packed messages of a whole stack from the parts of the sentences as they stopped (each
    part the messages of the sentences ``order`` lists, in turn)."""
    if len(order) == 1:
        return parts[0]
    joined = np.concatenate(parts, axis=-1)
    bounds = family.bounds
    assert bounds is not None
    sizes = np.diff(bounds)[order]
    starts = np.concatenate([[0], np.cumsum(sizes)])[np.argsort(order)]
    return np.concatenate([joined[..., a:a + sizes_j] for a, sizes_j in zip(starts, np.diff(bounds), strict=True)],
                          axis=-1)
