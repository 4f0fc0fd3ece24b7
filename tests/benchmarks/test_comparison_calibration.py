"""benchmarks/comparison_calibration.py: the pooled part measures the size of speceq.stats.pooled_comparison."""

from __future__ import annotations

import numpy as np
from benchmark_scripts import load_script

from speceq.stats import comparison as cmp
from speceq.stats import pooled_comparison


def test_pooled_world_sizes_are_the_pooled_tests_exact_sizes() -> None:
    """Each replicate's size is exact given the magnitudes, so the mean is <= nominal; continuous scores keep it near."""
    cal = load_script("comparison_calibration")
    sizes = cal.pooled_world_sizes("temperature 1.04", 2, 300, 3, np.random.default_rng(0))
    assert {"pooled log-likelihood comparison", "pooled PIT comparison"} <= set(sizes)
    for name, (est, _se) in sizes.items():
        for level, e in zip(cal.LEVELS, est):
            assert 0.9 * level <= e <= level, (name, level, e)


def test_the_concatenation_is_what_pooled_comparison_tests() -> None:
    """The benchmark's pooled pairs (every case's D_c as it is, concatenated) give pooled_comparison's p-value exactly."""
    rng = np.random.default_rng(3)
    parts = [rng.normal(0.1, s, size=n) for n, s in ((80, 1.0), (200, 3.0), (150, 0.5))]
    w = np.concatenate(parts)
    direct = cmp.paired_comparison(np.zeros_like(w), w, name="w").pvalue
    assert pooled_comparison(parts, name="pooled").pvalue == direct
