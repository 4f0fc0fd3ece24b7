"""The calibration benchmark gives every variant its own seed stream (independent false-alarm counts)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import torch
from benchmark_scripts import load_script
from scipy import stats

from speceq.kernels.contract import SingleRequest


def _script():  # noqa: ANN202
    return load_script("kernel_calibration")


def test_collection_seeds_are_distinct_per_variant_seed_and_block() -> None:
    cal = _script()
    variants = ("reference", "exponential-race", "block", "one-hot-path", "exact-match", "padded-reference",
                "single-reference")
    seeds = {(v, s, b): cal.collection_seed(v, s, b) for v in variants for s in (0, 1) for b in range(40)}
    assert len(set(seeds.values())) == len(seeds)  # no two (variant, --seed, block) share a stream
    assert all(0 <= x < 2**63 for x in seeds.values())
    assert cal.collection_seed("block", 0, 3) == cal.collection_seed("block", 0, 3)  # reproducible


class _Fixed:
    """A stand-in generator whose uniforms are all one value (the two ends of the randomization)."""

    def __init__(self, value: float) -> None:
        self.value = value

    def random(self, size: int) -> np.ndarray:
        return np.full(size, self.value)


def test_single_reference_variant_is_the_single_request_contract_on_its_own_stream() -> None:
    """``--variant single-reference`` calls the reference one request at a time (transformers' shape)."""
    cal = _script()
    single, ragged = cal.make_kernel("single-reference"), cal.make_kernel("reference")
    assert single.spec.layout == "single" and ragged.spec.layout == "ragged"
    assert single.spec.method == ragged.spec.method == "standard" and single.spec.uniforms
    req = SingleRequest(vocab_size=2, draft_token_ids=torch.tensor([1]), draft_probs=torch.tensor([[0.0, 1.0]]),
                        target_probs=torch.tensor([[0.5, 0.5], [0.25, 0.75]]), uniforms=torch.tensor([0.9]),
                        sample_uniform=0.1, seed=0, generator=torch.Generator())
    assert single(req).tokens.tolist() == [0]  # u = 0.9 > p/q = 0.5 rejects 1; the residual is all on 0
    accepted = replace(req, uniforms=torch.tensor([0.4]))
    assert single(accepted).tokens.tolist() == [1, 0]  # accepted; the bonus ~ [0.25, 0.75] at 0.1 is 0
    own = {cal.collection_seed("single-reference", 0, b) for b in range(100)}
    assert not own & {cal.collection_seed(v, 0, b) for v in ("reference", "padded-reference") for b in range(100)}


def test_chain_randomized_p_values_are_exactly_uniform_by_enumeration() -> None:
    """P(p <= u) = u exactly over all n + 1 outcomes of a 2-bin law (mean 70 integer: mirrored atoms)."""
    cal = _script()
    law, n = np.array([0.3, 0.7]), 100
    for u in (0.5, 0.05, 1e-3, 1e-5, 1e-7):
        total = 0.0
        for x in range(n + 1):
            labels = np.array([0] * x + [1] * (n - x))
            low = cal.chain_randomized(labels, law, _Fixed(0.0))[0]
            high = cal.chain_randomized(labels, law, _Fixed(1.0))[0]
            share = 1.0 if high <= u else (0.0 if low > u else (u - low) / (high - low))
            total += stats.binom.pmf(x, n, 0.3) * share
        assert abs(total - u) <= 1e-9 * u + 1e-15, (u, total)
