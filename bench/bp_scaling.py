"""Time per loopy-BP iteration against sentence length, on a second-order factor graph with random weights.

    python bench/bp_scaling.py

Default graph: TREE (single-root, non-projective) + LINK + GRAND + SIB over all arcs of ``n`` words, weights
LINK ~ N(0, 1), GRAND and SIB ~ N(0, 0.5^2), seeded per length (``--seed``). Other graphs:

    python bench/bp_scaling.py --factors tree,link
    python bench/bp_scaling.py --projective --plot /tmp/bp_scaling.png

For each length the graph is built once (timed separately), warmed up by one untimed ``run_bp`` call, then
``run_bp(families, valid, BPConfig(max_iterations=K, tolerance=0))`` is timed for every ``K`` of ``--iterations``
(interleaved, ``--repeat`` times; calls shorter than 0.1 s are looped and averaged). The seconds per iteration
are the least-squares slope of the median time against ``K``; the intercept (``seconds_fixed_per_call``) is the
per-call cost outside the iterations (initial messages, final beliefs). The exponent is the least-squares slope
of log(seconds per iteration) against log(n) over the lengths ``n >= --fit-min``. Prints one JSON object;
``--plot PATH`` also writes a log-log PNG when matplotlib is importable (skipped silently otherwise). The
default run takes about 40 s on 2 cores.

BLAS runs on one thread unless the environment says otherwise (``OPENBLAS_NUM_THREADS=2 python ...``), as in
the Dockerfile: multithreaded OpenBLAS makes the Matrix-Tree ``inv`` of a ~100x100 matrix stall for tens of
milliseconds at random on a 2-core machine, which swamps the per-iteration cost. The setting is reported.
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")  # before numpy loads BLAS; same default as the Dockerfile

import argparse  # noqa: E402
import gc  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

from engine.graph.family import FactorFamily  # noqa: E402
from engine.graph.hard import Link  # noqa: E402
from engine.graph.pairwise import PairFamily, grand_arcs, sib_arcs  # noqa: E402
from engine.graph.tree import Tree  # noqa: E402
from engine.inference.bp import SCHEDULES, BPConfig, run_bp  # noqa: E402

FACTORS = ("tree", "link", "grand", "sib")  # built in this order: run_bp wants the tree factor first
DEFAULT_LENGTHS = "10,20,30,40,60,80,100,120,150"
MIN_SECONDS = 0.1  # shortest timed measurement: below this, run_bp is called several times in a row


def valid_arcs(n: int) -> np.ndarray:
    """Every arc h -> m of a sentence of ``n`` words: no arc into ROOT, no self loop."""
    valid = np.ones((n + 1, n + 1), dtype=bool)
    valid[:, 0] = False
    np.fill_diagonal(valid, False)
    return valid


def build_graph(n: int, factors: list[str], *, projective: bool, seed: int) -> tuple[list[FactorFamily], np.ndarray]:
    """The factor families of one sentence of ``n`` words, with random weights from ``(seed, n)``."""
    rng = np.random.default_rng([seed, n])
    valid = valid_arcs(n)
    families: list[FactorFamily] = []
    for name in FACTORS:
        if name not in factors:
            continue
        if name == "tree":
            families.append(Tree(n, valid, projective=projective, single_root=True))
        elif name == "link":
            families.append(Link(n, valid, rng.normal(size=(n + 1, n + 1))))
        else:
            arcs = grand_arcs(n, valid) if name == "grand" else sib_arcs(n, valid)
            families.append(PairFamily(n, valid, arcs, rng.normal(scale=0.5, size=arcs.shape[1]), name))
    return families, valid


def timed(fn, number: int = 1) -> float:
    """Mean seconds of ``number`` back-to-back calls of ``fn``."""
    gc.collect()
    start = time.perf_counter()
    for _ in range(number):
        fn()
    return (time.perf_counter() - start) / number


def measure(n: int, factors: list[str], ks: list[int], repeat: int, *, projective: bool, schedule: str,
            seed: int) -> dict[str, float]:
    """Build time, seconds per iteration (slope over K) and fixed seconds per call for one length."""
    graph: list = []
    build = timed(lambda: graph.extend(build_graph(n, factors, projective=projective, seed=seed)))
    families, valid = graph

    def call(k: int) -> None:
        run_bp(families, valid, BPConfig(max_iterations=k, tolerance=0.0, schedule=schedule))

    # warm-up (first touch of the large message arrays); short calls are looped to last >= MIN_SECONDS
    number = max(1, int(np.ceil(MIN_SECONDS / max(timed(lambda: call(max(ks))), 1e-6))))
    times: dict[int, list[float]] = {k: [] for k in ks}
    for _ in range(repeat):
        for k in ks:
            times[k].append(timed(lambda k=k: call(k), number))
    medians = np.array([np.median(times[k]) for k in ks])
    slope, intercept = np.polyfit(np.array(ks, dtype=float), medians, 1)
    return {"build": build, "per_iteration": float(slope), "fixed": float(intercept)}


def fit_exponent(lengths: list[int], seconds: list[float], fit_min: int) -> tuple[float | None, list[int]]:
    """Least-squares slope of log(seconds) against log(n) over the lengths ``n >= fit_min``."""
    pts = [(n, s) for n, s in zip(lengths, seconds, strict=True) if n >= fit_min and s > 0]
    if len(pts) < 2:
        return None, [n for n, _ in pts]
    x, y = np.log([n for n, _ in pts]), np.log([s for _, s in pts])
    return float(np.polyfit(x, y, 1)[0]), [pts[0][0], pts[-1][0]]


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            cpu = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), cpu)
    except OSError:
        pass
    threads = os.environ.get("OPENBLAS_NUM_THREADS")
    return (f"{cpu}, {os.cpu_count()} cores, Python {platform.python_version()}, numpy {np.__version__}, "
            f"OPENBLAS_NUM_THREADS={threads}")


def plot(path: str, result: dict) -> None:
    """Log-log plot of seconds per iteration against n with the fitted line (needs matplotlib)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    lengths, seconds = np.array(result["lengths"]), np.array(result["seconds_per_iteration"])
    fig, ax = plt.subplots(figsize=(5, 4))
    ax.loglog(lengths, seconds, "o-", label="measured")
    if result["exponent"] is not None:
        lo, hi = result["fit_range"]
        sel = (lengths >= lo) & (lengths <= hi) & (seconds > 0)
        coef = np.polyfit(np.log(lengths[sel]), np.log(seconds[sel]), 1)
        xs = np.array([lo, hi], dtype=float)
        ax.loglog(xs, np.exp(np.polyval(coef, np.log(xs))), "--", label=f"fit n^{result['exponent']:.2f}")
    ax.set_xlabel("sentence length n")
    ax.set_ylabel("seconds per BP iteration")
    ax.set_title("+".join(result["factors"]))
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def parse_ints(text: str) -> list[int]:
    return sorted({int(x) for x in text.split(",") if x.strip()})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lengths", default=DEFAULT_LENGTHS, help="comma-separated sentence lengths")
    ap.add_argument("--factors", default="tree,link,grand,sib", help=f"comma-separated subset of {','.join(FACTORS)}")
    ap.add_argument("--projective", action="store_true", help="PTREE (Eisner) instead of TREE (Matrix-Tree)")
    ap.add_argument("--schedule", default="flooding", choices=SCHEDULES)
    ap.add_argument("--iterations", default="1,3,5", help="the K values of max_iterations (at least two)")
    ap.add_argument("--repeat", type=int, default=5, help="timed calls per K; the median is used")
    ap.add_argument("--fit-min", type=int, default=40, help="smallest length used in the exponent fit")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--plot", metavar="PATH", help="write a log-log PNG here (if matplotlib is importable)")
    args = ap.parse_args()

    factors = [f.strip() for f in args.factors.split(",") if f.strip()]
    unknown = sorted(set(factors) - set(FACTORS))
    if unknown or not factors:
        ap.error(f"--factors must be a non-empty subset of {','.join(FACTORS)}; unknown: {unknown}")
    lengths, ks = parse_ints(args.lengths), parse_ints(args.iterations)
    if len(ks) < 2 or ks[0] < 1:
        ap.error("--iterations needs at least two distinct values >= 1")
    if not lengths or lengths[0] < 1:
        ap.error("--lengths must be positive")
    if args.repeat < 1:
        ap.error("--repeat must be at least 1")

    rows = [measure(n, factors, ks, args.repeat, projective=args.projective, schedule=args.schedule, seed=args.seed)
            for n in lengths]
    seconds = [r["per_iteration"] for r in rows]
    exponent, fit_range = fit_exponent(lengths, seconds, args.fit_min)
    names = [("ptree" if args.projective else "tree") if f == "tree" else f for f in FACTORS if f in factors]
    result = {
        "lengths": lengths,
        "seconds_per_iteration": [float(f"{s:.6g}") for s in seconds],
        "exponent": None if exponent is None else round(exponent, 3),
        "fit_range": fit_range,
        "factors": names,
        "machine": machine(),
        "schedule": args.schedule,
        "iterations": ks,
        "repeat": args.repeat,
        "seconds_fixed_per_call": [float(f"{r['fixed']:.4g}") for r in rows],
        "seconds_build": [float(f"{r['build']:.4g}") for r in rows],
    }
    if args.plot:
        plot(args.plot, result)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
