"""Counting helpers: symbols per position, joint prefixes, paired counts."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from speceq.stats import END, decode_joint, joint_symbols, paired_counts, position_symbols

TOKENS = np.array([[5, 7, 9], [5, 2, -1], [3, -1, -1], [5, 7, 1]], dtype=np.int64)
LENGTHS = np.array([3, 2, 1, 3], dtype=np.int64)


def test_position_symbols_marks_ended_rows_with_end() -> None:
    assert position_symbols(TOKENS, LENGTHS, 0).tolist() == [5, 5, 3, 5]
    assert position_symbols(TOKENS, LENGTHS, 1).tolist() == [7, 2, END, 7]
    assert position_symbols(TOKENS, LENGTHS, 2).tolist() == [9, END, END, 1]


def test_joint_symbols_round_trip_and_distinguish_prefixes() -> None:
    codes = joint_symbols(TOKENS, LENGTHS, 3)
    assert [decode_joint(int(c), 3) for c in codes] == [(5, 7, 9), (5, 2, END), (3, END, END), (5, 7, 1)]
    two = joint_symbols(TOKENS, LENGTHS, 2)
    assert two[0] == two[3] and len(set(two.tolist())) == 3


def test_joint_codes_do_not_depend_on_the_other_rows() -> None:
    alone = joint_symbols(TOKENS[:1], LENGTHS[:1], 2)
    assert alone[0] == joint_symbols(TOKENS, LENGTHS, 2)[0]


def test_paired_counts_aligns_both_samples() -> None:
    labels, a, b = paired_counts(np.array([3, 1, 3, END]), np.array([1, 4, 4]))
    assert labels.tolist() == [END, 1, 3, 4]
    assert a.tolist() == [1, 1, 2, 0]
    assert b.tolist() == [0, 1, 0, 2]


@settings(max_examples=60, deadline=None, derandomize=True)
@given(st.lists(st.integers(-2, 40), min_size=1, max_size=50), st.lists(st.integers(-2, 40), min_size=1, max_size=50))
def test_paired_counts_totals_and_labels(sa: list[int], sb: list[int]) -> None:
    labels, a, b = paired_counts(np.array(sa), np.array(sb))
    assert a.sum() == len(sa) and b.sum() == len(sb)
    assert np.all(np.diff(labels) > 0) and np.all(a + b > 0)
    for lab, ca, cb in zip(labels, a, b):
        assert ca == sa.count(lab) and cb == sb.count(lab)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: position_symbols(TOKENS, LENGTHS, 3), "`position`"),
        (lambda: position_symbols(TOKENS, LENGTHS[:2], 0), "`lengths`"),
        (lambda: position_symbols(TOKENS.astype(float), LENGTHS, 0), "`tokens`"),
        (lambda: position_symbols(TOKENS, np.array([3, 3, 1, 3]), 0), "`tokens` holds -1"),
        (lambda: joint_symbols(TOKENS, LENGTHS, 4), "`m`"),
        (lambda: joint_symbols(np.array([[1 << 22]]), np.array([1]), 1), "joint codes"),
        (lambda: paired_counts(np.array([1.5]), np.array([1])), "`sym_a`"),
        (lambda: decode_joint(-1, 2), "`code`"),
    ],
)
def test_invalid_input_names_the_parameter(call, message: str) -> None:
    with pytest.raises((ValueError, TypeError), match=message):
        call()
