"""benchmarks/bench_audit.py: the ratio arithmetic of the audit's speed targets (issue 44, item 5)."""

from __future__ import annotations

import math

import pytest
from benchmark_scripts import load_script


def _ratios():  # noqa: ANN202
    return load_script("bench_audit").speed_ratios


def test_each_setting_subtracts_its_shared_work_once_per_extra_cell() -> None:
    # t1: 3 cells of 10 s sharing 2 s (saves 2 x 2); greedy: 2 cells of 5 s sharing 1 s (saves 1 x 1)
    r = _ratios()(20.0, {"t1": [10.0, 10.0, 10.0], "greedy": [5.0, 5.0]}, {"t1": 2.0, "greedy": 1.0})
    assert r.alone_s == 40.0
    assert r.shared_saved_s == 5.0
    assert r.fair_alone_s == 35.0
    assert math.isclose(r.ratio, 20.0 / 35.0)
    assert r.ratio_met and r.wall_met


def test_a_single_cell_shares_nothing_and_the_targets_can_fail() -> None:
    r = _ratios()(2000.0, {"t1": [1000.0]}, {"t1": 400.0})
    assert r.shared_saved_s == 0.0 and r.ratio == 2.0
    assert not r.ratio_met  # 2.0 > 1.2
    assert not r.wall_met  # 2000 s > 30 min
    edge = _ratios()(1800.0, {"t1": [1500.0]}, {"t1": 0.0})
    assert edge.wall_met and edge.ratio_met  # exactly 30 min and exactly 1.2 meet the targets


def test_bad_measurements_are_refused() -> None:
    ratios = _ratios()
    with pytest.raises(ValueError, match="greedy"):
        ratios(1.0, {"t1": [1.0], "greedy": [1.0]}, {"t1": 0.1})
    with pytest.raises(ValueError, match="negative"):
        ratios(1.0, {"t1": [1.0]}, {"t1": -0.1})
    with pytest.raises(ValueError, match="not less"):
        ratios(1.0, {"t1": [1.0, 1.0]}, {"t1": 2.0})
