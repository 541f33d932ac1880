"""Where do the head probabilities stay miscalibrated after the shipped map (power, then isotonic), and does a
map that conditions on a small declared context, a smoothed isotonic or a map of every arc help out of sample?
Dev only (issue 24).

    nice -n 5 python bench/head_calibration_context.py --model models/en_ewt \\
        --data ../shared/data/ud/en_ewt/en_ewt-ud-dev.conllu [--cache /tmp/ewt_dev_heads.npz]

The model parses the treebank once, as ``calibrate`` does (``--calibration none``, re-tagged with its tag
samples). Every map is fitted on part of the sentences and its expected calibration error (ECE, 15 equal-width
bins, ``engine.evaluation.metrics.calibration``) measured on the rest:

- ``halves``: 20 random halves of the sentences (seed 7), each half fitted and the other measured (40 ECEs,
  paired across maps: the same splits for every map), mean and the paired difference from the shipped map with
  its standard error, and the mean held-out Brier score;
- ``genres``: leave one genre out (the ``sent_id`` prefix: answers, email, ...; fitted on the other four), the
  closest thing on dev to text of another kind; ECE and mean gap (accuracy - confidence) per held-out genre;
- ``reliability``: the shipped map's out-of-fold probabilities (each half fitted on the other) by confidence
  bin, sentence length, arc length (root apart) and the number of other heads with probability >= 0.1;
- ``noise_floor_by_words``: the ECE of labels drawn from the probabilities themselves (a calibrated predictor's
  ECE at this many words: all, half, 5,000 of them), 20 draws each.

Maps (every one after the head power fitted by the Brier score on the fitting part, as ``calibrate`` fits it):
``iso`` (shipped: isotonic knots, linear between blocks, ``engine.decode.isotonic``); ``cir`` (centred isotonic
regression, Oron & Flournoy 2017: block means joined linearly); ``arc:iso`` (one isotonic map per arc-length
bucket: root, 1, 2-3, 4-7, >= 8); ``arc:platt+iso`` (Platt slope on the log-odds with one intercept per
bucket, then isotonic); ``platt(arc,len)+iso`` and ``platt(arc,len,ent)+iso`` (also log sentence length and
the entropy of the word's head distribution); ``all-arcs`` (isotonic on every arc's probability >= 1e-3 against
"is the gold head", then each word's column renormalised to sum to 1). The cache (``--cache``, ``.npz``, no
pickle) keeps the parse for a second run; write it under /tmp.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # this checkout's engine

from scipy.optimize import isotonic_regression, minimize  # noqa: E402

from engine.cli import build_parser  # noqa: E402
from engine.cli_parse import load_parser, parse_tagged, resolve_tag_samples, tag_inputs  # noqa: E402
from engine.data.conllu_io import read_conllu  # noqa: E402
from engine.decode.calibration import minimise_power  # noqa: E402
from engine.decode.isotonic import check_knots, fit_knots  # noqa: E402
from engine.evaluation.metrics import calibration  # noqa: E402

ARC_EDGES = [0, 1, 2, 4, 8]  # buckets of |head - dependent|: root (0) | 1 | 2-3 | 4-7 | >= 8
LENGTH_EDGES = [11, 21, 31, 46]  # sentence length: <= 10 | 11-20 | 21-30 | 31-45 | > 45
Knots = tuple[np.ndarray, np.ndarray]
GROUP_NAMES = {"arc_bucket": {1: "root", 2: "1", 3: "2-3", 4: "4-7", 5: ">=8"},
               "sentence_length": {0: "<=10", 1: "11-20", 2: "21-30", 3: "31-45", 4: ">45"},
               "competitors": {3: ">=3"}}


def parse_words(model: str, data: str, cache: str | None) -> dict[str, np.ndarray]:
    """Per word of ``data``: its head column of the raw marginals (concatenated, ``offs``), chosen and gold head,
    sentence, position, sentence length, genre."""
    if cache and Path(cache).exists():
        with np.load(cache) as z:
            return {k: z[k] for k in z.files}
    args = build_parser().parse_args(["evaluate", "--model", model, "--data", data, "--calibration", "none"])
    _, parse = load_parser(args)
    resolve_tag_samples(args)
    gold = read_conllu(data)
    inputs = [s.copy() for s in gold] if args.pipeline.tagger is not None else gold
    # as the CLI tags them: a joint model's candidate tags too (tag_inputs)
    draws = tag_inputs(args, inputs, retag=True)[1] if args.pipeline.tagger is not None else [[] for _ in inputs]
    parsed = parse_tagged(args, parse, inputs, draws)
    genres = [next((c.split("=", 1)[1].strip() for c in g.lines if c.startswith("# sent_id")), "") for g in gold]
    words: dict[str, list] = {k: [] for k in ("cols", "offs", "chosen", "gold", "sent", "pos", "n", "genre")}
    words["offs"].append(0)
    for i, (p, g) in enumerate(zip(parsed, gold, strict=True)):
        for m in range(1, len(p.heads)):
            words["cols"].append(p.marginals[:, m])
            words["offs"].append(words["offs"][-1] + p.marginals.shape[0])
            for key, value in (("chosen", p.heads[m]), ("gold", g.heads[m]), ("sent", i), ("pos", m),
                               ("n", g.n), ("genre", genres[i].split("-")[0] if "-" in genres[i] else "")):
                words[key].append(value)
    out = {k: (np.concatenate(v) if k == "cols" else np.asarray(v)) for k, v in words.items()}
    if cache:
        np.savez_compressed(cache, **out)
    return out


class Words:
    """The parsed words and the maps fitted on a subset of them (``fit``: a boolean mask over words)."""

    def __init__(self, w: dict[str, np.ndarray]) -> None:
        self.cols, self.offs, self.chosen, self.sent = w["cols"], w["offs"], w["chosen"], w["sent"]
        self.n, self.genre, self.size = w["n"], w["genre"], len(w["chosen"])
        self.right = (w["chosen"] == w["gold"]).astype(np.float64)
        self.seg = np.repeat(np.arange(self.size), np.diff(self.offs))
        self.arc = np.where(self.chosen == 0, 0, np.abs(self.chosen - w["pos"]))
        self.arc_bucket = np.searchsorted(ARC_EDGES, self.arc, side="right")
        self.is_gold = np.zeros(len(self.cols), bool)
        self.is_gold[self.offs[:-1] + w["gold"]] = True
        with np.errstate(divide="ignore"):
            self.logs = np.where(self.cols > 0, np.log(np.where(self.cols > 0, self.cols, 1.0)), -np.inf)
        self._powered: dict[float, np.ndarray] = {}

    def powered_all(self, a: float) -> np.ndarray:
        """Every arc's probability after the power map ``p^a`` renormalised per word."""
        lw = self.logs * a
        top = np.maximum.reduceat(lw, self.offs[:-1])
        w = np.exp(lw - top[self.seg])
        return w / np.add.reduceat(w, self.offs[:-1])[self.seg]

    def powered(self, a: float) -> np.ndarray:
        if a not in self._powered:
            self._powered[a] = self.powered_all(a)[self.offs[:-1] + self.chosen]
        return self._powered[a]

    def power(self, fit: np.ndarray) -> float:
        return minimise_power(lambda a: float(((self.powered(a)[fit] - self.right[fit]) ** 2).mean()))

    def entropy(self, a: float) -> np.ndarray:
        p = self.powered_all(a)
        return -np.add.reduceat(np.where(p > 0, p * np.log(np.where(p > 0, p, 1.0)), 0.0), self.offs[:-1])

    def competitors(self, a: float) -> np.ndarray:
        """Other heads with probability >= 0.1 after the power map."""
        p = self.powered_all(a)
        return np.add.reduceat((p >= 0.1).astype(int), self.offs[:-1]) - (self.powered(a) >= 0.1)


def iso_knots(x: np.ndarray, y: np.ndarray) -> Knots:
    knots = check_knots(fit_knots(x, y))
    assert knots is not None
    return knots


def cir_knots(x: np.ndarray, y: np.ndarray) -> Knots:
    """Centred isotonic regression: each isotonic block's mean x with its value, joined linearly."""
    order = np.argsort(x, kind="stable")
    xs, fit = x[order], isotonic_regression(np.asarray(y, dtype=np.float64)[order]).x
    starts = np.flatnonzero(np.r_[True, np.diff(fit) != 0])
    ends = np.r_[starts[1:], len(fit)]
    return np.array([xs[a:b].mean() for a, b in zip(starts, ends, strict=True)]), fit[starts]


def logit(q: np.ndarray) -> np.ndarray:
    q = np.clip(q, 1e-9, 1 - 1e-9)
    return np.asarray(np.log(q) - np.log1p(-q))


def platt(x: np.ndarray, y: np.ndarray, fit: np.ndarray) -> np.ndarray:
    """Logistic map of the design ``x`` fitted on ``fit`` by the Brier score, applied to every row."""
    def loss(w: np.ndarray) -> float:
        return float(((1 / (1 + np.exp(-(x[fit] @ w))) - y[fit]) ** 2).mean())
    start = np.zeros(x.shape[1])
    start[0] = 1.0
    return np.asarray(1 / (1 + np.exp(-(x @ minimize(loss, start, method="L-BFGS-B").x))))


def maps(w: Words) -> dict[str, Callable[[np.ndarray], np.ndarray]]:
    """Each candidate: fit mask -> every word's calibrated chosen-head probability."""
    def then(knots: Callable[[np.ndarray, np.ndarray], Knots], p: np.ndarray, fit: np.ndarray) -> np.ndarray:
        return np.interp(p, *knots(p[fit], w.right[fit]))

    def per_bucket(fit: np.ndarray) -> np.ndarray:
        q, out = w.powered(w.power(fit)), np.empty(w.size)
        for b in np.unique(w.arc_bucket):
            s = w.arc_bucket == b
            out[s] = np.interp(q[s], *iso_knots(q[s & fit], w.right[s & fit]))
        return out

    def design(fit: np.ndarray, length: bool = False, entropy: bool = False) -> np.ndarray:
        a = w.power(fit)
        cols = [logit(w.powered(a))] + [(w.arc_bucket == b).astype(float) for b in np.unique(w.arc_bucket)]
        cols += [np.log(w.n)] if length else []
        cols += [w.entropy(a)] if entropy else []
        return np.column_stack(cols)

    def all_arcs(fit: np.ndarray) -> np.ndarray:
        p = w.powered_all(w.power(fit))
        use = p >= 1e-3
        g = np.where(use, np.interp(p, *iso_knots(p[use & fit[w.seg]], w.is_gold[use & fit[w.seg]])), p)
        return (g / np.add.reduceat(g, w.offs[:-1])[w.seg])[w.offs[:-1] + w.chosen]

    return {  # the shipped map first: every other is compared with it
        "iso (shipped)": lambda fit: then(iso_knots, w.powered(w.power(fit)), fit),
        "power": lambda fit: w.powered(w.power(fit)),
        "cir": lambda fit: then(cir_knots, w.powered(w.power(fit)), fit),
        "arc:iso": per_bucket,
        "arc:platt+iso": lambda fit: then(iso_knots, platt(design(fit), w.right, fit), fit),
        "platt(arc,len)+iso": lambda fit: then(iso_knots, platt(design(fit, True), w.right, fit), fit),
        "platt(arc,len,ent)+iso": lambda fit: then(iso_knots, platt(design(fit, True, True), w.right, fit), fit),
        "all-arcs": all_arcs,
    }


def ece(p: np.ndarray, y: np.ndarray) -> float:
    return calibration(p, y)[0]


def compare(w: Words, reps: int = 20) -> None:
    """The ``halves`` and ``genres`` lines (module docstring)."""
    rng = np.random.default_rng(7)
    splits = [(rng.random(w.sent.max() + 1) < 0.5)[w.sent] for _ in range(reps)]
    genres = [g for g in np.unique(w.genre) if g]
    genres = genres if len(genres) > 1 else []  # one genre (or none): nothing to leave out
    base: np.ndarray | None = None
    for name, fitted in maps(w).items():
        halves, brier = [], []
        for half in splits:
            for fit in (half, ~half):
                p = fitted(fit)
                halves.append(ece(p[~fit], w.right[~fit]))
                brier.append(float(((p[~fit] - w.right[~fit]) ** 2).mean()))
        h = np.array(halves)
        base = h if base is None else base
        diff = h - base
        by_genre = {}
        for g in genres:
            held = w.genre == g
            p = fitted(~held)
            by_genre[g] = {"ece": round(ece(p[held], w.right[held]), 4),
                           "gap": round(float(w.right[held].mean() - p[held].mean()), 4)}
        print(json.dumps({"map": name, "halves_mean_ece": round(float(h.mean()), 4),
                          "diff_from_shipped": round(float(diff.mean()), 4),
                          "diff_se": round(float(diff.std(ddof=1) / np.sqrt(len(diff))), 4),
                          "halves_mean_brier": round(float(np.mean(brier)), 5),
                          "genres_mean_ece": round(float(np.mean([v["ece"] for v in by_genre.values()])), 4)
                          if by_genre else None, "genres": by_genre}))


def reliability(w: Words) -> None:
    """The ``reliability`` and ``noise_floor`` lines (module docstring)."""
    half = (np.random.default_rng(0).random(w.sent.max() + 1) < 0.5)[w.sent]
    shipped, p = maps(w)["iso (shipped)"], np.empty(w.size)
    for fit in (half, ~half):
        p[~fit] = shipped(fit)[~fit]
    a = w.power(np.ones(w.size, bool))
    groups = {"bin": np.minimum((p * 15).astype(int), 14), "sentence_length": np.searchsorted(LENGTH_EDGES, w.n,
              side="right"), "arc_bucket": w.arc_bucket, "competitors": np.minimum(w.competitors(a), 3)}
    for name, group in groups.items():
        for g in np.unique(group):
            s = group == g
            print(json.dumps({"by": name, "group": GROUP_NAMES.get(name, {}).get(int(g), int(g)),
                              "words": int(s.sum()), "accuracy": round(float(w.right[s].mean()), 4),
                              "confidence": round(float(p[s].mean()), 4), "ece": round(ece(p[s], w.right[s]), 4)}))
    rng = np.random.default_rng(1)
    floor = {size: round(float(np.mean([ece(p[:size], rng.random(size) < p[:size]) for _ in range(20)])), 4)
             for size in (w.size, w.size // 2, min(5000, w.size))}
    print(json.dumps({"out_of_fold_ece": round(ece(p, w.right), 4), "noise_floor_by_words": floor}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="models/en_ewt")
    ap.add_argument("--data", required=True)
    ap.add_argument("--cache", help="an .npz under /tmp keeping the parse for the next run")
    a = ap.parse_args()
    w = Words(parse_words(a.model, a.data, a.cache))
    reliability(w)
    compare(w)


if __name__ == "__main__":
    main()
