"""transformers' _speculative_sampling driven as a single-request kernel."""

from __future__ import annotations

from kernel_support import quick_scenarios

from speceq.kernels import check
from speceq.kernels.hf_adapter import transformers_speculative_sampling


def test_transformers_speculative_sampling_is_equivalent() -> None:
    k = transformers_speculative_sampling()
    r = check(k, scenarios=quick_scenarios(k.spec, 0.1))
    assert r.verdict == "equivalent", r.summary()
    assert not any(v.kind == "counter" for v in r.violations)


def test_the_ensemble_weight_is_reported_lossy_with_its_tv() -> None:
    k = transformers_speculative_sampling(assistant_ensemble_weight=0.5)
    assert k.spec.lossy
    r = check(k, scenarios=quick_scenarios(k.spec, 0.1))
    assert r.verdict == "lossy"
    assert max(t.tv_lower or 0.0 for t in r.tests if t.component != "length") > 0.05
