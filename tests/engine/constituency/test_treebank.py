"""Reading and cleaning ``.mrg`` files: hand-written trees, errors with their lines, the sample's split."""

from __future__ import annotations

from pathlib import Path

import pytest
from nltk import Tree

from engine.constituency.treebank import (
    TreebankError,
    clean_label,
    clean_tree,
    file_number,
    parse_text,
    read_file,
    read_trees,
    split_by_file,
)

RAW = """
( (S
    (NP-SBJ-1 (-NONE- *) )
    (S-TPC-2 (NP-SBJ (NNP John) )
      (VP (VBD left) (ADVP|PRT (RB off)) (NP (-NONE- *T*-1)) ))
    (PRN (-LRB- -LRB-) (NP=2 (NN note) ) (-RRB- -RRB-) )
    (. .) ))
"""


def tree(text: str) -> Tree:
    return Tree.fromstring(text)


def test_cleaning_drops_traces_and_emptied_constituents_strips_tags_and_removes_x_x_unaries() -> None:
    (line, raw), = parse_text(RAW)
    assert line == 2
    # NP-SBJ-1 only held a trace: gone; the object NP too; S-TPC-2 -> S is not a unary (S has three children);
    # ADVP|PRT -> ADVP; NP=2 -> NP; -LRB- and -RRB- kept as names
    assert clean_tree(raw) == tree("(TOP (S (S (NP (NNP John)) (VP (VBD left) (ADVP (RB off))))"
                           " (PRN (-LRB- -LRB-) (NP (NN note)) (-RRB- -RRB-)) (. .)))")


def test_x_to_x_unaries_collapse_through_removed_traces() -> None:
    raw = tree("( (S (S-TPC-1 (NP-SBJ (-NONE- *)) (VP (VB go))) ))")
    # S -> S-TPC -> VP: the two S collapse into one, then S -> VP stays (a real unary)
    assert clean_tree(raw) == tree("(TOP (S (VP (VB go))))")
    assert clean_tree(tree("( (NP (NP (NP-1 (NN a)) (NN b))) )")) == tree("(TOP (NP (NP (NN a)) (NN b)))")


def test_labels() -> None:
    assert clean_label("NP-SBJ-1") == "NP"
    assert clean_label("PP-LOC=2") == "PP"
    assert clean_label("NP-SBJ=1-3") == "NP"
    assert clean_label("ADVP|PRT") == "ADVP"
    for name in ("-LRB-", "-RRB-", "-NONE-"):
        assert clean_label(name) == name
    assert clean_label("PRP$") == "PRP$"


def test_roots() -> None:
    assert clean_tree(tree("(S (NN a))")) == tree("(TOP (S (NN a)))")  # no outer bracket: wrapped
    assert clean_tree(tree("(ROOT (S (NN a)))")) == tree("(TOP (S (NN a)))")
    assert clean_tree(tree("(TOP (S (NN a)))")) == tree("(TOP (S (NN a)))")
    assert clean_tree(tree("( (NN a) )")) == tree("(TOP (NN a))")
    assert clean_tree(tree("( (S (-NONE- *)) )")) is None


@pytest.mark.parametrize(("text", "line", "problem"), [
    ("(S (NN a)))\n", 1, "unbalanced ')'"),
    ("(S (NN a))\n\n( (S (NN b)\n", 3, "unbalanced '('"),
    ("(S (NN a))\nstray (S (NN b))\n", 2, "text outside brackets: 'stray'"),
    ("(S (NN a))\n(S (NN b))\n\n  stray\n", 4, "text outside brackets: 'stray'"),
    ("(S (NN a))\nstray\n(S (NN b))\n", 2, "text outside brackets: 'stray'"),
    ("(S (NN a))\n( )\n", 2, "empty tree"),
    ("(S (NN a))\n\n(S (NN a) b)\n", 3, "'S' mixes words and constituents at 'b'"),
    ("(S (NN a b))\n", 1, "'NN' has several words at 'b'"),
    ("(S\n (NN a\n  (DT b)))\n", 3, "'NN' mixes a word and constituents"),
    ("(S\n ((NN a)))\n", 2, "a constituent without a label"),
    ("(S (NP\n ) (NN a))\n", 1, "'NP' has no children"),
    ("(S\n (NN a)\n (VP (VB b) c))\n", 3, "'VP' mixes words and constituents at 'c'"),
    ("\n(NN a)\n", 2, "a word directly under the root 'NN'"),
    ("( a )\n", 1, "'a' has no children"),
])
def test_errors_name_the_file_and_line(tmp_path: Path, text: str, line: int, problem: str) -> None:
    path = tmp_path / "bad.mrg"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(TreebankError) as info:
        read_file(path)
    assert str(info.value).startswith(f"{path}:{line}: ")
    assert problem in info.value.problem


def test_a_tree_of_traces_only_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "t.mrg"
    path.write_text("( (S (NN a)) )\n( (S (-NONE- *)) )\n", encoding="utf-8")
    with pytest.raises(TreebankError, match=r"t\.mrg:2: no words left"):
        read_file(path)


def test_files_and_folders(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "b.mrg").write_text("( (S (NN b)) )\n", encoding="utf-8")
    (tmp_path / "d" / "a.mrg").write_text("( (S (NN a)) )\n( (S (NN a2)) )\n", encoding="utf-8")
    (tmp_path / "d" / "README").write_text("not a tree", encoding="utf-8")
    (tmp_path / "c.mrg").write_text("( (S (NN c)) )", encoding="utf-8")
    trees = read_trees([tmp_path / "d", tmp_path / "c.mrg"])
    assert [t.leaves() for t in trees] == [["a"], ["a2"], ["b"], ["c"]]
    with pytest.raises(FileNotFoundError, match="no such file"):
        read_trees([tmp_path / "missing.mrg"])
    (tmp_path / "e").mkdir()
    with pytest.raises(FileNotFoundError, match="no .mrg file"):
        read_trees([tmp_path / "e"])


def test_split_by_file_ranges(tmp_path: Path) -> None:
    for number in (1, 159, 160, 179, 180, 199, 200):
        (tmp_path / f"wsj_{number:04d}.mrg").write_text(f"( (S (CD n{number})) )\n", encoding="utf-8")
    split = split_by_file(tmp_path)
    assert {name: [t.leaves()[0] for t in trees] for name, trees in split.items()} == {
        "train": ["n1", "n159"], "dev": ["n160", "n179"], "test": ["n180", "n199"]}
    assert file_number("x/wsj_0123.mrg") == 123
    with pytest.raises(ValueError, match="not a wsj_NNNN.mrg"):
        file_number("x/other.mrg")


def test_the_first_sample_file(ptb_dir: Path) -> None:
    trees = read_file(ptb_dir / "wsj_0001.mrg")
    assert len(trees) == 2
    assert trees[1] == tree("(TOP (S (NP (NNP Mr.) (NNP Vinken)) (VP (VBZ is) (NP (NP (NN chairman)) (PP (IN of)"
                            " (NP (NP (NNP Elsevier) (NNP N.V.)) (, ,) (NP (DT the) (NNP Dutch) (VBG publishing)"
                            " (NN group)))))) (. .)))")


@pytest.mark.slow
def test_the_sample_split_sizes(ptb_dir: Path) -> None:
    split = split_by_file(ptb_dir)
    assert {name: len(trees) for name, trees in split.items()} == {"train": 3396, "dev": 273, "test": 245}
    assert sum(len(t.leaves()) <= 40 for trees in split.values() for t in trees) == 3629
    labels = {node.label() for trees in split.values() for t in trees for node in t.subtrees()}
    assert "-NONE-" not in labels and not any("=" in x or "|" in x or x[1:].count("-") for x in labels
                                              if not x.startswith("-"))
