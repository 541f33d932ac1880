"""Shared by the service benchmarks: start ``python -m service`` on a free port, wait for /readyz, stop it."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_ready(url: str, server: subprocess.Popen[bytes] | None, timeout: float) -> None:
    """Poll ``url``/readyz until it answers 200; exit if the server process dies first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server is not None and server.poll() is not None:
            raise SystemExit(f"the service exited with status {server.returncode} before it was ready")
        try:
            with urllib.request.urlopen(url + "/readyz", timeout=5) as resp:
                if resp.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.5)
    raise SystemExit(f"{url}/readyz did not answer 200 within {timeout:.0f} s")


@contextmanager
def service(url: str | None = None, ready_timeout: float = 300.0,
            env: dict[str, str] | None = None) -> Iterator[tuple[str, list[str] | None, int | None]]:
    """``(url, command, pid)`` of a ready service: ``url`` if given (pid None), else one started here with a
    temporary data directory and ``env`` added to the environment (its log is printed if something fails)
    and stopped at the end."""
    if url:
        wait_ready(url.rstrip("/"), None, ready_timeout)
        yield url.rstrip("/"), None, None
        return
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="bench-service-") as tmp:
        cmd = ["python", "-m", "service", "--port", str(port), "--data-dir", tmp, "--log-level", "warning"]
        log_path = Path(tmp) / "server.log"
        with open(log_path, "wb") as log:
            proc = subprocess.Popen([sys.executable, *cmd[1:]], cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                                    env={**os.environ, **(env or {})})
            try:
                wait_ready(f"http://127.0.0.1:{port}", proc, ready_timeout)
                yield f"http://127.0.0.1:{port}", [*(f"{k}={v}" for k, v in (env or {}).items()), *cmd], proc.pid
            except BaseException:
                sys.stderr.write(log_path.read_text(errors="replace")[-4000:])
                raise
            finally:
                proc.terminate()
                try:
                    proc.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()


def process_tree(pid: int) -> list[int]:
    """``pid`` and its descendants (the service's parse processes), from /proc."""
    tree, i = [pid], 0
    while i < len(tree):
        try:
            for task in Path(f"/proc/{tree[i]}/task").iterdir():
                tree += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            pass
        i += 1
    return tree


def _status_kb(pid: int, field: str, name: str = "status") -> int | None:
    try:
        for line in Path(f"/proc/{pid}/{name}").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return None


def peak_rss_mb(pid: int | None) -> float | None:
    """Peak resident set size (VmHWM) of a live process in MB, from /proc (None if unknown)."""
    kb = None if pid is None else _status_kb(pid, "VmHWM")
    return None if kb is None else round(kb / 1024, 1)


def tree_memory_mb(pid: int | None) -> dict[str, float | int] | None:
    """The memory of a process and its descendants now: their summed proportional set size (PSS: a page shared
    by k processes counts 1/k to each, so the sum counts every page once; what the server tree costs the
    machine), the largest peak RSS of any one of them, and how many there are."""
    if pid is None:
        return None
    tree = process_tree(pid)
    pss = [_status_kb(p, "Pss", "smaps_rollup") for p in tree]
    peaks = [_status_kb(p, "VmHWM") for p in tree]
    return {"processes": len(tree), "pss_mb": round(sum(k for k in pss if k) / 1024, 1),
            "largest_peak_rss_mb": round(max((k for k in peaks if k), default=0) / 1024, 1)}


def cpu_seconds(pid: int | None) -> float | None:
    """User plus system CPU seconds a live process and its live descendants (parse processes) have used so far,
    from /proc."""
    if pid is None:
        return None
    total = 0.0
    for p in process_tree(pid):
        try:
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            if p == pid:
                return None
            continue
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime (fields 14, 15)
    return total
