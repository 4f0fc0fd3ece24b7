"""transformers' _speculative_sampling driven as a single-request kernel."""

from __future__ import annotations

import numpy as np
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


def test_with_injected_uniforms_u0_accepts_a_draft_of_probability_0() -> None:
    """transformers accepts when r <= p/q: r = 0 (torch.rand can return 0) accepts a draft with p = 0."""
    import torch

    k = transformers_speculative_sampling(inject_uniforms=True)
    assert k.spec.uniforms
    scenarios = quick_scenarios(k.spec, 0.05)
    boundary = {f"{s.name}/{t.name}": t.boundary for s in scenarios for t in s.templates}
    r = check(k, scenarios=scenarios)
    zero = [v for v in r.violations if v.kind == "zero-probability"]
    assert r.verdict == "shifted" and zero and {boundary[v.template] for v in zero} == {"u0"}
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
