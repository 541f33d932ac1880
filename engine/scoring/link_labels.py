"""Labels inside the factor graph: label-aware LINK factors (Smith & Eisner 2008 §3.1, "link roles").

Smith & Eisner add a variable ``L_hrm`` per link and role ("true iff there is a link h -> m labeled with role
r"), tied to ``L_hm`` by a hard constraint: exactly one role when the link is on, none when it is off. Every other
factor (TREE, GRAND, SIB, TAGLINK, ...) reads only whether the link is on, so the roles can be summed out
exactly into the link's own unary factor:

    LINK_hm(on) = exp(s(h, m)) * sum_r exp(u(h, m, r)),    LINK_hm(off) = 1

with ``u(h, m, r) = V[:, r] . g(h, m)`` the score of role ``r`` on the arc, and after BP the belief that the link
is on with role r is ``b(L_hm = on) * softmax(u(h, m, .))_r``. So a link's head and its label are inferred
together: the label scores move the link beliefs through ``log sum_r exp u`` (an arc whose dependent takes no
label well is less likely), and the label distribution a parse reports comes from the same beliefs.

``g(h, m)`` are the arc-local templates of the log-linear labeller (``engine.features.labeler_features``: the
dependent's and the head's word, tags, suffix, neighbouring tags, direction, distance, punctuation, position),
hashed into ``buckets`` rows of ``V (buckets, R)``; templates that read the rest of a tree (children, siblings,
the head's head, first-stage labels) are not arc-local and are left out. Training (``engine.training.surrogate``)
maximises the surrogate likelihood of the gold tree *and its labels*: the link weights get ``b(L_hm) - y_hm`` as
before, the role weights ``b(L_hm) softmax(u)_r - y_hm [r = gold label of m]`` on each kept arc's features
(``gradient_rows``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from engine.features.labeler_features import DEFAULT_TEMPLATES, CompiledTemplates, Tokens, touched_design
from engine.features.labeler_kernel import add_row_scores
from engine.model.widen import HALF_VALUES, kernel_table
from engine.scoring.hidden import marginalise_clusters

# Atoms a template may read and still be a function of (h, m) alone.
_TREE_ATOMS = ("children", "lc_", "rc_", "deprel")
LINK_LABEL_BUCKETS = 1 << 17  # rows of V, as the pipeline's labeller (engine.training.pipeline.LABELER_BUCKETS)
ROLE_LEARNING_RATE = 0.2  # AdaGrad's rate for V during surrogate training, the log-linear labeller's default


def arc_local(templates: Sequence[Sequence[str]] = DEFAULT_TEMPLATES) -> tuple[tuple[str, ...], ...]:
    """The templates that read only the arc's two words and the arc itself (no child, sibling, grandparent or
    first-stage label)."""
    def local(atom: str) -> bool:
        return atom[:2] not in ("c.", "s.", "g.") and not any(t in atom for t in _TREE_ATOMS)
    return tuple(tuple(t) for t in templates if all(local(a) for a in t))


@dataclass
class LinkLabels:
    """The role model of label-aware LINK factors: ``labels`` (R), arc-local ``templates``, weights
    ``(buckets, R)``."""

    labels: list[str]
    weights: np.ndarray
    templates: tuple[tuple[str, ...], ...] = field(default_factory=arc_local)
    _compiled: CompiledTemplates | None = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.weights.ndim != 2 or self.weights.shape[1] != len(self.labels):
            raise ValueError(f"role weights must be (buckets, {len(self.labels)}), got {self.weights.shape}")
        buckets = self.weights.shape[0]
        if buckets < 2 or buckets & (buckets - 1):
            raise ValueError(f"role weight rows must be a power of two, got {buckets}")
        if arc_local(self.templates) != tuple(tuple(t) for t in self.templates):
            raise ValueError("label-aware LINK factors take arc-local templates only (see arc_local)")

    @classmethod
    def new(cls, labels: Sequence[str], buckets: int = LINK_LABEL_BUCKETS) -> LinkLabels:
        return cls(sorted(labels), np.zeros((buckets, len(labels))))

    @property
    def compiled(self) -> CompiledTemplates:
        if self._compiled is None:
            self._compiled = CompiledTemplates(self.templates)
        return self._compiled

    def arc_ids(self, sentence: Tokens, heads: np.ndarray, deps: np.ndarray) -> np.ndarray:
        """Feature rows (A, width) of the arcs ``heads[a] -> deps[a]`` of one sentence (any arcs, each dependent
        a word, no word its own head): ``arc_ids_many`` of one sentence."""
        return self.arc_ids_many([sentence], [(heads, deps)])[0]

    def arc_ids_many(self, sentences: Sequence[Tokens],
                     arcs: Sequence[tuple[np.ndarray, np.ndarray]]) -> list[np.ndarray]:
        """``arc_ids`` of many sentences in one extraction. The labeller's extraction reads one head per word, so
        a sentence's arcs go in rounds: round k gives every word its k-th arc (ROOT when it has fewer); the
        templates are arc-local, so what the rest of such a "tree" holds never enters a feature. Copies of a
        sentence are consecutive, so its words are hashed once (``labeler_features._word_columns``)."""
        copies: list[Tokens] = []
        tables: list[np.ndarray] = []
        plans = []
        words = 0
        for sentence, (heads, deps) in zip(sentences, arcs, strict=True):
            n = len(sentence.forms)
            heads, deps = np.asarray(heads, dtype=np.int64), np.asarray(deps, dtype=np.int64)
            order = np.lexsort((heads, deps))
            d_sorted = deps[order]
            rank = np.arange(len(order)) - np.searchsorted(d_sorted, d_sorted, side="left")  # among its dependent's
            rounds = int(rank.max()) + 1 if len(order) else 0
            table = np.zeros((rounds, n + 1), dtype=np.int64)  # a word without a k-th arc: ROOT stands in, unread
            table[rank, d_sorted] = heads[order]
            plans.append((words, n, order, rank, d_sorted))  # the first row of its rounds' words
            words += rounds * n
            copies.extend([sentence] * rounds)
            tables.extend(table)
        ids = self.compiled.chunked_ids(copies, tables, self.weights.shape[0])
        out = []
        for start, n, order, rank, d_sorted in plans:
            rows = np.empty((len(order), ids.shape[1]), dtype=np.int32)
            rows[order] = ids[start + rank * n + (d_sorted - 1)]
            out.append(rows)
        return out

    def scores(self, ids: np.ndarray) -> np.ndarray:
        """(A, R) role scores ``u``: the sum of the weight rows of each arc's features, added in float64 in the
        row's feature order whatever the stored type (``add_row_scores``; float16 read as stored)."""
        weights = self.weights
        if weights.dtype not in (np.float16, np.float32, np.float64):
            weights = weights.astype(np.float64)
        out = np.zeros((len(ids), weights.shape[1]))
        add_row_scores(kernel_table(np.ascontiguousarray(weights)), HALF_VALUES, np.ascontiguousarray(ids),
                       np.arange(len(ids)), out)
        return out

    # -- as a labeller of given trees (``engine.decode.labeler``): the same role distributions, read on the tree's
    # arcs; arc-local, so each is softmax(u) of that arc exactly as the factor graph held it

    def distributions(self, sentences: Sequence[Tokens], heads: Sequence[np.ndarray]) -> list[np.ndarray]:
        """``p[m-1, r]``: the role distribution of word m's arc ``heads[m] -> m``, per sentence; rows sum to 1."""
        if not sentences:
            return []
        _, p = summed_out(self.scores(self.compiled.chunked_ids(sentences, heads, self.weights.shape[0])))
        return np.split(p, np.cumsum([len(s.forms) for s in sentences])[:-1])

    def distribution(self, sentence: Tokens, heads: np.ndarray) -> np.ndarray:
        return self.distributions([sentence], [heads])[0]

    def predict_batch(self, sentences: Sequence[Tokens],
                      heads: Sequence[np.ndarray]) -> list[tuple[list[str], np.ndarray]]:
        """The most probable role of each arc of each tree and its probability."""
        out = []
        for p in self.distributions(sentences, heads):
            best = p.argmax(axis=1)
            out.append(([self.labels[i] for i in best], p[np.arange(len(best)), best]))
        return out

    def predict(self, sentence: Tokens, heads: np.ndarray) -> tuple[list[str], np.ndarray]:
        return self.predict_batch([sentence], [heads])[0]

    def to_state(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        meta = {"labels": list(self.labels), "templates": [" ".join(t) for t in self.templates],
                "buckets": int(self.weights.shape[0])}
        return meta, {"link_label_weights": np.asarray(self.weights, dtype=np.float32)}

    @classmethod
    def from_state(cls, meta: dict[str, Any], arrays: dict[str, np.ndarray]) -> LinkLabels:
        templates = tuple(tuple(t.split()) if t else () for t in meta["templates"])
        weights = arrays["link_label_weights"]
        if weights.dtype == np.float16:  # a model stored at half precision: float32 holds each value exactly
            weights = weights.astype(np.float32)
        if weights.shape != (int(meta["buckets"]), len(meta["labels"])):
            raise ValueError(f"link_label_weights have shape {weights.shape}, the manifest says "
                             f"({meta['buckets']}, {len(meta['labels'])})")
        return cls(list(meta["labels"]), weights, templates)


def summed_out(scores: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(log sum_r exp u, softmax(u))`` per arc of the (A, R) role scores: what the LINK factor's potential
    gains, and the role distribution of the arc given that it is on."""
    lse, posterior = marginalise_clusters(scores.T)  # the same sum as latent clusters', over the roles
    return lse, posterior.T


def gradient_rows(ids: np.ndarray, coef: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(rows, grad)``: the gradient ``design(ids).T @ coef`` on the distinct rows the arcs touch (``coef`` (A, R)
    the derivative of the loss w.r.t. each arc's role scores; row 0, the null feature, never appears)."""
    rows, design = touched_design(ids)
    return rows, np.asarray(design.T @ coef)


@dataclass
class ArcRoles:
    """The roles of a sentence's kept arcs, in ``np.nonzero(valid)`` order: the arcs, their feature rows, what
    each LINK potential gains (``lse``) and each arc's role distribution (``probs`` (A, R))."""

    heads: np.ndarray
    deps: np.ndarray
    ids: np.ndarray
    lse: np.ndarray
    probs: np.ndarray


def arc_roles(model: LinkLabels, sentences: Sequence[Tokens], valid: Sequence[np.ndarray]) -> list[ArcRoles]:
    """``ArcRoles`` of the arcs each ``valid[j]`` (n+1, n+1) keeps, for a batch of sentences at once."""
    arcs = [np.nonzero(v) for v in valid]
    ids = model.arc_ids_many(sentences, [(h, d) for h, d in arcs])
    lse, probs = summed_out(model.scores(np.concatenate(ids))) if ids else (np.zeros(0), np.zeros((0, 0)))
    bounds = np.cumsum([len(i) for i in ids])[:-1]
    return [ArcRoles(h, d, i, a, p) for (h, d), i, a, p in
            zip(arcs, ids, np.split(lse, bounds), np.split(probs, bounds), strict=True)]
