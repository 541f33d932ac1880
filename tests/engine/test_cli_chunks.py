"""``parse`` reads and parses its input a chunk at a time: the output does not depend on the chunk size."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from engine.cli import build_parser
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
