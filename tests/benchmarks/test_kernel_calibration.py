"""The calibration benchmark gives every variant its own seed stream (independent false-alarm counts)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _script():  # noqa: ANN202
    spec = importlib.util.spec_from_file_location("kernel_calibration", REPO / "benchmarks/kernel_calibration.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_collection_seeds_are_distinct_per_variant_seed_and_block() -> None:
    cal = _script()
    variants = ("reference", "exponential-race", "block", "one-hot-path", "exact-match")
    seeds = {(v, s, b): cal.collection_seed(v, s, b) for v in variants for s in (0, 1) for b in range(40)}
    assert len(set(seeds.values())) == len(seeds)  # no two (variant, --seed, block) share a stream
    assert all(0 <= x < 2**63 for x in seeds.values())
    assert cal.collection_seed("block", 0, 3) == cal.collection_seed("block", 0, 3)  # reproducible
