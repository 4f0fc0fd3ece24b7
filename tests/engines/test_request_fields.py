"""The request fields (min_p, penalties, logit_bias) in the built-in engines and the oracle.

Every emitted token's law must be the processed law given THAT row's own history (its prompt
and the tokens it generated before): checked against a computation by hand (one forward of the
row's prefix, :func:`process_logits` with the row's explicit token lists), for the baseline, the
reference speculative engine and the transformers oracle; and an engine that does not declare a
field refuses a case that sets it, before sampling, naming the case, the field and the engine.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from fake_engines import FakeEngine

from speceq.core.params import SamplingParams
from speceq.core.processing import process_logits, token_history
from speceq.engines.base import ALL_SAMPLING_FIELDS, SampleRequest, check_sampling_support, validate_batch
from speceq.engines.baseline import BaselineEngine
from speceq.engines.reference import ReferenceSpeculativeEngine
from speceq.errors import ConfigError
from speceq.inputs.cases import Case
from speceq.oracles.hf import TargetOracle
from speceq.pipeline.config import RunConfig
from speceq.pipeline.runner import run

FIELDS = [
    SamplingParams(max_new_tokens=7, repetition_penalty=1.6, frequency_penalty=0.9, presence_penalty=0.6,
                   logit_bias={3: 2.0, 40: -3.0}, min_p=0.05),
    SamplingParams(max_new_tokens=7, temperature=0.7, top_k=30, top_p=0.9, frequency_penalty=1.5, min_p=0.1),
    SamplingParams(max_new_tokens=7, temperature=1.3, repetition_penalty=0.7, logit_bias={5: 4.0}, min_p=0.02,
                   top_p=0.8, processing="hf"),
    SamplingParams(max_new_tokens=7, temperature=0.0, presence_penalty=2.0, ignore_eos=True),
]


def hand_laws(model, prompts, batch, params, eos_id) -> np.ndarray:
    """[emitted tokens, V]: each row's law at each of its positions, from its own prompt and earlier tokens."""
    laws = []
    with torch.inference_mode():
        for r in range(batch.rows):
            prompt = list(prompts[int(batch.prompt_index[r])])
            row = batch.row_tokens(r)
            for t in range(len(row)):
                logits = model(input_ids=torch.tensor([prompt + row[:t]])).logits[0, -1]
                hist = token_history([prompt], [row[:t]], logits.shape[-1])
                laws.append(process_logits(logits[None], params, eos_token_id=eos_id, history=hist)[0].numpy())
    return np.stack(laws)


def traced(batch) -> np.ndarray:
    mask = np.arange(batch.tokens.shape[1])[None, :] < batch.lengths[:, None]
    return batch.info["trace_probs"][mask]


@pytest.mark.parametrize("params", FIELDS, ids=lambda p: p.label())
def test_baseline_draws_each_token_from_its_own_rows_processed_law(target, eos_id, mixed_prompts, params) -> None:
    engine = BaselineEngine(target, eos_token_id=eos_id, trace=True)
    request = SampleRequest(prompts=mixed_prompts, params=params, n=3, seed=2, batch_size=4)
    batch = engine.sample(request)
    validate_batch(batch, request, engine)
    np.testing.assert_allclose(traced(batch), hand_laws(target, mixed_prompts, batch, params, eos_id), atol=1e-5,
                               rtol=0)


@pytest.mark.parametrize("params", FIELDS, ids=lambda p: p.label())
def test_reference_verifies_with_each_rows_own_history(target, close_draft, eos_id, mixed_prompts, params) -> None:
    engine = ReferenceSpeculativeEngine(target, close_draft, k=3, eos_token_id=eos_id, trace=True)
    request = SampleRequest(prompts=mixed_prompts, params=params, n=3, seed=4, batch_size=4)
    batch = engine.sample(request)
    validate_batch(batch, request, engine)
    assert batch.accepted_tokens and batch.accepted_tokens < batch.drafted_tokens  # accepts and rejects both happen
    np.testing.assert_allclose(traced(batch), hand_laws(target, mixed_prompts, batch, params, eos_id), atol=1e-5,
                               rtol=0)


@pytest.mark.parametrize("params", FIELDS[:3], ids=lambda p: p.label())
def test_oracle_scores_each_token_with_its_rows_history(target, eos_id, mixed_prompts, params) -> None:
    batch = BaselineEngine(target, eos_token_id=eos_id).sample(
        SampleRequest(prompts=mixed_prompts, params=params, n=3, seed=5, batch_size=4))
    scores = TargetOracle(target, eos_token_id=eos_id).score(mixed_prompts, batch, params)
    laws = hand_laws(target, mixed_prompts, batch, params, eos_id)
    np.testing.assert_allclose(scores.prob, laws[np.arange(len(scores.token)), scores.token], atol=1e-5, rtol=0)
    assert (scores.prob > 0).all()
    # the first-token law: each prefix is a prompt (its tokens count for the repetition penalty only)
    first = TargetOracle(target, eos_token_id=eos_id).next_token_probs([list(p) for p in mixed_prompts], params)
    hist = token_history(mixed_prompts, [[] for _ in mixed_prompts], first.shape[1])
    with torch.inference_mode():
        for i, p in enumerate(mixed_prompts):
            logits = target(input_ids=torch.tensor([list(p)])).logits[0, -1]
            want = process_logits(logits[None], params, eos_token_id=eos_id,
                                  history=type(hist)(hist.prompt_mask[i : i + 1], hist.output_counts[i : i + 1]))
            np.testing.assert_allclose(first[i], want[0].numpy(), atol=1e-5, rtol=0)


def test_a_field_the_engine_does_not_declare_is_refused_naming_case_field_and_engine() -> None:
    params = SamplingParams(presence_penalty=0.5)
    with pytest.raises(ConfigError) as e:
        check_sampling_support(FakeEngine(name="plain"), params, "c1", role="candidate")
    assert e.value.where == "case 'c1'.presence_penalty" and "the candidate engine 'plain' cannot apply" in str(e.value)

    class HfOrderOnly(FakeEngine):
        sampling_fields = {"min_p": ("hf",)}

    with pytest.raises(ConfigError, match="applies min_p only in the processing order\\(s\\) 'hf', not 'vllm'"):
        check_sampling_support(HfOrderOnly(), SamplingParams(min_p=0.1), "c2")
    check_sampling_support(HfOrderOnly(), SamplingParams(min_p=0.1, processing="hf"), "c2")
    check_sampling_support(FakeEngine(), SamplingParams(temperature=0.5, top_k=3), "c3")  # nothing extra: fine
    assert set(ALL_SAMPLING_FIELDS) == {"min_p", "repetition_penalty", "presence_penalty", "frequency_penalty",
                                        "logit_bias", "stop", "include_stop_str_in_output", "seed",
                                        "structured_outputs"}


class CountingEngine(FakeEngine):
    def sample(self, request):  # noqa: ANN001, ANN201
        self.calls_made = getattr(self, "calls_made", 0) + 1
        return super().sample(request)


@pytest.mark.parametrize("sequential", [False, True])
def test_a_run_refuses_the_case_before_sampling(tmp_path: Path, sequential: bool) -> None:
    ok = Case(case_id="ok", prompt_ids=(1, 2), params=SamplingParams(max_new_tokens=2))
    bad = Case(case_id="biased", prompt_ids=(1, 2), params=SamplingParams(max_new_tokens=2, logit_bias={1: 3.0}))
    engines = {"baseline": CountingEngine(), "candidate": CountingEngine()}
    cfg = RunConfig(baseline="x", candidate="y", oracle=False, samples=40, seed=1, out_dir=tmp_path / "out",
                    progress=False, sequential=sequential)
    with pytest.raises(ConfigError, match="case 'biased'.logit_bias: the baseline engine 'fake' cannot apply logit_bias"):
        run(cfg, [ok, bad], engines=engines)
    assert not any(getattr(e, "calls_made", 0) for e in engines.values())


def test_the_server_oracle_refuses_the_fields_it_does_not_apply() -> None:
    from speceq.oracles.server import check_server_cases

    case = Case(case_id="mp", prompt_ids=(1,), params=SamplingParams(min_p=0.1))
    with pytest.raises(ConfigError, match="case 'mp' \\(server oracle\\).*does not apply min_p"):
        check_server_cases([case], None, 300)


def test_a_plain_function_declares_its_fields_as_an_attribute() -> None:
    from speceq.engines.function import FunctionEngine

    def sampler(prompt_ids, n, params, seed):  # noqa: ANN001, ANN202
        return [[1]] * n

    with pytest.raises(ConfigError, match="engine 'sampler' cannot apply min_p"):
        check_sampling_support(FunctionEngine(sampler), SamplingParams(min_p=0.1), "c")
    sampler.sampling_fields = {"min_p": ("vllm",)}
    check_sampling_support(FunctionEngine(sampler), SamplingParams(min_p=0.1), "c")
    with pytest.raises(ConfigError, match="engine 'sampler' cannot apply logit_bias"):
        check_sampling_support(FunctionEngine(sampler), SamplingParams(min_p=0.1, logit_bias={1: 1.0}), "c")
