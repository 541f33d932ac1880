"""``parse`` reads and parses its input a chunk at a time: the output does not depend on the chunk size; ``parse``
and ``evaluate`` with ``--cluster`` send the chunks to Dask workers and give the one-process output."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from engine import cli_parse
from engine.cli import build_parser, main
from engine.cli_parse import UsageError, run_parse
from engine.data.conllu_io import ConlluError


def _parse(model: Path, data: Path, chunk_size: int, *extra: str) -> tuple[str, list[tuple[int, int]]]:
    args = build_parser().parse_args(["parse", "--model", str(model), "--input", str(data), *extra])
    out, calls = io.StringIO(), []
    done = run_parse(args, out, on_chunk=lambda s, w: calls.append((s, w)), chunk_size=chunk_size)
    assert calls[-1] == (done["sentences"], done["words"])
    return out.getvalue(), calls


def test_output_does_not_depend_on_the_chunk_size(trained: tuple[Path, Path, dict]) -> None:
    """The shipped-like pipeline (tagger with tag samples, BP parser, labeller) on 60 dev sentences parsed whole
    and 7 at a time: the same bytes, progress after every chunk, counts that add up."""
    model, dev, _ = trained
    whole, one_call = _parse(model, dev, 1000)
    chunked, calls = _parse(model, dev, 7)
    assert len(one_call) == 1 and one_call[0][0] == 60
    assert chunked == whole
    assert [s for s, _ in calls] == [*range(7, 60, 7), 60]
    assert all(b[1] > a[1] for a, b in zip(calls, calls[1:], strict=False))


def test_sampled_trees_are_seeded_by_the_position_in_the_whole_input(trained: tuple[Path, Path, dict]) -> None:
    model, dev, _ = trained
    options = ("--samples", "3", "--seed", "11")
    assert _parse(model, dev, 1000, *options)[0] == _parse(model, dev, 4, *options)[0]


def test_an_error_in_a_later_chunk_names_its_line(trained: tuple[Path, Path, dict], tmp_path: Path) -> None:
    """A bad sentence after the first chunk: the error cites its line in the whole file."""
    model, dev, _ = trained
    text = dev.read_text(encoding="utf-8")
    bad = tmp_path / "bad.conllu"
    bad.write_text(text + "1\tword\t_\n\n", encoding="utf-8")
    lines = text.count("\n")
    with pytest.raises(ConlluError) as error:
        _parse(model, bad, 5)
    assert error.value.line == lines + 1


@pytest.mark.slow
def test_chunks_parsed_on_a_local_cluster_give_the_same_output(trained: tuple[Path, Path, dict]) -> None:
    """``parse --cluster local:2``: chunks go to two Dask worker processes (each loads the model once) and come
    back in input order; the output is the one-process output byte for byte."""
    pytest.importorskip("distributed")
    model, dev, _ = trained
    alone, _ = _parse(model, dev, 7)
    clustered, calls = _parse(model, dev, 7, "--cluster", "local:2")
    assert clustered == alone
    assert [s for s, _ in calls] == [*range(7, 60, 7), 60]


def test_a_bad_cluster_spec_is_a_usage_error(trained: tuple[Path, Path, dict]) -> None:
    model, dev, _ = trained
    with pytest.raises(UsageError, match="local:N"):
        _parse(model, dev, 7, "--cluster", "local:0")


def _evaluate(model: Path, data: Path, *extra: str, capsys: pytest.CaptureFixture[str]) -> dict:
    """``evaluate --json``'s scores, without the timings (which differ between two equal runs)."""
    assert main(["evaluate", "--model", str(model), "--data", str(data), "--json", *extra]) == 0
    scores = json.loads(capsys.readouterr().out)
    assert scores.pop("seconds") > 0
    for key in ("tokens_per_second", "words_per_second", "inference_seconds"):  # BP's inference_seconds
        scores.pop(key, None)
    return scores


@pytest.mark.slow
def test_evaluate_on_a_local_cluster_gives_the_one_process_scores(trained: tuple[Path, Path, dict],
                                                                  monkeypatch: pytest.MonkeyPatch,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """``evaluate --tags predicted --cluster local:2``: the 60 dev sentences re-tagged (with the model's tag
    samples) and parsed 7 at a time on two Dask worker processes give every score of the one-process command,
    to the last digit (UPOS, UAS, LAS, ECE, Brier, LEMMA/FEATS scores, the reliability table)."""
    pytest.importorskip("distributed")
    model, dev, _ = trained
    monkeypatch.setattr(cli_parse, "CHUNK_SENTENCES", 7)
    options = ("--tags", "predicted", "--reliability")
    alone = _evaluate(model, dev, *options, capsys=capsys)
    assert alone["tag_samples"] == 2 and "upos" in alone  # the tagger and its samples did run
    assert _evaluate(model, dev, *options, "--cluster", "local:2", capsys=capsys) == alone


@pytest.mark.slow
def test_evaluate_variants_on_a_cluster_give_the_one_process_scores(trained: tuple[Path, Path, dict],
                                                                    monkeypatch: pytest.MonkeyPatch,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """Gold tags, the whole pipeline from raw text, and tags as variables of the BP parser (``--tag-average
    joint``: the tags chosen come back from the workers into the driver's sentences), each on an existing
    scheduler (``--cluster tcp://...`` of a 2-process ``LocalCluster``): the scores of one process."""
    from cluster_helpers import local_cluster

    model, dev, _ = trained
    monkeypatch.setattr(cli_parse, "CHUNK_SENTENCES", 7)
    variants = [(), ("--from-text",), ("--tags", "predicted", "--inference", "bp", "--tag-average", "joint")]
    with local_cluster() as cluster:
        for options in variants:
            alone = _evaluate(model, dev, *options, capsys=capsys)
            assert _evaluate(model, dev, *options, "--cluster", cluster.scheduler_address, capsys=capsys) == alone, \
                options


def test_evaluate_with_a_bad_cluster_spec_is_a_usage_error(trained: tuple[Path, Path, dict],
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    model, dev, _ = trained
    assert main(["evaluate", "--model", str(model), "--data", str(dev), "--cluster", "local:0"]) == 2
    assert "--cluster" in capsys.readouterr().err


@pytest.mark.slow
def test_parse_on_a_lost_scheduler_fails_in_one_line_and_writes_no_output(trained: tuple[Path, Path, dict],
                                                                          tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch,
                                                                          capsys: pytest.CaptureFixture[str]) -> None:
    """``parse --output FILE --cluster tcp://...`` whose ``dask scheduler`` is SIGKILLed once the first chunk is
    written: exit status 1, a last line naming the lost scheduler, no output file (written atomically)."""
    import signal

    from cluster_helpers import SchedulerProcesses

    model, dev, _ = trained
    monkeypatch.setattr(cli_parse, "CHUNK_SENTENCES", 7)
    write = cli_parse._write_chunk
    out = tmp_path / "parsed.conllu"
    with SchedulerProcesses(tmp_path / "dask") as dask:
        def write_then_kill(*args: object) -> None:
            write(*args)  # type: ignore[arg-type]
            if dask.scheduler.poll() is None:
                dask.scheduler.send_signal(signal.SIGKILL)
                dask.scheduler.wait(30)

        monkeypatch.setattr(cli_parse, "_write_chunk", write_then_kill)
        status = main(["parse", "--model", str(model), "--input", str(dev), "--output", str(out), "--cluster",
                       dask.address])
    last = capsys.readouterr().err.strip().splitlines()[-1]  # after Dask's own log lines
    assert status == 1 and last.startswith(f"error: lost the Dask scheduler at {dask.address} "), last
    assert not out.exists() and not list(tmp_path.glob(".parsed.conllu*"))
