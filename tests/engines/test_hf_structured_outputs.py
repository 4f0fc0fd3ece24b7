"""structured_outputs in the transformers engines: a grammar logits processor passed to generate().

Three levels: generate()'s processed scores with the processor equal :func:`process_logits` (``hf`` order) with
the grammar mask of each row's own tokens so far (left-padded batches, the other request fields and greedy
included), and a processor that ignores the grammar fails that comparison; every row of every ``hf-*`` path that
takes the field follows the grammar (drafts accepted, so the state moves over them), while the same requests
without the grammar leave it; a run on the bundled byte world is not shifted against the ``baseline`` engine and
shifted when the processor is dropped. hf-universal refuses the field: transformers hands the call's processors to
the draft's own generate() over the draft's vocabulary (pinned below).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import torch

from speceq.core.params import SamplingParams
from speceq.core.processing import process_logits, token_history
from speceq.engines.base import SampleRequest, check_sampling_support, validate_batch
from speceq.engines.hf import HFAssistedEngine, HFPromptLookupEngine, HFSampleEngine
from speceq.engines.hf_grammar import GrammarLogitsProcessor
from speceq.engines.hf_paths import UNIVERSAL_GRAMMAR_REFUSAL, HFEarlyExitEngine, HFEnsembleEngine
from speceq.engines.registry import resolve_engine
from speceq.errors import ConfigError, EngineError
from speceq.inputs.cases import Case
from speceq.models.grammar import Grammar, grammar_violation
from speceq.pipeline.config import RunConfig
from speceq.pipeline.runner import run

pytest.importorskip("llguidance", reason="structured_outputs needs the 'structured' extra (llguidance)")

EOS = 257  # the byte tokenizer's EOS, the tiny test models' too
REGEX = "[a-z]{1,4}( [a-z]{1,4})*"
GRAMMARS = [
    SamplingParams(max_new_tokens=6, temperature=1.3, repetition_penalty=0.7, logit_bias={5: 4.0, 99: -100.0},
                   min_p=0.02, top_p=0.8, processing="hf", tokenizer="bytes", structured_outputs={"regex": REGEX}),
    SamplingParams(max_new_tokens=6, temperature=0.8, top_k=30, processing="hf", tokenizer="bytes",
                   structured_outputs={"choice": ["cab", "bad", "dabbed", "ace"]}),
    SamplingParams(max_new_tokens=6, temperature=0.0, repetition_penalty=2.0, logit_bias={100: 3.0}, processing="hf",
                   tokenizer="bytes", structured_outputs={"regex": REGEX}),
]


def grammar_masks(params: SamplingParams, rows: list[list[int]], t: int, vocab: int) -> torch.Tensor:
    """[rows, vocab]: each row's allowed tokens after its own first ``t`` tokens, a fresh grammar walked by hand."""
    grammar = Grammar(params, vocab, EOS)
    masks = []
    for row in rows:
        state = grammar.row()
        assert state.advance(row[:t]) == t
        masks.append(state.mask())
    return torch.stack(masks)


def compare_scores(target: Any, prompts: Any, params: SamplingParams, processor: Any = None) -> float:
    """generate() on a left-padded batch with the engine's keywords (``processor`` instead of its grammar processor
    when given): assert its processed scores equal process_logits (hf) with each row's grammar mask and history at
    every position the row reaches; returns how much the grammar changes the law (max abs difference)."""
    engine = HFSampleEngine(target, eos_token_id=EOS)
    prompts = [list(p) for p in prompts]
    width = max(map(len, prompts))
    ids = torch.tensor([[engine.pad_token_id] * (width - len(p)) + p for p in prompts])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
    kwargs = engine._kwargs(params, prompt_ids=ids)
    if processor is not None:
        kwargs["logits_processor"] = [processor]
    torch.manual_seed(0)
    out = target.generate(input_ids=ids, attention_mask=mask, output_scores=True, output_logits=True,
                          return_dict_in_generate=True, **kwargs)
    rows = out.sequences[:, width:].tolist()
    lengths = [r.index(EOS) + 1 if EOS in r else len(r) for r in rows]
    law = replace(params, temperature=1.0) if params.greedy else params  # greedy: generate() returns the logits
    changed = 0.0
    for t, (raw, processed) in enumerate(zip(out.logits, out.scores, strict=True)):
        live = [r for r in range(len(rows)) if t < lengths[r]]
        allowed = grammar_masks(params, [rows[r] for r in live], t, raw.shape[-1])
        history = token_history([prompts[r] for r in live], [rows[r][:t] for r in live], raw.shape[-1])
        ours = process_logits(raw[live], law, eos_token_id=EOS, history=history.with_allowed(allowed))
        theirs = torch.softmax(processed[live].float(), dim=-1)
        assert torch.equal(ours > 0, theirs > 0), f"position {t}: different support"
        torch.testing.assert_close(ours, theirs, rtol=0, atol=1e-6)
        if params.greedy:
            assert [rows[r][t] for r in live] == ours.argmax(dim=-1).tolist()
        free = process_logits(raw[live], law, eos_token_id=EOS, history=history.with_allowed(torch.ones_like(allowed)))
        changed = max(changed, float((free - ours).abs().max()))
    return changed


@pytest.mark.parametrize("params", GRAMMARS, ids=lambda p: p.label())
def test_generate_with_the_grammar_processor_is_process_logits_hf(target, mixed_prompts, params) -> None:
    """The processor sits where transformers puts a user's processor (after SequenceBias, RepetitionPenalty and
    SuppressTokens, before the warpers): the processed law equals process_logits in the hf order to 1e-6."""
    assert compare_scores(target, mixed_prompts, params) > 0.05  # the grammar really changes the law


class Ignoring:
    """A processor that ignores the grammar (scores unchanged)."""

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        return scores


class OneBehind(GrammarLogitsProcessor):
    """A processor one token late: the grammar state of the prefix without its last token."""

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        if input_ids.shape[1] > self.prompt_length:
            input_ids = input_ids[:, :-1]
        return super().__call__(input_ids, scores)


def test_a_processor_that_ignores_the_grammar_or_lags_fails_the_comparison(target, mixed_prompts) -> None:
    params = GRAMMARS[0]
    with pytest.raises(AssertionError):
        compare_scores(target, mixed_prompts, params, Ignoring())
    width, pad = max(map(len, mixed_prompts)), HFSampleEngine(target, eos_token_id=EOS).pad_token_id
    ids = torch.tensor([[pad] * (width - len(p)) + list(p) for p in mixed_prompts])
    lagging = OneBehind(Grammar(params, 259, EOS), ids)
    with pytest.raises(AssertionError):
        compare_scores(target, mixed_prompts, params, lagging)


def test_the_processor_is_stateless_in_the_prefix(target) -> None:
    """Calls on prefixes that go back and forth (as assisted decoding makes them) give the masks of fresh states."""
    params = GRAMMARS[0]
    grammar = Grammar(params, 259, EOS)
    prompt = torch.tensor([[5, 6, 7]])
    proc = GrammarLogitsProcessor(grammar, prompt)
    seqs = [b"ab", b"ab c", b"a", b"abcd ", b"abcd e", b"ab", b"", b"abcde"]  # the last leaves the grammar
    for text in seqs:
        ids = torch.cat([prompt, torch.tensor([list(text)], dtype=torch.long)], dim=1)
        got = proc(ids, torch.zeros(1, 259)) > float("-inf")
        fresh = grammar.row()
        want = (fresh.mask() if fresh.advance(list(text)) == len(text) else torch.ones(259, dtype=torch.bool))
        assert torch.equal(got[0], want), text
    after_four = proc(torch.cat([prompt, torch.tensor([list(b"abcd")])], 1), torch.zeros(1, 259))[0] > float("-inf")
    assert set(torch.nonzero(after_four).flatten().tolist()) == {ord(" "), EOS}  # the state matters


def test_the_processor_refuses_another_sequence() -> None:
    """Scores of another width, or input_ids that do not start with the call's prompt: an EngineError."""
    grammar = Grammar(GRAMMARS[0], 259, EOS)
    proc = GrammarLogitsProcessor(grammar, torch.tensor([[5, 6, 7]]))
    with pytest.raises(EngineError, match="another sequence"):
        proc(torch.tensor([[5, 6, 7, 97]]), torch.zeros(1, 300))
    with pytest.raises(EngineError, match="another sequence"):
        proc(torch.tensor([[9, 6, 7, 97]]), torch.zeros(1, 259))


# ----- every path that takes the field: grammar-valid rows ---------------------------------------------------------
ROW_PARAMS = SamplingParams(max_new_tokens=8, temperature=1.0, processing="hf", tokenizer="bytes",
                            structured_outputs={"regex": REGEX})


def engines_on(target: Any, draft: Any) -> dict[str, Any]:
    return {
        "hf-sample": lambda: HFSampleEngine(target, eos_token_id=EOS),
        "hf-assisted": lambda: HFAssistedEngine(target, draft, num_assistant_tokens=3, eos_token_id=EOS),
        "hf-prompt-lookup": lambda: HFPromptLookupEngine(target, eos_token_id=EOS),
        "hf-early-exit": lambda: HFEarlyExitEngine(target, exit_layer=1, eos_token_id=EOS),
        "hf-ensemble": lambda: HFEnsembleEngine(target, draft, eos_token_id=EOS),
    }


@pytest.mark.parametrize("name", ["hf-sample", "hf-assisted", "hf-prompt-lookup", "hf-early-exit", "hf-ensemble"])
def test_every_row_follows_the_grammar(target, close_draft, mixed_prompts, name) -> None:
    """Every row follows the grammar (drafts accepted, so the state moved over them); the same request without
    the grammar gives rows that leave it (the check has teeth)."""
    engine = engines_on(target, close_draft)[name]()
    request = SampleRequest(prompts=mixed_prompts, params=ROW_PARAMS, n=12, seed=3, batch_size=12)
    batch = engine.sample(request)
    validate_batch(batch, request, engine)
    grammar = Grammar(ROW_PARAMS, engine.vocab_size, EOS)
    assert all(grammar_violation(grammar, batch.row_tokens(r)) is None for r in range(batch.rows))
    if name not in ("hf-sample", "hf-prompt-lookup"):
        assert batch.accepted_tokens >= 5
    plain = replace(ROW_PARAMS, structured_outputs=None, tokenizer=None, processing="vllm")
    free = engine.sample(replace(request, params=plain))
    assert sum(grammar_violation(grammar, free.row_tokens(r)) is not None for r in range(free.rows)) >= 10


# ----- hf-universal: refused ---------------------------------------------------------------------------------------
def test_universal_refuses_the_grammar_naming_the_path_and_why(tmp_path: Path) -> None:
    """transformers hands generate()'s processors to the draft's generate() over the draft tokenizer's ids: the grammar
    processor, called there, sees input_ids that do not start with the call's prompt (the draft re-encodes it)."""
    engine = resolve_engine("hf-universal", options={"vocab_order": "id"})
    with pytest.raises(ConfigError) as e:
        check_sampling_support(engine, ROW_PARAMS, "regex", role="candidate")
    assert e.value.where == "case 'regex'.structured_outputs"
    assert UNIVERSAL_GRAMMAR_REFUSAL in str(e.value) and "hf-universal" in str(e.value)
    prompt = torch.tensor([list(b"def add(a, b):\n    return")])
    proc = GrammarLogitsProcessor(Grammar(ROW_PARAMS, engine.vocab_size, engine.eos_token_id), prompt)
    kwargs = {**engine._kwargs(replace(ROW_PARAMS, structured_outputs=None, tokenizer=None)), **engine._extra_kwargs()}
    with pytest.raises(EngineError, match="another sequence"):
        engine.target.generate(input_ids=prompt, attention_mask=torch.ones_like(prompt), logits_processor=[proc],
                               **kwargs)


# ----- runs on the bundled byte world ------------------------------------------------------------------------------
CODE_PROMPT = tuple(b"def add(a, b):\n    return")


class Dropping(HFSampleEngine):
    """hf-sample with its grammar processor left out of generate(): the field silently dropped."""

    def _kwargs(self, params: SamplingParams, prompt_ids: Any = None) -> dict[str, Any]:
        kwargs = super()._kwargs(params, prompt_ids)
        kwargs.pop("logits_processor", None)
        return kwargs


def grammar_run(baseline: Any, candidate: Any, out: Path, samples: int) -> Any:
    case = Case(case_id="regex", prompt_ids=CODE_PROMPT, batch_size=50, params=ROW_PARAMS)
    config = RunConfig(samples=samples, chunk_size=samples, alpha=1e-3, seed=0, workers=1, out_dir=out, progress=False)
    return run(config, [case], engines={"baseline": baseline, "candidate": candidate}).cases[0]


def test_hf_sample_with_the_grammar_is_not_shifted_and_shifted_without_it(tmp_path: Path) -> None:
    """200 samples against the baseline engine (both and the oracle in the hf order): not shifted; the grammar
    processor dropped: shifted, the rows leaving the grammar (hard failures)."""
    baseline = resolve_engine("baseline")
    honest = grammar_run(baseline, resolve_engine("hf-sample"), tmp_path / "honest", 200)
    assert honest.verdict != "shifted", honest.reason
    dropped = grammar_run(baseline, Dropping(), tmp_path / "dropped", 200)
    assert dropped.verdict == "shifted" and any("leave the case's grammar" in f for f in dropped.hard_failures)


@pytest.fixture(scope="module")
def model_cache(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """A model cache of the test's own (SPECEQ_CACHE) for the mtp and gemma4 worlds' tiny models."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SPECEQ_CACHE", str(tmp_path_factory.mktemp("cache")))
        yield


@pytest.mark.slow
@pytest.mark.parametrize("path", ["hf-dflash", "hf-mtp", "hf-multi-token"])
def test_the_other_paths_rows_follow_the_grammar_in_their_worlds(path: str, model_cache: Any) -> None:
    """The paths whose drafters need their own world (DFlash's drafter, MTP layers, the Gemma-4 assistant): every
    row follows the grammar (DFlash and MTP with drafts accepted; the Gemma-4 assistant's raw argmax drafts were
    all rejected when measured). About 10 s with the models built, on the shared 2-core machine."""
    from speceq.models.worlds import home_world, world_engine_options

    engine = resolve_engine(path, options=world_engine_options(home_world(path) or "byte", path, {}))
    request = SampleRequest(prompts=(CODE_PROMPT,), params=ROW_PARAMS, n=12, seed=3)
    batch = engine.sample(request)
    validate_batch(batch, request, engine)
    grammar = Grammar(ROW_PARAMS, engine.vocab_size, engine.eos_token_id)
    assert all(grammar_violation(grammar, batch.row_tokens(r)) is None for r in range(batch.rows))
    if path != "hf-multi-token":  # its drafts are the assistant's raw argmax, without the call's processors
        assert batch.accepted_tokens >= 1
