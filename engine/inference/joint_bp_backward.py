"""Reverse-mode differentiation through joint BP over links and tags (Gormley, Dredze & Eisner 2015 §3.3 on the
factor graph of Smith & Eisner 2008 §3.4): approximation-aware training of the joint model (issue 23).

``joint_forward`` runs ``engine.inference.joint_bp``'s BP on one sentence (its own ``_run``, asked for a tape:
the same numbers bit for bit) and keeps every update: the unit, the incoming messages it read and where its
link messages were inside the clip. ``joint_backward`` walks the tape backwards. The state of a run is the
link log-odds ``b``, the tag log-beliefs ``t``, every link family's messages ``m_i`` and TAGLINK's and CHAIN's
messages; each update reads ``incoming = beliefs - own messages``, computes new messages and adds ``new - old``
to the beliefs. In reverse, with ``g_x`` the adjoint of ``x`` after the update:

    g_new  = g_m + gather(g_b)                       (the new messages and the beliefs they were added to)
    g_in   = vjp(incoming, g_new [clip inactive])    (+ the adjoint of the factor's theta)
    g_b   += scatter(g_in);   g_m = -gather(g_b before) - g_in

for each kind of message (TAGLINK's to links and to tags, CHAIN's to tags), with the adjoints of the factors'
propagators of ``engine.graph.tags_adjoint`` and ``FactorFamily.vjp``. The serial schedule only (each update
reads the live beliefs); a stopping rule by tolerance is a discrete decision, the gradient is that of the
updates actually run (as ``engine.inference.bp_backward``). The objective reads the final link beliefs
``sigmoid(b)`` and tag beliefs ``softmax(t)`` over each word's candidate slots.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from engine.graph.family import FactorFamily
from engine.graph.tags import TagChain, TagLink, add_rows
from engine.graph.tags_adjoint import chain_vjp, taglink_vjp
from engine.inference.bp import BPConfig
from engine.inference.joint_bp import JointResult, Update, _run


@dataclass
class JointGradient:
    """d objective / d the potentials of one joint graph: each link family's ``theta`` (None without
    parameters) in the order given, and TAGLINK's ``theta`` (A, g, g), 0 on pairs that are not candidates."""

    families: list[np.ndarray | None]
    taglink: np.ndarray


def joint_forward(families: Sequence[FactorFamily], valid: np.ndarray, taglink: TagLink, chain: TagChain,
                  emissions: np.ndarray, config: BPConfig) -> tuple[JointResult, list[Update]]:
    """``run_joint_bp`` of one sentence with a tape of its updates (the serial schedule only)."""
    if config.schedule != "serial" or config.damping:
        raise ValueError("reverse mode through joint BP takes the serial schedule without damping")
    tape: list[Update] = []
    result = _run(families, valid, taglink, chain, emissions, [emissions.shape[1]], config, tape)[0]
    return result, tape


def _add(into: np.ndarray | None, value: np.ndarray | None) -> np.ndarray | None:
    if value is None:
        return into
    return value.copy() if into is None else into + value


class _Adjoints:
    """The adjoints of a run's state (module docstring), walked back one update at a time."""

    def __init__(self, families: Sequence[FactorFamily], taglink: TagLink, chain: TagChain, g_b: np.ndarray,
                 g_tags: np.ndarray) -> None:
        self.families, self.taglink, self.chain = families, taglink, chain
        self.ok = taglink.allowed
        self.b = np.array(g_b, dtype=np.float64).reshape(-1)
        self.tags = np.where(self.ok, g_tags, 0.0)
        self.m = [np.zeros_like(f.initial_packed()) for f in families]
        size, g = taglink.size, self.ok.shape[1]
        self.to_link, self.to_head, self.to_dep = np.zeros(size), np.zeros((size, g)), np.zeros((size, g))
        self.to_chain = np.zeros(self.tags.shape)
        varying = np.zeros(size, dtype=bool)
        varying[taglink.varying] = True
        self.head_read = varying[:, None] & self.ok[taglink.heads]  # where TAGLINK's tag messages reach the beliefs
        self.dep_read = varying[:, None] & self.ok[taglink.deps]
        self.theta: list[np.ndarray | None] = [None] * len(families)
        self.theta_taglink = np.zeros((size, g, g))

    def family(self, update: Update) -> None:
        i, f = update.index, self.families[update.index]
        assert update.unclipped is not None
        gathered = f.gather_flat(self.b)
        g_raw = np.where(update.unclipped, self.m[i] + gathered, 0.0)
        g_in, g_theta = f.vjp(f.unpack(update.reads[0]), f.unpack(g_raw))
        self.theta[i] = _add(self.theta[i], g_theta)
        packed = f.pack(g_in)
        self.b = self.b + f.scatter_flat(packed)
        self.m[i] = -gathered - packed

    def taglink_update(self, update: Update) -> None:
        tl = self.taglink
        assert update.unclipped is not None
        g_b = self.b[tl.flat]
        g_link = np.where(update.unclipped, self.to_link + g_b, 0.0)
        read_head = np.where(self.head_read, self.tags[tl.heads], 0.0)
        read_dep = np.where(self.dep_read, self.tags[tl.deps], 0.0)
        g_head, g_dep = self.to_head + read_head, self.to_dep + read_dep
        if update.initial:  # TAGLINK's first update sets its link messages only
            g_head, g_dep = np.zeros(g_head.shape), np.zeros(g_dep.shape)
        link_in, head_in, dep_in = update.reads
        g_r, g_u, g_v, g_theta = taglink_vjp(tl, link_in, head_in, dep_in, g_link, g_head, g_dep)
        self.theta_taglink += g_theta
        self.b = self.b.copy()
        self.b[tl.flat] += g_r
        add_rows(self.tags, tl.heads, g_u)
        add_rows(self.tags, tl.deps, g_v)
        self.to_link = -g_b - g_r
        self.to_head, self.to_dep = -read_head - g_u, -read_dep - g_v

    def chain_update(self, update: Update) -> None:
        words = np.arange(1, self.tags.shape[0])
        read = np.where(self.ok, self.tags, 0.0)
        g_in = chain_vjp(self.chain, update.reads[0], (self.to_chain + read)[words])
        self.to_chain = -read
        self.to_chain[words] -= g_in
        self.tags[words] += g_in

    def initial(self) -> None:
        """The link families' first messages (``initial_packed``) were scattered into the beliefs."""
        for i, f in enumerate(self.families):
            self.theta[i] = _add(self.theta[i], f.initial_vjp(f.unpack(self.m[i] + f.gather_flat(self.b))))


def joint_backward(families: Sequence[FactorFamily], taglink: TagLink, chain: TagChain, tape: Sequence[Update],
                   g_beliefs: np.ndarray, g_tags: np.ndarray) -> JointGradient:
    """The gradient of an objective with respect to the potentials (``JointGradient``), by reverse mode over
    ``tape`` (``joint_forward``), given its gradient with respect to the final link log-odds ``g_beliefs``
    ((n+1, n+1) or flat) and tag log-beliefs ``g_tags`` (n+1, g)."""
    adj = _Adjoints(families, taglink, chain, g_beliefs, g_tags)
    for update in reversed(tape):
        if update.unit == "family":
            adj.family(update)
        elif update.unit == "taglink":
            adj.taglink_update(update)
        else:
            adj.chain_update(update)
    adj.initial()
    return JointGradient(adj.theta, np.where(np.isfinite(taglink.theta), adj.theta_taglink, 0.0))


def joint_l2(result: JointResult, gold: np.ndarray, slots: np.ndarray, valid: np.ndarray,
             allowed: np.ndarray) -> tuple[float, np.ndarray, np.ndarray]:
    """Gormley et al. eq. 12 on every output variable of the joint graph: ``sum over variables and values of
    (b(v) - b*(v))^2`` with ``b*`` the gold (the arcs ``gold`` (n+1, n+1) indicators, each word's candidate slot
    ``slots`` (n+1,; ROOT ignored)), i.e. ``2 sum_arcs (b - y)^2 + sum_words sum_slots (q - y)^2``. Returns the
    value and its gradient with respect to the final link log-odds and tag log-beliefs (``joint_backward``)."""
    p = np.where(valid, result.links.beliefs, 0.0)
    diff = np.where(valid, p - gold, 0.0)
    q = result.tags
    target = np.zeros(q.shape)
    target[np.arange(1, len(q)), slots[1:]] = 1.0
    t_diff = np.where(allowed, q - target, 0.0)
    t_diff[0] = 0.0
    value = float(2.0 * (diff * diff).sum() + (t_diff * t_diff).sum())
    g_b = 4.0 * diff * p * (1.0 - p)
    g_q = 2.0 * t_diff
    g_t = np.where(allowed, q * (g_q - (q * g_q).sum(axis=1, keepdims=True)), 0.0)
    return value, g_b, g_t
