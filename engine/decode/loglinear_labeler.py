"""A log-linear dependency labeller: ``p(deprel | head, dependent, sentence, tree)`` for each arc of a tree.

A multinomial logistic regression (maximum-entropy classifier) over hashed conjunction features of the
arc ``h -> m``, in the spirit of the second-stage labellers of McDonald, Lerman & Pereira (2006) and the
"link roles" of Smith & Eisner (2008, §3.1) with the tree given. Features (conjoined with each other as
the ``DEFAULT_TEMPLATES`` list declares):

- head and dependent lowercased form, UPOS, XPOS, suffix-3; the UPOS of the word before and after each;
- arc direction and direction plus binned distance;
- tree context read from the given heads: the dependent's number of children and the UPOS and form of its
  leftmost and rightmost child; the same for the head; the UPOS of the head's own head and the direction of
  the head's arc;
- a punctuation flag (no letter or digit) and the position (first, last, only, middle word).

**Stacking** (``train(..., folds=k)``, the pipeline's default). Labels of one tree depend on each other: a
subject is ``nsubj:pass`` when its head has an ``aux:pass`` child, an object ``iobj`` when a second object
follows, a ``case`` child makes an oblique. A second-stage labeller reads the labels a first-stage labeller
gave the rest of the tree (``deprel`` atoms: the head's own label, its other children's and the dependent's
children's, ``CONTEXT_TEMPLATES``), in the manner of stacked
learning (Wolpert 1992; Nivre & McDonald 2008 stack two parsers the same way). So that training sees
first-stage labels as noisy as at test time, those of the training set are jackknifed: each of ``k``
contiguous folds is labelled by a first stage trained on the others. On EWT dev with gold trees and
predicted tags this lifts label accuracy from 94.83 to 95.07 (docs/results/pipeline.md).

**Tag-sample copies** (``train(..., group=1 + K)``, ``engine train --labeler-tag-samples K``, default 1 in
the pipeline). At parse time the labels are averaged over tag sequences drawn from the tagger's posterior
(``engine.decode.tag_marginal``); a labeller trained only on the best jackknifed tags has rarely seen the
tags such draws hold. The pipeline also trains it on K copies of each sentence under draws from the same
fold tagger, each sentence next to its copies so that stacking's folds keep them together. On the shipped
parser's EWT dev trees with 16 draws, LAS 82.95 -> 83.07 (docs/results/pipeline.md, *Labels under tag uncertainty*).

Every template's value is hashed (``engine.hashing``) into ``buckets`` rows of a weight matrix
``W (buckets, n_labels)``; an arc's label scores are the sum of the rows of its features, and
``p = softmax(scores)``. Training minimises the mean log-loss of the gold labels on gold trees plus
``l2 / 2`` times the squared norm of the rows a mini-batch touches (lazy L2), by AdaGrad (Duchi, Hazan &
Singer 2011) over shuffled mini-batches; with ``dev`` given, the epoch with the best dev label accuracy is
kept. Feature extraction is numpy-vectorised over all words of a batch of sentences (one hash of every
token attribute, then every template at once per arity), so there is no Python loop over arcs or templates;
the attributes, templates and extraction live in ``engine.features.labeler_features``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypedDict

import numpy as np

from engine.features.labeler_features import (  # noqa: F401 (templates re-exported for their users)
    CONTEXT_TEMPLATES,
    DEFAULT_TEMPLATES,
    CompiledTemplates,
    Tokens,
    touched_design,
)
from engine.features.labeler_kernel import row_scores, unique_rows
from engine.model.widen import finite_half
from engine.optim import AdaGrad, EpochLoop
from engine.text.jackknife import fold_bounds  # contiguous folds, as for the tagger

if TYPE_CHECKING:
    from scipy import sparse

log = logging.getLogger(__name__)

STATE_FORMAT = "loglinear-labeler"
STATE_VERSION = 2  # 2: an optional first stage (stacking); version 1 states still load


class _FitSettings(TypedDict):
    """The training settings ``LogLinearLabeler._fit`` takes by keyword (one stage of ``fit``)."""

    epochs: int
    seed: int
    progress: bool
    buckets: int
    learning_rate: float
    l2: float
    batch_size: int


def _softmax(scores: np.ndarray) -> np.ndarray:
    z = scores.astype(np.float64)
    z -= z.max(axis=1, keepdims=True)
    np.exp(z, out=z)
    z /= z.sum(axis=1, keepdims=True)
    return z


def _design(ids: np.ndarray, columns: int) -> sparse.csr_matrix:
    """The 0/1 arc-by-feature matrix of ``ids`` (N, K) (id 0, the null feature, left out), ``columns`` wide."""
    from scipy import sparse  # here: only training uses it, parsing does not

    present = ids != 0
    indptr = np.zeros(len(ids) + 1, dtype=np.int64)
    np.cumsum(present.sum(axis=1), out=indptr[1:])
    return sparse.csr_matrix((np.ones(int(indptr[-1]), dtype=np.float32), ids[present], indptr),
                             shape=(len(ids), columns))


def label_scores(weights: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """(N, n_labels) scores: the sum of the weight rows of each arc's features (a sparse-dense product)."""
    if weights.dtype == np.float16:  # a loaded model's weights as stored: summed in float32, as trained
        weights = weights.astype(np.float32)
    return _design(ids, weights.shape[0]) @ weights


def distinct_probabilities(weights: np.ndarray, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``softmax(label_scores(weights, ids))`` once per distinct feature row, and the row of it each of ``ids``
    has (``label_probabilities`` is ``p[inverse]``). A sentence's copies under other tags share most rows;
    each row's scores and softmax are computed as for the row alone, so the results are the same bit for bit."""
    ids = np.ascontiguousarray(ids)
    if not len(ids):
        return _softmax(label_scores(weights, ids)), np.zeros(0, dtype=np.int64)
    first, inverse = unique_rows(ids)
    if weights.dtype in (np.float16, np.float32, np.float64) and weights.flags.c_contiguous:
        return _softmax(row_scores(weights, ids, first)), inverse
    return _softmax(label_scores(weights, ids[first])), inverse


def label_probabilities(weights: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """(N, n_labels) ``softmax(label_scores(weights, ids))`` (computed by ``distinct_probabilities``)."""
    p, inverse = distinct_probabilities(weights, ids)
    return p[inverse]


def loss_and_gradient(
    weights: np.ndarray, ids: np.ndarray, gold: np.ndarray, l2: float = 0.0
) -> tuple[float, np.ndarray, np.ndarray]:
    """Mean log-loss of ``gold`` labels plus ``l2/2`` x the squared norm of the touched rows, and its gradient.

    Returns ``(loss, rows, grad)``: ``grad[i]`` is the derivative with respect to ``weights[rows[i]]``; rows
    no feature touches (and row 0, the null feature) have zero gradient. ``gold`` entries < 0 (labels unseen
    in training) are skipped.
    """
    keep = gold >= 0
    ids, gold = ids[keep], gold[keep]
    n = len(ids)
    rows, design = touched_design(ids)
    w = weights[rows].astype(np.float64)
    p = _softmax(design @ w)
    loss = float(-np.log(np.maximum(p[np.arange(n), gold], 1e-300)).mean()) if n else 0.0
    g = p
    g[np.arange(n), gold] -= 1.0
    g /= max(n, 1)
    grad = design.T @ g
    if l2:
        loss += 0.5 * l2 * float((w * w).sum())
        grad += l2 * w
    return loss, rows, grad


class LogLinearLabeler:
    """DEPREL of every arc of a given tree with its probability; see the module docstring. ``context`` is the
    first-stage labeller of a stacked model (its labels feed the ``deprel`` templates), or None."""

    def __init__(self, labels: Sequence[str], weights: np.ndarray,
                 templates: Sequence[Sequence[str]] = DEFAULT_TEMPLATES, info: dict[str, Any] | None = None,
                 context: LogLinearLabeler | None = None) -> None:
        weights = np.asarray(weights)
        buckets = weights.shape[0] if weights.ndim == 2 else 0
        if weights.ndim != 2 or weights.shape[1] != len(labels) or buckets < 2 or buckets & (buckets - 1):
            raise ValueError(f"weights must be (buckets = a power of two, {len(labels)} labels), got {weights.shape}")
        if not labels or len(set(labels)) != len(labels):
            raise ValueError("labels must be a non-empty list of distinct strings")
        self.labels = list(labels)
        self.weights = weights
        self.info = dict(info or {})
        self._compiled = CompiledTemplates(templates)
        if self._compiled.needs_context and (context is None or context._compiled.needs_context):
            raise ValueError("templates with deprel atoms need a first-stage labeller without them")
        self.context = context if self._compiled.needs_context else None

    @property
    def templates(self) -> list[tuple[str, ...]]:
        return self._compiled.templates

    @property
    def buckets(self) -> int:
        return int(self.weights.shape[0])

    # ---- features -------------------------------------------------------------------------------

    def first_stage_labels(self, sentences: Sequence[Tokens], heads: Sequence[np.ndarray]) -> list[list[str]] | None:
        """The first stage's labels of every sentence (None for a one-stage labeller)."""
        if self.context is None:
            return None
        return [labels for labels, _ in self.context.predict_batch(sentences, heads)]

    def feature_ids(self, sentences: Sequence[Tokens], heads: Sequence[np.ndarray],
                    context: Sequence[Sequence[str]] | None = None) -> np.ndarray:
        """(total words, n_templates) int32 feature rows of every arc of the given trees, sentence by sentence.
        A stacked labeller reads ``context`` (first-stage labels per sentence; by default its own first
        stage's)."""
        if len(sentences) != len(heads):
            raise ValueError(f"{len(sentences)} sentences but {len(heads)} head arrays")
        if context is None and self._compiled.needs_context:
            context = self.first_stage_labels(sentences, heads)
        return self._compiled.chunked_ids(sentences, heads, self.buckets, context)

    # ---- prediction -----------------------------------------------------------------------------

    def distribution(self, sentence: Tokens, heads: np.ndarray) -> np.ndarray:
        """``p[m-1, l]``: probability of ``labels[l]`` for word m's arc ``heads[m] -> m``; rows sum to 1."""
        return label_probabilities(self.weights, self.feature_ids([sentence], [heads]))

    def predict(self, sentence: Tokens, heads: np.ndarray) -> tuple[list[str], np.ndarray]:
        """The most probable DEPREL of each word's arc and its probability, shape (n,)."""
        p = self.distribution(sentence, heads)
        best = p.argmax(axis=1)
        return [self.labels[i] for i in best], p[np.arange(len(best)), best]

    def distributions(self, sentences: Sequence[Tokens], heads: Sequence[np.ndarray]) -> list[np.ndarray]:
        """``distribution`` of many sentences in one vectorised pass."""
        p = label_probabilities(self.weights, self.feature_ids(sentences, heads))
        bounds = np.cumsum([len(s.forms) for s in sentences])[:-1]
        return np.split(p, bounds) if len(sentences) else []

    def predict_batch(self, sentences: Sequence[Tokens],
                      heads: Sequence[np.ndarray]) -> list[tuple[list[str], np.ndarray]]:
        """``predict`` of many sentences in one vectorised pass."""
        p, inverse = distinct_probabilities(self.weights, self.feature_ids(sentences, heads))
        best = p.argmax(axis=1)
        probs = p[np.arange(len(best)), best][inverse]
        names = [self.labels[i] for i in best[inverse]]
        out, lo = [], 0
        for s in sentences:
            hi = lo + len(s.forms)
            out.append((names[lo:hi], probs[lo:hi]))
            lo = hi
        return out

    # ---- training -------------------------------------------------------------------------------

    @classmethod
    def train(
        cls,
        sentences: Sequence[Any],
        *,
        dev: Sequence[Any] | None = None,
        epochs: int = 4,
        seed: int = 0,
        progress: bool = False,
        buckets: int = 1 << 18,
        learning_rate: float = 0.2,
        l2: float = 1e-4,
        batch_size: int = 128,
        templates: Sequence[Sequence[str]] = DEFAULT_TEMPLATES,
        folds: int = 0,
        context_templates: Sequence[Sequence[str]] = CONTEXT_TEMPLATES,
        group: int = 1,
        map_tasks: Callable[..., list[Any]] | None = None,
    ) -> LogLinearLabeler:
        """Fit on gold trees (``heads``, ``deprels``; tags may be predicted). ``dev``: pick the best epoch.

        With ``folds >= 2``, a stacked labeller: a first stage with ``templates``; first-stage labels of the
        training set jackknifed over ``folds`` contiguous folds (each fold labelled by a first stage trained
        on the others for the first stage's chosen number of epochs); then a second stage with
        ``templates + context_templates`` trained on those labels. Cost: ``folds + 2`` trainings.

        ``group``: the sentences come in runs of ``group`` copies of one sentence (the same words and tree under
        different tags, ``engine.training.pipeline``); the folds never split a run, so no first stage labels
        a sentence it was trained on.

        ``map_tasks(fn, arguments)`` runs the stacking folds, which are independent (``engine.training.tasks``:
        Dask tasks with ``train --cluster``); their labels are joined in fold order, as the loop here does."""
        train = [s for s in sentences if s.heads is not None and len(s.forms)]
        if not train:
            raise ValueError("no training sentences with heads")
        if group < 1 or len(train) % group:
            raise ValueError(f"{len(train)} training sentences do not form runs of {group}")
        settings: _FitSettings = {"epochs": epochs, "seed": seed, "progress": progress, "buckets": buckets,
                                  "learning_rate": learning_rate, "l2": l2, "batch_size": batch_size}
        first = cls._fit(train, dev, templates, **settings)
        if folds < 2 or len(train) < folds * group:
            return first
        fold_settings = settings.copy()
        fold_settings["epochs"] = first.info["best_epoch"]  # each fold's first stage: the chosen epochs
        fold_settings["progress"] = progress and map_tasks is None

        def fold(lo: int, hi: int) -> list[list[str]]:
            began = time.perf_counter()
            part = cls._fit([*train[:lo], *train[hi:]], None, templates, **fold_settings)
            labels = [labels for labels, _ in part.predict_batch(train[lo:hi], [s.heads for s in train[lo:hi]])]
            log.info("labeller stacking: fold %d-%d labelled (%.1f s)", lo, hi, time.perf_counter() - began)
            return labels

        bounds = [(group * a, group * b) for a, b in fold_bounds(len(train) // group, folds)]
        held_out = [labels for part in (map_tasks(fold, bounds) if map_tasks is not None else
                                        [fold(*b) for b in bounds]) for labels in part]
        second = cls._fit(train, dev, [*templates, *context_templates], context=first, train_context=held_out,
                          **settings)
        second.info["folds"] = folds
        return second

    @classmethod
    def _fit(cls, train: Sequence[Any], dev: Sequence[Any] | None, templates: Sequence[Sequence[str]], *,
             epochs: int, seed: int, progress: bool, buckets: int, learning_rate: float, l2: float,
             batch_size: int, context: LogLinearLabeler | None = None,
             train_context: Sequence[Sequence[str]] | None = None) -> LogLinearLabeler:
        """One labeller trained by AdaGrad on ``train`` (stage 2: features read ``train_context``, and the dev
        set's labels from ``context``)."""
        start = time.perf_counter()
        labels = sorted({r for s in train for r in s.deprels})
        rng = np.random.default_rng(seed)
        weights = np.zeros((buckets, len(labels)), dtype=np.float32)
        model = cls(labels, weights, templates, context=context)
        index = {lab: i for i, lab in enumerate(labels)}

        def encode(data: Sequence[Any], given: Sequence[Sequence[str]] | None) -> tuple[np.ndarray, np.ndarray]:
            ids = model.feature_ids(data, [s.heads for s in data], given)
            gold = np.array([index.get(r, -1) for s in data for r in s.deprels], dtype=np.int64)
            return ids, gold

        x, y = encode(train, train_context)
        dev_data = [s for s in (dev or []) if s.heads is not None and len(s.forms)]
        dx, dy = encode(dev_data, None) if dev_data else (None, None)
        log.info("labeller: %d training arcs, %d labels, %d templates, %d buckets (features in %.1f s)",
                 len(y), len(labels), len(model.templates), buckets, time.perf_counter() - start)
        n = len(y)
        opt = AdaGrad.like(weights, learning_rate, round_steps=True)  # float32 sums, steps rounded to float32

        def step(sel: np.ndarray) -> float:
            loss, rows, grad = loss_and_gradient(weights, x[sel], y[sel], l2)
            opt.step_rows(weights, rows, grad)
            return loss * len(sel)

        def evaluate(current: Sequence[np.ndarray], record: dict[str, Any]) -> float | None:
            if dx is None:
                return None
            record["dev_label_accuracy"] = float((label_scores(current[0], dx).argmax(axis=1) == dy).mean() * 100)
            return record["dev_label_accuracy"]

        def shuffled() -> list[np.ndarray]:
            order = rng.permutation(n)
            return [order[lo:lo + batch_size] for lo in range(0, n, batch_size)]

        loop = EpochLoop([weights], total_batches=epochs * -(-n // batch_size), total_epochs=epochs,
                         progress=progress, name="labeller ")
        loop.run(epochs, shuffled, step, evaluate, per=n)
        out = loop.result()
        best_weights, best_epoch, history = out.params[0], out.best_epoch, out.history
        best_weights = best_weights.astype(np.float16).astype(np.float32)  # stored as float16, exactly
        info = {"epochs": epochs, "best_epoch": best_epoch, "history": history, "learning_rate": learning_rate,
                "l2": l2, "batch_size": batch_size, "seed": seed, "train_arcs": int(n),
                "train_seconds": round(time.perf_counter() - start, 2)}
        return cls(labels, best_weights, templates, info, context=context)

    # ---- persistence ----------------------------------------------------------------------------

    def to_state(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        """JSON metadata (labels, templates, training record, the first stage's metadata) and the weight
        matrices (float16 when exact; the first stage's under ``context.``)."""
        meta: dict[str, Any] = {"format": STATE_FORMAT, "version": STATE_VERSION, "labels": self.labels,
                                "templates": [list(t) for t in self.templates], "buckets": self.buckets,
                                "info": self.info}
        half = self.weights.astype(np.float16)  # trained weights are float16 values (half the model size)
        exact = np.isfinite(half).all() and np.array_equal(half.astype(self.weights.dtype), self.weights)
        arrays = {"weights": half if exact else np.ascontiguousarray(self.weights)}
        if self.context is not None:
            meta["context"], first = self.context.to_state()
            arrays.update({f"context.{k}": v for k, v in first.items()})
        return meta, arrays

    @classmethod
    def from_state(cls, meta: dict[str, Any], arrays: dict[str, np.ndarray]) -> LogLinearLabeler:
        """Rebuild from ``to_state`` output (versions 1 and 2); ``ValueError`` on a state this version cannot
        read."""
        try:
            if meta.get("format") != STATE_FORMAT or meta.get("version") not in (1, STATE_VERSION):
                raise ValueError(f"not a {STATE_FORMAT} state of version 1 or {STATE_VERSION}: "
                                 f"{meta.get('format')!r} version {meta.get('version')!r}")
            weights = arrays["weights"]
            labels = [str(x) for x in meta["labels"]]
            templates = [tuple(str(a) for a in t) for t in meta["templates"]]
            shape = (int(meta["buckets"]), len(labels))
            if weights.dtype not in (np.float16, np.float32, np.float64) or weights.shape != shape:
                raise ValueError(f"weights {weights.dtype} {weights.shape} do not match "
                                 f"{meta['buckets']} buckets x {len(labels)} labels")
            # float16 weights stay as stored (the kernels read them exactly, ``row_scores``), their bits tested
            if not (finite_half(weights) if weights.dtype == np.float16 else np.isfinite(weights).all()):
                raise ValueError("weights are not all finite")
            context = None
            if meta.get("context") is not None:
                first = {k.split(".", 1)[1]: v for k, v in arrays.items() if k.startswith("context.")}
                if not first:
                    raise ValueError("a stacked labeller's state lacks its first stage's arrays (context.*)")
                context = cls.from_state(meta["context"], first)
                if context.labels != labels:
                    raise ValueError("the first and second stages have different label sets")
            return cls(labels, weights, templates, dict(meta.get("info", {})), context=context)
        except (KeyError, TypeError, AttributeError) as e:
            raise ValueError(f"bad labeller state: {e!r}") from e
