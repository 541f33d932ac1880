"""Surrogate CLL training of the joint model of tags and trees (Smith & Eisner 2008 §7 on the tag variables of
§3.4; issue 23).

The joint model (``engine.inference.joint_bp``, ``--tag-average joint``) scores an arc under each candidate
pair of its words' tags with the parser's first-order weights (TAGLINK); a parser trained on 1-best tags never
saw those scores compete, so the sum over tag pairs favours arcs that *some* pair scores high
(docs/joint-tags.md). Training through the new factors fits them: with the words' candidate tags from a
jackknife fold tagger (``engine.text.jackknife.jackknife_candidates``, the gold tags always among them) and BP
run jointly over links and tags, the gradient of the surrogate negative conditional log-likelihood of the gold
(tree, tags) is observed minus expected feature counts, the expectations read from the factor beliefs
(eq. 10):

    grad = sum_{kept arcs h->m} sum_{a, b} (b_hm(L = 1, T_h = a, T_m = b) - y_hm [a = t*_h] [b = t*_m]) f(h, m, a, b)
         + sum_{GRAND, SIB factors} (b_f(on, on) - y_a y_b) f_f + l2 w

with ``b_hm`` TAGLINK's factor belief (``TagLink.on_beliefs``; exact where the graph has no loop, tested
against enumeration and finite differences of log Z), ``f(h, m, a, b)`` the arc's features with the head's and
the dependent's own tags set to candidates ``a`` and ``b`` (``ArcScorer.candidate_gradient``), and ``t*`` the
gold tags. The higher-order factors read the 1-best tags, as at parse time. TAG and CHAIN (the fold tagger's
CRF) are not trained: the tagger stays the pipeline's. AdaGrad, iterate averaging and the best epoch on dev as
in ``engine.training.surrogate``.

``objective="l2"`` trains the same weights approximation-aware instead (Gormley, Dredze & Eisner 2015): the L2
distance of the final link and tag beliefs to the gold, back-propagated through the joint BP iterations
(``joint_l2_gradient_terms``, ``engine.inference.joint_bp_backward``); with label-aware LINK factors the role
beliefs join the distance (``engine.training.objectives.role_l2``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import asdict
from typing import Any

import numpy as np

from engine.bp_parser import BPParser
from engine.data.batching import length_batches
from engine.graph.build import SentenceGraph
from engine.inference.bp import BPConfig
from engine.inference.joint_bp_backward import joint_backward, joint_forward, joint_l2
from engine.scoring.potentials import add_into
from engine.text.tag_candidates import TagCandidates
from engine.training.cll import TrainConfig, TrainResult, usable_trees
from engine.training.loop import EpochLoop, dev_or_loss
from engine.training.objectives import gold_indicators, role_l2, role_targets
from engine.training.optim import AdaGrad
from engine.training.pruned_once import PrunedOnce
from engine.training.surrogate import (
    RoleSteps,
    gold_head_loss,
    role_gradient_terms,
    soft_gradient_terms,
    soft_theta_terms,
)


def gold_slots(candidates: TagCandidates, upos: Sequence[str], xpos: Sequence[str]) -> np.ndarray:
    """Per word (n+1,; ROOT slot 0) the candidate slot holding its gold (UPOS, XPOS); slot 0 (the 1-best) where
    no candidate does (a gold pair the tagger has no state for: the word trains on its predicted tags)."""
    out = np.zeros(len(upos) + 1, dtype=np.int64)
    for i, (u, x) in enumerate(zip(upos, xpos, strict=True)):
        for c, (cu, cx) in enumerate(zip(candidates.upos[i], candidates.xpos[i], strict=True)):
            if cu == u and cx == x:
                out[i + 1] = c
                break
    return out


def joint_gradient_terms(parser: BPParser, sentence: Any, graph: SentenceGraph, candidates: TagCandidates,
                         gold_heads: np.ndarray, slots: np.ndarray, config: BPConfig, out: np.ndarray,
                         roles: tuple[np.ndarray, list[tuple[np.ndarray, np.ndarray]]] | None = None) -> float:
    """Run joint BP on one sentence's ``graph`` (built under its 1-best tags, gold arcs kept) with its
    ``candidates``; add the surrogate gradient (module docstring) into ``out`` and return the loss, minus the
    log of each word's belief in its gold head (normalised over its heads), as ``surrogate_gradient_terms``.
    ``roles`` = (the words' gold label indices, a list): with label-aware LINK factors, the role gradient of the
    link beliefs joint BP gave (``role_gradient_terms``) is appended to the list and its loss added."""
    result, families = parser.run_joint(sentence, graph, candidates, config)
    heads, deps = np.nonzero(graph.valid)  # TAGLINK's arcs, in the order of result.taglink
    coef = result.taglink.copy()
    gold_arc = np.flatnonzero(gold_heads[deps] == heads)
    coef[gold_arc, slots[heads[gold_arc]], slots[deps[gold_arc]]] -= 1.0
    parser.arc_scorer().candidate_gradient(sentence, candidates.upos, candidates.xpos, heads, deps, coef, out)
    idx, val = soft_gradient_terms(graph, families, result.links.incoming, gold_heads)
    if idx:
        add_into(out, np.concatenate(idx), np.concatenate(val))
    loss = gold_head_loss(graph, result.links.beliefs, gold_heads)
    if roles is not None:
        role_loss, ids, role_coef = role_gradient_terms(graph, result.links.beliefs, gold_heads, roles[0])
        roles[1].append((ids, role_coef))
        loss += role_loss
    return loss


def joint_l2_gradient_terms(parser: BPParser, sentence: Any, graph: SentenceGraph, candidates: TagCandidates,
                            gold_heads: np.ndarray, slots: np.ndarray, config: BPConfig, out: np.ndarray,
                            roles: tuple[np.ndarray, list[tuple[np.ndarray, np.ndarray]]] | None = None) -> float:
    """Approximation-aware training (Gormley, Dredze & Eisner 2015) through joint BP: run it on one sentence with a
    tape (``engine.inference.joint_bp_backward``), score the final link and tag beliefs by L2 against the gold
    (tree, tags) (eq. 12 over every output variable, ``joint_l2``), back-propagate to the TAGLINK and
    higher-order potentials and add their feature-summed adjoints into ``out``; returns the loss. ``roles`` =
    (the words' gold label indices, a list): with label-aware LINK factors the role variables join the L2
    (``role_l2``), and each arc's role-score gradient, directly and through every TAGLINK potential of the arc
    (each holds ``log sum_r exp u``), is appended to the list with the arcs' feature rows."""
    families, valid, taglink, chain, emissions = parser.joint_graph(sentence, graph, candidates)
    result, tape = joint_forward(families, valid, taglink, chain, emissions, config)
    value, g_b, g_t = joint_l2(result, gold_indicators(gold_heads), slots, valid, taglink.allowed)
    arcs = graph.roles if roles is not None else None
    if roles is not None:
        assert arcs is not None, "role terms need a graph with label-aware LINK factors"
        gold, scored = role_targets(arcs.heads, arcs.deps, gold_heads, roles[0], arcs.probs.shape[1])
        on = result.links.beliefs[arcs.heads, arcs.deps]
        role_value, g_on, role_u = role_l2(on, arcs.probs, gold, scored)
        value += role_value
        g_b = g_b.copy()
        g_b[arcs.heads, arcs.deps] += g_on * on * (1.0 - on)  # joint_l2's gradient is in the final log-odds
    grad = joint_backward(families, taglink, chain, tape, g_b, g_t)
    if roles is not None:
        assert arcs is not None
        through = grad.taglink.sum(axis=(1, 2))  # TAGLINK's arcs are graph.valid's, in np.nonzero order, as roles'
        roles[1].append((arcs.ids, through[:, None] * arcs.probs + role_u))
    parser.arc_scorer().candidate_gradient(sentence, candidates.upos, candidates.xpos, taglink.heads, taglink.deps,
                                           grad.taglink, out)
    idx, val = soft_theta_terms(graph, families, grad.families)
    if idx:
        add_into(out, np.concatenate(idx), np.concatenate(val))
    return value


def train_joint(
    parser: BPParser,
    train: Sequence[Any],
    gold_tags: Sequence[tuple[Sequence[str], Sequence[str]]],
    candidates: Sequence[TagCandidates | None],
    config: TrainConfig,
    bp: BPConfig,
    dev_score: Callable[[np.ndarray], float] | None = None,
    progress: bool = True,
    on_batch: Callable[[int, int], None] | None = None,
    objective: str = "cll",
) -> TrainResult:
    """Train ``parser.weights`` in place from their current value (a warm start: the pipeline's parser) on
    ``train`` (sentences carrying their 1-best tags and gold heads), ``gold_tags[i]`` sentence ``i``'s gold
    (UPOS, XPOS) and ``candidates[i]`` its candidate tags (with the gold ones among them); returns the best
    (averaged) weights, also left in ``parser``. ``dev_score``, ``progress``, ``on_batch`` as ``train_cll``.
    ``objective``: ``cll`` (surrogate CLL, the module docstring) or ``l2`` (approximation-aware,
    ``joint_l2_gradient_terms``)."""
    if not (len(train) == len(gold_tags) == len(candidates)):
        raise ValueError("train, gold_tags and candidates must have one entry per sentence")
    if objective not in ("cll", "l2"):
        raise ValueError(f"objective must be cll or l2, got {objective!r}")
    if parser.clusters is not None:
        raise ValueError("joint tag and tree training scores TAGLINK with one weight vector: not with latent edge "
                         "clusters")
    start = time.perf_counter()
    keep, skipped = usable_trees(train, parser.constraint)
    keep = [i for i in keep if candidates[i] is not None]
    sents = [train[i] for i in keep]
    cands = [c for c in (candidates[i] for i in keep) if c is not None]
    slots = [gold_slots(c, *gold_tags[i]) for i, c in zip(keep, cands, strict=True)]
    groups = length_batches([len(s.forms) for s in sents], config.batch_size)
    rng = np.random.default_rng(config.seed)
    parser.weights = w = np.array(parser.weights, dtype=np.float64)  # trained in float64, whatever was stored
    if parser.pruner is not None:  # read as float64 views by the arc scorer of each batch, not converted each time
        parser.pruner = np.array(parser.pruner, dtype=np.float64)
    opt = AdaGrad(len(w), config.learning_rate)
    buffer = np.zeros(len(w))  # every batch's gradient, cleared by the step that reads it
    roles = None if parser.link_labels is None else RoleSteps(parser.link_labels, sents)  # label-aware LINK
    loop = EpochLoop([w] if roles is None else [w, roles.roles.weights], total_batches=config.epochs * len(groups),
                     total_epochs=config.epochs, average=config.average, progress=progress, on_batch=on_batch,
                     interruptible=True)
    total = loop.sum_of(0)  # the step adds each iterate to the epoch's average itself
    pruned = PrunedOnce(parser, link_features=False)  # each batch's pruned arcs, found at its first step

    def step(g: int) -> list[float]:
        batch = [sents[i] for i in groups[g]]
        losses = []
        role_terms: list[tuple[np.ndarray, np.ndarray]] = []
        for graphs in parser.graph_batches(batch, gold=True, batch_size=len(batch), link_features=False,
                                           kept=pruned(g, batch)):
            for i, graph, _ in graphs:
                k = groups[g][i]
                if objective == "l2":
                    losses.append(joint_l2_gradient_terms(parser, batch[i], graph, cands[k], batch[i].heads, slots[k],
                                                          bp, buffer,
                                                          None if roles is None else (roles.gold[k], role_terms)))
                    continue
                losses.append(joint_gradient_terms(parser, batch[i], graph, cands[k], batch[i].heads, slots[k], bp,
                                                   buffer, None if roles is None else (roles.gold[k], role_terms)))
        buffer[0] = 0.0
        share = config.l2 * (len(batch) / len(sents))
        opt.step(w, buffer, share, clear=True, accumulate=total)
        if roles is not None:
            roles.step([ids for ids, _ in role_terms], [coef for _, coef in role_terms], share)
        return losses

    evaluate = dev_or_loss(dev_score)
    loop.run(config.epochs, lambda: rng.permutation(len(groups)), step,
             evaluate if roles is None else roles.evaluating(evaluate), per=max(len(sents), 1))
    out = loop.result()
    parser.weights = out.params[0]
    if roles is not None:
        roles.roles.weights = out.params[1]
    return TrainResult(out.params[0], out.best_epoch, out.history, out.interrupted, skipped,
                       time.perf_counter() - start,
                       {**asdict(config), "bp": asdict(bp),
                        "objective": "joint-surrogate-cll" if objective == "cll" else "joint-l2"},
                       None if roles is None else out.params[1])
