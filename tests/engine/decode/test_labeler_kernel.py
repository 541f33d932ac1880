"""The labeller's fast paths give what the plain computation gives, bit for bit: the compiled template hashing
against the numpy one, the shared word codes of a sentence's tag copies against each sentence alone, and
the probabilities computed once per distinct feature row against the softmax of every row."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from engine.data.conllu_io import read_conllu
from engine.decode.loglinear_labeler import (
    CONTEXT_TEMPLATES,
    DEFAULT_TEMPLATES,
    LogLinearLabeler,
    _softmax,
    label_probabilities,
    label_scores,
)
from engine.decode.tag_marginal import retagged
from engine.features.labeler_features import _SMALL, BAG_SLOTS, CompiledTemplates
from engine.features.labeler_kernel import _MUL, _SHIFT, row_scores, unique_rows


def _roll(x: np.ndarray, values: np.ndarray) -> np.ndarray:
    """One step of the multiply-xorshift rolling hash (in place, wrapping uint64), as ``labeler_kernel`` does it."""
    x ^= values
    x *= _MUL
    x ^= x >> _SHIFT
    return x


def feature_ids_numpy(compiled: CompiledTemplates, sentences: list, heads: list, buckets: int,
                      context: list | None = None) -> np.ndarray:
    """``CompiledTemplates.feature_ids`` in numpy, one pass per template atom: the reference the compiled path is
    tested on."""
    a, arc = compiled._arcs(sentences, heads, context)
    n = len(a.dep)
    single = np.concatenate([a.codes[a.dep], a.codes[a.head], a.codes[a.grand], arc], axis=1)
    mask = np.uint64(buckets - 1)
    out = []
    for bag, seeds, one, many in compiled.groups:
        x = np.broadcast_to(seeds, (n, len(seeds))).copy()
        values = single[:, one]  # (n, templates, atoms)
        for j in range(one.shape[1]):
            _roll(x, values[:, :, j])
        if bag:
            owner = a.dep if bag == "c" else a.head
            members = a.children[owner]  # (n, slots)
            valid = members != a.none
            if bag == "c":
                side = _SMALL["cside"][(members < a.dep[:, None]).astype(np.int64)]
            else:
                valid &= members != a.dep[:, None]
                side = _SMALL["sside"][(members < a.dep[:, None]) + 2 * (members < a.head[:, None])]
            table = np.concatenate([a.codes[members], side[..., None],
                                    np.zeros((n, BAG_SLOTS, 1), dtype=np.uint64)], axis=2)
            x = np.repeat(x[:, None, :], BAG_SLOTS, axis=1)
            values = table[:, :, many]  # (n, slots, templates, atoms)
            for j in range(many.shape[1]):
                _roll(x, values[..., j])
            ids = (x & mask).astype(np.int32)
            np.maximum(ids, 1, out=ids)
            ids[~valid] = 0
            out.append(ids.reshape(n, BAG_SLOTS * len(seeds)))
        else:
            ids = (x & mask).astype(np.int32)
            np.maximum(ids, 1, out=ids)
            out.append(ids)
    return np.concatenate(out, axis=1) if len(out) > 1 else out[0]


UPOS = ["NOUN", "VERB", "DET", "ADJ", "PUNCT", "PRON", "ADP", "_", "UNSEEN"]
LABELS = [f"rel{i}" for i in range(7)]


def _random_batch(rng: np.random.Generator, sentences: int = 40) -> tuple[list[SimpleNamespace], list[np.ndarray]]:
    """Random sentences (some with up to 20 words, so bags overflow their slots) and trees, each followed by
    0-4 copies under other tags (most share the sentence's ``forms`` list, as ``retagged`` makes them)."""
    words = ["the", "Dog", "barks", ".", ",", "a", "CAT", "runs", "!!", "ŋæ", "x", "42", "it's"]
    batch, heads = [], []
    for _ in range(sentences):
        n = int(rng.integers(1, 21))
        forms = [str(w) for w in rng.choice(words, n)]
        upos = [str(u) for u in rng.choice(UPOS, n)]
        s = SimpleNamespace(forms=forms, upos=upos, xpos=[u.lower() for u in upos])
        order = rng.permutation(np.arange(1, n + 1))
        h = np.full(n + 1, -1)
        h[order[0]] = 0
        for i in range(1, n):
            h[order[i]] = order[int(rng.integers(0, i))] if rng.random() < 0.8 else order[0]
        batch.append(s)
        heads.append(h)
        for _ in range(int(rng.integers(0, 5))):
            tags = list(s.upos)
            for j in rng.choice(n, size=int(rng.integers(1, 3))):
                tags[j] = str(rng.choice(UPOS))
            copy = retagged(s, (tags, [t.lower() for t in tags]))
            if rng.random() < 0.3:  # equal words in another list or a tuple share codes as well
                copy.forms = list(s.forms) if rng.random() < 0.5 else tuple(s.forms)
            batch.append(copy)
            heads.append(h)
    return batch, heads


def _stacked(rng: np.random.Generator, buckets: int) -> LogLinearLabeler:
    first = LogLinearLabeler(LABELS, rng.standard_normal((buckets, len(LABELS))).astype(np.float32))
    return LogLinearLabeler(LABELS, rng.standard_normal((buckets, len(LABELS))).astype(np.float32),
                            [*DEFAULT_TEMPLATES, *CONTEXT_TEMPLATES], context=first)


def _reference(model: LogLinearLabeler, sentences: list, heads: list) -> list[np.ndarray]:
    """Each sentence's distributions computed alone, with numpy template hashing and a softmax of every row
    (the computation before the fast paths)."""
    out = []
    for s, h in zip(sentences, heads, strict=True):
        context = None
        if model.context is not None:
            first = model.context
            p = _softmax(label_scores(first.weights, feature_ids_numpy(first._compiled, [s], [h], first.buckets)))
            context = [[first.labels[i] for i in p.argmax(axis=1)]]
        ids = feature_ids_numpy(model._compiled, [s], [h], model.buckets, context)
        out.append(_softmax(label_scores(model.weights, ids)))
    return out


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_compiled_ids_equal_numpy_ids(seed: int) -> None:
    rng = np.random.default_rng(seed)
    sentences, heads = _random_batch(rng)
    context = [[str(x) for x in rng.choice(LABELS, len(s.forms))] for s in sentences]
    for templates, ctx in ((DEFAULT_TEMPLATES, None), ([*DEFAULT_TEMPLATES, *CONTEXT_TEMPLATES], context)):
        compiled = CompiledTemplates(templates)
        for buckets in (1 << 4, 1 << 17):
            fast = compiled.feature_ids(sentences, heads, buckets, ctx)
            slow = feature_ids_numpy(compiled, sentences, heads, buckets, ctx)
            assert fast.dtype == slow.dtype == np.int32
            np.testing.assert_array_equal(fast, slow)
            alone = np.concatenate([compiled.feature_ids([s], [h], buckets, None if ctx is None else [c])
                                    for s, h, c in zip(sentences, heads, context, strict=True)])
            np.testing.assert_array_equal(fast, alone)  # copies' shared word codes change nothing


@pytest.mark.parametrize("seed", [0, 1])
def test_distributions_of_tag_copies_equal_the_plain_computation(seed: int) -> None:
    rng = np.random.default_rng(seed)
    model = _stacked(rng, 1 << 12)
    sentences, heads = _random_batch(rng, 60)
    got = model.distributions(sentences, heads)
    for mine, theirs in zip(got, _reference(model, sentences, heads), strict=True):
        np.testing.assert_array_equal(mine, theirs)
    for (names, probs), p in zip(model.predict_batch(sentences, heads), got, strict=True):
        best = p.argmax(axis=1)
        assert names == [model.labels[i] for i in best]
        np.testing.assert_array_equal(probs, p[np.arange(len(best)), best])


def test_unique_rows_and_probabilities_per_distinct_row() -> None:
    rng = np.random.default_rng(3)
    ids = rng.integers(0, 1 << 10, (300, 9)).astype(np.int32)
    ids[:, 4:8] = 0
    ids = ids[rng.integers(0, 300, 2000)]  # many repeats
    ids[rng.integers(0, 2000, 100), -1] += 1  # rows that differ from others in one column only
    ids[rng.integers(0, 2000, 100), 0] += 1
    ids[rng.integers(0, 2000, 50), 3] = 0
    expected = np.sort(np.unique(ids, axis=0, return_index=True)[1])  # first occurrences, in order
    for mask in (np.uint64(0xFFFFFFFFFFFFFFFF), np.uint64(3), np.uint64(0)):  # 3, 0: rows' hashes collide
        first, inverse = unique_rows(ids, mask)
        np.testing.assert_array_equal(ids[first][inverse], ids)
        np.testing.assert_array_equal(first, expected)
    for dtype in (np.float32, np.float64):  # the compiled sums, in each precision
        weights = (30 * rng.standard_normal((1 << 10, 11))).astype(dtype)
        np.testing.assert_array_equal(row_scores(weights, ids, first), label_scores(weights, ids[first]))
        np.testing.assert_array_equal(label_probabilities(weights, ids), _softmax(label_scores(weights, ids)))
        assert label_probabilities(weights, ids[:0]).shape == (0, 11)
    half = (30 * rng.standard_normal((1 << 10, 11))).astype(np.float16)  # a loaded model's, read as stored
    scores = row_scores(half, ids, first)
    assert scores.dtype == np.float32  # summed in float32, as the widened weights are
    np.testing.assert_array_equal(scores, row_scores(half.astype(np.float32), ids, first))
    np.testing.assert_array_equal(scores, label_scores(half, ids[first]))
    np.testing.assert_array_equal(label_probabilities(half, ids), label_probabilities(half.astype(np.float32), ids))
    strided = np.asfortranarray(weights)  # not C-contiguous: scipy's product
    np.testing.assert_array_equal(label_probabilities(strided, ids), _softmax(label_scores(weights, ids)))


def test_ewt_dev_copies_equal_the_plain_computation(ewt_dir: Path) -> None:
    """Real sentences and trees with copies under perturbed tags, through a random stacked labeller."""
    rng = np.random.default_rng(4)
    dev = [s for s in read_conllu(ewt_dir / "en_ewt-ud-dev.conllu")[:150] if s.heads is not None]
    sentences, heads = [], []
    for s in dev:
        for k in range(4):
            tags = list(s.upos)
            for j in rng.choice(len(tags), size=k):
                tags[j] = str(rng.choice(UPOS))
            sentences.append(retagged(s, (tags, list(s.xpos))) if k else s)
            heads.append(s.heads)
    model = _stacked(rng, 1 << 14)
    for mine, theirs in zip(model.distributions(sentences, heads), _reference(model, sentences, heads),
                            strict=True):
        np.testing.assert_array_equal(mine, theirs)
