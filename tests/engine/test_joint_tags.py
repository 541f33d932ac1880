"""Joint tagging and parsing (``--tag-average joint``) with the shipped pipeline: candidates restrict the tagger's
CRF, one candidate per word is today's single-tagging parse exactly, and the joint parse is a parse with tags."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from engine.cli import main
from engine.data.conllu_io import read_conllu
from engine.kernels.mst import is_tree
from engine.pipeline import Pipeline
from engine.text.crf import chain_score
from engine.text.tag_candidates import CandidateSettings, choose_states

PIPELINE = Path(__file__).resolve().parents[2] / "models" / "en_ewt-pipeline"


@pytest.fixture(scope="module")
def shipped() -> Pipeline:
    return Pipeline.load(PIPELINE)


@pytest.fixture(scope="module")
def dev(ewt_dir: Path) -> list:
    return read_conllu(ewt_dir / "en_ewt-ud-dev.conllu")[:40]


def _tagged(pipeline: Pipeline, gold: list, settings: CandidateSettings, probs: dict | None = None,
            marginals: dict | None = None) -> tuple[list, list]:
    inputs = [s.copy() for s in gold]
    found: dict = {}
    pipeline.tag_and_sample(inputs, retag=True, candidates=(settings, found), upos_probs=probs,
                            upos_marginals=marginals)
    return inputs, [found[i] for i in range(len(inputs))]


def test_candidate_states_best_first_then_by_marginal() -> None:
    marginals = np.array([[0.5, 0.3, 0.15, 0.05], [0.001, 0.0005, 0.9985, 0.0]])
    states, allowed = choose_states(marginals, np.array([1, 2]), CandidateSettings(k=3, min_marginal=0.01))
    assert states[0].tolist() == [1, 0, 2] and allowed[0].all()  # the 1-best first even when not the top marginal
    assert states[1, 0] == 2 and allowed[1].tolist() == [True, False, False]
    assert choose_states(marginals, np.array([0, 2]), CandidateSettings(k=1))[0].shape == (2, 1)


def test_candidate_settings_resolve_user_then_manifest_then_default() -> None:
    manifest = {"inference": {"tag_candidates": {"k": 2}}}
    assert CandidateSettings.resolve(manifest) == CandidateSettings(2)
    assert CandidateSettings.resolve(manifest, k=4, min_marginal=0.5) == CandidateSettings(4, 0.5)
    assert CandidateSettings.resolve({}) == CandidateSettings()
    with pytest.raises(ValueError):
        CandidateSettings.resolve({"inference": {"tag_candidates": {"k": 0}}})


def test_candidates_restrict_the_taggers_crf(shipped: Pipeline, dev: list) -> None:
    """TAG + CHAIN on a tagging of candidate slots is the CRF's score of those states (``chain_score``)."""
    inputs, cands = _tagged(shipped, dev[:10], CandidateSettings(k=3, min_marginal=0.0))
    crf = shipped.tagger.crf
    ids, offsets = shipped.tagger._ids(inputs)
    rng = np.random.default_rng(0)
    for j, c in enumerate(cands):
        n = len(inputs[j].forms)
        em = crf.emissions(ids[offsets[j] + np.arange(n)])[None]
        assert [crf.upos_labels[crf.states[s, 0]] for s in c.states[:, 0]] == inputs[j].upos  # slot 0: the 1-best
        slots = rng.integers(0, c.allowed.sum(axis=1))
        states = c.states[np.arange(n), slots]
        ours = c.emissions[np.arange(n), slots].sum() + c.start[slots[0]] + c.end[slots[-1]] + sum(
            c.transitions[i, slots[i], slots[i + 1]] for i in range(n - 1))
        assert ours == pytest.approx(chain_score(em, crf.transition, states[None])[0], abs=1e-9)


def test_one_candidate_per_word_is_todays_parse(shipped: Pipeline, dev: list) -> None:
    """... and each word's ``upos_prob`` is the tagger's marginal of its UPOS, its UPOS distribution the tagger's
    (the joint beliefs on the candidates, scaled to their tagger mass, plus the tagger's marginals of the pruned
    states)."""
    tagger_probs: dict = {}
    tagger_marginals: dict = {}
    inputs, cands = _tagged(shipped, dev, CandidateSettings(k=1), tagger_probs, tagger_marginals)
    joint = shipped.parser.parse(inputs, candidates=cands)
    today = shipped.parser.parse(inputs)
    for a, b, s in zip(joint, today, inputs, strict=True):
        np.testing.assert_array_equal(a.heads, b.heads)
        np.testing.assert_allclose(a.marginals, b.marginals, atol=1e-9)
        assert a.deprels == b.deprels and a.upos == s.upos and a.xpos == s.xpos
    for j, a in enumerate(joint):
        np.testing.assert_allclose(a.upos_probs, tagger_probs[j], atol=1e-9)
        labels, dist = a.diagnostics["upos_marginals"]
        assert list(labels) == list(shipped.tagger.upos_labels)
        np.testing.assert_allclose(dist, tagger_marginals[j], atol=1e-9)


def test_joint_parse_has_trees_and_tags_among_the_candidates(shipped: Pipeline, dev: list) -> None:
    inputs, cands = _tagged(shipped, dev, CandidateSettings(k=3, min_marginal=0.001))
    assert sum(int(c.allowed.sum()) for c in cands) > sum(len(s.forms) for s in inputs)  # some words have several
    for p, c in zip(shipped.parser.parse(inputs, candidates=cands), cands, strict=True):
        assert is_tree(p.heads) and (p.heads[1:] == 0).sum() == 1
        np.testing.assert_allclose(p.marginals[:, 1:].sum(axis=0), 1.0, atol=1e-9)
        assert all(u in us and x in xs for u, x, us, xs in zip(p.upos, p.xpos, c.upos, c.xpos, strict=True))
        assert ((p.upos_probs > 0) & (p.upos_probs <= 1 + 1e-12)).all()
        labels, dist = p.diagnostics["upos_marginals"]  # one distribution per word over every UPOS
        np.testing.assert_allclose(dist.sum(axis=1), 1.0, atol=1e-9)
        assert (dist >= 0).all()
        np.testing.assert_allclose(p.upos_probs, dist[np.arange(len(p.upos)), [labels.index(t) for t in p.upos]])
        assert p.diagnostics["method"] == "bp-joint"


def test_joint_sentences_of_several_lengths_run_in_shared_stacks(shipped: Pipeline, dev: list,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """``parse`` keeps the joint sentences of its length batches and runs their joint BP together, so a stack can
    hold sentences of nearby lengths (``joint_chunks``); each parse is the sentence's own, as parsed alone."""
    import engine.joint_parsing as joint_parsing
    from engine.inference.joint_bp import joint_chunks

    inputs, cands = _tagged(shipped, dev, CandidateSettings(k=3, min_marginal=0.001))
    calls, stacks = [], []
    real = joint_parsing.run_joint_bp_many

    def spy(graphs, config):  # type: ignore[no-untyped-def]
        calls.append(len(graphs))
        stacks.extend({graphs[j][1].shape[0] - 1 for j in chunk} for chunk, _ in joint_chunks(graphs))
        return real(graphs, config)

    monkeypatch.setattr(joint_parsing, "run_joint_bp_many", spy)
    together = shipped.parser.parse(inputs, candidates=cands)
    assert len(calls) == 1 and len({len(s.forms) for s in inputs}) > 10  # one joint BP call for every length
    assert any(len(lengths) > 1 for lengths in stacks)  # and stacks of several lengths
    monkeypatch.setattr(joint_parsing, "run_joint_bp_many", real)
    for i in range(0, len(inputs), 7):
        alone = shipped.parser.parse([inputs[i]], candidates=[cands[i]])[0]
        assert alone.heads.tolist() == together[i].heads.tolist() and alone.deprels == together[i].deprels
        np.testing.assert_allclose(alone.marginals, together[i].marginals, rtol=0, atol=1e-9)
        if alone.upos_probs is not None:
            np.testing.assert_allclose(alone.upos_probs, together[i].upos_probs, rtol=0, atol=1e-9)


def test_cli_evaluate_joint(ewt_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = tmp_path / "dev.conllu"
    blocks = (ewt_dir / "en_ewt-ud-dev.conllu").read_text(encoding="utf-8").split("\n\n")[:15]
    data.write_text("\n\n".join(blocks) + "\n\n", encoding="utf-8")
    args = ["evaluate", "--model", str(PIPELINE), "--data", str(data), "--tags", "predicted", "--json"]
    assert main([*args, "--tag-average", "joint", "--tag-candidates", "1"]) == 0
    one = json.loads(capsys.readouterr().out)
    assert main([*args, "--tag-samples", "0"]) == 0
    single = json.loads(capsys.readouterr().out)
    assert (one["uas"], one["las"], one["upos"]) == (single["uas"], single["las"], single["upos"])
    assert main([*args, "--tag-average", "joint"]) == 0
    joint = json.loads(capsys.readouterr().out)
    assert 0 < joint["upos"] <= 100 and joint["tag_samples"] == 0  # no tag sequence is drawn
    assert main([*args[:-3], "--from-text", "--json", "--tag-average", "joint"]) == 0
    assert json.loads(capsys.readouterr().out)["upos"] > 50  # aligned F1 from raw text
    assert main([*args, "--tag-average", "joint", "--inference", "relaxed"]) == 2
    assert "plain BP" in capsys.readouterr().err
    assert main([*args, "--tag-average", "joint", "--tag-samples", "2"]) == 2
    assert "no tag samples" in capsys.readouterr().err
    # a model whose default is joint (the shipped en_ewt) gives way to potentials where joint cannot run
    default = ["evaluate", "--model", str(PIPELINE.parent / "en_ewt"), "--data", str(data), "--tags", "predicted",
               "--json"]
    assert main([*default, "--inference", "relaxed"]) == 0
    assert json.loads(capsys.readouterr().out)["tag_samples"] == 0
    assert main([*default, "--tag-samples", "2"]) == 0
    assert json.loads(capsys.readouterr().out)["tag_samples"] == 2
