"""benchmarks/logit_spread.py: the spread rule on hand-made logits, and which steps an engine reaches."""

from __future__ import annotations

import math

import torch
from benchmark_scripts import load_script


def _script():  # noqa: ANN202
    return load_script("logit_spread")


def test_steps_after_the_first_eos_are_not_reached() -> None:
    reached = _script().reached
    gen = torch.tensor([[5, 2, 7, 2], [2, 9, 9, 9], [4, 4, 4, 4]])
    assert reached(gen, 2).tolist() == [[True, True, False, False], [True, False, False, False],
                                        [True, True, True, True]]
    assert bool(reached(gen, None).all())


def test_spread_is_the_head_range_or_twice_a_tail_rise() -> None:
    spread = _script().spread
    ref = torch.tensor([[0.0, -1.0, -30.0]])  # token 2 is below the 10-nat cut
    shifted = ref + torch.tensor([[0.3, 0.1, 0.0]])  # head moves 0.3 and 0.1: range 0.2, centre +0.2
    assert math.isclose(float(spread(shifted, ref, 10.0)[0]), 0.2, abs_tol=1e-6)  # float32 inputs
    lse = float(torch.logsumexp(ref.double(), dim=-1))
    risen = shifted.clone()
    risen[0, 2] = lse - 10.0 + 0.2 + 0.5  # the tail token 0.5 above the cut after the centring: Delta >= 1.0
    assert math.isclose(float(spread(risen, ref, 10.0)[0]), 1.0, abs_tol=1e-6)
    assert math.isclose(float(spread(risen, ref, math.inf)[0]), float(risen[0, 2] - ref[0, 2]) - 0.1, abs_tol=1e-6)
