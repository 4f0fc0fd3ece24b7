"""The single-request build draws what it always drew: the same values from speceq's stream, faster."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from speceq.kernels.hf_adapter import transformers_speculative_sampling
from speceq.kernels.kernel_calls import build_single, seeds62
from speceq.kernels.scenarios import default_scenarios


@pytest.mark.parametrize("seed", range(40))
def test_seeds62_are_the_values_and_state_of_integers_drawn_one_by_one(seed: int) -> None:
    a, b = np.random.default_rng([seed, 1]), np.random.default_rng([seed, 1])
    a.random(seed % 4)
    b.random(seed % 4)
    count = 1 + seed % 3
    assert seeds62(a, count) == [int(b.integers(0, 2**62)) for _ in range(count)]
    assert a.random() == b.random()  # the stream goes on from the same state
    assert all(0 <= v < 2**62 for v in seeds62(a, 50))


def test_build_single_draws_coins_bonus_uniform_and_seeds_in_that_order() -> None:
    from speceq.kernels.kernel_calls import _Tables  # the build's own tables, as the check makes them

    kern = transformers_speculative_sampling()
    scn = next(s for s in default_scenarios(kern.spec) if s.name == "mixed-v61")
    tables = _Tables(scn, torch.device("cpu"))
    for t in range(len(scn.templates)):
        tpl = scn.templates[t]
        if tpl.boundary:
            continue
        rng, twin = np.random.default_rng(t), np.random.default_rng(t)
        req = build_single(tables, scn, t, np.arange(8), True, rng, torch.device("cpu"))
        n = tpl.n_draft
        coins, bonus = twin.random(n), float(twin.random(1)[0])
        seed, gen_seed = int(twin.integers(0, 2**62)), int(twin.integers(0, 2**62))
        assert np.array_equal(req.uniforms.numpy(), coins) and req.sample_uniform == bonus and req.seed == seed
        assert torch.equal(torch.rand(3, generator=req.generator),
                           torch.rand(3, generator=torch.Generator().manual_seed(gen_seed)))
        assert torch.equal(req.target_probs, tables.probs[tables.row_base[t]:tables.row_base[t] + n + 1])
        assert req.target_probs.data_ptr() != tables.probs.data_ptr()  # a copy: a kernel may write into it
        assert torch.equal(req.draft_probs, tables.draft32[tables.draft_base[t]:tables.draft_base[t] + n])
        assert rng.random() == twin.random()
