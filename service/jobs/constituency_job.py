"""A constituency model's training job (issue 26), run in the job's child process (``service.jobs.runner``).

The job's ``.mrg`` uploads are trained as ``python -m engine train --formalism constituency --train TRAIN
[--dev DEV] --out DIR`` trains them: the command line's own arguments and defaults
(``engine.cli_args.build_parser``), its function (``engine.constituency.commands.train``), its JSON summary
(captured from its standard output). The model's manifest then gets the job's ``name`` and ``version``
(``engine.model.store.update_manifest``) before the runner publishes the directory.
"""

from __future__ import annotations

import contextlib
import io
import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from service.jobs.store import Job

METRICS = ("kind", "factors", "sentences", "labels", "binary_rules", "unary_rules", "best_epoch", "epoch_seconds",
           "train_seconds", "dev")
"""What a succeeded job reports of the trainer's summary (``dev``: EVALB on the dev upload, when given)."""


def arguments(job: Job, out: Path) -> list[str]:
    """The ``python -m engine train`` command line that trains this job's model into ``out``."""
    argv = ["train", "--formalism", "constituency", "--train", str(job.train_path), "--out", str(out), "--quiet"]
    if job.dev_path:
        argv += ["--dev", str(job.dev_path)]
    return argv


def train_constituency(job: Job, out: Path, check: Callable[..., None],
                       reserve_version: Callable[[], Mapping[str, Any]]) -> dict[str, Any]:
    """Train the job's model into ``out``; returns its metrics. ``check(fraction, stage)`` reports progress (and
    raises to stop the job); ``reserve_version()`` gives the ``name`` and ``version`` it is published as."""
    from engine.cli_args import build_parser
    from engine.constituency import commands
    from engine.model.store import update_manifest

    args = build_parser().parse_args(arguments(job, out))
    check(0.0, "training", force=True)
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        commands.train(args)
    summary = json.loads(printed.getvalue())
    update_manifest(out, dict(reserve_version()))
    return {key: summary[key] for key in METRICS if key in summary}
