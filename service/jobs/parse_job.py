"""Batch parse jobs: a large uploaded file parsed in the background, its CoNLL-U kept for download.

``POST /jobs`` with an ``input`` file and ``config = {"kind": "parse", "model": ..., ...}`` queues one; a worker
process (the same scheduler and child processes as training jobs) runs ``python -m engine parse``'s own loop,
``engine.cli.run_parse``, over the file: the input is streamed a chunk of sentences at a time and each chunk's
output appended to a temporary file, so neither the API nor the worker ever holds the file whole (raw text is
the exception: the tokenizer reads it whole, so its size is capped by ``MAX_TEXT_BYTES``). The output is the
CLI's for the same model and options, byte for byte. Progress is the fraction of sentences parsed; a cancel
request stops the job at the next chunk. On success the temporary file is renamed to
``<data_dir>/results/<job_id>.conllu`` in one step (a failed, cancelled or killed job leaves none), and
``GET /jobs/{id}/result`` streams it until the retention period (``PARSER_RESULT_RETENTION_SECONDS``) ends.
With ``PARSER_DASK_SCHEDULER`` set, the job's process sends the chunks to that Dask cluster's workers
(``parse --cluster``) and writes their output in input order: the same bytes.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from engine.pipeline import MAX_TAG_SAMPLES
from engine.text.layout import BLANK_LINE_MARKS, DEFAULT_BLANK_LINE

MAX_TEXT_BYTES = 64 << 20
"""Largest raw-text input of a parse job: text is tokenised whole (CoNLL-U input has no such cap)."""

Check = Callable[[float, str], None]  # (fraction, stage): report progress; raises to stop the job


class ParseJobConfig(BaseModel):
    """How to parse a batch job's input; every field has a default, unknown fields are rejected."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    kind: Literal["parse"] = Field(description="a batch parse job (a training job's kind is 'train', the default)")
    model: str | None = Field(None, max_length=200, description="model name or name@version (GET /models); "
                              "default: the service's default model")
    input_format: Literal["conllu", "text"] = Field("conllu", description="conllu (words whose UPOS is '_' are "
                                                    "tagged by the model) or raw text (needs a model with a "
                                                    "tokenizer)")
    blank_line: Literal[BLANK_LINE_MARKS] = Field(DEFAULT_BLANK_LINE, description="raw text: what a blank line "  # type: ignore[valid-type]
                                                  "starts (# newpar or # newdoc)")
    retag: bool = Field(False, description="re-tag every word with the model's tagger")
    tag_samples: int | None = Field(None, ge=0, le=MAX_TAG_SAMPLES, description="tag sequences averaged over "
                                    "per sentence; default: the model's")
    sentence_confidence: bool = Field(False, description="write each sentence's p_tree and expected_errors as "
                                      "comments")

    def arguments(self, model_path: str, input_path: str, cluster: str | None = None) -> list[str]:
        """The ``python -m engine parse`` command line that does this job (its output is the job's result)."""
        argv = ["parse", "--model", model_path, "--input", input_path, "--input-format", self.input_format,
                "--blank-line", self.blank_line]
        if cluster:
            argv += ["--cluster", cluster]
        if self.retag:
            argv.append("--retag")
        if self.tag_samples is not None:
            argv += ["--tag-samples", str(self.tag_samples)]
        if self.sentence_confidence:
            argv.append("--sentence-confidence")
        return argv


def count_sentences(path: str | Path) -> int:
    """Sentences in a CoNLL-U file (blocks of lines ended by a blank line or the end), read a line at a time."""
    count, inside = 0, False
    with open(path, "rb") as f:
        for line in f:
            if line.strip():
                inside = True
            elif inside:
                count, inside = count + 1, False
    return count + inside


def run_parse_job(config: ParseJobConfig, model_path: str, input_path: str, result: Path,
                  check: Check, cluster: str | None = None) -> dict[str, Any]:
    """Parse ``input_path`` with the model at ``model_path`` into ``result`` (written atomically), reporting
    progress through ``check``, on the Dask scheduler ``cluster`` if given; returns the job's metrics."""
    from engine.cli_args import build_parser
    from engine.cli_parse import UsageError, run_parse
    from engine.data.conllu_io import atomic_text

    args = build_parser().parse_args(config.arguments(model_path, input_path, cluster))
    total = count_sentences(input_path) if config.input_format == "conllu" else 0
    start = time.perf_counter()
    check(0.0, "parsing")

    def on_chunk(sentences: int, words: int) -> None:
        fraction = sentences / total if total else 0.5
        check(min(fraction, 1.0) * 0.99, f"parsing: {sentences} sentences")

    result.parent.mkdir(parents=True, exist_ok=True)
    if cluster:
        check(0.0, f"parsing on {cluster}")
    try:
        with atomic_text(result) as out:
            done = run_parse(args, out, on_chunk=on_chunk)
    except UsageError as e:
        raise ParseJobError(str(e)) from e
    seconds = time.perf_counter() - start
    return {**done, "seconds": round(seconds, 3), "words_per_second": round(done["words"] / max(seconds, 1e-9), 1)}


class ParseJobError(ValueError):
    """Options that cannot work with this model or input, explained (the job fails with this message)."""
