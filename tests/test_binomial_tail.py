"""The binomial-tail helper of the size checks does what its docstring says."""

from __future__ import annotations

import pytest
from binomial_tail import pass_probability, rejection_limit, reps_to_catch
from scipy import stats


@pytest.mark.parametrize(("level", "liberal", "factor"), [(1e-3, 3.0, 1.5), (0.05, 2.0, 1.0), (0.1, 2.0, 1.5)])
def test_limit_and_replicates(level: float, liberal: float, factor: float) -> None:
    reps = reps_to_catch(level, liberal, factor)
    limit = rejection_limit(reps, level, factor)
    assert stats.binom.sf(limit, reps, factor * level) <= 1e-6  # a test within the factor fails rarely
    assert pass_probability(reps, level, liberal, factor) <= 0.01  # a liberal one is caught
    assert pass_probability(int(reps * 0.95), level, liberal, factor) > 0.01  # and R is not much more than needed
    with pytest.raises(ValueError, match="cannot catch"):
        reps_to_catch(level, factor, factor)
