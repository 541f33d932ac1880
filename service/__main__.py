"""``python -m service [--host 127.0.0.1] [--port 8000] [--models-dir models] [--data-dir DIR] [--workers N]``

Flags override ``PARSER_*`` environment variables, which override the defaults in ``service.settings``.
``--workers`` is the number of training worker processes this process runs (0: leave the jobs to an
external ``python -m service.worker``); the HTTP server parses in ``PARSER_PARSE_PROCESSES`` processes forked
once its models are loaded (``service.parse_processes``; 0: in ``PARSER_PARSE_THREADS`` threads of its own).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path

from pydantic import ValidationError


def main(argv: list[str] | None = None) -> int:
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(var, "1")  # parallelism comes from requests, not from BLAS threads
    import uvicorn

    from service.app import create_app
    from service.settings import Settings

    ap = argparse.ArgumentParser(prog="python -m service", description="Serve the parser over HTTP.")
    ap.add_argument("--host", help="interface to listen on (default 127.0.0.1)")
    ap.add_argument("--port", type=int, help="port (default 8000; 0 picks a free one)")
    ap.add_argument("--models-dir", type=Path, help="shipped models (default: models)")
    ap.add_argument("--data-dir", type=Path, help="job store, uploads and trained models (default: data)")
    ap.add_argument("--workers", type=int, help="training worker processes (default 1; 0: external worker)")
    ap.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    args = ap.parse_args(argv)
    overrides = {k: v for k, v in vars(args).items() if v is not None and k != "log_level"}
    try:
        settings = Settings(**overrides)
    except ValidationError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    uvicorn.run(create_app(settings), host=settings.host, port=settings.port, log_level=args.log_level,
                timeout_graceful_shutdown=15, timeout_keep_alive=65)  # longer than proxies' idle timeouts
    return 0


if __name__ == "__main__":
    sys.exit(main())
