"""Docker and docker-compose for ``bench/deploy_check.py``: run a command, find out whether Docker can run
here, a compose project that can always be torn down, and what a container or image looks like.

Everything goes through the ``docker`` and ``docker-compose`` (v1) or ``docker compose`` (v2) command-line
clients, so the check needs nothing but them and the project's own dependencies.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any


class CheckFailed(Exception):
    """A deployment check failed; the message says what broke."""


def run(args: Sequence[str], *, env: dict[str, str] | None = None, cwd: Path | None = None, timeout: float = 600,
        check: bool = True, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """Run a command and capture its output; with ``check``, a non-zero status raises ``CheckFailed``."""
    try:
        done = subprocess.run(list(args), env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout,
                              input=stdin)
    except subprocess.TimeoutExpired as e:
        raise CheckFailed(f"`{' '.join(args)}` did not finish within {timeout:.0f} s") from e
    if check and done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-15:]
        raise CheckFailed(f"`{' '.join(args)}` exited with {done.returncode}:\n" + "\n".join(tail))
    return done


def compose_command() -> list[str] | None:
    """``docker-compose`` (v1, Debian's package) if present, else the ``docker compose`` plugin, else None."""
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    if shutil.which("docker") and run(["docker", "compose", "version"], check=False, timeout=30).returncode == 0:
        return ["docker", "compose"]
    return None


def why_docker_cannot_run() -> str | None:
    """None when the docker client, a reachable daemon and compose are all here; else the reason."""
    if not shutil.which("docker"):
        return "no `docker` client on PATH (../shared/tools/docker-local.sh installs and starts Docker)"
    info = run(["docker", "info", "--format", "{{.ServerVersion}}"], check=False, timeout=60)
    if info.returncode != 0:
        reason = (info.stderr.strip().splitlines() or ["no answer"])[-1]
        return f"the Docker daemon is not reachable ({reason}); ../shared/tools/docker-local.sh starts one"
    if compose_command() is None:
        return "neither `docker-compose` nor `docker compose` is installed"
    return None


def versions() -> dict[str, str]:
    server = run(["docker", "version", "--format", "{{.Server.Version}}"], check=False).stdout.strip()
    compose = compose_command() or []
    comp = run([*compose, "version", "--short"], check=False).stdout.strip() if compose else ""
    return {"docker": server, "compose": comp}


def inspect(kind: str, name: str) -> dict[str, Any]:
    """``docker <kind> inspect NAME`` as a dict (kind: image, container, volume, network)."""
    out = run(["docker", kind, "inspect", name]).stdout
    return dict(json.loads(out)[0])


class ComposeProject:
    """One ``docker-compose -p NAME`` project of the repository's compose file, with its own environment."""

    def __init__(self, project_dir: Path, name: str, env: dict[str, str]) -> None:
        self.dir = project_dir
        self.name = name
        self.env = {**os.environ, **env}
        self.base = [*(compose_command() or ["docker-compose"]), "-p", name, "-f",
                     str(project_dir / "docker-compose.yml")]

    def __call__(self, *args: str, timeout: float = 300, check: bool = True,
                 env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        return run([*self.base, *args], env=env or self.env, cwd=self.dir, timeout=timeout, check=check)

    def container(self, service: str) -> str:
        """The container id of a running service (CheckFailed if there is none)."""
        return self.containers(service)[0]

    def containers(self, service: str) -> list[str]:
        """The container ids of a service (several after ``--scale``; CheckFailed if there is none)."""
        ids = self("ps", "-q", service).stdout.split()
        if not ids:
            raise CheckFailed(f"compose service {service!r} has no container")
        return ids

    def logs(self, service: str, lines: int = 25) -> str:
        done = self("logs", "--no-color", "--tail", str(lines), service, check=False, timeout=60)
        return (done.stdout + done.stderr).strip()

    def leftovers(self) -> list[str]:
        """Containers, networks and volumes still labelled with this project (empty after ``down -v``)."""
        label = f"label=com.docker.compose.project={self.name}"
        left = []
        for kind, fmt in (("container", "{{.Names}}"), ("network", "{{.Name}}"), ("volume", "{{.Name}}")):
            args = ["docker", kind, "ls", "--filter", label, "--format", fmt]
            if kind == "container":
                args.insert(3, "--all")
            left += [f"{kind} {n}" for n in run(args, check=False).stdout.split()]
        return left

    def down(self) -> list[str]:
        """Stop and remove the containers, network and volume; returns whatever is left (should be nothing)."""
        self("down", "--volumes", "--remove-orphans", "--timeout", "20", check=False, timeout=180)
        return self.leftovers()


def container_uids(container: str) -> dict[str, int]:
    """The real uid of every process in a container (``/proc/*/status``), keyed by ``pid:command``."""
    code = ("import os, pathlib\n"
            "for p in pathlib.Path('/proc').glob('[0-9]*'):\n"
            "    try:\n"
            "        st = dict(l.split(':', 1) for l in (p / 'status').read_text().splitlines() if ':' in l)\n"
            "    except OSError:\n"
            "        continue\n"
            "    if p.name != str(os.getpid()):\n"
            "        print(p.name + ':' + st['Name'].strip(), st['Uid'].split()[0])\n")
    out = run(["docker", "exec", container, "python", "-c", code]).stdout
    return {proc: int(uid) for proc, uid in (line.rsplit(maxsplit=1) for line in out.splitlines())}
