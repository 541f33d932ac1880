"""Calibrated head probabilities: one power map on every word's head distribution, fitted on dev data.

BP's beliefs, and the marginals of a parse over tag-averaged potentials, are overconfident (EWT dev, the
shipped pipeline with ``--tag-average potentials``: expected calibration error of the chosen head's
probability 0.054). A word's head distribution ``p(h | m)`` is mapped to

    p_a(h | m) = p(h | m)^a / sum_h' p(h' | m)^a,

one exponent ``a`` per model (``a < 1`` softens, ``a = 1`` is the identity). Each word's head probabilities
still sum to 1, their order is unchanged, and the tree is decoded before the map, so the MBR tree and the
attachment scores do not move. ``a`` is fitted on a development set by the Brier score of the chosen heads'
probabilities against whether they are right (a proper scoring rule; the log loss is dominated by the few
confident errors and softens too far), and stored in the model's manifest as ``inference.head_power``
(``python -m engine calibrate``); every parse of the CLI and the service applies it unless told
``--calibration none``. Platt-style temperature scaling of a classifier's logits (Guo et al. 2017) is the
same map on log-probabilities.

One power cannot straighten a reliability curve that is underconfident in the middle and overconfident at the
top (the shipped pipeline's, EWT dev); ``calibrate`` follows the power map with a monotone map of the chosen
head's probability, isotonic or Platt, whichever is better on held-out halves of dev
(``engine.decode.isotonic``, ``inference.head_isotonic``), which keeps each word's head
distribution summing to 1 and the tree unchanged. On EWT dev, fitted on one half of the sentences and measured
on the other (4 random splits, ``bench/head_calibration_maps.py``), the head ECE is 0.0196 with the power
alone, 0.0145 with a Platt map (slope and intercept on the log-odds) after it, 0.0127 with the isotonic map
after it (15 equal-count bins: 0.0103, but one of 15 values per word; docs/results/confidence.md).

Labels and trees (``label_power``, ``tree_power``, fitted the same way by ``calibrate``): a parse keeps only
the chosen label's probability ``q`` (the labeller's distribution is not carried), so labels get the binary
form of the same map, ``q^b / (q^b + (1 - q)^b)`` (log-odds times ``b``, Platt scaling without intercept),
fitted by the Brier score of ``q`` against "label right" on the words whose head is right (a label's
probability is conditional on its arc). A sentence's ``p_tree`` (the probability that the whole MBR tree's
heads are right) is exact for a parse that has the model's exact tree distribution (first order, exact
inference, one tagging: ``exp(score(tree) - log Z)``, Matrix-Tree; the raw model's, the calibration does not
touch it); otherwise it is estimated as ``(prod_m p(head of m))^c`` over the head probabilities after the
power map (before the isotonic stage, ``engine.decode.isotonic``: on EWT dev, p_tree ECE 0.020 against 0.030),
``c`` fitted by the Brier score against exact match (the product alone treats the words' errors as
independent and is too low). ``expected_errors`` is ``sum_m 1 - p(head of m)``.

Tags (``upos_power``): a joint parse (``--tag-average joint``, ``engine.decode.joint_tags``) carries each word's
UPOS distribution from the tag beliefs (``diagnostics["upos_marginals"]``); it gets the power map of the
heads, ``p(t)^d / sum_t' p(t')^d`` per word, and ``upos_prob`` is the chosen UPOS's entry after it, so the
reported distribution and probability stay one. ``d`` is fitted by the Brier score of the chosen UPOS's
probability against "UPOS right". Tags from the tagger alone (``marginals``, ``potentials``) are reported as
the tagger gives them: its marginals are calibrated as they are (EWT dev UPOS ECE 0.008), and ``calibrate``
fits ``upos_power`` only on joint parses.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from engine.decode.isotonic import KEY, knots_of, remap_chosen
from engine.results import ParsedSentence

DEFAULT_POWER = 1.0
POWER_BOUNDS = (0.05, 20.0)
# the manifest's ``inference`` keys of the calibration maps; each defaults to DEFAULT_POWER within POWER_BOUNDS
POWER_KEYS = ("head_power", "label_power", "tree_power", "upos_power")


def check_power(value: object, name: str = "head_power") -> float:
    """``value`` as a power (``name``, for the message) if it is a number within ``POWER_BOUNDS``, else
    ValueError."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not \
            POWER_BOUNDS[0] <= float(value) <= POWER_BOUNDS[1]:
        raise ValueError(f"{name} must be a number from {POWER_BOUNDS[0]} to {POWER_BOUNDS[1]}, got {value!r}")
    return float(value)


def manifest_powers(inference: dict | None) -> dict[str, float]:
    """The calibration powers of a manifest's ``inference`` block (``POWER_KEYS``; DEFAULT_POWER for the ones
    it does not give), checked."""
    inference = inference or {}
    return {key: check_power(inference.get(key, DEFAULT_POWER), key) for key in POWER_KEYS}


def manifest_calibration(inference: dict | None) -> dict[str, Any]:
    """``manifest_powers`` and the isotonic stage of the head map (``engine.decode.isotonic``: its knots, or
    None): the arguments of ``calibrated_all``."""
    return {**manifest_powers(inference), KEY: knots_of(inference)}


def calibrated_marginals(marginals: np.ndarray, power: float) -> np.ndarray:
    """(n+1, n+1) arc marginals with column ``m`` (a word's head distribution) mapped to ``p^power``
    renormalised (``powered``; column 0, the root's, is left as it is)."""
    if power == 1.0:
        return marginals
    out = np.array(marginals, dtype=np.float64, copy=True)
    out[:, 1:] = powered(out[:, 1:], power, axis=0)
    return out


def powered(probs: np.ndarray, power: float, axis: int) -> np.ndarray:
    """Distributions along ``axis`` mapped to ``p^power`` renormalised; computed in log space, zeros stay zero
    (an all-zero distribution stays as it is)."""
    p = np.asarray(probs, dtype=np.float64)
    with np.errstate(divide="ignore"):
        logs = np.where(p > 0, np.log(np.where(p > 0, p, 1.0)) * power, -np.inf)
    top = logs.max(axis=axis, initial=-np.inf, keepdims=True)
    weights = np.exp(logs - np.where(np.isfinite(top), top, 0.0))
    total = weights.sum(axis=axis, keepdims=True)
    return np.where(total > 0, weights / np.where(total > 0, total, 1.0), p)


def calibrated_top(probs: np.ndarray, power: float) -> np.ndarray:
    """Chosen-class probabilities ``q`` mapped to ``q^power / (q^power + (1 - q)^power)`` (0 and 1 stay)."""
    q = np.asarray(probs, dtype=np.float64)
    if power == 1.0 or q.size == 0:
        return q
    with np.errstate(divide="ignore"):
        logit = np.log(q) - np.log1p(-q)
    return np.asarray(1.0 / (1.0 + np.exp(-power * logit)))


def calibrated_all(parsed: Sequence[ParsedSentence], powers: dict[str, Any] | None) -> list[ParsedSentence]:
    """``[calibrated(p, ...) for p in parsed]`` with a model's calibration (``manifest_calibration``; None: none,
    every power 1), computed over all the parses at once: the tag and label maps on every word together, the
    head map on the stacked marginals of the sentences of each length. Each value is computed by the same
    element-wise operations and reductions along the same rows as ``calibrated`` (equal to it, tested), with
    a few numpy calls per batch instead of a dozen per sentence (0.36 s of EWT dev's 2,001 sentences before)."""
    given = powers or {}
    head, label, tree, upos = (float(given.get(key, DEFAULT_POWER)) for key in POWER_KEYS)
    knots = given.get(KEY)
    todo = [p for p in parsed if p.marginals is not None]
    diags: list[dict[str, Any]] = [dict(p.diagnostics or {}) for p in todo]
    fields: list[dict[str, Any]] = [{} for _ in todo]
    _tags_all(todo, upos, diags, fields)
    if head != 1.0 or knots is not None:
        _heads_all(todo, head, knots, diags, fields)
    if label != 1.0:
        _labels_all(todo, label, diags, fields)
    done = []
    for p, f, d in zip(todo, fields, diags, strict=True):
        out = replace(p, **f, diagnostics=d)
        p_tree, source = tree_confidence(out, tree)
        errors = float((1.0 - np.asarray(out.head_probs, dtype=np.float64)).sum())
        d.update({"p_tree": p_tree, "p_tree_source": source, "expected_errors": errors})  # out's own dict
        done.append(out)
    kept = iter(done)
    return [next(kept) if p.marginals is not None else p for p in parsed]


def _split(values: np.ndarray, sizes: list[int]) -> list[np.ndarray]:
    return np.split(values, np.cumsum(sizes)[:-1]) if sizes else []


def _tags_all(parsed: list[ParsedSentence], power: float, diags: list[dict[str, Any]],
              fields: list[dict[str, Any]]) -> None:
    """``calibrated_tags`` of every joint parse: one ``powered`` over all their words' UPOS distributions."""
    if power == 1.0:
        return
    which = [k for k, p in enumerate(parsed) if p.upos is not None and diags[k].get("upos_marginals") is not None]
    for labels in {tuple(diags[k]["upos_marginals"][0]) for k in which}:  # one model: one label set
        group = [k for k in which if tuple(diags[k]["upos_marginals"][0]) == labels]
        dist = powered(np.concatenate([np.asarray(diags[k]["upos_marginals"][1], dtype=np.float64) for k in group]),
                       power, axis=1)
        column = {tag: c for c, tag in enumerate(labels)}
        chosen = [column[t] for k in group for t in parsed[k].upos or []]
        sizes = [len(parsed[k].upos or []) for k in group]
        probs = dist[np.arange(len(dist)), chosen]
        for k, d, q in zip(group, _split(dist, sizes), _split(probs, sizes), strict=True):
            diags[k].update({"upos_marginals": (diags[k]["upos_marginals"][0], d), "upos_power": power,
                             "model_upos_probs": parsed[k].upos_probs})
            fields[k]["upos_probs"] = q


def _heads_all(parsed: list[ParsedSentence], power: float, knots: tuple[np.ndarray, np.ndarray] | None,
               diags: list[dict[str, Any]], fields: list[dict[str, Any]]) -> None:
    """``calibrated``'s head map (the power, then the isotonic stage) of the sentences of each length at once:
    ``powered`` down the stacked columns, ``remap_chosen``'s arithmetic on the stacked chosen heads."""
    by_length: dict[int, list[int]] = {}
    for k, p in enumerate(parsed):
        by_length.setdefault(len(p.heads), []).append(k)
    for n1, group in by_length.items():
        stack = np.array([parsed[k].marginals for k in group], dtype=np.float64)
        if power != 1.0:
            stack[:, :, 1:] = powered(stack[:, :, 1:], power, axis=1)
        b = np.arange(len(group))[:, None]
        m = np.arange(1, n1)[None, :]
        heads = np.array([parsed[k].heads[1:] for k in group], dtype=np.int64).reshape(len(group), n1 - 1)
        chosen = stack[b, heads, m]
        if knots is not None:
            g = np.interp(chosen, *knots)
            rest = 1.0 - chosen
            movable = rest > 1e-12
            g = np.where(movable, g, chosen)
            stack[:, :, 1:] *= np.where(movable, (1.0 - g) / np.where(movable, rest, 1.0), 1.0)[:, None, :]
            stack[b, heads, m] = g
        for j, k in enumerate(group):
            diags[k].update({"head_power": power, "model_head_probs": parsed[k].head_probs,
                             "power_head_probs": chosen[j]})
            fields[k].update(marginals=stack[j], head_probs=stack[j][heads[j], m[0]])


def _labels_all(parsed: list[ParsedSentence], power: float, diags: list[dict[str, Any]],
                fields: list[dict[str, Any]]) -> None:
    """``calibrated_top`` of every parse's label probabilities (the parses that have some) at once."""
    which = [k for k, p in enumerate(parsed) if len(p.label_probs)]
    if not which:
        return
    sizes = [len(parsed[k].label_probs) for k in which]
    mapped = calibrated_top(np.concatenate([np.asarray(parsed[k].label_probs, dtype=np.float64) for k in which]),
                            power)
    for k, q in zip(which, _split(mapped, sizes), strict=True):
        diags[k]["label_power"] = power
        fields[k]["label_probs"] = q


def model_probabilities(parsed: ParsedSentence) -> tuple[np.ndarray, np.ndarray]:
    """The chosen heads' and labels' probabilities of a ``calibrated`` parse as the model gave them, before
    calibration: the heads' as ``calibrated`` recorded them (``diagnostics["model_head_probs"]``), the labels'
    by inverting the map with the recorded ``label_power`` b (``calibrated_top`` with 1/b)."""
    d = parsed.diagnostics or {}
    heads = np.asarray(d.get("model_head_probs", parsed.head_probs), dtype=np.float64)
    labels = np.asarray(parsed.label_probs, dtype=np.float64)
    if float(d.get("label_power", 1.0)) != 1.0:
        labels = calibrated_top(labels, 1.0 / float(d["label_power"]))
    return heads, labels


def confidence_comments(parsed: ParsedSentence) -> list[str]:
    """CoNLL-U comments ``# p_tree``, ``# p_tree_source``, ``# expected_errors`` of a ``calibrated`` parse."""
    d = parsed.diagnostics or {}
    return [f"# p_tree = {float(d.get('p_tree', 0.0)):.4f}", f"# p_tree_source = {d.get('p_tree_source', 'estimate')}",
            f"# expected_errors = {float(d.get('expected_errors', 0.0)):.4f}"]


def power_head_probs(parsed: ParsedSentence) -> np.ndarray:
    """The chosen heads' probabilities after the power map, before the isotonic stage (what ``p_tree`` is
    estimated from: their product predicts exact match better on dev than the isotonic values' does)."""
    d = parsed.diagnostics or {}
    return np.asarray(d.get("power_head_probs", parsed.head_probs), dtype=np.float64)


def tree_confidence(parsed: ParsedSentence, tree_power: float) -> tuple[float, str]:
    """``(p_tree, source)``: the probability that ``parsed``'s tree is right, ``"exact"`` under the model's
    exact tree distribution, else ``"estimate"`` from its head probabilities (module docstring)."""
    dist = parsed.distribution
    if dist is not None and dist.source == "exact" and parsed.log_partition is not None:
        return float(np.exp(min(dist.log_prob(parsed.heads), 0.0))), "exact"
    probs = power_head_probs(parsed)
    with np.errstate(divide="ignore"):
        log_p = float(np.log(probs).sum())
    return float(np.exp(tree_power * log_p)) if np.isfinite(log_p) else 0.0, "estimate"


def calibrated_tags(parsed: ParsedSentence, power: float) -> ParsedSentence:
    """A joint parse's UPOS distributions mapped to ``p^power`` renormalised per word and its ``upos_probs`` read
    from them (module docstring); any other parse as it is."""
    found = (parsed.diagnostics or {}).get("upos_marginals")
    if power == 1.0 or parsed.upos is None or found is None:
        return parsed
    labels, dist = found
    dist = powered(dist, power, axis=1)
    column = {tag: k for k, tag in enumerate(labels)}
    probs = dist[np.arange(len(dist)), [column[t] for t in parsed.upos]]
    diagnostics = {**(parsed.diagnostics or {}), "upos_marginals": (labels, dist), "upos_power": power,
                   "model_upos_probs": parsed.upos_probs}
    return replace(parsed, upos_probs=probs, diagnostics=diagnostics)


def calibrated(parsed: ParsedSentence, power: float, label_power: float = DEFAULT_POWER,
               tree_power: float = DEFAULT_POWER,
               head_knots: tuple[np.ndarray, np.ndarray] | None = None,
               upos_power: float = DEFAULT_POWER) -> ParsedSentence:
    """``parsed`` with calibrated marginals (the power map, then the isotonic stage when ``head_knots`` are
    given: ``engine.decode.isotonic``), head, label and (joint parses) tag probabilities (its tree, labels and
    tags as they are) and its sentence confidence in ``diagnostics`` (``p_tree``, ``p_tree_source``,
    ``expected_errors``; the raw head probabilities as ``model_head_probs`` when they were mapped)."""
    if parsed.marginals is None:
        return parsed
    out = calibrated_tags(parsed, upos_power)
    if power != 1.0 or head_knots is not None:
        marginals = calibrated_marginals(parsed.marginals, power)
        m = np.arange(1, len(parsed.heads))
        diagnostics = {**(out.diagnostics or {}), "head_power": power, "model_head_probs": parsed.head_probs,
                       "power_head_probs": marginals[parsed.heads[1:], m]}
        if head_knots is not None:
            marginals = remap_chosen(marginals, parsed.heads, head_knots)
        out = replace(out, marginals=marginals, head_probs=marginals[parsed.heads[1:], m], diagnostics=diagnostics)
    if label_power != 1.0 and len(out.label_probs):
        out = replace(out, label_probs=calibrated_top(out.label_probs, label_power),
                      diagnostics={**(out.diagnostics or {}), "label_power": label_power})
    p_tree, source = tree_confidence(out, tree_power)
    errors = float((1.0 - np.asarray(out.head_probs, dtype=np.float64)).sum())
    sentence = {"p_tree": p_tree, "p_tree_source": source, "expected_errors": errors}
    return replace(out, diagnostics={**(out.diagnostics or {}), **sentence})


def chosen_head_brier(parses: Sequence[ParsedSentence], gold_heads: Sequence[np.ndarray], power: float) -> float:
    """Mean squared difference between each word's calibrated chosen-head probability and 1 if that head is
    right, else 0."""
    return ChosenHeads(parses, gold_heads).brier(power)


class ChosenHeads:
    """Every word's head distribution (column ``m`` of its sentence's marginals) laid end to end once, with its
    chosen head and whether that head is right, so that ``brier(a)`` maps all of them to ``p^a`` renormalised
    (``calibrated_marginals``) in a few array operations: ``fit_power`` tries about 57 powers, and one
    ``calibrated`` per sentence and power was most of ``calibrate``'s fit. Parses without marginals keep their
    head probabilities at every power, as ``calibrated`` leaves them."""

    def __init__(self, parses: Sequence[ParsedSentence], gold_heads: Sequence[np.ndarray]) -> None:
        logs, lengths, chosen, reported, right, mapped = [], [], [], [], [], []
        offset = 0
        for p, gold in zip(parses, gold_heads, strict=True):
            heads = np.asarray(p.heads[1:])
            right.append(heads == np.asarray(gold[1:]))
            reported.append(np.asarray(p.head_probs, dtype=np.float64))
            mapped.append(np.full(len(heads), p.marginals is not None))
            if p.marginals is None or not len(heads):
                continue
            columns = np.asarray(p.marginals, dtype=np.float64)[:, 1:].T  # row m - 1: word m's heads
            with np.errstate(divide="ignore"):
                logs.append(np.where(columns > 0, np.log(np.where(columns > 0, columns, 1.0)), -np.inf).ravel())
            width = columns.shape[1]
            lengths.append(np.full(len(heads), width))
            chosen.append(offset + np.arange(len(heads)) * width + heads)
            offset += columns.size
        self.logs = np.concatenate(logs) if logs else np.zeros(0)
        self.lengths = np.concatenate(lengths) if lengths else np.zeros(0, dtype=np.int64)
        self.starts = np.concatenate([[0], np.cumsum(self.lengths)[:-1]]).astype(np.int64)
        self.chosen = np.concatenate(chosen) if chosen else np.zeros(0, dtype=np.int64)
        self.reported = np.concatenate(reported) if reported else np.zeros(0)
        self.right = np.concatenate(right) if right else np.zeros(0, dtype=bool)
        self.mapped = np.concatenate(mapped) if mapped else np.zeros(0, dtype=bool)

    def probabilities(self, power: float) -> np.ndarray:
        """The chosen heads' probabilities after the power map, in word order (``calibrated(p, power)``'s)."""
        if power == 1.0 or not len(self.chosen):
            return self.reported
        scaled = self.logs * power
        top = np.maximum.reduceat(scaled, self.starts)
        top = np.where(np.isfinite(top), top, 0.0)
        weights = np.exp(scaled - np.repeat(top, self.lengths))
        total = np.add.reduceat(weights, self.starts)
        raw = np.exp(self.logs[self.chosen])
        out = self.reported.copy()
        out[self.mapped] = np.where(total > 0, weights[self.chosen] / np.where(total > 0, total, 1.0), raw)
        return out

    def brier(self, power: float) -> float:
        """``chosen_head_brier`` at ``power``."""
        return float(((self.probabilities(power) - self.right) ** 2).sum()) / max(len(self.right), 1)


def fit_power(parses: Sequence[ParsedSentence], gold_heads: Sequence[np.ndarray]) -> float:
    """The head power minimising ``chosen_head_brier`` on these parses (``minimise_power``)."""
    return minimise_power(ChosenHeads(parses, gold_heads).brier)


def fit_label_power(label_probs: np.ndarray, label_right: np.ndarray) -> float:
    """The label power minimising the Brier score of ``calibrated_top(label_probs)`` against ``label_right``
    (the words whose head is right, module docstring)."""
    q, y = np.asarray(label_probs, dtype=np.float64), np.asarray(label_right, dtype=np.float64)
    return minimise_power(lambda b: float(((calibrated_top(q, b) - y) ** 2).mean()) if len(y) else 0.0)


def fit_tree_power(log_products: np.ndarray, exact_match: np.ndarray) -> float:
    """The tree power ``c`` minimising the Brier score of ``exp(c * log_products)`` (each sentence's log product
    of calibrated head probabilities) against ``exact_match``."""
    x, y = np.asarray(log_products, dtype=np.float64), np.asarray(exact_match, dtype=np.float64)
    return minimise_power(lambda c: float(((np.exp(c * x) - y) ** 2).mean()) if len(y) else 0.0)


def minimise_power(loss: Callable[[float], float]) -> float:
    """The power in ``POWER_BOUNDS`` minimising ``loss``: a grid in log space, then golden-section search
    around its best point (the losses here are smooth and, in practice, unimodal); rounded to 4 decimals."""
    lo, hi = np.log(POWER_BOUNDS[0]), np.log(POWER_BOUNDS[1])
    grid = np.linspace(lo, hi, 25)
    losses = [loss(float(np.exp(x))) for x in grid]
    best = int(np.argmin(losses))
    a, b = grid[max(best - 1, 0)], grid[min(best + 1, len(grid) - 1)]
    ratio = (np.sqrt(5.0) - 1.0) / 2.0
    c, d = b - ratio * (b - a), a + ratio * (b - a)
    fc, fd = (loss(float(np.exp(x))) for x in (c, d))
    for _ in range(30):
        if fc < fd:
            b, d, fd = d, c, fc
            c = b - ratio * (b - a)
            fc = loss(float(np.exp(c)))
        else:
            a, c, fc = c, d, fd
            d = a + ratio * (b - a)
            fd = loss(float(np.exp(d)))
    return float(round(np.exp((a + b) / 2.0), 4))


def fit_label_and_tree_powers(parses: Sequence[ParsedSentence], gold: Sequence[object]) -> dict[str, float]:
    """``label_power`` and ``tree_power`` fitted on ``parses`` (heads already calibrated) against the ``gold``
    sentences (their ``heads`` and ``deprels``): labels on the words whose head is right, the tree power on
    the sentences whose ``p_tree`` is an estimate (1 when there are none)."""
    label_q, label_y, logs, exact = [], [], [], []
    for p, g in zip(parses, gold, strict=True):
        right = np.asarray(p.heads[1:]) == np.asarray(g.heads[1:])  # type: ignore[attr-defined]
        if len(p.label_probs):
            same = np.array([a.split(":")[0] == b.split(":")[0]
                             for a, b in zip(p.deprels, g.deprels, strict=True)])  # type: ignore[attr-defined]
            label_q.append(np.asarray(p.label_probs)[right])
            label_y.append(same[right])
        if tree_confidence(p, DEFAULT_POWER)[1] == "estimate":
            with np.errstate(divide="ignore"):
                logs.append(float(np.log(power_head_probs(p)).sum()))
            exact.append(bool(right.all()))
    label = fit_label_power(np.concatenate(label_q), np.concatenate(label_y)) if label_q else DEFAULT_POWER
    finite = np.isfinite(logs)
    tree = fit_tree_power(np.asarray(logs)[finite], np.asarray(exact)[finite]) if finite.any() else DEFAULT_POWER
    return {"label_power": label, "tree_power": tree}


def fit_upos_power(parses: Sequence[ParsedSentence], gold: Sequence[object]) -> float | None:
    """The tag power minimising the Brier score of the joint parses' chosen UPOS probabilities after
    ``calibrated_tags`` against the ``gold`` sentences' UPOS; None when no parse has joint tags."""
    joint = [(p, g) for p, g in zip(parses, gold, strict=True)
             if p.upos is not None and "upos_marginals" in (p.diagnostics or {})]
    if not joint:
        return None
    right = np.concatenate([np.asarray(p.upos) == np.asarray(g.upos) for p, g in joint])  # type: ignore[attr-defined]
    found = [(p.diagnostics or {})["upos_marginals"] for p, _ in joint]
    if len({np.shape(dist)[1] for _, dist in found}) == 1:  # one tag set: every word's distribution in one array
        dists = np.concatenate([np.asarray(dist, dtype=np.float64) for _, dist in found])
        columns = np.concatenate([[{tag: k for k, tag in enumerate(labels)}[t] for t in p.upos or []]
                                  for (labels, _), (p, _) in zip(found, joint, strict=True)]).astype(np.int64)
        rows = np.arange(len(dists))
        reported = dists[rows, columns] if any(p.upos_probs is None for p, _ in joint) else \
            np.concatenate([np.asarray(p.upos_probs, dtype=np.float64) for p, _ in joint])  # as at power 1

        def brier(d: float) -> float:
            probs = reported if d == 1.0 else powered(dists, d, axis=1)[rows, columns]
            return float(((probs - right) ** 2).mean())
    else:
        def brier(d: float) -> float:
            probs = np.concatenate([np.asarray(calibrated_tags(p, d).upos_probs) for p, _ in joint])
            return float(((probs - right) ** 2).mean())
    return minimise_power(brier)
