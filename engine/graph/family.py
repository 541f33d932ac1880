"""The factor-family interface shared by every factor of the BP parser.

Messages are log-odds. A family with ``slots`` neighbour positions per factor exchanges, per slot,
one array of messages; ``gather`` reads a per-arc array (shape (n+1, n+1)) into the family's slot
arrays and ``scatter`` sums slot arrays back onto arcs. BP needs nothing else from a family:

    incoming_k = gather(arc beliefs)_k - outgoing_k        (variable-to-factor, Smith & Eisner eq. 3)
    outgoing'  = propagate(incoming)                       (factor-to-variable, eq. 4)
    beliefs    = sum over families of scatter(outgoing)     (eq. 5, in log-odds)

``log_potential`` scores a full assignment (a boolean arc matrix), for brute-force tests.

BP's inner loop works on *packed* messages, one array per family (``pack`` / ``unpack``), with
``gather_flat`` / ``propagate_flat`` / ``scatter_flat`` on a flat (n+1)^2 belief vector: the same
arithmetic as the per-slot methods, which a family may override to take fewer numpy calls per update
(at short sentence lengths numpy's per-call overhead, not the arithmetic, dominates an update).

**Stacks.** A ``stackable`` family class can join the families of several sentences of one length into
one family over all their arcs (``stack``): arc ``(j, h, m)`` of sentence ``j`` is flat index
``j (n+1)^2 + h (n+1) + m``, the factors are the parts' factors side by side, and so are the packed
messages (along their last axis, ``bounds``). BP on a stack (``engine.inference.bp.run_bp_many``) is BP
on each sentence, with every update one set of array operations for all of them: what a short sentence
costs is mostly numpy's per-call overhead, which a stack pays once.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import ClassVar

import numpy as np

Messages = tuple[np.ndarray, ...]


class FactorFamily(ABC):
    """A vectorised family of factors over link variables of one sentence of ``n`` words."""

    name: str = "factor"
    # True when propagate ignores its input and ``initial()`` already returns its output (LINK): BP does
    # not update it at all, unless its messages start elsewhere or need the clip (bp.Repeats)
    constant: bool = False
    stackable: ClassVar[bool] = False  # True where ``stack`` is implemented

    def __init__(self, n: int, valid: np.ndarray) -> None:
        self.n = n
        self.valid = valid  # (n+1, n+1) bool: arcs that exist as variables; (B, n+1, n+1) for a stack
        self.bounds: np.ndarray | None = None  # a stack's part j: packed messages [..., bounds[j]:bounds[j+1]]

    # -- stacks of sentences (engine.inference.bp.run_bp_many) -----------------------------------------
    @classmethod
    def stack(cls, parts: Sequence[FactorFamily]) -> FactorFamily:
        """One family over the arcs of the sentences of ``parts`` (families of this class, one per
        sentence, all of the same length), block-diagonal: see the module docstring. One part is itself."""
        if len(parts) == 1:
            return parts[0]
        raise NotImplementedError(f"the {cls.__name__} factor family cannot be stacked")

    @property
    def count(self) -> int:
        """Sentences in the family: 1, or the stack's size."""
        return 1 if self.bounds is None else len(self.bounds) - 1

    def sentences(self, keep: np.ndarray) -> FactorFamily:
        """The stack of the sentences ``keep`` (ascending indices) of this stack."""
        if self.bounds is None and list(keep) == [0]:
            return self
        raise NotImplementedError(f"the {type(self).__name__} factor family cannot be stacked")

    def split(self, packed: np.ndarray) -> list[np.ndarray]:
        """A stack's packed messages as one array per sentence (copies)."""
        if self.bounds is None:
            return [packed.copy()]
        b = self.bounds.tolist()
        return [packed[..., b[j]:b[j + 1]].copy() for j in range(len(b) - 1)]

    def take(self, packed: np.ndarray, keep: np.ndarray) -> np.ndarray:
        """The packed messages of the stack's sentences ``keep`` (ascending indices), for the stack of
        those sentences (``sentences``)."""
        if self.bounds is None:
            return packed
        b = self.bounds
        return np.concatenate([packed[..., b[j]:b[j + 1]] for j in keep], axis=-1)

    def unpack_part(self, part: np.ndarray) -> Messages:
        """One sentence's messages (``unpack`` of its own family) from its part of a stack's packed
        messages (``split``)."""
        return self.unpack(part)

    @abstractmethod
    def gather(self, arc: np.ndarray) -> Messages:
        """Per-slot views of a per-arc array."""

    @abstractmethod
    def scatter(self, messages: Messages) -> np.ndarray:
        """Sum of the family's messages onto each arc, (n+1, n+1)."""

    @abstractmethod
    def propagate(self, incoming: Messages) -> Messages:
        """Outgoing log-odds messages from incoming ones (pure function)."""

    @abstractmethod
    def log_potential(self, y: np.ndarray) -> float:
        """Log of the product of the family's factors on a boolean arc assignment (-inf if violated)."""

    def message_bound(self) -> float:
        """An upper bound on |outgoing message log-odds| whatever comes in (inf: none); BP skips the clip
        of a family whose bound is well inside it (``BPConfig.clip``)."""
        return np.inf

    def initial(self) -> Messages:
        """Messages before the first update (uninformative: log-odds 0)."""
        return tuple(np.zeros_like(g) for g in self.gather(np.zeros((self.n + 1, self.n + 1))))

    # -- packed messages, for BP's inner loop (engine.inference.bp.run_bp) -----------------------------
    def initial_packed(self) -> np.ndarray:
        """``pack(initial())``."""
        return self.pack(self.initial())

    def pack(self, messages: Messages) -> np.ndarray:
        """The slot arrays as one array (here a flat vector, the slots concatenated in order)."""
        return np.concatenate([m.reshape(-1) for m in messages])

    def unpack(self, flat: np.ndarray) -> Messages:
        """The slot arrays of a packed array (views into ``flat``); inverse of ``pack``."""
        shapes = [g.shape for g in self.gather(np.zeros((self.n + 1, self.n + 1)))]
        ends = np.cumsum([int(np.prod(s)) for s in shapes])
        return tuple(part.reshape(s) for part, s in zip(np.split(flat, ends[:-1]), shapes, strict=True))

    def gather_flat(self, beliefs: np.ndarray) -> np.ndarray:
        """``pack(gather(.))`` of a flat (n+1)^2 per-arc vector."""
        return self.pack(self.gather(beliefs.reshape(self.n + 1, self.n + 1)))

    def propagate_flat(self, incoming: np.ndarray) -> np.ndarray:
        """``propagate`` on packed messages."""
        return self.pack(self.propagate(self.unpack(incoming)))

    def scatter_flat(self, flat: np.ndarray) -> np.ndarray:
        """``scatter`` of packed messages, as a flat (n+1)^2 vector."""
        return self.scatter(self.unpack(flat)).reshape(-1)

    # -- adjoints, for reverse-mode differentiation through BP (engine.inference.bp_backward) ----------
    def vjp(self, incoming: Messages, grad_out: Messages) -> tuple[Messages, np.ndarray | None]:
        """Adjoint of ``propagate``: given ``grad_out`` = d objective / d outgoing messages, return
        (d objective / d incoming messages, d objective / d the family's parameters ``theta`` or None).
        A family without an adjoint cannot be trained through BP."""
        raise NotImplementedError(f"the {self.name} factor family has no adjoint (vjp) yet, so BP through "
                                  "it cannot be differentiated")

    def initial_vjp(self, grad: Messages) -> np.ndarray | None:
        """d objective / d ``theta`` through the initial messages (None: they do not depend on it)."""
        return None


class ArcFamily(FactorFamily):
    """A family with one message per arc (LINK, TREE, PTREE, EXACTLY1, ATMOST1, CHILDSEQ).

    ``propagate`` and ``initial`` return 0 on the arcs that are not variables (``valid`` False), and
    ``pack`` masks other starting messages the same way, so packed messages are 0 there and
    ``scatter_flat`` is the identity.
    """

    def gather(self, arc: np.ndarray) -> Messages:
        return (arc,)

    def scatter(self, messages: Messages) -> np.ndarray:
        return np.where(self.valid, messages[0], 0.0)

    def initial(self) -> Messages:
        return (np.zeros(self.valid.shape),)

    def initial_packed(self) -> np.ndarray:
        return self.initial()[0].reshape(-1)  # 0 off valid already, as every ArcFamily's initial() is

    def pack(self, messages: Messages) -> np.ndarray:
        return np.where(self.valid, messages[0], 0.0).reshape(-1)

    def unpack(self, flat: np.ndarray) -> Messages:
        return (flat.reshape(self.valid.shape),)

    def _stacked(self, n: int, valid: np.ndarray) -> None:
        """Stack bookkeeping of an arc family over the sentences of ``valid`` (B, n+1, n+1): the bounds of
        each sentence's (n+1)^2 messages."""
        FactorFamily.__init__(self, n, valid)
        self.bounds = np.arange(len(valid) + 1) * (n + 1) ** 2

    def unpack_part(self, part: np.ndarray) -> Messages:
        return (part.reshape(self.n + 1, self.n + 1),)

    def gather_flat(self, beliefs: np.ndarray) -> np.ndarray:
        return beliefs

    def propagate_flat(self, incoming: np.ndarray) -> np.ndarray:
        return self.propagate(self.unpack(incoming))[0].reshape(-1)

    def scatter_flat(self, flat: np.ndarray) -> np.ndarray:
        return flat


def pad_arcs(valid: np.ndarray, size: int) -> np.ndarray:
    """An (n+1, n+1) arc mask as (size+1, size+1): words n+1..size have no arc."""
    out = np.zeros((size + 1, size + 1), dtype=bool)
    out[:valid.shape[0], :valid.shape[1]] = valid
    return out


def all_arcs(n: int) -> np.ndarray:
    """(n+1, n+1) mask of every possible arc h -> m: no arc into ROOT, no self loop."""
    valid = np.ones((n + 1, n + 1), dtype=bool)
    valid[:, 0] = False
    np.fill_diagonal(valid, False)
    return valid


def exclusive_logsumexp(x: np.ndarray, axis: int) -> np.ndarray:
    """``out[i] = log sum_{j != i} exp(x[j])`` along ``axis``, without subtraction (prefix/suffix sums)."""
    x = np.moveaxis(x, axis, 0)
    neg = np.full((1, *x.shape[1:]), -np.inf)
    prefix = np.concatenate([neg, np.logaddexp.accumulate(x, axis=0)[:-1]])
    suffix = np.concatenate([np.logaddexp.accumulate(x[::-1], axis=0)[::-1][1:], neg])
    return np.moveaxis(np.logaddexp(prefix, suffix), 0, axis)
