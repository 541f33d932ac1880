"""First-order feature indices of listed arcs only: the rows of ``FeatureExtractor.extract`` that a trainer reads.

Second-order training (``engine.training.surrogate``, ``engine.training.erma``) scores and differentiates the
first-order features of each graph's kept arcs only: those the fixed first-order pruner keeps (Smith & Eisner
2008 §9.1) and the gold arcs. ``extract`` hashes every arc of every sentence, (B, n+1, n+1, K) indices; with 5-7
kept arcs per word most of that work was thrown away at every step of every epoch. ``kept_feature_rows`` gives the
(A, K) rows of the listed arcs ``(s, h, m)``, each equal to ``extract(sentences)[s, h, m]``: the same hashes as
``engine.scoring.fused`` computes (each template's head and dependent halves once per word, then the conjunction,
its context and the bucket ``1 + code % (dim - 1)`` per arc), in ``extract``'s slot order, with the "between"
slots of tags absent between ``h`` and ``m`` on the null feature 0 (``tests/engine/scoring/test_kept_features.py``).
``arc_features`` gives ``extract``'s whole array the same way, for the trainers that need every arc (first-order
CLL, the pruner's scores): one compiled pass instead of numpy passes over every template, bit for bit the same.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numba import njit  # type: ignore[import-untyped]

from engine.features.extract import FeatureExtractor, Tokens
from engine.hashing import hash_strings, mix_pair
from engine.scoring.fused import _DEP_SEED, UPOS_TAGS, ArcScorer, _context_codes, _halves, _tables, word_codes
from engine.scoring.hidden import cluster_blocks, marginalise_clusters


@njit(cache=True, nogil=True)
def _rows_kernel(heads: np.ndarray, deps: np.ndarray, contexts: np.ndarray, between: np.ndarray,
                 dir_codes: np.ndarray, dist_codes: np.ndarray, tags: np.ndarray, tag_codes: np.ndarray,
                 modulus: np.uint64, arcs: np.ndarray, target: np.ndarray,
                 out: np.ndarray) -> None:  # pragma: no cover - compiled
    """``out[target[j]]``: the K feature indices of arc ``arcs[j] = (s, h, m)`` in ``extract``'s slot order."""
    n_tags = len(tag_codes)
    for j in range(arcs.shape[0]):
        s, h, m, row = arcs[j, 0], arcs[j, 1], arcs[j, 2], target[j]
        lo, hi = (h, m) if h < m else (m, h)
        mask = 0
        for p in range(lo + 1, hi):
            if tags[s, p] >= 0:
                mask |= 1 << tags[s, p]
        slot = 0
        for t in range(len(contexts)):  # the hash as fused._arc_indices computes it, written out here too: a
            arc = mix_pair(heads[s, h, t], deps[s, m, t])  # shared inline helper made fused's kernel 4x slower
            if contexts[t] == 1:
                arc = mix_pair(arc, dir_codes[h, m])
            elif contexts[t] == 2:
                arc = mix_pair(arc, dist_codes[h, m])
            if between[t]:
                for k in range(n_tags):
                    out[row, slot] = np.int32(mix_pair(arc, tag_codes[k]) % modulus) + 1 if mask & (1 << k) else 0
                    slot += 1
            else:
                out[row, slot] = np.int32(arc % modulus) + 1
                slot += 1


def kept_feature_rows(extractor: FeatureExtractor, sentences: Sequence[Tokens], arcs: np.ndarray) -> np.ndarray:
    """The feature indices (A, K) int32 of the arcs ``arcs`` (A, 3) = (sentence, head, dependent) of a batch of
    sentences of one length (``h != m``, ``m > 0``): row ``j`` is ``extractor.extract(sentences)[arcs[j]]``."""
    arcs = np.ascontiguousarray(arcs, dtype=np.int64).reshape(-1, 3)
    out = np.empty((len(arcs), extractor.slots), dtype=np.int32)
    _hash_rows(extractor, sentences, arcs, np.arange(len(arcs)), out)
    return out


def arc_features(extractor: FeatureExtractor, sentences: Sequence[Tokens]) -> np.ndarray:
    """``extractor.extract(sentences)`` (B, n+1, n+1, K), equal bit for bit, hashed in one compiled pass: about
    4x faster than ``extract``'s numpy passes over every template (0.22 against 0.98 s for EWT dev's first 600
    sentences), which the first-order trainers pay for every training sentence."""
    b, n1 = len(sentences), len(sentences[0].forms) + 1
    possible = ~np.eye(n1, dtype=bool)
    possible[:, 0] = False  # no arc into ROOT, none from a word to itself: their slots stay the null feature
    arcs = np.argwhere(np.broadcast_to(possible, (b, n1, n1)))
    out = np.zeros((b, n1, n1, extractor.slots), dtype=np.int32)
    _hash_rows(extractor, sentences, arcs, (arcs[:, 0] * n1 + arcs[:, 1]) * n1 + arcs[:, 2],
               out.reshape(-1, extractor.slots))
    return out


def _hash_rows(extractor: FeatureExtractor, sentences: Sequence[Tokens], arcs: np.ndarray, target: np.ndarray,
               out: np.ndarray) -> None:
    """Row ``target[j]`` of ``out`` (R, K) gets arc ``arcs[j]``'s feature indices."""
    n = len(sentences[0].forms)
    if any(len(s.forms) != n for s in sentences):
        raise ValueError("the features of a batch need sentences of one length")
    if len(arcs) and ((arcs[:, 1] == arcs[:, 2]).any() or (arcs[:, 2] < 1).any()):
        raise ValueError("an arc into ROOT or from a word to itself has no features")
    attrs, seeds, head, dep, contexts, between = _tables(extractor)
    codes, tags = word_codes(attrs, sentences)
    heads = _halves(codes, seeds, head)
    deps = _halves(codes, np.full_like(seeds, _DEP_SEED), dep)
    dir_codes, dist_codes = _context_codes(n)
    _rows_kernel(heads, deps, contexts, between, dir_codes, dist_codes, tags, hash_strings(list(UPOS_TAGS)),
                 np.uint64(extractor.dim - 1), arcs, np.ascontiguousarray(target, dtype=np.int64), out)


def kept_link_scores(extractor: FeatureExtractor, weights: np.ndarray, clusters: int | None,
                     sentences: Sequence[Tokens], kept: Sequence[np.ndarray],
                     ) -> tuple[np.ndarray, list[np.ndarray], list[np.ndarray] | None]:
    """For a batch of one length and each sentence's kept arcs ``kept[j]`` (n+1, n+1) bool: the link
    potentials (B, n+1, n+1) (``-inf`` off the kept arcs), each sentence's kept arcs' feature rows (A_j, K) in
    the order of ``np.nonzero(kept[j])``, and with ``clusters`` K their posteriors p(z | edge) (K, A_j).
    The potentials are ``arc_scores``' (with clusters ``marginalise_clusters`` of ``cluster_scores``) at those
    arcs, bit for bit: the same weights summed over the same row of K slots."""
    b, n1 = len(sentences), len(sentences[0].forms) + 1
    where = [np.nonzero(k) for k in kept]
    arcs = np.concatenate([np.column_stack([np.full(len(h), j), h, m]) for j, (h, m) in enumerate(where)])
    rows = kept_feature_rows(extractor, sentences, arcs)
    posterior = None
    if clusters is None:
        values = weights[rows].sum(axis=-1, dtype=np.float64)
    else:
        blocks = cluster_blocks(weights, clusters, extractor.dim)
        values, posterior = marginalise_clusters(np.stack([z[rows].sum(axis=-1, dtype=np.float64) for z in blocks]))
    link = np.full((b, n1, n1), -np.inf)
    link[arcs[:, 0], arcs[:, 1], arcs[:, 2]] = values
    cuts = np.cumsum([len(h) for h, _ in where])[:-1]
    return (link, np.split(rows, cuts),
            None if posterior is None else np.split(posterior, cuts, axis=1))


def kept_listed_scores(scorer: ArcScorer, sentences: Sequence[Tokens], kept: Sequence[np.ndarray]) -> np.ndarray:
    """The link potentials (B, n+1, n+1) under ``scorer``'s first weight vector at each sentence's kept arcs
    (``-inf`` elsewhere), equal bit for bit to ``scorer(sentences)[0]`` there, the other arcs not hashed."""
    b, n1 = len(sentences), len(sentences[0].forms) + 1
    arcs = np.argwhere(np.stack(kept))
    link = np.full((b, n1, n1), -np.inf)
    link[arcs[:, 0], arcs[:, 1], arcs[:, 2]] = scorer.listed_scores(sentences, arcs)
    return link
