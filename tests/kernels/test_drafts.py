"""Draft conformance: a drafter must sample from the q it returns."""

from __future__ import annotations

import numpy as np
import pytest

from speceq.kernels.drafts import (
    check_drafter,
    conforming_drafter,
    ignores_temperature_drafter,
    pit_of_rows,
    returns_raw_q_drafter,
)


def test_a_conforming_drafter_passes() -> None:
    r = check_drafter(conforming_drafter, replicates=800)
    assert r.verdict == "conforms" and r.exit_code == 0 and len(r.tests) == 7


@pytest.mark.parametrize("fn", [returns_raw_q_drafter, ignores_temperature_drafter])
def test_drafters_returning_another_q_are_caught(fn) -> None:
    r = check_drafter(fn, replicates=800)
    assert r.verdict == "shifted" and r.exit_code == 1
    assert r.tests and any(t.rejected for t in r.tests)


def test_pit_is_uniform_when_tokens_follow_their_rows() -> None:
    rng = np.random.default_rng(0)
    q = rng.dirichlet(np.ones(9), size=20000)
    tok = np.array([rng.choice(9, p=row) for row in q])
    u = pit_of_rows(q, tok, rng)
    hist = np.histogram(u, bins=10, range=(0, 1))[0]
    assert hist.min() > 1800 and hist.max() < 2200
