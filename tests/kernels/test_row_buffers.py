"""Reused input buffers: each call sees its own data, whatever the previous call did to its inputs."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from speceq.kernels import Kernel, check
from speceq.kernels.kernel_calls import RowBuffers
from speceq.kernels.reference_kernels import reference_kernel
from speceq.kernels.scenarios import default_scenarios
from speceq.kernels.trees import default_tree_scenarios, reference_tree_kernel


def test_gather_equals_indexing_while_growing_and_shrinking() -> None:
    table = torch.arange(40 * 7, dtype=torch.float32).view(40, 7)
    bufs = RowBuffers()
    rng = np.random.default_rng(0)
    for size in (5, 30, 3, 30, 0, 12):
        rows = rng.integers(0, 40, size)
        got = bufs.gather("t", table, rows)
        assert torch.equal(got, table[torch.from_numpy(rows)])


def test_one_buffer_serves_every_row_width() -> None:
    """The buffer of a name is shared by tables of any vocabulary (the scenarios of a check): one allocation."""
    bufs = RowBuffers()
    wide = torch.arange(10 * 50, dtype=torch.float32).view(10, 50)
    narrow = -torch.arange(30 * 3, dtype=torch.float32).view(30, 3)
    first = bufs.gather("t", wide, np.array([9, 0, 9, 4]))
    ptr = first.data_ptr()
    for table, rows in ((narrow, np.array([29, 1, 1, 0, 7])), (wide, np.array([3, 3])), (narrow, np.arange(30))):
        got = bufs.gather("t", table, rows)
        assert torch.equal(got, table[torch.from_numpy(rows)])
        assert got.data_ptr() == ptr  # 5 x 3, 2 x 50 and 30 x 3 cells fit in the first call's 4 x 50


@pytest.mark.parametrize("layout", ["ragged", "padded"])
def test_kernel_that_overwrites_its_inputs_sees_fresh_data(layout: str) -> None:
    """A kernel that scribbles over its inputs after sampling gives exactly the reference's results.

    Ragged: every call's inputs are copied, so the draws are the reference's. Padded (and tree,
    below): consecutive calls reuse their rows, the scribbling is found and the scenario collected
    again with new draws, so the p-values differ from the reference's while every kept call saw
    exact inputs (tests/kernels/test_fixed_layout.py); here: the same verdict, and the result says so.
    """
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
    if layout == "ragged":
        assert [t.pvalue for t in a.tests] == [t.pvalue for t in b.tests]
        assert not any(s.inputs_written for s in b.scenarios)
    else:
        assert b.scenarios[0].inputs_written and not a.scenarios[0].inputs_written
    assert sum(s.calls for s in a.scenarios) > len(scenarios)  # several calls per scenario: the buffers were reused
    assert len({s.vocab_size for s in a.scenarios}) > 1  # and shared by scenarios of different vocabularies


def test_tree_kernel_that_overwrites_its_inputs_sees_fresh_data() -> None:
    """The tree check's buffers too: scribbling over target_probs after each call changes the verdict in nothing."""
    ref = reference_tree_kernel("target-only")

    def scribbling(req):  # noqa: ANN001, ANN202
        out = ref(req)
        req.target_probs.fill_(float("nan"))
        return out

    scenarios = [s for s in default_tree_scenarios(ref.spec, scale=0.5) if s.vocab_size <= 61]
    a = check(ref, scenarios=scenarios)
    b = check(Kernel(scribbling, ref.spec), scenarios=scenarios)
    assert a.verdict == b.verdict == "equivalent"
    assert b.scenarios[0].inputs_written and not a.scenarios[0].inputs_written  # found, and collected again
    assert sum(s.calls for s in a.scenarios) > len(scenarios)
    assert len({s.vocab_size for s in a.scenarios}) > 1
