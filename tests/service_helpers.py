"""Shared pieces of the service tests: app construction with a ready model registry, and example inputs."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient

from service.app import create_app
from service.settings import Settings

REPO = Path(__file__).resolve().parents[1]
MODELS = REPO / "models"

WORDS = ["The", "parser", "tells", "you", "how", "sure", "it", "is", "."]
TAGS = ["DET", "NOUN", "VERB", "PRON", "ADV", "ADJ", "PRON", "AUX", "PUNCT"]
WORDS2 = ["Dogs", "bark", "."]
TAGS2 = ["NOUN", "VERB", "PUNCT"]

CONLLU = """# sent_id = a
1\tDogs\t_\tNOUN\tNNS\t_\t_\t_\t_\t_
2\tbark\t_\tVERB\tVBP\t_\t_\t_\t_\tSpaceAfter=No
3\t.\t_\tPUNCT\t.\t_\t_\t_\t_\t_

"""


CONSTITUENCY_TREEBANK = (
    "(TOP (S (NP (DT the) (NN dog)) (VP (VBD saw) (NP (DT a) (NN cat)) (PP (IN with) (NP (NN care)))) (. .)))\n"
    "(TOP (S (NP (DT the) (NN cat)) (VP (VBD saw) (NP (NP (DT a) (NN dog)) (PP (IN with) (NP (DT a) (NN hat)))))))\n"
    "(TOP (S (VP (VB look) (PP (IN with) (NP (NN care))))))\n"
    "(TOP (S (NP (NNS dogs)) (VP (VBD ran) (PRN (-LRB- -LRB-) (NP (NN fast)) (-RRB- -RRB-))) (. .)))\n"
    "(TOP (S (NP (PRP he)) (VP (VBD said) (`` ``) (S (VP (VB look))) ('' '')) (. .)))\n"
)
"""A tiny hand-written Penn-Treebank-style treebank for constituency models (never PTB data in tests)."""


def train_constituency(out: Path, *options: str) -> Path:
    """A constituency model of ``CONSTITUENCY_TREEBANK`` in ``out`` (e.g. ``<data>/models/<name>/v1``): the X-bar
    PCFG, or with ``options`` (e.g. ``"--factors", "2"``) what ``train --formalism constituency`` makes of them."""
    from engine.cli import main

    out.parent.mkdir(parents=True, exist_ok=True)
    source = out.parent / f".{out.name}.mrg"
    source.write_text(CONSTITUENCY_TREEBANK, encoding="utf-8")
    assert main(["train", "--formalism", "constituency", "--train", str(source), "--out", str(out),
                 *(options or ("--factors", "0"))]) == 0
    source.unlink()
    return out


def settings(tmp: Path, **overrides: object) -> Settings:
    base: dict[str, object] = {"models_dir": MODELS, "data_dir": tmp / "data", "workers": 0,
                               "node": "test/api", "refresh_seconds": 0.2}
    base.update(overrides)
    return Settings(**base)  # type: ignore[arg-type]


def wait_ready(client: TestClient, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if client.get("/readyz").status_code == 200:
            return
        time.sleep(0.05)
    raise AssertionError(f"not ready after {timeout} s: {client.get('/readyz').json()}")


@contextmanager
def running_app(tmp: Path, **overrides: object) -> Iterator[TestClient]:
    """A TestClient whose lifespan has run and whose default model is loaded."""
    with TestClient(create_app(settings(tmp, **overrides)), raise_server_exceptions=False) as client:
        wait_ready(client)
        yield client


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class ServerProcess:
    """``python -m service`` as a real child process on a free port (its own process group)."""

    def __init__(self, data_dir: Path, *, workers: int = 1, env: dict[str, str] | None = None,
                 node: str = "e2e/api", start: bool = True) -> None:
        import os

        self.data_dir = data_dir
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.env = {**os.environ, "PARSER_NODE": node, "PARSER_REFRESH_SECONDS": "0.3", **(env or {})}
        self.args = ["-m", "service", "--port", str(self.port), "--models-dir", str(MODELS), "--data-dir",
                     str(data_dir), "--workers", str(workers), "--log-level", "warning"]
        self.proc: subprocess.Popen[bytes] | None = None
        if start:
            self.start()

    def start(self) -> None:
        import sys

        data = self.data_dir
        data.parent.mkdir(parents=True, exist_ok=True)
        self.log = open(data.parent / f"server-{self.port}.log", "wb")  # noqa: SIM115
        self.proc = subprocess.Popen([sys.executable, *self.args], cwd=REPO, env=self.env, stdout=self.log,
                                     stderr=subprocess.STDOUT, start_new_session=True)

    def wait_ready(self, timeout: float = 90.0) -> None:
        import httpx

        assert self.proc is not None

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"server exited with {self.proc.returncode}: {self.output()}")
            try:
                if httpx.get(self.url + "/readyz", timeout=2).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.1)
        raise AssertionError(f"server not ready after {timeout} s: {self.output()}")

    def output(self) -> str:
        self.log.flush()
        return Path(self.log.name).read_text(errors="replace")[-3000:]

    def kill(self) -> None:
        """SIGKILL the server process only (its training children notice and stop on their own)."""
        import signal

        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> None:
        import os
        import signal

        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except Exception:
                self.proc.kill()
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)  # anything left in its group
        except ProcessLookupError:
            pass
        self.log.close()


@contextmanager
def running_server(data_dir: Path, env: dict[str, str], workers: int = 1) -> Iterator[tuple[ServerProcess, Any]]:
    """A ready ``ServerProcess`` with ``env`` and an ``httpx.Client`` on it; stopped on exit."""
    import httpx

    proc = ServerProcess(data_dir, workers=workers, env=env)
    try:
        proc.wait_ready()
        with httpx.Client(base_url=proc.url, timeout=60) as client:
            yield proc, client
    finally:
        proc.stop()
