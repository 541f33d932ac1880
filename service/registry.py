"""The model registry: which models the service can parse with, loaded once, looked up by name.

Two sources:

- ``models_dir`` (shipped, read-only): every sub-directory with a ``manifest.json`` is a model named after
  the directory (version 1, or the manifest's ``version``). A symbolic link to a sibling directory is an
  alias (``models/en_ewt -> en_ewt-o2``); links leaving ``models_dir`` are ignored.
- ``trained_dir`` (written by training jobs): ``<name>/v<N>/`` is version N of ``name``; versions are
  immutable and appear by atomic rename, so a directory that exists is complete.

Loading uses ``engine.pipeline.Pipeline.load`` (parser plus tokenizer/tagger/labeler; JSON manifest +
``.npy`` arrays with checksums, never pickle); a directory whose manifest says ``formalism: "constituency"``
is loaded by ``engine.constituency.commands.load`` instead, as a :class:`ConstituencyEntry` (issue 26).
A model that fails to load is logged and skipped; the registry is ready when the default model is loaded.
"""

from __future__ import annotations

import logging
import re
import threading
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from engine.bp_parser import BPParser
from engine.constituency import commands as constituency
from engine.inference.fields import declared
from engine.inference.settings import resolve
from engine.model.store import ModelError, read_manifest
from engine.parser import FirstOrderParser
from engine.pipeline import MAX_TAG_SAMPLES, Pipeline
from service.settings import MODEL_NAME

log = logging.getLogger("service.registry")
VERSION_DIR = re.compile(r"^v([0-9]{1,9})$")


@dataclass
class ModelEntry:
    name: str
    version: int
    path: Path
    pipeline: Pipeline
    manifest: dict[str, Any]
    alias_of: str | None = None
    shipped: bool = False
    max_tag_samples: int = MAX_TAG_SAMPLES  # the service's cap on a request's tag samples (service.settings)
    _bp_view: BPParser | None = field(default=None, repr=False)

    @property
    def parser(self) -> FirstOrderParser | BPParser:
        return self.pipeline.parser

    @property
    def order(self) -> int:
        return 2 if isinstance(self.parser, BPParser) else 1

    @property
    def has_tokenizer(self) -> bool:
        return self.pipeline.tokenizer is not None

    @property
    def needs_tags(self) -> bool:
        """Features read UPOS; without a tagger the request must bring them."""
        return self.pipeline.tagger is None

    @property
    def default_method(self) -> str:
        return "bp" if self.order == 2 else "exact"

    @property
    def default_tag_samples(self) -> int:
        """``inference.tag_samples`` of /parse, /marginals and /confidence when a request does not give it: the model's
        default, capped at what a request may ask for."""
        return min(self.pipeline.default_tag_samples, self.max_tag_samples)

    @property
    def inference_defaults(self) -> dict[str, dict[str, Any]]:
        """What a request leaving the settings of a BP-based method out gets (``engine.inference.settings``)."""
        out = {}
        for method in ("bp", "relaxed"):
            config = resolve(method, self.manifest)
            out[method] = {name: getattr(config, d.field) for name, d in declared(type(config)).items()}
        return out

    def bp_parser(self) -> BPParser:
        """The model as a BP parser (a first-order model runs as LINK + TREE)."""
        if isinstance(self.parser, BPParser):
            return self.parser
        if self._bp_view is None:
            self._bp_view = BPParser.from_first_order(self.parser)
        return self._bp_view

    formalism = "dependency"

    def info(self) -> dict[str, Any]:
        man = self.manifest
        training = man.get("training", {}) or {}
        settings = {
            "order": self.order,
            "tree": man.get("tree"),
            "features": {k: v for k, v in (man.get("features") or {}).items() if k != "templates"},
            "training": {k: training.get(k) for k in ("objective", "epochs", "learning_rate", "l2", "factors",
                                                      "train_file", "train_sentences", "best_epoch")
                         if k in training},
        }
        return {"name": self.name, "version": self.version, "formalism": self.formalism, "created": man.get("created"),
                "metrics": man.get("metrics"), "settings": settings, "alias_of": self.alias_of,
                "components": self.pipeline.components, "needs_tags": self.needs_tags,
                "has_tokenizer": self.has_tokenizer,
                "default_inference": self.default_method, "inference_defaults": self.inference_defaults,
                "default_tag_samples": self.default_tag_samples,
                "default_tag_average": self.pipeline.default_tag_average,
                "head_power": self.pipeline.default_head_power,
                "head_sets": "conformal" in (man.get("inference") or {})}


@dataclass
class ConstituencyEntry:
    """A constituency model (``formalism: "constituency"``): ``parser`` is what ``engine.constituency.commands.load``
    gives, with ``parse_with_marginals(words) -> (tree, marginals | None)`` and ``model.grammar``. It has no
    tokenizer or tagger of its own (``text`` is split by the default model's tokenizer, ``service.constituency``)."""

    name: str
    version: int
    path: Path
    parser: Any
    manifest: dict[str, Any]
    alias_of: str | None = None
    shipped: bool = False
    formalism = "constituency"
    needs_tags = False  # the grammar tags the words itself
    has_tokenizer = False

    def info(self) -> dict[str, Any]:
        man = self.manifest
        training = man.get("training", {}) or {}
        grammar = self.parser.model.grammar
        settings = {"model": man.get("model"), "labels": grammar.n_labels, "binary_rules": len(grammar.binary),
                    "unary_rules": len(grammar.unary),
                    "training": {k: training.get(k) for k in ("sentences", "seconds", "epochs", "factors")
                                 if k in training}}
        return {"name": self.name, "version": self.version, "formalism": self.formalism,
                "created": man.get("created"), "metrics": man.get("metrics"), "settings": settings,
                "alias_of": self.alias_of, "components": ["parser"], "needs_tags": False, "has_tokenizer": False,
                "default_inference": "max-recall", "inference_defaults": {}, "default_tag_samples": 0,
                "default_tag_average": "marginals", "head_power": 1.0, "head_sets": False}


AnyEntry = ModelEntry | ConstituencyEntry


class UnknownModel(LookupError):
    pass


class ModelRegistry:
    def __init__(self, models_dir: Path, trained_dir: Path, default: str, max_tag_samples: int = MAX_TAG_SAMPLES
                 ) -> None:
        """``max_tag_samples``: the service's cap on tag samples per request, to which model defaults are cut."""
        self.models_dir, self.trained_dir, self.default = Path(models_dir), Path(trained_dir), default
        self.max_tag_samples = max_tag_samples
        self._models: dict[str, dict[int, AnyEntry]] = {}
        self._failed: set[Path] = set()
        self._lock = threading.Lock()

    # -- loading ---------------------------------------------------------------------------------
    def _load(self, name: str, version: int, path: Path) -> AnyEntry | None:
        try:
            if constituency.is_model(path):
                parser = constituency.load(path)
                log.info("loaded constituency model %s v%d from %s", name, version, path)
                return ConstituencyEntry(name, version, path, parser, read_manifest(path))
            pipeline = Pipeline.load(path)
            if isinstance(pipeline.parser, BPParser):
                pipeline.parser.upos_tables()  # built once here, before the parse processes fork and share them
        except (ModelError, OSError, ValueError) as e:
            log.error("model %s (%s) not loaded: %s", name, path, e)
            self._failed.add(path)
            return None
        log.info("loaded model %s v%d from %s (%s)", name, version, path, ", ".join(pipeline.components))
        return ModelEntry(name, version, path, pipeline, pipeline.manifest, max_tag_samples=self.max_tag_samples)

    def load_shipped(self) -> None:
        """Load every model in ``models_dir`` and resolve its aliases (called once at start-up)."""
        if not self.models_dir.is_dir():
            log.error("models directory %s does not exist", self.models_dir)
            return
        root = self.models_dir.resolve()
        aliases: list[tuple[str, str]] = []
        for path in sorted(self.models_dir.iterdir()):
            if not MODEL_NAME.match(path.name):
                continue
            if path.is_symlink():
                target = path.resolve()
                if target.parent == root and target.is_dir():
                    aliases.append((path.name, target.name))
                else:
                    log.warning("ignoring %s: an alias must point to a model directory beside it", path)
                continue
            if (path / "manifest.json").is_file():
                entry = self._load(path.name, 1, path)
                if entry is not None:
                    entry.version = int(entry.manifest.get("version", 1))
                    entry.shipped = True
                    with self._lock:
                        self._models.setdefault(path.name, {})[entry.version] = entry
        for alias, target_name in aliases:
            with self._lock:
                versions = self._models.get(target_name)
                if not versions:
                    log.error("alias %s -> %s: target not loaded", alias, target_name)
                    continue
                src = versions[max(versions)]
                self._models[alias] = {src.version: replace(src, name=alias, alias_of=target_name, shipped=True)}

    def refresh(self) -> list[AnyEntry]:
        """Load model versions that training jobs have published since the last call; returns them."""
        added: list[AnyEntry] = []
        if not self.trained_dir.is_dir():
            return added
        for name_dir in sorted(self.trained_dir.iterdir()):
            if not MODEL_NAME.match(name_dir.name) or name_dir.is_symlink() or not name_dir.is_dir():
                continue
            for vdir in sorted(name_dir.iterdir()):
                match = VERSION_DIR.match(vdir.name)
                if not match or vdir in self._failed or not (vdir / "manifest.json").is_file():
                    continue
                version = int(match.group(1))
                with self._lock:
                    known = version in self._models.get(name_dir.name, {})
                if known:
                    continue
                entry = self._load(name_dir.name, version, vdir)
                if entry is not None:
                    with self._lock:
                        self._models.setdefault(name_dir.name, {})[version] = entry
                    added.append(entry)
        return added

    # -- lookup ----------------------------------------------------------------------------------
    @property
    def ready(self) -> bool:
        return self.default in self._models

    def shipped_names(self) -> set[str]:
        with self._lock:
            return {name for name, versions in self._models.items() if any(e.shipped for e in versions.values())}

    def get(self, ref: str | None) -> AnyEntry:
        """``name`` (newest version) or ``name@version``; ``None`` is the default model."""
        ref = ref or self.default
        name, _, version = ref.partition("@")
        with self._lock:
            versions = self._models.get(name)
        if versions is None:
            self.refresh()  # a job may have just published it
            with self._lock:
                versions = self._models.get(name)
        if not versions:
            raise UnknownModel(f"unknown model {name!r}; available: {', '.join(self.names()) or 'none'}")
        if version:
            if int(version) not in versions:
                raise UnknownModel(f"model {name!r} has no version {version}; versions: "
                                   f"{', '.join(map(str, sorted(versions)))}")
            return versions[int(version)]
        return versions[max(versions)]

    def names(self) -> list[str]:
        with self._lock:
            return sorted(self._models)

    def entries(self) -> list[AnyEntry]:
        with self._lock:
            return [e for name in sorted(self._models) for _, e in sorted(self._models[name].items())]
