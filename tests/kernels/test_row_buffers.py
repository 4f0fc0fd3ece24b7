"""Reused input buffers: each call sees its own data, whatever the previous call did to its inputs."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from speceq.kernels import Kernel, check
from speceq.kernels.collect import RowBuffers
from speceq.kernels.reference import reference_kernel
from speceq.kernels.scenarios import default_scenarios


def test_gather_equals_indexing_while_growing_and_shrinking() -> None:
    table = torch.arange(40 * 7, dtype=torch.float32).view(40, 7)
    bufs = RowBuffers()
    rng = np.random.default_rng(0)
    for size in (5, 30, 3, 30, 0, 12):
        rows = rng.integers(0, 40, size)
        got = bufs.gather("t", table, rows)
        assert torch.equal(got, table[torch.from_numpy(rows)])


@pytest.mark.parametrize("layout", ["ragged", "padded"])
def test_kernel_that_overwrites_its_inputs_sees_fresh_data(layout: str) -> None:
    """A kernel that scribbles over its inputs after sampling gives exactly the reference's results."""
    ref = reference_kernel(layout)

    def scribbling(req):  # noqa: ANN001, ANN202
        out = ref(req)
        for name in ("target_logits" if layout == "ragged" else "target_probs", "draft_probs"):
            getattr(req, name).fill_(float("nan"))
        return out

    scenarios = [s for s in default_scenarios(ref.spec, scale=0.5) if s.vocab_size <= 61]
    a = check(ref, scenarios=scenarios)
    b = check(Kernel(scribbling, ref.spec), scenarios=scenarios)
    assert a.verdict == b.verdict == "equivalent"
    assert [t.pvalue for t in a.tests] == [t.pvalue for t in b.tests]
    assert sum(s.calls for s in a.scenarios) > len(scenarios)  # several calls per scenario: the buffers were reused
