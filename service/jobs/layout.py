"""Where the job subsystem keeps its files under the service's data directory."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

DATABASE = "jobs.sqlite3"
UPLOADS = "uploads"
MODELS = "models"
TRAIN_FILE = "train.conllu"
DEV_FILE = "dev.conllu"
INPUT_FILE = "input"
RESULTS = "results"
RESULT_RETENTION_SECONDS = 7 * 24 * 3600.0  # how long a parse job's result is kept after the job ended


@dataclass(frozen=True)
class DataLayout:
    """``data_dir/jobs.sqlite3``, ``data_dir/uploads/<job_id>/{train,dev}.conllu`` (a parse job's
    ``uploads/<job_id>/input``), parse jobs' results ``data_dir/results/<job_id>.conllu`` and the trained-model
    directory (default ``data_dir/models``; trained models land in ``<trained_dir>/<name>/v<N>/``)."""

    data_dir: Path
    trained_dir: Path

    @classmethod
    def at(cls, data_dir: str | os.PathLike[str], trained_dir: str | os.PathLike[str] | None = None) -> DataLayout:
        data = Path(data_dir)
        return cls(data, Path(trained_dir) if trained_dir is not None else data / MODELS)

    @property
    def database(self) -> Path:
        return self.data_dir / DATABASE

    @property
    def uploads(self) -> Path:
        return self.data_dir / UPLOADS

    def upload_dir(self, job_id: str) -> Path:
        return self.uploads / job_id

    def train_file(self, job_id: str) -> Path:
        return self.upload_dir(job_id) / TRAIN_FILE

    def dev_file(self, job_id: str) -> Path:
        return self.upload_dir(job_id) / DEV_FILE

    @property
    def results(self) -> Path:
        return self.data_dir / RESULTS

    def result_file(self, job_id: str) -> Path:
        """The parsed CoNLL-U of parse job ``job_id`` (present once the job has succeeded)."""
        return self.results / f"{job_id}.conllu"

    def create(self) -> None:
        """Make the data, uploads, results and trained-model directories."""
        for path in (self.data_dir, self.data_dir / UPLOADS, self.results, self.trained_dir):
            path.mkdir(parents=True, exist_ok=True)
