"""Declared first-order feature templates (McDonald, Crammer & Pereira 2005, Table 1).

A template names token attributes of the head (``h.*``) and of the dependent (``d.*``) and a
context: ``none`` (the conjunction alone), ``dir`` (arc direction) or ``dist`` (direction and
binned distance). McDonald et al. add every feature both alone and conjoined with direction and
distance; ``expand`` does that. Attributes:

- ``form``, ``lower``, ``upos``, ``xpos``, ``pre5`` (first 5 characters, lowercased), ``suf3``,
  ``shape`` (character classes, repeats collapsed: ``Xx`` for "Hello");
- ``upos_prev`` / ``upos_next`` (tag of the word before / after; BOS and EOS at the edges) and the same
  for ``xpos``, ``lower``, ``suf3`` and ``shape``.

``between`` templates are the "in-between POS" features: one feature per UPOS tag that occurs
strictly between head and dependent, conjoined with the head and dependent UPOS and the direction.

Later issues add second-order templates through the same declared-list mechanism.
"""

from __future__ import annotations

from dataclasses import dataclass

TOKEN_ATTRIBUTES = (
    "form", "lower", "upos", "xpos", "pre5", "suf3", "shape",
    "upos_prev", "upos_next", "xpos_prev", "xpos_next",
    "lower_prev", "lower_next", "suf3_prev", "suf3_next", "shape_prev", "shape_next",
)
CONTEXTS = ("none", "dir", "dist")


@dataclass(frozen=True)
class ArcTemplate:
    """One conjunction of head attributes, dependent attributes and a context."""

    head: tuple[str, ...]
    dep: tuple[str, ...]
    context: str = "none"
    between: bool = False

    def __post_init__(self) -> None:
        for attr in self.head + self.dep:
            if attr not in TOKEN_ATTRIBUTES:
                raise ValueError(f"unknown token attribute {attr!r}; known: {', '.join(TOKEN_ATTRIBUTES)}")
        if self.context not in CONTEXTS:
            raise ValueError(f"unknown context {self.context!r}; known: {', '.join(CONTEXTS)}")

    @property
    def name(self) -> str:
        parts = [f"h.{a}" for a in self.head] + [f"d.{a}" for a in self.dep]
        if self.between:
            parts.insert(len(self.head), "b.upos")
        return "+".join(parts) + f"|{self.context}"

    @classmethod
    def parse(cls, name: str) -> ArcTemplate:
        """Inverse of ``name``: ``"h.upos+b.upos+d.upos|dir"``."""
        body, _, context = name.partition("|")
        head, dep, between = [], [], False
        for part in body.split("+"):
            side, _, attr = part.partition(".")
            if side == "b" and attr == "upos":
                between = True
            elif side == "h":
                head.append(attr)
            elif side == "d":
                dep.append(attr)
            else:
                raise ValueError(f"bad feature template {name!r}: part {part!r}")
        return cls(tuple(head), tuple(dep), context or "none", between)


def _t(head: str, dep: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    return tuple(a for a in head.split() if a), tuple(a for a in dep.split() if a)


_MCDONALD_2005 = [
    # unigram features of head and dependent
    _t("form upos", ""), _t("form", ""), _t("upos", ""), _t("xpos", ""),
    _t("", "form upos"), _t("", "form"), _t("", "upos"), _t("", "xpos"),
    _t("pre5 upos", ""), _t("", "pre5 upos"), _t("suf3", ""), _t("", "suf3"),
    # bigram features
    _t("form upos", "form upos"), _t("upos", "form upos"), _t("form", "form upos"),
    _t("form upos", "upos"), _t("form upos", "form"), _t("lower", "lower"), _t("upos", "upos"),
    _t("xpos", "xpos"), _t("pre5", "pre5"), _t("pre5 upos", "upos"), _t("upos", "pre5 upos"),
    _t("lower", "upos"), _t("upos", "lower"),
    # surrounding-tag features
    _t("upos upos_next", "upos_prev upos"), _t("upos_prev upos", "upos_prev upos"),
    _t("upos upos_next", "upos upos_next"), _t("upos_prev upos", "upos upos_next"),
    _t("xpos xpos_next", "xpos_prev xpos"), _t("xpos_prev xpos", "xpos xpos_next"),
    # three-tag back-offs of the surrounding-tag features (as in MSTParser's implementation)
    _t("upos", "upos_prev upos"), _t("upos", "upos upos_next"),
    _t("upos_prev upos", "upos"), _t("upos upos_next", "upos"),
    # lexical head or dependent with the other side's fine tag
    _t("lower", "xpos"), _t("xpos", "lower"),
    # suffixes with tags, and a word with the other side's tag context
    _t("suf3 upos", "upos"), _t("upos", "suf3 upos"),
    _t("lower", "upos_prev upos"), _t("lower", "upos upos_next"),
    _t("upos_prev upos", "lower"), _t("upos upos_next", "lower"),
]


def expand(pairs: list[tuple[tuple[str, ...], tuple[str, ...]]]) -> list[ArcTemplate]:
    """Each conjunction alone and conjoined with direction + binned distance (McDonald et al. 2005)."""
    out = []
    for head, dep in pairs:
        out.append(ArcTemplate(head, dep, "none" if head and dep else "dir"))
        out.append(ArcTemplate(head, dep, "dist"))
    return out


# Words around the head and the dependent, word shapes and suffix contexts: evidence that does not go
# through the tagger, so it is still right when a predicted tag is wrong. Chosen on EWT dev with predicted
# (jackknifed) tags: a first-order model gains 0.7 UAS (82.6 -> 83.2, 5 epochs, with 2^23 buckets), the
# whole second-order pipeline 0.8 (84.75 -> 85.57).
_LEXICAL_CONTEXT = [
    _t("lower", "lower_prev"), _t("lower", "lower_next"), _t("lower_prev", "lower"), _t("lower_next", "lower"),
    _t("upos lower_next", "upos"), _t("upos", "upos lower_next"), _t("lower_prev upos", "upos"),
    _t("upos", "lower_prev upos"),
    _t("shape", "shape"), _t("shape upos", "upos"), _t("upos", "shape upos"), _t("suf3", "suf3"),
    _t("suf3_prev suf3", "upos"), _t("upos", "suf3 suf3_next"), _t("suf3", "suf3_prev"), _t("suf3_next", "suf3"),
]


def default_first_order() -> list[ArcTemplate]:
    """The first-order template list of the shipped models."""
    return expand(_MCDONALD_2005) + expand(_LEXICAL_CONTEXT) + [
        ArcTemplate(("upos",), ("upos",), "dir", between=True),
        ArcTemplate(("upos",), ("upos",), "dist", between=True),
        ArcTemplate(("xpos",), ("xpos",), "dir", between=True),
    ]
