"""my_sampler samples the same distribution as plain sampling of the same model.

The candidate engine (``my_sampler:sample``) and the budget are set in pyproject.toml; each
``speceq.check`` compares it with speceq's ``baseline`` engine and scores its tokens with the
model (the oracle). A shifted check fails its test with the evidence; an inconclusive one is
skipped with the sample size that would decide (``--speceq-inconclusive``).
"""

import pytest


@pytest.mark.speceq_case(id="def-T1", prompt="def ", temperature=1.0, max_new_tokens=4, batch_size=64)
@pytest.mark.speceq_case(id="class-T07-top-k", prompt="class ", temperature=0.7, top_k=20, max_new_tokens=4,
                         batch_size=64)
def test_sampling_matches_the_model(speceq):
    """Both marked cases in one check (one Holm family): every position, every token."""
    speceq.check()


def test_top_p(speceq):
    speceq.check(speceq.case(id="import-top-p", prompt="import ", temperature=0.9, top_p=0.8, max_new_tokens=4,
                             batch_size=64))


def test_greedy(speceq):
    """Greedy decoding: token-for-token equality with the baseline. Equal rows certify the TV of whole rows below
    a tolerance eps at alpha = 1e-3 from n > ln(alpha) / ln(1 - eps) rows on: 43 for 0.15, 135 for 0.05."""
    speceq.check(speceq.case(id="greedy", prompt="def __init__(self", temperature=0, max_new_tokens=16), samples=150)


def test_negative_control_is_caught(speceq):
    """A sampler with a known bug must come out shifted, or the gate has no power (fixed budget: 300)."""
    result = speceq.run(speceq.case(id="def-T1-hot", prompt="def ", max_new_tokens=4, batch_size=64),
                        candidate="my_sampler:sample_too_hot", samples=300)
    assert result.verdict == "shifted", result.summary()
