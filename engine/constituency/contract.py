"""What the command line and the service need to know about constituency models before loading one: the
formalism's name, the input and output formats and training inference methods they accept, and the errors they
report. Nothing here imports the parser itself (nor nltk, whose import takes about a second), so a dependency
command does not pay for the constituency code it never runs (issue 20: the whole command's time counts)."""

from __future__ import annotations

import os

from engine.model.store import ModelError, read_manifest

FORMALISM = "constituency"
INPUT_FORMATS = ("tokens", "ptb")
OUTPUT_FORMATS = ("ptb", "json")
INFERENCE = ("ep", "adf", "exact", "independent")  # how training computes log Z and its gradient (objective.py)


class CommandError(ValueError):
    """A command-line request a constituency model cannot serve (``error: ...``, exit status 2)."""


class EvalbError(ValueError):
    """Gold and test trees that cannot be compared (different numbers of trees or of words, other words)."""


class TreebankError(ValueError):
    """Malformed bracketed input; ``str(e)`` is ``"FILE:LINE: problem"``."""

    def __init__(self, path: str | os.PathLike[str], line: int, problem: str) -> None:
        self.path, self.line, self.problem = os.fspath(path), line, problem
        super().__init__(f"{self.path}:{line}: {problem}")

    def __reduce__(self) -> tuple[type[TreebankError], tuple[str, int, str]]:
        return type(self), (self.path, self.line, self.problem)


def is_model(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is a model directory whose manifest says ``formalism: "constituency"``."""
    try:
        return read_manifest(path).get("formalism") == FORMALISM
    except ModelError:
        return False
