"""Standalone training worker: ``python -m service.worker --data-dir DIR [--trained-dir DIR] [--workers N]
[--node NAME] [--health-file FILE]``.

Runs a job scheduler on the app's data directory (``DIR/jobs.sqlite3``, uploads in ``DIR/uploads``)
without the HTTP service, e.g. as docker-compose's `jobs` container next to an app started
with ``--workers 0``. Trained models go to ``--trained-dir`` (default ``DIR/models``), which the app must
see too. SIGTERM or SIGINT stops it: running jobs are marked failed and their processes terminated.
"""

from __future__ import annotations

import argparse
import logging
import signal
import socket
import threading
from pathlib import Path
from types import FrameType

from service.jobs.layout import RESULT_RETENTION_SECONDS, DataLayout
from service.jobs.scheduler import Scheduler
from service.jobs.store import JobStore

log = logging.getLogger("service.worker")


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m service.worker", description=__doc__.splitlines()[0])
    ap.add_argument("--data-dir", required=True, help="the service's data directory (jobs database and uploads)")
    ap.add_argument("--trained-dir", help="where trained models go (default: DATA_DIR/models)")
    ap.add_argument("--workers", type=int, default=1, help="training jobs run at the same time (default 1)")
    ap.add_argument("--node", default=f"{socket.gethostname()}-worker",
                    help="name of this worker; schedulers sharing a database need different names "
                    "(default: HOSTNAME-worker)")
    ap.add_argument("--poll-seconds", type=float, default=0.5, help="how often the queue is polled")
    ap.add_argument("--stale-seconds", type=float, default=60.0,
                    help="a running job without heartbeat for this long is marked failed")
    ap.add_argument("--cancel-grace", type=float, default=10.0,
                    help="seconds a cancelled job may take to stop before its process is terminated")
    ap.add_argument("--result-retention-seconds", type=float, default=RESULT_RETENTION_SECONDS,
                    help="how long a parse job's result is kept after the job ended (default: a week)")
    ap.add_argument("--health-file", help="touch this file every second while the job scheduler runs (a container "
                    "health check reads its age; docker-compose.yml's `jobs`)")
    ap.add_argument("-v", "--verbose", action="store_true")
    return ap


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.workers < 1:
        build_parser().error("--workers must be at least 1")
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    layout = DataLayout.at(args.data_dir, args.trained_dir)
    layout.create()
    scheduler = Scheduler(JobStore(layout.database), layout.trained_dir, args.workers, args.node,
                          poll_seconds=args.poll_seconds, stale_seconds=args.stale_seconds,
                          cancel_grace=args.cancel_grace, uploads_dir=layout.uploads, results_dir=layout.results,
                          result_retention=args.result_retention_seconds)
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        log.info("received %s: stopping", signal.Signals(signum).name)
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    scheduler.start()
    while not stop.wait(1.0):
        if not scheduler.alive:
            log.error("the scheduler thread died")
            scheduler.stop()
            return 1
        if args.health_file:
            Path(args.health_file).touch()
    scheduler.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
