"""The command line's arguments: one ``argparse`` parser for ``python -m engine`` (``build_parser``), its
subcommands' flags and the inference settings they give (``given_settings``). The commands themselves are in
``engine.cli``."""

from __future__ import annotations

import argparse
from typing import Any

from engine.constituency.contract import INFERENCE as CONSTITUENCY_INFERENCE
from engine.constituency.contract import INPUT_FORMATS as CONSTITUENCY_INPUTS
from engine.constituency.contract import OUTPUT_FORMATS as CONSTITUENCY_OUTPUTS
from engine.decode.tag_marginal import DEFAULT_TAG_AVERAGE, TAG_AVERAGES
from engine.inference.bp import SCHEDULES
from engine.inference.settings import method_settings
from engine.text.layout import BLANK_LINE_MARKS, DEFAULT_BLANK_LINE
from engine.text.tag_candidates import CANDIDATE_MIN_MARGINAL, TAG_CANDIDATES
from engine.training import options as train_options
from engine.training.morphology import MORPHOLOGY_COMPONENTS


def _add_train(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("train", help="train a model (conditional log-likelihood, or approximation-aware --objective)")
    p.add_argument("--formalism", choices=["dependency", "constituency"], default="dependency",
                   help="dependency (CoNLL-U) or constituency (Penn Treebank .mrg files: the factored latent PCFG of "
                   "--factors one-bit factors trained with --inference, or with --factors 0 the generative X-bar "
                   "PCFG; see docs/constituency.md for which dependency options it reads)")
    p.add_argument("--train", required=True, nargs="+", help="training treebank (CoNLL-U; constituency: .mrg "
                   "files or folders, several allowed)")
    p.add_argument("--dev", nargs="+", help="development treebank for choosing the best epoch (CoNLL-U); the trained "
                   "model is then calibrated on it as `calibrate` does (see --no-calibrate); constituency: .mrg files "
                   "or folders scored with EVALB into the model's manifest")
    p.add_argument("--out", required=True, help="model directory to write")
    p.add_argument("--no-calibrate", dest="calibrate", action="store_false",
                   help="do not run `calibrate --model OUT --data DEV` after training (default: run it when --dev "
                   "is given and training was not interrupted; it parses the dev set once more)")
    train_options.add_arguments(p)  # one flag per TrainOptions field (engine.training.options)
    p.add_argument("--inference", choices=CONSTITUENCY_INFERENCE, default=None,
                   help="constituency: how log Z and its gradient are computed in training (default: ep; "
                   "independent: each factor a model of its own, parsed with EP)")
    p.add_argument("--ep-sweeps", type=int, default=None, help="constituency: at most N EP sweeps per sentence "
                   "(training and the model's parsing; default 4, the paper's)")
    p.add_argument("--workers", type=int, default=None, help="constituency: processes computing a batch's "
                   "gradients and the dev parses (default 1)")
    p.add_argument("--substates", type=int, default=None, help="constituency: substates K of each split label in "
                   "every factor (default 2: one-bit factors; --factors 1 --substates 4 is the paper's single "
                   "4-state baseline)")
    p.add_argument("--init", help="constituency: a trained latent model of fewer factors (same --train) whose "
                   "X-bar PCFG, features and weights start the new one; the added factors start from noise")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.add_argument("--pruner", help="first-order model for arc pruning and warm start (--order 2); "
                   "default: train one first")


def _add_train_component(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("train-component", help="train LEMMA/FEATS components and add them to an existing pipeline "
                       "model (its parser, tagger, tokenizer and labeler are kept as they are)")
    p.add_argument("components", nargs="+", choices=MORPHOLOGY_COMPONENTS, help="lemmatizer (LEMMA), morph (FEATS)")
    p.add_argument("--model", required=True, help="pipeline model with a tagger")
    p.add_argument("--train", required=True, help="training treebank (CoNLL-U) with LEMMA and FEATS")
    p.add_argument("--out", help="model directory to write (default: --model, replaced atomically)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--quiet", action="store_true", help="no progress bars")


def _add_train_joint(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("train-joint", help="fine-tune a pipeline's second-order parser as a joint model of tags and "
                       "trees (surrogate CLL under BP over links and tag variables, candidate tags from jackknife "
                       "fold taggers) and write the pipeline with --tag-average joint as its default")
    p.add_argument("--model", required=True, help="pipeline model with a tagger and a second-order BP parser")
    p.add_argument("--train", required=True, help="training treebank (CoNLL-U), the one the pipeline was trained on")
    p.add_argument("--dev", required=True, help="development treebank: the epoch with the best joint UAS is kept")
    p.add_argument("--out", required=True, help="model directory to write")
    p.add_argument("--start", choices=train_options.JOINT_STARTS, default="parser", help="parser: fine-tune the "
                   "pipeline's parser; pruner: start from its first-order pruner's weights and zero higher-order "
                   "weights, as `train --order 2` starts")
    p.add_argument("--objective", choices=list(train_options.JOINT_OBJECTIVES), default="joint", help="joint: "
                   "surrogate CLL under joint BP; joint-l2: approximation-aware training (Gormley et al. 2015), the "
                   "L2 distance of the final link and tag beliefs (and role beliefs, with --labels-in-graph) to the "
                   "gold back-propagated through the joint BP iterations; surrogate: the control, plain surrogate "
                   "CLL on the same jackknifed 1-best tags, no tag variables")
    p.add_argument("--epochs", type=int, help="default 2 from the parser, 3 from the pruner")
    p.add_argument("--learning-rate", type=float, help="AdaGrad step size (default 0.01 from the parser, 0.05 from "
                   "the pruner)")
    p.add_argument("--l2", type=float, help="L2 strength (default 0 from the parser: its weights are already "
                   "fitted; 10 from the pruner)")
    p.add_argument("--bp-iterations", type=int, default=train_options.TrainOptions.bp_iterations,
                   help="BP iterations per training sentence (joint-l2: also the iterations of its dev parses and "
                   "the written model's inference.bp.iterations)")
    p.add_argument("--tag-candidates", type=int, default=None, metavar="K", help="at most K candidate tags per word, "
                   "in training and in the written model's default (manifest inference.tag_candidates.k; default: "
                   f"the model's, else {TAG_CANDIDATES})")
    p.add_argument("--tag-min-marginal", type=float, default=None, metavar="P", help="a tag besides the tagger's "
                   "best is a candidate if its marginal is at least P, in training and in the written model's "
                   f"default (default: the model's, else {CANDIDATE_MIN_MARGINAL})")
    p.add_argument("--folds", type=int, default=5, help="jackknife folds for the training sentences' candidate tags")
    p.add_argument("--labels-in-graph", action="store_true", help="label-aware LINK factors (link roles, "
                   "docs/labels-in-graph.md) trained with the parser, from zero unless the model's parser has them; "
                   "the written pipeline labels with them instead of its labeller")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max-sentences", type=int, default=0, help="train on the first N sentences only")
    p.add_argument("--quiet", action="store_true", help="no progress bars")


def _add_model_io(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", required=True, help="model directory")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--inference", choices=["exact", "bp", "relaxed", "pruned"], help="default: exact for "
                   "first-order models, bp for higher-order ones (exact is only valid for first-order models); "
                   "relaxed: Riedel & Smith (2010) Algorithm 1, BP over the higher-order factors whose gain exceeds "
                   "--epsilon; pruned: BP without the higher-order factors with |weight| < --prune-threshold")
    # the inference settings: None (not given) -> the model's (manifest inference.<method>), else the method's
    # declared default (engine.inference.settings)
    p.add_argument("--bp-iterations", type=int, help="at most this many BP iterations (per round for relaxed); "
                   f"default: the model's, else {_default('bp', 'iterations')} (pruned "
                   f"{_default('pruned', 'iterations')}, relaxed {_default('relaxed', 'iterations')})")
    p.add_argument("--epsilon", type=float, help="relaxed: gain threshold for adding a factor (default: the "
                   f"model's, else {_default('relaxed', 'epsilon'):g})")
    p.add_argument("--rounds", type=_rounds, default=argparse.SUPPRESS, metavar="R|inf",
                   help="relaxed: at most R rounds of adding factors (default: the model's, else "
                   f"{_default('relaxed', 'rounds') or 'inf'}; inf: until none is added)")
    p.add_argument("--prune-threshold", type=float, help="pruned: drop factors with |weight| below this (default: "
                   f"the model's, else {_default('pruned', 'threshold'):g})")
    p.add_argument("--schedule", choices=SCHEDULES, help="BP's order of updates (default: the model's, else "
                   f"{_default('bp', 'schedule')})")
    p.add_argument("--no-prune", action="store_true", help="with --inference bp: build the factor graph over all "
                   "arcs instead of those the model's first-order pruner keeps")
    p.add_argument("--constraint", choices=["tree", "ptree", "exactly1", "atmost1", "not2", "exactly1+no2cycle"],
                   help="with --inference bp: the hard factor to decode under (default: the model's tree)")
    p.add_argument("--tag-samples", type=int, default=None, metavar="K",
                   help="words tagged by the model's tagger: average the arc marginals and the label distributions "
                   "over the best tags and K tag sequences drawn from the tagger's posterior (up to K + 1 parses; "
                   "better calibrated head and label probabilities); default: the model's (manifest "
                   "inference.tag_samples, 0 if absent), 0 with --kbest, --samples or --constraint")
    p.add_argument("--calibration", choices=["model", "none"], default="model",
                   help="model: map head probabilities through the calibration fitted for the model (manifest "
                   "inference.head_power, `calibrate`; the trees do not change); none: the raw marginals")
    p.add_argument("--tag-average", choices=TAG_AVERAGES, default=None,
                   help="with tag samples, what is averaged over the tag sequences: 'marginals' (a parse per "
                   "distinct sequence; better calibrated) or 'potentials' (one parse per sentence over the "
                   "factors' potentials averaged across the sequences; faster); default: the model's (manifest "
                   f"inference.tag_average, else {DEFAULT_TAG_AVERAGE}); 'joint': no samples, the tags are "
                   "variables of the BP parser's factor graph over each word's candidate tags (--tag-candidates; "
                   "plain BP and no tag samples: a model's default of joint gives way to 'potentials' under "
                   "--tag-samples K > 0 or --inference relaxed)")
    p.add_argument("--tag-candidates", type=int, default=None, metavar="K",
                   help="with --tag-average joint: at most K candidate tags per word (default: the model's, manifest "
                   f"inference.tag_candidates.k, else {TAG_CANDIDATES})")
    p.add_argument("--tag-min-marginal", type=float, default=None, metavar="P",
                   help="with --tag-average joint: a tag besides the tagger's best is a candidate if its tagger "
                   "marginal is at least P (default: the model's, inference.tag_candidates.min_marginal, else "
                   f"{CANDIDATE_MIN_MARGINAL})")


def _default(method: str, name: str) -> Any:
    """The declared default of an inference setting (for the help texts)."""
    return method_settings(method)[name].default


# command-line flag (argparse dest) -> public name of the inference setting it gives
_INFERENCE_FLAGS = {"bp_iterations": "iterations", "epsilon": "epsilon", "rounds": "rounds",
                    "prune_threshold": "threshold", "schedule": "schedule"}


def given_settings(args: argparse.Namespace) -> dict[str, Any]:
    """The inference settings given on the command line, by public name (``--rounds inf`` gives None)."""
    return {name: getattr(args, dest) for dest, name in _INFERENCE_FLAGS.items()
            if hasattr(args, dest) and (getattr(args, dest) is not None or dest == "rounds")}


def _rounds(text: str) -> int | None:
    if text.lower() in ("inf", "none"):
        return None
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer or inf, got {text!r}") from None


def _add_average(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("average", help="one parser from several trained alike (different --seed): the mean of "
                       "their weights")
    p.add_argument("--models", nargs="+", required=True, help="parser or pipeline models with the same order, "
                   "features and pruner (one model: its parser unchanged, e.g. to give it --components-from)")
    p.add_argument("--out", required=True, help="output model directory")
    p.add_argument("--components-from", metavar="PIPELINE", help="a pipeline model whose tokenizer, tagger and "
                   "labeler go with the averaged parser (default: the first model's)")
    p.add_argument("--dev", help="score the result on this treebank (re-tagged first when the result has a "
                   "tagger) and record the scores in its manifest")
    p.add_argument("--name", help="model name in the manifest (default: the output directory's name)")
    p.add_argument("--tag-samples", type=int, metavar="K", help="the result's default --tag-samples (manifest "
                   "inference.tag_samples; parse, evaluate and the service use it unless told otherwise)")


def _add_cluster(p: argparse.ArgumentParser, what: str) -> None:
    p.add_argument("--cluster", metavar="SPEC", help=f"{what} on a Dask cluster: local:N (a LocalCluster of N worker "
                   "processes) or tcp://HOST:8786; the output is the same, in input order (needs the cluster extra)")


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m engine", description=__doc__.splitlines()[0])
    ap.add_argument("-v", "--verbose", action="store_true")
    sub = ap.add_subparsers(dest="command", required=True)
    _add_train(sub)
    _add_train_component(sub)
    _add_train_joint(sub)
    _add_average(sub)
    p = sub.add_parser("evaluate", help="parse a treebank and score it against its gold trees")
    _add_model_io(p)
    p.add_argument("--data", required=True, nargs="+", help="gold treebank (CoNLL-U; for a constituency model .mrg "
                   "files or folders, several allowed, scored with EVALB)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--reliability", action="store_true", help="include the reliability (calibration) table")
    p.add_argument("--reliability-plot", metavar="FILE.png", help="draw reliability diagrams of heads, labels, tags "
                   "and trees, calibrated and raw (needs matplotlib: the 'plots' extra; not with --from-text)")
    p.add_argument("--tags", choices=["gold", "predicted"], default="gold",
                   help="predicted: re-tag the gold-tokenised input with the model's tagger before parsing")
    p.add_argument("--from-text", action="store_true", help="run the whole pipeline from the raw '# text' lines "
                   "and score with the CoNLL 2018 UD alignment (tokens, sentences, words, UPOS, UAS, LAS as F1)")
    p.add_argument("--wrap", type=int, metavar="WIDTH", help="with --from-text: wrap the text's lines at WIDTH "
                   "characters (at spaces), as text files and conllu_to_text.pl (80) have it")
    _add_cluster(p, "tag and parse the chunks")
    p = sub.add_parser("parse", help="parse CoNLL-U (HEAD/DEPREL are ignored) and write CoNLL-U")
    _add_model_io(p)
    p.add_argument("--input", help="input file (default: stdin)")
    p.add_argument("--input-format", choices=["conllu", "text", *CONSTITUENCY_INPUTS], default=None,
                   help="conllu (words whose UPOS is '_' are tagged by the model's tagger) or raw text; for a "
                   "constituency model (which prints one bracketed tree per line) tokens (one sentence a line, words "
                   "separated by single spaces, spelled as in the treebank), ptb (bracketed trees, their words) or "
                   "text (split by --tokenizer-model's tokenizer); "
                   "default: conllu, tokens for a constituency model")
    p.add_argument("--text", help="raw text to parse (instead of --input)")
    p.add_argument("--tokenizer-model", metavar="MODEL", help="constituency models, raw text (--input-format text "
                   "or --text): the model whose tokenizer splits the text into sentences and words, respelled as the "
                   "Penn Treebank spells them (default: the shipped models/en_ewt, as the service does)")
    p.add_argument("--blank-line", choices=BLANK_LINE_MARKS, default=DEFAULT_BLANK_LINE,
                   help="raw text: a blank line starts a paragraph (# newpar) or a document (# newdoc); a single "
                   "line break is a space either way")
    p.add_argument("--retag", action="store_true", help="re-tag every word with the model's tagger")
    p.add_argument("--output", help="output CoNLL-U file (default: stdout)")
    p.add_argument("--output-format", choices=CONSTITUENCY_OUTPUTS, default=None,
                   help="constituency models: ptb (one bracketed (TOP ...) tree per line, the default) or json (one "
                   "JSON object per line, as the service's /parse answers a sentence: words, tree, constituents "
                   "and tags with their posteriors)")
    alt = p.add_mutually_exclusive_group()
    alt.add_argument("--kbest", type=int, metavar="K", help="write the K most probable trees of each sentence")
    alt.add_argument("--samples", type=int, metavar="N", help="write N trees sampled from each sentence's distribution")
    p.add_argument("--seed", type=int, help="random seed for --samples")
    p.add_argument("--sentence-confidence", action="store_true", help="write each sentence's p_tree (probability "
                   "that its heads are all right) and expected_errors as comments")
    p.add_argument("--head-sets", type=float, metavar="ALPHA", help="conformal head and label sets at level ALPHA "
                   "in MISC: HeadSet=3,5 DeprelSet=nsubj,obj (thresholds fitted by `calibrate`)")
    _add_cluster(p, "parse the chunks")
    p = sub.add_parser("calibrate", help="fit the calibration of head probabilities and the thresholds of head "
                       "sets on a development treebank (parsed as `evaluate` parses it: re-tagged when the model has "
                       "a tagger) and store them in the model's manifest (inference.head_power, .conformal); an "
                       "explicit --tag-samples or --tag-average is stored as the model's default too (the "
                       "calibration holds for the settings it was fitted under)")
    _add_model_io(p)
    p.add_argument("--data", required=True, help="development treebank (CoNLL-U), never the test set")
    p = sub.add_parser("score", help="score a parsed CoNLL-U file against the gold file")
    p.add_argument("--gold", required=True)
    p.add_argument("--pred", required=True)
    p.add_argument("--json", action="store_true")
    return ap
