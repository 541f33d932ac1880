"""The tagger's feature helpers against the numpy functions they stand in for."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from engine.text.tagger_features import _member

codes = st.lists(st.integers(0, 40), max_size=30)


@given(codes, codes)
def test_membership_in_a_sorted_table_is_numpys_isin(keys: list[int], known: list[int]) -> None:
    """``_member`` (binary search in a sorted table, duplicates allowed, possibly empty) = ``np.isin``."""
    k = np.array(keys, dtype=np.uint64)
    table = np.sort(np.array(known, dtype=np.uint64))
    assert np.array_equal(_member(k, table), np.isin(k, table))
