"""structured_outputs in the built-in engines and the oracle.

Every emitted token's law must be the processed law masked by the grammar state after THAT row's
own tokens before it: checked against a computation by hand (one forward of the row's prefix, the
grammar walked through the row's explicit tokens with a fresh llguidance matcher), for the baseline,
the reference speculative engine and the transformers oracle; every row of a built-in engine follows
the grammar; the gallery's grammar mutant leaves it.
"""

from __future__ import annotations

from dataclasses import replace as dataclasses_replace

import numpy as np
import pytest
import torch

from speceq.core.params import SamplingParams
from speceq.core.processing import process_logits, token_history
from speceq.engines.base import SampleRequest, validate_batch
from speceq.engines.baseline import BaselineEngine
from speceq.engines.reference import ReferenceSpeculativeEngine
from speceq.models.grammar import Grammar, grammar_violation

pytest.importorskip("llguidance", reason="structured_outputs needs the 'structured' extra (llguidance)")

EOS = 257  # the byte tokenizer's EOS, the tiny models' too
GRAMMARS = [
    SamplingParams(max_new_tokens=7, tokenizer="bytes", structured_outputs={"regex": "[a-e]{1,3}(x|yz)"}),
    SamplingParams(max_new_tokens=7, temperature=0.8, top_k=20, tokenizer="bytes",
                   structured_outputs={"choice": ["cab", "bad", "dabbed", "ace"]}),
    SamplingParams(max_new_tokens=7, min_p=0.05, repetition_penalty=1.4, tokenizer="bytes",
                   structured_outputs={"grammar": 'root ::= ("a" | "b")+ "." | "c"'}),
    SamplingParams(max_new_tokens=7, tokenizer="bytes",
                   structured_outputs={"json": {"type": "object", "properties": {"a": {"type": "integer"}},
                                                "required": ["a"]}}),
]


def hand_laws(model, prompts, batch, params) -> np.ndarray:
    """[emitted tokens, V]: each row's law at each position, masked by a fresh grammar walked through its own tokens."""
    grammar = Grammar(params, 259, EOS)
    laws = []
    with torch.inference_mode():
        for r in range(batch.rows):
            prompt = list(prompts[int(batch.prompt_index[r])])
            row = batch.row_tokens(r)
            state = grammar.row()
            for t in range(len(row)):
                logits = model(input_ids=torch.tensor([prompt + row[:t]])).logits[0, -1]
                hist = token_history([prompt], [row[:t]], logits.shape[-1]).with_allowed(state.mask()[None])
                laws.append(process_logits(logits[None], params, eos_token_id=EOS, history=hist)[0].numpy())
                assert state.advance([row[t]]) == 1, f"row {r} leaves the grammar at position {t}"
    return np.stack(laws)


def traced(batch) -> np.ndarray:
    mask = np.arange(batch.tokens.shape[1])[None, :] < batch.lengths[:, None]
    return batch.info["trace_probs"][mask]


@pytest.mark.parametrize("params", GRAMMARS, ids=lambda p: p.structured_outputs[0])
def test_baseline_draws_each_token_from_its_rows_grammar_masked_law(target, mixed_prompts, params) -> None:
    engine = BaselineEngine(target, eos_token_id=EOS, trace=True)
    request = SampleRequest(prompts=mixed_prompts, params=params, n=3, seed=2, batch_size=4)
    batch = engine.sample(request)
    validate_batch(batch, request, engine)
    np.testing.assert_allclose(traced(batch), hand_laws(target, mixed_prompts, batch, params), atol=1e-5, rtol=0)


@pytest.mark.parametrize("params", GRAMMARS, ids=lambda p: p.structured_outputs[0])
def test_reference_masks_each_block_position_by_the_state_over_the_drafts(target, close_draft, mixed_prompts,
                                                                           params) -> None:
    engine = ReferenceSpeculativeEngine(target, close_draft, k=3, eos_token_id=EOS, trace=True)
    request = SampleRequest(prompts=mixed_prompts, params=params, n=3, seed=4, batch_size=4)
    batch = engine.sample(request)
    validate_batch(batch, request, engine)
    assert batch.accepted_tokens >= 2  # drafts are accepted, so the state must move over them
    np.testing.assert_allclose(traced(batch), hand_laws(target, mixed_prompts, batch, params), atol=1e-5, rtol=0)


def test_finished_rows_end_with_eos_and_follow_the_grammar(target, close_draft) -> None:
    params = SamplingParams(max_new_tokens=8, tokenizer="bytes", structured_outputs={"choice": ["ab", "cde"]})
    grammar = Grammar(params, 259, EOS)
    for engine in (BaselineEngine(target, eos_token_id=EOS),
                   ReferenceSpeculativeEngine(target, close_draft, k=3, eos_token_id=EOS)):
        batch = engine.sample(SampleRequest(prompts=[(104, 105)], params=params, n=40, seed=7, batch_size=16))
        rows = [bytes(t for t in batch.row_tokens(r) if t != EOS) for r in range(batch.rows)]
        assert set(rows) <= {b"ab", b"cde"} and len(set(rows)) == 2, rows
        assert all(batch.row_tokens(r)[-1] == EOS for r in range(batch.rows))
        assert all(grammar_violation(grammar, batch.row_tokens(r)) is None for r in range(batch.rows))


def test_oracle_masks_each_token_by_its_own_rows_grammar_state(target, mixed_prompts) -> None:
    from speceq.oracles.hf import TargetOracle

    params = GRAMMARS[0]
    batch = BaselineEngine(target, eos_token_id=EOS).sample(
        SampleRequest(prompts=mixed_prompts, params=params, n=3, seed=5, batch_size=4))
    oracle = TargetOracle(target, eos_token_id=EOS)
    scores = oracle.score(mixed_prompts, batch, params)
    laws = hand_laws(target, mixed_prompts, batch, params)
    np.testing.assert_allclose(scores.prob, laws[np.arange(len(scores.token)), scores.token], atol=1e-5, rtol=0)
    assert (scores.prob > 0).all()
    # a row that leaves the grammar: probability 0 exactly there, and a margin no logit error closes
    bad = batch.tokens.copy()
    bad[0, 0] = ord("z")
    broken = type(batch)(tokens=bad, lengths=batch.lengths, prompt_index=batch.prompt_index)
    s = oracle.score(mixed_prompts, broken, params)
    first = (s.row == 0) & (s.position == 0)
    assert s.prob[first][0] == 0 and s.exclusion_margin[first][0] == np.inf
    assert (s.prob[~(s.row == 0)] > 0).all()
    # the first-token law of each prompt is masked by the grammar's start state
    probs = oracle.next_token_probs([list(p) for p in mixed_prompts], params)
    allowed = np.flatnonzero(probs.sum(axis=0) > 0)
    assert set(allowed) == set(range(ord("a"), ord("e") + 1))


def test_the_grammar_mutant_leaves_the_grammar_and_is_a_hard_failure_the_reference_is_not() -> None:
    """On the bundled models (its gallery case, 8 tokens): every one of 64 mutant rows leaves the grammar
    (measured: 25 of 25 at 25 samples, seeds 202 and 303), named by row and position; the reference's rows never do."""
    from speceq.engines.mutants import MUTANTS, make_mutant
    from speceq.inputs.cases import Case
    from speceq.models import ByteTokenizer, load_draft, load_target
    from speceq.models.prompts import DEFAULT_PROMPTS
    from speceq.pipeline.analysis import analyse_run

    name = "grammar-not-advanced-over-drafts"
    spec = MUTANTS[name]
    target, draft = load_target(), load_draft()
    prompt = tuple(ByteTokenizer().encode(DEFAULT_PROMPTS[0]))
    case = Case(case_id="g", prompt_ids=prompt, params=SamplingParams(max_new_tokens=8, **spec.params), batch_size=64)
    request = SampleRequest(prompts=(prompt,), params=case.params, n=64, seed=202, batch_size=64)
    base = BaselineEngine(target).sample(dataclasses_replace(request, seed=101))
    verdicts = {}
    for which, engine in (("mutant", make_mutant(name, target=target, draft=draft, **spec.options)),
                          ("reference", ReferenceSpeculativeEngine(target, draft, **spec.options))):
        result = analyse_run([case], {"g": base}, {"g": engine.sample(request)}, oracle=None, alpha=1e-3,
                             tolerance=0.05, seed=0, engines={"baseline": {}, "candidate": {}}, provenance={})
        verdicts[which] = result.cases[0]
    mutant, reference = verdicts["mutant"], verdicts["reference"]
    assert mutant.verdict == "shifted"
    assert mutant.hard_failures[0].startswith("64 of 64 candidate rows leave the case's grammar; row 0 (prompt 0) "
                                              "position ")
    assert reference.verdict != "shifted" and not reference.hard_failures


def test_speceq_power_leaves_the_grammar_mutant_out_and_says_why() -> None:
    """Its detection is the grammar hard failure, and the exact enumeration carries no grammar state."""
    import dataclasses

    from speceq.errors import ConfigError
    from speceq.power.settings import PowerSettings
    from speceq.power.study import measure_power

    settings = dataclasses.replace(PowerSettings(), mutants=("grammar-not-advanced-over-drafts",))
    with pytest.raises(ConfigError, match="caught by the grammar check"):
        measure_power(settings)


def test_grammar_failures_name_row_and_position_and_take_the_engines_eos() -> None:
    """Black-box analysis: the grammar ends with the baseline engine's EOS, not the tokenizer's."""
    from speceq.engines.base import SampleBatch
    from speceq.inputs.cases import Case
    from speceq.pipeline.analysis import grammar_failures
    from speceq.verdicts.reasons import TokenLabels, failure_lines

    params = SamplingParams(max_new_tokens=4, tokenizer="bytes", structured_outputs={"choice": ["ab"]})
    case = Case(case_id="g", prompt_ids=(104,), params=params)
    rows = np.array([[97, 98, 5, -1], [97, 97, 98, 5], [97, 98, 5, -1]])
    batch = SampleBatch(tokens=rows, lengths=np.array([3, 4, 3]), prompt_index=np.zeros(3, dtype=np.int64))
    found = grammar_failures(case, batch, TokenLabels(259), None, eos_token_id=5)
    assert [(f.row, f.position, f.token) for f in found] == [(1, 1, 97)]
    assert failure_lines(found)[0].startswith("1 of 3 candidate rows leave the case's grammar; row 1 (prompt 0) "
                                              "position 1: token 'a' leaves the grammar")
    # with the tokenizer's own EOS (257) the engine's EOS 5 is outside the grammar: every row would leave
    assert len(grammar_failures(case, batch, TokenLabels(259), None)) == 3
