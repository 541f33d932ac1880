"""Loopy BP over link *and* tag variables (Smith & Eisner 2008 §3.4, §4): tags and links negotiate.

The factor graph is the BP parser's (TREE first, then the higher-order link families of
``engine.graph``) with LINK replaced by TAGLINK, plus TAG_i and CHAIN over the tag variables
(``engine.graph.tags``). State, all in log space:

- ``b``: link log-odds beliefs, flat over the (n+1)^2 arcs: the sum of every link family's scattered messages
  and TAGLINK's messages to its links;
- ``tags``: tag log-beliefs (n+1, g), row 0 ROOT: the TAG emissions ``E`` (``-inf`` on padding slots) plus
  CHAIN's messages plus the sum of TAGLINK's messages to each word as a head and as a dependent.

A factor reads ``belief - its own message`` (Smith & Eisner eq. 3) and its update adds ``new - old`` to the
beliefs of its variables (eq. 4-5). Messages start uninformative except two, as LINK's do in
``engine.inference.bp``: CHAIN's (one update from the TAG emissions, so the tags start at the tagger's
posterior over the candidate sets) and TAGLINK's to the links (one update from those tag beliefs and link
log-odds 0; its messages to the tags start at 0). The ``serial`` schedule visits TREE, TAGLINK, CHAIN,
the other link families, then back in reverse (``engine.inference.bp.stages``); a visit right after the
same unit's previous one is skipped (its incoming messages did not change). BP stops after
``max_iterations``, or once no link belief and no tag belief has moved by more than ``tolerance`` in an
iteration. With a single candidate per word TAGLINK sends the arc scores whatever it receives and the tag
messages are constant: the run is ``run_bp`` on TREE + LINK + the same families, to rounding.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from engine.graph.family import ArcFamily, FactorFamily, pad_arcs
from engine.graph.pairwise import PairFamily
from engine.graph.tags import TagChain, TagLink, add_rows, normalised, pad_slots
from engine.graph.tree import Tree
from engine.inference.bp import STACK_MESSAGES, BPConfig, BPResult, stack_chunks, stack_graphs, stages
from engine.kernels.logistic import expit


@dataclass
class JointResult:
    """Link beliefs and diagnostics as ``run_bp`` returns them (``links``; families in the order given,
    ``incoming[0]`` TREE's incoming messages), the tag beliefs (n+1, g): probabilities per word over its
    candidate slots (0 on padding; row 0, ROOT, is slot 0 with probability 1), and TAGLINK's factor beliefs
    b(L = 1, T_h = a, T_m = b) (A, g, g) per kept arc (``taglink``: ``TagLink.on_beliefs`` of the messages the
    factors read when BP stopped, computed when first asked for: training reads them, parsing does not)."""

    links: BPResult
    tags: np.ndarray
    taglink_beliefs: Callable[[], np.ndarray]

    @cached_property
    def taglink(self) -> np.ndarray:
        return self.taglink_beliefs()


@dataclass
class Update:
    """One update of a run, for reverse mode (``engine.inference.joint_bp_backward``): the unit (``family`` with
    its ``index``, ``taglink`` or ``chain``), the incoming messages it read, where its outgoing link messages
    were inside the clip (None: the unit sends none), and whether it is TAGLINK's first update (``_State``)."""

    unit: str
    index: int
    reads: tuple[np.ndarray, ...]
    unclipped: np.ndarray | None
    initial: bool = False


class _State:
    """The messages and beliefs of one run (see the module docstring), with one update per unit, on one
    sentence or a stack of ``count`` sentences of one length (stacked families, ``TagLink.stack`` and
    ``TagChain.stack``: flat link beliefs over ``count (n+1)^2`` arcs, tag rows ``count (n+1)``)."""

    def __init__(self, families: Sequence[FactorFamily], valid: np.ndarray, taglink: TagLink, chain: TagChain,
                 emissions: np.ndarray, clip: float, tape: list[Update] | None = None) -> None:
        self.families, self.valid, self.taglink, self.chain, self.clip = families, valid, taglink, chain, clip
        self.tape = tape  # every update in order, what it read and where the clip was inactive (reverse mode)
        self.allowed = taglink.allowed
        self.count = 1 if valid.ndim == 2 else len(valid)
        rows = np.arange(self.allowed.shape[0])
        self.words = rows[rows % (taglink.n + 1) != 0]  # the tag rows of words (not ROOT)
        self.packed = [f.initial_packed() for f in families]
        self.b = np.zeros(valid.size)
        for f, m in zip(families, self.packed, strict=True):
            self.b += f.scatter_flat(m)
        self.tags = np.where(self.allowed, emissions, -np.inf)
        self.read_b, self.read_tags = self.b, self.tags  # what updates read: the live beliefs (serial), or not
        g = self.allowed.shape[1]
        self.to_link = np.zeros(taglink.size)
        self.to_head = np.zeros((taglink.size, g))
        self.to_dep = np.zeros((taglink.size, g))
        self.to_chain_tags = np.zeros(self.tags.shape)
        self.update_chain()
        start = (np.zeros(taglink.size), self.tags[taglink.heads], self.tags[taglink.deps])
        link, _, _ = taglink.propagate(*start)
        if tape is not None:
            tape.append(Update("taglink", 0, start, np.abs(link) < clip, initial=True))
        self._set_links(link)

    def _set_links(self, new: np.ndarray) -> None:
        new = np.minimum(np.maximum(new, -self.clip), self.clip)
        self.b[self.taglink.flat] += new - self.to_link
        self.to_link = new

    def update_family(self, i: int) -> None:
        f = self.families[i]
        incoming = f.gather_flat(self.read_b) - self.packed[i]
        raw = f.propagate_flat(incoming)
        if self.tape is not None:
            self.tape.append(Update("family", i, (incoming,), np.abs(raw) < self.clip))
        new = np.minimum(np.maximum(raw, -self.clip), self.clip)
        self.b += f.scatter_flat(new - self.packed[i])
        self.packed[i] = new

    def update_taglink(self) -> None:
        tl = self.taglink
        incoming = (self.read_b[tl.flat] - self.to_link, self.read_tags[tl.heads] - self.to_head,
                    self.read_tags[tl.deps] - self.to_dep)
        link, head, dep = tl.propagate(*incoming)
        if self.tape is not None:
            self.tape.append(Update("taglink", 0, incoming, np.abs(link) < self.clip))
        self._set_links(link)
        change = np.zeros(self.tags.shape)
        k = tl.varying  # the other arcs' tag messages stay 0
        add_rows(change, tl.heads[k], head[k] - self.to_head[k])
        add_rows(change, tl.deps[k], dep[k] - self.to_dep[k])
        self.tags += np.where(self.allowed, change, 0.0)
        self.to_head, self.to_dep = head, dep

    def update_chain(self) -> None:
        new = np.zeros(self.tags.shape)
        w = self.words
        incoming = self.read_tags[w] - self.to_chain_tags[w]
        if self.tape is not None:
            self.tape.append(Update("chain", 0, (incoming,), None))
        new[w] = self.chain.propagate(incoming)
        self.tags += np.where(self.allowed, new - self.to_chain_tags, 0.0)
        self.to_chain_tags = new

    def stage(self, units: Sequence[int]) -> None:
        """Update ``units``, all reading the beliefs as they were before the first (flooding); one unit reads
        the live beliefs."""
        if len(units) > 1:
            self.read_b, self.read_tags = self.b.copy(), self.tags.copy()
        for unit in units:
            self.visit(unit)
        self.read_b, self.read_tags = self.b, self.tags

    def visit(self, unit: int) -> None:
        """Unit 0: TREE (families[0]); 1: TAGLINK; 2: CHAIN; 3 + k: families[1 + k]."""
        if unit == 1:
            self.update_taglink()
        elif unit == 2:
            self.update_chain()
        else:
            self.update_family(0 if unit == 0 else unit - 2)

    def taglink_beliefs(self, arcs: slice = slice(None), width: int | None = None) -> Callable[[], np.ndarray]:
        """TAGLINK's factor beliefs from the messages it would read now (of the factors ``arcs``, their first
        ``width`` slots), as a function that computes them when called (the messages are copied now)."""
        tl = self.taglink
        link_in, head_in = self.b[tl.flat[arcs]] - self.to_link[arcs], self.tags[tl.heads[arcs]] - self.to_head[arcs]
        dep_in = self.tags[tl.deps[arcs]] - self.to_dep[arcs]
        g = self.allowed.shape[1] if width is None else width
        return lambda: tl.on_beliefs(link_in, head_in, dep_in, arcs)[:, :g, :g].copy()

    def probabilities(self) -> tuple[np.ndarray, np.ndarray]:
        """Link beliefs b(L = 1) (flat) and tag beliefs (rows, g) as probabilities."""
        return expit(self.b), np.where(self.allowed, np.exp(normalised(self.tags, self.allowed)), 0.0)

    def results(self, stopped: np.ndarray, tags: np.ndarray, widths: Sequence[int], iterations: int,
                residual: np.ndarray, config: BPConfig, lengths: Sequence[int] | None = None) -> list[JointResult]:
        """The results of the sentences ``stopped`` of the stack as they are now, each as ``run_joint_bp`` of
        that sentence alone returns it: ``tags`` the tag probabilities now, ``widths`` each sentence's own
        number of slots and ``lengths`` its own number of words (the stack's padding is cut off)."""
        rows = self.taglink.n + 1
        total = [f.gather_flat(self.b) - m for f, m in zip(self.families, self.packed, strict=True)]
        bounds = self.taglink.bounds
        out = []
        for j in stopped:
            own = rows if lengths is None else lengths[j] + 1
            valid = (self.valid if self.count == 1 else self.valid[j])[:own, :own]
            log_odds = np.where(valid, self.b.reshape(self.count, rows, rows)[j, :own, :own], -np.inf)
            one = np.array([j])
            messages = [_cropped(f.unpack_part(f.take(m, one)), rows, own)
                        for f, m in zip(self.families, self.packed, strict=True)]
            incoming = [_cropped(f.unpack_part(f.take(m, one)), rows, own)
                        for f, m in zip(self.families, total, strict=True)]
            links = BPResult(expit(log_odds), log_odds, messages, incoming, iterations,
                             bool(residual[j] < config.tolerance), float(residual[j]))
            g = widths[j]
            arcs = slice(None) if bounds is None else slice(bounds[j], bounds[j + 1])
            out.append(JointResult(links, tags[j * rows:j * rows + own, :g].copy(), self.taglink_beliefs(arcs, g)))
        return out


def _cropped(messages: tuple[np.ndarray, ...], rows: int, own: int) -> tuple[np.ndarray, ...]:
    """A widened sentence's messages as its own: per-arc arrays (rows, rows) cut to (own, own); per-factor
    arrays as they are."""
    if own == rows:
        return messages
    return tuple(m[:own, :own].copy() if m.shape == (rows, rows) else m for m in messages)


SPREAD = 4  # words by which a stack's sentences may differ in length (``joint_chunks``; 0: one length)

JointGraph = tuple[Sequence[FactorFamily], np.ndarray, TagLink, TagChain, np.ndarray]
"""One sentence's joint graph: its link families (TREE first, no LINK), valid-arc mask, TAGLINK, CHAIN and
TAG emissions (``run_joint_bp``'s arguments)."""


def run_joint_bp(families: Sequence[FactorFamily], valid: np.ndarray, taglink: TagLink, chain: TagChain,
                 emissions: np.ndarray, config: BPConfig | None = None) -> JointResult:
    """BP on one sentence's joint graph: ``families`` the link families with TREE first (no LINK: TAGLINK
    holds the arc scores), ``emissions`` (n+1, g) the TAG log-potentials (row 0 ROOT). Damping and tapes
    are not supported (ValueError). ``config``: BP's defaults when None."""
    return run_joint_bp_many([(families, valid, taglink, chain, emissions)], config)[0]


def run_joint_bp_many(graphs: Sequence[JointGraph], config: BPConfig | None = None,
                      spread: int = SPREAD) -> list[JointResult]:
    """``run_joint_bp`` on each of ``graphs``, in order: the sentences of one length with the same family
    classes run as one stack (``engine.inference.bp.stack_chunks``: every update one set of array operations
    for the whole stack), each stopping on its own test and reported as it was when it stopped, so each
    result is its sentence's alone up to rounding (a stack of tree factors takes the batched Matrix-Tree
    kernel; tests/engine/inference/test_joint_bp_stack.py)."""
    config = config or BPConfig()
    if config.damping or config.keep_tape:
        raise ValueError("joint BP over tags has no damping and no tape")
    results: list[JointResult | None] = [None] * len(graphs)
    for chunk, size in joint_chunks(graphs, spread):
        parts = [widened(graphs[j], size) for j in chunk]
        families, valid = stack_graphs([(p[0], p[1]) for p in parts])
        width = max(p[4].shape[1] for p in parts)
        emissions = np.concatenate([pad_slots(p[4], width, -np.inf) for p in parts])
        lengths = [graphs[j][1].shape[0] - 1 for j in chunk]
        run = _run(families, valid, TagLink.stack([p[2] for p in parts]), TagChain.stack([p[3] for p in parts]),
                   emissions, [p[4].shape[1] for p in parts], config, lengths=lengths)
        for j, result in zip(chunk, run, strict=True):
            results[j] = result
    return results  # type: ignore[return-value]


def joint_chunks(graphs: Sequence[JointGraph], spread: int = SPREAD,
                 stack_messages: int = STACK_MESSAGES) -> list[tuple[list[int], int]]:
    """Groups of ``graphs`` (indices) to run as one stack, each with the length its sentences are widened to:
    ``stack_chunks``' groups of one length, except that graphs whose families can all be widened (``widened``)
    join sentences up to ``spread`` words longer (and, past ``2 spread`` words, up to half as long again) of
    the same family classes, at most about ``stack_messages`` messages (arcs plus factors, counted at the
    widened length) per group. A stack's cost is mostly numpy's per-call overhead, which a group pays once."""
    chunks: list[tuple[list[int], int]] = []
    keyed: dict[tuple[object, ...], list[int]] = {}
    fixed: list[int] = []
    for j, graph in enumerate(graphs):
        if spread and all(_widens(f) for f in graph[0]):
            keyed.setdefault(tuple((type(f), f.name) for f in graph[0]), []).append(j)
        else:
            fixed.append(j)
    for members in keyed.values():
        members.sort(key=lambda j: graphs[j][1].shape[0])
        chunk: list[int] = []
        per_arcs = 0
        for j in members:
            n = graphs[j][1].shape[0] - 1
            arcs = sum(getattr(f, "size", 0) for f in graphs[j][0] if not isinstance(f, ArcFamily))
            if chunk:
                first = graphs[chunk[0]][1].shape[0] - 1
                if n - first <= max(spread, first // 2) and per_arcs + arcs + (len(chunk) + 1) * (n + 1) ** 2 \
                        <= stack_messages:
                    chunk.append(j)
                    per_arcs += arcs
                    continue
                chunks.append((chunk, graphs[chunk[-1]][1].shape[0] - 1))
            chunk, per_arcs = [j], arcs
        if chunk:
            chunks.append((chunk, graphs[chunk[-1]][1].shape[0] - 1))
    sub = [graphs[j] for j in fixed]
    for group in stack_chunks([(g[0], g[1]) for g in sub], stack_messages=stack_messages):
        chunks.append(([fixed[i] for i in group], sub[group[0]][1].shape[0] - 1))
    return chunks


def _widens(family: FactorFamily) -> bool:
    """Whether a family can join a stack of longer sentences (``widened``): TREE (not PTREE) and pairwise."""
    return (isinstance(family, Tree) and not family.projective) or isinstance(family, PairFamily)


def widened(graph: JointGraph, size: int) -> JointGraph:
    """A sentence's joint graph inside a stack of sentences of ``size`` words: every factor widened (the words
    past its own are padding, with no link variable and one tag slot, as ROOT's), the TAG emissions of the
    padding 0 on that slot. Each factor's messages to the real variables are its own (``Tree.widened``,
    ``TagChain.widened``), so BP on the stack is BP on the sentence."""
    families, valid, taglink, chain, emissions = graph
    if valid.shape[0] == size + 1:
        return graph
    pad = np.full((size + 1 - len(emissions), emissions.shape[1]), -np.inf)
    pad[:, 0] = 0.0
    return ([f.widened(size) for f in families], pad_arcs(valid, size),  # type: ignore[attr-defined]
            taglink.widened(size), chain.widened(size), np.vstack([emissions, pad]))


def _run(families: Sequence[FactorFamily], valid: np.ndarray, taglink: TagLink, chain: TagChain,
         emissions: np.ndarray, widths: Sequence[int], config: BPConfig,
         tape: list[Update] | None = None, lengths: Sequence[int] | None = None) -> list[JointResult]:
    """BP on one stack (or one sentence); the module docstring's schedule and stopping rule per sentence.
    ``tape``: a list that receives every update (one sentence, ``engine.inference.joint_bp_backward``)."""
    state = _State(families, valid, taglink, chain, emissions, config.clip, tape)
    plan = stages(len(families) + 2, config.schedule)
    links, tags = state.probabilities()
    count = state.count
    out: list[JointResult | None] = [None] * count
    running = np.ones(count, dtype=bool)
    last: list[int] = []
    for iteration in range(1, config.max_iterations + 1):
        for stage in plan:
            if stage != last or len(stage) > 1:  # a unit right after itself reads what it read last time
                state.stage(stage)
            last = stage
        new_links, new_tags = state.probabilities()
        residual = np.maximum(np.abs(new_links - links).reshape(count, -1).max(axis=1, initial=0.0),
                              np.abs(new_tags - tags).reshape(count, -1).max(axis=1))
        links, tags = new_links, new_tags
        stop = running & ((residual < config.tolerance) | (iteration == config.max_iterations))
        if stop.any():
            stopped = np.flatnonzero(stop)
            for j, result in zip(stopped, state.results(stopped, tags, widths, iteration, residual, config, lengths),
                                 strict=True):
                out[j] = result
            running &= ~stop
            if not running.any():
                break
    return out  # type: ignore[return-value]
