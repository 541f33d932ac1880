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
is in ``tests/engine/inference/test_relaxed.py``); ``marginal_interval`` returns the sound interval above, whose upper
end is the paper's. In the parser mu_G and mu' come from BP beliefs (and the product approximation),
so eta is an estimate of the bound, not a guarantee: it does not cover BP's own approximation error.

**Pruned(t)** (§5.3): drop every candidate factor with |theta| < t, then run BP once; eta is
computed the same way over the dropped factors.

**Cost.** The first graph (TREE + LINK) is exact after one Matrix-Tree call. Its tree message is
then already what the tree factor would send at the start of the next solve (new factors start at
0), so that solve does not recompute it (``BPResult.settled``, ``engine.inference.bp.Repeats``). Each
BP iteration costs one tree update plus the pairwise updates of the factors in F'. Each separation
round costs O(F) over the F candidates: two bounds screen most of them before eq. 3, the first
without an exponential per factor (``relaxed_gain.gain_exceeds``), in one compiled pass that reads each
candidate once (``relaxed_scan.screen``). eta costs another such pass over the final beliefs
(``relaxed_scan.left_out_eta``), without an exponential either.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from engine.graph.family import ArcFamily, FactorFamily
from engine.graph.hard import Link
from engine.graph.pairwise import PairFamily
from engine.inference.bp import (
    ITERATIONS,
    SCHEDULE,
    STACK_MESSAGES,
    BPConfig,
    BPResult,
    Graph,
    StackResult,
    run_bp_many,
    run_stack,
    stack_chunks,
    stack_graphs,
)
from engine.inference.fields import Setting, check_settings, setting
from engine.inference.relaxed_gain import (
    eq3_exceeds,
    eta_bound,
    factor_gain,
    gain_exceeds,
    marginal_interval,
    pair_feature_expectations,
)
from engine.inference.relaxed_scan import left_out_eta as scan_eta
from engine.inference.relaxed_scan import screen

__all__ = ["PrunedConfig", "RelaxedConfig", "RelaxedResult", "eta_bound", "factor_gain", "infer", "infer_many",
           "marginal_interval", "pair_feature_expectations", "pruned_bp", "pruned_bp_many", "relaxed_bp",
           "relaxed_bp_many"]


@dataclass(frozen=True)
class _Settings:
    """The BP settings of each solve (``bp_iterations`` - public name ``iterations`` -, ``schedule``,
    ``tolerance`` as in ``BPConfig``, whose defaults they take unless a method declares its own)."""

    bp_iterations: int = setting(BPConfig.max_iterations, ITERATIONS)
    schedule: str = setting(BPConfig.schedule, SCHEDULE)
    tolerance: float = BPConfig.tolerance

    @property
    def bp(self) -> BPConfig:
        return BPConfig(max_iterations=self.bp_iterations, schedule=self.schedule, tolerance=self.tolerance)

    def __post_init__(self) -> None:
        check_settings(self)
        self.bp  # noqa: B018  (validates the BP settings once)


@dataclass(frozen=True)
class RelaxedConfig(_Settings):
    """Rel(R, epsilon, B) of Riedel & Smith §5.2: at most ``rounds`` separation rounds (None: until no
    factor is added, R = inf), gain threshold ``epsilon``, at most ``bp_iterations`` BP iterations per
    solve (stopping earlier when no belief changes by more than ``tolerance``). ``warm_start`` starts each
    solve from the previous solve's messages (new factors from uninformative ones)."""

    bp_iterations: int = setting(50, replace(ITERATIONS, help="at most this many BP iterations per round"))
    epsilon: float = setting(1e-4, Setting("epsilon", float, "gain threshold for adding a factor", minimum=0.0))
    rounds: int | None = setting(None, Setting("rounds", int, "at most this many rounds of adding factors "
                                               "(None: until no factor is added)", minimum=1, optional=True))
    warm_start: bool = True

    @property
    def label(self) -> str:
        return f"Rel({'inf' if self.rounds is None else self.rounds}, {self.epsilon:g}, {self.bp_iterations})"


@dataclass(frozen=True)
class PrunedConfig(_Settings):
    """Pruned(t) of Riedel & Smith §5.3: higher-order factors with |theta| < ``threshold`` are dropped
    before BP."""

    threshold: float = setting(0.1, Setting("threshold", float, "drop the higher-order factors with |weight| "
                                           "below this", minimum=0.0))

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


# -- the controller -----------------------------------------------------------------------------------
def _candidates(families: Sequence[FactorFamily]) -> list[int]:
    """Indices of the soft pairwise families (finite weights): the factors relaxation may leave out."""
    return [i for i, f in enumerate(families) if isinstance(f, PairFamily) and np.isfinite(f.theta).all()]


def _bounds(family: FactorFamily) -> np.ndarray:
    """Each sentence's factors ``[bounds[j], bounds[j + 1])`` of a (stacked) pair family."""
    return family.bounds if family.bounds is not None else np.array([0, family.size])  # type: ignore[attr-defined]


def _grown(old: tuple[np.ndarray, np.ndarray] | None, index: np.ndarray) -> np.ndarray | None:
    """Packed messages for the factors ``index`` (ascending) of a candidate family from its last solve's
    ``(factors, messages)``, a subset of ``index`` (factors are only ever added): the old factors keep their
    messages, the new ones start uninformative (0). O(|index|). None without a last solve."""
    if old is None:
        return None
    before, packed = old
    if len(before) == len(index):  # nothing added
        return packed
    grown = np.zeros((*packed.shape[:-1], len(index)))
    grown[..., np.searchsorted(index, before)] = packed
    return grown


def _kept(index: np.ndarray, packed: np.ndarray, bounds: np.ndarray,
          keep: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(factors, messages)`` of a stacked candidate family restricted to the stack's sentences ``keep``
    (ascending), the factor indices renumbered for the family of those sentences (``sentences``)."""
    owner = np.searchsorted(bounds, index, side="right") - 1  # each factor's sentence
    inside = np.isin(owner, keep)
    sizes = np.diff(bounds)[keep]
    shift = np.zeros(len(bounds) - 1, dtype=np.int64)
    shift[keep] = bounds[keep] - np.concatenate([[0], np.cumsum(sizes)[:-1]])
    return index[inside] - shift[owner[inside]], packed[..., inside]


class _Stack:
    """The current sub-graphs F' of a stack of sentences (``engine.graph.family``; one sentence is a stack
    of one): every non-candidate family, and the active factors of each candidate family. Each solve runs
    all the stack's sub-graphs together (``run_stack``), and each separation round scores all their
    candidates at once. With ``warm``, each solve starts from the messages of the previous one (factors
    added since from uninformative ones), and families whose update would repeat the previous solve's
    last one (``StackResult.settled``: TREE and LINK after the first, exact solve) are not updated again.
    A candidate family's messages are kept for the factors of its last sub-graph only (``sparse``,
    ``_grown``), so no round builds an array over all O(n^3) candidates besides the gain scan's mask (one
    byte per candidate); the gain scan and eta read each candidate once (``relaxed_scan``). Sentences leave
    the stack when their controller stops (``keep``); per-sentence diagnostics are kept by their index in
    the original stack (``ids``)."""

    def __init__(self, families: list[FactorFamily], valid: np.ndarray, active: dict[int, np.ndarray],
                 warm: bool) -> None:
        self.families, self.valid, self.active, self.warm = families, valid, active, warm
        count = 1 if valid.ndim == 2 else len(valid)
        self.ids = np.arange(count)
        self.saved: dict[int, np.ndarray] = {}  # per non-candidate family, its packed messages
        # per candidate family, the factors of its last solve (indices into the family) and their packed messages
        self.sparse: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        self.used = np.zeros(count, dtype=int)  # per sentence, the candidate factors in its graph
        self.grown: set[int] = set()  # the candidate families with a factor in some sentence's graph
        for i, mask in active.items():
            if mask.any():
                self.used += np.diff(np.searchsorted(np.flatnonzero(mask), _bounds(families[i])))
                self.grown.add(i)
        self.last: tuple[list[np.ndarray | None], StackResult] | None = None
        self.settled: frozenset[int] = frozenset()
        self.iterations = np.zeros(count, dtype=int)
        self.rounds = np.zeros(count, dtype=int)
        self.eta = np.full(count, np.nan)

    @property
    def count(self) -> int:
        return len(self.ids)

    def _save_last(self) -> None:
        """Fold the last solve's messages into ``saved`` (done lazily: the last solve needs no saving)."""
        if self.last is None:
            return
        owners, result = self.last
        for i, (index, packed) in enumerate(zip(owners, result.packed, strict=True)):
            if index is None:
                self.saved[i] = packed
            else:  # only the factors that were in the graph: O(|F'|), not O(F)
                self.sparse[i] = (index, packed)
        self.settled = frozenset(i for i in result.settled if owners[i] is None)
        self.last = None

    def solve(self, config: BPConfig) -> StackResult:
        """BP on the current sub-graphs (TREE + LINK alone: exact in one flooding iteration)."""
        if self.warm:
            self._save_last()
        members: list[FactorFamily] = []
        owners: list[np.ndarray | None] = []
        packed: list[np.ndarray] = []
        fresh = []
        for i, f in enumerate(self.families):
            index = None
            if i in self.active:
                index = np.flatnonzero(self.active[i])
                f = f.select(index)  # type: ignore[attr-defined]
            old = None if not self.warm else self.saved.get(i) if index is None else _grown(self.sparse.get(i), index)
            if old is None:
                fresh.append(i)
                packed.append(f.initial_packed())
            else:
                packed.append(old)
            members.append(f)
            owners.append(index)
        exact = isinstance(members[0], ArcFamily) and all(isinstance(f, Link) or getattr(f, "size", 1) == 0
                                                          for f in members[1:])
        if exact:  # one arc factor + LINK: exact after one update
            config = BPConfig(max_iterations=1, schedule="flooding", clip=config.clip)
        result = run_stack(members, self.valid, config, packed, self.settled if self.warm else (), fresh)
        if exact:  # its one iteration changed the beliefs from the uninformative start, yet they are exact
            result.converged[:] = True
        self.iterations[self.ids] += result.iterations
        self.last = (owners, result) if self.warm else None
        return result

    def separate(self, result: StackResult, epsilon: float) -> np.ndarray:
        """One separation round of Algorithm 1 for every sentence: add every left-out factor whose gain
        (Prop. 1) under the solve's beliefs exceeds ``epsilon``; returns how many each sentence added. For a
        sentence that added none, ``eta`` (Prop. 2) over its factors left out is summed under the same
        beliefs. Each candidate family is read once (``relaxed_scan.screen``) unless ``epsilon <= 0``."""
        self.rounds[self.ids] += 1
        beliefs = result.beliefs().reshape(-1)
        added = np.zeros(self.count, dtype=int)
        for i, active in self.active.items():
            fam: PairFamily = self.families[i]  # type: ignore[assignment]
            bounds = _bounds(fam)
            mask = active if i in self.grown else None  # none active yet: no pass over the mask
            if epsilon <= 0.0:  # every candidate with a positive gain: eq. 3 on all of them
                out = np.flatnonzero(~active)
                new = out[gain_exceeds(pair_feature_expectations(fam, beliefs, out), fam.theta[out], epsilon)]
            else:
                rest, mu = screen(fam, beliefs, mask, epsilon)
                new = eq3_exceeds(rest, mu, fam.theta[rest], epsilon)
            active[new] = True
            if len(new):
                self.grown.add(i)
            added += np.diff(np.searchsorted(new, bounds))
        self.used[self.ids] += added
        none = added == 0
        if none.any():  # the left-out factors are exactly those just scored, under these beliefs
            self.eta[self.ids[none]] = self.left_out_eta(result, none, beliefs)[none]
        return added

    def left_out_eta(self, result: StackResult, which: np.ndarray, beliefs: np.ndarray | None = None) -> np.ndarray:
        """Prop. 2's eta per sentence over the factors left out (computed for the sentences ``which``, a mask; 0
        for the others), from the solve's beliefs (flat, when the caller has them): per factor ``|theta| (1 -
        mu~)`` as in ``eta_bound``, written ``max(theta, 0) - theta mu`` (the same number), summed over the
        factors not in the graph (``relaxed_scan``)."""
        flat = result.beliefs().reshape(-1) if beliefs is None else beliefs
        eta = np.zeros(self.count)
        for i, mask in self.active.items():
            scan_eta(self.families[i], flat, mask, _bounds(self.families[i]), eta, which)  # type: ignore[arg-type]
        return eta

    def finish(self, result: StackResult, which: np.ndarray, method: str, out: list[RelaxedResult | None]) -> None:
        """The results of the stack's sentences ``which`` (a mask), from the solve that ended them."""
        if not which.any():
            return
        missing = which & np.isnan(self.eta[self.ids])
        if missing.any():
            self.eta[self.ids[missing]] = self.left_out_eta(result, missing)[missing]
        used = self.used[self.ids]
        total = np.zeros(self.count, dtype=int)
        selected: dict[str, list[np.ndarray]] = {}
        for i, mask in self.active.items():
            fam = self.families[i]
            total += np.diff(_bounds(fam))
            selected[fam.name] = fam.split(mask) if fam.bounds is not None else [mask.copy()]
        results = result.results()
        for k in np.flatnonzero(which):
            j = self.ids[k]
            r = results[k]
            out[j] = RelaxedResult(r.beliefs, r.log_odds, r.messages, r.incoming, int(self.iterations[j]),
                                   r.converged, r.residual, r.tape, r.settled, method=method,
                                   rounds=int(self.rounds[j]), factors_used=int(used[k]), factors_total=int(total[k]),
                                   eta=float(self.eta[j]),
                                   selected={name: masks[k] for name, masks in selected.items()})

    def keep(self, which: np.ndarray) -> None:
        """Continue with the stack's sentences ``which`` (a mask) only."""
        keep = np.flatnonzero(which)
        if len(keep) == self.count or not len(keep):
            return
        if self.warm:
            self._save_last()
        self.active = {i: self.families[i].take(m, keep) for i, m in self.active.items()}
        self.saved = {i: self.families[i].take(m, keep) for i, m in self.saved.items()}
        self.sparse = {i: _kept(index, packed, _bounds(self.families[i]), keep)
                       for i, (index, packed) in self.sparse.items()}
        self.families = [f.sentences(keep) for f in self.families]
        self.valid, self.ids = self.valid[keep], self.ids[keep]


# Relaxed inference stacks up to this many messages of the *full* graphs: BP runs on their small sub-graphs,
# and the full families are only read in the separation rounds, once each.
RELAXED_STACK_MESSAGES = 1 << 21


def _stacks(graphs: Sequence[Graph], limit: int) -> list[tuple[list[int], list[FactorFamily], np.ndarray]]:
    """The stacks the graphs run in (``stack_chunks``): (indices, stacked families, valid)."""
    return [(chunk, *stack_graphs([graphs[j] for j in chunk])) for chunk in stack_chunks(graphs, stack_messages=limit)]


def relaxed_bp(families: Sequence[FactorFamily], valid: np.ndarray,
               config: RelaxedConfig = RelaxedConfig()) -> RelaxedResult:
    """Relaxed marginal inference, Riedel & Smith Algorithm 1 (§4.2), with loopy BP as the solver.

    ``families`` is the full factor graph of one sentence (``families[0]`` the tree factor, as for
    ``run_bp``); the soft pairwise families are the candidates, everything else forms the initial graph.
    Each separation round costs O(F) for the F candidates not yet added (Prop. 1, vectorised and
    screened by a bound, ``relaxed_gain.gain_exceeds``). The result's ``eta`` is Prop. 2's bound over the factors
    still left out, from the final beliefs.
    """
    return relaxed_bp_many([(families, valid)], config)[0]


def relaxed_bp_many(graphs: Sequence[Graph], config: RelaxedConfig = RelaxedConfig()) -> list[RelaxedResult]:
    """``relaxed_bp`` on each sentence of ``graphs``: the controller runs each stack of sentences of one
    length together (``_Stack``), each sentence with its own rounds (it leaves the stack when it adds no
    factor; at most R rounds). ``seconds`` is the time of the whole call divided among the sentences."""
    start = time.perf_counter()
    out: list[RelaxedResult | None] = [None] * len(graphs)
    for chunk, families, valid in _stacks(graphs, RELAXED_STACK_MESSAGES):
        active = {i: np.zeros(families[i].size, dtype=bool) for i in _candidates(families)}  # type: ignore
        stack = _Stack(families, valid, active, config.warm_start)
        part: list[RelaxedResult | None] = [None] * len(chunk)
        result = stack.solve(config.bp)
        rounds = 0
        while True:
            if config.rounds is not None and rounds == config.rounds:  # R rounds have run
                stack.finish(result, np.ones(stack.count, dtype=bool), "relaxed", part)
                break
            rounds += 1
            stop = stack.separate(result, config.epsilon) == 0
            stack.finish(result, stop, "relaxed", part)
            if stop.all():
                break
            stack.keep(~stop)
            result = stack.solve(config.bp)
        for j, r in zip(chunk, part, strict=True):
            out[j] = r
    return _timed(out, start)


def _timed(results: list[RelaxedResult | None], start: float) -> list[RelaxedResult]:
    """The results with ``seconds``: the time since ``start`` divided among them."""
    seconds = (time.perf_counter() - start) / max(len(results), 1)
    for r in results:
        assert r is not None
        r.seconds = seconds
    return results  # type: ignore[return-value]


def pruned_bp(families: Sequence[FactorFamily], valid: np.ndarray,
              config: PrunedConfig = PrunedConfig()) -> RelaxedResult:
    """Pruned(t), Riedel & Smith §5.3: BP over the graph without the soft pairwise factors whose weight
    has |theta| < t; ``eta`` (Prop. 2) over the dropped factors from the final beliefs."""
    return pruned_bp_many([(families, valid)], config)[0]


def pruned_bp_many(graphs: Sequence[Graph], config: PrunedConfig = PrunedConfig()) -> list[RelaxedResult]:
    """``pruned_bp`` on each sentence of ``graphs``, the sentences of one length stacked."""
    start = time.perf_counter()
    out: list[RelaxedResult | None] = [None] * len(graphs)
    for chunk, families, valid in _stacks(graphs, STACK_MESSAGES):
        active = {i: np.abs(families[i].theta) >= config.threshold for i in _candidates(families)}  # type: ignore
        stack = _Stack(families, valid, active, warm=False)
        part: list[RelaxedResult | None] = [None] * len(chunk)
        stack.finish(stack.solve(config.bp), np.ones(stack.count, dtype=bool), "pruned", part)
        for j, r in zip(chunk, part, strict=True):
            out[j] = r
    return _timed(out, start)


InferenceConfig = BPConfig | RelaxedConfig | PrunedConfig


def infer(families: Sequence[FactorFamily], valid: np.ndarray, config: InferenceConfig) -> BPResult:
    """Full BP, relaxed BP or pruned BP on one sentence's factor graph, by the type of ``config``."""
    return infer_many([(families, valid)], config)[0]


def infer_many(graphs: Sequence[Graph], config: InferenceConfig) -> list[BPResult]:
    """``infer`` on each sentence of ``graphs``, the sentences of one length stacked."""
    if isinstance(config, RelaxedConfig):
        return relaxed_bp_many(graphs, config)  # type: ignore[return-value]
    if isinstance(config, PrunedConfig):
        return pruned_bp_many(graphs, config)  # type: ignore[return-value]
    return run_bp_many(graphs, config)
