"""Screenshot of the service's web page (GET /) after it has parsed its example sentence.

    python bench/screenshot.py [--out docs/service-page.png] [--width 1280] [--height 1000] [--url URL]

Starts the service (``python -m service --port <free port> --data-dir <tmpdir>`` from the repo
root), waits until ``GET /readyz`` answers 200, renders ``/`` in headless Chromium (Debian:
``apt-get install chromium``; set ``CHROMIUM`` to use another binary) and stops the service. The
page parses its pre-filled sentence on load; Chromium's virtual-time budget lets those requests
finish before the picture is taken, and a DOM dump checks that they all succeeded. ``--url`` takes
the picture of an already running service instead of starting one.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from _service import ROOT, service  # (bench/ is on sys.path when this script runs)

CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--hide-scrollbars", "--force-device-scale-factor=1"]


def chromium() -> str:
    for name in (os.environ.get("CHROMIUM"), "chromium", "chromium-browser", "google-chrome"):
        if name and shutil.which(name):
            return shutil.which(name)  # type: ignore[return-value]
    raise SystemExit("no Chromium found (apt-get install chromium, or set CHROMIUM=/path/to/chrome)")


def run_chromium(args: list[str], budget_ms: int) -> subprocess.CompletedProcess[str]:
    with tempfile.TemporaryDirectory(prefix="chromium-profile-") as profile:
        cmd = [chromium(), *CHROMIUM_FLAGS, f"--user-data-dir={profile}", f"--virtual-time-budget={budget_ms}", *args]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)


def shoot(url: str, out: Path, width: int, height: int, budget_ms: int) -> None:
    dom = run_chromium(["--dump-dom", url + "/"], budget_ms).stdout
    if 'data-parsed="ok"' not in dom:
        state = "with errors" if 'data-parsed="error"' in dom else "not at all"
        print(f"warning: the page parsed its example sentence {state} before the time budget ran out", file=sys.stderr)
    out.parent.mkdir(parents=True, exist_ok=True)
    res = run_chromium([f"--window-size={width},{height}", f"--screenshot={out.resolve()}", url + "/"], budget_ms)
    if res.returncode != 0 or not out.exists():
        raise SystemExit(f"Chromium failed ({res.returncode}):\n{res.stderr[-2000:]}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "service-page.png")
    ap.add_argument("--width", type=int, default=1280)
    ap.add_argument("--height", type=int, default=1000)
    ap.add_argument("--url", help="screenshot this running service instead of starting one")
    ap.add_argument("--budget-ms", type=int, default=15000, help="Chromium virtual-time budget")
    ap.add_argument("--ready-timeout", type=float, default=180.0)
    args = ap.parse_args()

    with service(args.url, args.ready_timeout) as (url, _, _):
        shoot(url, args.out, args.width, args.height, args.budget_ms)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
