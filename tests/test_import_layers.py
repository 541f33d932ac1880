"""Every import points down the data flow: no module of ``engine/`` or ``service/`` imports a higher layer.

``LAYERS`` is the one statement of the order, bottom to top (the README's package tree follows it). A unit
is a sub-package of ``engine`` (``engine.graph``), a top-level module (``engine.parser``, ``engine.results``)
or the root package ``engine`` itself; all of ``service`` is one unit, above the engine. A module may import
its own unit and units of lower layers; importing a unit of the same layer (units side by side do not know
each other) or of a higher one fails, naming the file, the line and the import. Module-level imports,
imports inside functions and ``TYPE_CHECKING`` imports all count. Units missing from ``LAYERS`` fail too, so
that a new package gets a place in the order.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

LAYERS: tuple[tuple[str, ...], ...] = (
    ("engine",),  # the root package: its docstring and __version__
    ("optim", "data", "model", "hashing"),  # optimiser, CoNLL-U and batches, model storage, string hashing
    ("text",),  # tokenizer, tagger, jackknifing, word shapes
    ("features",),  # feature templates and extraction
    ("scoring",),  # arc potentials, pruning
    ("kernels",),  # exact tree algorithms: Matrix-Tree, Eisner, MST, MBR, k-best, samples, Hessians
    ("graph",),  # factor families over link variables
    ("inference",),  # loopy BP, its reverse mode, relaxed BP, settings
    ("results",),  # ParsedSentence, TreeDistribution
    ("decode",),  # labellers, parsing over tag samples
    ("parser",),  # the first-order parser
    ("joint_parsing",),  # the BP parser's joint tagging and parsing (its methods, inherited)
    ("bp_parser",),  # the BP parser
    ("pipeline",),  # tokenizer + tagger + parser + labeller
    ("evaluation",),  # UAS/LAS, calibration, CoNLL 2018 aligned F1
    ("training",),  # trainers and the training pipeline
    ("constituency",),  # the second formalism: factored PCFGs with EP (its own data, inference and training)
    ("cli_args",),  # the command line's arguments
    ("cli_parse",),  # the parse command's machinery (the CLI's and the service's batch jobs')
    ("cli", "compiled"),  # the command line's commands; the numba warm-up
    ("__main__",),  # python -m engine
    ("service",),  # the HTTP service
)
RANK = {unit: rank for rank, units in enumerate(LAYERS) for unit in units}


def module_name(path: Path, root: Path) -> str:
    """Dotted name of a source file: ``engine/graph/tree.py`` -> ``engine.graph.tree``."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def unit(module: str, root: Path) -> str:
    """The layer unit of a dotted module name of ``engine`` or ``service``."""
    parts = module.split(".")
    if parts[0] == "service":
        return "service"
    if len(parts) > 1 and ((root / "engine" / parts[1]).is_dir() or (root / "engine" / f"{parts[1]}.py").is_file()):
        return parts[1]
    return "engine"  # the root package, or a name it defines (``from engine import __version__``)


def imported(tree: ast.Module, module: str, is_package: bool) -> list[tuple[int, str]]:
    """``(line, dotted module)`` of every import of a parsed file (any depth), relative ones resolved.
    ``from engine import x`` counts as importing ``engine.x`` (a submodule or a name of the root)."""
    package = module if is_package else module.rpartition(".")[0]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, *([node.module] if node.module else [])])
            if base in ("engine", "service") or not node.module:
                found += [(node.lineno, f"{base}.{alias.name}") for alias in node.names]
            else:
                found.append((node.lineno, base))
    return found


def violations(root: Path = ROOT) -> list[str]:
    """``file:line: import target (layer of unit A imports unit B)`` for each import that points up or
    sideways, and for each unit ``LAYERS`` does not place."""
    problems = []
    for top in ("engine", "service"):
        for path in sorted((root / top).rglob("*.py")):
            module = module_name(path, root)
            own = unit(module, root)
            where = path.relative_to(root).as_posix()
            if own not in RANK:
                problems.append(f"{where}: unit {own!r} has no layer in LAYERS")
                continue
            tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
            for line, target in imported(tree, module, path.name == "__init__.py"):
                if target.split(".")[0] not in ("engine", "service"):
                    continue
                other = unit(target, root)
                if other == own:
                    continue
                if other not in RANK:
                    problems.append(f"{where}:{line}: imports {target}, whose unit {other!r} has no layer")
                elif RANK[other] >= RANK[own]:
                    side = "the same layer as" if RANK[other] == RANK[own] else "a layer above"
                    problems.append(f"{where}:{line}: imports {target}: {other!r} is {side} {own!r}")
    return problems


def test_imports_point_down() -> None:
    problems = violations()
    assert not problems, "imports that point up the layers:\n" + "\n".join(problems)


def readme_units(text: str) -> list[str]:
    """The ``engine/`` entries of a Markdown package tree, in order: ``  graph/`` -> ``graph``."""
    block = re.search(r"^```[^\n]*\nengine/.*?^```", text, re.MULTILINE | re.DOTALL)
    assert block is not None, "no package tree starting with engine/"
    engine_part = re.split(r"^\S", block.group(0).split("\n", 2)[2], maxsplit=1, flags=re.MULTILINE)[0]
    return re.findall(r"^  (\w+)(?:/|\.py)\s", engine_part, re.MULTILINE)


@pytest.mark.parametrize("name", ["README.md", "docs/how-it-works.md"])
def test_package_tree_lists_the_layers_bottom_to_top(name: str) -> None:
    listed = readme_units((ROOT / name).read_text(encoding="utf-8"))
    assert sorted(listed) == sorted(u for units in LAYERS for u in units if u not in ("engine", "service", "__main__"))
    ranks = [RANK[u] for u in listed]
    assert ranks == sorted(ranks), f"{name}: the engine's entries are not in the order of LAYERS: {listed}"


def test_checker_reports_upward_sideways_and_unplaced(tmp_path: Path) -> None:
    files = {
        "engine/__init__.py": "",
        "engine/graph/__init__.py": "",
        "engine/graph/tree.py": "from engine.kernels import eisner\n\ndef f():\n    from engine.decode import lab\n",
        "engine/kernels/__init__.py": "",
        "engine/kernels/eisner.py": "from ..graph.tree import Tree\nfrom . import mst\n",
        "engine/optim/__init__.py": "",
        "engine/decode/__init__.py": "",
        "engine/data/io.py": "import engine.optim\nfrom engine import __version__\n",
        "engine/widgets/__init__.py": "",
        "service/app.py": "from engine.cli import main\n",
        "engine/cli.py": "from service.app import app\n",
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text, encoding="utf-8")
    assert violations(tmp_path) == [
        "engine/cli.py:1: imports service.app: 'service' is a layer above 'cli'",
        "engine/data/io.py:1: imports engine.optim: 'optim' is the same layer as 'data'",
        "engine/graph/tree.py:4: imports engine.decode: 'decode' is a layer above 'graph'",
        "engine/kernels/eisner.py:1: imports engine.graph.tree: 'graph' is a layer above 'kernels'",
        "engine/widgets/__init__.py: unit 'widgets' has no layer in LAYERS",
    ]
