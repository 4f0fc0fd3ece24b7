"""Hypothesis fuzz of the engine-output validator: any malformed batch is an EngineError
naming the engine and the case; a well-formed one passes."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from speceq.core.params import SamplingParams
from speceq.engines.base import PAD_OUT, SampleBatch, SampleRequest, validate_batch
from speceq.errors import EngineError


class Named:
    name = "fuzzed"
    vocab_size = 20
    eos_token_id = 19


def good_batch(rng: np.random.Generator, request: SampleRequest) -> SampleBatch:
    rows = len(request.prompts) * request.n
    L = request.params.max_new_tokens
    lengths = rng.integers(1, L + 1, size=rows) if not request.params.ignore_eos else np.full(rows, L)
    tokens = np.full((rows, L), PAD_OUT, dtype=np.int64)
    for r in range(rows):
        tokens[r, : lengths[r]] = rng.integers(0, 19, size=lengths[r])  # never EOS inside
        if lengths[r] < L:
            tokens[r, lengths[r] - 1] = 19  # stopped early: ends with EOS
    return SampleBatch(tokens=tokens, lengths=lengths.astype(np.int64), prompt_index=request.rows())


requests = st.builds(
    lambda prompts, n, L, ignore: SampleRequest(prompts=tuple((1,) * (i + 1) for i in range(prompts)),
                                                params=SamplingParams(max_new_tokens=L, ignore_eos=ignore), n=n, seed=0),
    st.integers(1, 3), st.integers(1, 4), st.integers(1, 6), st.booleans(),
)

CORRUPTIONS = ["drop_row", "extra_column", "oov_token", "negative_token", "zero_length", "too_long", "bad_layout",
               "garbage_after_end", "float_tokens", "not_a_batch", "eos_inside", "truncated_without_eos"]


def corrupt(batch: SampleBatch, how: str, request: SampleRequest, rng: np.random.Generator):
    t, lens, pi = batch.tokens.copy(), batch.lengths.copy(), batch.prompt_index.copy()
    r = int(rng.integers(0, len(lens)))
    L = t.shape[1]
    if how == "drop_row":
        return SampleBatch(tokens=t[1:], lengths=lens[1:], prompt_index=pi[1:])
    if how == "extra_column":
        return SampleBatch(tokens=np.pad(t, ((0, 0), (0, 1)), constant_values=PAD_OUT), lengths=lens, prompt_index=pi)
    if how == "oov_token":
        t[r, 0] = 20 + int(rng.integers(0, 1000))
    elif how == "negative_token":
        t[r, 0] = -5
    elif how == "zero_length":
        lens[r] = 0
    elif how == "too_long":
        lens[r] = L + 1
    elif how == "bad_layout":
        if len(request.prompts) == 1:
            pi[r] = 1
        else:
            pi = pi[::-1].copy() if not np.array_equal(pi[::-1], pi) else pi + 1
    elif how == "garbage_after_end":
        if lens[r] == L:
            lens[r] = L - 1 if L > 1 else 0
            if L > 1 and not request.params.ignore_eos:
                t[r, L - 2] = 19
        else:
            t[r, L - 1] = 3
    elif how == "float_tokens":
        return SampleBatch(tokens=t.astype(np.float64), lengths=lens, prompt_index=pi)
    elif how == "not_a_batch":
        return {"tokens": t}
    elif how == "eos_inside":
        if L < 2:
            t[r, 0] = 20  # nothing to put EOS inside of: fall back to an OOV token
        else:
            lens[r] = L
            t[r, :] = 1
            t[r, 0] = 19
    elif how == "truncated_without_eos":
        if request.params.ignore_eos or L < 2:
            t[r, 0] = 25
        else:
            lens[r] = L - 1
            t[r, : L - 1] = 1
            t[r, L - 1] = PAD_OUT
    return SampleBatch(tokens=t, lengths=lens, prompt_index=pi)


@settings(max_examples=150, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(request=requests, how=st.sampled_from(CORRUPTIONS), seed=st.integers(0, 2**16))
def test_every_corruption_is_an_engine_error_naming_engine_and_case(request, how, seed) -> None:
    rng = np.random.default_rng(seed)
    batch = good_batch(rng, request)
    validate_batch(batch, request, Named(), case_id="c1")  # the uncorrupted batch is valid
    with pytest.raises(EngineError) as info:
        validate_batch(corrupt(batch, how, request, rng), request, Named(), case_id="c1")
    assert "engine 'fuzzed'" in str(info.value) and "case 'c1'" in str(info.value)


# ---- EOS errors say which EOS id, which prompt and sample, and where the row continued ------------
TWO_PROMPTS = SampleRequest(prompts=((1,), (2, 2)), params=SamplingParams(max_new_tokens=5), n=3, seed=0)


def _rows(request: SampleRequest, row: int, tokens: list[int]) -> SampleBatch:
    """A valid batch (every row full length, no EOS) with ``row`` replaced by ``tokens``."""
    n_rows, L = len(request.prompts) * request.n, request.params.max_new_tokens
    t = np.full((n_rows, L), 1, dtype=np.int64)
    lens = np.full(n_rows, L, dtype=np.int64)
    t[row] = PAD_OUT
    t[row, : len(tokens)] = tokens
    lens[row] = len(tokens)
    return SampleBatch(tokens=t, lengths=lens, prompt_index=request.rows())


def test_row_continuing_after_eos_names_id_prompt_sample_and_positions() -> None:
    batch = _rows(TWO_PROMPTS, 3, [4, 19, 5, 6])  # row 3 = prompt 1, sample 1 (rows are n rounds of the prompts)
    with pytest.raises(EngineError) as info:
        validate_batch(batch, TWO_PROMPTS, Named(), case_id="c1")
    assert ("row 3 (prompt 1, sample 1) continues after the EOS id 19 at position 1: it goes on to position 3"
            in str(info.value))


def test_row_stopping_without_eos_names_the_eos_id_and_its_last_token() -> None:
    batch = _rows(TWO_PROMPTS, 4, [4, 5])  # row 4 = prompt 0, sample 2
    with pytest.raises(EngineError, match=r"row 4 \(prompt 0, sample 2\) stops after 2 of max_new_tokens=5 tokens "
                                          r"without the EOS id 19 \(its last token is 5\)"):
        validate_batch(batch, TWO_PROMPTS, Named())


def test_eos_under_ignore_eos_names_the_position() -> None:
    request = SampleRequest(prompts=((1,), (2, 2)), params=SamplingParams(max_new_tokens=5, ignore_eos=True), n=3, seed=0)
    batch = _rows(request, 1, [4, 4, 19, 4, 4])  # row 1 = prompt 1, sample 0
    with pytest.raises(EngineError, match=r"row 1 \(prompt 1, sample 0\) holds the EOS id 19 at position 2 although "
                                          "ignore_eos is set"):
        validate_batch(batch, request, Named())
