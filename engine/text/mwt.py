"""Multiword tokens: which surface tokens are several syntactic words, learned from a treebank.

From the training tokens (``engine.text.treebank_text.GoldToken``) we count, per lowercased surface
form, how often it is each multiword analysis and how often a plain token. A form seen in training
gets its majority analysis. An unseen form can still be split by a *suffix rule*: a word that ends
many different training multiword tokens whose other part is the rest of the surface (English
``'s``, ``n't``, ``'m``) becomes a rule when at least ``min_types`` distinct forms support it and
most training tokens ending in it (longer than it) are split there. The words of a split keep the
surface's characters (``Don't`` -> ``Do n't``); an analysis that does not spell the surface (``au`` ->
``à le``) is written lowercased, capitalised or upper-cased like the surface.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

from engine.text.treebank_text import GoldToken


def _spelled(surface: str, words: list[str]) -> list[str] | None:
    """``words`` cut out of ``surface`` if their concatenation spells it (ignoring case), else None."""
    if "".join(words).lower() != surface.lower() or len(surface.lower()) != len(surface):
        return None
    out, pos = [], 0
    for w in words:
        out.append(surface[pos:pos + len(w)])
        pos += len(w)
    return out


def _cased(surface: str, words: list[str]) -> list[str]:
    if len(surface) > 1 and surface.isupper():
        return [w.upper() for w in words]
    if surface[:1].isupper():
        return [words[0][:1].upper() + words[0][1:], *words[1:]]
    return list(words)


@dataclass
class MultiwordExpander:
    """``exact``: lowercased surface -> lowercased words; ``suffixes``: words split off unseen forms."""

    exact: dict[str, list[str]] = field(default_factory=dict)
    suffixes: list[str] = field(default_factory=list)  # longest first
    seen: set[str] = field(default_factory=set)  # lowercased forms seen unsplit that a suffix rule matches

    @classmethod
    def train(cls, tokens: Iterable[GoldToken], *, min_types: int = 3, min_ratio: float = 0.5) -> MultiwordExpander:
        analyses: dict[str, Counter[tuple[str, ...]]] = defaultdict(Counter)
        plain: Counter[str] = Counter()
        for tok in tokens:
            low = tok.form.lower()
            if len(tok.words) > 1:
                analyses[low][tuple(w.lower() for w in tok.words)] += 1
            else:
                plain[low] += 1
        exact = {}
        for low, counter in analyses.items():
            words, count = counter.most_common(1)[0]
            if count > plain[low]:
                exact[low] = list(words)
        # suffix rules: last word of concatenative two-part splits
        support: dict[str, set[str]] = defaultdict(set)
        split_count: Counter[str] = Counter()
        for low, counter in analyses.items():
            for words, count in counter.items():
                if len(words) == 2 and "".join(words) == low and words[0]:
                    support[words[1]].add(low)
                    split_count[words[1]] += count
        suffixes = []
        for suffix, forms in support.items():
            if len(forms) < min_types:
                continue
            ending = sum(c for form, c in plain.items() if form.endswith(suffix) and len(form) > len(suffix))
            if split_count[suffix] >= min_ratio * (split_count[suffix] + ending):
                suffixes.append(suffix)
        suffixes.sort(key=lambda s: (-len(s), s))
        # forms training saw unsplit that a suffix rule would split: keep them whole
        seen = {low for low in set(plain) | set(analyses) if low not in exact
                and any(low.endswith(s) and len(low) > len(s) for s in suffixes)}
        return cls(exact, suffixes, seen)

    def expand(self, surface: str) -> list[str]:
        """The words of a surface token (a one-element list when it is a single word)."""
        low = surface.lower()
        words = self.exact.get(low)
        if words is None:
            if low in self.seen:
                return [surface]
            for suffix in self.suffixes:
                if low.endswith(suffix) and len(low) > len(suffix):
                    words = [low[: -len(suffix)], suffix]
                    break
            else:
                return [surface]
        return _spelled(surface, words) or _cased(surface, words)

    def to_meta(self) -> dict:
        return {"exact": self.exact, "suffixes": self.suffixes, "seen": sorted(self.seen)}

    @classmethod
    def from_meta(cls, meta: dict) -> MultiwordExpander:
        try:
            exact = {str(k): [str(w) for w in v] for k, v in meta["exact"].items()}
            suffixes = [str(s) for s in meta["suffixes"]]
            seen = {str(s) for s in meta["seen"]}
        except (KeyError, TypeError, AttributeError) as e:
            raise ValueError(f"bad multiword-token state: {e}") from None
        if any(len(v) < 2 or not all(v) for v in exact.values()) or not all(suffixes):
            raise ValueError("bad multiword-token state: empty words or single-word analyses")
        return cls(exact, suffixes, seen)
