"""The exact processed law (vLLM's conventions) and the unambiguous cuts."""

from __future__ import annotations

import numpy as np
import pytest

from speceq.kernels.target_processing import RequestParams, cut_margins, nucleus_midpoint, processed_law


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


def test_greedy_margin() -> None:
    logits = np.array([1.0, 1.0 + 1e-5, 0.0], dtype=np.float32)
    assert cut_margins(logits, RequestParams(temperature=0.0))["argmax"] == pytest.approx(1e-5, rel=0.2)
