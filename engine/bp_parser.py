"""The BP parser (Smith & Eisner 2008): first-order pruning -> factor graph -> loopy BP -> beliefs ->
MBR tree (maximum spanning tree under the beliefs b(L[h, m] = true), Gormley et al. 2015 fn. 3).

A second-order model is one hashed weight vector for its first-order (LINK) and higher-order (GRAND,
SIB) templates, plus the weights of the first-order model used for pruning. A first-order model can
be run through BP too (LINK + TREE gives its exact marginals; LINK + another hard constraint gives
the approximate decoders of Smith & Eisner Table 3).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from engine.data.batching import length_batches
from engine.decode.joint_tags import fixed_tags
from engine.decode.labeler import label_arcs, label_many
from engine.decode.tag_marginal import retagged
from engine.features.extract import FeatureExtractor, Tokens
from engine.features.second_order import TripleTemplate
from engine.features.tag_mixture import TagMixture
from engine.graph.build import SentenceGraph, build_graph
from engine.graph.family import all_arcs
from engine.inference.bp import BPConfig, BPResult
from engine.inference.relaxed import InferenceConfig, RelaxedResult, infer_many
from engine.inference.settings import resolve
from engine.joint_parsing import JOINT_PENDING, JointParsing, timed
from engine.kernels.exact import TreeConstraint, exact_marginals
from engine.kernels.mbr import mbr_decode
from engine.model.store import ModelError, StoredModel, half_precision, load_model, read_manifest, save_model
from engine.model.widen import Widened, kernel_array, loaded
from engine.parser import FirstOrderParser, hidden_clusters, load_common, model_manifest
from engine.results import UNLABELLED, ParsedSentence, TreeDistribution
from engine.scoring.fused import ArcScorer, narrowest_exact, stored_table
from engine.scoring.hidden import cluster_blocks, flat_cluster_weights, marginalise_clusters
from engine.scoring.kept_features import arc_features, kept_link_scores, kept_listed_scores
from engine.scoring.link_labels import LinkLabels, arc_roles
from engine.scoring.potentials import arc_scores
from engine.scoring.pruning import PruneConfig, prune_arcs
from engine.scoring.upos_triples import UposTable, upos_table
from engine.text.tag_candidates import TagCandidates

Pruned = tuple[np.ndarray, np.ndarray]  # a sentence's pruner MBR heads (n+1,) and kept arcs (n+1, n+1) bool


@dataclass
class BPParser(JointParsing):
    """``weights[:extractor.dim]`` score first-order features, ``weights[extractor.dim:]`` the
    higher-order ones (a separate hashed block, so the two never collide). With ``clusters`` = K (latent edge
    clusters, Smith & Smith 2007 §5.1; ``engine.scoring.hidden``) the first ``K * extractor.dim`` weights are K
    first-order blocks, each LINK potential is their marginalised score (eq. 18), and the higher-order block
    follows them (``first_dim``). With ``link_labels`` every LINK factor also ranges over the labels
    (``engine.scoring.link_labels``): its potential gains ``log sum_r exp u(h, m, r)``, and the same role model,
    as the parser's ``labeler``, labels the tree."""

    extractor: FeatureExtractor
    if TYPE_CHECKING:
        weights: np.ndarray  # float64
    else:  # a loaded model's as stored until something reads it (engine.model.widen)
        weights: Widened = Widened()
    constraint: TreeConstraint
    labeler: Any  # see engine.decode.labeler.label_arcs
    templates: dict[str, tuple[TripleTemplate, ...]]
    if TYPE_CHECKING:
        pruner: np.ndarray | None = None  # first-order weights for pruning (None: keep every arc)
    else:
        pruner: Widened = Widened(None)
    prune: PruneConfig = field(default_factory=PruneConfig)
    manifest: dict[str, Any] = field(default_factory=dict)
    decode_constraint: str | None = None  # None: TREE/PTREE as the model was trained
    clusters: int | None = None  # latent edge clusters per arc (None: none)
    link_labels: LinkLabels | None = None  # label-aware LINK factors (None: labels from ``labeler`` afterwards)
    _scorer: ArcScorer | None = field(default=None, repr=False, compare=False)
    _blocks: tuple[np.ndarray, list[np.ndarray]] | None = field(default=None, repr=False, compare=False)
    _factor_block: tuple[np.ndarray, np.ndarray, dict[str, UposTable | None] | None] | None = field(
        default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.link_labels is not None:
            self.labeler = self.link_labels  # labels come from the graph's own role model

    def factor_weights(self) -> tuple[np.ndarray, int]:
        """The weights the higher-order factors read and the offset of their block in them: a loaded model's (read-only)
        higher-order block alone, in the narrowest type that holds it exactly (float16 or float32: 8-17 MB for the
        shipped models instead of 34, so lookups stay in cache; the sums are float64 and the same), else as they are."""
        weights = kernel_array(self, "weights")
        if weights.flags.writeable:
            return weights, self.first_dim
        if self._factor_block is None or self._factor_block[0] is not weights:
            narrow = narrowest_exact(weights[self.first_dim:])
            narrow.flags.writeable = False
            self._factor_block = (weights, narrow, None)
        return self._factor_block[1], 0

    def upos_tables(self) -> dict[str, UposTable | None] | None:
        """Per family, a loaded model's UPOS-only higher-order templates summed on first use (``engine.scoring.
        upos_triples``; float16 blocks only), which parse-time graphs look up; None for writable weights."""
        narrow, _ = self.factor_weights()
        if self._factor_block is None or kernel_array(self, "weights").flags.writeable:
            return None
        if self._factor_block[2] is None:
            tables = {k: upos_table(k, t, narrow) for k, t in self.templates.items()}
            self._factor_block = (*self._factor_block[:2], tables)
        return self._factor_block[2]

    @property
    def first_dim(self) -> int:
        """Where the higher-order block starts: the first-order block's size, times K with clusters."""
        return self.extractor.dim * (self.clusters or 1)

    def _vectors(self) -> list[np.ndarray]:
        """The first-order weight vectors the arc scorer reads (a loaded model's as stored): weights (or their
        K cluster blocks, kept, so that a scorer built for a read-only model's blocks keeps serving them),
        pruner."""
        pruner, weights = kernel_array(self, "pruner"), kernel_array(self, "weights")
        if weights.flags.writeable and pruner is not None and pruner.dtype != np.float64:
            pruner = self.pruner  # trained weights beside a stored pruner: widen it once, not in every scorer
        first = [weights]
        if self.clusters is not None:
            if self._blocks is None or self._blocks[0] is not weights:
                self._blocks = (weights, list(cluster_blocks(weights, self.clusters, self.extractor.dim)))
            first = self._blocks[1]
        return first + ([pruner] if pruner is not None else [])

    def link_and_prune_scores(self, sentences: Sequence[Any]) -> list[np.ndarray]:
        """Arc potentials (B, n+1, n+1) of a batch of one length under the weights (with clusters, their
        marginalised scores, eq. 18) and, if there is one, the pruner, straight from the tokens
        (``engine.scoring.fused``: no feature array)."""
        vectors = self._vectors()
        if self._scorer is None or not self._scorer.serves(vectors):
            self._scorer = ArcScorer(self.extractor, vectors)
        if not sentences:
            return []
        per = self._scorer(sentences)
        if self.clusters is None:
            return per
        return [marginalise_clusters(per[:self.clusters])[0], *per[self.clusters:]]

    def arc_scorer(self) -> ArcScorer:
        """The arc scorer of the current weights (and pruner), built if they changed since the last one."""
        self.link_and_prune_scores([])
        assert self._scorer is not None
        return self._scorer

    @classmethod
    def from_first_order(cls, parser: FirstOrderParser, templates: dict[str, tuple[TripleTemplate, ...]] | None = None,
                         second_dim: int = 0, prune: bool = False, clusters: int | None = None,
                         seed: int = 0) -> BPParser:
        """A BP parser on a first-order model; with ``templates``, a second-order model initialised from it
        (first-order weights copied, ``second_dim`` zero weights for the new features, pruned by it). With
        ``clusters`` = K > 1, K first-order blocks, each the model's weights plus symmetry-breaking noise drawn
        from ``seed`` (``flat_cluster_weights``)."""
        if parser.clusters is not None:
            raise ValueError("a first-order model with latent edge clusters cannot start or prune a BP parser "
                             "(start from one without: the BP model's clusters grow from its weights)")
        if clusters is not None and clusters < 2:
            raise ValueError(f"clusters must be at least 2 (None for none), got {clusters}")
        first = parser.weights if clusters is None else flat_cluster_weights(parser.weights, clusters, seed)
        weights = np.concatenate([first, np.zeros(second_dim)])
        pruner = parser.weights.copy() if prune else None
        return cls(parser.extractor, weights, parser.constraint, parser.labeler, templates or {}, pruner,
                   PruneConfig(), dict(parser.manifest), clusters=clusters)

    @property
    def graph_constraint(self) -> str:
        return self.decode_constraint or ("ptree" if self.constraint.projective else "tree")

    def mixed_link_scores(self, sentences: Sequence[Any], mixtures: Sequence[TagMixture | None],
                          link: np.ndarray, valid: Sequence[np.ndarray]) -> np.ndarray:
        """The link scores ``link`` (B, n+1, n+1) of a batch of one length under the sentences' own tags, with
        each sentence's kept arcs (``valid``) averaged over the taggings of its ``mixtures`` entry,
        ``s + sum_c w_c (s_c - s)``: only the kept arcs of each copy are scored, and of those only the ones
        whose features the copy's tags change (``ArcScorer.copy_scores``). The arcs pruning removed keep
        their own-tag scores (the graph never reads them)."""
        copies: list[Any] = []
        owner: list[int] = []
        weight: list[float] = []
        jobs: list[np.ndarray] = []
        for j, m in enumerate(mixtures):
            if m is None or not m.copies:
                continue
            h, d = np.nonzero(valid[j])
            for c, w in zip(m.copies, m.weights[1:], strict=True):
                jobs.append(np.stack([np.full(len(h), len(copies)), h, d, np.full(len(h), j)], axis=1))
                copies.append(c)
                owner.append(j)
                weight.append(w)
        if not copies:
            return link
        arcs = np.concatenate(jobs)
        own = link[arcs[:, 3], arcs[:, 1], arcs[:, 2]]
        if self.clusters is not None:  # every arc of every copy, marginalised over the clusters
            theirs = self.link_and_prune_scores(copies)[0][arcs[:, 0], arcs[:, 1], arcs[:, 2]]
        else:
            self.link_and_prune_scores([])  # builds the scorer for these weights if needed
            assert self._scorer is not None
            theirs = self._scorer.copy_scores(sentences, copies, np.array(owner), arcs[:, :3], own)
        out = link.copy()
        np.add.at(out, (arcs[:, 3], arcs[:, 1], arcs[:, 2]), np.array(weight)[arcs[:, 0]] * (theirs - own))
        return out

    def graphs(self, sentences: Sequence[Any], *, gold: bool = False, batch_size: int = 64,
               kept: Sequence[Pruned] | None = None) -> Iterator[tuple[int, SentenceGraph, np.ndarray]]:
        """(index, factor graph, pruner MBR heads) per sentence; ``gold`` keeps the gold arcs."""
        for batch in self.graph_batches(sentences, gold=gold, batch_size=batch_size, kept=kept):
            yield from batch

    def gold_pruned(self, sentences: Sequence[Any], *, batch_size: int = 64, link_features: bool = True,
                    ) -> list[Pruned]:
        """Per sentence, what ``graph_batches(sentences, gold=True, batch_size=batch_size, link_features=...)``
        prunes: the pruner's MBR heads and the arcs kept (the gold arcs among them). The pruner does not change
        while the weights train, so a trainer finds them once and passes them back as ``kept``."""
        out: list[Pruned] = [(np.empty(0), np.empty(0))] * len(sentences)
        for idx in length_batches([len(s.forms) for s in sentences], batch_size):
            chosen = [sentences[i] for i in idx]
            if self.pruner is None:
                scores = None
            elif link_features:  # scored as graph_batches scores the links it keeps features of
                scores = arc_scores(self.pruner, arc_features(self.extractor, chosen))
            else:
                scores = ArcScorer(self.extractor, self._vectors()[-1:])(chosen)[0]
            for i, pair in zip(idx, self._pruned(chosen, scores, len(chosen[0].forms) + 1, True), strict=True):
                out[i] = pair
        return out

    def graph_batches(self, sentences: Sequence[Any], *, gold: bool = False, batch_size: int = 64,
                      mixtures: Sequence[TagMixture | None] | None = None, link_features: bool = True,
                      kept: Sequence[Pruned] | None = None) -> Iterator[list[tuple[int, SentenceGraph, np.ndarray]]]:
        """``graphs`` in batches of sentences of one length (features are extracted per batch, and BP
        runs a batch's graphs stacked: ``engine.inference.relaxed.infer_many``). With ``gold`` (training)
        each graph keeps its first-order feature indices (``link_features``); without, the potentials come
        straight from the tokens (``link_and_prune_scores``, the same values). ``mixtures[i]``: the
        taggings whose potentials sentence ``i``'s graph averages (inference only): its link and higher-order
        potentials; the pruner reads the sentence's own tags (on EWT dev averaging its scores too changed
        UAS by 0.004 and LAS by 0, at the cost of scoring every arc of every copy). ``link_features=False``
        with ``gold``: the graphs keep the gold arcs but not their first-order features (a trainer that
        scores the arcs itself, ``engine.training.joint``). With ``gold`` and link features, a graph's
        ``link_features`` are its kept arcs' rows only (``engine.scoring.kept_features``); ``kept[i]``, when
        given with ``gold``, is sentence ``i``'s ``gold_pruned`` entry: the pruner is not run again, and only the
        kept arcs are scored."""
        if gold and mixtures is not None:
            raise ValueError("tag mixtures are for inference; training graphs keep the gold tags")
        for idx in length_batches([len(s.forms) for s in sentences], batch_size):
            chosen = [sentences[i] for i in idx]
            feats = posterior = None
            if gold and link_features:  # the kept arcs' features and potentials, which training reads
                pruned = [kept[i] for i in idx] if kept is not None else self.gold_pruned(chosen, batch_size=len(idx))
                link, feats, posterior = kept_link_scores(self.extractor, self.weights, self.clusters, chosen,
                                                          [valid for _, valid in pruned])
            elif gold and kept is not None and self.clusters is None:  # the kept links' potentials alone
                pruned = [kept[i] for i in idx]
                link = kept_listed_scores(self.arc_scorer(), chosen, [valid for _, valid in pruned])
            else:
                scores = self.link_and_prune_scores(chosen)
                link = scores[0]
                pruned = self._pruned(chosen, scores[1] if len(scores) > 1 else None, link.shape[-1], gold)
            mix = None if mixtures is None else [mixtures[i] for i in idx]
            if mix is not None:
                link = self.mixed_link_scores(chosen, mix, link, [valid for _, valid in pruned])
            weights, offset = (self.weights, self.first_dim) if gold else self.factor_weights()
            tables = None if gold or mix is not None else self.upos_tables()  # (tag copies hash their deltas)
            roles = None
            if self.link_labels is not None:  # the roles summed into each kept link's potential
                roles = arc_roles(self.link_labels, chosen, [valid for _, valid in pruned])
                for j, r in enumerate(roles):
                    link[j][r.heads, r.deps] += r.lse
            batch = []
            for j, i in enumerate(idx):
                keep, valid = pruned[j]
                graph = build_graph(sentences[i], valid, link[j], weights, self.templates,
                                    constraint=self.graph_constraint, single_root=self.constraint.single_root,
                                    offset=offset, mixture=None if mix is None else mix[j], tables=tables)
                graph.roles = None if roles is None else roles[j]
                if feats is not None:
                    graph.link_features = feats[j]
                    if posterior is not None:
                        graph.link_posterior = posterior[j]
                batch.append((i, graph, keep))
            yield batch

    def _pruned(self, sentences: Sequence[Any], prune_scores: np.ndarray | None, n1: int,
                gold: bool) -> list[tuple[np.ndarray, np.ndarray]]:
        """Per sentence of a batch of one length: the pruner's MBR heads and the arcs it keeps (Smith & Eisner
        2008 §9.1; every arc without a pruner); ``gold`` keeps the gold arcs too."""
        if prune_scores is None:
            return [(np.full(n1, -1), all_arcs(n1 - 1)) for _ in sentences]
        _, prune_marg = exact_marginals(prune_scores, self.constraint)
        out = []
        for j, sentence in enumerate(sentences):
            keep = mbr_decode(prune_marg[j], self.constraint)
            valid = prune_arcs(prune_marg[j], self.prune, keep)
            if gold:
                valid[sentence.heads[1:], np.arange(1, n1)] = True
            out.append((keep, valid))
        return out

    def decode(self, tokens: Tokens, graph: SentenceGraph, result: BPResult, labels: bool = True) -> ParsedSentence:
        marg = result.beliefs.copy()
        col = marg[:, 1:].sum(axis=0)
        marg[:, 1:] /= np.where(col > 0, col, 1.0)  # per-word head distribution from the beliefs
        decode_as = self.constraint
        if self.graph_constraint in ("tree", "ptree"):  # decode in the space the tree factor ranges over
            decode_as = TreeConstraint("projective" if self.graph_constraint == "ptree" else "nonprojective",
                                       self.constraint.root)
        heads = mbr_decode(np.where(graph.valid, result.beliefs, -np.inf), decode_as)
        m = np.arange(1, len(heads))
        deprels, label_probs = label_arcs(self.labeler, tokens, heads) if labels else UNLABELLED
        diag = {"method": "bp", "iterations": result.iterations, "converged": bool(result.converged),
                "residual": float(result.residual), "arcs": int(graph.valid.sum()), "eta": 0.0,
                "factor_fraction": 1.0}
        if isinstance(result, RelaxedResult):  # relaxed or pruned: rounds, factors used, eta (Riedel & Smith)
            diag.update(result.diagnostics())
        dist = None
        if self.graph_constraint in ("tree", "ptree"):  # the tree factor's belief (Smith & Eisner §6)
            tree_scores = np.where(graph.valid, result.incoming[0][0], -np.inf)
            dist = TreeDistribution(tree_scores, decode_as, "bp-tree-factor")
        return ParsedSentence(heads, marg[heads[1:], m], marg, None, deprels, label_probs, diag, dist)

    def parse(self, sentences: Sequence[Tokens], config: InferenceConfig | None = None,
              batch_size: int = 64, labels: bool = True,
              mixtures: Sequence[TagMixture | None] | None = None,
              candidates: Sequence[TagCandidates | None] | None = None) -> list[ParsedSentence]:
        """BP (``BPConfig``; default: ``engine.inference.settings.resolve`` for this model), relaxed BP
        (``RelaxedConfig``) or pruned BP (``PrunedConfig``) per sentence,
        the sentences of one length stacked (``infer_many``); the diagnostics' ``inference_seconds`` is the
        time of inference alone (no features, no decoding), a stack's time shared equally by its sentences.
        Without ``labels`` the parses carry no labels (``UNLABELLED``: for callers that label afterwards).
        ``mixtures[i]``: parse sentence ``i`` over potentials averaged across those taggings (``graph_batches``).
        ``candidates[i]``: parse sentence ``i`` jointly with its tags over those candidates (``parse_joint``; plain
        BP only); its parse carries the tags chosen (``upos``, ``xpos``, ``upos_probs``) and is labelled under them."""
        config = config or resolve("bp", self.manifest)  # the model's BP settings, else BP's defaults
        if candidates is not None and not isinstance(config, BPConfig):
            raise ValueError("joint tagging and parsing runs plain BP (inference bp), not relaxed or pruned BP")
        out: list[ParsedSentence | None] = [None] * len(sentences)
        pending: list[tuple[int, SentenceGraph]] = []  # joint sentences of several batches, parsed together
        size = 0
        for batch in self.graph_batches(sentences, batch_size=batch_size, mixtures=mixtures):
            start = time.perf_counter()
            cands = [None if candidates is None else candidates[i] for i, _, _ in batch]
            # a sentence whose words have one candidate each: TAGLINK is LINK and its tags are fixed (parse_joint)
            joint = [k for k, c in enumerate(cands) if c is not None and c.allowed.shape[1] > 1]
            alone = [k for k in range(len(batch)) if k not in set(joint)]
            results = infer_many([(batch[k][1].families, batch[k][1].valid) for k in alone], config)
            for k, result in zip(alone, results, strict=True):
                out[batch[k][0]] = parsed = self.decode(sentences[batch[k][0]], batch[k][1], result, labels=False)
                fixed = cands[k]
                if fixed is not None:
                    fixed_tags(parsed, fixed)
            seconds = (time.perf_counter() - start) / max(len(alone), 1)
            for k in alone:
                timed(out[batch[k][0]], seconds)  # type: ignore[arg-type]
            pending.extend((batch[k][0], batch[k][1]) for k in joint)
            size += sum(batch[k][1].valid.size + sum(getattr(f, "size", 0) for f in batch[k][1].families)
                        for k in joint)
            if size > JOINT_PENDING:
                self._parse_pending(sentences, pending, candidates, config, mixtures is None, out)
                pending, size = [], 0
        self._parse_pending(sentences, pending, candidates, config, mixtures is None, out)
        if labels and out:  # every sentence's labels in one pass (label_many), as decode would give them
            parsed_all = [p for p in out if p is not None]
            assert len(parsed_all) == len(sentences)
            tagged = [s if p.upos is None else retagged(s, (p.upos, p.xpos or [])) for s, p in
                      zip(sentences, parsed_all, strict=True)]
            for p, (deprels, probs) in zip(parsed_all, label_many(self.labeler, tagged,
                                                                  [p.heads for p in parsed_all]), strict=True):
                p.deprels, p.label_probs = deprels, probs
        return out  # type: ignore[return-value]

    # -- persistence ---------------------------------------------------------------------------
    def save(self, directory: str | os.PathLike[str], extra: dict[str, Any] | None = None,
             arrays: dict[str, np.ndarray] | None = None, half: bool = False) -> None:
        """Write the model; ``arrays`` adds other components' arrays (``engine.pipeline``); ``half`` stores
        large float arrays as float16 (``engine.model.store.half_precision``)."""
        manifest = model_manifest(self.manifest, extra, 2, self.extractor, self.constraint, self.labeler)
        manifest["features"]["second_order"] = {k: [t.name for t in v] for k, v in self.templates.items()}
        manifest["pruning"] = {"ratio": self.prune.ratio, "max_heads": self.prune.max_heads}
        if self.clusters is not None:  # latent edge clusters: K first-order blocks, read back by ``from_stored``
            manifest["hidden"] = {"clusters": self.clusters}
        own = {"weights": self.weights.astype(np.float32)}
        if self.link_labels is not None:  # label-aware LINK factors: the role model, read back by ``from_stored``
            manifest["link_labels"], roles = self.link_labels.to_state()
            manifest["labeler"] = {"link_labels": True}
            own.update(roles)
        if self.pruner is not None:
            own["pruner"] = self.pruner.astype(np.float32)
        out = {**own, **(arrays or {})}
        save_model(directory, manifest, half_precision(out) if half else out)

    @classmethod
    def load(cls, directory: str | os.PathLike[str]) -> BPParser:
        return cls.from_stored(directory, load_model(directory))

    @classmethod
    def from_stored(cls, directory: str | os.PathLike[str], stored: StoredModel) -> BPParser:
        man = stored.manifest
        extractor, constraint, labeler = load_common(directory, man)
        try:
            second = {k: tuple(TripleTemplate.parse(t) for t in v)
                      for k, v in man["features"].get("second_order", {}).items()}
            prune = PruneConfig(**man.get("pruning", {}))
        except (KeyError, TypeError, ValueError) as e:
            raise ModelError(f"{directory}: manifest is incomplete or inconsistent ({e})") from e
        clusters = hidden_clusters(directory, man)
        clusters = None if clusters == 1 else clusters
        kept = {k: stored.arrays[k] for k in ("weights", "pruner") if k in stored.arrays}
        for key, arr in kept.items():
            need = extractor.dim * (clusters or 1) if key == "weights" else extractor.dim
            if arr.ndim != 1 or len(arr) < need:
                raise ModelError(f"{directory}: {key} has shape {arr.shape}, the features need at least {need} "
                                 f"entries (feature dimension {extractor.dim}, {clusters or 1} cluster block(s))")
        # read-only as stored: the scorer lays them out once; widened to float64 only if something reads them
        pruner = loaded(kept["pruner"]) if "pruner" in kept else None
        link_labels = None
        if "link_labels" in man:
            try:
                link_labels = LinkLabels.from_state(man["link_labels"], stored.arrays)
            except (KeyError, TypeError, ValueError) as e:
                raise ModelError(f"{directory}: the label-aware LINK factors' role model is incomplete ({e})") from e
        parser = cls(extractor, loaded(kept["weights"]), constraint, labeler, second, pruner, prune, man,
                     clusters=clusters, link_labels=link_labels)
        vectors = parser._vectors()
        table = stored_table(vectors, extractor.dim)
        if table is not None:  # the kernel's table straight from the stored arrays
            parser._scorer = ArcScorer(extractor, vectors, table)
        return parser


def load_any(directory: str | os.PathLike[str], stored: StoredModel | None = None) -> FirstOrderParser | BPParser:
    """A first-order or a BP model, by the ``order`` its manifest records (``stored``: already read)."""
    order = (stored.manifest if stored is not None else read_manifest(directory)).get("order", 1)
    if order in (1, 2):
        stored = stored if stored is not None else load_model(directory)
        return (FirstOrderParser if order == 1 else BPParser).from_stored(directory, stored)
    raise ModelError(f"{directory}: unknown model order {order!r}")
