"""The check end to end on the reference kernels: equivalent when correct, shifted with a diagnosis when not."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from kernel_support import quick_scenarios

from speceq.errors import ConfigError, EngineError
from speceq.kernels import Kernel, KernelSpec, check
from speceq.kernels.kernel_mutants import LOSSLESS, MUTANTS, make
from speceq.kernels.reference_kernels import ReferenceChainKernel, reference_kernel


@pytest.mark.parametrize("layout", ["ragged", "padded", "single"])
def test_the_reference_kernel_is_equivalent_in_every_layout(layout: str) -> None:
    k = reference_kernel(layout)
    r = check(k, scenarios=quick_scenarios(k.spec, 0.1))
    assert r.verdict == "equivalent", r.summary()
    assert r.exit_code == 0 and len(r.tests) > 50 and not r.violations
    assert {t.component for t in r.tests} >= {"token", "bonus", "accepted", "recovered", "length"}


@pytest.mark.parametrize("name", ["residual-from-target", "bonus-from-draft", "greedy-random-path",
                                  "inclusive-accept", "last-tile-fallback", "padding-as-index",
                                  "nan-row-emits-vocab-size", "min-p-untempered"])
def test_gallery_mutants_are_shifted_at_a_small_budget(name: str) -> None:
    k = make(name)
    r = check(k, scenarios=quick_scenarios(k.spec, 0.1), solo=False)
    assert r.verdict == "shifted", r.summary()
    assert r.exit_code == 1 and r.findings


@pytest.mark.parametrize("name", ["exponential-race", "one-hot-path", "exact-match"])
def test_lossless_variants_are_not_flagged(name: str) -> None:
    k = make(name)
    r = check(k, scenarios=quick_scenarios(k.spec, 0.1))
    assert r.verdict == "equivalent", r.summary()


def test_a_wrongly_declared_method_fails_only_its_length_law() -> None:
    """exact-match is lossless, but declared as standard its acceptance is too low: only lengths reject."""
    k = make("exact-match")
    wrong = Kernel(k.fn, KernelSpec(**{**{f: getattr(k.spec, f) for f in k.spec.__slots__}, "method": "standard"}))
    r = check(wrong, scenarios=quick_scenarios(wrong.spec, 0.1), solo=False)
    assert r.verdict == "shifted"
    comps = {t.component for t in r.rejected}
    assert "length" in comps and comps <= {"length", "accepted", "recovered"}
    assert not any(t.component in ("token", "bonus") for t in r.rejected)


def test_a_recovered_law_bug_is_not_reported_as_a_length_law_bug() -> None:
    """#47 item 5: the unnormalised residual emits zero-probability recovered tokens; before the fix those rows
    were dropped, which removed rejections (L < k) selectively and made the accepted-length law reject too."""
    k = make("residual-unnormalised")
    r = check(k, scenarios=quick_scenarios(k.spec, 0.2), solo=False)
    components = {f.component for f in r.findings}
    assert "recovered" in components and "invariant:zero-probability" in components, r.summary()
    assert "length" not in components and not any(t.component == "length" for t in r.rejected), r.summary()


def test_the_diagnosis_names_the_parameter_that_moved() -> None:
    k = make("temperature-one-side")
    r = check(k, scenarios=quick_scenarios(k.spec, 0.25), solo=False)
    texts = " ".join(f.text for f in r.findings)
    assert "temperature != 1" in texts or "temperature = 0.7" in texts, texts


def test_batch_composition_bugs_pass_alone() -> None:
    k = make("greedy-random-path")
    r = check(k, scenarios=quick_scenarios(k.spec, 0.1))
    batch = [f for f in r.findings if f.component == "batch"]
    assert batch and "pass in a batch of their own" in batch[0].text


class _RaisesOnTopK(ReferenceChainKernel):
    def ragged(self, req):  # noqa: ANN001, ANN201
        if bool((req.top_k > 0).any()):
            raise RuntimeError("index out of bounds")
        return super().ragged(req)


def test_a_kernel_that_raises_on_some_requests_is_shifted_with_the_requests_named() -> None:
    k = reference_kernel("ragged", impl=_RaisesOnTopK(), name="raises-on-top-k")
    r = check(k, scenarios=quick_scenarios(k.spec, 0.1), solo=False)
    raised = [v for v in r.violations if v.kind == "raised"]
    assert r.verdict == "shifted" and raised
    assert all("top_k" in v.template for v in raised)


def test_a_kernel_that_always_raises_is_an_error() -> None:
    def broken(req):  # noqa: ANN001, ANN202
        raise ValueError("wrapper bug")

    with pytest.raises(EngineError, match="wrapper bug"):
        check(Kernel(broken, KernelSpec(layout="ragged")), scenarios=quick_scenarios(KernelSpec(), 0.05))


def test_a_declared_lossy_kernel_is_measured_not_passed() -> None:
    k = make("residual-from-target")
    lossy = Kernel(k.fn, KernelSpec(**{**{f: getattr(k.spec, f) for f in k.spec.__slots__}, "lossy": True}))
    r = check(lossy, scenarios=quick_scenarios(lossy.spec, 0.2))
    assert r.verdict == "lossy" and r.exit_code == 1
    assert max(t.tv_lower or 0.0 for t in r.tests) > 0.05
    assert "declared lossy" in r.reason


def test_checks_are_reproducible_and_seeded() -> None:
    k = reference_kernel("padded")
    sc = quick_scenarios(k.spec, 0.05)
    a = check(k, scenarios=sc, seed=5)
    b = check(k, scenarios=sc, seed=5)
    c = check(k, scenarios=sc, seed=6)
    assert [t.pvalue for t in a.tests] == [t.pvalue for t in b.tests]
    assert [t.pvalue for t in a.tests] != [t.pvalue for t in c.tests]


def test_result_serialises() -> None:
    import json

    k = reference_kernel("padded")
    r = check(k, scenarios=quick_scenarios(k.spec, 0.05))
    d = json.loads(json.dumps(r.to_dict()))
    assert d["verdict"] == r.verdict and len(d["tests"]) == len(r.tests) and d["exit_code"] == 0


def test_nan_rows_are_built_only_for_kernels_that_promise_them() -> None:
    from speceq.kernels.scenarios import default_scenarios

    promise = [t for s in default_scenarios(KernelSpec(nan_rows=True), scale=0.05) for t in s.templates]
    none = default_scenarios(KernelSpec(), scale=0.05)
    assert any(t.boundary == "nan" and np.isnan(t.law[0]).all() for t in promise)
    assert not any(t.boundary == "nan" for s in none for t in s.templates)
    assert any("NaN" in x for s in none for x in s.skipped)


def test_gallery_is_complete() -> None:
    assert len(MUTANTS) >= 12 and len(LOSSLESS) >= 4
    assert all(m.source for m in MUTANTS.values())


def test_device_is_a_parameter() -> None:
    k = reference_kernel("padded")
    r = check(k, scenarios=quick_scenarios(k.spec, 0.05), device=torch.device("cpu"))
    assert r.device == "cpu" and np.isfinite(r.seconds)


def test_min_p_untempered_is_shifted_on_the_min_p_requests_only() -> None:
    """#45 item 2: min-p measured before the temperature moves exactly the requests with min-p on and T != 1."""
    k = make("min-p-untempered")
    r = check(k, scenarios=quick_scenarios(k.spec, 0.1)[:1], solo=False)
    assert r.verdict == "shifted", r.summary()
    failed = {t.template for t in r.rejected}
    assert failed and all("min_p" in name for name in failed), failed
    assert any("min-p on" in " ".join(f.predicates) for f in r.findings), r.summary()


def test_a_ragged_kernel_without_min_p_keeps_working_and_is_refused_min_p_requests() -> None:
    """A kernel that does not declare min_p gets no min-p request (the scenario says so) and passes; handed
    scenarios with min-p, the check refuses them by name before any call (it would ignore them)."""
    ref = reference_kernel("ragged")
    plain = Kernel(ref.fn, KernelSpec(**{**{f: getattr(ref.spec, f) for f in ref.spec.__slots__}, "min_p": False}))
    scs = quick_scenarios(plain.spec, 0.1)[:1]
    assert any("min-p" in s for s in scs[0].skipped)
    assert check(plain, scenarios=scs).verdict == "equivalent"
    with pytest.raises(ConfigError, match="min_p = .*does not declare min_p"):
        check(plain, scenarios=quick_scenarios(ref.spec, 0.1)[:1])
