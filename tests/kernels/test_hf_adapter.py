"""transformers' _speculative_sampling driven as a single-request kernel."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from kernel_support import quick_scenarios

from speceq.kernels import check
from speceq.kernels.contract import SingleRequest
from speceq.kernels.hf_adapter import FUNCTION, transformers_speculative_sampling


def test_transformers_speculative_sampling_is_equivalent() -> None:
    k = transformers_speculative_sampling()
    r = check(k, scenarios=quick_scenarios(k.spec, 0.05))
    assert r.verdict == "equivalent", r.summary()
    assert not any(v.kind == "counter" for v in r.violations)


def test_the_ensemble_weight_is_reported_lossy_with_its_tv() -> None:
    k = transformers_speculative_sampling(assistant_ensemble_weight=0.5)
    assert k.spec.lossy
    r = check(k, scenarios=[s for s in quick_scenarios(k.spec, 0.05) if s.vocab_size <= 61])
    assert r.verdict == "lossy"
    assert max(t.tv_lower or 0.0 for t in r.tests if t.component != "length") > 0.05


def _installed_function_accepts_a_zero_probability_draft_at_u0() -> bool:
    """Ground truth from the installed transformers: does r = 0 accept a draft token the target gives probability 0?

    transformers up to 5.24 accepts when r <= p/q (so r = 0 accepts p = 0); 5.25 accepts when r < p/q.
    """
    from transformers.generation import utils

    fn = getattr(utils, FUNCTION)
    target = torch.log(torch.tensor([[[0.5, 0.0, 0.5], [1 / 3, 1 / 3, 1 / 3]]]))
    draft = torch.log(torch.tensor([[[0.0, 1.0, 0.0]]]))  # the draft proposes token 1, p(1) = 0
    original = torch.rand_like
    torch.rand_like = lambda x, *args, **kwargs: torch.zeros_like(x)  # type: ignore[assignment]
    try:
        _, n_matches = fn(torch.tensor([[0, 1]]), draft, 1, target)
    finally:
        torch.rand_like = original  # type: ignore[assignment]
    return int(n_matches) == 1


def test_with_injected_uniforms_the_check_finds_a_u0_acceptance_exactly_when_the_function_has_one() -> None:
    """With speceq's uniforms, the u = 0 template shows transformers' acceptance rule at r = 0.

    Where the installed function accepts at r <= p/q, r = 0 accepts a draft with p = 0: shifted,
    by zero-probability tokens of the u0 template only. Where it accepts at r < p/q: equivalent.
    """
    accepts = _installed_function_accepts_a_zero_probability_draft_at_u0()
    k = transformers_speculative_sampling(inject_uniforms=True)
    assert k.spec.uniforms
    scenarios = quick_scenarios(k.spec, 0.05)
    boundary = {f"{s.name}/{t.name}": t.boundary for s in scenarios for t in s.templates}
    assert "u0" in boundary.values()  # the boundary is reached, so "equivalent" is a finding, not a gap
    r = check(k, scenarios=scenarios)
    zero = [v for v in r.violations if v.kind == "zero-probability"]
    if accepts:
        assert r.verdict == "shifted" and zero and {boundary[v.template] for v in zero} == {"u0"}, r.summary()
    else:
        assert r.verdict == "equivalent" and not zero, r.summary()
    assert torch.rand_like.__module__ != __name__  # the patch is undone after each call


def test_the_adapter_draws_what_the_function_draws_after_torch_manual_seed() -> None:
    """Seeding only the CPU generator (not torch.manual_seed, 0.4-1.8 ms a call) leaves every draw as it was."""
    from transformers.generation import utils

    fn = getattr(utils, FUNCTION)
    k = transformers_speculative_sampling()
    rng = np.random.default_rng(3)
    emitted = set()
    for _ in range(60):
        v, n = 5, 3
        p = torch.from_numpy(rng.dirichlet(np.ones(v), n + 1).astype(np.float32))
        q = torch.from_numpy(rng.dirichlet(np.ones(v), n).astype(np.float32))
        d = torch.from_numpy(rng.integers(0, v, n))
        req = SingleRequest(vocab_size=v, draft_token_ids=d, draft_probs=q, target_probs=p,
                            uniforms=torch.zeros(n, dtype=torch.float64), sample_uniform=0.5,
                            seed=int(rng.integers(0, 2**62)), generator=torch.Generator())
        got = k(req).tokens
        torch.manual_seed(req.seed)  # what the adapter called before each call until 2026-12-02
        want, _ = fn(torch.cat([torch.zeros(1, dtype=torch.int64), d])[None], req.draft_logits[None], n,
                     req.target_logits[None])
        assert torch.equal(got, want[0])
        emitted.add(tuple(got.tolist()))
    assert len(emitted) > 30  # the requests draw different outcomes: the comparison is not of constants


def _example():  # noqa: ANN202 - the how-to's example module
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "examples/kernels/hf_signature.py"
    spec = importlib.util.spec_from_file_location("hf_signature_example", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_function_with_transformers_signature_is_wrapped_by_fn() -> None:
    """#48 bullet 4: the documented adapter drives a user's function; its planted mutant is shifted."""
    ex = _example()
    assert ex.my_kernel.spec.layout == "single" and ex.my_kernel.name == "my_speculative_sampling"
    scenarios = quick_scenarios(ex.my_kernel.spec, 0.1)
    good = check(ex.my_kernel, scenarios=scenarios)
    assert good.verdict == "equivalent", good.summary()
    bad = check(ex.my_buggy_kernel, scenarios=scenarios, solo=False)
    assert bad.verdict == "shifted" and any(f.component == "recovered" for f in bad.findings), bad.summary()


def test_fn_gets_the_ensemble_weight_only_when_given_and_must_be_callable() -> None:
    from speceq.errors import ConfigError

    seen: list[dict] = []

    def step(ids, draft_logits, k, target_logits, **kwargs):  # noqa: ANN001, ANN003, ANN202
        seen.append(kwargs)
        return ids[:, 1:2], 0  # the first draft (whatever it is): a wrong kernel, only the call is checked here

    req = SingleRequest(vocab_size=3, draft_token_ids=torch.tensor([1]), draft_probs=torch.full((1, 3), 1 / 3),
                        target_probs=torch.full((2, 3), 1 / 3), uniforms=torch.zeros(1, dtype=torch.float64),
                        sample_uniform=0.5, seed=1, generator=torch.Generator())
    transformers_speculative_sampling(fn=step)(req)
    weighted = transformers_speculative_sampling(fn=step, assistant_ensemble_weight=0.5)
    weighted(req)
    assert seen == [{}, {"assistant_ensemble_weight": 0.5}] and weighted.spec.lossy
    with pytest.raises(ConfigError, match="signature"):
        transformers_speculative_sampling(fn=42)  # type: ignore[arg-type]
