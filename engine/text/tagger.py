"""Linear-chain CRF part-of-speech tagger (UPOS and XPOS), trained by forward-backward.

Model (Lafferty, McCallum & Pereira 2001): for words ``x_1..x_n`` and states ``y_1..y_n``

    p(y | x) = exp( sum_t E[t, y_t] + sum_t A[y_{t-1}, y_t] ) / Z(x)

with ``y_0 = y_{n+1}`` the boundary state: transitions are a ``(S+1, S+1)`` matrix whose last row holds
the start scores and whose last column the end scores. The states are the (UPOS, XPOS) pairs seen in
training (about 100 for EWT), so the two tags of a word always agree and the transitions see the fine
XPOS distinctions; the emission score of a state ``(u, x)`` is ``sum_k U[f_k, u] + sum_k X[f_k, x]`` with
``U`` and ``X`` two ``(F+1, T)`` weight matrices gathered by feature id (``JointCrf``).

Features are hashed 64-bit codes of the word, its affixes, shape and flags, its neighbours and the tag
dictionaries (``engine.text.tagger_features``). Codes seen at least ``feature_min_count`` times in training
form the feature vocabulary (a sorted code array; ids by binary search, 0 = unknown), so there are no
collisions.

``chain_forward_backward`` is the sum-product propagator of the chain: log Z, the unary marginals and the
(summed or per-position) pairwise marginals in log space, vectorised over tags and over a batch of
equal-length sentences. It is a pure function of ``(emissions, transitions)`` so that the TAG/TRIGRAM
factors of joint tagging and parsing under BP (Smith & Eisner 2008, §3.4) can call it with incoming
messages folded into the emissions. Training minimises the negative conditional log-likelihood plus an L2
penalty by AdaGrad (Duchi et al. 2011) over equal-length mini-batches; the gradient is the usual
expected-minus-observed feature counts (``chain_nll``). Tagging runs the same recurrences compiled over a
batch of sentences of any lengths at once (``engine.text.crf_ragged``): forward-backward, Viterbi over each
word's most probable states, and draws from ``p(y | x)``; the UPOS/XPOS marginals are the state marginals summed
by tag.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from engine.data.batching import length_batches
from engine.hashing import CodeIndex, hash_string
from engine.model.widen import finite_half
from engine.optim import AdaGrad, EpochLoop, OptimSettings
from engine.text import crf_ragged
from engine.text.crf import (  # noqa: F401 (chain kernels re-exported for their users)
    ChainMarginals,
    chain_forward,
    chain_forward_backward,
    chain_nll,
    chain_sample,
    chain_score,
    chain_viterbi,
)
from engine.text.linear import row_sums
from engine.text.tag_candidates import CandidateSettings, TagCandidates, candidates_many, choose_states, restrict
from engine.text.tagger_features import (  # noqa: F401 (feature extraction re-exported for its users)
    LEXICONS,
    HasForms,
    Lexicon,
    build_lexicon,
    feature_codes,
    feature_spec,
)

log = logging.getLogger(__name__)

STATE_FORMAT = "crf-tagger"
STATE_VERSION = 1


# ---------------------------------------------------------------------------------------------------------
# The tagger
# ---------------------------------------------------------------------------------------------------------


@dataclass
class TagResult:
    """Tags of one sentence and their marginals (labels are the tagger's ``upos_labels``/``xpos_labels``)."""

    upos: list[str]
    xpos: list[str]
    upos_marginals: np.ndarray  # (n, n_upos), rows sum to 1
    xpos_marginals: np.ndarray  # (n, n_xpos)
    samples: list[tuple[list[str], list[str]]] = field(default_factory=list)  # (UPOS, XPOS) draws from p(y | x)
    candidates: TagCandidates | None = None  # the CRF restricted to each word's candidate states (joint BP)


@dataclass(frozen=True, kw_only=True)
class TaggerConfig(OptimSettings):
    """Training settings (defaults tuned on EWT dev): ``OptimSettings`` (the last epoch's iterate, not an
    average, by default) and the feature vocabulary's count thresholds."""

    epochs: int = 5
    batch_size: int = 16
    learning_rate: float = 0.05
    l2: float = 1.0
    average: bool = False
    feature_min_count: int = 2  # a feature code seen fewer times in training is dropped
    tag_dict_min_count: int = 3  # a word enters the tag dictionaries from this many occurrences

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.feature_min_count < 1 or self.tag_dict_min_count < 1:
            raise ValueError("feature_min_count and tag_dict_min_count must be >= 1")


@dataclass
class JointCrf:
    """A chain CRF whose states are the (UPOS, XPOS) pairs seen in training.

    The emission score of state ``s = (u, x)`` is ``E_upos[u] + E_xpos[x]``, each from its own
    ``(F+1, T)`` weight matrix gathered by feature ids, so the weights stay as small as two separate
    taggers while the transitions ``(S+1, S+1)`` see the finer pair states and the two tags of a word
    always agree. Marginals of UPOS (XPOS) are the state marginals summed by UPOS (XPOS).
    """

    upos_labels: list[str]
    xpos_labels: list[str]
    states: np.ndarray  # (S, 2) int64: UPOS index, XPOS index
    upos_emission: np.ndarray  # (F+1, n_upos) float32 (a loaded model's float16), row 0 = unknown feature (0)
    xpos_emission: np.ndarray  # (F+1, n_xpos) float32 (a loaded model's float16)
    transition: np.ndarray  # (S+1, S+1) float64

    def emissions(self, ids: np.ndarray) -> np.ndarray:
        """(..., K) feature ids -> (..., S) float64 state emission scores. Each word's weight rows are added in
        float64 in feature order by a compiled loop (``engine.text.linear.row_sums``), which is what numpy's
        ``weights[ids].sum(axis=-2, dtype=np.float64)`` computes, without the (..., K, labels) gather."""
        rows = np.ascontiguousarray(ids.reshape(-1, ids.shape[-1]))
        eu = np.zeros((len(rows), self.upos_emission.shape[1]))
        ex = np.zeros((len(rows), self.xpos_emission.shape[1]))
        row_sums(self.upos_emission, rows, eu)
        row_sums(self.xpos_emission, rows, ex)
        scores = eu[:, self.states[:, 0]] + ex[:, self.states[:, 1]]
        return scores.reshape(*ids.shape[:-1], len(self.states))

    def split(self, state_values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Sum (..., S) state values by UPOS and by XPOS -> ((..., n_upos), (..., n_xpos))."""
        out = []
        for col in (0, 1):
            order = np.argsort(self.states[:, col], kind="stable")
            starts = np.searchsorted(self.states[order, col], np.arange(self.states[:, col].max() + 1))
            out.append(np.add.reduceat(state_values[..., order], starts, axis=-1))
        return out[0], out[1]

    def arrays(self) -> list[np.ndarray]:
        return [self.upos_emission, self.xpos_emission, self.transition]


class _CrfStep:
    """One AdaGrad step of a ``JointCrf`` (``engine.optim.AdaGrad``, Duchi et al. 2011): row updates of the
    emission rows a batch touches, with lazy L2 on them, and a dense update of the transitions."""

    def __init__(self, crf: JointCrf, lr: float, l2: float) -> None:
        self.crf, self.l2 = crf, l2
        self.optimisers = [AdaGrad.like(a, lr) for a in crf.arrays()]

    def __call__(self, ids: np.ndarray, gold: np.ndarray, fraction: float) -> float:
        """One update on a batch: ``ids`` (B, n, K), ``gold`` (B, n) state indices; ``fraction`` = the batch's
        share of the training sentences (scales the L2 term)."""
        from scipy import sparse  # here: only training uses it, parsing does not

        crf = self.crf
        nll, d_em, d_tr = chain_nll(crf.emissions(ids), crf.transition, gold)
        rows, inv = np.unique(ids.reshape(-1), return_inverse=True)
        # occurrence matrix (distinct rows x tokens): the emission gradient of a row sums its tokens' gradients
        k = ids.shape[-1]
        tokens = np.repeat(np.arange(ids.size // k), k)
        occurrences = sparse.csr_matrix((np.ones(ids.size), (inv.ravel(), tokens)), shape=(len(rows), ids.size // k))
        for which, d in enumerate(crf.split(d_em.reshape(-1, d_em.shape[-1]))):
            grad = occurrences @ d
            if rows[0] == 0:  # the unknown feature keeps weight 0
                grad[0] = 0.0
            self.optimisers[which].step_rows(crf.arrays()[which], rows, grad, self.l2 * fraction)
        self.optimisers[2].step(crf.transition, d_tr, self.l2 * fraction)
        return nll


@dataclass
class Tagger:
    """UPOS and XPOS tagging with one joint linear-chain CRF over hashed word features (see the module)."""

    crf: JointCrf
    lexicon: Lexicon
    features: np.ndarray  # sorted uint64 codes of the F features kept in training; feature id = index + 1
    training: dict[str, Any] = field(default_factory=dict)
    viterbi_candidates: int = 8  # Viterbi runs over each word's most probable states (by marginal)
    # each form's lexical feature values, computed once per form (``feature_codes``)
    form_cache: dict[str, tuple[int, ...]] = field(default_factory=dict, init=False, repr=False, compare=False)
    _index: tuple[np.ndarray, CodeIndex] | None = field(default=None, init=False, repr=False, compare=False)

    @property
    def upos_labels(self) -> list[str]:
        return self.crf.upos_labels

    @property
    def xpos_labels(self) -> list[str]:
        return self.crf.xpos_labels

    def _ids(self, sentences: Sequence[HasForms]) -> tuple[np.ndarray, np.ndarray]:
        codes, offsets = feature_codes(sentences, self.lexicon, self.form_cache)
        return self._lookup(codes), offsets

    def _lookup(self, codes: np.ndarray) -> np.ndarray:
        """Feature codes -> int32 ids (index in ``features`` + 1, or 0 for a feature not kept in training)."""
        if len(self.features) == 0:
            return np.zeros(codes.shape, dtype=np.int32)
        if self._index is None or self._index[0] is not self.features:  # by hashing (engine.hashing.CodeIndex)
            self._index = (self.features, CodeIndex(self.features))
        return (self._index[1].positions(codes) + 1).astype(np.int32)

    # -- training -----------------------------------------------------------------------------------------
    @classmethod
    def train(
        cls,
        sentences: Sequence[Any],
        *,
        dev: Sequence[Any] | None = None,
        epochs: int = TaggerConfig.epochs,
        seed: int = 0,
        progress: bool = False,
        **settings: Any,
    ) -> Tagger:
        """Train on ``sentences`` (gold ``upos``/``xpos``); ``settings`` are other ``TaggerConfig`` fields.

        With ``dev``, the epoch with the best mean UPOS/XPOS dev accuracy is kept; else the last.
        """
        config = TaggerConfig(epochs=epochs, seed=seed, **settings)
        start = time.perf_counter()
        train = [s for s in sentences if len(s.forms) > 0]
        if not train:
            raise ValueError("no non-empty training sentences")
        upos_labels = sorted({u for s in train for u in s.upos})
        xpos_labels = sorted({x for s in train for x in s.xpos})
        pairs = sorted({p for s in train for p in zip(s.upos, s.xpos, strict=True)})
        u_index = {u: i for i, u in enumerate(upos_labels)}
        x_index = {x: i for i, x in enumerate(xpos_labels)}
        s_index = {p: i for i, p in enumerate(pairs)}
        states = np.array([[u_index[u], x_index[x]] for u, x in pairs], dtype=np.int64)
        lexicon = build_lexicon(train, config.tag_dict_min_count)
        codes, offsets = feature_codes(train, lexicon)
        kept, counts = np.unique(codes, return_counts=True)
        kept = kept[counts >= config.feature_min_count]
        f = len(kept) + 1
        crf = JointCrf(upos_labels, xpos_labels, states, np.zeros((f, len(upos_labels)), np.float32),
                       np.zeros((f, len(xpos_labels)), np.float32), np.zeros((len(pairs) + 1, len(pairs) + 1)))
        tagger = cls(crf, lexicon, kept)
        ids = tagger._lookup(codes)
        del codes
        gold = np.array([s_index[p] for s in train for p in zip(s.upos, s.xpos, strict=True)], dtype=np.int64)
        batches = length_batches([len(s.forms) for s in train], config.batch_size, max_arcs=1 << 62)
        step = _CrfStep(crf, config.learning_rate, config.l2)
        rng = np.random.default_rng(config.seed)

        def batch_step(b: int) -> float:
            idx = batches[b]
            tok = offsets[idx][:, None] + np.arange(len(train[idx[0]].forms))
            return step(ids[tok], gold[tok], len(idx) / len(train))

        def evaluate(current: Sequence[np.ndarray], entry: dict[str, Any]) -> float | None:
            if dev is None:
                return None
            live = crf.arrays()
            crf.upos_emission, crf.xpos_emission, crf.transition = current  # the epoch's mean with averaging
            try:
                acc = tagger.accuracy(dev)
            finally:
                crf.upos_emission, crf.xpos_emission, crf.transition = live
            entry.update(dev_upos=acc["upos"], dev_xpos=acc["xpos"])
            return (acc["upos"] + acc["xpos"]) / 2

        loop = EpochLoop(crf.arrays(), total_batches=config.epochs * len(batches), total_epochs=config.epochs,
                         average=config.average, progress=progress, name="tagger ")
        loop.run(config.epochs, lambda: rng.permutation(len(batches)), batch_step, evaluate, loss_key="nll",
                 per=len(train))
        out = loop.result()
        best_epoch, history = out.best_epoch, out.history
        crf.upos_emission, crf.xpos_emission, crf.transition = out.params
        tagger.training = {"config": asdict(config), "sentences": len(train), "words": int(offsets[-1]),
                           "best_epoch": best_epoch, "history": history, "seconds": time.perf_counter() - start}
        return tagger

    # -- tagging ------------------------------------------------------------------------------------------
    def tag(self, sentences: Sequence[HasForms], *, batch_size: int = 256, samples: int = 0,
            candidates: CandidateSettings | None = None, with_gold: bool = False) -> list[TagResult]:
        """Viterbi tags and forward-backward marginals of every sentence (given in any order and length), and
        ``samples`` (UPOS, XPOS) sequences per sentence drawn from the posterior ``p(y | x)``
        (``chain_sample``; each sentence's uniform numbers come from a generator seeded by its words, so a
        sentence gets the same samples whatever it is batched with). ``batch_size`` sentences at a time, of
        any lengths, go through the compiled kernels of ``engine.text.crf_ragged`` together.

        The Viterbi search is restricted to each word's ``viterbi_candidates`` most probable (UPOS, XPOS)
        states by marginal, which leaves the best path unchanged unless it goes through a state of tiny
        marginal probability, and cuts the cost per word from S^2 to k^2 for S (about 100) states.

        ``candidates``: each result also carries its sentence's candidate tags (``engine.text.tag_candidates``);
        ``with_gold`` adds each word's own (gold) UPOS/XPOS state to them where the tagger has that state
        (training a joint model: the gold tagging must be one the graph can represent).
        """
        results: list[TagResult] = []
        crf = self.crf
        state_of = {(int(u), int(x)): i for i, (u, x) in enumerate(crf.states)} if with_gold else {}
        upos_index = {t: i for i, t in enumerate(self.upos_labels)}
        xpos_index = {t: i for i, t in enumerate(self.xpos_labels)}
        upos, xpos = np.array(self.upos_labels, dtype=object), np.array(self.xpos_labels, dtype=object)
        for first in range(0, len(sentences), batch_size):
            chunk = sentences[first:first + batch_size]
            ids, offsets = self._ids(chunk)
            em = crf.emissions(ids)  # (N, S) for the chunk's N words
            alpha = crf_ragged.forward(em, crf.transition, offsets)
            marginals = crf_ragged.marginals(em, crf.transition, offsets, alpha)[0]
            k = min(self.viterbi_candidates, marginals.shape[-1])
            best = crf_ragged.viterbi(em, crf.transition, np.argpartition(-marginals, k - 1, axis=-1)[:, :k], offsets)
            path = crf.states[best]  # (N, 2)
            um, xm = crf.split(marginals)
            drawn = np.zeros((0, len(em), 2), dtype=np.int64)
            if samples > 0:
                uniform = np.concatenate([np.random.default_rng(int(hash_string("\x1f".join(s.forms))))
                                          .random((samples, len(s.forms))) for s in chunk], axis=1)
                drawn = crf.states[crf_ragged.sample(alpha, crf.transition, uniform, offsets)]  # (samples, N, 2)
            drawn_upos, drawn_xpos = upos[drawn[:, :, 0]], xpos[drawn[:, :, 1]]  # (samples, N) labels
            together = None  # without gold states to add, every sentence's candidates at once
            if candidates is not None and not with_gold:
                together = candidates_many(em, crf.transition, marginals, best, offsets, candidates,
                                           (self.upos_labels, self.xpos_labels, crf.states))
            for r in range(len(chunk)):
                w = slice(offsets[r], offsets[r + 1])
                results.append(result := TagResult(upos[path[w, 0]].tolist(), xpos[path[w, 1]].tolist(), um[w], xm[w],
                                                   list(zip(drawn_upos[:, w].tolist(), drawn_xpos[:, w].tolist(),
                                                            strict=True))))
                if together is not None:
                    result.candidates = together[r]
                elif candidates is not None and w.stop > w.start:
                    required = None
                    gold_upos, gold_xpos = getattr(chunk[r], "upos", None), getattr(chunk[r], "xpos", None)
                    if with_gold and gold_upos is not None and gold_xpos is not None:  # untagged: nothing required
                        required = np.array([state_of.get((upos_index.get(u, -1), xpos_index.get(x, -1)), -1)
                                             for u, x in zip(gold_upos, gold_xpos, strict=True)], dtype=np.int64)
                    states, allowed = choose_states(marginals[w], best[w], candidates, required)
                    result.candidates = restrict(em[w], crf.transition, states, allowed,
                                                 (self.upos_labels, self.xpos_labels, crf.states), marginals[w])
        return results

    def accuracy(self, sentences: Sequence[Any]) -> dict[str, float]:
        """UPOS and XPOS accuracy (percent) against the sentences' gold tags."""
        right_u = right_x = total = 0
        for s, r in zip(sentences, self.tag(sentences), strict=True):
            right_u += sum(a == b for a, b in zip(s.upos, r.upos, strict=True))
            right_x += sum(a == b for a, b in zip(s.xpos, r.xpos, strict=True))
            total += len(s.forms)
        return {"upos": 100.0 * right_u / max(total, 1), "xpos": 100.0 * right_x / max(total, 1)}

    # -- persistence ----------------------------------------------------------------------------------------
    def to_state(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        """JSON metadata and named arrays (see the component contract)."""
        meta: dict[str, Any] = {
            "format": STATE_FORMAT, "version": STATE_VERSION, "features": feature_spec(),
            "upos_labels": list(self.upos_labels), "xpos_labels": list(self.xpos_labels),
            "training": self.training,
        }
        arrays: dict[str, np.ndarray] = {
            "features": self.features.astype(np.uint64),
            "states": self.crf.states.astype(np.int64),
            "upos_emission": self.crf.upos_emission.astype(np.float32),
            "xpos_emission": self.crf.xpos_emission.astype(np.float32),
            "transition": self.crf.transition.astype(np.float64),
        }
        for name, (keys, values) in self.lexicon.items():
            arrays[f"{name}_keys"] = keys.astype(np.uint64)
            arrays[f"{name}_values"] = values.astype(np.uint64)
        return meta, arrays

    @classmethod
    def from_state(cls, meta: dict[str, Any], arrays: dict[str, np.ndarray]) -> Tagger:
        """Rebuild a tagger from ``to_state`` output; ``ValueError`` if it is not a valid tagger state."""
        try:
            if meta.get("format") != STATE_FORMAT or meta.get("version") != STATE_VERSION:
                raise ValueError(f"not a {STATE_FORMAT} v{STATE_VERSION} state: "
                                 f"{meta.get('format')!r} v{meta.get('version')!r}")
            if meta.get("features") != feature_spec():
                raise ValueError("the tagger state was trained with different feature templates")
            upos = [str(x) for x in meta["upos_labels"]]
            xpos = [str(x) for x in meta["xpos_labels"]]
            features = _sorted_codes(arrays["features"], "features")
            lexicon: Lexicon = {}
            for name in LEXICONS:
                keys = _sorted_codes(arrays[f"{name}_keys"], f"{name}_keys", strict=False)
                values = np.asarray(arrays[f"{name}_values"])
                if values.dtype != np.uint64 or values.shape != keys.shape:
                    raise ValueError(f"{name}_values must be uint64 of the shape of {name}_keys")
                lexicon[name] = (keys, values)
            states = np.asarray(arrays["states"])
            eu, ex, tr = arrays["upos_emission"], arrays["xpos_emission"], arrays["transition"]
            if not upos or not xpos or states.ndim != 2 or states.shape[1:] != (2,) or len(states) == 0:
                raise ValueError("tagger state has no labels or malformed states")
            if not np.issubdtype(states.dtype, np.integer) or states.min() < 0 or \
                    states[:, 0].max() >= len(upos) or states[:, 1].max() >= len(xpos):
                raise ValueError("tagger states refer to unknown labels")
            f, s = len(features) + 1, len(states)
            expected = ((f, len(upos)), (f, len(xpos)), (s + 1, s + 1))
            if (eu.shape, ex.shape, tr.shape) != expected:
                raise ValueError(f"tagger arrays have shapes {eu.shape}, {ex.shape}, {tr.shape}; expected "
                                 f"{expected[0]}, {expected[1]}, {expected[2]}")
            # float16 emissions stay as stored (``row_sums`` reads them exactly; widening both cost ~0.1 s and
            # 60 MB per process), tested for finiteness on their bits; others are used as float32
            eu, ex = (a if a.dtype == np.float16 else np.asarray(a, dtype=np.float32) for a in (eu, ex))
            tr = np.asarray(tr, dtype=np.float64)
            if not (all(finite_half(a) if a.dtype == np.float16 else np.isfinite(a).all() for a in (eu, ex))
                    and np.isfinite(tr).all()):
                raise ValueError("tagger weights are not finite")
            if eu[0].any() or ex[0].any():
                raise ValueError("the unknown feature (row 0) must have weight 0")
            crf = JointCrf(upos, xpos, states.astype(np.int64), eu, ex, tr)
        except (KeyError, TypeError, IndexError, AttributeError) as e:
            raise ValueError(f"invalid tagger state: {e!r}") from None
        return cls(crf, lexicon, features, dict(meta.get("training", {})))


def _sorted_codes(arr: np.ndarray, name: str, *, strict: bool = True) -> np.ndarray:
    """``arr`` checked to be a sorted uint64 vector (strictly increasing if ``strict``)."""
    arr = np.asarray(arr)
    if arr.ndim != 1 or arr.dtype != np.uint64 or (arr[1:] < arr[:-1]).any() or \
            (strict and (arr[1:] == arr[:-1]).any()):
        raise ValueError(f"tagger {name} must be a sorted uint64 vector")
    return arr
