"""The engines' own tests, re-implemented: they pass the reference, catch a gross bug, miss the bonus bug."""

from __future__ import annotations

import pytest

from speceq.kernels.engine_tests import ENGINE_TESTS
from speceq.kernels.kernel_mutants import make
from speceq.kernels.reference_kernels import reference_kernel


@pytest.mark.parametrize("name", ["vllm-l2", "trtllm-kl"])
def test_engine_tests_pass_the_reference_and_catch_resampling_from_p(name: str) -> None:
    test = ENGINE_TESTS[name]
    assert not test(reference_kernel()).detected
    assert test(make("residual-from-target")).detected


def test_flashinfer_cosine_at_a_smaller_budget() -> None:
    test = ENGINE_TESTS["flashinfer-cosine"]
    assert not test(reference_kernel(), draws=40_000).detected
    assert test(make("accept-target-argmax"), draws=40_000).detected


@pytest.mark.parametrize("name", ["vllm-l2", "trtllm-kl"])
def test_engine_tests_cannot_see_a_bonus_bug(name: str) -> None:
    assert not ENGINE_TESTS[name](make("bonus-from-draft")).detected
