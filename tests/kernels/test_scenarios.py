"""The default scenarios follow the spec, keep every cut unambiguous and bound the memory of a call."""

from __future__ import annotations

import numpy as np
import pytest

from speceq.errors import ConfigError
from speceq.kernels import KernelSpec, default_scenarios
from speceq.kernels.scenarios import MAX_CELLS_PER_CALL, MIN_CUT_GAP, MIN_TOP_P_MARGIN
from speceq.kernels.target_processing import cut_margins


def test_ragged_spec_gets_every_feature() -> None:
    spec = KernelSpec(layout="ragged", params=True, greedy=True, uniforms=True, max_draft=3)
    scs = default_scenarios(spec, scale=0.05)
    vocabs = [s.vocab_size for s in scs]
    assert 2 in vocabs and any(v % 8192 for v in vocabs if v > 8192) and max(vocabs) == 256_000
    tpls = [t for s in scs for t in s.templates]
    assert {t.n_draft for t in tpls} >= {0, 1, 2, 3}
    assert any(t.greedy for t in tpls) and any(t.boundary == "u0" for t in tpls) and any(t.boundary == "u1" for t in tpls)
    assert any(t.params.top_k for t in tpls) and any(t.params.top_p < 1 for t in tpls)
    assert any(t.params.temperature not in (0.0, 1.0) for t in tpls)
    for t in tpls:
        for i in range(t.n_draft + 1):
            m = cut_margins(t.logits[i], t.params)
            assert m.get("top_k", 1) >= MIN_CUT_GAP and m.get("argmax", 1) >= MIN_CUT_GAP
            assert m.get("top_p", 1) >= MIN_TOP_P_MARGIN
        assert np.allclose(t.law.sum(axis=1), 1.0) and np.allclose(t.draft.sum(axis=1), 1.0)
    for s in scs:
        assert s.calls_batch() * s.rows_per_request * s.vocab_size <= max(MAX_CELLS_PER_CALL,
                                                                         len(s.templates) * 4 * s.vocab_size)


def test_what_a_kernel_does_not_take_is_not_built_and_is_said() -> None:
    plain = default_scenarios(KernelSpec(layout="padded", max_draft=2), scale=0.05)
    tpls = [t for s in plain for t in s.templates]
    assert all(t.n_draft == 2 for t in tpls)  # padded without padding: k everywhere
    assert all(t.params.identity for t in tpls) and not any(t.boundary for t in tpls)
    skipped = [x for s in plain for x in s.skipped]
    assert any("temperature" in x for x in skipped) and any("boundary" in x for x in skipped)
    single = default_scenarios(KernelSpec(layout="single", max_vocab=20_000), scale=0.05)
    assert all(t.n_draft >= 1 for s in single for t in s.templates)
    assert sorted(s.vocab_size for s in single) == [2, 61, 20_000]


def test_scenarios_are_reproducible() -> None:
    spec = KernelSpec(layout="ragged", params=True)
    a = default_scenarios(spec, scale=0.05, seed=3)[0]
    b = default_scenarios(spec, scale=0.05, seed=3)[0]
    assert [t.name for t in a.templates] == [t.name for t in b.templates]
    assert all(np.array_equal(x.logits, y.logits) for x, y in zip(a.templates, b.templates))


def test_min_p_requests_only_for_kernels_that_declare_min_p() -> None:
    """#45 item 2: a ragged kernel declaring min_p gets per-request min-p (different values, mixed with other
    parameters, every cut unambiguous); one that does not gets none, and the scenario says it skipped them."""
    with_min_p = default_scenarios(KernelSpec(layout="ragged", params=True, min_p=True, max_draft=3), scale=0.05)
    tpls = [t for s in with_min_p for t in s.templates]
    values = {round(t.params.min_p, 6) for t in tpls if t.params.min_p > 0}
    assert len(values) >= 3 and any(t.params.min_p == 0 for t in with_min_p[0].templates)
    assert any(t.params.min_p > 0 and t.params.temperature not in (0.0, 1.0) for t in tpls)
    for t in tpls:
        if t.params.min_p > 0:
            assert t.features["min_p"] == "on"
            assert all(cut_margins(row, t.params)["min_p"] >= MIN_CUT_GAP for row in t.logits)
            assert (t.law == 0).any()
    assert not any("min-p" in s for sc in with_min_p for s in sc.skipped)
    without = default_scenarios(KernelSpec(layout="ragged", params=True, max_draft=3), scale=0.05)
    assert all(t.params.min_p == 0 for s in without for t in s.templates)
    assert any("min-p" in s for s in without[0].skipped)


def test_min_p_needs_params() -> None:
    with pytest.raises(ConfigError, match="min_p needs params=True"):
        KernelSpec(layout="ragged", min_p=True)
    with pytest.raises(ConfigError, match="ragged layout only"):
        KernelSpec(layout="padded", params=True, min_p=True)
