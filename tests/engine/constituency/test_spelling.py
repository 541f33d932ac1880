"""Words respelled as the Penn Treebank spells them (``engine.constituency.spelling``)."""

from __future__ import annotations

from engine.constituency.spelling import ptb_words


def test_ptb_words() -> None:
    assert ptb_words(['"', "a", "(", "b", ")", '"', "[", "]", "{", "}", '"']) == [
        "``", "a", "-LRB-", "b", "-RRB-", "''", "-LSB-", "-RSB-", "-LCB-", "-RCB-", "``"]
    assert ptb_words(["\u201cHi\u201d", "\u201c", "\u201d", "\u2018", "\u2019", "n\u2019t", "\u2026", "\u2014",
                      "\u2013", "New York", "f(x)"]) == [
        "\u201cHi\u201d", "``", "''", "`", "'", "n't", "...", "--", "--", "New_York", "f-LRB-x-RRB-"]
    treebank = ["``", "-LRB-", "n't", "''", "--", "...", "$", "3.5", "1\\/2"]
    assert ptb_words(treebank) == treebank
    assert ptb_words(["C:\\", "a\\\\"]) == ["C:-BSL-", "a-BSL--BSL-"]
