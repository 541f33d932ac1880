"""Our EVALB against a line-by-line Python transcription of the C program's counting (``evalb.c``:
``read_line``, ``massage_data``, ``modify_label``, the greedy bracket matching of ``calc_result``), on random
tree pairs over the same words whose punctuation tags agree (where deleting by the gold tag, as we do, and by
each tree's own tag, as EVALB does, are the same). The transcription reads the bracketed *string*, so it shares
no code with ``engine.constituency.evalb``."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from nltk import Tree

from engine.constituency.evalb import score_sentence

DELETE = {"TOP", "-NONE-", ",", ":", "``", "''", "."}  # COLLINS.prm DELETE_LABEL
EQ = {frozenset(("ADVP", "PRT"))}  # EQ_LABEL ADVP PRT


def label_comp(a: str, b: str) -> bool:
    return a == b or frozenset((a, b)) in EQ


def c_read_line(s: str) -> tuple[list[tuple[str, str]], list[list], int]:
    """``read_line``: terminals kept, brackets ``[start, end, label]``, length without ``-NONE-``."""
    terminals: list[tuple[str, str]] = []
    brackets: list[list] = []
    stack: list[int] = []
    length, p = 0, 0
    term = lambda c: c.isspace() or c in "()"  # noqa: E731
    while p < len(s):
        if s[p].isspace():
            p += 1
        elif s[p] == "(":
            p += 1
            start = p
            while not term(s[p]):
                p += 1
            label = s[start:p]
            q = p
            if s[q].isspace():
                while s[q].isspace():
                    q += 1
                w = q
                while not term(s[q]):
                    q += 1
                word = s[w:q]
                if s[q] == ")" and label != "-NONE-":
                    length += 1
                if s[q] == ")":
                    if label not in DELETE:
                        terminals.append((word, label))
                    p = q + 1
                    continue
            brackets.append([len(terminals), -1, label])
            stack.append(len(brackets) - 1)
        else:
            brackets[stack.pop()][1] = len(terminals)
            p += 1
    return terminals, brackets, length


def c_counts(gold: str, test: str) -> tuple[int, int, int, int, int, int]:
    """``(length, gold brackets, test brackets, matched, words, correct tags)`` as ``calc_result`` counts them."""
    t1, b1, length = c_read_line(gold)
    t2, b2, _ = c_read_line(test)
    assert [w for w, _ in t1] == [w for w, _ in t2]
    for brackets in (b1, b2):  # massage_data: zero elements, modify_label, DELETE_LABEL
        for b in brackets:
            cut = min((b[2].find(c) for c in "-=" if c in b[2]), default=len(b[2]))
            b[2] = b[2][:cut]
            b.append(b[0] == b[1] or b[2] in DELETE)
    matched_test = [False] * len(b2)
    match = 0
    for start1, end1, label1, deleted1 in b1:
        if deleted1:
            continue
        for j, (start2, end2, label2, deleted2) in enumerate(b2):
            if not deleted2 and not matched_test[j] and (start1, end1) == (start2, end2) and label_comp(label1, label2):
                matched_test[j] = True
                match += 1
                break
    tags = sum(label_comp(a, b) for (_, a), (_, b) in zip(t1, t2, strict=True))
    return length, sum(not b[3] for b in b1), sum(not b[3] for b in b2), match, len(t1), tags


PHRASES = ("S", "NP", "VP", "PP", "ADVP", "PRT", "NP-SBJ", "PP-LOC=2")
TAGS = ("DT", "NN", "VB", "IN", "RB", ",", ".", "``", "-NONE-")


@st.composite
def bracketing(draw: st.DrawFn, leaves: list[Tree], depth: int = 0) -> list[Tree]:
    """A random list of constituents over ``leaves`` in order (unary chains and duplicate brackets included)."""
    if len(leaves) == 1 and draw(st.booleans()):
        return list(leaves)
    cuts = sorted(draw(st.sets(st.integers(1, len(leaves) - 1), max_size=3))) if len(leaves) > 1 else []
    parts = [leaves[a:b] for a, b in zip([0, *cuts], [*cuts, len(leaves)], strict=True)]
    out = []
    for part in parts:
        children = draw(bracketing(part, depth + 1)) if depth < 4 and (len(part) > 1 or draw(st.booleans())) \
            else part
        out.append(Tree(draw(st.sampled_from(PHRASES)), children))
    return out


@st.composite
def pairs(draw: st.DrawFn) -> tuple[Tree, Tree]:
    n = draw(st.integers(1, 9))
    tags = draw(st.lists(st.sampled_from(TAGS[:-1]), min_size=n, max_size=n))
    gold_leaves = [Tree(tag, [f"w{i}"]) for i, tag in enumerate(tags)]
    # the test tree: other tags where the gold tag is not punctuation; no traces
    test_leaves = [Tree(tag if tag in DELETE else draw(st.sampled_from(("DT", "NN", "VB"))), [f"w{i}"])
                   for i, tag in enumerate(tags)]
    gold_with_traces = list(gold_leaves)
    for at in sorted(draw(st.lists(st.integers(0, n), max_size=2)), reverse=True):
        gold_with_traces.insert(at, Tree("-NONE-", ["*T*-1"]))
    return Tree("TOP", draw(bracketing(gold_with_traces))), Tree("TOP", draw(bracketing(test_leaves)))


@settings(max_examples=200, deadline=None)
@given(pairs())
def test_counts_equal_the_c_programs(pair: tuple[Tree, Tree]) -> None:
    gold, test = pair
    ours = score_sentence(gold, test)
    expected = c_counts(" ".join(str(gold).split()), " ".join(str(test).split()))
    assert (ours.length, ours.gold, ours.test, ours.matched, ours.words, ours.tags_correct) == expected
