"""CodeIndex (engine.hashing) finds what binary search finds: each code's position, -1 where absent."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.hashing import CodeIndex

CODES = st.integers(0, 2**64 - 1)


def _searched(keys: np.ndarray, queries: np.ndarray) -> np.ndarray:
    at = np.minimum(np.searchsorted(keys, queries), max(len(keys) - 1, 0))
    return np.where((len(keys) > 0) & (keys[at] == queries), at, -1) if len(keys) else np.full(len(queries), -1)


@settings(max_examples=80, deadline=None)
@given(st.lists(CODES, max_size=300, unique=True), st.lists(CODES, max_size=200), st.data())
def test_positions_equal_binary_search(keys: list[int], others: list[int], data: st.DataObject) -> None:
    sorted_keys = np.array(sorted(keys), dtype=np.uint64)
    present = data.draw(st.lists(st.sampled_from(keys), max_size=200)) if keys else []
    queries = np.array(present + others, dtype=np.uint64)
    np.testing.assert_array_equal(CodeIndex(sorted_keys).positions(queries), _searched(sorted_keys, queries))


def test_colliding_codes_and_shapes() -> None:
    keys = (np.arange(5000, dtype=np.uint64) << np.uint64(40))  # equal low bits: every code shares them
    index = CodeIndex(keys)
    queries = np.concatenate([keys[::-1], keys + np.uint64(1)]).reshape(2, 50, 100)
    got = index.positions(queries)
    assert got.shape == queries.shape
    np.testing.assert_array_equal(got[0].ravel(), np.arange(5000)[::-1])
    assert (got[1] == -1).all()


def test_keys_must_be_sorted_and_distinct() -> None:
    with pytest.raises(ValueError, match="sorted, distinct"):
        CodeIndex(np.array([3, 1], dtype=np.uint64))
    with pytest.raises(ValueError, match="sorted, distinct"):
        CodeIndex(np.array([1, 1], dtype=np.uint64))
