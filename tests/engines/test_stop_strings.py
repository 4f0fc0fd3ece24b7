"""Stop strings in the built-in engines, the contract check and a run.

A row must end at the token that completes its first stop string (its text decoded with the
case's tokenizer), like at an EOS; each emitted token is still drawn from the processed law of
its own prefix. The mutant ``stop-at-block-end`` (stop strings checked once per verified block)
lets rows run on past a stop string inside an accepted block: the contract check names the row.
"""

from __future__ import annotations

import string
from pathlib import Path

import numpy as np
import pytest
from fake_engines import FakeEngine
from test_request_fields import hand_laws, traced

from speceq.core.params import SamplingParams
from speceq.core.stops import first_stop
from speceq.engines.base import SampleBatch, SampleRequest, check_sampling_support, validate_batch
from speceq.engines.baseline import BaselineEngine
from speceq.engines.mutants import make_mutant
from speceq.engines.reference import ReferenceSpeculativeEngine
from speceq.errors import ConfigError, EngineError
from speceq.inputs.cases import Case
from speceq.models.text_decoding import row_decoder
from speceq.oracles.hf import TargetOracle
from speceq.pipeline.config import RunConfig
from speceq.pipeline.runner import run

#: Every ASCII letter: the tiny random target emits one at ~1 token in 5, so most rows of 8 stop early.
LETTERS = tuple(string.ascii_letters)
PARAMS = SamplingParams(max_new_tokens=8, stop=LETTERS, tokenizer="bytes")
DECODE = row_decoder("bytes")


def check_rows_end_at_their_first_stop(batch: SampleBatch, L: int, eos: int | None) -> None:
    """Assert every row ends at its first stop string (or has none)."""
    for r in range(batch.rows):
        row = batch.row_tokens(r)
        match = first_stop(row, DECODE, LETTERS)
        if match is None:
            assert len(row) == L or row[-1] == eos, (r, row)
        else:
            assert match.length == len(row), (r, row, match)


def engines(target, close_draft, eos_id):  # noqa: ANN001, ANN201
    return {
        "baseline": lambda: BaselineEngine(target, eos_token_id=eos_id, trace=True),
        "reference": lambda: ReferenceSpeculativeEngine(target, close_draft, k=3, eos_token_id=eos_id, trace=True),
    }


@pytest.mark.parametrize("which", ["baseline", "reference"])
def test_rows_end_at_the_token_completing_a_stop_string(target, close_draft, eos_id, mixed_prompts, which) -> None:
    engine = engines(target, close_draft, eos_id)[which]()
    request = SampleRequest(prompts=mixed_prompts, params=PARAMS, n=6, seed=3, batch_size=4)
    batch = engine.sample(request)
    validate_batch(batch, request, engine)
    check_rows_end_at_their_first_stop(batch, PARAMS.max_new_tokens, eos_id)
    early = [r for r in range(batch.rows) if batch.lengths[r] < PARAMS.max_new_tokens
             and batch.row_tokens(r)[-1] != eos_id]
    assert len(early) >= 3  # rows ended early by a stop string, not by EOS
    # every token, up to the stop, is still drawn from its own prefix's processed law
    np.testing.assert_allclose(traced(batch), hand_laws(target, mixed_prompts, batch, PARAMS, eos_id), atol=1e-5,
                               rtol=0)


def test_the_oracle_scores_a_stopped_row_like_an_eos_ended_one(target, eos_id, mixed_prompts) -> None:
    batch = BaselineEngine(target, eos_token_id=eos_id).sample(
        SampleRequest(prompts=mixed_prompts, params=PARAMS, n=4, seed=6, batch_size=4))
    scores = TargetOracle(target, eos_token_id=eos_id).score(mixed_prompts, batch, PARAMS)
    assert len(scores.token) == int(batch.lengths.sum())  # exactly the row's tokens, nothing after the stop
    laws = hand_laws(target, mixed_prompts, batch, PARAMS, eos_id)
    np.testing.assert_allclose(scores.prob, laws[np.arange(len(scores.token)), scores.token], atol=1e-5, rtol=0)


def test_the_block_end_mutant_overruns_and_the_contract_check_names_the_row(target, close_draft, eos_id,
                                                                           mixed_prompts) -> None:
    engine = make_mutant("stop-at-block-end", target=target, draft=close_draft, k=4, eos_token_id=eos_id)
    request = SampleRequest(prompts=mixed_prompts, params=PARAMS, n=6, seed=3, batch_size=4)
    batch = engine.sample(request)
    over = [r for r in range(batch.rows) if (m := first_stop(batch.row_tokens(r), DECODE, LETTERS))
            and m.length < batch.lengths[r]]
    assert over  # some row ran on past its stop string
    with pytest.raises(EngineError, match=r"row \d+ \(prompt \d, sample \d\) continues after a stop string completed "
                                          r"at position \d"):
        validate_batch(batch, request, engine)


def fake_batch(rows: list[list[int]], L: int) -> SampleBatch:
    tokens = np.full((len(rows), L), -1, dtype=np.int64)
    for i, r in enumerate(rows):
        tokens[i, : len(r)] = r
    return SampleBatch(tokens=tokens, lengths=np.array([len(r) for r in rows]), prompt_index=np.zeros(len(rows),
                                                                                                    dtype=np.int64))


def test_the_contract_accepts_a_stop_ending_and_refuses_an_early_end_without_one() -> None:
    eng = FakeEngine()
    eng.vocab_size, eng.eos_token_id = 259, 257  # the byte vocabulary
    params = SamplingParams(max_new_tokens=5, stop=("\n", "ab"), tokenizer="bytes")
    request = SampleRequest(prompts=((1,),), params=params, n=3, seed=0)
    a, b, n, x = (ord(c) for c in "ab\nx")
    validate_batch(fake_batch([[x, n], [x, a, b], [x, x, x, x, x]], 5), request, eng)  # stops across tokens too
    with pytest.raises(EngineError, match=r"row 1 .*stops after 2 of max_new_tokens=5 tokens without the EOS"):
        validate_batch(fake_batch([[x, n], [x, a], [x, x, x, x, x]], 5), request, eng)
    with pytest.raises(EngineError, match=r"row 2 .*continues after a stop string completed at position 1: it goes "
                                          r"on to position 3"):
        validate_batch(fake_batch([[x, n], [x, a, b], [x, n, x, x]], 5), request, eng)


def test_an_engine_that_does_not_declare_stop_refuses_it() -> None:
    with pytest.raises(ConfigError, match="case 'c'.stop: engine 'fake' cannot apply stop"):
        check_sampling_support(FakeEngine(), PARAMS, "c")
    with pytest.raises(ConfigError, match="cannot apply include_stop_str_in_output"):
        check_sampling_support(FakeEngine(), SamplingParams(include_stop_str_in_output=True), "c")
    check_sampling_support(BaselineEngine.__new__(BaselineEngine), PARAMS, "c")


@pytest.mark.parametrize(("candidate", "fails"), [("reference", False), ("mutant", True)])
def test_a_run_with_stop_strings(tmp_path: Path, target, close_draft, eos_id, candidate: str, fails: bool) -> None:
    case = Case(case_id="stops", prompt_ids=(5, 17, 99), params=PARAMS, batch_size=4)
    cand = (ReferenceSpeculativeEngine(target, close_draft, k=4, eos_token_id=eos_id) if candidate == "reference"
            else make_mutant("stop-at-block-end", target=target, draft=close_draft, k=4, eos_token_id=eos_id))
    eng = {"baseline": BaselineEngine(target, eos_token_id=eos_id), "candidate": cand}
    cfg = RunConfig(baseline="x", candidate="y", oracle=False, samples=40, seed=1, out_dir=tmp_path / "out",
                    progress=False)
    if fails:
        with pytest.raises(EngineError, match="continues after a stop string"):
            run(cfg, [case], engines=eng)
    else:
        run(cfg, [case], engines=eng)
