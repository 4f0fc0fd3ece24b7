"""The in-house block-resampling step at k = 3: lossless as a block (equivalent); truncated and capped shifted."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from speceq.kernels import check
from speceq.kernels.block_resampling import block_resampling_kernel, block_resampling_step, joint_laws
from speceq.kernels.contract import ModelRequest
from speceq.kernels.model_layout import default_model_scenarios
from speceq.kernels.resolve import resolve_kernel
from speceq.verdicts.verdict import Verdict


def _request(k: int = 2, batch: int = 4, seed: int = 0) -> ModelRequest:
    scn = default_model_scenarios(k, scale=0.1)[0]
    target, draft = scn.models()
    prompts = torch.tensor([scn.templates[i % len(scn.templates)].prompt for i in range(batch)])
    return ModelRequest(vocab_size=scn.vocab_size, k=k, prompts=prompts, target=target, draft=draft,
                        seeds=torch.arange(batch), generator=torch.Generator().manual_seed(seed))


def test_the_joint_laws_are_the_products_along_every_block() -> None:
    req = _request(k=2)
    P, Q = joint_laws(req)
    V = req.vocab_size
    assert P.shape == (4, V * V)
    np.testing.assert_allclose(P.sum(dim=1).numpy(), 1.0, atol=1e-9)
    for b in range(4):
        for x0, x1 in [(0, 0), (3, 5), (7, 1)]:
            pre = req.prompts[b: b + 1]
            p0 = req.target(pre)[0, x0].double()
            p1 = req.target(torch.cat([pre, torch.tensor([[x0]])], dim=1))[0, x1].double()
            assert float(P[b, x0 * V + x1]) == pytest.approx(float(p0 * p1), rel=1e-6)


def test_the_truncated_variant_emits_one_token_after_a_rejection_and_the_exact_one_a_full_block() -> None:
    full = block_resampling_step(_request(k=3, batch=200), "exact")
    assert (full >= 0).all() and full.shape == (200, 4)
    cut = block_resampling_step(_request(k=3, batch=200), "truncated")
    lengths = (cut >= 0).sum(dim=1)
    assert set(lengths.tolist()) == {1, 4}


def test_block_resampling_at_k3_is_equivalent() -> None:
    r = check(block_resampling_kernel("exact"), seed=0)
    assert r.spec.max_draft == 3
    assert r.verdict == Verdict.EQUIVALENT, r.summary()
    calls = next(f.text for f in r.findings if f.component == "model-calls")
    assert "74.0 target prefixes per request" in calls  # 1 + 8 + 64 for the joint laws, 1 for the last token


@pytest.mark.parametrize("variant", ["truncated", "capped"])
def test_the_lossy_variants_are_shifted(variant: str) -> None:
    r = check(block_resampling_kernel(variant), seed=0)
    assert r.verdict == Verdict.SHIFTED, r.summary()
    assert not r.violations and any(f.component == "cell" for f in r.findings)


def test_any_k() -> None:
    assert check(block_resampling_kernel("exact", k=2), scale=0.5, seed=3).verdict == Verdict.EQUIVALENT
    assert resolve_kernel("model:block-resampling-capped").name == "model:block-resampling-capped"
