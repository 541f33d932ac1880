"""Soak test of the HTTP service: a bounded number of requests, the server's RSS sampled along the way.

    python bench/soak.py [--requests 20000] [--clients 8] [--model en_ewt-o1] [--mode tagged|tokens]
                         [--warmup 2000] [--url http://127.0.0.1:8000]

Starts ``python -m service`` (or uses ``--url``), sends ``--requests`` POST /parse requests from ``--clients``
concurrent clients, each one EWT dev sentence drawn with a fixed seed (every 7th request is a malformed one:
an unknown tag, an empty sentence, a lone surrogate, answered 422), and reads the server's resident set
size (VmRSS) after the first ``--warmup`` requests and at the end. Passes (exit 0) when the end RSS is within
10% of the RSS after the warm-up and no request failed with a 5xx or a transport error. The loop is bounded
by the request count (and by ``--max-seconds``), only loopback traffic. Prints one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import time
from collections import Counter
from pathlib import Path

import httpx
from _service import ROOT, service  # noqa: E402  (bench/ is on sys.path when this script runs)

sys.path.insert(0, str(ROOT))
from engine.data.conllu_io import read_conllu  # noqa: E402

DEV = ROOT.parent / "shared" / "data" / "ud" / "en_ewt" / "en_ewt-ud-dev.conllu"
MALFORMED = [{"tokens": [["a", "b"]], "tags": [["FOO", "NOUN"]]}, {"tokens": [[]]},
             {"tokens": [["a", "\ud800"]]}, {"tokens": [["x" * 300]]}]


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


async def run(url: str, pid: int | None, ns: argparse.Namespace) -> dict:
    sentences = [s for s in read_conllu(ns.data) if s.n]
    rng = random.Random(ns.seed)
    sent = 0
    statuses: Counter[str] = Counter()
    rss: dict[str, float] = {}
    deadline = time.monotonic() + ns.max_seconds
    lock = asyncio.Lock()

    def body(i: int) -> dict:
        if i % 7 == 6:
            return {**MALFORMED[(i // 7) % len(MALFORMED)], "model": ns.model}
        s = sentences[rng.randrange(len(sentences))]
        out: dict = {"tokens": [s.forms], "model": ns.model}
        if ns.mode == "tagged":
            out["tags"] = [s.upos]
        return out

    async def worker(http: httpx.AsyncClient) -> None:
        nonlocal sent
        while True:
            async with lock:
                if sent >= ns.requests or time.monotonic() > deadline:
                    return
                i = sent
                sent += 1
                payload = body(i)
            try:
                # a JSON body with ensure_ascii (the default) carries a lone surrogate as a \ud800 escape
                r = await http.post("/parse", content=json.dumps(payload).encode(),
                                    headers={"content-type": "application/json"})
                statuses[str(r.status_code)] += 1
            except httpx.HTTPError as e:
                statuses[type(e).__name__] += 1
            if pid is not None and i + 1 == ns.warmup:
                rss["after_warmup_mb"] = rss_mb(pid)

    start = time.monotonic()
    async with httpx.AsyncClient(base_url=url, timeout=120) as http:
        await asyncio.gather(*(worker(http) for _ in range(ns.clients)))
    seconds = time.monotonic() - start
    if pid is not None:
        rss["end_mb"] = rss_mb(pid)
    failures = {k: v for k, v in statuses.items() if not k.isdigit() or int(k) >= 500}
    grown = (rss["end_mb"] / rss["after_warmup_mb"] - 1) if "after_warmup_mb" in rss and "end_mb" in rss else None
    return {"requests": sent, "seconds": round(seconds, 1), "statuses": dict(statuses), "failures": failures,
            "rss_mb": {k: round(v, 1) for k, v in rss.items()},
            "rss_growth": None if grown is None else round(grown, 4),
            "passed": not failures and (grown is None or grown <= 0.10),
            "command": "python bench/soak.py " + " ".join(sys.argv[1:])}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=20000)
    ap.add_argument("--warmup", type=int, default=2000)
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--model", default="en_ewt-o1")
    ap.add_argument("--mode", choices=("tagged", "tokens"), default="tagged")
    ap.add_argument("--data", default=str(DEV))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max-seconds", type=float, default=3600.0, help="stop early after this long")
    ap.add_argument("--url")
    ns = ap.parse_args()
    with service(ns.url) as (url, _, pid):
        result = asyncio.run(run(url, pid, ns))
    print(json.dumps(result))
    return 0 if result["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
