"""Tree kernels: the reference methods are equivalent, the planted tree bugs are found."""

from __future__ import annotations

import numpy as np
import pytest

from speceq.kernels import check
from speceq.kernels.trees import (
    SHAPES,
    InclusiveCoin,
    SiblingsNotRemoved,
    build_tree_template,
    default_tree_scenarios,
    reach_probabilities,
    reference_tree_kernel,
    tree_arrays,
)


def test_tree_arrays() -> None:
    first, nxt, depth = tree_arrays(SHAPES["eagle8"])
    assert first.tolist() == [1, 4, 6, -1, 7, -1, -1, -1]
    assert nxt.tolist() == [-1, 2, 3, -1, 5, -1, -1, -1]
    assert depth.tolist() == [0, 1, 1, 1, 2, 2, 2, 3]


@pytest.mark.parametrize("method", ["target-only", "multi-draft"])
def test_reach_laws_are_probabilities(method: str) -> None:
    t = build_tree_template("eagle8", "zipf", "overlap", 61, np.random.default_rng(0))
    reach = reach_probabilities(t, method)
    assert reach[0] == 1.0 and (reach <= 1).all() and (reach >= 0).all()
    # children of the root are exclusive events
    assert reach[1] + reach[2] + reach[3] <= 1.0 + 1e-12


@pytest.mark.parametrize("method", ["target-only", "multi-draft"])
def test_reference_tree_kernels_are_equivalent(method: str) -> None:
    k = reference_tree_kernel(method)
    r = check(k, scale=0.15)
    assert r.verdict == "equivalent", r.summary()
    assert {t.component for t in r.tests} == {"node"} and len(r.tests) >= 10


def test_tree_bugs_are_found() -> None:
    kept = check(reference_tree_kernel("target-only", impl=SiblingsNotRemoved(), name="siblings"), scale=0.25)
    assert kept.verdict == "shifted" and kept.rejected
    inclusive = check(reference_tree_kernel("target-only", impl=InclusiveCoin(), name="inclusive"), scale=0.1)
    assert inclusive.verdict == "shifted"
    assert any(v.kind == "zero-probability" and "u0" in v.template for v in inclusive.violations)


def test_uniform_free_tree_kernels_get_no_boundary_rows() -> None:
    from speceq.kernels import KernelSpec

    scs = default_tree_scenarios(KernelSpec(layout="tree", method="target-only"), scale=0.05)
    assert not any(t.boundary for s in scs for t in s.templates)
    assert any("boundary" in x for s in scs for x in s.skipped)


@pytest.mark.parametrize(("method", "gets_q"), [("target-only", False), ("multi-draft", True)])
def test_only_multi_draft_trees_are_handed_the_draft_law(method: str, gets_q: bool) -> None:
    """The contract: target-only trees get ``draft_probs=None`` (their children are fixed tokens)."""
    from speceq.kernels import KernelSpec

    seen: list[bool] = []
    impl = reference_tree_kernel(method)

    def spy(req):  # noqa: ANN001, ANN202 - the kernel signature of the contract
        seen.append(req.draft_probs is not None)
        return impl(req)

    check(spy, spec=KernelSpec(layout="tree", method=method, name="spy"), scale=0.05)
    assert seen and set(seen) == {gets_q}
