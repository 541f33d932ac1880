"""Linear-chain CRF part-of-speech tagger (UPOS and XPOS), trained by forward-backward.

Model (Lafferty, McCallum & Pereira 2001): for words ``x_1..x_n`` and states ``y_1..y_n``

    p(y | x) = exp( sum_t E[t, y_t] + sum_t A[y_{t-1}, y_t] ) / Z(x)

with ``y_0 = y_{n+1}`` the boundary state: transitions are a ``(S+1, S+1)`` matrix whose last row holds
the start scores and whose last column the end scores. The states are the (UPOS, XPOS) pairs seen in
training (about 100 for EWT), so the two tags of a word always agree and the transitions see the fine
XPOS distinctions; the emission score of a state ``(u, x)`` is ``sum_k U[f_k, u] + sum_k X[f_k, x]`` with
``U`` and ``X`` two ``(F+1, T)`` weight matrices gathered by feature id (``JointCrf``).

Features are 64-bit codes from ``engine.hashing`` (template seed mixed with value codes),
extracted for all words at once: the word and its lowercase form (frequent words only), prefixes and
suffixes of 1-4 characters, collapsed shape (``Xx``, ``d.d``; conjoined with "first word" at the start),
digit/hyphen/capital flags, the neighbours' words, suffixes and tag sets at -2..+2 and shapes at -1/+1,
conjunctions of adjacent words, tag sets and suffixes, and tag-dictionary features: the set of UPOS
(XPOS) tags a frequent training word was seen with, also for its lowercase form. Codes seen at least
``feature_min_count`` times in training form the feature vocabulary (a sorted code array; ids by binary
search, 0 = unknown), so there are no collisions.

``chain_forward_backward`` is the sum-product propagator of the chain: log Z, the unary marginals and the
(summed or per-position) pairwise marginals in log space, vectorised over tags and over a batch of
equal-length sentences. It is a pure function of ``(emissions, transitions)`` so that the TAG/TRIGRAM
factors of joint tagging and parsing under BP (Smith & Eisner 2008, §3.4) can call it with incoming
messages folded into the emissions. Training minimises the negative conditional log-likelihood plus an L2
penalty by AdaGrad (Duchi et al. 2011) over equal-length mini-batches; the gradient is the usual
expected-minus-observed feature counts (``chain_nll``). Decoding is Viterbi (``chain_viterbi``) over each
word's most probable states; the UPOS/XPOS marginals are the state marginals summed by tag.
"""

from __future__ import annotations

import logging
import time
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from functools import cache
from typing import Any, Literal, Protocol

import numpy as np
from scipy import sparse

from engine.data.batching import length_batches
from engine.hashing import hash_string, hash_strings, mix
from engine.optim import AdaGrad, EpochLoop, OptimSettings
from engine.text.shapes import word_shape

log = logging.getLogger(__name__)

STATE_FORMAT = "crf-tagger"
STATE_VERSION = 1
_BOS, _EOS = "\x02BOS", "\x03EOS"  # padding "words" (control characters cannot occur in a treebank form)


class HasForms(Protocol):
    forms: list[str]


# ---------------------------------------------------------------------------------------------------------
# Chain kernels (pure functions of scores)
# ---------------------------------------------------------------------------------------------------------


@dataclass
class ChainMarginals:
    """What ``chain_forward_backward`` returns for a batch of ``B`` chains of length ``n`` over ``T`` tags."""

    log_z: np.ndarray  # (B,) log partition function
    unary: np.ndarray  # (B, n, T) p(y_t = j); every row sums to 1
    pair_counts: np.ndarray | None  # (T+1, T+1) expected transition counts summed over the batch (incl. start/end)
    pairwise: np.ndarray | None  # (B, n-1, T, T) p(y_t = i, y_{t+1} = j)


def _row_max(v: np.ndarray) -> np.ndarray:
    """Max over the last axis (keepdims), 0 where a row is entirely -inf (so subtracting it is safe)."""
    m = v.max(axis=-1, keepdims=True)
    return np.where(np.isfinite(m), m, 0.0)


# Matrix products are kept below this many multiply-adds: OpenBLAS multithreads larger ones, which for these
# small matrices (and on a busy machine) is many times slower than one thread.
_SMALL_PRODUCT = 1 << 18


def _small_matmul(x: np.ndarray, m: np.ndarray) -> np.ndarray:
    """``x @ m`` for (B, T) @ (T, T), in row blocks small enough to stay single-threaded."""
    rows = max(1, _SMALL_PRODUCT // m.size)
    if len(x) <= rows:
        return x @ m
    return np.concatenate([x[i : i + rows] @ m for i in range(0, len(x), rows)])


def _scaled(inner: np.ndarray) -> tuple[float, np.ndarray]:
    """``(max A, exp(A - max A))`` of the inner transition scores (a matrix product then stays in range)."""
    a_max = float(_row_max(inner.reshape(1, -1))[0, 0])
    return a_max, np.exp(inner - a_max)


def chain_forward(emissions: np.ndarray, transitions: np.ndarray) -> np.ndarray:
    """Log forward scores ``alpha`` (B, n, T) of a batch of chains (n >= 1): ``alpha_t[j]`` is the log of the
    summed potential of all tag prefixes ending in tag ``j`` at ``t``, emission ``t`` included.

    Each step ``alpha_t[j] = logsumexp_i(alpha_{t-1}[i] + A[i, j]) + E[t, j]`` is computed as
    ``log(exp(alpha - max) @ exp(A - max A)) + maxes``: exact in log space (``-inf`` scores stay hard
    zeros) and a matrix product over the tags instead of a (B, T, T) logsumexp."""
    b, n, t = emissions.shape
    a_max, exp_a = _scaled(transitions[:t, :t])
    alpha = np.empty((b, n, t))
    alpha[:, 0] = transitions[t, :t] + emissions[:, 0]
    with np.errstate(divide="ignore"):
        for i in range(1, n):
            prev = alpha[:, i - 1]
            m = _row_max(prev)
            alpha[:, i] = np.log(_small_matmul(np.exp(prev - m), exp_a)) + m + a_max + emissions[:, i]
    return alpha


def _inverse_cdf(scores: np.ndarray, u: np.ndarray) -> np.ndarray:
    """Index drawn from ``p ∝ exp(scores)`` along the last axis by the uniform numbers ``u`` (shape without
    that axis): the first index whose cumulative probability exceeds ``u`` (so never one of probability 0)."""
    with np.errstate(invalid="ignore"):
        weights = np.exp(scores - _row_max(scores))
    cum = np.cumsum(weights, axis=-1)
    return np.minimum((cum <= u[..., None] * cum[..., -1:]).sum(axis=-1), scores.shape[-1] - 1)


def chain_sample(emissions: np.ndarray, transitions: np.ndarray, uniform: np.ndarray) -> np.ndarray:
    """Tag sequences drawn exactly from ``p(y | x)``, ``k`` per chain -> int64 (B, k, n).

    Forward filtering, backward sampling (Carter & Kohn 1994; for chain CRFs e.g. Sutton & McCallum 2012,
    §4.1): the last tag is drawn from ``p(y_n) ∝ exp(alpha_n + end)``, then each earlier one from
    ``p(y_t | y_t+1) ∝ exp(alpha_t[y_t] + A[y_t, y_t+1])``, by inverting the cumulative distribution at
    the given uniform numbers ``uniform`` (B, k, n) in [0, 1). All chains and samples move together (one
    vectorised step per position), and the caller decides where the randomness comes from.
    """
    emissions = np.asarray(emissions, dtype=np.float64)
    transitions = np.asarray(transitions, dtype=np.float64)
    b, n, t = emissions.shape
    k = uniform.shape[1] if uniform.ndim == 3 else -1
    if uniform.shape != (b, k, n):
        raise ValueError(f"uniform numbers must have shape ({b}, k, {n}), got {uniform.shape}")
    out = np.zeros((b, k, n), dtype=np.int64)
    if n == 0 or k == 0:
        return out
    alpha = chain_forward(emissions, transitions)
    last = np.broadcast_to((alpha[:, n - 1] + transitions[:t, t])[:, None, :], (b, k, t))
    out[:, :, n - 1] = _inverse_cdf(last, uniform[:, :, n - 1])
    inner_t = transitions[:t, :t].T
    for i in range(n - 2, -1, -1):
        # scores[b, s, j] = alpha_i[b, j] + A[j, y_{i+1}[b, s]]
        out[:, :, i] = _inverse_cdf(alpha[:, i, None, :] + inner_t[out[:, :, i + 1]], uniform[:, :, i])
    return out


def chain_forward_backward(
    emissions: np.ndarray,
    transitions: np.ndarray,
    *,
    pairwise: Literal["none", "sum", "full"] = "none",
) -> ChainMarginals:
    """Forward-backward in log space for a batch of linear chains (Lafferty et al. 2001, §3).

    ``emissions`` (B, n, T) are log-potentials of each position's tags, ``transitions`` (T+1, T+1) the
    log-potentials of tag bigrams, row ``T`` being the start state and column ``T`` the end state.
    The forward pass is ``chain_forward``; the backward pass uses the same scaled matrix products.
    ``pairwise="sum"`` also returns the expected transition counts summed over the batch (the CRF gradient
    needs only those), ``"full"`` the per-position pairwise marginals (as a TAG/TRIGRAM factor's outgoing
    beliefs would).
    """
    emissions = np.asarray(emissions, dtype=np.float64)
    transitions = np.asarray(transitions, dtype=np.float64)
    b, n, t = emissions.shape
    if transitions.shape != (t + 1, t + 1):
        raise ValueError(f"transitions must be ({t + 1}, {t + 1}) for {t} tags, got {transitions.shape}")
    if n == 0:
        counts = np.zeros((t + 1, t + 1)) if pairwise == "sum" else None
        full = np.zeros((b, 0, t, t)) if pairwise == "full" else None
        return ChainMarginals(np.zeros(b), np.zeros((b, 0, t)), counts, full)
    end = transitions[:t, t]
    a_max, exp_a = _scaled(transitions[:t, :t])
    exp_a_t = np.ascontiguousarray(exp_a.T)
    alpha = chain_forward(emissions, transitions)
    beta = np.empty((b, n, t))
    with np.errstate(divide="ignore"):
        last = alpha[:, n - 1] + end
        m = _row_max(last)
        log_z = np.log(np.exp(last - m).sum(axis=1)) + m[:, 0]
        beta[:, n - 1] = end
        for i in range(n - 2, -1, -1):
            nxt = emissions[:, i + 1] + beta[:, i + 1]
            m = _row_max(nxt)
            beta[:, i] = np.log(_small_matmul(np.exp(nxt - m), exp_a_t)) + m + a_max
    with np.errstate(invalid="ignore"):
        unary = np.exp(alpha + beta - log_z[:, None, None])
    counts = full = None
    if pairwise in ("sum", "full") and n > 1:
        left = alpha[:, :-1]  # (B, n-1, T)
        right = emissions[:, 1:] + beta[:, 1:]
        ml, mr = _row_max(left), _row_max(right)
        with np.errstate(over="ignore", invalid="ignore"):
            scale = np.exp(ml + mr + a_max - log_z[:, None, None])  # (B, n-1, 1)
            el, er = np.exp(left - ml), np.exp(right - mr) * scale
        if pairwise == "sum":
            # sum over sentences and positions of outer(el, er): (T, chunk) @ (chunk, T) products per sentence
            step = max(1, _SMALL_PRODUCT // (t * t))
            inner_counts = sum(np.matmul(el[:, j : j + step].transpose(0, 2, 1), er[:, j : j + step]).sum(axis=0)
                               for j in range(0, n - 1, step)) * exp_a
        else:
            full = el[..., :, None] * exp_a * er[..., None, :]
    if pairwise == "sum":
        counts = np.zeros((t + 1, t + 1))
        if n > 1:
            counts[:t, :t] = inner_counts
        counts[t, :t] = unary[:, 0].sum(axis=0)
        counts[:t, t] = unary[:, n - 1].sum(axis=0)
    elif pairwise == "full" and n == 1:
        full = np.zeros((b, 0, t, t))
    return ChainMarginals(log_z, unary, counts, full)


def chain_viterbi(
    emissions: np.ndarray, transitions: np.ndarray, candidates: np.ndarray | None = None
) -> np.ndarray:
    """Best tag sequence of each chain (B, n, T) under ``transitions`` (T+1, T+1) -> int64 (B, n).

    ``candidates`` (B, n, k) optionally restricts position ``t`` to the tags ``candidates[:, t]`` (for
    example the ``k`` most probable by marginal), so a step costs ``k^2`` instead of ``T^2``; the result
    is the best sequence within the restriction (exact when every position lists all tags).
    """
    emissions = np.asarray(emissions, dtype=np.float64)
    b, n, t = emissions.shape
    if n == 0:
        return np.zeros((b, 0), dtype=np.int64)
    if candidates is None:
        candidates = np.broadcast_to(np.arange(t), (b, n, t))
    cand_em = np.take_along_axis(emissions, candidates, axis=2)  # (B, n, k)
    inner = transitions[:t, :t]
    back = np.empty(cand_em.shape, dtype=np.int64)
    delta = transitions[t, candidates[:, 0]] + cand_em[:, 0]
    for i in range(1, n):
        scores = delta[:, :, None] + inner[candidates[:, i - 1, :, None], candidates[:, i, None, :]]  # (B, k, k)
        back[:, i] = scores.argmax(axis=1)
        delta = np.take_along_axis(scores, back[:, i][:, None, :], axis=1)[:, 0] + cand_em[:, i]
    local = np.empty((b, n), dtype=np.int64)
    local[:, n - 1] = (delta + transitions[candidates[:, n - 1], t]).argmax(axis=1)
    rows = np.arange(b)
    for i in range(n - 1, 0, -1):
        local[:, i - 1] = back[rows, i, local[:, i]]
    return np.take_along_axis(candidates, local[:, :, None], axis=2)[:, :, 0].astype(np.int64)


def chain_score(emissions: np.ndarray, transitions: np.ndarray, tags: np.ndarray) -> np.ndarray:
    """Log-potential of given tag sequences ``tags`` (B, n) -> (B,)."""
    b, n, t = emissions.shape
    if n == 0:
        return np.zeros(b)
    em = np.take_along_axis(emissions, tags[:, :, None], axis=2)[:, :, 0].sum(axis=1)
    prev = np.concatenate([np.full((b, 1), t), tags], axis=1)
    nxt = np.concatenate([tags, np.full((b, 1), t)], axis=1)
    return em + transitions[prev, nxt].sum(axis=1)


def chain_nll(
    emissions: np.ndarray, transitions: np.ndarray, gold: np.ndarray
) -> tuple[float, np.ndarray, np.ndarray]:
    """Negative log-likelihood summed over the batch and its gradients (expected minus observed counts).

    Returns ``(nll, d_emissions (B, n, T), d_transitions (T+1, T+1))``.
    """
    b, n, t = emissions.shape
    fb = chain_forward_backward(emissions, transitions, pairwise="sum")
    gold = np.asarray(gold, dtype=np.int64)
    nll = float((fb.log_z - chain_score(emissions, transitions, gold)).sum())
    d_em = fb.unary
    d_em[np.arange(b)[:, None], np.arange(n)[None, :], gold] -= 1.0  # one gold tag per position: no repeats
    assert fb.pair_counts is not None
    prev = np.concatenate([np.full((b, 1), t), gold], axis=1).ravel()
    nxt = np.concatenate([gold, np.full((b, 1), t)], axis=1).ravel()
    d_tr = fb.pair_counts - np.bincount(prev * (t + 1) + nxt, minlength=(t + 1) ** 2).reshape(t + 1, t + 1)
    return nll, d_em, d_tr


# ---------------------------------------------------------------------------------------------------------
# Features
# ---------------------------------------------------------------------------------------------------------

_LEX = ("bias", "lower", "form", "p1", "p2", "p3", "p4", "s1", "s2", "s3", "s4", "shape", "flags", "udict", "xdict",
        "ldict")
# (template, offset) pairs read at the neighbours
_CONTEXT = (
    ("lower", -2), ("lower", -1), ("lower", 1), ("lower", 2),
    ("s3", -2), ("s3", -1), ("s3", 1), ("s3", 2),
    ("shape", -1), ("shape", 1),
    ("udict", -2), ("udict", -1), ("udict", 1), ("udict", 2),
)
_BIGRAMS = (
    (("lower", -1), ("lower", 0)), (("lower", 0), ("lower", 1)), (("udict", -1), ("udict", 1)),
    (("lower", 0), ("udict", 1)), (("udict", -1), ("lower", 0)),
    (("udict", 1), ("udict", 2)), (("udict", -2), ("udict", -1)),
    (("lower", -1), ("s3", 0)), (("s3", 0), ("lower", 1)),
)
_LEXICONS = ("udict", "xdict", "ldict")  # tag-dictionary templates (values looked up in the lexicon)
_RARE, _UNK = hash_string("<rare>"), hash_string("<unk>")

# A lexicon maps a template name to (sorted uint64 codes of the words it knows, uint64 codes of their values).
Lexicon = dict[str, tuple[np.ndarray, np.ndarray]]


@cache
def _seed(name: str) -> np.uint64:
    return np.uint64(hash_string(f"tagger|{name}"))


def _lookup_table(table: tuple[np.ndarray, np.ndarray], keys: np.ndarray, default: int) -> np.ndarray:
    """Values of ``keys`` (uint64 codes) in a lexicon table, ``default`` where absent."""
    known, values = table
    if len(known) == 0:
        return np.full(len(keys), default, dtype=np.uint64)
    at = np.minimum(np.searchsorted(known, keys), len(known) - 1)
    return np.where(known[at] == keys, values[at], np.uint64(default))


def _value_codes(name: str, forms: list[str], lower: list[str], lexicon: Lexicon) -> np.ndarray:
    """Codes (U,) uint64 of lexical template ``name`` for each distinct form."""
    if name == "bias":
        return np.zeros(len(forms), dtype=np.uint64)
    if name in ("lower", "form", *_LEXICONS):
        keys = hash_strings(lower if name in ("lower", "ldict") else forms)
        if name in _LEXICONS:
            return _lookup_table(lexicon[name], keys, _RARE)
        # word identities only for frequent words (those in the tag dictionaries): rare training words
        # then train the affix and shape features that unknown words depend on
        known = lexicon["ldict" if name == "lower" else "udict"][0]
        return np.where(np.isin(keys, known), keys, np.uint64(_UNK))
    if name == "shape":
        return hash_strings([word_shape(f) for f in forms])
    if name == "flags":
        return hash_strings([f"{any(c.isdigit() for c in f)}{'-' in f}{f[:1].isupper()}{f.isupper()}" for f in forms])
    if name[0] in "ps" and name[1:].isdigit():
        k = int(name[1:])
        return hash_strings([w[:k] for w in lower] if name[0] == "p" else [w[-k:] for w in lower])
    raise ValueError(f"unknown tagger template {name!r}")


def feature_codes(
    sentences: Sequence[HasForms], lexicon: Lexicon
) -> tuple[np.ndarray, np.ndarray]:
    """Hashed feature codes of every word of ``sentences`` (concatenated in order) -> ((N, K) uint64, offsets).

    Lexical templates are hashed once per distinct form; neighbour templates read a flat array in which
    every sentence is padded with two BOS and two EOS pseudo-words, so the word at offset ``d`` of padded
    position ``p`` is ``p + d`` for all words at once.
    """
    lengths = np.array([len(s.forms) for s in sentences], dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    padded: list[str] = []
    for s in sentences:
        padded += [_BOS, _BOS, *s.forms, _EOS, _EOS]
    types, inverse = np.unique(np.array(padded, dtype=object), return_inverse=True)
    forms = [str(x) for x in types]
    lower = [f.lower() for f in forms]
    needed = {*_LEX, *(a for a, _ in _CONTEXT), *(a for pair in _BIGRAMS for a, _ in pair)}
    values = {name: _value_codes(name, forms, lower, lexicon) for name in needed}
    # padded position of each real word: sentence i's word j sits at offsets[i] + 4 i + 2 + j
    sent_of = np.repeat(np.arange(len(sentences)), lengths)
    pos = np.arange(int(offsets[-1])) + 4 * sent_of + 2
    codes = np.empty((len(pos), len(_LEX) + len(_CONTEXT) + len(_BIGRAMS)), dtype=np.uint64)
    col = 0
    for name in _LEX:
        codes[:, col] = mix(_seed(name), values[name][inverse[pos]])
        col += 1
    for name, d in _CONTEXT:
        codes[:, col] = mix(_seed(f"{name}@{d}"), values[name][inverse[pos + d]])
        col += 1
    for (a, d), (c, e) in _BIGRAMS:
        key = _seed(f"{a}@{d}+{c}@{e}")
        codes[:, col] = mix(mix(key, values[a][inverse[pos + d]]), values[c][inverse[pos + e]])
        col += 1
    # sentence-initial capitalisation is uninformative: conjoin the shape of the first word with "first"
    first = offsets[:-1][lengths > 0]
    codes[first, _LEX.index("shape")] = mix(_seed("first"), codes[first, _LEX.index("shape")])
    return codes, offsets


def build_lexicon(sentences: Sequence[Any], min_count: int = 3) -> Lexicon:
    """Tag dictionaries of frequent words: ``udict``/``xdict`` map a form seen at least ``min_count`` times
    to (the code of) the set of UPOS/XPOS tags it was seen with, e.g. "ADJ|NOUN"; ``ldict`` maps a
    lowercased form (its case variants counted together) to its UPOS tags."""
    count: dict[str, Counter[str]] = {"udict": Counter(), "xdict": Counter(), "ldict": Counter()}
    tags: dict[str, dict[str, set[str]]] = {k: defaultdict(set) for k in count}
    for s in sentences:
        for f, u, x in zip(s.forms, s.upos, s.xpos, strict=True):
            for name, key, tag in (("udict", f, u), ("xdict", f, x), ("ldict", f.lower(), u)):
                count[name][key] += 1
                tags[name][key].add(tag)
    lexicon: Lexicon = {}
    for name in _LEXICONS:
        words = sorted(k for k, c in count[name].items() if c >= min_count)
        keys = hash_strings(words)
        values = hash_strings(["|".join(sorted(tags[name][w])) for w in words])
        order = np.argsort(keys)
        lexicon[name] = (keys[order], values[order])
    return lexicon


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
    upos_emission: np.ndarray  # (F+1, n_upos) float32, row 0 = unknown feature (always 0)
    xpos_emission: np.ndarray  # (F+1, n_xpos) float32
    transition: np.ndarray  # (S+1, S+1) float64

    def emissions(self, ids: np.ndarray) -> np.ndarray:
        """(..., K) feature ids -> (..., S) float64 state emission scores."""
        eu = self.upos_emission[ids].sum(axis=-2, dtype=np.float64)
        ex = self.xpos_emission[ids].sum(axis=-2, dtype=np.float64)
        return eu[..., self.states[:, 0]] + ex[..., self.states[:, 1]]

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

    @property
    def upos_labels(self) -> list[str]:
        return self.crf.upos_labels

    @property
    def xpos_labels(self) -> list[str]:
        return self.crf.xpos_labels

    def _ids(self, sentences: Sequence[HasForms]) -> tuple[np.ndarray, np.ndarray]:
        codes, offsets = feature_codes(sentences, self.lexicon)
        return self._lookup(codes), offsets

    def _lookup(self, codes: np.ndarray) -> np.ndarray:
        """Feature codes -> int32 ids (index in ``features`` + 1, or 0 for a feature not kept in training)."""
        if len(self.features) == 0:
            return np.zeros(codes.shape, dtype=np.int32)
        at = np.minimum(np.searchsorted(self.features, codes), len(self.features) - 1)
        return np.where(self.features[at] == codes, at + 1, 0).astype(np.int32)

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
    def tag(self, sentences: Sequence[HasForms], *, batch_size: int = 64, samples: int = 0) -> list[TagResult]:
        """Viterbi tags and forward-backward marginals of every sentence (given in any order and length), and
        ``samples`` (UPOS, XPOS) sequences per sentence drawn from the posterior ``p(y | x)``
        (``chain_sample``; each sentence's uniform numbers come from a generator seeded by its words, so a
        sentence gets the same samples whatever it is batched with).

        The Viterbi search is restricted to each word's ``viterbi_candidates`` most probable (UPOS, XPOS)
        states by marginal, which leaves the best path unchanged unless it goes through a state of tiny
        marginal probability, and cuts the cost per word from S^2 to k^2 for S (about 100) states.
        """
        results: list[TagResult | None] = [None] * len(sentences)
        ids, offsets = self._ids(sentences)
        lengths = [len(s.forms) for s in sentences]
        crf = self.crf
        upos, xpos = np.array(self.upos_labels, dtype=object), np.array(self.xpos_labels, dtype=object)
        for idx in length_batches(lengths, batch_size, max_arcs=1 << 62):
            n = lengths[idx[0]]
            tok = offsets[idx][:, None] + np.arange(n)
            em = crf.emissions(ids[tok])
            marginals = chain_forward_backward(em, crf.transition).unary
            k = min(self.viterbi_candidates, marginals.shape[-1])
            candidates = np.argpartition(-marginals, k - 1, axis=-1)[..., :k]
            path = crf.states[chain_viterbi(em, crf.transition, candidates)]  # (B, n, 2)
            um, xm = crf.split(marginals)
            drawn = np.zeros((len(idx), 0, n, 2), dtype=np.int64)
            if samples > 0:
                uniform = np.stack([np.random.default_rng(int(hash_string("\x1f".join(sentences[i].forms))))
                                    .random((samples, n)) for i in idx])
                drawn = crf.states[chain_sample(em, crf.transition, uniform)]  # (B, samples, n, 2)
            for r, i in enumerate(idx):
                results[i] = TagResult(upos[path[r, :, 0]].tolist(), xpos[path[r, :, 1]].tolist(), um[r], xm[r],
                                       [(upos[y[:, 0]].tolist(), xpos[y[:, 1]].tolist()) for y in drawn[r]])
        assert all(r is not None for r in results)
        return results  # type: ignore[return-value]

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
            "format": STATE_FORMAT, "version": STATE_VERSION, "features": _feature_spec(),
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
            if meta.get("features") != _feature_spec():
                raise ValueError("the tagger state was trained with different feature templates")
            upos = [str(x) for x in meta["upos_labels"]]
            xpos = [str(x) for x in meta["xpos_labels"]]
            features = _sorted_codes(arrays["features"], "features")
            lexicon: Lexicon = {}
            for name in _LEXICONS:
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
            if not (np.isfinite(eu).all() and np.isfinite(ex).all() and np.isfinite(tr).all()):
                raise ValueError("tagger weights are not finite")
            if eu[0].any() or ex[0].any():
                raise ValueError("the unknown feature (row 0) must have weight 0")
            crf = JointCrf(upos, xpos, states.astype(np.int64), np.asarray(eu, dtype=np.float32),
                           np.asarray(ex, dtype=np.float32), np.asarray(tr, dtype=np.float64))
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


def _feature_spec() -> dict[str, Any]:
    """The feature templates, recorded in a state so that a model is never used with different ones."""
    return {"lexical": list(_LEX), "context": [list(c) for c in _CONTEXT],
            "bigrams": [[list(a), list(b)] for a, b in _BIGRAMS]}
