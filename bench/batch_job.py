"""A batch parse job through the API against the command line on the same file (issue 27).

Starts ``python -m service`` (one job worker) on a fresh data directory, submits FILE as a parse job
(``config.kind = "parse"``), polls it while sampling the API process's resident memory, downloads the result,
then runs ``python -m engine parse`` on the same file as the reference measured in the same run, and prints
one JSON object: sentences, words, the job's words/s (submission to downloaded result) and the CLI's (whole
command), their ratio, whether the outputs are identical, and the API's RSS (start, peak, end).

    python bench/batch_job.py --input ../shared/data/ud/en_ewt/en_ewt-ud-train.conllu [--dask local:2]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

import httpx
from _service import ROOT as REPO  # noqa: E402  (bench/ is on sys.path when this script runs)
from _service import service  # noqa: E402

sys.path.insert(0, str(REPO))  # the in-process Dask scheduler of --dask unpickles tasks that name engine.cli

KEY = "bench-key"
AUTH = {"Authorization": f"Bearer {KEY}"}


def rss_mb(pid: int) -> float:
    """Resident memory of a process in MB (Linux ``/proc``)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def run_job(client: httpx.Client, pid: int, data: bytes, model: str, out: Path) -> dict[str, float]:
    start = time.perf_counter()
    r = client.post("/jobs", files={"input": ("input.conllu", data, "text/plain")},
                    data={"config": json.dumps({"kind": "parse", "model": model})}, headers=AUTH)
    r.raise_for_status()
    job_id = r.json()["id"]
    peak = rss_mb(pid)
    while True:
        job = client.get(f"/jobs/{job_id}", headers=AUTH).json()
        peak = max(peak, rss_mb(pid))
        if job["status"] in ("succeeded", "failed", "cancelled"):
            break
        time.sleep(1.0)
    if job["status"] != "succeeded":
        raise SystemExit(f"job {job['status']}: {job.get('error')}")
    with client.stream("GET", f"/jobs/{job_id}/result", headers=AUTH) as result, open(out, "wb") as f:
        for chunk in result.iter_bytes(1 << 20):
            f.write(chunk)
            peak = max(peak, rss_mb(pid))
    return {"seconds": time.perf_counter() - start, "api_rss_peak_mb": peak, **job["metrics"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--input", required=True, help="CoNLL-U to parse")
    ap.add_argument("--model", default="en_ewt")
    ap.add_argument("--dask", metavar="local:N", help="run the job's chunks on a LocalCluster of N worker processes "
                    "(PARSER_DASK_SCHEDULER)")
    args = ap.parse_args()
    data = Path(args.input).read_bytes()
    with tempfile.TemporaryDirectory(prefix="batch-job-") as tmp, ExitStack() as stack:
        env = {"API_KEY": KEY, "OPENBLAS_NUM_THREADS": "1"}
        if args.dask:
            from distributed import LocalCluster

            cluster = stack.enter_context(LocalCluster(n_workers=int(args.dask.removeprefix("local:")),
                                                       threads_per_worker=1, processes=True, dashboard_address=None))
            env["PARSER_DASK_SCHEDULER"] = cluster.scheduler_address
        with service(env=env) as (url, _, pid):
            assert pid is not None
            rss_start = rss_mb(pid)
            with httpx.Client(base_url=url, timeout=120) as client:
                job = run_job(client, pid, data, args.model, Path(tmp) / "job.conllu")
            rss_end = rss_mb(pid)
        start = time.perf_counter()
        subprocess.run([sys.executable, "-m", "engine", "parse", "--model", str(REPO / "models" / args.model),
                        "--input", args.input, "--output", str(Path(tmp) / "cli.conllu")], check=True, cwd=REPO,
                       env={**os.environ, "OPENBLAS_NUM_THREADS": "1"})
        cli_seconds = time.perf_counter() - start
        identical = (Path(tmp) / "job.conllu").read_bytes() == (Path(tmp) / "cli.conllu").read_bytes()
    words = job["words"]
    print(json.dumps({
        "input": args.input, "model": args.model, "dask": args.dask, "sentences": job["sentences"], "words": words,
        "job_seconds": round(job["seconds"], 1), "job_words_per_second": round(words / job["seconds"], 1),
        "cli_seconds": round(cli_seconds, 1), "cli_words_per_second": round(words / cli_seconds, 1),
        "job_to_cli_ratio": round(cli_seconds / job["seconds"], 3), "identical": identical,
        "api_rss_mb": {"start": round(rss_start, 1), "peak": round(job["api_rss_peak_mb"], 1),
                       "end": round(rss_end, 1)}}, indent=2))


if __name__ == "__main__":
    main()
