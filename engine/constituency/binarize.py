"""Head-outward binarisation, the two-layer anchored form, and back (``../shared/design/epic.md`` §0).

**Binarisation** (Epic's ``Trees.binarize`` with Collins heads, horizontal order 0, vertical order 1): a node
``A`` with children ``L_1 .. L_h H R_1 .. R_m`` (``H`` its head child, ``heads.head_child``) becomes a chain of
binary nodes grown outward from the head, right siblings first::

    A -> L_1 @A,  @A -> L_2 @A, ...,  @A -> L_h @A,  @A -> @A R_m, ...,  @A -> H R_1

so the innermost node joins ``H`` with ``R_1``, and the outermost keeps the label ``A``. Nodes with one or two
children are left as they are. ``debinarize`` splices every ``@`` node back into its parent.

**Anchored form** (``grammar.AnchoredTree``): the nodes of a binarised tree that cover the same span form a
unary chain ``A_0 -> A_1 -> ... -> A_k``; its bottom ``A_k`` is the span's bot label (a binary node or a tag),
its top ``A_0`` the top label, and the whole chain one unary rule ``(A_0, A_k, (A_1 .. A_{k-1}))``, the identity
``(A, A, ())`` when the span has a single node. ``to_anchored`` gives the ``n`` tags, ``2n - 1`` unary items
and ``n - 1`` binary items of a tree; ``from_anchored`` rebuilds the (debinarised) tree with its unary chains
re-expanded and ``TOP`` kept, so ``from_anchored(to_anchored(binarize(t))) == t``.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence

import numpy as np
from nltk import Tree  # type: ignore[import-untyped]

from engine.constituency.grammar import AnchoredTree, Grammar
from engine.constituency.heads import head_child

AT = "@"

Chain = tuple[str, ...]  # the labels of one span, top to bottom


def is_preterminal(node: Tree) -> bool:
    """A tag over its word."""
    return len(node) == 1 and not isinstance(node[0], Tree)


def binarize(tree: Tree) -> Tree:
    """The head-outward binarised copy of a cleaned tree (module docstring)."""
    if is_preterminal(tree):
        return Tree(tree.label(), [tree[0]])
    label = tree.label()
    if label.startswith(AT):
        raise ValueError(f"label {label!r} starts with {AT!r}, which marks binarisation's intermediate nodes")
    children = [binarize(child) for child in tree]
    if len(children) <= 2:
        return Tree(label, children)
    h = head_child(label, [child.label() for child in tree])
    node = children[h]
    for right in children[h + 1:]:
        node = Tree(AT + label, [node, right])
    for left in reversed(children[:h]):
        node = Tree(AT + label, [left, node])
    node.set_label(label)
    return node


def debinarize(tree: Tree) -> Tree:
    """``tree`` with every ``@`` node replaced by its children."""
    if is_preterminal(tree):
        return Tree(tree.label(), [tree[0]])
    children: list[Tree] = []
    for child in tree:
        plain = debinarize(child)
        children += list(plain) if plain.label().startswith(AT) else [plain]
    return Tree(tree.label(), children)


def spans(tree: Tree) -> tuple[list[str], list[tuple[int, int, Chain]], list[tuple[int, int, int, str, str, str]]]:
    """Words, ``(i, j, chain)`` per span and ``(i, k, j, A, B, C)`` per binary node of a binarised tree.

    ``chain`` is the span's labels top to bottom (one label when the span has a single node)."""
    words: list[str] = []
    chains: list[tuple[int, int, Chain]] = []
    binaries: list[tuple[int, int, int, str, str, str]] = []

    def visit(node: Tree) -> str:  # appends the span's items, returns its top label
        i, labels = len(words), [node.label()]
        while not is_preterminal(node) and len(node) == 1:
            node = node[0]
            labels.append(node.label())
        if is_preterminal(node):
            words.append(node[0])
        elif len(node) == 2:
            left_top = visit(node[0])
            k = len(words)
            right_top = visit(node[1])
            binaries.append((i, k, len(words), node.label(), left_top, right_top))
        else:
            raise ValueError(f"{node.label()!r} has {len(node)} children: binarize the tree first")
        chains.append((i, len(words), tuple(labels)))
        return labels[0]

    visit(tree)
    return words, chains, binaries


_LOOKUPS: dict[int, tuple[dict[tuple[int, int, int], int], dict[tuple[int, int, Chain], int]]] = {}


def rule_lookup(grammar: Grammar) -> tuple[dict[tuple[int, int, int], int], dict[tuple[int, int, Chain], int]]:
    """``(A, B, C) -> r`` and ``(A, B, chain) -> u`` of ``grammar`` (cached while the grammar lives)."""
    key = id(grammar)
    if key not in _LOOKUPS:
        binary = {(int(a), int(b), int(c)): r for r, (a, b, c) in enumerate(grammar.binary)}
        unary = {(int(a), int(b), grammar.chains[u]): u for u, (a, b) in enumerate(grammar.unary)}
        _LOOKUPS[key] = (binary, unary)
        weakref.finalize(grammar, _LOOKUPS.pop, key, None)
    return _LOOKUPS[key]


def _label(grammar: Grammar, name: str) -> int:
    try:
        return grammar.index[name]
    except KeyError:
        raise ValueError(f"label {name!r} is not in the grammar") from None


def to_anchored(tree: Tree, grammar: Grammar) -> AnchoredTree:
    """The anchored items of a binarised tree; a label or rule the grammar lacks raises ``ValueError``."""
    words, chains, binaries = spans(tree)
    binary_of, unary_of = rule_lookup(grammar)
    tags = np.zeros(len(words), dtype=np.int64)
    unary = np.zeros((len(chains), 3), dtype=np.int64)
    for t, (i, j, chain) in enumerate(chains):
        top, bot = _label(grammar, chain[0]), _label(grammar, chain[-1])
        key = (top, bot, chain[1:-1])
        if key not in unary_of:
            raise ValueError(f"unary rule {' -> '.join(chain)} over words {i}..{j} is not in the grammar")
        unary[t] = (i, j, unary_of[key])
        if j == i + 1:
            tags[i] = bot
    binary = np.zeros((len(binaries), 4), dtype=np.int64)
    for b, (i, k, j, a, left, right) in enumerate(binaries):
        key3 = (_label(grammar, a), _label(grammar, left), _label(grammar, right))
        if key3 not in binary_of:
            raise ValueError(f"binary rule {a} -> {left} {right} over words {i}..{j} is not in the grammar")
        binary[b] = (i, k, j, binary_of[key3])
    return AnchoredTree(tags=tags, unary=unary, binary=binary, words=tuple(words))


def from_anchored(anchored: AnchoredTree, grammar: Grammar, words: Sequence[str] | None = None) -> Tree:
    """The debinarised tree of anchored items (``words`` defaults to ``anchored.words``): ``@`` nodes spliced
    out, unary chains re-expanded, ``TOP`` kept. Items that do not form one tree raise ``ValueError``."""
    words = anchored.words if words is None else tuple(words)
    n = anchored.n
    if len(words) != n:
        raise ValueError(f"{len(words)} words for {n} tags")
    if len(anchored.unary) != 2 * n - 1 or len(anchored.binary) != n - 1:
        raise ValueError(f"{len(anchored.unary)} unary and {len(anchored.binary)} binary items for {n} words: "
                         f"a tree has {2 * n - 1} and {n - 1}")
    unary_at = {(int(i), int(j)): int(u) for i, j, u in anchored.unary}
    split_at = {(int(i), int(j)): (int(k), int(r)) for i, k, j, r in anchored.binary}
    if len(unary_at) != len(anchored.unary) or len(split_at) != len(anchored.binary):
        raise ValueError("two items on the same span")
    labels = grammar.labels

    def build(i: int, j: int, expected: int | None) -> Tree:
        if (i, j) not in unary_at:
            raise ValueError(f"no unary item on span {i}..{j}")
        u = unary_at[(i, j)]
        top, bot = (int(x) for x in grammar.unary[u])
        if expected is not None and top != expected:
            raise ValueError(f"span {i}..{j} has top {labels[top]!r}, its parent's rule wants {labels[expected]!r}")
        if j == i + 1:
            if int(anchored.tags[i]) != bot:
                raise ValueError(f"word {i} is tagged {labels[int(anchored.tags[i])]!r} under a unary to "
                                 f"{labels[bot]!r}")
            node = Tree(labels[bot], [words[i]])
        else:
            if (i, j) not in split_at:
                raise ValueError(f"no binary item on span {i}..{j}")
            k, r = split_at[(i, j)]
            a, b, c = (int(x) for x in grammar.binary[r])
            if a != bot or not i < k < j:
                raise ValueError(f"binary item {i}..{k}..{j} does not fit under {labels[bot]!r}")
            node = Tree(labels[a], [build(i, k, b), build(k, j, c)])
        chain = grammar.chains[u]
        if top == bot and not chain:
            return node
        for label in (labels[top], *chain)[::-1]:
            node = Tree(label, [node])
        return node

    return debinarize(build(0, n, grammar.top))
