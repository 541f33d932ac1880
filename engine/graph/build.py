"""Build one sentence's factor graph from a model's weights and features.

The graph is TREE or PTREE (hard, global) + LINK (first-order scores) + the requested higher-order
families (GRAND, SIB; later CHILDSEQ, NOCROSS) over the arcs kept by pruning, or, for decoding a
first-order model under other hard constraints (Smith & Eisner Table 3), LINK + NOT2 / ATMOST1 /
EXACTLY1 / NO2CYCLE instead of TREE.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from engine.features.extract import Tokens
from engine.features.second_order import TripleTemplate, extract_triples
from engine.graph.family import FactorFamily
from engine.graph.hard import AtMost1, Exactly1, Link
from engine.graph.pairwise import PairFamily, grand_arcs, hard_pairs, no2cycle_arcs, not2_arcs, sib_arcs
from engine.graph.tree import Tree

SOFT_FAMILIES = ("grand", "sib")
CONSTRAINTS = ("tree", "ptree", "exactly1", "atmost1", "not2", "exactly1+no2cycle")
_ARCS = {"grand": grand_arcs, "sib": sib_arcs}


@dataclass
class SentenceGraph:
    """The factor graph of one sentence plus what a trainer needs to turn beliefs into gradients."""

    n: int
    valid: np.ndarray
    families: list[FactorFamily]
    link: Link
    soft: dict[str, tuple[PairFamily, np.ndarray]] = field(default_factory=dict)  # name -> (family, features)


def triples_of(name: str, arcs: np.ndarray) -> np.ndarray:
    """(3, F) word triples of pairwise factors from their arcs (4, F): GRAND (g, p, c), SIB (h, m, s)."""
    return np.stack([arcs[0], arcs[1], arcs[3]])


def build_graph(
    tokens: Tokens,
    valid: np.ndarray,
    link_scores: np.ndarray,
    weights: np.ndarray,
    templates: dict[str, Sequence[TripleTemplate]],
    *,
    constraint: str = "tree",
    single_root: bool = True,
    offset: int = 0,
) -> SentenceGraph:
    """Factor graph for one sentence; ``link_scores`` (n+1, n+1) are the first-order arc scores.

    Higher-order features are hashed into ``weights[offset:]`` (their own block of the weights)."""
    if constraint not in CONSTRAINTS:
        raise ValueError(f"constraint must be one of {CONSTRAINTS}, got {constraint!r}")
    n = len(tokens.forms)
    families: list[FactorFamily] = []
    if constraint in ("tree", "ptree"):
        families.append(Tree(n, valid, projective=constraint == "ptree", single_root=single_root))
    elif constraint.startswith("exactly1"):
        families.append(Exactly1(n, valid))
    elif constraint == "atmost1":
        families.append(AtMost1(n, valid))
    else:
        families.append(hard_pairs(n, valid, not2_arcs(n, valid), "not2"))
    if constraint == "exactly1+no2cycle":
        families.append(hard_pairs(n, valid, no2cycle_arcs(n, valid), "no2cycle"))
    link = Link(n, valid, np.where(valid, link_scores, 0.0))
    families.append(link)
    graph = SentenceGraph(n, valid, families, link)
    for name, family_templates in templates.items():
        if name not in _ARCS or not family_templates:
            continue
        arcs = _ARCS[name](n, valid)
        feats = extract_triples(tokens, family_templates, triples_of(name, arcs), len(weights) - offset) + offset
        theta = weights[feats].sum(axis=1) if feats.shape[0] else np.zeros(0)
        fam = PairFamily(n, valid, arcs, theta, name)
        families.append(fam)
        graph.soft[name] = (fam, feats)
    return graph
