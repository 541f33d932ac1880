"""Factors over tag variables (Smith & Eisner 2008 §3.3-3.4, Table 1): TAG, CHAIN and TAGLINK.

Joint tagging and parsing adds a variable ``T_i`` per word ranging over a small candidate set of tags (the
tagger's most probable (UPOS, XPOS) states, ``engine.text.tag_candidates``): slot ``c`` of word ``i`` is its
``c``-th candidate, and words with fewer candidates than the sentence's widest have padding slots, which
no factor allows (``allowed`` False). Row 0 stands for ROOT: one slot, always allowed, never a variable.
The factors, besides TREE and the higher-order link factors of ``engine.graph``:

- TAG_i (unary): ``exp(E[i, t])``, the tagger's emission potential of candidate ``t`` (its message is ``E``);
- CHAIN (global, over ``T_1..T_n``): ``exp(start[t_1] + sum_i A_i[t_i, t_i+1] + end[t_n])``, the tagger's
  first-order transitions restricted to the candidate sets (``A_i`` (g, g) per position). Propagated by
  forward-backward: the message to ``T_i`` is the sum over every other tag of the factor times the other
  incoming messages, O(n g^2) (``TagChain``);
- TAGLINK_hm (ternary over ``(L_hm, T_h, T_m)``): potential ``exp(theta[h, m, t_h, t_m])`` when ``L_hm``
  is true and 1 when false; ``theta`` is the parser's first-order score of the arc under tags ``(t_h,
  t_m)``. For an arc from ROOT only the dependent's tag varies. Its propagator (``TagLink``) sends, from
  incoming link log-odds ``r`` and tag log-messages ``u`` (head) and ``v`` (dependent), vectorised over
  the kept arcs in O(A g^2) (Smith & Eisner eq. 4, each sum over the factor's other variables):

      to L:    log sum_{a,b} exp(theta[a, b] + u[a] + v[b]) - log sum_{a,b} exp(u[a] + v[b])   (log-odds)
      to T_h:  out[a] = log sum_b exp(v[b]) (1 + exp(r + theta[a, b]))
      to T_m:  out[b] = log sum_a exp(u[a]) (1 + exp(r + theta[a, b]))

Messages to tag variables are log-potentials normalised to log sum exp = 0 over the allowed slots and
stored as 0 on padding slots; the tag *beliefs* carry ``-inf`` there (through ``E``), so that
``belief - message`` is ``-inf`` on padding and finite elsewhere. Messages to link variables are log-odds,
as every family of ``engine.graph.family`` sends. BP over links and tags together is
``engine.inference.joint_bp``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numba import njit  # type: ignore[import-untyped]

from engine.text.tag_candidates import TagCandidates


def normalised(log_values: np.ndarray, allowed: np.ndarray) -> np.ndarray:
    """``log_values`` minus their log-sum-exp over the ``allowed`` slots of the last axis; 0 on the others."""
    masked = np.where(allowed, log_values, -np.inf)
    top = masked.max(axis=-1, keepdims=True)
    top = np.where(np.isfinite(top), top, 0.0)
    total = np.log(np.exp(masked - top).sum(axis=-1, keepdims=True)) + top
    return np.where(allowed, masked - total, 0.0)


class TagLink:
    """TAGLINK factors of the kept arcs ``(heads[j], deps[j])`` with log-potentials ``theta`` (A, g, g) of
    ``L = 1`` per candidate slot pair (``-inf`` where a slot is not allowed); ``allowed`` (n+1, g), row 0 ROOT."""

    name = "taglink"

    def __init__(self, n: int, heads: np.ndarray, deps: np.ndarray, theta: np.ndarray, allowed: np.ndarray) -> None:
        if theta.shape != (len(heads), allowed.shape[1], allowed.shape[1]) or allowed.shape[0] != n + 1:
            raise ValueError("theta must be (arcs, g, g) and allowed (n+1, g)")
        self.n, self.heads, self.deps, self.allowed = n, np.asarray(heads), np.asarray(deps), allowed
        pair = allowed[self.heads][:, :, None] & allowed[self.deps][:, None, :]
        self.theta = np.where(pair, theta, -np.inf)
        self.flat = self.heads * (n + 1) + self.deps  # the arcs' indices in a flat (n+1)^2 per-arc array
        # arcs with a word of several candidates; on the others (both words one slot) the messages are constant:
        # theta[0, 0] to the link and 0 to the tags, whatever comes in
        self.varying = np.flatnonzero(pair.reshape(len(pair), -1).sum(axis=1) > 1)
        self.bounds: np.ndarray | None = None  # a stack's sentence j: arcs bounds[j]:bounds[j+1] (``stack``)

    @classmethod
    def stack(cls, parts: Sequence[TagLink]) -> TagLink:
        """The TAGLINK factors of several sentences of one length as one (``engine.inference.joint_bp``'s
        stacks): tag rows ``j (n+1) + i`` and flat arcs ``j (n+1)^2 + h (n+1) + m`` for sentence ``j``, every
        sentence's slots padded to the widest sentence's ``g`` with slots no factor allows (``-inf`` potentials:
        the padded sums add exact zeros, so each sentence's messages are its own). One part is itself."""
        if len(parts) == 1:
            return parts[0]
        n, g = parts[0].n, max(p.allowed.shape[1] for p in parts)
        if any(p.n != n or p.bounds is not None for p in parts):
            raise ValueError("a stack of TAGLINK factors needs unstacked sentences of one length")
        rows, arcs = n + 1, np.cumsum([0] + [p.size for p in parts])
        out = cls.__new__(cls)
        out.n, out.bounds = n, arcs
        out.heads = np.concatenate([p.heads + j * rows for j, p in enumerate(parts)])
        out.deps = np.concatenate([p.deps + j * rows for j, p in enumerate(parts)])
        out.flat = np.concatenate([p.flat + j * rows * rows for j, p in enumerate(parts)])
        out.varying = np.concatenate([p.varying + arcs[j] for j, p in enumerate(parts)])
        out.allowed = np.concatenate([pad_slots(p.allowed, g, False) for p in parts])
        out.theta = np.concatenate([pad_slots(pad_slots(p.theta, g, -np.inf).swapaxes(1, 2), g, -np.inf).swapaxes(1, 2)
                                    for p in parts])
        return out

    def widened(self, size: int) -> TagLink:
        """The same factors in a sentence of ``size`` >= n words (``engine.inference.joint_bp``'s stacks of
        several lengths): flat arcs of the larger grid; words past n are tag rows with slot 0 only, as ROOT."""
        if size == self.n:
            return self
        if size < self.n or self.bounds is not None:
            raise ValueError("only one sentence's TAGLINK factors can be widened, to at least its own length")
        out = TagLink.__new__(TagLink)
        out.n, out.heads, out.deps, out.theta, out.varying, out.bounds = (
            size, self.heads, self.deps, self.theta, self.varying, None)
        out.flat = self.heads * (size + 1) + self.deps
        out.allowed = pad_rows(self.allowed, size + 1)
        return out

    @property
    def size(self) -> int:
        return len(self.heads)

    def propagate(self, link_in: np.ndarray, head_in: np.ndarray, dep_in: np.ndarray
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Outgoing (to links (A,) log-odds, to head tags (A, g), to dependent tags (A, g)) from the incoming
        link log-odds ``link_in`` (A,) and tag log-messages ``head_in``, ``dep_in`` (A, g; ``-inf`` on
        padding). The module docstring's formulas, computed on the ``varying`` arcs only."""
        to_link, to_head, to_dep = self.theta[:, 0, 0].copy(), np.zeros(head_in.shape), np.zeros(dep_in.shape)
        k = self.varying
        if len(k):
            to_link[k], to_head[k], to_dep[k] = self._propagate(k, link_in[k], head_in[k], dep_in[k])
        return to_link, to_head, to_dep

    def _propagate(self, k: np.ndarray, link_in: np.ndarray, head_in: np.ndarray, dep_in: np.ndarray
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``propagate`` on the arcs ``k`` (``_taglink_kernel``: numpy's per-call overhead on (A, 3, 3) arrays
        cost more than the arithmetic)."""
        g = self.allowed.shape[1]
        to_link, to_head, to_dep = np.empty(len(k)), np.zeros((len(k), g)), np.zeros((len(k), g))
        r, u, v = (np.ascontiguousarray(x, dtype=np.float64) for x in (link_in, head_in, dep_in))
        _taglink_kernel(np.ascontiguousarray(self.theta[k]), self.allowed[self.heads[k]], self.allowed[self.deps[k]],
                        r, u, v, to_link, to_head, to_dep)
        return to_link, to_head, to_dep

    def on_beliefs(self, link_in: np.ndarray, head_in: np.ndarray, dep_in: np.ndarray,
                   arcs: slice = slice(None)) -> np.ndarray:
        """The factor beliefs b(L = 1, T_h = a, T_m = b) (A, g, g) from the same incoming messages as
        ``propagate`` (Smith & Eisner 2008 eq. 6: the factor times every incoming message, normalised over the
        factor's configurations): ``exp(theta[a, b] + r + u[a] + v[b]) / Z``, with ``Z`` adding the ``L = 0``
        configurations ``exp(u[a] + v[b])``; 0 on pairs that are not candidates. Summed over (a, b) it is the
        factor's belief that the link is on; surrogate CLL (``engine.training.joint``) reads it as the expected
        count of each candidate pair's arc features. ``arcs``: those of the factors only (the incoming messages
        are theirs)."""
        theta, heads, deps = self.theta[arcs], self.heads[arcs], self.deps[arcs]
        pair = np.isfinite(theta)
        u = np.where(self.allowed[heads], head_in, -np.inf)[:, :, None]
        v = np.where(self.allowed[deps], dep_in, -np.inf)[:, None, :]
        off = np.where(pair, u + v, -np.inf)
        on = np.where(pair, theta + np.asarray(link_in, dtype=np.float64)[:, None, None] + off, -np.inf)
        top = np.maximum(on.max(axis=(1, 2)), off.max(axis=(1, 2)))[:, None, None]
        top = np.where(np.isfinite(top), top, 0.0)
        p_on, p_off = np.exp(on - top), np.exp(off - top)
        total = p_on.sum(axis=(1, 2)) + p_off.sum(axis=(1, 2))
        return p_on / np.maximum(total, 1e-300)[:, None, None]

    def log_potential(self, arcs: np.ndarray, slots: np.ndarray) -> float:
        """Log of the product of the factors on a boolean arc assignment ``arcs`` (n+1, n+1) and a slot per
        word ``slots`` (n+1,; slot 0 for ROOT): the sum of ``theta`` over the kept arcs that are on. One
        sentence's factors only, not a stack's."""
        if self.bounds is not None:
            raise ValueError("log_potential is of one sentence's TAGLINK factors, not a stack's")
        on = arcs[self.heads, self.deps]
        return float(self.theta[on, slots[self.heads[on]], slots[self.deps[on]]].sum())


@njit(cache=True, nogil=True, inline="always")
def _log_add(a: float, b: float) -> float:
    """``log(exp(a) + exp(b))``, ``-inf`` when both are."""
    top = max(a, b)
    if top == -np.inf:
        return -np.inf
    return top + np.log1p(np.exp(min(a, b) - top))


@njit(cache=True, nogil=True)
def _normalise_row(values: np.ndarray, ok: np.ndarray, out: np.ndarray) -> None:
    """``out`` = ``values`` minus their log-sum-exp over the ``ok`` slots, ``-inf`` on the others."""
    total = -np.inf
    for a in range(len(values)):
        if ok[a]:
            total = _log_add(total, values[a])
    for a in range(len(values)):
        out[a] = values[a] - total if ok[a] else -np.inf


@njit(cache=True, nogil=True)
def _taglink_kernel(theta: np.ndarray, h_ok: np.ndarray, d_ok: np.ndarray, link_in: np.ndarray, head_in: np.ndarray,
                    dep_in: np.ndarray, to_link: np.ndarray, to_head: np.ndarray, to_dep: np.ndarray) -> None:
    """TAGLINK's messages (the module docstring's formulas) arc by arc: ``to_link[j]`` log-odds, ``to_head[j]``
    and ``to_dep[j]`` normalised over the allowed slots (0 on the others)."""
    g = theta.shape[1]
    u, v = np.empty(g), np.empty(g)
    head, dep = np.empty(g), np.empty(g)
    for j in range(theta.shape[0]):
        _normalise_row(head_in[j], h_ok[j], u)
        _normalise_row(dep_in[j], d_ok[j], v)
        on_sum = -np.inf
        head[:] = -np.inf
        dep[:] = -np.inf
        for a in range(g):
            for b in range(g):
                if not (h_ok[j, a] and d_ok[j, b]):
                    continue
                on_sum = _log_add(on_sum, theta[j, a, b] + u[a] + v[b])
                either = _log_add(0.0, link_in[j] + theta[j, a, b])  # log(1 + exp(r + theta))
                head[a] = _log_add(head[a], either + v[b])
                dep[b] = _log_add(dep[b], either + u[a])
        to_link[j] = on_sum  # the L = 0 sum is 1: u and v are normalised
        _normalise_row(head, h_ok[j], u)
        _normalise_row(dep, d_ok[j], v)
        for a in range(g):
            to_head[j, a] = u[a] if h_ok[j, a] else 0.0
            to_dep[j, a] = v[a] if d_ok[j, a] else 0.0


@njit(cache=True, nogil=True)
def _lse(x: np.ndarray) -> float:
    top = x.max()
    if top == -np.inf:
        return -np.inf
    return top + np.log(np.exp(x - top).sum())


@njit(cache=True, nogil=True)
def chain_tables(incoming: np.ndarray, transitions: np.ndarray, start: np.ndarray, end: np.ndarray,
                 forward: np.ndarray, alpha: np.ndarray, beta: np.ndarray) -> None:
    """Forward-backward in log space (Lafferty et al. 2001 §3, on per-position transitions), into the (n, g)
    arrays: ``forward[i]`` everything left of position i with i's own message excluded, ``alpha[i] = forward[i]
    + incoming[i]``, and ``beta[i]`` everything right of i (``_chain_messages``; its adjoint,
    ``engine.graph.tags_adjoint``, runs these recursions backwards)."""
    n, g = incoming.shape
    scratch = np.empty(g)
    for a in range(g):
        forward[0, a] = start[a]
        alpha[0, a] = start[a] + incoming[0, a]
    for i in range(1, n):
        for b in range(g):
            for a in range(g):
                scratch[a] = alpha[i - 1, a] + transitions[i - 1, a, b]
            forward[i, b] = _lse(scratch)
            alpha[i, b] = forward[i, b] + incoming[i, b]
    for a in range(g):
        beta[n - 1, a] = end[a]
    for i in range(n - 2, -1, -1):
        for a in range(g):
            for b in range(g):
                scratch[b] = transitions[i, a, b] + incoming[i + 1, b] + beta[i + 1, b]
            beta[i, a] = _lse(scratch)


@njit(cache=True, nogil=True)
def _chain_messages(incoming: np.ndarray, transitions: np.ndarray, start: np.ndarray, end: np.ndarray,
                    out: np.ndarray) -> None:
    """``out[i, a]`` = log of the chain's potential summed over every tagging with ``t_i = a``, each weighted
    by the incoming messages of the *other* positions: forward scores without position i's message times
    backward scores (``chain_tables``)."""
    n, g = incoming.shape
    alpha = np.empty((n, g))
    beta = np.empty((n, g))
    chain_tables(incoming, transitions, start, end, out, alpha, beta)
    for i in range(n):
        for a in range(g):
            out[i, a] += beta[i, a]


@njit(cache=True, nogil=True)
def _chain_messages_many(incoming: np.ndarray, transitions: np.ndarray, start: np.ndarray, end: np.ndarray,
                         out: np.ndarray) -> None:
    """``_chain_messages`` of each chain of a stack (leading axis: the sentence)."""
    for j in range(incoming.shape[0]):
        _chain_messages(incoming[j], transitions[j], start[j], end[j], out[j])


class TagChain:
    """CHAIN over ``T_1..T_n``: log-potentials ``transitions`` (n-1, g, g), ``start`` and ``end`` (g,) of the
    candidate slots (padding slots are excluded through ``allowed`` (n+1, g), row 0 ROOT). A stack of
    ``count`` sentences' chains (``stack``) holds them with a leading axis and ``allowed`` (count (n+1), g)."""

    name = "chain"

    def __init__(self, transitions: np.ndarray, start: np.ndarray, end: np.ndarray, allowed: np.ndarray) -> None:
        n, g = allowed.shape[0] - 1, allowed.shape[1]
        if transitions.shape != (max(n - 1, 0), g, g) or start.shape != (g,) or end.shape != (g,):
            raise ValueError("transitions must be (n-1, g, g), start and end (g,)")
        self.n, self.allowed, self.count = n, allowed, 1
        self.transitions = np.ascontiguousarray(transitions, dtype=np.float64)
        self.start = np.ascontiguousarray(start, dtype=np.float64)
        self.end = np.ascontiguousarray(end, dtype=np.float64)

    @classmethod
    def stack(cls, parts: Sequence[TagChain]) -> TagChain:
        """The chains of several sentences of one length as one (``TagLink.stack``'s rows and padding: the
        padded slots' potentials are ``-inf``). One part is itself."""
        if len(parts) == 1:
            return parts[0]
        n, g = parts[0].n, max(p.allowed.shape[1] for p in parts)
        if any(p.n != n or p.count != 1 for p in parts):
            raise ValueError("a stack of chains needs unstacked sentences of one length")
        out = cls.__new__(cls)
        out.n, out.count = n, len(parts)
        out.allowed = np.concatenate([pad_slots(p.allowed, g, False) for p in parts])
        out.transitions = np.stack([pad_slots(pad_slots(p.transitions, g, -np.inf).swapaxes(1, 2), g, -np.inf)
                                    .swapaxes(1, 2) for p in parts])
        out.start = np.stack([pad_slots(p.start, g, -np.inf) for p in parts])
        out.end = np.stack([pad_slots(p.end, g, -np.inf) for p in parts])
        return out

    def widened(self, size: int) -> TagChain:
        """This chain in a sentence of ``size`` >= n words (``engine.inference.joint_bp``'s stacks of several
        lengths): the words past n are padding, one slot each (slot 0), and the chain runs through them with
        potential 0; the step from word n to the first padding word carries ``end``, and the padding's own end
        is 0. Every tagging of the real words keeps its log-potential (one padding tagging, of potential 0),
        so the messages to the real words are the chain's own."""
        if size == self.n:
            return self
        if size < self.n or self.count != 1 or not self.n:
            raise ValueError("only one sentence's chain (of at least one word) can be widened, to its length or more")
        g = self.allowed.shape[1]
        n = self.n
        steps = np.full((size - 1, g, g), -np.inf)
        steps[:n - 1] = self.transitions
        steps[n - 1, :, 0] = self.end  # word n -> the first padding word
        steps[n:, 0, 0] = 0.0  # padding -> padding
        end = np.full(g, -np.inf)
        end[0] = 0.0
        return TagChain(steps, self.start, end, pad_rows(self.allowed, size + 1))

    def propagate(self, incoming: np.ndarray) -> np.ndarray:
        """Messages (n, g) to ``T_1..T_n`` from incoming log-messages (n, g; ``-inf`` on padding); for a stack,
        (count n, g) to every sentence's words in order."""
        g = self.allowed.shape[1]
        words = self.allowed.reshape(self.count, self.n + 1, g)[:, 1:].reshape(-1, g)
        inc = np.ascontiguousarray(np.where(words, incoming, -np.inf))
        out = np.empty(inc.shape)
        if self.n and self.count == 1:
            _chain_messages(inc, self.transitions, self.start, self.end, out)
        elif self.n:
            shape = (self.count, self.n, g)
            _chain_messages_many(inc.reshape(shape), self.transitions, self.start, self.end, out.reshape(shape))
        return normalised(out, words)

    def log_potential(self, slots: np.ndarray) -> float:
        """The chain's log-potential of a slot per word ``slots`` (n+1,; entry 0, ROOT, ignored); one sentence's
        chain only, not a stack's."""
        if self.count != 1:
            raise ValueError("log_potential is of one sentence's chain, not a stack's")
        t = slots[1:]
        if not len(t):
            return 0.0
        inner = self.transitions[np.arange(len(t) - 1), t[:-1], t[1:]].sum()
        return float(self.start[t[0]] + inner + self.end[t[-1]])


@njit(cache=True, nogil=True)
def _add_rows(out: np.ndarray, rows: np.ndarray, values: np.ndarray) -> None:
    for j in range(len(rows)):
        for a in range(values.shape[1]):
            out[rows[j], a] += values[j, a]


def add_rows(out: np.ndarray, rows: np.ndarray, values: np.ndarray) -> None:
    """``np.add.at(out, rows, values)`` for 2-D float64 ``out`` and ``values``: the same additions in the same
    order (row by row, as ``np.add.at`` makes them), without its per-element dispatch. Its own loop rather than
    ``engine.scoring.potentials.add_into`` over flattened indices: building those indices made a call 3-5 times
    slower (3 against 16 us for 300 rows, 15-22 against 66-72 us for 3,000)."""
    if len(rows):
        _add_rows(out, np.ascontiguousarray(rows, dtype=np.int64), np.ascontiguousarray(values, dtype=np.float64))


def pad_rows(allowed: np.ndarray, rows: int) -> np.ndarray:
    """An ``allowed`` mask (n+1, g) grown to ``rows`` rows of padding words, which allow slot 0 only (as ROOT)."""
    out = np.zeros((rows, allowed.shape[1]), dtype=bool)
    out[:len(allowed)] = allowed
    out[len(allowed):, 0] = True
    return out


def pad_slots(values: np.ndarray, width: int, fill: object) -> np.ndarray:
    """``values`` with its last axis (the candidate slots) padded with ``fill`` to ``width``."""
    extra = width - values.shape[-1]
    if not extra:
        return values
    return np.concatenate([values, np.full((*values.shape[:-1], extra), fill, dtype=values.dtype)], axis=-1)


def joint_factors(n: int, heads: np.ndarray, deps: np.ndarray, theta: np.ndarray, candidates: TagCandidates
                  ) -> tuple[TagLink, TagChain, np.ndarray]:
    """TAGLINK over the kept arcs ``(heads, deps)`` with potentials ``theta`` (A, g, g), CHAIN, and the TAG
    emissions (n+1, g) of one sentence's candidate tags (``engine.text.tag_candidates``), ROOT as row 0."""
    g = candidates.allowed.shape[1]
    root = np.arange(g) == 0
    allowed = np.vstack([root, candidates.allowed])
    emissions = np.vstack([np.where(root, 0.0, -np.inf), candidates.emissions])
    return (TagLink(n, heads, deps, theta, allowed), TagChain(candidates.transitions, candidates.start,
                                                              candidates.end, allowed), emissions)

