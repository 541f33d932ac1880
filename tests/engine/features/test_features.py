"""Hashed first-order features: shapes, null slots, stability and the declared templates."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from engine.data.conllu_io import read_conllu
from engine.features import extract
from engine.features.extract import UPOS_TAGS, FeatureExtractor
from engine.features.templates import ArcTemplate, default_first_order
from engine.hashing import hash_string, hash_strings


def _sent(text: str, tags: str) -> SimpleNamespace:
    forms, upos = text.split(), tags.split()
    return SimpleNamespace(forms=forms, upos=upos, xpos=upos)


CAT = _sent("The cat sat on the mat .", "DET NOUN VERB ADP DET NOUN PUNCT")


def test_features_shape_and_null_slots() -> None:
    fx = FeatureExtractor(tuple(default_first_order()), 1 << 18)
    feats = fx.extract([CAT])
    assert feats.shape == (1, 8, 8, fx.slots)
    assert feats.dtype == np.int32
    assert (feats[0, :, 0] == 0).all()  # no arc into ROOT
    assert (feats[0, np.arange(8), np.arange(8)] == 0).all()  # no self loop
    assert (feats >= 0).all() and (feats < fx.dim).all()
    assert (feats[0, 2, 1] > 0).sum() > 30  # a real arc fires many features


def test_between_features_fire_once_per_tag_present() -> None:
    tmpl = ArcTemplate(("upos",), ("upos",), "dir", between=True)
    fx = FeatureExtractor((tmpl,), 1 << 20)
    feats = fx.extract([CAT])[0]
    # between "cat"(2) and "mat"(6): sat VERB, on ADP, the DET
    assert (feats[2, 6] > 0).sum() == 3
    assert (feats[3, 4] > 0).sum() == 0  # adjacent words: nothing between
    present = FeatureExtractor._tags_between([CAT], 7)[0, 0, 7]
    assert {UPOS_TAGS[i] for i in np.flatnonzero(present)} == {"DET", "NOUN", "VERB", "ADP"}


def test_features_are_deterministic_and_batch_independent() -> None:
    fx = FeatureExtractor(tuple(default_first_order()), 1 << 20)
    other = _sent("A dog ran to a park !", "DET NOUN VERB ADP DET NOUN PUNCT")
    alone = fx.extract([CAT])
    together = fx.extract([other, CAT])
    np.testing.assert_array_equal(alone[0], together[1])
    assert hash_string("cat") == hash_string("cat") and hash_string("cat") != hash_string("Cat")


def test_direction_matters() -> None:
    fx = FeatureExtractor((ArcTemplate(("upos",), ("upos",), "dir"),), 1 << 20)
    s = _sent("a a", "X X")
    feats = fx.extract([s])[0]
    assert feats[1, 2, 0] != feats[2, 1, 0]


def test_template_names_round_trip() -> None:
    for t in default_first_order():
        assert ArcTemplate.parse(t.name) == t
    with pytest.raises(ValueError, match="unknown token attribute"):
        ArcTemplate(("colour",), ())


def test_extract_requires_equal_lengths() -> None:
    fx = FeatureExtractor(tuple(default_first_order()), 1 << 10)
    with pytest.raises(ValueError, match="one length"):
        fx.extract([CAT, _sent("a", "X")])


def test_shifted_word_attributes_and_shapes() -> None:
    from engine.features.extract import token_attribute

    s = _sent("McDonald's sold 1,234 burgers", "PROPN VERB NUM NOUN")
    assert token_attribute(s, "shape") == ["<ROOT>", "XxXx'x", "x", "d,d", "x"]
    assert token_attribute(s, "lower_prev") == ["<BOS>", "<ROOT>", "mcdonald's", "sold", "1,234"]
    assert token_attribute(s, "suf3_next") == ["d's", "old", "234", "ers", "<EOS>"]
    assert token_attribute(s, "upos_prev") == ["<BOS>", "<ROOT>", "PROPN", "VERB", "NUM"]  # as before
    # a context-word template tells apart arcs whose head and dependent are the same words
    tmpl = ArcTemplate(("lower",), ("lower_prev",), "none")
    fx = FeatureExtractor((tmpl,), 1 << 20)
    a = fx.extract([_sent("a b c d", "X X X X")])[0]
    b = fx.extract([_sent("a z c d", "X X X X")])[0]
    assert a[1, 3, 0] != b[1, 3, 0]  # the word before "c" changed
    assert a[3, 1, 0] == b[3, 1, 0]  # the word before "a" did not


def test_attribute_hashes_are_the_hashed_attribute_strings(ewt_dir, monkeypatch) -> None:
    """``attribute_hashes`` (each form's codes computed once) gives ``hash_strings(token_attribute(...))`` for every
    attribute and shift, on a first sight of the forms, on a second, and across a cache that starts afresh."""
    monkeypatch.setattr(extract, "_FORM_CODES", {})
    monkeypatch.setattr(extract, "_MAX_FORMS", 300)
    attrs = [f"{base}{shift}" for base in (*extract._WORD_BASES, "upos", "xpos") for shift in ("", "_prev", "_next")]
    dev = read_conllu(ewt_dir / "en_ewt-ud-dev.conllu")
    for sentence in [*dev[:60], *dev[:60], *dev[60:120]]:
        expected = np.stack([hash_strings(extract.token_attribute(sentence, a)) for a in attrs], axis=1)
        assert np.array_equal(extract.attribute_hashes(sentence, attrs), expected)
    assert 0 < len(extract._FORM_CODES) <= 300
    with pytest.raises(KeyError):
        extract.attribute_hashes(dev[0], ["form_after"])


def test_attribute_hashes_of_a_batch_are_each_sentences(ewt_dir) -> None:
    """``attribute_hashes_many`` over a batch of one length (the arc scorer's one lookup per batch) gives each
    sentence's ``attribute_hashes``, also for one-word sentences and with attributes in any order; sentences of
    different lengths are refused."""
    attrs = [f"{base}{shift}" for base in ("xpos", *extract._WORD_BASES, "upos") for shift in ("_next", "", "_prev")]
    dev = read_conllu(ewt_dir / "en_ewt-ud-dev.conllu")[:400]
    by_length: dict[int, list] = {}
    for sentence in dev:
        by_length.setdefault(len(sentence.forms), []).append(sentence)
    assert 1 in by_length and max(len(batch) for batch in by_length.values()) > 10
    for batch in by_length.values():
        many = extract.attribute_hashes_many(batch, attrs)
        assert many.shape == (len(batch), len(batch[0].forms) + 1, len(attrs))
        for got, sentence in zip(many, batch, strict=True):
            expected = np.stack([hash_strings(extract.token_attribute(sentence, a)) for a in attrs], axis=1)
            assert np.array_equal(got, expected)
    with pytest.raises(ValueError, match="one length"):
        extract.attribute_hashes_many([by_length[1][0], by_length[2][0]], attrs)
