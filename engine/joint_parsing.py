"""Joint tagging and parsing with the BP parser (Smith & Eisner 2008 §3.4; ``engine.inference.joint_bp``): a
sentence's factor graph with LINK replaced by TAGLINK over its kept arcs, plus TAG and CHAIN from the tagger's CRF
restricted to each word's candidate tags; the parse is the MBR tree of the link beliefs, the tags the MBR tags of
the tag beliefs. ``engine.bp_parser.BPParser`` takes these methods from ``JointParsing``."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from engine.decode.joint_tags import set_tags
from engine.features.extract import Tokens
from engine.graph.build import SentenceGraph
from engine.graph.family import FactorFamily
from engine.graph.tags import joint_factors
from engine.inference.bp import BPConfig, BPResult
from engine.inference.joint_bp import JointGraph, JointResult, run_joint_bp, run_joint_bp_many
from engine.inference.relaxed import InferenceConfig
from engine.results import ParsedSentence
from engine.text.tag_candidates import TagCandidates, first_candidates_are

if TYPE_CHECKING:
    from engine.scoring.fused import ArcScorer

# ``BPParser.parse`` keeps the joint sentences of several length batches (their graphs) until about this many
# messages (arcs and factors) are waiting, then parses them together: stacks can then join nearby lengths
JOINT_PENDING = 1 << 18


def timed(parsed: ParsedSentence, seconds: float) -> None:
    """Record a parse's share of its stack's inference time (``inference_seconds``)."""
    assert parsed.diagnostics is not None
    parsed.diagnostics["inference_seconds"] = seconds


class JointParsing:
    """The joint-tagging methods of ``engine.bp_parser.BPParser``."""

    if TYPE_CHECKING:
        clusters: int | None

        def arc_scorer(self) -> ArcScorer: ...

        def decode(self, tokens: Tokens, graph: SentenceGraph, result: BPResult, labels: bool = True
                   ) -> ParsedSentence: ...

    def _parse_pending(self, sentences: Sequence[Tokens], pending: Sequence[tuple[int, SentenceGraph]],
                       candidates: Sequence[TagCandidates | None] | None, config: InferenceConfig, one_best: bool,
                       out: list[ParsedSentence | None]) -> None:
        """``parse_joint_many`` of the sentences ``pending`` ((index, graph), of any lengths: its stacks join
        sentences of nearby lengths, ``engine.inference.joint_bp.joint_chunks``) into ``out``."""
        if not pending:
            return
        assert candidates is not None
        start = time.perf_counter()
        together = self.parse_joint_many([sentences[i] for i, _ in pending], [g for _, g in pending],
                                         [candidates[i] for i, _ in pending], config,  # type: ignore[misc]
                                         link_is_one_best=one_best)
        seconds = (time.perf_counter() - start) / len(pending)
        for (i, _), parsed in zip(pending, together, strict=True):
            out[i] = parsed
            timed(parsed, seconds)

    def parse_joint(self, sentence: Tokens, graph: SentenceGraph, candidates: TagCandidates,
                    config: InferenceConfig) -> ParsedSentence:
        """One sentence parsed jointly with its tags (Smith & Eisner 2008 §3.4; ``engine.inference.joint_bp``):
        ``graph`` (built under the sentence's 1-best tags) with LINK replaced by TAGLINK over the kept arcs
        (``joint_graph``), plus TAG and CHAIN from the tagger's CRF restricted to the ``candidates``. The tree is
        the MBR tree of the link beliefs (``decode``), the tags the MBR tags of the tag beliefs
        (``engine.decode.joint_tags``); unlabelled (``parse`` labels under the chosen tags)."""
        return self.parse_joint_many([sentence], [graph], [candidates], config)[0]

    def parse_joint_many(self, sentences: Sequence[Tokens], graphs: Sequence[SentenceGraph],
                         candidates: Sequence[TagCandidates], config: InferenceConfig,
                         link_is_one_best: bool = False) -> list[ParsedSentence]:
        """``parse_joint`` of each sentence, their joint BP runs stacked by length (``run_joint_bp_many``: each
        result its sentence's alone, up to rounding); ``link_is_one_best`` as ``joint_graph``."""
        if not isinstance(config, BPConfig):
            raise ValueError("joint tagging and parsing runs plain BP (inference bp), not relaxed or pruned BP")
        joint = [self.joint_graph(s, g, c, link_is_one_best)
                 for s, g, c in zip(sentences, graphs, candidates, strict=True)]
        out = []
        for sentence, graph, cands, result in zip(sentences, graphs, candidates, run_joint_bp_many(joint, config),
                                                  strict=True):
            parsed = self.decode(sentence, graph, result.links, labels=False)
            set_tags(parsed, result.tags, cands)
            assert parsed.diagnostics is not None
            parsed.diagnostics.update(method="bp-joint", tag_candidates=int(cands.allowed.sum()))
            out.append(parsed)
        return out

    def joint_graph(self, sentence: Tokens, graph: SentenceGraph, candidates: TagCandidates,
                    link_is_one_best: bool = False) -> JointGraph:
        """``graph``'s families with LINK replaced by TAGLINK over its kept arcs, whose potentials are the
        first-order weights' scores under each candidate pair of (head, dependent) (``ArcScorer.candidate_scores``:
        the head's and the dependent's own UPOS/XPOS vary, the templates that read other words' tags, context and
        in-between, read the 1-best tags), with CHAIN and the TAG emissions of the ``candidates``
        (``engine.graph.tags.joint_factors``). The higher-order factors read the 1-best tags, as without joint
        tags. ``link_is_one_best``: ``graph``'s LINK potentials are this model's first-order scores under the
        sentence's tags (``graph_batches`` without tag mixtures); where those tags are every word's first
        candidate, the arcs between two one-candidate words take them instead of being scored again."""
        if self.clusters is not None:
            raise ValueError("a model with latent edge clusters parses under given tags or tag samples, not with "
                             "joint tags (TAGLINK scores one weight vector)")
        heads, deps = np.nonzero(graph.valid)
        lse = 0.0 if graph.roles is None else graph.roles.lse  # label-aware links: the roles, under the 1-best tags
        one_best = None
        if link_is_one_best and first_candidates_are(sentence, candidates.upos, candidates.xpos):
            one_best = graph.link.theta[heads, deps] - lse  # the scores of the pair of first candidates
        theta = self.arc_scorer().candidate_scores(sentence, candidates.upos, candidates.xpos, heads, deps, one_best)
        if graph.roles is not None:
            theta = theta + graph.roles.lse[:, None, None]
        taglink, chain, emissions = joint_factors(graph.n, heads, deps, theta, candidates)
        families = [f for f in graph.families if f is not graph.link]
        return families, graph.valid, taglink, chain, emissions

    def run_joint(self, sentence: Tokens, graph: SentenceGraph, candidates: TagCandidates,
                  config: BPConfig) -> tuple[JointResult, list[FactorFamily]]:
        """Joint BP on ``joint_graph`` (the joint trainer, ``engine.training.joint``, reads the same run): the
        result and the link families it ran, in the order of ``result.links.incoming``."""
        joint = self.joint_graph(sentence, graph, candidates)
        return run_joint_bp(*joint, config), list(joint[0])
