"""Relaxed marginal inference (Riedel & Smith 2010 §4) and the factor-pruning baseline (§5.3).

**Algorithm 1** (§4.2). Start from the graph F' of the hard factors (TREE/PTREE, ...) and LINK; find
its marginals with the solver (loopy BP, at most B iterations); compute the gain of every
higher-order factor not yet in F'; add those whose gain exceeds epsilon; repeat until no factor is
added or R separation rounds have run. The answer is BP's beliefs on the last graph. ``Rel(R, eps,
B)`` in the paper's notation (§5.2, Tables 1-2) is ``RelaxedConfig(rounds=R, epsilon=eps,
bp_iterations=B)``; ``R = inf`` is ``rounds=None``. With R = 1 the marginals of the initial graph
pick the factors once and BP runs once more on the grown graph.

Candidates are the soft pairwise factors (GRAND, SIB: a ``PairFamily`` with finite weights), each a
binary feature phi = L_a AND L_b with weight theta. Other families (hard NOT2 / NO2CYCLE, structured
CHILDSEQ / NOCROSS) are not single binary features and always stay in the graph.

**Gain** (Proposition 1, eq. 3). For a factor with weight theta whose feature fires with probability
mu under p_F'::

    g = log(1 - mu + mu e^theta) - mu theta  =  D(p_F' || p_F'+i)

This is the KL divergence *from* the current model *to* the model with the factor added (the appendix
derives eq. 3 from the primal form of D(p_F' || p_F); §4.1 writes the arguments the other way round,
which would need mu under F' + i). For a pair factor not yet in the graph, mu = p_F'(L_a and L_b) has no
BP belief (the factor is not there to have one); we take the product of the two link beliefs,
``mu ~ b(L_a) b(L_b)``, i.e. treat the two links as independent under the current graph. Both arcs of
a GRAND or SIB factor have different dependents, so a tree factor couples them only through
acyclicity and the single root. Computed for all candidates of a family at once: O(F) numpy work.

**The bound** (Proposition 2). Rewrite each left-out factor with theta < 0 as its negation (phi -> 1 -
phi, theta -> -theta; the distribution does not change). Then over the left-out factors G::

    eta = ||theta_G||_1 - <mu_G, theta_G> = sum_{theta>0} theta (1 - mu) + sum_{theta<0} |theta| mu >= 0

and D(p_F' || p_F) <= eta (part 1). The appendix shows p_F(y) <= e^eta p_F'(y) for every tree y;
applied to an event (an arc) with probability mu' under F' and to its complement::

    max(0, mu' - (e^eta - 1)(1 - mu'))  <=  mu  <=  min(1, mu' + (e^eta - 1) mu')

Part 2 of the paper states the lower end as mu' - (e^eta - 1) mu'. That does not follow from the
appendix and fails when mu' is small and the left-out factors push it down (a two-word counterexample
is in ``tests/test_relaxed.py``); ``marginal_interval`` returns the sound interval above, whose upper
end is the paper's. In the parser mu_G and mu' come from BP beliefs (and the product approximation),
so eta is an estimate of the bound, not a guarantee: it does not cover BP's own approximation error.

**Pruned(t)** (§5.3): drop every candidate factor with |theta| < t, then run BP once; eta is
computed the same way over the dropped factors.

**Cost.** The first graph (TREE + LINK) is exact after one Matrix-Tree call. Its tree message is
then already what the tree factor would send at the start of the next solve (new factors start at
0), so that solve does not recompute it (``BPResult.settled``, ``engine.inference.bp.Repeats``). Each
BP iteration costs one tree update plus the pairwise updates of the factors in F'. Each separation
round costs O(F) over the F candidates: two bounds screen most of them before eq. 3, the first
without an exponential per factor (``_gain_exceeds``). eta costs another O(F) pass over the final
beliefs, without an exponential either.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from engine.graph.family import ArcFamily, FactorFamily, Messages
from engine.graph.hard import Link
from engine.graph.pairwise import PairFamily
from engine.inference.bp import BPConfig, BPResult, run_bp_many

__all__ = ["PrunedConfig", "RelaxedConfig", "RelaxedResult", "eta_bound", "factor_gain", "infer", "infer_many",
           "marginal_interval", "pair_feature_expectations", "pruned_bp", "pruned_bp_many", "relaxed_bp",
           "relaxed_bp_many"]


@dataclass(frozen=True)
class _Settings:
    """The BP settings of each solve (``bp_iterations``, ``schedule``, ``tolerance`` as in ``BPConfig``)."""

    bp_iterations: int = 10
    schedule: str = "serial"
    tolerance: float = 1e-6

    @property
    def bp(self) -> BPConfig:
        return BPConfig(max_iterations=self.bp_iterations, schedule=self.schedule, tolerance=self.tolerance)

    def _validate(self, name: str, value: float) -> None:
        if not (math.isfinite(value) and value >= 0.0):
            raise ValueError(f"{name} must be finite and >= 0, got {value}")
        self.bp  # noqa: B018  (validates the BP settings once)


@dataclass(frozen=True)
class RelaxedConfig(_Settings):
    """Rel(R, epsilon, B) of Riedel & Smith §5.2: at most ``rounds`` separation rounds (None: until no
    factor is added, R = inf), gain threshold ``epsilon``, at most ``bp_iterations`` BP iterations per
    solve (stopping earlier when no belief changes by more than ``tolerance``). ``warm_start`` starts each
    solve from the previous solve's messages (new factors from uninformative ones)."""

    bp_iterations: int = 50
    epsilon: float = 1e-4
    rounds: int | None = None
    warm_start: bool = True

    def __post_init__(self) -> None:
        self._validate("epsilon", self.epsilon)
        if self.rounds is not None and self.rounds < 1:
            raise ValueError(f"rounds must be at least 1 (or None for no limit), got {self.rounds}")

    @property
    def label(self) -> str:
        return f"Rel({'inf' if self.rounds is None else self.rounds}, {self.epsilon:g}, {self.bp_iterations})"


@dataclass(frozen=True)
class PrunedConfig(_Settings):
    """Pruned(t) of Riedel & Smith §5.3: higher-order factors with |theta| < ``threshold`` are dropped
    before BP."""

    threshold: float = 0.1

    def __post_init__(self) -> None:
        self._validate("threshold", self.threshold)

    @property
    def label(self) -> str:
        return f"Pruned({self.threshold:g})"


@dataclass
class RelaxedResult(BPResult):
    """BP's result on the final sub-graph plus the controller's diagnostics: ``rounds`` (separation
    rounds run), higher-order factors in the final graph and in the full one, ``eta`` (Prop. 2; also the
    KL bound), ``seconds`` of inference (graph building and feature extraction excluded), and per
    candidate family name the boolean mask of its factors in the final graph (``selected``)."""

    method: str = "relaxed"
    rounds: int = 0
    factors_used: int = 0
    factors_total: int = 0
    eta: float = 0.0
    seconds: float = 0.0
    selected: dict[str, np.ndarray] = field(default_factory=dict)

    @property
    def factor_fraction(self) -> float:
        """Fraction of the higher-order factors in the final graph (1 when there are none)."""
        return self.factors_used / self.factors_total if self.factors_total else 1.0

    def interval(self, mu: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return marginal_interval(mu, self.eta)

    def diagnostics(self) -> dict[str, Any]:
        return {"method": self.method, "rounds": self.rounds, "bp_iterations": self.iterations,
                "factors_added": self.factors_used, "factors_total": self.factors_total,
                "factor_fraction": self.factor_fraction, "eta": self.eta, "kl_bound": self.eta,
                "inference_seconds": self.seconds}


# -- Propositions 1 and 2 -----------------------------------------------------------------------------
def _positive(mu: np.ndarray, theta: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Negated form of Prop. 2: (|theta|, probability that the possibly negated feature fires)."""
    mu = np.minimum(np.maximum(np.asarray(mu, dtype=np.float64), 0.0), 1.0)  # np.clip, in fewer calls
    theta = np.asarray(theta, dtype=np.float64)
    return np.abs(theta), np.where(theta >= 0.0, mu, 1.0 - mu)


def factor_gain(mu: np.ndarray, theta: np.ndarray) -> np.ndarray:
    """Gain of adding each binary factor (Riedel & Smith Prop. 1, eq. 3), elementwise, >= 0:
    ``g = log(1 - mu + mu e^theta) - mu theta = D(p_F' || p_F'+i)``.

    ``mu`` (F,) probability that the factor's feature fires under the current graph, ``theta`` (F,)
    finite weights. Evaluated on the negated form (theta >= 0, the gain does not change) as
    ``(1 - m) t + log(s)`` with ``s = m + (1 - m) e^-t``: by ``log1p(s - 1)``, with ``s - 1 = (1 - m)
    expm1(-t)`` exact to rounding, where s >= 1/2, and as ``log(s)`` (a sum of two non-negative terms,
    also exact to rounding) where s < 1/2. No overflow for any finite weight. O(F).

    >>> float(np.round(factor_gain(np.array([0.5]), np.array([2.0]))[0], 6))
    0.433781
    """
    return _gain(*_positive(mu, theta))


def _gain(t: np.ndarray, m: np.ndarray) -> np.ndarray:
    """``factor_gain`` on the negated form: weights ``t >= 0``, probabilities ``m`` in [0, 1]."""
    off = 1.0 - m
    minus_t = -t
    inner = off * np.expm1(minus_t)  # s - 1
    with np.errstate(divide="ignore"):  # s = 0 (m = 0, e^-t below the smallest double): log -inf, gain 0
        log_s = np.where(inner < -0.5, np.log(m + off * np.exp(minus_t)), np.log1p(inner))
    return np.maximum(off * t + log_s, 0.0)


def eta_bound(mu: np.ndarray, theta: np.ndarray) -> float:
    """eta of Riedel & Smith Prop. 2 over left-out factors with weights ``theta`` (F,) whose features
    fire with probability ``mu`` (F,) under the sub-graph: ``sum |theta| (1 - mu~)`` with mu~ the
    probability of the (negated where theta < 0) feature. Bounds D(p_F' || p_F). O(F)."""
    t, m = _positive(mu, theta)
    return float(np.dot(t, 1.0 - m))


def marginal_interval(mu: np.ndarray, eta: float) -> tuple[np.ndarray, np.ndarray]:
    """Interval for the full model's marginal of an event with probability ``mu`` under the sub-graph
    (Riedel & Smith Prop. 2 from ``p_F <= e^eta p_F'``, applied to the event and its complement):
    ``[mu - (e^eta - 1)(1 - mu), mu + (e^eta - 1) mu]`` clipped to [0, 1]; the upper end is the
    paper's, the lower end the sound one (see the module docstring)."""
    mu = np.clip(np.asarray(mu, dtype=np.float64), 0.0, 1.0)
    width = math.expm1(eta) if eta < 700.0 else math.inf
    with np.errstate(invalid="ignore"):  # inf * 0 where mu is exactly 0 or 1
        lower = np.where(mu >= 1.0, 1.0, mu - width * (1.0 - mu))
        upper = np.where(mu <= 0.0, 0.0, mu + width * mu)
    return np.clip(lower, 0.0, 1.0), np.clip(upper, 0.0, 1.0)


def pair_feature_expectations(family: PairFamily, beliefs: np.ndarray,
                              index: np.ndarray | None = None) -> np.ndarray:
    """mu ~ b(L_a) b(L_b) for the factors ``index`` of ``family`` (all by default): the probability that
    both links are on, approximated by the product of the link beliefs (n+1, n+1)."""
    b_a, b_b = family.unpack(family.gather_flat(beliefs.reshape(-1)))
    if index is not None:
        b_a, b_b = b_a[index], b_b[index]
    return b_a * b_b


# -- the controller -----------------------------------------------------------------------------------
def _candidates(families: Sequence[FactorFamily]) -> list[int]:
    """Indices of the soft pairwise families (finite weights): the factors relaxation may leave out."""
    return [i for i, f in enumerate(families) if isinstance(f, PairFamily) and np.isfinite(f.theta).all()]


def _gain_exceeds(mu: np.ndarray, theta: np.ndarray, epsilon: float) -> np.ndarray:
    """Indices of the factors whose gain (Prop. 1, eq. 3) exceeds ``epsilon``, for features firing with
    probability ``mu`` (F,) and weights ``theta`` (F,). Two upper bounds on the gain rule out most
    candidates before eq. 3 proper (``factor_gain``) is evaluated, each with a factor-2 margin that
    absorbs rounding. Since log(1 + x) <= x, eq. 3 gives ``g <= mu c(theta)`` with ``c(theta) = e^theta - 1
    - theta``; and ``c(theta) <= kappa theta^2`` for every ``theta <= t``, the family's largest weight,
    with ``kappa = max(c(t) / t^2, 1/2)`` (``c(theta) / theta^2`` is a power series in theta with positive
    coefficients, so it increases for theta > 0, and it is at most 1/2 for theta <= 0). The looser bound,
    ``mu kappa theta^2``, needs no exponential per factor (one costs tens of multiplications) and rules
    out most candidates (about 88% on EWT), because most arcs have a small belief; ``mu c(theta)`` is
    evaluated only on the rest, and eq. 3 on what is left after that. O(F)."""
    if epsilon <= 0.0:
        return np.flatnonzero(factor_gain(mu, theta) > epsilon)
    with np.errstate(over="ignore", invalid="ignore"):  # theta > 709: inf, and 0 * inf where mu = 0
        rest = np.flatnonzero(mu * (theta * theta) > 0.5 * epsilon / _square_bound(float(np.max(theta, initial=0.0))))
        if not len(rest):
            return rest
        mu, theta = mu[rest], theta[rest]
        keep = mu * (np.expm1(theta) - theta) > 0.5 * epsilon
    rest, mu, theta = rest[keep], mu[keep], theta[keep]
    if not len(rest):
        return rest
    return rest[_gain(np.abs(theta), np.where(theta >= 0.0, mu, 1.0 - mu)) > epsilon]  # eq. 3, mu in [0, 1]


def _square_bound(t: float) -> float:
    """``kappa`` with ``e^theta - 1 - theta <= kappa theta^2`` for every ``theta <= t`` (``_gain_exceeds``);
    inf where ``e^t`` (nearly) overflows."""
    if t <= 0.0:
        return 0.5
    return max((math.expm1(t) - t) / (t * t), 0.5) if t < 700.0 else math.inf


Graph = tuple[Sequence[FactorFamily], np.ndarray]  # one sentence's families and its valid-arc mask


class _SubGraph:
    """The current sub-graph F' of one sentence: every non-candidate family, and the active factors of
    each candidate family. With ``warm``, each solve starts from the messages of the previous one
    (factors added since from uninformative ones), and families whose update would repeat the previous
    solve's last one (``BPResult.settled``: TREE and LINK after the first, exact solve) are not updated
    again. ``_solve`` runs the solves of many sentences' sub-graphs together."""

    def __init__(self, families: Sequence[FactorFamily], valid: np.ndarray, active: dict[int, np.ndarray],
                 warm: bool) -> None:
        self.families, self.valid, self.active, self.warm = families, valid, active, warm
        self.saved: dict[int, Messages] = {}  # per family, messages over all its factors (0 if never active)
        self.last: tuple[list[tuple[int, np.ndarray | None]], BPResult] | None = None
        self.owners: list[tuple[int, np.ndarray | None]] = []
        self.iterations = 0
        self.rounds = 0
        self.eta: float | None = None

    def _save_last(self) -> None:
        """Fold the last solve's messages into ``saved`` (done lazily: the last solve needs no saving)."""
        if self.last is None:
            return
        owners, result = self.last
        for (i, index), msgs in zip(owners, result.messages, strict=True):
            if index is None:
                self.saved[i] = msgs
            else:
                full = self.saved.get(i) or tuple(np.zeros(self.families[i].size) for _ in msgs)  # type: ignore
                for whole, part in zip(full, msgs, strict=True):
                    whole[index] = part
                self.saved[i] = full

    def prepare(self, config: BPConfig) -> tuple[list[FactorFamily], list[Messages | None], list[int], BPConfig]:
        """The next solve's families, their starting messages, the families already settled, and its BP
        settings (TREE + LINK alone: one exact flooding iteration)."""
        settled: set[int] = set()
        if self.warm and self.last is not None:  # non-candidate families kept their factors and messages
            owners, last = self.last
            settled = {owners[k][0] for k in last.settled if owners[k][1] is None}
            self._save_last()
        members: list[FactorFamily] = []
        self.owners = []
        initial: list[Messages | None] = []
        for i, f in enumerate(self.families):
            index = None
            if i in self.active:
                index = np.flatnonzero(self.active[i])
                if not len(index):
                    continue
                f = f.select(index)  # type: ignore[attr-defined]
            old = self.saved.get(i) if self.warm else None
            initial.append(None if old is None else old if index is None else tuple(m[index] for m in old))
            members.append(f)
            self.owners.append((i, index))
        if all(isinstance(f, Link) for f in members[1:]) and isinstance(members[0], ArcFamily):
            config = BPConfig(max_iterations=1, schedule="flooding", clip=config.clip)  # one arc factor + LINK: exact
        return members, initial, [k for k, (i, _) in enumerate(self.owners) if i in settled], config

    def record(self, result: BPResult) -> BPResult:
        """Keep the solve's result (for the next warm start) and count its iterations."""
        self.iterations += result.iterations
        self.last = (self.owners, result) if self.warm else None
        return result

    def separate(self, beliefs: np.ndarray, epsilon: float) -> int:
        """One separation round of Algorithm 1: add every left-out factor whose gain (Prop. 1) under
        ``beliefs`` exceeds ``epsilon``; returns how many were added. If none was, ``eta`` (Prop. 2) over
        the factors left out is summed from the same expectations."""
        self.rounds += 1
        added, scored = 0, []
        for i, active in self.active.items():
            fam: PairFamily = self.families[i]  # type: ignore[assignment]
            out = np.flatnonzero(~active) if active.any() else None  # None: every factor is a candidate
            mu = pair_feature_expectations(fam, beliefs, out)
            theta = fam.theta if out is None else fam.theta[out]
            new = _gain_exceeds(mu, theta, epsilon)
            active[new if out is None else out[new]] = True
            added += len(new)
            scored.append((mu, theta))
        if not added:  # the left-out factors are exactly those just scored, under the final beliefs
            self.eta = sum((eta_bound(mu, theta) for mu, theta in scored), 0.0)
        return added

    def left_out_eta(self, beliefs: np.ndarray) -> float:
        """Prop. 2's eta over the factors left out, from ``beliefs``: per factor ``|theta| (1 - mu~)`` as in
        ``eta_bound``, written ``max(theta, 0) - theta mu`` (the same number). Summed over every factor
        with the weights of the factors in the graph set to 0 (each then adds 0), so that the sum is a
        plain sum and a dot product over the family, with no subset copied out."""
        eta = 0.0
        flat = beliefs.reshape(-1)
        for i, mask in self.active.items():
            fam: PairFamily = self.families[i]  # type: ignore[assignment]
            w = np.where(mask, 0.0, fam.theta)
            b_a, b_b = fam.unpack(fam.gather_flat(flat))
            eta += float(np.maximum(w, 0.0).sum() - np.dot(w * b_a, b_b))
        return eta

    def finish(self, result: BPResult, method: str, seconds: float) -> RelaxedResult:
        used = sum(int(m.sum()) for m in self.active.values())
        total = sum(len(m) for m in self.active.values())
        eta = self.left_out_eta(result.beliefs) if self.eta is None else self.eta
        return RelaxedResult(result.beliefs, result.log_odds, result.messages, result.incoming, self.iterations,
                             result.converged, result.residual, result.tape, result.settled, method=method,
                             rounds=self.rounds, factors_used=used, factors_total=total, eta=eta, seconds=seconds,
                             selected={self.families[i].name: m for i, m in self.active.items()})


def _solve(graphs: Sequence[_SubGraph], config: BPConfig) -> list[BPResult]:
    """Solve every sub-graph with BP, all at once (``run_bp_many`` stacks those of one length)."""
    jobs = [g.prepare(config) for g in graphs]
    results: list[BPResult | None] = [None] * len(graphs)
    for bp in dict.fromkeys(job[3] for job in jobs):  # the settings of this solve (one, but for odd graphs)
        which = [j for j, job in enumerate(jobs) if job[3] == bp]
        out = run_bp_many([(jobs[j][0], graphs[j].valid) for j in which], bp, initial=[jobs[j][1] for j in which],
                          settled=[jobs[j][2] for j in which])
        for j, result in zip(which, out, strict=True):
            results[j] = graphs[j].record(result)
    return results  # type: ignore[return-value]


def relaxed_bp(families: Sequence[FactorFamily], valid: np.ndarray,
               config: RelaxedConfig = RelaxedConfig()) -> RelaxedResult:
    """Relaxed marginal inference, Riedel & Smith Algorithm 1 (§4.2), with loopy BP as the solver.

    ``families`` is the full factor graph of one sentence (``families[0]`` the tree factor, as for
    ``run_bp``); the soft pairwise families are the candidates, everything else forms the initial graph.
    Each separation round costs O(F) for the F candidates not yet added (Prop. 1, vectorised and
    screened by a bound, ``_gain_exceeds``). The result's ``eta`` is Prop. 2's bound over the factors
    still left out, from the final beliefs.
    """
    return relaxed_bp_many([(families, valid)], config)[0]


def relaxed_bp_many(graphs: Sequence[Graph], config: RelaxedConfig = RelaxedConfig()) -> list[RelaxedResult]:
    """``relaxed_bp`` on each sentence of ``graphs``: the same controller per sentence (each sentence runs
    its own rounds, until it adds no factor or R rounds have run), with each round's BP solves stacked
    (``run_bp_many``). ``seconds`` is the time of the whole call divided among the sentences."""
    start = time.perf_counter()
    subs = [_SubGraph(f, v, {i: np.zeros(f[i].size, dtype=bool) for i in _candidates(f)},  # type: ignore[attr-defined]
                      config.warm_start) for f, v in graphs]
    results = _solve(subs, config.bp)
    running = list(range(len(subs)))
    rounds = 0
    while running and (config.rounds is None or rounds < config.rounds):
        rounds += 1
        running = [j for j in running if subs[j].separate(results[j].beliefs, config.epsilon)]
        for j, result in zip(running, _solve([subs[j] for j in running], config.bp), strict=True):
            results[j] = result
    seconds = (time.perf_counter() - start) / max(len(subs), 1)
    return [g.finish(r, "relaxed", seconds) for g, r in zip(subs, results, strict=True)]


def pruned_bp(families: Sequence[FactorFamily], valid: np.ndarray,
              config: PrunedConfig = PrunedConfig()) -> RelaxedResult:
    """Pruned(t), Riedel & Smith §5.3: BP over the graph without the soft pairwise factors whose weight
    has |theta| < t; ``eta`` (Prop. 2) over the dropped factors from the final beliefs."""
    return pruned_bp_many([(families, valid)], config)[0]


def pruned_bp_many(graphs: Sequence[Graph], config: PrunedConfig = PrunedConfig()) -> list[RelaxedResult]:
    """``pruned_bp`` on each sentence of ``graphs``, the BP runs stacked (``run_bp_many``)."""
    start = time.perf_counter()
    subs = [_SubGraph(f, v, {i: np.abs(f[i].theta) >= config.threshold for i in _candidates(f)},  # type: ignore
                      warm=False) for f, v in graphs]
    results = _solve(subs, config.bp)
    seconds = (time.perf_counter() - start) / max(len(subs), 1)
    return [g.finish(r, "pruned", seconds) for g, r in zip(subs, results, strict=True)]


InferenceConfig = BPConfig | RelaxedConfig | PrunedConfig


def infer(families: Sequence[FactorFamily], valid: np.ndarray, config: InferenceConfig) -> BPResult:
    """Full BP, relaxed BP or pruned BP on one sentence's factor graph, by the type of ``config``."""
    return infer_many([(families, valid)], config)[0]


def infer_many(graphs: Sequence[Graph], config: InferenceConfig) -> list[BPResult]:
    """``infer`` on each sentence of ``graphs``, the BP runs of sentences of one length stacked."""
    if isinstance(config, RelaxedConfig):
        return relaxed_bp_many(graphs, config)  # type: ignore[return-value]
    if isinstance(config, PrunedConfig):
        return pruned_bp_many(graphs, config)  # type: ignore[return-value]
    return run_bp_many(graphs, config)
