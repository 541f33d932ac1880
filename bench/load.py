"""Load benchmark of the HTTP service: C concurrent clients for D seconds.

    python bench/load.py [--clients 32] [--duration 60] [--mode tokens|tagged] [--endpoint parse|marginals|kbest]
                         [--model NAME] [--url http://127.0.0.1:8000] [--data DEV.conllu] [--seed 0] [--k 10]
                         [--server-env KEY=VALUE ...] [--compare-unbatched [--segments 4]]

Without --url the script starts ``python -m service --port <free port> --data-dir <tmpdir>`` from the
repository root (with the --server-env variables), waits for GET /readyz to answer 200, and stops the server
at the end. Each client loops: POST /<endpoint> with one sentence drawn with a fixed seed from EWT dev, then
the next one as soon as the answer arrives. ``--mode tokens`` (the default) sends what users send, the words
alone (``{"tokens": [[...]]}``: the model tags them, with its default tag samples on /parse); ``--mode
tagged`` also sends the gold UPOS tags (``"tags"``), so nothing is tagged or tag-sampled.

A 503 carrying Retry-After counts as "rejected" (the client then waits Retry-After seconds, capped by the
time left) and is listed apart from the errors (any other non-2xx status by code, or a transport failure by
exception name). Throughput and latency percentiles count successful (2xx) responses only; words/s is the
words of those responses over the whole run. Server CPU seconds count the server process and its parse
processes (``PARSER_PARSE_PROCESSES``). Memory is read from /proc at the end when the script started the
server: the server process's peak RSS (VmHWM), and ``server_memory``: the summed PSS of the server and its parse
processes (their shared model pages counted once: what the server costs the machine) and the largest peak RSS
of any one of them. ``--compare-unbatched`` starts two servers, one batching and one with
``PARSER_BATCHING=false`` (every request parsed alone), loads them in alternating segments (each gets
--duration seconds in all; the machine's other work weighs on both alike) and reports the ratio of words/s
and of words per CPU-second of the server's processes (less sensitive to other work on a shared machine).
``load_generator_cpu_s`` is this script's own CPU time. The clients are ``aiohttp`` (the ``bench`` extra), about
0.45 ms of CPU per request against about 3 ms for ``httpx``'s (measured 2026-11-26, 32 clients, 25 s runs): on a
2-core machine a heavier load generator takes a core's worth of CPU from the server it measures.
Prints one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import resource
import shlex
import sys
import time
from collections import Counter
from pathlib import Path

import aiohttp
import httpx
import numpy as np
from _service import ROOT, cpu_seconds, peak_rss_mb, service, tree_memory_mb  # noqa: E402  (bench/ is on sys.path when this script runs)

sys.path.insert(0, str(ROOT))
from engine.data.conllu_io import read_conllu  # noqa: E402

DEV = ROOT.parent / "shared" / "data" / "ud" / "en_ewt" / "en_ewt-ud-dev.conllu"


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown"


async def client(http: aiohttp.ClientSession, path: str, body: dict, pool: list, rng: random.Random,
                 end: float, tagged: bool, stats: dict) -> None:
    while (now := time.perf_counter()) < end:
        forms, tags = pool[rng.randrange(len(pool))]
        sentence = {"tokens": [forms], "tags": [tags]} if tagged else {"tokens": [forms]}
        try:
            async with http.post(path, json={**body, **sentence}) as resp:
                payload = await resp.read()
                status, headers = resp.status, resp.headers
        except (aiohttp.ClientError, TimeoutError) as exc:
            stats["errors"][type(exc).__name__] += 1
            continue
        stats["requests"] += 1
        if 200 <= status < 300:
            stats["latencies"].append(time.perf_counter() - now)
            stats["words"] += len(forms)
            stats["model"] = stats["model"] or json.loads(payload).get("model")
        elif status == 503 and "retry-after" in headers:
            stats["rejected"] += 1
            try:
                wait = float(headers["retry-after"])
            except ValueError:
                wait = 1.0
            await asyncio.sleep(max(0.0, min(wait, end - time.perf_counter())))
        else:
            stats["errors"][str(status)] += 1


def batch_counts(url: str) -> tuple[float, float]:
    """(engine calls, requests in them) so far, from the server's /metrics (0, 0 if it has none)."""
    text = httpx.get(url + "/metrics", timeout=30).text
    values = dict(line.rsplit(" ", 1) for line in text.splitlines()
                  if line.startswith(("parser_batch_requests_count ", "parser_batch_requests_sum ")))
    return float(values.get("parser_batch_requests_count", 0)), float(values.get("parser_batch_requests_sum", 0))


def _own_cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def segment(args: argparse.Namespace, url: str, pid: int | None, pool: list, duration: float, stats: dict) -> None:
    """One load segment, adding to ``stats`` the server's CPU seconds it took as well (and this script's)."""
    before, batches_before = cpu_seconds(pid), batch_counts(url)
    own = _own_cpu_seconds()
    asyncio.run(run(args, url, pool, duration, stats))
    stats["own_cpu_s"] += _own_cpu_seconds() - own
    after, batches_after = cpu_seconds(pid), batch_counts(url)
    if before is not None and after is not None:
        stats["cpu_s"] = (stats["cpu_s"] or 0.0) + after - before
    stats["batches"] += batches_after[0] - batches_before[0]
    stats["batched_requests"] += batches_after[1] - batches_before[1]


async def run(args: argparse.Namespace, url: str, pool: list, duration: float, stats: dict) -> None:
    """``args.clients`` clients against ``url`` for ``duration`` seconds, adding to ``stats``."""
    body: dict = {}
    if args.model:
        body["model"] = args.model
    if args.endpoint == "kbest":
        body["k"] = args.k
    connector = aiohttp.TCPConnector(limit=args.clients)  # one kept-alive connection per client
    async with aiohttp.ClientSession(url, connector=connector,
                                     timeout=aiohttp.ClientTimeout(total=args.timeout)) as http:
        start = time.perf_counter()
        end = start + duration
        seed = args.seed * 100_003 + 1_000 * stats["segments"]
        await asyncio.gather(*(client(http, f"/{args.endpoint}", body, pool, random.Random(seed + i), end,
                                      args.mode == "tagged", stats) for i in range(args.clients)))
        stats["elapsed"] += time.perf_counter() - start
        stats["segments"] += 1


def new_stats() -> dict:
    return {"requests": 0, "words": 0, "rejected": 0, "errors": Counter(), "latencies": [], "model": None,
            "elapsed": 0.0, "segments": 0, "cpu_s": None, "batches": 0.0, "batched_requests": 0.0, "own_cpu_s": 0.0}


def summary(args: argparse.Namespace, stats: dict) -> dict:
    ok, elapsed, cpu = len(stats["latencies"]), stats["elapsed"], stats["cpu_s"]
    lat_ms = 1000 * np.array(stats["latencies"])
    p50, p90, p99 = (round(float(np.percentile(lat_ms, q)), 1) if ok else None for q in (50, 90, 99))
    return {
        "endpoint": f"POST /{args.endpoint}", "mode": args.mode, "model": stats["model"],
        "requests": stats["requests"], "ok": ok, "words_per_s": round(stats["words"] / elapsed, 1),
        "requests_per_s": round(ok / elapsed, 2), "latency_ms": {"p50": p50, "p90": p90, "p99": p99},
        "rejected_503": stats["rejected"], "errors": dict(sorted(stats["errors"].items())),
        "concurrency": args.clients, "duration_s": round(elapsed, 2), "segments": stats["segments"],
        "server_cpu_s": round(cpu, 1) if cpu else None,
        "words_per_server_cpu_s": round(stats["words"] / cpu, 1) if cpu else None,
        "requests_per_engine_call": round(stats["batched_requests"] / stats["batches"], 2) if stats["batches"]
        else None,
        "load_generator_cpu_s": round(stats["own_cpu_s"], 1),
    }


def measure(args: argparse.Namespace, pool: list, env: dict[str, str]) -> dict:
    """One load run against ``args.url`` or a server started with ``env``; its peak RSS read at the end."""
    stats = new_stats()
    with service(args.url, args.ready_timeout, env) as (url, server_cmd, pid):
        segment(args, url, pid, pool, args.duration, stats)
        rss, memory = peak_rss_mb(pid), tree_memory_mb(pid)
    return {**summary(args, stats), "server_peak_rss_mb": rss, "server_memory": memory, "url": url,
            "server_command": shlex.join(server_cmd) if server_cmd else None}


def compare(args: argparse.Namespace, pool: list, env: dict[str, str]) -> dict:
    """The same load against a batching server and a ``PARSER_BATCHING=false`` one, both started here and
    loaded in alternating segments (``--segments``), so that other work on the machine weighs on both
    alike; the ratio of their words/s."""
    env_off = {**env, "PARSER_BATCHING": "false"}
    stats = {"batched": new_stats(), "unbatched": new_stats()}
    with service(None, args.ready_timeout, env) as on, service(None, args.ready_timeout, env_off) as off:
        for _ in range(args.segments):
            for name, (url, _, pid) in (("batched", on), ("unbatched", off)):
                segment(args, url, pid, pool, args.duration / args.segments, stats[name])
        rss = {"batched": peak_rss_mb(on[2]), "unbatched": peak_rss_mb(off[2])}
        commands = {"batched": on[1], "unbatched": off[1]}
    out = {name: {**summary(args, stats[name]), "server_peak_rss_mb": rss[name],
                  "server_command": shlex.join(commands[name] or [])} for name in stats}
    ratios = {}
    for key in ("words_per_s", "words_per_server_cpu_s"):
        on_value, off_value = out["batched"][key], out["unbatched"][key]
        ratios[f"batched_over_unbatched_{key}"] = round(on_value / off_value, 2) if on_value and off_value else None
    return {**out["batched"], "unbatched": out["unbatched"], **ratios}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--clients", type=int, default=32, help="concurrent clients (default 32)")
    ap.add_argument("--duration", type=float, default=60.0, help="seconds of load (default 60)")
    ap.add_argument("--mode", choices=("tokens", "tagged"), default="tokens",
                    help="tokens: words only, as users send them (default); tagged: words with gold UPOS tags")
    ap.add_argument("--endpoint", choices=("parse", "marginals", "kbest"), default="parse")
    ap.add_argument("--model", help="model name (default: the service's default model)")
    ap.add_argument("--k", type=int, default=10, help="trees per sentence for --endpoint kbest (default 10)")
    ap.add_argument("--url", help="a running service; default: start one from the repository root")
    ap.add_argument("--server-env", action="append", default=[], metavar="KEY=VALUE",
                    help="environment of the server started here (e.g. PARSER_BATCH_WAIT_MS=2); repeatable")
    ap.add_argument("--compare-unbatched", action="store_true",
                    help="run against a batching server and a PARSER_BATCHING=false one, alternating, and report "
                    "the words/s ratio (each gets --duration seconds in all)")
    ap.add_argument("--segments", type=int, default=4, help="alternating segments of --compare-unbatched")
    ap.add_argument("--data", type=Path, default=DEV, help="CoNLL-U file the sentences are drawn from")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--timeout", type=float, default=60.0, help="per-request timeout in seconds")
    ap.add_argument("--ready-timeout", type=float, default=300.0, help="seconds to wait for /readyz")
    args = ap.parse_args()
    if args.compare_unbatched and args.url:
        ap.error("--compare-unbatched starts its own servers: leave out --url")
    env = dict(item.split("=", 1) for item in args.server_env)

    pool = [(s.forms, s.upos) for s in read_conllu(args.data) if s.n]
    load_before = os.getloadavg()[0]  # other work on the machine skews the numbers
    result = compare(args, pool, env) if args.compare_unbatched else measure(args, pool, env)
    result.update({
        "sentences_in_pool": len(pool),
        "machine": {"cores": os.cpu_count(), "usable_cores": len(os.sched_getaffinity(0)), "cpu": cpu_model(),
                    "load_average_1min_before": round(load_before, 2),
                    "load_average_1min_after": round(os.getloadavg()[0], 2)},
        "command": shlex.join(["python", *sys.argv]),
    })
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
