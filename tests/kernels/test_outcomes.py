"""Every invariant is found on a planted output, and a correct output passes."""

from __future__ import annotations

import numpy as np
import pytest

from speceq.kernels.outcomes import parse_call
from speceq.kernels.scenarios import template_from_arrays
from speceq.kernels.target_processing import RequestParams


def _templates():
    v = 6
    with np.errstate(divide="ignore"):
        logits = np.log(np.array([[0.5, 0.3, 0.2, 0, 0, 0]] * 3, dtype=np.float32))
    draft = np.array([[0.2, 0.2, 0.2, 0.2, 0.2, 0.0]] * 2)
    sampled = template_from_arrays("sampled", logits, draft)
    greedy = template_from_arrays("greedy", logits, draft, RequestParams(0.0))
    assert sampled.vocab_size == v
    return (sampled, greedy)


def _parse(tokens, drafts, slots=(0,), counters=None):
    return parse_call(np.array(tokens, dtype=np.int64), np.array(slots), _templates(),
                      np.array(drafts, dtype=np.int64), counters)


def test_a_correct_row_passes_and_gives_its_length() -> None:
    got = _parse([[1, 0, -1]], [[1, 3]])
    assert got.violations == () and got.lengths.tolist() == [1] and got.tokens.tolist() == [[1, 0, -1]]
    bonus = _parse([[1, 2, 0]], [[1, 2]])
    assert bonus.violations == () and bonus.lengths.tolist() == [2]


@pytest.mark.parametrize(("tokens", "drafts", "kind", "length"), [
    ([[1, 6, -1]], [[1, 3]], "id-range", -1),
    ([[1, -7, -1]], [[1, 3]], "id-range", -1),
    ([[-1, -1, -1]], [[1, 3]], "no-token", -1),
    ([[1, -1, 2]], [[1, 3]], "padding", -1),
    ([[0, 0, -1]], [[1, 3]], "draft-mismatch", 1),
    ([[4, -1, -1]], [[1, 3]], "zero-probability", 0),
    ([[1]], [[1, 3]], "shape", -1),
])
def test_each_planted_violation_is_found(tokens, drafts, kind, length) -> None:
    """Unreadable rows get length -1; rows whose length can be read keep it (and their tokens)."""
    got = _parse(tokens, drafts)
    assert [v.kind for v in got.violations] == [kind]
    assert got.lengths.tolist() == [length]


def test_a_zero_probability_row_stays_in_the_tests_with_its_length_and_tokens() -> None:
    """#47 item 5: dropping a row for a zero-probability recovered token drops it by its length, biasing L's law."""
    got = _parse([[1, 4, -1], [1, 2, 0]], [[1, 3], [1, 2]], slots=(0, 0))
    assert [v.kind for v in got.violations] == ["zero-probability"]
    assert got.lengths.tolist() == [1, 2]
    assert got.tokens.tolist() == [[1, 4, -1], [1, 2, 0]]


def test_greedy_rows_must_follow_the_argmax_path() -> None:
    ok = _parse([[0, 0, 0]], [[0, 0]], slots=(1,))  # argmax is token 0 at every position
    assert ok.violations == ()
    bad = _parse([[0, 1, -1]], [[0, 1]], slots=(1,))  # accepted a non-argmax draft
    assert [v.kind for v in bad.violations] == ["greedy"]


def test_counters_are_checked() -> None:
    assert _parse([[1, 0, -1]], [[1, 3]], counters=np.array([1])).violations == ()
    bad = _parse([[1, 0, -1]], [[1, 3]], counters=np.array([2]))
    assert [v.kind for v in bad.violations] == ["counter"]
