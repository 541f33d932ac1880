"""The lemmatizer's edit scripts, and both LEMMA/FEATS components learning from a small treebank, predicting
unseen words by their affixes and tags, and surviving their state round trip."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from engine.data.conllu_io import read_conllu
from engine.pipeline import Pipeline, component_class
from engine.text.lemmatizer import Lemmatizer, apply_script, edit_script
from engine.text.morph import MorphTagger


@pytest.mark.parametrize(("form", "lemma", "script"), [
    ("Running", "run", "L|4|"), ("studies", "study", "K|3|y"), ("went", "go", "K|4|go"), ("cats", "cat", "K|1|"),
    ("Paris", "Paris", "K|0|"), ("THE", "the", "L|0|"), ("", "", "K|0|"),
])
def test_edit_script_round_trip(form: str, lemma: str, script: str) -> None:
    assert edit_script(form, lemma) == script
    assert apply_script(form, script) == lemma


def test_script_that_does_not_fit_keeps_the_form() -> None:
    assert apply_script("at", "L|3|") == "at"
    assert apply_script("at", "L|2|") == "at"  # would leave nothing
    assert apply_script("at", "L|2|be") == "be"


@dataclass
class _Sent:
    forms: list[str]
    lemmas: list[str]
    upos: list[str]
    xpos: list[str]
    feats: list[str]
    deprels: list[str]


def _treebank() -> list[_Sent]:
    """Plural nouns ending in -s (lemma without -s, Number=Plur) and past verbs in -ed (lemma without -ed,
    Tense=Past), with the determiner "the"."""
    nouns = ["cats", "dogs", "cars", "hats", "pens", "cups", "maps", "bags", "rats", "bats"]
    verbs = ["walked", "jumped", "played", "kicked", "pushed", "pulled", "cooked", "looked", "called", "helped"]
    out = []
    for k in range(60):
        n, v = nouns[k % len(nouns)], verbs[(k * 3) % len(verbs)]
        out.append(_Sent(["The", n, v], ["the", n[:-1], v[:-2]], ["DET", "NOUN", "VERB"], ["DT", "NNS", "VBD"],
                         ["Definite=Def|PronType=Art", "Number=Plur", "Mood=Ind|Tense=Past|VerbForm=Fin"],
                         ["det", "nsubj", "root"]))
    return out


def test_components_generalise_to_unseen_words() -> None:
    train = _treebank()
    lem = Lemmatizer.train(train, min_class_count=2, min_count=1, epochs=5)
    morph = MorphTagger.train(train, min_class_count=2, min_count=1, epochs=5)
    test = [_Sent(["The", "frogs", "hopped"], ["_"] * 3, ["DET", "NOUN", "VERB"], ["DT", "NNS", "VBD"], ["_"] * 3,
                  ["det", "nsubj", "root"])]
    assert lem.lemmatize(test) == [["the", "frog", "hopp"]]  # "-ed" stripped as learnt: hopp, not hop
    [(bundles, probs)] = morph.analyse(test)
    assert bundles == ["Definite=Def|PronType=Art", "Number=Plur", "Mood=Ind|Tense=Past|VerbForm=Fin"]
    assert all(0.5 < p <= 1.0 for p in probs)
    assert probs[0] == 1.0  # "The" (DET, DT) is in the dictionary: the share of its bundle in training


def test_bundles_restricted_to_those_seen_with_the_upos() -> None:
    train = _treebank()
    morph = MorphTagger.train(train, min_class_count=2, min_count=1, epochs=5)
    # an unseen word tagged NOUN never gets a verb's bundle, whatever its suffix says
    test = [_Sent(["The", "jumped"], ["_"] * 2, ["DET", "NOUN"], ["DT", "VBD"], ["_"] * 2, ["det", "root"])]
    [(bundles, _)] = morph.analyse(test)
    assert bundles[1] == "Number=Plur"


@pytest.mark.parametrize("name", ["lemmatizer", "morph"])
def test_state_round_trip_and_refusal(name: str) -> None:
    cls = component_class(name)
    part = cls.train(_treebank(), min_class_count=2, min_count=1, epochs=2)
    meta, arrays = part.to_state()
    assert all(isinstance(a, np.ndarray) and a.dtype != object for a in arrays.values())
    again = cls.from_state(meta, arrays)
    sents = _treebank()[:3]
    if name == "lemmatizer":
        assert again.lemmatize(sents) == part.lemmatize(sents)
    else:
        assert again.analyse(sents) == part.analyse(sents)
    with pytest.raises(ValueError, match="state"):
        cls.from_state({**meta, "version": 99}, arrays)
    with pytest.raises(ValueError, match="classes"):
        cls.from_state(meta, {**arrays, "classes": np.array([len(meta["values"])])})


def _e_verbs() -> list[_Sent]:
    """Verbs in "-ing" whose lemma drops "ing" (walking -> walk) outnumber those that restore an "e"
    (baking -> bake), and "hope" is a lemma of the treebank only as a noun ("hopes")."""
    drop = ["walking", "jumping", "playing", "kicking", "pushing", "pulling", "cooking", "looking", "calling"]
    restore = ["baking", "making", "taking"]
    out = []
    for k in range(60):
        v = drop[k % len(drop)] if k % 4 else restore[k % len(restore)]
        lemma = v[:-3] if k % 4 else v[:-3] + "e"
        out.append(_Sent(["The", "dogs", v], ["the", "dog", lemma], ["DET", "NOUN", "VERB"], ["DT", "NNS", "VBG"],
                         ["_"] * 3, ["det", "nsubj", "root"]))
    out.append(_Sent(["hopes", "dating"], ["hope", "date"], ["NOUN", "VERB"], ["NNS", "VBG"], ["_"] * 2,
                     ["root", "dep"]))
    return out


def test_lexicon_prefers_a_lemma_seen_with_the_upos() -> None:
    train = _e_verbs()
    settings = {"min_class_count": 2, "min_count": 1, "epochs": 5}
    plain = Lemmatizer.train(train, **settings)
    lexicon = Lemmatizer.train(train, lexicon_bonus=5.0, lexicon_candidates=5, lexicon_min_length=3, **settings)
    test = [_Sent(["The", "dogs", "dating", "hoping", "wading"], ["_"] * 5, ["DET", "NOUN", "VERB", "VERB", "VERB"],
                  ["DT", "NNS", "VBG", "VBG", "VBG"], ["_"] * 5, ["det", "nsubj", "root", "dep", "dep"])]
    # "dating" is in the dictionary as the treebank has it; the classifier strips "-ing" from unseen verbs
    assert plain.lemmatize(test) == [["the", "dog", "date", "hop", "wad"]]
    # with the lexicon: "hope" is a lemma only as NOUN, so "hoping" (VERB) keeps the classifier's "hop";
    # nothing of "wading" is in the lexicon either: the lexicon changes no choice without a seen lemma
    assert lexicon.lemmatize(test) == plain.lemmatize(test)
    verb_hope = [*train, _Sent(["hope"], ["hope"], ["VERB"], ["VB"], ["_"], ["root"])]
    with_verb = Lemmatizer.train(verb_hope, lexicon_bonus=5.0, lexicon_candidates=5, lexicon_min_length=3, **settings)
    assert with_verb.lemmatize(test)[0][3] == "hope"  # now seen as a VERB lemma: the "e"-restoring script wins
    no_bonus = Lemmatizer.train(verb_hope, **settings)
    assert no_bonus.lemmatize(test)[0][3] == "hop"
    # the lexicon survives the state round trip; a version-1 state (before the lexicon) reads as none
    meta, arrays = with_verb.to_state()
    assert Lemmatizer.from_state(meta, arrays).lemmatize(test) == with_verb.lemmatize(test)
    old = {k: v for k, v in arrays.items() if k != "lexicon"}
    assert Lemmatizer.from_state({**meta, "version": 1}, old).lemmatize(test) == no_bonus.lemmatize(test)
    with pytest.raises(ValueError, match="lexicon"):
        Lemmatizer.from_state(meta, old)


_SHIPPED = Path(__file__).resolve().parents[3] / "models" / "en_ewt-pipeline"


@pytest.mark.skipif(not (_SHIPPED / "manifest.json").exists(), reason="the shipped model is not here")
def test_classifier_skipped_for_dictionary_words_changes_nothing(ewt_dir: Path) -> None:
    """``predict`` and ``lemmatize`` run the classifier on the words the dictionary lacks only: every lemma,
    bundle and probability of 400 dev sentences is what the full ``distribution`` gives, dictionary first."""
    pipe = Pipeline.load(_SHIPPED)
    lem, morph = pipe.lemmatizer, pipe.morph
    assert lem is not None and morph is not None
    dev = read_conllu(ewt_dir / "en_ewt-ud-dev.conllu")[:400]
    forms = [f for s in dev for f in s.forms]
    upos = [u for s in dev for u in s.upos]
    probs, known, share = morph.classifier.distribution(dev)
    assert 0 < (known < 0).sum() < len(known)  # both paths are exercised
    chosen, prob = morph.classifier.predict(dev)
    assert np.array_equal(chosen, np.where(known >= 0, known, morph.classifier.classes[probs.argmax(axis=1)]))
    assert np.array_equal(prob, np.where(known >= 0, share, probs.max(axis=1)))
    assert lem._bonus > 0 and len(lem.lexicon)  # the shipped lemmatizer re-ranks with its lexicon
    probs, known, _ = lem.classifier.distribution(dev, lem._applicable)
    expected = [apply_script(f, lem.classifier.values[k]) if k >= 0 else lem._lexicon_choice(f, u, p)
                for f, u, k, p in zip(forms, upos, known.tolist(), probs, strict=True)]
    assert [x for s in lem.lemmatize(dev) for x in s] == expected
