"""Reverse-mode differentiation through T iterations of loopy BP (Gormley, Dredze & Eisner 2015 §3.3).

BP, unrolled for a fixed number of iterations, is a feed-forward circuit (§3.1, Fig. 2 B-D) from the
factors' parameters to the beliefs. ``bp_forward`` runs ``engine.inference.bp.run_bp`` itself (same
schedule, damping, clipping and stopping rule, the same numbers bit for bit) and keeps a tape of every
message update: which family, its incoming messages, and where the clip was inactive. ``bp_backward``
walks the tape backwards and returns, for every family, the gradient of an objective with respect to
its parameters ``theta`` (the LINK log-potentials, each pairwise factor's log-potential), given the
objective's gradient with respect to the final beliefs.

One iteration is a list of *stages*; the families updated in one stage all read the same beliefs.
Flooding has one stage of every family; the serial schedule (§2 fn. 4) has one stage per visit, in
the order tree factor, the others, then back. Updates that ``run_bp`` skips as exact repeats
(``engine.inference.bp.Repeats``: LINK, whose messages start at its update, and the tree factor's
visit that opens a serial iteration) are not on the tape. For a stage, with ``b = sum_f
scatter_f(m_f)`` the log-odds beliefs and ``d`` the damping,

    r_f = gather_f(b) - m_f                                  (variable-to-factor, eq. 4)
    m_f' = d m_f + (1 - d) clip(propagate_f(r_f))            (factor-to-variable, eq. 5)

and the reverse step, from the adjoint ``g_f`` of ``m_f'``, is

    g_r = vjp_f(r_f, (1 - d) g_f [clip inactive])            (+ the adjoint of theta_f)
    g_{m_f} = d g_f - g_r,   then every family g_{m_j} += gather_j(sum_f scatter_f(g_r))

``gather`` and ``scatter`` are each other's transposes. The clip is treated as the piecewise function
it is (adjoint 0 where it was active). A stopping rule by tolerance is a discrete decision: the
gradient is that of the iterations actually run. Cost: the forward pass plus one adjoint per message
update (for TREE/PTREE an exact O(n^3) Hessian-vector product, ``engine.kernels.tree_hessian``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from engine.graph.family import FactorFamily, Messages
from engine.inference.bp import BPConfig, BPResult, run_bp

_SIGMOID_CLIP = 700.0  # run_bp clips the belief log-odds here before the sigmoid


@dataclass
class Visit:
    """One message update: the family's index, its incoming messages and where the clip was inactive."""

    family: int
    incoming: Messages
    unclipped: tuple[np.ndarray, ...]


@dataclass
class BPTape:
    """Every stage of every iteration in forward order, and the final log-odds ``total``."""

    stages: list[list[Visit]] = field(default_factory=list)
    total: np.ndarray | None = None


def bp_forward(families: Sequence[FactorFamily], valid: np.ndarray,
               config: BPConfig | None = None) -> tuple[BPResult, BPTape]:
    """``run_bp`` with a tape of every message update: ``run_bp`` itself, asked for its updates (``visits``),
    so the result is the same bit for bit by construction."""
    config = config or BPConfig()
    log: list[list[tuple[int, np.ndarray, np.ndarray]]] = []
    result = run_bp(families, valid, config, visits=log)
    tape = BPTape(total=np.where(valid, result.log_odds, 0.0))
    for stage in log:
        tape.stages.append([Visit(i, families[i].unpack(incoming), families[i].unpack(np.abs(raw) < config.clip))
                            for i, incoming, raw in stage])
    return result, tape


def _add(into: np.ndarray | None, value: np.ndarray | None) -> np.ndarray | None:
    if value is None:
        return into
    return value.copy() if into is None else into + value


def bp_backward(
    families: Sequence[FactorFamily],
    valid: np.ndarray,
    tape: BPTape,
    config: BPConfig,
    grad_beliefs: np.ndarray | None = None,
    grad_incoming: dict[int, Messages] | None = None,
) -> list[np.ndarray | None]:
    """Gradient of an objective with respect to every family's ``theta`` (None for families without
    parameters), by reverse mode over ``tape``.

    ``grad_beliefs`` (n+1, n+1): d objective / d b(L[h, m] = true) for the final beliefs;
    ``grad_incoming``: d objective / d the final incoming messages of some families (e.g. the tree
    factor's, for a log-likelihood). Raises NotImplementedError for a family without ``vjp``.
    """
    assert tape.total is not None, "the tape is from an unfinished forward pass"
    total = tape.total
    g_total = np.zeros(valid.shape)
    if grad_beliefs is not None:
        b = 1.0 / (1.0 + np.exp(-np.clip(total, -_SIGMOID_CLIP, _SIGMOID_CLIP)))
        inside = valid & (np.abs(total) < _SIGMOID_CLIP)
        g_total += np.where(inside, grad_beliefs * b * (1.0 - b), 0.0)
    adj: list[list[np.ndarray]] = [[np.zeros_like(m) for m in f.gather(np.zeros(valid.shape))] for f in families]
    for i, g_in in (grad_incoming or {}).items():  # incoming_i = gather_i(total) - m_i
        g_total += families[i].scatter(g_in)
        adj[i] = [a - g for a, g in zip(adj[i], g_in, strict=True)]
    for j, f in enumerate(families):
        adj[j] = [a + g for a, g in zip(adj[j], f.gather(g_total), strict=True)]
    theta: list[np.ndarray | None] = [None] * len(families)
    keep_new = 1.0 - config.damping
    for stage in reversed(tape.stages):
        g_b = np.zeros(valid.shape)
        for visit in stage:
            i, f = visit.family, families[visit.family]
            g_out = tuple(np.where(u, keep_new * g, 0.0) for g, u in zip(adj[i], visit.unclipped, strict=True))
            g_in, g_theta = f.vjp(visit.incoming, g_out)
            theta[i] = _add(theta[i], g_theta)
            adj[i] = [config.damping * g - gi for g, gi in zip(adj[i], g_in, strict=True)]
            g_b += f.scatter(g_in)
        for j, f in enumerate(families):
            adj[j] = [a + g for a, g in zip(adj[j], f.gather(g_b), strict=True)]
    for i, f in enumerate(families):
        theta[i] = _add(theta[i], f.initial_vjp(tuple(adj[i])))
    return theta
