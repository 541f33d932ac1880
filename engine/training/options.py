"""The training options (``TrainOptions``), each declared once: name, type, default, bounds and help text.

Every field of ``TrainOptions`` carries an ``Option`` in its metadata. From that one declaration come

- the validation of ``TrainOptions`` itself (types, choices and bounds; the checks that tie options together
  are written out in ``TrainOptions.__post_init__``);
- the flags of ``python -m engine train`` (``add_arguments`` / ``from_arguments``): ``--batch-size`` for
  ``batch_size``, ``--no-average`` for a flag that is on by default, comma-separated values for the tuples;
- the fields of the service's training-job config (``service.jobs.config.JobConfig``) for the options with
  ``job=True``; the service narrows some bounds with its own limits (``service.settings.JOB_LIMITS``).

The CLI flags and the job's JSON field names are contracts: a field's name is both (``tests/engine/test_cli.py``,
``tests/service/test_service_jobs.py``).
"""

from __future__ import annotations

import argparse
import math
import typing
from dataclasses import dataclass, field, fields
from functools import cache
from typing import Any

from engine.pipeline import MAX_TAG_SAMPLES
from engine.training.cluster import CLUSTER_SPEC

FACTOR_FAMILIES = ("grand", "sib", "childseq", "nocross")
COMPONENTS = ("tokenizer", "tagger", "parser", "labeler", "lemmatizer", "morph")
TREES = ("nonprojective", "projective")
ROOTS = ("single", "multi")
OBJECTIVES = ("cll", "l2", "ar", "l2+ar")  # engine.training.erma.OBJECTIVES
# train-joint (engine.training.joint_finetune): where its weights start, and its objectives with the name the
# written manifest gives each
JOINT_STARTS = ("parser", "pruner")
JOINT_OBJECTIVES = {"joint": "joint-surrogate-cll", "joint-l2": "joint-l2 (approximation-aware)",
                    "surrogate": "surrogate-cll (control)"}
# Copies of each training sentence under tags drawn from its jackknife fold tagger's posterior that the labeller
# also trains on, by default (when the tagger and the labeller are trained): chosen on EWT dev (README, *Labels
# under tag uncertainty*).
LABELER_TAG_SAMPLES = 1
MAX_LABELER_TAG_SAMPLES = 16


class TrainOptionsError(ValueError):
    """Training options that cannot work together, explained."""


@dataclass(frozen=True)
class Option:
    """How one option is described and bounded. ``choices``: the allowed values (of each item, for a tuple);
    ``ge``/``gt``/``le``: bounds of a number; ``min_items``: of a tuple; ``metavar``: the CLI's name for the
    value; ``cli_unset``: a CLI value meaning None (unset); ``job``: a field of training jobs too."""

    help: str
    choices: tuple[Any, ...] | None = None
    ge: float | None = None
    gt: float | None = None
    le: float | None = None
    min_items: int | None = None
    metavar: str | None = None
    cli_unset: Any = None
    job: bool = True


def option(default: Any, help: str, **spec: Any) -> Any:
    """A ``TrainOptions`` field: its default and its ``Option``."""
    return field(default=default, metadata={"option": Option(help, **spec)})


@dataclass(frozen=True)
class TrainOptions:
    """Everything that decides how a model is trained (the CLI flags of ``train``), validated once."""

    tree: str = option("nonprojective", "tree space: non-projective (Matrix-Tree) or projective (Eisner); "
                       "projective models skip non-projective training trees", choices=TREES)
    root: str = option("single", "exactly one word attached to ROOT, or any number", choices=ROOTS)
    epochs: int = option(8, "training epochs; the epoch with the best dev score is kept", ge=1)
    batch_size: int = option(32, "sentences per mini-batch", ge=1)
    learning_rate: float | None = option(None, "AdaGrad step size (default 0.2 for order 1, 0.05 for order 2)",
                                         gt=0)
    l2: float = option(10.0, "L2 regularisation strength", ge=0)
    dim: int = option(1 << 22, "hashed feature buckets for first-order features (memory grows linearly: "
                      "several float64 arrays of this size)", ge=1)
    seed: int = option(0, "random seed of the batch order", ge=0)
    seeds: int = option(1, "train the parser N times (seeds seed .. seed + N - 1, each with its best epoch on dev) "
                        "and keep the mean of their weights; N times the parser's training time (one pruner for "
                        "all)", ge=1, metavar="N")
    average: bool = option(True, "average each epoch's iterates (otherwise keep the last one)")
    max_sentences: int | None = option(None, "train on the first N sentences only", ge=1, cli_unset=0)
    name: str | None = option(None, "model name recorded in the manifest (default: the directory name)",
                              job=False)
    order: int = option(1, "1: first-order model trained by conditional log-likelihood with exact inference; "
                        "2: higher-order factors trained under belief propagation (a first-order pruner is "
                        "trained first unless given)", choices=(1, 2))
    hidden_clusters: int = option(1, "latent edge clusters per arc (Smith & Smith 2007 §5.1), with the cll "
                                  "objective: each arc's score is log sum_z exp(theta . f(h, m, z)) over K weight "
                                  "blocks (K times the first-order weights; order 2: inside the LINK factors, "
                                  "trained by surrogate CLL, the pruner without clusters); 1: none (today's "
                                  "model)", ge=1, le=64, metavar="K", job=False)
    labels_in_graph: bool = option(False, "order 2: label-aware LINK factors (Smith & Eisner 2008 §3.1, link roles): "
                                   "every link also ranges over the labels, trained with the parser by surrogate "
                                   "CLL of the labelled tree (objective cll) or by the L2 distance of the link and "
                                   "role beliefs through BP (objective l2); the tree's labels and their "
                                   "probabilities come from the same role model (a labeler component is then not "
                                   "used)", job=False)
    factors: tuple[str, ...] = option(("grand", "sib"), "higher-order factor families (order 2): grand "
                                      "(grandparent), sib (siblings), childseq (child sequence), nocross (no "
                                      "crossing arcs)", choices=FACTOR_FAMILIES)
    bp_iterations: int = option(3, "belief-propagation iterations per sentence during training (order 2)", ge=1)
    second_dim: int = option(1 << 21, "hashed feature buckets for the higher-order features (order 2)", ge=1)
    components: tuple[str, ...] = option(COMPONENTS, "what to train: the parser always; tokenizer (raw text), "
                                         "tagger (UPOS/XPOS; the parser and labeler then train on jackknifed "
                                         "predicted tags), labeler (log-linear DEPREL; else count-based labels), "
                                         "lemmatizer (LEMMA) and morph (FEATS), both needing the tagger",
                                         choices=COMPONENTS, min_items=1)
    labeler_tag_samples: int | None = option(
        None, "the labeler also trains on K copies of each training sentence under tag sequences drawn from its "
        "jackknife fold tagger's posterior, as the labels are averaged over tag samples at parse time (default: "
        f"{LABELER_TAG_SAMPLES} with the tagger and labeler components, else 0)", ge=0, le=MAX_LABELER_TAG_SAMPLES,
        metavar="K")
    folds: int = option(5, "jackknifing folds for predicted training tags and the labeler's first-stage labels",
                        ge=2, job=False)
    objective: str = option("cll", "cll (exact, or surrogate under BP), or approximation-aware training through "
                            "the BP iterations (order 2) or exact marginals (order 1): l2 = L2 distance of "
                            "beliefs to the gold tree, ar = annealed risk, l2+ar = L2 then annealed risk "
                            "(Gormley et al. 2015)", choices=OBJECTIVES, job=False)
    anneal: tuple[float, float] = option((1.0, 0.1), "annealed-risk temperature, linear from T0 to T1 over the AR "
                                         "steps", gt=0, metavar="T0,T1", job=False)
    cluster: str | None = option(None, "train on a Dask cluster: local:N (a LocalCluster of N worker processes) or "
                                 "tcp://HOST:8786 (an existing scheduler); the --seeds parsers, jackknife folds and "
                                 "labeler folds run as its tasks (the same model), a single first-order CLL run "
                                 "data-parallel; needs the cluster extra (docs/results/cluster.md)", metavar="SPEC",
                                 job=False)
    parameter_mixing: bool = option(False, "with --cluster: a first-order CLL run by iterative parameter mixing "
                                    "(McDonald, Hall & Mann 2010) instead of exact data parallelism: each worker "
                                    "trains an epoch on its shard of the sentences and the weights are averaged "
                                    "once per epoch; faster on a slow network or few cores, other weights than "
                                    "one process's (docs/results/cluster.md)", job=False)
    tag_samples: int = option(0, "the model's default number of tag samples (inference.tag_samples) for parse, "
                              "evaluate and the service: marginals of words it tags averaged over this many tag "
                              "sequences from its tagger as well as the best one (needs the tagger; the dev "
                              "scores are then measured with it too)", ge=0, le=MAX_TAG_SAMPLES, metavar="K")

    def __post_init__(self) -> None:
        for f in fields(self):
            if isinstance(getattr(self, f.name), list):  # e.g. factors=["sib"]
                object.__setattr__(self, f.name, tuple(getattr(self, f.name)))
            _check(f.name, getattr(self, f.name), f.metadata["option"])
        unknown_parts = sorted(set(self.components) - set(COMPONENTS))
        if unknown_parts or "parser" not in self.components:
            raise TrainOptionsError(f"components must include parser and come from {', '.join(COMPONENTS)}"
                                    + (f" (unknown: {', '.join(unknown_parts)})" if unknown_parts else ""))
        if {"lemmatizer", "morph"} & set(self.components) and "tagger" not in self.components:
            raise TrainOptionsError("the lemmatizer and morph components read the tagger's tags: add tagger")
        if self.tag_samples and "tagger" not in self.components:
            raise TrainOptionsError("tag_samples needs the tagger component (tag sequences come from it)")
        if self.labeler_tag_samples and not {"tagger", "labeler"} <= set(self.components):
            raise TrainOptionsError("labeler_tag_samples needs the tagger and labeler components (the "
                                    "labeller trains on tags drawn by the jackknife's fold taggers)")
        if self.cluster is not None and not CLUSTER_SPEC.fullmatch(self.cluster):
            raise TrainOptionsError(f"cluster must be local:N or tcp://HOST:PORT, got {self.cluster!r}")
        if self.parameter_mixing and (self.cluster is None or self.seeds > 1
                                      or (self.order == 1 and self.objective != "cll")):
            raise TrainOptionsError("parameter_mixing needs --cluster (the workers that train the shards) and trains "
                                    "one first-order CLL run: not with --seeds N > 1 (the seeds run as tasks) nor "
                                    "an approximation-aware first-order objective")
        if len(self.anneal) != 2:
            raise TrainOptionsError(f"anneal must be two temperatures > 0 (start, end), got {self.anneal!r}")
        if self.objective == "l2+ar" and self.epochs < 2:
            raise TrainOptionsError("objective l2+ar needs at least 2 epochs (L2 first, then annealed risk)")
        if self.hidden_clusters > 1 and (self.objective != "cll" or self.seeds > 1 or self.cluster is not None):
            raise TrainOptionsError("hidden_clusters > 1 needs the cll objective (surrogate CLL at order 2), with one "
                                    "seed (runs number their clusters arbitrarily, so their weights cannot be "
                                    "averaged) and no --cluster")
        if self.labels_in_graph and (self.order != 2 or self.objective not in ("cll", "l2")):
            raise TrainOptionsError("labels_in_graph needs order 2 and the cll (surrogate CLL) or l2 "
                                    "(approximation-aware) objective")
        if self.order == 2:  # first-order training ignores the factors
            unknown = sorted(set(self.factors) - set(FACTOR_FAMILIES))
            if unknown:
                raise TrainOptionsError(f"unknown factor families: {', '.join(unknown)} "
                                        f"(available: {', '.join(FACTOR_FAMILIES)})")

    @property
    def effective_labeler_tag_samples(self) -> int:
        if self.labeler_tag_samples is not None:
            return self.labeler_tag_samples
        return LABELER_TAG_SAMPLES if {"tagger", "labeler"} <= set(self.components) else 0

    @property
    def effective_learning_rate(self) -> float:
        if self.learning_rate is not None:
            return self.learning_rate
        return 0.2 if self.order == 1 else 0.05


@cache
def _types() -> dict[str, Any]:
    """The fields' types (the annotations are strings under ``from __future__ import annotations``)."""
    return typing.get_type_hints(TrainOptions)


def base_type(name: str) -> tuple[type, bool, bool]:
    """(scalar type, whether None is allowed, whether it is a tuple of them) of option ``name``."""
    hint = _types()[name]
    args = typing.get_args(hint)
    optional = type(None) in args
    if optional:
        hint = next(a for a in args if a is not type(None))
    if typing.get_origin(hint) is tuple:
        return typing.get_args(hint)[0], optional, True
    return hint, optional, False


def specs() -> dict[str, Option]:
    """Every option's declaration, in ``TrainOptions``' order (that of the CLI's flags)."""
    return {f.name: f.metadata["option"] for f in fields(TrainOptions)}


def _check(name: str, value: Any, spec: Option) -> None:
    """Raise ``TrainOptionsError`` unless ``value`` has the declared type, choices and bounds."""
    scalar, optional, many = base_type(name)
    if value is None and optional:
        return
    items = value if many else (value,)
    if many and (not isinstance(value, tuple) or (spec.min_items and len(value) < spec.min_items)):
        raise TrainOptionsError(f"{name} must be a list of at least {spec.min_items or 0} values, got {value!r}")
    for item in items:
        ok = isinstance(item, bool) if scalar is bool else isinstance(item, scalar) and not isinstance(item, bool)
        if scalar is float:
            ok = isinstance(item, int | float) and not isinstance(item, bool) and math.isfinite(item)
        if not ok:
            raise TrainOptionsError(f"{name} must be {_described(scalar, spec)}, got {value!r}")
        if spec.choices is not None and not many and item not in spec.choices:
            raise TrainOptionsError(f"{name} must be one of {', '.join(map(str, spec.choices))}, got {value!r}")
        if (spec.ge is not None and item < spec.ge) or (spec.gt is not None and item <= spec.gt) or \
                (spec.le is not None and item > spec.le):
            raise TrainOptionsError(f"{name} must be {_described(scalar, spec)}, got {value!r}")


def _described(scalar: type, spec: Option) -> str:
    """``an integer from 0 to 16``, ``an integer of at least 1``, ``> 0``, ``>= 0``, ``a string``..."""
    if scalar is int:
        if spec.ge is not None and spec.le is not None:
            return f"an integer from {spec.ge} to {spec.le}"
        return f"an integer of at least {spec.ge}" if spec.ge is not None else "an integer"
    if scalar is float:
        return f"> {spec.gt}" if spec.gt is not None else f">= {spec.ge}" if spec.ge is not None else "a number"
    return "true or false" if scalar is bool else "a string"


# -- the command line ---------------------------------------------------------------------------------------


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags of ``python -m engine train``, one per option, in ``TrainOptions``' order."""
    defaults = TrainOptions()
    for name, spec in specs().items():
        scalar, _, many = base_type(name)
        flag, default = "--" + name.replace("_", "-"), getattr(defaults, name)
        if scalar is bool:
            parser.add_argument(f"--no-{flag[2:]}" if default else flag, dest=name, action="store_false" if default
                                else "store_true", help=spec.help + ("; this flag turns it off" if default else ""))
        elif many:
            parser.add_argument(flag, default=",".join(map(str, default)), metavar=spec.metavar,
                                help=spec.help + ("" if spec.metavar else " (comma-separated)"))
        else:
            convert: Any = None if scalar is str else scalar
            parser.add_argument(flag, type=convert, default=default, metavar=spec.metavar, help=spec.help,
                                choices=list(spec.choices) if spec.choices else None)


def from_arguments(args: argparse.Namespace) -> TrainOptions:
    """``TrainOptions`` from the parsed flags of ``add_arguments``; ``TrainOptionsError`` for a bad value."""
    values = {}
    for name, spec in specs().items():
        scalar, _, many = base_type(name)
        value = getattr(args, name)
        if many:
            try:
                value = tuple(scalar(v) for v in value.split(",") if v)
            except ValueError:
                raise TrainOptionsError(f"--{name.replace('_', '-')} must be {spec.metavar or 'comma-separated'} "
                                        f"values, got {value!r}") from None
        elif spec.cli_unset is not None and value == spec.cli_unset:
            value = None
        values[name] = value
    return TrainOptions(**values)
