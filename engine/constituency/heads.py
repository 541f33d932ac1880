"""Collins (1999, appendix A) head rules, as Epic's ``HeadFinder.collins`` (after Stanford's CollinsHeadFinder).

For a parent label the table gives a search direction and a priority list: for each category of the list in
turn, scan the children in that direction and take the first one with that label; if no category matches, take
the first child in the direction. ``NP`` has Collins' special rule (``np_head``). The coordination refinement
of Collins' thesis (a head preceded by ``CC`` moves two to the left) is not applied, as in Epic.
"""

from __future__ import annotations

from collections.abc import Sequence

LEFT, RIGHT = "left", "right"

HEAD_RULES: dict[str, tuple[str, tuple[str, ...]]] = {
    "ADJP": (LEFT, ("NNS", "QP", "NN", "$", "ADVP", "JJ", "VBN", "VBG", "ADJP", "JJR", "NP", "JJS", "DT", "FW",
                    "RBR", "RBS", "SBAR", "RB")),
    "ADVP": (RIGHT, ("RB", "RBR", "RBS", "FW", "ADVP", "TO", "CD", "JJR", "JJ", "IN", "NP", "JJS", "NN")),
    "CONJP": (RIGHT, ("CC", "RB", "IN")),
    "FRAG": (RIGHT, ()),
    "INTJ": (LEFT, ()),
    "LST": (RIGHT, ("LS", ":")),
    "NAC": (LEFT, ("NN", "NNS", "NNP", "NNPS", "NP", "NAC", "EX", "$", "CD", "QP", "PRP", "VBG", "JJ", "JJS",
                   "JJR", "ADJP", "FW")),
    "NX": (LEFT, ()),
    "PP": (RIGHT, ("IN", "TO", "VBG", "VBN", "RP", "FW")),
    "PRN": (LEFT, ()),
    "PRT": (RIGHT, ("RP",)),
    "QP": (LEFT, ("$", "IN", "NNS", "NN", "JJ", "RB", "DT", "CD", "NCD", "QP", "JJR", "JJS")),
    "RRC": (RIGHT, ("VP", "NP", "ADVP", "ADJP", "PP")),
    "S": (LEFT, ("TO", "IN", "VP", "S", "SBAR", "ADJP", "UCP", "NP")),
    "SBAR": (LEFT, ("WHNP", "WHPP", "WHADVP", "WHADJP", "IN", "DT", "S", "SQ", "SINV", "SBAR", "FRAG")),
    "SBARQ": (LEFT, ("SQ", "S", "SINV", "SBARQ", "FRAG")),
    "SINV": (LEFT, ("VBZ", "VBD", "VBP", "VB", "MD", "VP", "S", "SINV", "ADJP", "NP")),
    "SQ": (LEFT, ("VBZ", "VBD", "VBP", "VB", "MD", "VP", "SQ")),
    "UCP": (RIGHT, ()),
    "VP": (LEFT, ("TO", "VBD", "VBN", "MD", "VBZ", "VB", "VBG", "VBP", "VP", "ADJP", "NN", "NNS", "NP")),
    "WHADJP": (LEFT, ("CC", "WRB", "JJ", "ADJP")),
    "WHADVP": (RIGHT, ("CC", "WRB")),
    "WHNP": (LEFT, ("WDT", "WP", "WP$", "WHADJP", "WHPP", "WHNP")),
    "WHPP": (RIGHT, ("IN", "TO", "FW")),
    "X": (RIGHT, ()),
    "TOP": (LEFT, ()),
}
_NP_STEPS: tuple[tuple[str, tuple[str, ...]], ...] = (  # Collins' NP rule after the POS check
    (RIGHT, ("NN", "NNP", "NNPS", "NNS", "NX", "POS", "JJR")),
    (LEFT, ("NP",)),
    (RIGHT, ("$", "ADJP", "PRN")),
    (RIGHT, ("CD",)),
    (RIGHT, ("JJ", "JJS", "RB", "QP")),
)


def _scan(children: Sequence[str], direction: str, categories: Sequence[str]) -> int | None:
    order = range(len(children)) if direction == LEFT else range(len(children) - 1, -1, -1)
    for category in categories:
        for i in order:
            if children[i] == category:
                return i
    return None


def np_head(children: Sequence[str]) -> int:
    """Collins' NP rule: a final ``POS``; else the rightmost noun-like tag; else the leftmost ``NP``; else the
    rightmost of ``$ ADJP PRN``, then ``CD``, then ``JJ JJS RB QP``; else the last child."""
    if children[-1] == "POS":
        return len(children) - 1
    for direction, categories in _NP_STEPS:
        # each step's categories form one set: the first child (in the direction) with any of them
        order = range(len(children)) if direction == LEFT else range(len(children) - 1, -1, -1)
        for i in order:
            if children[i] in categories:
                return i
    return len(children) - 1


def head_child(label: str, children: Sequence[str]) -> int:
    """Index of the head among ``children`` (their labels) of a ``label`` constituent."""
    if not children:
        raise ValueError("a constituent without children has no head")
    if label == "NP":
        return np_head(children)
    direction, categories = HEAD_RULES.get(label, (LEFT, ()))
    found = _scan(children, direction, categories)
    if found is not None:
        return found
    return 0 if direction == LEFT else len(children) - 1
