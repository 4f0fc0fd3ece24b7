"""The kernel contract: specs are validated, wrappers normalise what a kernel returns."""

from __future__ import annotations

import pytest
import torch

from speceq.errors import ConfigError
from speceq.kernels import Kernel, KernelSpec, Outcome, as_kernel, kernel


@pytest.mark.parametrize("fields", [
    {"layout": "matrix"},
    {"layout": "padded", "params": True},
    {"layout": "ragged", "greedy": True},
    {"layout": "ragged", "method": "typical"},
    {"layout": "tree", "method": "standard"},
    {"layout": "ragged", "padding": True},
    {"max_draft": 0},
])
def test_bad_specs_are_refused(fields: dict) -> None:
    with pytest.raises(ConfigError):
        KernelSpec(**fields)


def test_a_declared_lossy_method_needs_no_known_name() -> None:
    assert KernelSpec(method="typical-acceptance", lossy=True).lossy
    assert not KernelSpec(method="one-hot").takes_draft_probs


def test_decorator_and_outputs() -> None:
    @kernel(layout="single", method="standard")
    def fn(req):  # noqa: ANN001, ANN202
        return torch.tensor([1, 2])

    assert isinstance(fn, Kernel) and fn.spec.layout == "single" and fn.name.endswith("fn")
    assert isinstance(fn(None), Outcome)
    tup = Kernel(lambda r: (torch.tensor([[1, -1]]), torch.tensor([0])))
    out = tup(None)
    assert out.emitted_draft_counts is not None
    assert as_kernel(fn) is fn
    with pytest.raises(ConfigError):
        as_kernel(3)
    plain = as_kernel(lambda r: r, KernelSpec(layout="padded"))
    assert plain.spec.layout == "padded" and plain.spec.name
