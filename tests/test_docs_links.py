"""The documentation's relative links resolve, and its package trees name paths that exist.

Checked files: README.md, CHANGELOG.md and every ``docs/**/*.md``. A link is a Markdown inline link or
image, ``[text](target)`` / ``![alt](target)``, outside fenced code blocks and inline code spans.
External targets (``http:``, ``https:``, ``mailto:``) are not fetched. A relative target must name an
existing file or directory, resolved from the linking file's directory; a ``#fragment`` on a Markdown
target must match one of its headings as GitHub turns headings into anchors.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

FORWARD_REFERENCES = {
    # Pages another engineer is writing in parallel (issue 21); the README links them already.
    # Remove each entry once its page exists.
    "docs/performance.md",
    "docs/deployment.md",
}

FENCE = re.compile(r"^(```|~~~).*?^\1[^\n]*$", re.MULTILINE | re.DOTALL)
CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+?\1", re.DOTALL)
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$", re.MULTILINE)
EXTERNAL = re.compile(r"^[a-z][a-z0-9+.-]*:", re.IGNORECASE)


def doc_files(root: Path = ROOT) -> list[Path]:
    """The Markdown files whose links are checked."""
    files = [root / "README.md", root / "CHANGELOG.md", *sorted((root / "docs").rglob("*.md"))]
    return [f for f in files if f.is_file()]


def strip_code(text: str) -> str:
    """Text without fenced code blocks and inline code spans, whose brackets are not links."""
    return CODE_SPAN.sub("", FENCE.sub("", text))


def link_targets(text: str) -> list[str]:
    """Targets of the inline links and images of a Markdown text."""
    return LINK.findall(strip_code(text))


def anchor(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).replace("`", "").replace("*", "")
    text = re.sub(r"[^\w\- ]", "", text.strip().lower())
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """The anchors of a Markdown file's headings (repeated headings get -1, -2, ... as on GitHub)."""
    seen: dict[str, int] = {}
    result = set()
    for heading in HEADING.findall(FENCE.sub("", path.read_text(encoding="utf-8"))):
        base = anchor(heading)
        n = seen.get(base, 0)
        seen[base] = n + 1
        result.add(base if n == 0 else f"{base}-{n}")
    return result


def dead_links(path: Path, root: Path = ROOT, allowed: frozenset[str] = frozenset()) -> list[str]:
    """The relative links of one Markdown file that do not resolve, as ``target (reason)`` strings.

    ``allowed``: repository-relative paths that may be missing (forward references); once such a file
    exists, links to it are checked like any other.
    """
    problems = []
    for target in link_targets(path.read_text(encoding="utf-8")):
        if EXTERNAL.match(target):
            continue
        file_part, _, fragment = target.partition("#")
        resolved = (path.parent / file_part).resolve() if file_part else path.resolve()
        try:
            relative = resolved.relative_to(root.resolve()).as_posix()
        except ValueError:
            problems.append(f"{target} (outside the repository)")
            continue
        if not resolved.exists():
            if relative not in allowed:
                problems.append(f"{target} (no such file)")
        elif fragment and resolved.suffix == ".md" and fragment not in anchors(resolved):
            problems.append(f"{target} (no heading with anchor #{fragment})")
    return problems


def tree_entries(text: str) -> list[str]:
    """Paths named by a Markdown file's package tree: the first fenced block that starts with ``engine/``.

    Each entry line is ``<indent><name>/  comment`` (a directory) or ``<indent><name>.<ext>  comment`` (a
    file); indentation nests an entry in the last less-indented directory. Other lines (wrapped comments)
    are ignored.
    """
    for block in re.findall(r"^```[^\n]*\n(.*?)^```", text, re.MULTILINE | re.DOTALL):
        if not block.startswith("engine/"):
            continue
        stack: list[tuple[int, str]] = []
        found = []
        for line in block.splitlines():
            match = re.match(r"^( *)(?:([\w.-]+)/|([\w-]+\.\w+))(?:\s|$)", line)
            if not match:
                continue
            indent = len(match.group(1))
            while stack and stack[-1][0] >= indent:
                stack.pop()
            parents = [p for _, p in stack]
            if match.group(2):
                stack.append((indent, match.group(2)))
                found.append("/".join([*parents, match.group(2)]))
            else:
                found.append("/".join([*parents, match.group(3)]))
        return found
    return []


@pytest.mark.parametrize("path", doc_files(), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_relative_links_resolve(path: Path) -> None:
    assert dead_links(path, allowed=frozenset(FORWARD_REFERENCES)) == []


@pytest.mark.parametrize("name", ["README.md", "docs/how-it-works.md"])
def test_package_tree_names_existing_paths(name: str) -> None:
    entries = tree_entries((ROOT / name).read_text(encoding="utf-8"))
    assert {"engine", "service", "models", "bench", "tests"} <= set(entries)
    missing = [e for e in entries if not (ROOT / e).exists()]
    assert missing == []


def test_checker_reports_dead_links_and_anchors(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "page.md").write_text("# A page\n\n## Tried and dropped\n", encoding="utf-8")
    readme = tmp_path / "README.md"
    readme.write_text(
        "[ok](docs/page.md) [anchor](docs/page.md#tried-and-dropped) [web](https://example.org/x)\n"
        "[gone](docs/missing.md) [bad anchor](docs/page.md#nowhere) ![img](docs/none.png)\n"
        "[later](docs/later.md) `[code](docs/not-a-link.md)`\n"
        "```\n[fenced](docs/not-a-link-either.md)\n```\n",
        encoding="utf-8",
    )
    problems = dead_links(readme, root=tmp_path, allowed=frozenset({"docs/later.md"}))
    assert problems == [
        "docs/missing.md (no such file)",
        "docs/page.md#nowhere (no heading with anchor #nowhere)",
        "docs/none.png (no such file)",
    ]


def test_anchor_follows_github() -> None:
    assert anchor("Against the issue's targets on dev") == "against-the-issues-targets-on-dev"
    assert anchor("en_ewt-o1: first-order, exact inference") == "en_ewt-o1-first-order-exact-inference"
    assert anchor("Approximation-aware training (Gormley, Dredze & Eisner 2015)") == (
        "approximation-aware-training-gormley-dredze--eisner-2015")
    assert anchor("HTTP API: `python -m service`") == "http-api-python--m-service"


def test_tree_parser_nests_by_indentation() -> None:
    readme = ("text\n```\nengine/   x\n  text/   y\n               wrapped comment, not.an entry\n"
              "  cli.py  z\nservice/\n  jobs/\n```\n")
    assert tree_entries(readme) == ["engine", "engine/text", "engine/cli.py", "service", "service/jobs"]
