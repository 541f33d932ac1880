"""``evaluate``'s system sentences (engine.cli._system_conllu) equal what writing the parse as CoNLL-U and reading
it back gives, as far as the UD evaluation reads them: it builds them directly, without the text in between."""

from __future__ import annotations

import io
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from engine.cli import _system_conllu
from engine.data.conllu_io import format_sentence, read_conllu
from engine.evaluation.ud_align import evaluate_ud
from engine.pipeline import Pipeline

MODELS = Path(__file__).resolve().parents[2] / "models"


def _read_back(pipeline: Pipeline, sentences: list, parsed: list) -> list:
    """The old route: format each parse as CoNLL-U, read the text back."""
    analyses = pipeline.analyse(sentences, [p.deprels for p in parsed])
    text = "".join(format_sentence(s, heads=p.heads, deprels=p.deprels, upos=s.upos, xpos=s.xpos,
                                   lemmas=lemmas or ["_"] * s.n, feats=feats or ["_"] * s.n)
                   for s, p, (lemmas, feats, _) in zip(sentences, parsed, analyses, strict=True))
    return read_conllu(io.StringIO(text), name="<system>", strict_heads=False)


def _multiword(line: str) -> bool:
    return not line.startswith("#") and "-" in line.split("\t", 1)[0]


@pytest.mark.parametrize("model", ["en_ewt-pipeline", "en_ewt-o1"])  # with and without LEMMA/FEATS components
def test_system_sentences_equal_the_written_and_read_back_parse(ewt_dir: Path, model: str) -> None:
    gold = read_conllu(ewt_dir / "en_ewt-ud-dev.conllu")
    gold = [s for s in gold if any(_multiword(line) for line in s.lines)][:40] + gold[:60]
    pipeline = Pipeline.load(MODELS / model)
    rng = np.random.default_rng(0)
    labels = ["nsubj", "obj", "det", "root", "punct", "acl:relcl"]
    parsed = [SimpleNamespace(heads=np.r_[-1, rng.integers(0, s.n + 1, s.n)],
                              deprels=[str(x) for x in rng.choice(labels, s.n)]) for s in gold]
    got, expected = _system_conllu(pipeline, gold, parsed), _read_back(pipeline, gold, parsed)
    for a, b in zip(got, expected, strict=True):
        for column in ("forms", "lemmas", "upos", "xpos", "feats", "deprels"):
            assert getattr(a, column) == getattr(b, column)
        np.testing.assert_array_equal(a.heads, b.heads)
        assert [x for x in a.lines if _multiword(x)] == [x for x in b.lines if _multiword(x)]
    assert evaluate_ud(gold, got) == evaluate_ud(gold, expected)
