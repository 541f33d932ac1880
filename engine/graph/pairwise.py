"""Pairwise factors over two link variables (Smith & Eisner 2008 §3.2-3.3, Table 1).

A pairwise factor on ``(L_a, L_b)`` has potential ``exp(theta)`` when both are true and 1 otherwise;
``theta = -inf`` makes it the hard "not both" constraint. The families:

- GRAND(h, m, c): ``L[h, m]`` and ``L[m, c]`` (grandparent h, parent m, child c);
- SIB(h, m, s), m < s: ``L[h, m]`` and ``L[h, s]`` (two children of h, either side);
- NOT2(h, h', m), h < h': ``L[h, m]`` and ``L[h', m]`` (hard);
- NO2CYCLE(h, m), 0 < h < m: ``L[h, m]`` and ``L[m, h]`` (hard).

A family is a flat list of factors (index arrays of their two arcs), so a pruned arc set simply drops
factors. Message to ``L_a`` (log-odds), with ``r_b`` the incoming log-odds of ``L_b``:

    log [(odds_b e^theta + 1) / (odds_b + 1)] = softplus(r_b + theta) - softplus(r_b)

O(1) per factor, computed for the whole family at once. For finite weights BP evaluates it as

    softplus(r + theta) - softplus(r) = log1p(sigma(r) expm1(theta))                      (theta >= 0)
                                      = theta + log1p(sigma(-r) expm1(-theta))            (theta < 0)

(the second from ``1 + e^(r + theta) = e^theta (e^-theta + e^r)``): a log1p of a non-negative number,
so exact to rounding, with one sigmoid and one log1p per message where the two softplus terms take two
exponentials and two logarithms. ``expm1(|theta|)``, the sign and ``min(theta, 0)`` are computed once per
family, at its first update; weights of 700 or more (whose ``expm1`` would overflow) and the hard
``-inf`` keep the softplus form.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from engine.graph.family import FactorFamily, Messages, pad_arcs
from engine.kernels.logistic import expit

_LOG1P_LIMIT = 700.0  # |theta| below which expm1(|theta|) cannot overflow: the log1p message kernel
_STACK_LOOP = 8192  # stacks of at least this many factors offset each part's arc indices in a loop (``stack``)


def softplus(x: np.ndarray) -> np.ndarray:
    return np.logaddexp(0.0, x)


def sigmoid_difference(x: np.ndarray, theta: np.ndarray) -> np.ndarray:
    """``sigma(x + theta) - sigma(x)``, the derivative of a pairwise message ``softplus(x + theta) -
    softplus(x)`` with respect to ``x``, to full relative precision (the plain difference of two
    sigmoids near 1 keeps only its absolute precision). As a product of factors that are each exact,

        sign(theta) * sigma(x + max(theta, 0)) * sigma(-x - min(theta, 0)) * (1 - exp(-|theta|))

    which also gives ``-sigma(x)`` for ``theta = -inf`` (a hard "not both" factor)."""
    pos, neg = np.maximum(theta, 0.0), np.minimum(theta, 0.0)
    return np.sign(theta) * expit(x + pos) * expit(-x - neg) * -np.expm1(-np.abs(theta))


class PairFamily(FactorFamily):
    """Factors ``f`` on arcs ``(ah[f], am[f])`` and ``(bh[f], bm[f])`` with weights ``theta[f]``."""

    def __init__(self, n: int, valid: np.ndarray, arcs: np.ndarray, theta: np.ndarray, name: str) -> None:
        super().__init__(n, valid)
        self.name = name
        self.theta = theta
        self._size = (n + 1) ** 2
        ah, am, bh, bm = arcs  # each (F,)
        self._index(ah * (n + 1) + am, bh * (n + 1) + bm)

    @property
    def theta(self) -> np.ndarray:
        """The weights (F,), read-only: assign a new array to change them (the message kernel's constants
        are derived from them on assignment)."""
        return self._theta

    @theta.setter
    def theta(self, value: np.ndarray) -> None:
        theta = np.array(value, dtype=np.float64)  # a copy, so that the caller's array stays writable
        theta.flags.writeable = False
        self._theta = theta
        self._bound = float(np.abs(theta).max(initial=0.0))
        self._constants: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None

    def _kernel(self) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """The log1p kernel's constants ``(expm1|theta|, sign, min(theta, 0))``, computed on first use; None
        where a weight is 700 or more, or -inf (the softplus form)."""
        if self._constants is None and self._bound < _LOG1P_LIMIT:
            theta = self._theta
            self._constants = (np.expm1(np.abs(theta)), np.where(theta < 0.0, -1.0, 1.0), np.minimum(theta, 0.0))
        return self._constants

    def _index(self, a: np.ndarray, b: np.ndarray) -> None:
        """Flat arc indices of both slots (F,) each."""
        self._joined(np.concatenate([a, b]))

    def _joined(self, ab: np.ndarray) -> None:
        """Flat arc indices of both slots concatenated, ``_ab`` (2F,), and of each slot (views): packed
        messages are the rows ``[to_a, to_b]`` of one (2, F) array (``pack``), so one gather, one kernel
        call and one scatter serve both slots."""
        self._ab = ab
        half = len(ab) // 2
        self._a, self._b = ab[:half], ab[half:]
        self._rows = ab.reshape(2, -1)  # packed layout: row 0 slot a, row 1 slot b

    stackable = True

    @classmethod
    def stack(cls, parts: Sequence[FactorFamily]) -> FactorFamily:
        """The factors of several sentences' families side by side, arc indices offset by sentence
        (``FactorFamily.stack``); O(F)."""
        if len(parts) == 1:
            return parts[0]
        fams: list[PairFamily] = list(parts)  # type: ignore[arg-type]
        out = object.__new__(cls)
        FactorFamily.__init__(out, fams[0].n, np.stack([f.valid for f in fams]))
        out.name = fams[0].name
        out._theta = np.concatenate([f.theta for f in fams])
        out._bound = max(f._bound for f in fams)
        out._constants = None
        size = fams[0]._size
        out._size = size * len(fams)
        sizes = np.array([f.size for f in fams])
        bounds = np.concatenate([[0], np.cumsum(sizes)])
        total = int(bounds[-1])
        if total < _STACK_LOOP:  # few factors: a few calls for all parts
            ab = np.concatenate([f._a for f in fams] + [f._b for f in fams])
            offsets = np.repeat(np.arange(len(fams)) * size, sizes)
            ab += np.concatenate([offsets, offsets])
        else:  # each part's indices written once, offset on the way (no O(F) temporaries): 6x faster at 30 words
            ab = np.empty(2 * total, dtype=np.result_type(*(f._ab for f in fams)))
            for j, f in enumerate(fams):
                start, end = int(bounds[j]), int(bounds[j + 1])
                np.add(f._a, j * size, out=ab[start:end])
                np.add(f._b, j * size, out=ab[total + start:total + end])
        out._joined(ab)
        out.bounds = bounds
        return out

    def widened(self, size: int) -> PairFamily:
        """The same factors in a sentence of ``size`` >= n words (the flat arc indices of the larger grid; words
        past n have no arc), to stack with longer sentences (``engine.inference.joint_bp``). O(F)."""
        if size == self.n:
            return self
        if size < self.n or self.bounds is not None:
            raise ValueError("only one sentence's family can be widened, to at least its own length")
        out = object.__new__(PairFamily)
        FactorFamily.__init__(out, size, pad_arcs(self.valid, size))
        out.name, out._theta, out._bound, out._constants = self.name, self._theta, self._bound, self._constants
        out._size = (size + 1) ** 2
        out._index(self.ah * (size + 1) + self.am, self.bh * (size + 1) + self.bm)
        return out

    def sentences(self, keep: np.ndarray) -> FactorFamily:
        """The factors of the stack's sentences ``keep`` (ascending), arc indices shifted to their new
        places in the stack; O(F)."""
        if self.bounds is None:
            return super().sentences(keep)
        counts = np.diff(self.bounds)
        index = np.concatenate([np.arange(self.bounds[j], self.bounds[j + 1]) for j in keep]) if len(keep) else \
            np.zeros(0, dtype=np.intp)
        out = self.select(index)
        shift = np.repeat((np.asarray(keep) - np.arange(len(keep))) * ((self.n + 1) ** 2), counts[keep])
        out._index(out._a - shift, out._b - shift)
        out._size = len(keep) * (self.n + 1) ** 2
        out.valid = self.valid[keep]
        out.bounds = np.concatenate([[0], np.cumsum(counts[keep])])
        return out

    def unpack_part(self, part: np.ndarray) -> Messages:
        return part[0], part[1]

    @property
    def ah(self) -> np.ndarray:
        """Head of each factor's first arc (so ``am``, ``bh``, ``bm``: its dependent, the second arc's)."""
        return self._a // (self.n + 1)

    @property
    def am(self) -> np.ndarray:
        return self._a % (self.n + 1)

    @property
    def bh(self) -> np.ndarray:
        return self._b // (self.n + 1)

    @property
    def bm(self) -> np.ndarray:
        return self._b % (self.n + 1)

    @property
    def size(self) -> int:
        return len(self.theta)

    def select(self, index: np.ndarray) -> PairFamily:
        """The factors ``index`` (ascending integer indices, or a boolean mask over the F factors) as a
        family of their own, in the same order; the flat arc indices are sliced, not recomputed.
        O(|index|). Relaxed inference (Riedel & Smith 2010 §4.2) builds its sub-graphs this way; a
        selection from a stack is a stack of the same sentences."""
        sub = object.__new__(PairFamily)
        FactorFamily.__init__(sub, self.n, self.valid)
        sub.name = self.name
        sub._theta = self.theta[index]
        sub._bound = self._bound
        sub._constants = None if self._constants is None else tuple(c[index] for c in self._constants)  # type: ignore
        sub._size = self._size
        sub._index(self._a[index], self._b[index])
        if self.bounds is not None:
            positions = np.flatnonzero(index) if np.asarray(index).dtype == bool else np.asarray(index)
            sub.valid, sub.bounds = self.valid, np.searchsorted(positions, self.bounds)
        return sub

    def message_bound(self) -> float:
        """``softplus(r + theta) - softplus(r)`` lies between 0 and theta, so no message exceeds the largest
        |theta| (inf for a hard factor); rounding can add a few ulp of the incoming log-odds. A selection
        or a stack keeps the bound of the weights it came from (still a bound)."""
        return self._bound

    def gather(self, arc: np.ndarray) -> Messages:
        flat = arc.reshape(-1)
        return flat[self._a], flat[self._b]

    def scatter(self, messages: Messages) -> np.ndarray:
        return self.scatter_flat(self.pack(messages)).reshape(self.n + 1, self.n + 1)

    def propagate(self, incoming: Messages) -> Messages:
        return self.unpack(self.propagate_flat(self.pack(incoming)))

    def initial(self) -> Messages:
        return self.unpack(self.initial_packed())

    def initial_packed(self) -> np.ndarray:
        return np.zeros((2, self.size))

    def pack(self, messages: Messages) -> np.ndarray:
        return np.stack(messages)

    def unpack(self, flat: np.ndarray) -> Messages:
        return flat[0], flat[1]

    def gather_flat(self, beliefs: np.ndarray) -> np.ndarray:
        return beliefs.take(self._rows)

    def scatter_flat(self, flat: np.ndarray) -> np.ndarray:
        return np.bincount(self._ab, weights=flat.reshape(-1), minlength=self._size)

    def propagate_flat(self, incoming: np.ndarray) -> np.ndarray:
        """Packed rows ``[r_a, r_b]`` -> ``[to_a, to_b]``: the message to each link is the kernel of the
        other link's incoming log-odds, ``to_a = softplus(r_b + theta) - softplus(r_b)``, so the kernel runs
        once over both (swapped) rows. Finite weights take the log1p form of the module docstring, in place
        on one new array; others the softplus difference."""
        constants = self._kernel()
        if constants is None:
            return (softplus(incoming + self.theta) - softplus(incoming))[::-1].copy()
        expm1, sign, floor = constants
        out = incoming[::-1] * sign  # the other link's log-odds, negated where theta < 0
        expit(out, out=out)
        out *= expm1
        np.log1p(out, out=out)
        out += floor
        return out

    def vjp(self, incoming: Messages, grad_out: Messages) -> tuple[Messages, np.ndarray | None]:
        """Adjoint of ``propagate``: ``d to_a / d r_b = sigma(r_b + theta) - sigma(r_b)`` and
        ``d to_a / d theta = sigma(r_b + theta)`` (and symmetrically for ``to_b``). O(1) per factor."""
        ra, rb = incoming
        ga, gb = grad_out
        grad_theta = ga * expit(rb + self.theta) + gb * expit(ra + self.theta)
        return (gb * sigmoid_difference(ra, self.theta), ga * sigmoid_difference(rb, self.theta)), grad_theta

    def both_true(self, incoming: Messages) -> np.ndarray:
        """Factor beliefs ``b_f(L_a = L_b = true)`` (expected feature counts, §7 eq. 10)."""
        ra, rb = incoming
        both = ra + rb + self.theta
        log_z = np.logaddexp(np.logaddexp(0.0, ra), np.logaddexp(rb, both))
        return np.exp(both - log_z)

    def log_potential(self, y: np.ndarray) -> float:
        flat = y.reshape(-1)
        on = flat[self._a] & flat[self._b]
        if not on.any():
            return 0.0
        return float(self.theta[on].sum())


def _pairs(valid: np.ndarray, a: tuple[np.ndarray, np.ndarray], b: tuple[np.ndarray, np.ndarray],
           keep: np.ndarray) -> np.ndarray:
    keep = keep & valid[a] & valid[b]
    return np.stack([a[0][keep], a[1][keep], b[0][keep], b[1][keep]])


def _grid(n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return np.meshgrid(np.arange(n + 1), np.arange(n + 1), np.arange(n + 1), indexing="ij")


def _kept_arcs(valid: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The kept arcs ``(h, m)`` in lexicographic order and, per head, where its arcs start in that list
    ((n+2,): head h's arcs are ``starts[h]:starts[h + 1]``)."""
    h, m = np.nonzero(valid)
    starts = np.zeros(valid.shape[0] + 1, dtype=np.int64)
    np.cumsum(valid.sum(axis=1), out=starts[1:])
    return h, m, starts


def _expand(counts: np.ndarray, begin: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For items with ``counts[i]`` partners at list positions ``begin[i], begin[i] + 1, ...``: the item of
    every (item, partner) pair and the partner's position, items in order."""
    item = np.repeat(np.arange(len(counts)), counts)
    offset = np.arange(len(item)) - np.repeat(np.cumsum(counts) - counts, counts)
    return item, begin[item] + offset


def grand_arcs(n: int, valid: np.ndarray) -> np.ndarray:
    """Arcs of every GRAND(h, m, c): ``(h, m)`` and ``(m, c)``, c != h, both kept; shape (4, F), ordered by
    (h, m, c). Built from the kept arcs (O(F), not a sweep of all (n+1)^3 triples)."""
    heads, kids, starts = _kept_arcs(valid)
    inner = kids > 0
    h, m = heads[inner], kids[inner]
    first, at = _expand(starts[m + 1] - starts[m], starts[m])
    c = kids[at]
    keep = c != h[first]
    return np.stack([h[first][keep], m[first][keep], m[first][keep], c[keep]])


def sib_arcs(n: int, valid: np.ndarray) -> np.ndarray:
    """Arcs of every SIB(h, m, s), m < s: ``(h, m)`` and ``(h, s)``, both kept; shape (4, F), ordered by
    (h, m, s). Built from the kept arcs (O(F))."""
    h, m, starts = _kept_arcs(valid)
    position = np.arange(len(h))
    first, at = _expand(starts[h + 1] - position - 1, position + 1)
    return np.stack([h[first], m[first], h[first], m[at]])


def not2_arcs(n: int, valid: np.ndarray) -> np.ndarray:
    """Arcs of every NOT2(h, h', m), h < h': ``(h, m)`` and ``(h', m)``. Shape (4, F)."""
    h, h2, m = _grid(n)
    return _pairs(valid, (h, m), (h2, m), h < h2)


def no2cycle_arcs(n: int, valid: np.ndarray) -> np.ndarray:
    """Arcs of every NO2CYCLE(h, m), 0 < h < m: ``(h, m)`` and ``(m, h)``. Shape (4, F)."""
    h, m = np.meshgrid(np.arange(n + 1), np.arange(n + 1), indexing="ij")
    return _pairs(valid, (h, m), (m, h), (h > 0) & (h < m))


def hard_pairs(n: int, valid: np.ndarray, arcs: np.ndarray, name: str) -> PairFamily:
    """A family of "not both" constraints (theta = -inf)."""
    return PairFamily(n, valid, arcs, np.full(arcs.shape[1], -np.inf), name)
