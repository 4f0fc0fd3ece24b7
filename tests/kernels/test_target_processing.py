"""The exact processed law (vLLM's conventions) and the unambiguous cuts."""

from __future__ import annotations

import numpy as np
import pytest

from speceq.kernels.target_processing import RequestParams, cut_margins, min_p_midpoint, nucleus_midpoint, processed_law


def test_temperature_top_k_top_p() -> None:
    logits = np.log(np.array([0.4, 0.3, 0.2, 0.1], dtype=np.float32))
    np.testing.assert_allclose(processed_law(logits, RequestParams()), [0.4, 0.3, 0.2, 0.1], rtol=1e-6)
    np.testing.assert_allclose(processed_law(logits, RequestParams(top_k=2)), [4 / 7, 3 / 7, 0, 0], rtol=1e-6)
    # top_p = 0.65: 0.4 is kept (nothing before it), 0.3 kept (0.4 < 0.65), 0.2 dropped (0.7 >= 0.65)
    np.testing.assert_allclose(processed_law(logits, RequestParams(top_p=0.65)), [4 / 7, 3 / 7, 0, 0], rtol=1e-6)
    t = processed_law(logits, RequestParams(temperature=0.5))
    expect = np.array([0.4, 0.3, 0.2, 0.1]) ** 2
    np.testing.assert_allclose(t, expect / expect.sum(), rtol=1e-5)
    g = processed_law(logits, RequestParams(temperature=0.0))
    assert g.tolist() == [1.0, 0.0, 0.0, 0.0]


def test_top_p_applies_after_top_k_and_temperature() -> None:
    rng = np.random.default_rng(0)
    logits = rng.normal(size=50).astype(np.float32)
    prm = RequestParams(temperature=0.7, top_k=10, top_p=0.5)
    law = processed_law(logits, prm)
    before = processed_law(logits, RequestParams(temperature=0.7, top_k=10))  # top-k, renormalised
    assert (before > 0).sum() == 10
    desc = np.sort(before)[::-1]
    m = int((law > 0).sum())
    assert desc[: m - 1].sum() < 0.5 <= desc[:m].sum()  # the smallest prefix reaching top_p
    np.testing.assert_allclose(law[law > 0], before[law > 0] / before[law > 0].sum())


def test_nucleus_midpoint_makes_the_cut_unambiguous() -> None:
    rng = np.random.default_rng(1)
    logits = rng.normal(size=30).astype(np.float32)
    prm = RequestParams(top_p=0.8)
    top_p = nucleus_midpoint(logits, prm, 0.8)
    assert abs(top_p - 0.8) < 0.2
    margins = cut_margins(logits, RequestParams(top_p=top_p))
    assert margins["top_p"] > 1e-4
    assert cut_margins(logits, RequestParams(top_k=5))["top_k"] > 0


def test_a_tie_across_the_nucleus_cut_has_no_margin() -> None:
    """Four equal tokens and top_p = 0.5 (0.1 from every cumulative mass): which three stay is a tie order."""
    logits = np.log(np.array([0.05, 0.2, 0.2, 0.15, 0.2, 0.2], dtype=np.float32))
    assert cut_margins(logits, RequestParams(top_p=0.5))["top_p"] == 0.0
    assert cut_margins(logits, RequestParams(top_p=0.9))["top_p"] > 0.04  # the cut between 0.15 and 0.05


def test_greedy_margin() -> None:
    logits = np.array([1.0, 1.0 + 1e-5, 0.0], dtype=np.float32)
    assert cut_margins(logits, RequestParams(temperature=0.0))["argmax"] == pytest.approx(1e-5, rel=0.2)


@pytest.mark.parametrize("params", [RequestParams(0.7, min_p=0.1), RequestParams(1.5, min_p=0.05),
                                    RequestParams(0.8, top_k=20, top_p=0.9, min_p=0.05)])
def test_min_p_law_is_core_processing_in_the_vllm_order(params: RequestParams) -> None:
    """#45 item 2: the kernel check's exact law with min-p is speceq.core.processing's ``vllm`` law
    (temperature, min-p, top-k, top-p), and min-p really cuts tokens a law without it keeps."""
    import torch

    from speceq.core.params import SamplingParams
    from speceq.core.processing import process_logits

    rng = np.random.default_rng(3)
    logits = (rng.standard_normal(61) * 2.0).astype(np.float32)
    law = processed_law(logits, params)
    core = process_logits(torch.from_numpy(logits), SamplingParams(temperature=params.temperature, top_k=params.top_k,
                                                                   top_p=params.top_p, min_p=params.min_p))
    np.testing.assert_allclose(law, core.double().numpy(), atol=1e-6)
    without = processed_law(logits, RequestParams(params.temperature, params.top_k, params.top_p))
    assert (law == 0).sum() > (without == 0).sum()
    # measured on the tempered law: a token survives iff p / max p >= min_p at temperature T
    t = logits.astype(np.float64) / params.temperature
    ratio = np.exp(t - t.max())
    assert not np.any(law[ratio < params.min_p * (1 - 1e-6)])


def test_min_p_midpoint_gives_an_unambiguous_cut() -> None:
    rng = np.random.default_rng(0)
    logits = rng.standard_normal(61).astype(np.float32) * 2
    prm = RequestParams(0.7, min_p=0.1)
    min_p = min_p_midpoint(logits, prm, 0.1)
    assert 0.01 < min_p < 1.0
    margins = cut_margins(logits, RequestParams(0.7, min_p=min_p))
    assert margins["min_p"] > 1e-3
    # halfway in log space between two tempered ratios: the cut keeps the tokens whose ratio is above it
    t = logits.astype(np.float64) / 0.7
    ratios = np.sort(np.exp(t - t.max()))[::-1]
    m = int(np.sum(ratios >= min_p))
    assert ratios[m - 1] > min_p > ratios[m]
    assert np.count_nonzero(processed_law(logits, RequestParams(0.7, min_p=min_p))) == m
