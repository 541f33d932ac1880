"""Arc potentials straight from the tokens: feature hashing and the weight lookup fused in one compiled pass.

``scores[b, h, m] = sum_k weights[features[b, h, m, k]]`` (``engine.scoring.potentials.arc_scores``) needs
the feature indices ``(B, n+1, n+1, K)`` of ``engine.features.extract.FeatureExtractor.extract`` first: for
the shipped model K = 393 slots per arc, 289 of them "between" features (McDonald et al. 2005, Table 1:
one per UPOS tag lying between head and dependent), most of them the null feature because the tag is
absent. Inference never needs the indices, only their weights' sums, so this module computes the same
hashes (``engine.hashing.mix``, bucket ``1 + code % (dim - 1)``) arc by arc in a numba kernel and
adds each weight as soon as its index is known, for every weight vector at once (the model's and the
pruner's share the features). "Between" features are visited only for the tags that are present
(the absent ones are the null feature: ``weights[0]`` each). Training keeps the indices
(``extract`` + ``arc_scores``); the two paths agree to rounding (``tests/engine/scoring/test_fused_scores.py``).

The head and dependent halves of each template's hash depend on one position each, so they are hashed
once per word (O(n K)); only the conjunction, its context and the bucket are per arc (O(n^2 K)).
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache

import numpy as np
from numba import njit  # type: ignore[import-untyped]

from engine.features.extract import (
    UPOS_TAGS,
    FeatureExtractor,
    Tokens,
    attribute_hashes_many,
    direction_distance,
)
from engine.hashing import hash_string, hash_strings, mix_pair
from engine.model.widen import HALF_VALUES, weight_value
from engine.text.tag_candidates import first_candidates_are

_DEP_SEED = np.uint64(0x51ED27)
_CONTEXTS = {"none": 0, "dir": 1, "dist": 2}


@njit(cache=True, nogil=True)  # releases the GIL: the service's parse threads run it side by side
def _halves(codes: np.ndarray, starts: np.ndarray, attrs: np.ndarray) -> np.ndarray:
    """(B, n+1, T): each template's hash of one side's attributes (``attrs[t]``, -1 padded) per word, from
    the code ``starts[t]``."""
    b, n1, _ = codes.shape
    t_count = len(starts)
    out = np.empty((b, n1, t_count), dtype=np.uint64)
    for s in range(b):
        for p in range(n1):
            for t in range(t_count):
                x = starts[t]
                for j in range(attrs.shape[1]):
                    a = attrs[t, j]
                    if a < 0:
                        break
                    x = mix_pair(x, codes[s, p, a])
                out[s, p, t] = x
    return out


@njit(cache=True, nogil=True)  # releases the GIL: the service's parse threads run it side by side
def _scores_kernel(heads: np.ndarray, deps: np.ndarray, contexts: np.ndarray, between: np.ndarray,
                   dir_codes: np.ndarray, dist_codes: np.ndarray, tags: np.ndarray, tag_codes: np.ndarray,
                   modulus: np.uint64, table: np.ndarray, decode: np.ndarray, ref: np.ndarray, diff: np.ndarray,
                   out: np.ndarray) -> None:
    """``out[w, b, h, m]`` = sum over the arc's feature indices of the weights ``table[:, w]`` (float64, or
    float16 bits standing for ``decode[bits]``).

    Sentence ``b`` with ``ref[b] = r < b`` is a copy of sentence ``r`` under other tags: an arc whose two
    words have the same hash halves in both (``diff[b, h]`` and ``diff[b, m]`` False) and the same tags in
    between has the same features, so its sums are copied from ``r`` (bit for bit what computing them gives);
    every other arc is computed."""
    n_weights = out.shape[0]
    b_count, n1, t_count = heads.shape
    n_tags = len(tag_codes)
    null = np.empty(n_weights)
    for w in range(n_weights):
        null[w] = weight_value(table[0, w], decode)
    n_between = 0
    for t in range(t_count):
        if between[t]:
            n_between += 1
    # an arc's indices are hashed first and looked up after, in a loop of independent loads: the lookups
    # are cache misses in a table of 16-64 MB, and this lets the processor have many in flight at once
    index = np.empty(t_count * n_tags, dtype=np.int64)
    for s in range(b_count):
        r = ref[s]
        for h in range(n1):
            for m in range(n1):
                if m == 0 or m == h:
                    for w in range(n_weights):
                        out[w, s, h, m] = -np.inf
                    continue
                lo, hi = (h, m) if h < m else (m, h)
                mask = 0  # the UPOS tags strictly between h and m, as bits
                for p in range(lo + 1, hi):
                    if tags[s, p] >= 0:
                        mask |= 1 << tags[s, p]
                if r != s and not diff[s, h] and not diff[s, m]:
                    before = 0
                    for p in range(lo + 1, hi):
                        if tags[r, p] >= 0:
                            before |= 1 << tags[r, p]
                    if before == mask:
                        for w in range(n_weights):
                            out[w, s, h, m] = out[w, r, h, m]
                        continue
                count, present = _arc_indices(heads, deps, s, h, m, mask, contexts, between, dir_codes, dist_codes,
                                              tag_codes, modulus, index)
                for w in range(n_weights):
                    acc = null[w] * (n_between * (n_tags - present))  # the absent "between" slots
                    for i in range(count):
                        acc += weight_value(table[index[i], w], decode)
                    out[w, s, h, m] = acc


@njit(cache=True, nogil=True)
def _arc_indices(heads: np.ndarray, deps: np.ndarray, s: int, h: int, m: int, mask: int, contexts: np.ndarray,
                 between: np.ndarray, dir_codes: np.ndarray, dist_codes: np.ndarray, tag_codes: np.ndarray,
                 modulus: np.uint64, index: np.ndarray) -> tuple[int, int]:
    """The feature indices of arc ``h -> m`` of sentence ``s`` into ``index`` (the "between" templates once
    per tag in ``mask``, the tags strictly between h and m): (how many, how many tags ``mask`` holds)."""
    n_tags = len(tag_codes)
    present = 0
    for k in range(n_tags):
        if mask & (1 << k):
            present += 1
    count = 0
    for t in range(len(contexts)):
        arc = mix_pair(heads[s, h, t], deps[s, m, t])
        if contexts[t] == 1:
            arc = mix_pair(arc, dir_codes[h, m])
        elif contexts[t] == 2:
            arc = mix_pair(arc, dist_codes[h, m])
        if between[t]:
            for k in range(n_tags):
                if mask & (1 << k):
                    index[count] = np.int64(mix_pair(arc, tag_codes[k]) % modulus) + 1
                    count += 1
        else:
            index[count] = np.int64(arc % modulus) + 1
            count += 1
    return count, present


@njit(cache=True, nogil=True)  # releases the GIL: the service's parse threads run it side by side
def _listed_kernel(heads: np.ndarray, deps: np.ndarray, contexts: np.ndarray, between: np.ndarray,
                   dir_codes: np.ndarray, dist_codes: np.ndarray, tags: np.ndarray, tag_codes: np.ndarray,
                   modulus: np.uint64, table: np.ndarray, decode: np.ndarray, ref: np.ndarray, diff: np.ndarray,
                   arcs: np.ndarray, ref_scores: np.ndarray, out: np.ndarray) -> None:
    """``out[j]``: the score under the first weight vector (``table[:, 0]``) of arc ``arcs[j] = (s, h, m)``,
    ``h != m``, ``m > 0``: ``ref_scores[j]`` (the score of that arc in sentence ``ref[s]``) when the arc has
    the same features in both (``_scores_kernel``'s test), else computed as ``_scores_kernel`` computes it."""
    n_tags = len(tag_codes)
    null = weight_value(table[0, 0], decode)
    n_between = 0
    for t in range(len(contexts)):
        if between[t]:
            n_between += 1
    index = np.empty(len(contexts) * n_tags, dtype=np.int64)
    for j in range(arcs.shape[0]):
        s, h, m = arcs[j, 0], arcs[j, 1], arcs[j, 2]
        r = ref[s]
        lo, hi = (h, m) if h < m else (m, h)
        mask = 0
        before = 0
        for p in range(lo + 1, hi):
            if tags[s, p] >= 0:
                mask |= 1 << tags[s, p]
            if tags[r, p] >= 0:
                before |= 1 << tags[r, p]
        if r != s and not diff[s, h] and not diff[s, m] and before == mask:
            out[j] = ref_scores[j]
            continue
        count, present = _arc_indices(heads, deps, s, h, m, mask, contexts, between, dir_codes, dist_codes,
                                      tag_codes, modulus, index)
        acc = null * (n_between * (n_tags - present))
        for i in range(count):
            acc += weight_value(table[index[i], 0], decode)
        out[j] = acc


@lru_cache(maxsize=32)
def _tables(extractor: FeatureExtractor) -> tuple[list[str], np.ndarray, np.ndarray, np.ndarray, np.ndarray,
                                                  np.ndarray]:
    """The extractor's templates as arrays: attributes, per-template seeds, attribute indices of each side
    (-1 padded), context kinds and between flags."""
    attrs = sorted({a for t in extractor.templates for a in t.head + t.dep})
    index = {a: i for i, a in enumerate(attrs)}
    width = max(1, max(max(len(t.head), len(t.dep)) for t in extractor.templates))
    head = np.full((len(extractor.templates), width), -1, dtype=np.int64)
    dep = np.full_like(head, -1)
    for i, t in enumerate(extractor.templates):
        head[i, : len(t.head)] = [index[a] for a in t.head]
        dep[i, : len(t.dep)] = [index[a] for a in t.dep]
    seeds = np.array([hash_string(t.name) for t in extractor.templates], dtype=np.uint64)
    contexts = np.array([_CONTEXTS[t.context] for t in extractor.templates], dtype=np.int64)
    between = np.array([t.between for t in extractor.templates], dtype=np.bool_)
    return attrs, seeds, head, dep, contexts, between


@lru_cache(maxsize=64)
def _context_codes(n: int) -> tuple[np.ndarray, np.ndarray]:
    direction, distance = direction_distance(n)
    return (hash_strings([f"dir{d}" for d in range(3)])[direction],
            hash_strings([f"dist{d}" for d in range(200)])[distance])


def stored_table(stored: Sequence[np.ndarray], dim: int) -> np.ndarray | None:
    """The kernel's table straight from a model's stored weight arrays (float16 or float32, the first ``dim``
    entries of each), interleaved; None for other types."""
    if all(a.dtype == np.float16 for a in stored):
        return np.stack([a[:dim].view(np.uint16) for a in stored], axis=1)
    if all(a.dtype == np.float32 for a in stored):
        return np.stack([a[:dim] for a in stored], axis=1) if len(stored) > 1 else stored[0][:dim, None]
    return None


def narrowest_exact(values: np.ndarray) -> np.ndarray:
    """``values`` in the narrowest float type that holds every one of them exactly (float16, float32, else as
    they are): a smaller weight table keeps more of itself in cache, and the sums read from it are the same."""
    for narrow in (np.float16, np.float32):
        with np.errstate(over="ignore"):
            cast = values.astype(narrow)
        if np.array_equal(cast.astype(values.dtype), values):
            return cast
    return values


def _weight_tables(weights: Sequence[np.ndarray], dim: int) -> list[np.ndarray]:
    """The weights as the kernel reads them. When every vector is read-only (a loaded model) the table is
    built once: interleaved (dim, W), so that one cache line serves every vector, in the narrowest type that
    holds the values exactly (float16 bits, float32, float64: the smaller the table, the more of it stays in
    cache). Otherwise a (dim, 1) view of each vector (no copy; weights a trainer is changing stay live)."""
    if not all(not w.flags.writeable for w in weights):
        return [np.asarray(w[:dim], dtype=np.float64)[:, None] for w in weights]
    table = narrowest_exact(np.stack([np.asarray(w[:dim], dtype=np.float64) for w in weights], axis=1))
    return [table.view(np.uint16) if table.dtype == np.float16 else table]


def word_codes(attrs: Sequence[str], sentences: Sequence[Tokens]) -> tuple[np.ndarray, np.ndarray]:
    """Per word of a batch of one length: the hash code of each attribute of ``attrs`` (B, n+1, A) and the UPOS
    index (B, n+1), -1 for none. Sentences that share their list of forms (copies of one sentence under other
    tags) hash the attributes of the forms once."""
    b, n1 = len(sentences), len(sentences[0].forms) + 1
    distinct: dict[int, Tokens] = {}  # one sentence per distinct list of forms (copies share their sentence's)
    for s in sentences:
        distinct.setdefault(id(s.forms), s)
    if len(distinct) == b:  # no copies: every attribute in one pass
        codes = attribute_hashes_many(sentences, attrs)
    else:
        codes = np.empty((b, n1, len(attrs)), dtype=np.uint64)
        tagged = [j for j, a in enumerate(attrs) if a.split("_")[0] in ("upos", "xpos")]
        worded = [j for j in range(len(attrs)) if j not in tagged]
        if worded:
            words = attribute_hashes_many(list(distinct.values()), [attrs[j] for j in worded])
            position = {key: i for i, key in enumerate(distinct)}
            codes[:, :, worded] = words[[position[id(s.forms)] for s in sentences]]
        if tagged:
            codes[:, :, tagged] = attribute_hashes_many(sentences, [attrs[j] for j in tagged])
    tags = np.full((b, n1), -1, dtype=np.int64)
    tags[:, 1:] = [[_TAG_INDEX.get(t, -1) for t in s.upos] for s in sentences]
    return codes, tags


_TAG_INDEX = {t: i for i, t in enumerate(UPOS_TAGS)}


class ArcScorer:
    """Arc potentials of one or more weight vectors over one extractor's features (``fused_arc_scores``).
    Build it once per model: a read-only model's weights are laid out for the kernel here."""

    def __init__(self, extractor: FeatureExtractor, weights: Sequence[np.ndarray],
                 table: np.ndarray | None = None) -> None:
        """``table`` (dim, len(weights)): the weights as stored, interleaved, when the caller has them (a
        loaded model: float16 bits as uint16, or float32; ``weights`` must be their float64 values)."""
        if not weights or any(len(w) < extractor.dim for w in weights):
            raise ValueError(f"weight vectors of at least {extractor.dim} entries are needed")
        if table is not None and (table.dtype not in (np.uint16, np.float32, np.float64)
                                  or table.shape != (extractor.dim, len(weights))):
            raise ValueError("table must be uint16 (float16 bits), float32 or float64 of shape (dim, vectors)")
        self.extractor = extractor
        self.sources = tuple(weights)
        self.tables = [table] if table is not None else _weight_tables(weights, extractor.dim)
        self.attrs, self.seeds, self.head, self.dep, self.contexts, self.between = _tables(extractor)
        self.dep_seeds = np.full_like(self.seeds, _DEP_SEED)
        self.tag_codes = hash_strings(list(UPOS_TAGS))

    def serves(self, weights: Sequence[np.ndarray]) -> bool:
        """Whether this scorer was built for these very arrays (and they cannot have changed since)."""
        return len(weights) == len(self.sources) and all(
            a is b and not a.flags.writeable for a, b in zip(weights, self.sources, strict=True))

    def codes(self, sentences: Sequence[Tokens]) -> tuple[np.ndarray, np.ndarray]:
        """``word_codes`` of this scorer's attributes."""
        return word_codes(self.attrs, sentences)

    def _words(self, sentences: Sequence[Tokens], ref: np.ndarray) -> tuple[np.ndarray, ...]:
        """Per word of a batch of one length: its UPOS index, the head and dependent hash halves of every
        template, and whether either half differs from those of the same word in sentence ``ref[b]``."""
        codes, tags = self.codes(sentences)
        heads = _halves(codes, self.seeds, self.head)
        deps = _halves(codes, self.dep_seeds, self.dep)
        return tags, heads, deps, (heads != heads[ref]).any(axis=2) | (deps != deps[ref]).any(axis=2)

    def __call__(self, sentences: Sequence[Tokens]) -> list[np.ndarray]:
        n = len(sentences[0].forms)
        if any(len(s.forms) != n for s in sentences):
            raise ValueError("ArcScorer takes a batch of sentences of one length")
        first: dict[int, int] = {}  # copies of one sentence under other tags share its list of forms
        ref = np.array([first.setdefault(id(s.forms), i) for i, s in enumerate(sentences)], dtype=np.int64)
        tags, heads, deps, diff = self._words(sentences, ref)
        dir_codes, dist_codes = _context_codes(n)
        modulus = np.uint64(self.extractor.dim - 1)
        out: list[np.ndarray] = []
        for table in self.tables:
            part = np.empty((table.shape[1], len(sentences), n + 1, n + 1))
            _scores_kernel(heads, deps, self.contexts, self.between, dir_codes, dist_codes, tags, self.tag_codes,
                           modulus, table, HALF_VALUES, ref, diff, part)
            out.extend(part)
        return out


    def listed_scores(self, sentences: Sequence[Tokens], arcs: np.ndarray) -> np.ndarray:
        """``self(sentences)[0]`` at the arcs ``arcs`` (J, 3) = (sentence, h, m) only (``h != m``, ``m > 0``), bit
        for bit: the same kernel arithmetic, O(J) arcs hashed instead of every arc."""
        n = len(sentences[0].forms)
        if any(len(s.forms) != n for s in sentences):
            raise ValueError("ArcScorer takes a batch of sentences of one length")
        ref = np.arange(len(sentences))  # no copies: every listed arc is computed
        tags, heads, deps, diff = self._words(sentences, ref)
        dir_codes, dist_codes = _context_codes(n)
        out = np.empty(len(arcs))
        _listed_kernel(heads, deps, self.contexts, self.between, dir_codes, dist_codes, tags, self.tag_codes,
                       np.uint64(self.extractor.dim - 1), self.tables[0], HALF_VALUES, ref, diff,
                       np.ascontiguousarray(arcs, dtype=np.int64), np.zeros(len(arcs)), out)
        return out

    def copy_scores(self, sentences: Sequence[Tokens], copies: Sequence[Tokens], owner: np.ndarray,
                    arcs: np.ndarray, own_scores: np.ndarray) -> np.ndarray:
        """Scores under the first weight vector of the arcs ``arcs`` (J, 3) = (copy, h, m) of ``copies`` (other
        taggings of ``sentences``: copy ``c`` is one of sentence ``owner[c]``, all of one length). An arc whose
        features a copy leaves alone gets its sentence's score, ``own_scores`` (J,); only the others are
        hashed and looked up: O(J) instead of every arc of every copy."""
        items = [*sentences, *copies]
        n = len(sentences[0].forms)
        if any(len(s.forms) != n for s in items):
            raise ValueError("ArcScorer takes a batch of sentences of one length")
        ref = np.concatenate([np.arange(len(sentences)), np.asarray(owner, dtype=np.int64)])
        tags, heads, deps, diff = self._words(items, ref)
        dir_codes, dist_codes = _context_codes(n)
        listed = np.ascontiguousarray(arcs, dtype=np.int64).copy()
        listed[:, 0] += len(sentences)
        out = np.empty(len(listed))
        _listed_kernel(heads, deps, self.contexts, self.between, dir_codes, dist_codes, tags, self.tag_codes,
                       np.uint64(self.extractor.dim - 1), self.tables[0], HALF_VALUES, ref, diff, listed,
                       np.asarray(own_scores, dtype=np.float64), out)
        return out


    def _candidate_pairs(self, sentence: Tokens, upos: Sequence[Sequence[str]], xpos: Sequence[Sequence[str]],
                         heads: np.ndarray, deps: np.ndarray, skip: np.ndarray | None = None
                         ) -> tuple[tuple[np.ndarray, ...], np.ndarray, tuple[np.ndarray, ...]]:
        """What ``candidate_scores`` and ``candidate_gradient`` share: the kernels' word arrays (head halves per
        pair, dependent halves per pair, direction and distance codes, the 1-best UPOS per pair), the listed
        (pair, h, m) rows of the allowed candidate pairs of each arc (but the arcs ``skip``, a mask), and each
        row's (arc, a, b)."""
        n, g = len(sentence.forms), max(len(u) for u in upos)
        codes, tags = self.codes([sentence])
        copies = np.repeat(codes, g, axis=0)
        for col, attr in enumerate(self.attrs):
            if attr in ("upos", "xpos"):
                rows = upos if attr == "upos" else xpos
                for c in range(g):
                    copies[c, :, col] = hash_strings(["<ROOT>", *(r[c] if c < len(r) else r[0] for r in rows)])
        halves = _halves(copies, self.seeds, self.head), _halves(copies, self.dep_seeds, self.dep)
        count = np.array([1, *(len(u) for u in upos)])
        grid = np.arange(g)
        ok = (grid[None, :, None] < count[heads][:, None, None]) & (grid[None, None, :] < count[deps][:, None, None])
        if skip is not None:
            ok &= ~skip[:, None, None]
        j, a, b = np.nonzero(ok)
        listed = np.stack([a * g + b, heads[j], deps[j]], axis=1).astype(np.int64)
        dir_codes, dist_codes = _context_codes(n)
        words = (np.repeat(halves[0], g, axis=0), np.tile(halves[1], (g, 1, 1)), dir_codes, dist_codes,
                 np.repeat(tags, g * g, axis=0))
        return words, listed, (j, a, b)

    def candidate_scores(self, sentence: Tokens, upos: Sequence[Sequence[str]], xpos: Sequence[Sequence[str]],
                         heads: np.ndarray, deps: np.ndarray, one_best: np.ndarray | None = None) -> np.ndarray:
        """TAGLINK potentials (``engine.graph.tags``): ``theta[j, a, b]`` (A, g, g), the score under the first
        weight vector of arc ``heads[j] -> deps[j]`` when the head's own UPOS and XPOS are its candidate ``a``
        (``upos[h - 1][a]``, ``xpos[h - 1][a]``) and the dependent's its candidate ``b``; ``-inf`` where a slot is
        not a candidate (ROOT has slot 0 only). Only the head's and the dependent's *own* tags change: the
        templates that read other words' tags (``upos_prev``, ``xpos_next``, ..., the "between" tags) read the
        sentence's tags (its 1-best), and so do the higher-order factors. Each candidate slot ``c`` is one copy
        of the sentence whose words carry their ``c``-th candidate as own tags, hashed into per-word template
        halves once (O(g n K)); pair ``(a, b)`` joins the head halves of copy ``a`` to the dependent halves of
        copy ``b`` in ``_listed_kernel``, only for the candidate pairs of the listed arcs (O(A g^2 K)).

        ``one_best`` (A,): the arcs' scores under the sentence's own tags (``__call__``'s), when each word's
        candidate 0 *is* its tags (``sentence.upos``, ``sentence.xpos``; else ValueError): an arc whose two words
        have one candidate each then takes it as ``theta[j, 0, 0]`` (the same features of the same weights,
        summed in the same order: equal bit for bit, tested) and is not scored again."""
        skip = None
        if one_best is not None:
            if not first_candidates_are(sentence, upos, xpos):
                raise ValueError("one_best scores need each word's first candidate to be its own tags")
            count = np.array([1, *(len(u) for u in upos)])
            skip = (count[heads] == 1) & (count[deps] == 1)
        (head_halves, dep_halves, dir_codes, dist_codes, tags), listed, (j, a, b) = self._candidate_pairs(
            sentence, upos, xpos, heads, deps, skip)
        n1, g = len(sentence.forms) + 1, max(len(u) for u in upos)
        pairs = g * g
        out = np.empty(len(listed))
        _listed_kernel(head_halves, dep_halves, self.contexts, self.between, dir_codes, dist_codes, tags,
                       self.tag_codes, np.uint64(self.extractor.dim - 1), self.tables[0], HALF_VALUES,
                       np.arange(pairs), np.ones((pairs, n1), dtype=np.bool_), listed, np.zeros(len(listed)), out)
        theta = np.full((len(heads), g, g), -np.inf)
        theta[j, a, b] = out
        if skip is not None:
            assert one_best is not None
            theta[skip, 0, 0] = one_best[skip]
        return theta

    def candidate_gradient(self, sentence: Tokens, upos: Sequence[Sequence[str]], xpos: Sequence[Sequence[str]],
                           heads: np.ndarray, deps: np.ndarray, coef: np.ndarray, out: np.ndarray) -> None:
        """Add ``coef[j, a, b]`` times the feature counts of arc ``heads[j] -> deps[j]`` under candidate pair
        ``(a, b)`` (the features ``candidate_scores`` sums) into ``out`` (the first-order weights' gradient, at
        least ``extractor.dim`` long): ``d theta[j, a, b] / d weights`` weighted by ``coef``, so that
        ``out . w`` grows by ``sum coef * theta`` (tested). Pairs that are not candidates are skipped."""
        (head_halves, dep_halves, dir_codes, dist_codes, tags), listed, (j, a, b) = self._candidate_pairs(
            sentence, upos, xpos, heads, deps)
        weights = np.ascontiguousarray(coef[j, a, b], dtype=np.float64)
        _listed_scatter(head_halves, dep_halves, self.contexts, self.between, dir_codes, dist_codes, tags,
                        self.tag_codes, np.uint64(self.extractor.dim - 1), listed, weights, out)


@njit(cache=True, nogil=True)
def _listed_scatter(heads: np.ndarray, deps: np.ndarray, contexts: np.ndarray, between: np.ndarray,
                    dir_codes: np.ndarray, dist_codes: np.ndarray, tags: np.ndarray, tag_codes: np.ndarray,
                    modulus: np.uint64, arcs: np.ndarray, coef: np.ndarray, out: np.ndarray) -> None:
    """``out[i] += coef[j]`` for each feature index ``i`` of listed arc ``arcs[j] = (s, h, m)`` (the indices
    ``_listed_kernel`` sums the weights of), the absent "between" slots on the null feature ``out[0]``."""
    n_tags = len(tag_codes)
    n_between = 0
    for t in range(len(contexts)):
        if between[t]:
            n_between += 1
    index = np.empty(len(contexts) * n_tags, dtype=np.int64)
    null = 0.0
    for j in range(arcs.shape[0]):
        c = coef[j]
        if c == 0.0:
            continue
        s, h, m = arcs[j, 0], arcs[j, 1], arcs[j, 2]
        lo, hi = (h, m) if h < m else (m, h)
        mask = 0
        for p in range(lo + 1, hi):
            if tags[s, p] >= 0:
                mask |= 1 << tags[s, p]
        count, present = _arc_indices(heads, deps, s, h, m, mask, contexts, between, dir_codes, dist_codes,
                                      tag_codes, modulus, index)
        null += c * (n_between * (n_tags - present))
        for i in range(count):
            out[index[i]] += c
    out[0] += null


def fused_arc_scores(extractor: FeatureExtractor, sentences: Sequence[Tokens],
                     weights: Sequence[np.ndarray]) -> list[np.ndarray]:
    """For each weight vector (at least ``extractor.dim`` long), the arc potentials (B, n+1, n+1) that
    ``arc_scores(w, extractor.extract(sentences))`` gives (to rounding), without the feature array."""
    return ArcScorer(extractor, weights)(sentences)
