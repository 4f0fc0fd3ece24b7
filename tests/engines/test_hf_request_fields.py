"""The request fields in the transformers engines: min_p, repetition_penalty and logit_bias through generate()'s
own arguments (``min_p``, ``repetition_penalty``, ``sequence_bias``) under the ``hf`` processing order; the
fields transformers has not (presence and frequency penalties, a grammar, speceq's stop strings) refused with
the reason, naming the case, the field and the engine.

Three levels: generate()'s processed scores equal :func:`process_logits` (``hf``) given each row's own history
(left-padded batches included); every emitted token has positive processed probability given its row's history
(a token banned by a -100 bias never appears, a token min-p cuts never appears), while the same request without
the field emits such tokens (so the check can fail); runs on the bundled byte world against the ``baseline``
engine (and ``hf-assisted`` against ``hf-sample``) are not shifted, and the same run with a field dropped from
generate() is.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from speceq.core.params import SamplingParams
from speceq.core.processing import process_logits, token_history
from speceq.engines.base import SampleRequest, check_sampling_support, sampling_fields, validate_batch
from speceq.engines.hf import (
    GENERATE_FIELDS,
    HF_SAMPLING_FIELDS,
    HFAssistedEngine,
    HFPromptLookupEngine,
    HFSampleEngine,
)
from speceq.engines.registry import resolve_engine
from speceq.errors import ConfigError
from speceq.inputs.cases import Case
from speceq.pipeline.config import RunConfig
from speceq.pipeline.runner import run

FIELDS = [
    SamplingParams(max_new_tokens=6, temperature=1.3, repetition_penalty=0.7, logit_bias={5: 4.0, 9: -100.0},
                   min_p=0.02, top_p=0.8, processing="hf"),
    SamplingParams(max_new_tokens=6, temperature=0.8, repetition_penalty=1.6, min_p=0.1, top_k=30, processing="hf"),
    SamplingParams(max_new_tokens=6, temperature=0.0, repetition_penalty=2.0, logit_bias={17: 3.0}, processing="hf"),
]


@pytest.mark.parametrize("params", FIELDS, ids=lambda p: p.label())
def test_generate_processes_each_row_as_process_logits_hf(target, mixed_prompts, params) -> None:
    """The engine's generate() keywords, on a left-padded batch: its processed scores at every position equal
    process_logits (hf order) on the raw logits with that row's own (unpadded) prompt and tokens so far."""
    engine = HFSampleEngine(target)
    prompts = [list(p) for p in mixed_prompts]
    width = max(map(len, prompts))
    ids = torch.tensor([[engine.pad_token_id] * (width - len(p)) + p for p in prompts])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
    torch.manual_seed(0)
    out = target.generate(input_ids=ids, attention_mask=mask, output_scores=True, output_logits=True,
                          return_dict_in_generate=True, **engine._kwargs(params))
    rows = out.sequences[:, width:].tolist()
    # greedy: generate() returns the biased, penalised logits (no warpers), whose argmax it takes
    law = replace(params, temperature=1.0) if params.greedy else params
    plain = SamplingParams(max_new_tokens=law.max_new_tokens, temperature=law.temperature, top_k=law.top_k,
                           top_p=law.top_p)
    changed = 0.0
    for t, (raw, processed) in enumerate(zip(out.logits, out.scores, strict=True)):
        history = token_history(prompts, [r[:t] for r in rows], raw.shape[-1])
        ours = process_logits(raw, law, eos_token_id=engine.eos_token_id, history=history)
        theirs = torch.softmax(processed.float(), dim=-1)
        assert torch.equal(ours > 0, theirs > 0), f"position {t}: different support"
        torch.testing.assert_close(ours, theirs, rtol=0, atol=1e-6)
        if params.greedy:
            assert [r[t] for r in rows] == ours.argmax(dim=-1).tolist()
        changed = max(changed, float((process_logits(raw, plain, eos_token_id=engine.eos_token_id) - ours).abs().max()))
    assert changed > 0.05  # the fields really change the law, so a dropped field fails the comparison


def emitted_laws(model: Any, prompts: Any, batch: Any, params: SamplingParams, eos_id: int) -> np.ndarray:
    """[emitted tokens]: each emitted token's probability under ``params`` (hf order) given its own row's history."""
    probs = []
    with torch.inference_mode():
        for r in range(batch.rows):
            prompt = list(prompts[int(batch.prompt_index[r])])
            row = batch.row_tokens(r)
            for t, token in enumerate(row):
                logits = model(input_ids=torch.tensor([prompt + row[:t]])).logits[0, -1]
                hist = token_history([prompt], [row[:t]], logits.shape[-1])
                probs.append(float(process_logits(logits[None], params, eos_token_id=eos_id, history=hist)[0, token]))
    return np.array(probs)


@pytest.mark.parametrize("speculative", [False, True], ids=["hf-sample", "hf-assisted"])
def test_rows_follow_the_processed_law(target, close_draft, mixed_prompts, speculative) -> None:
    """A token banned by logit_bias -100 never appears and no emitted token is one min-p cuts, given its row's own
    history; the same request without the fields emits both (the check has teeth)."""
    engine = HFAssistedEngine(target, close_draft, num_assistant_tokens=3) if speculative else HFSampleEngine(target)
    plain = SamplingParams(max_new_tokens=5, temperature=1.0, ignore_eos=True)
    before = engine.sample(SampleRequest(prompts=mixed_prompts, params=plain, n=12, seed=3, batch_size=12))
    banned = int(np.bincount(before.tokens.ravel(), minlength=engine.vocab_size).argmax())  # the commonest token
    fields = SamplingParams(max_new_tokens=5, temperature=1.0, ignore_eos=True, min_p=0.2, repetition_penalty=1.4,
                            logit_bias={banned: -100.0}, processing="hf")
    request = SampleRequest(prompts=mixed_prompts, params=fields, n=12, seed=3, batch_size=12)
    after = engine.sample(request)
    validate_batch(after, request, engine)
    if speculative:
        assert 0 < after.accepted_tokens < after.drafted_tokens  # drafts both accepted and rejected
    assert banned not in after.tokens and (before.tokens == banned).sum() >= 5
    eos = engine.eos_token_id
    assert (emitted_laws(target, mixed_prompts, after, fields, eos) > 0).all()
    # without the fields, the rows hold tokens the processed law excludes (min-p's cut, the banned token)
    assert (emitted_laws(target, mixed_prompts, before, fields, eos) == 0).sum() >= 5


# ----- runs on the bundled byte world ---------------------------------------------------------------------------
CODE_PROMPT = tuple(b"def add(a, b):\n    return")
#: min_p cuts the byte target's tail, the bias bans the space the prompt asks for next and favours "a"
WORLD_FIELDS = SamplingParams(temperature=1.0, max_new_tokens=4, min_p=0.05, repetition_penalty=1.3,
                              logit_bias={32: -100.0, 97: 3.0}, processing="hf")


def field_run(baseline: Any, candidate: Any, out: Path, samples: int, params: SamplingParams = WORLD_FIELDS) -> Any:
    case = Case(case_id="fields", prompt_ids=CODE_PROMPT, batch_size=50, params=params)
    config = RunConfig(samples=samples, chunk_size=samples, alpha=1e-3, seed=0, workers=1, out_dir=out, progress=False)
    return run(config, [case], engines={"baseline": baseline, "candidate": candidate}).cases[0]


class Dropping(HFSampleEngine):
    """hf-sample with one generate() argument put back to its neutral value: a field silently dropped."""

    def __init__(self, argument: str, neutral: Any) -> None:
        super().__init__()
        self.argument, self.neutral = argument, neutral

    def _kwargs(self, params: SamplingParams) -> dict[str, Any]:
        return {**super()._kwargs(params), self.argument: self.neutral}


@pytest.fixture(scope="module")
def hf_sample() -> HFSampleEngine:
    return resolve_engine("hf-sample")


def test_hf_sample_with_the_fields_is_not_shifted_against_baseline(hf_sample, tmp_path: Path) -> None:
    """300 samples: hf-sample against the baseline engine, both (and the oracle) in the hf order."""
    result = field_run(resolve_engine("baseline"), hf_sample, tmp_path / "honest", 300)
    assert result.verdict != "shifted", result.reason


@pytest.mark.parametrize(("argument", "neutral"), [("sequence_bias", None), ("min_p", None), ("repetition_penalty", 1.0)])
def test_a_dropped_field_is_shifted(argument: str, neutral: Any, tmp_path: Path) -> None:
    """The same run with one field dropped from generate(): shifted (logit_bias, min_p: hard failures, the oracle
    scoring the rows' excluded tokens 0; repetition_penalty: the log-likelihood comparison, Holm p ~4e-12 when
    measured), so the run above can fail."""
    result = field_run(resolve_engine("baseline"), Dropping(argument, neutral), tmp_path / argument, 300)
    assert result.verdict == "shifted", result.reason


def test_hf_assisted_with_the_fields_is_not_shifted_against_hf_sample(hf_sample, tmp_path: Path) -> None:
    result = field_run(hf_sample, resolve_engine("hf-assisted"), tmp_path / "assisted", 200)
    assert result.verdict != "shifted", result.reason


# ----- refusals ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("extra", "reason"),
    [
        ({"presence_penalty": 0.5}, "transformers' generate() has no presence penalty"),
        ({"frequency_penalty": 0.5}, "transformers' generate() has no frequency penalty"),
        ({"stop": ["\n"], "tokenizer": "bytes"}, "transformers' stop_strings end a row when a stop string ends the prompt"),
    ],
    ids=lambda v: next(iter(v)) if isinstance(v, dict) else "",
)
def test_a_field_transformers_cannot_apply_is_refused_naming_case_field_and_engine(hf_sample, tmp_path: Path,
                                                                                   extra: dict, reason: str) -> None:
    field = next(iter(extra))
    # the hf order has no presence or frequency penalty at all (SamplingParams refuses them there)
    params = SamplingParams(max_new_tokens=3, processing="vllm" if field.endswith("penalty") else "hf", **extra)
    case = Case(case_id="refused", prompt_ids=CODE_PROMPT, params=params)
    config = RunConfig(samples=20, seed=0, workers=1, out_dir=tmp_path, progress=False)
    with pytest.raises(ConfigError) as e:
        run(config, [case], engines={"baseline": resolve_engine("baseline"), "candidate": hf_sample})
    assert e.value.where == f"case 'refused'.{field}"
    assert f"the candidate engine 'hf-sample' cannot apply {field} ({reason}" in str(e.value)


def test_the_fields_outside_the_hf_order_are_refused(hf_sample) -> None:
    """transformers applies min_p after top-k/top-p (the hf order), vLLM before: a case in the default vllm order
    is refused, and so is a direct sample() call that bypasses the run's check."""
    for field, value in (("min_p", 0.1), ("repetition_penalty", 1.2), ("logit_bias", {3: 1.0})):
        params = SamplingParams(max_new_tokens=3, **{field: value})
        with pytest.raises(ConfigError, match=f"applies {field} only in the processing order\\(s\\) 'hf', not 'vllm'"):
            check_sampling_support(hf_sample, params, "c", role="baseline")
        with pytest.raises(ConfigError, match=f"engine 'hf-sample' cannot apply {field} in the 'vllm' processing"):
            hf_sample.sample(SampleRequest(prompts=(CODE_PROMPT,), params=params, n=1, seed=0))


def test_the_engines_declare_their_fields_as_data() -> None:
    """Every hf-* path declares min_p / repetition_penalty / logit_bias in the hf order (each checked above or in
    the not-shifted runs of its own path, at 400-600 samples) and structured_outputs (test_hf_structured_outputs.py);
    hf-universal honours a case's seed only in id order and refuses structured_outputs."""
    from speceq.engines import hf_paths

    assert set(GENERATE_FIELDS) == {"min_p", "repetition_penalty", "logit_bias", "structured_outputs"}
    for cls in (HFSampleEngine, HFAssistedEngine, HFPromptLookupEngine, hf_paths.HFEarlyExitEngine, hf_paths.HFDFlashEngine,
                hf_paths.HFMTPEngine, hf_paths.HFMultiTokenEngine, hf_paths.HFEnsembleEngine):
        assert sampling_fields(cls) == HF_SAMPLING_FIELDS, cls.__name__
    assert {f: o for f, o in HF_SAMPLING_FIELDS.items() if f != "seed"} == {f: ("hf",) for f in GENERATE_FIELDS}


def test_transformers_stop_strings_end_rows_speceq_would_not(hf_sample) -> None:
    """Why ``stop`` stays refused: transformers' StopStringCriteria matches the prompt and row together, so a stop
    string across the prompt's end ("b" + "c") ends a row whose own text ("c") has no stop string."""
    from transformers import AutoTokenizer

    from speceq.core.stops import first_stop
    from speceq.models import TARGET_DIR
    from speceq.models.text_decoding import row_decoder

    tokenizer = AutoTokenizer.from_pretrained(str(TARGET_DIR), local_files_only=True)
    ids = torch.tensor([list(b"xyab")])
    c = ord("c")
    torch.manual_seed(0)
    out = hf_sample.target.generate(input_ids=ids, attention_mask=torch.ones_like(ids), do_sample=True, top_k=0,
                                    max_new_tokens=5, sequence_bias={(c,): 100.0}, stop_strings=["bc"],
                                    tokenizer=tokenizer)
    row = out[0, ids.shape[1]:].tolist()
    assert row == [c]  # transformers ended the row after one token (no EOS: the stop string)
    assert first_stop(row, row_decoder("bytes"), ["bc"]) is None  # speceq: the row's own text "c" has no "bc"


def test_a_cases_seed_gives_the_same_rows_whatever_the_run_seed(tmp_path: Path) -> None:
    """hf-sample and hf-assisted draw from the request seed only, so they declare ``seed``: two runs of a case with
    its own seed give the same rows at different run seeds (and other rows at another case seed)."""
    from speceq.store import load_samples_frame

    def rows(case_seed: int, run_seed: int) -> list:
        case = Case(case_id="s", prompt_ids=CODE_PROMPT, batch_size=8,
                    params=SamplingParams(max_new_tokens=4, min_p=0.05, processing="hf", seed=case_seed))
        out = tmp_path / f"{case_seed}-{run_seed}"
        config = RunConfig(samples=16, chunk_size=8, seed=run_seed, workers=1, oracle=False, out_dir=out,
                           progress=False)
        run(config, [case], engines={"baseline": resolve_engine("hf-sample"), "candidate": resolve_engine("hf-assisted")})
        frame = load_samples_frame(out)
        return [(e, tuple(t)) for e, t in zip(frame["engine"], frame["tokens"], strict=True)]

    first = rows(1234, 1)
    assert len(first) == 32 and first == rows(1234, 2)
    assert first != rows(4321, 1)


@pytest.fixture(scope="module")
def model_cache(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """A model cache of the test's own (SPECEQ_CACHE) for the mtp and gemma4 worlds' tiny models."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SPECEQ_CACHE", str(tmp_path_factory.mktemp("cache")))
        yield


def path_field_run(path: str, out: Path, *, dropped: str | None = None) -> Any:
    """One hf-* path against hf-sample of its own target, min_p, repetition_penalty and logit_bias together, 400
    samples (hf-universal in id order and hf-multi-token with draft_law=argmax: as transformers runs them they are
    shifted without any field). ``dropped``: a generate() argument the candidate puts back to None (a field
    silently dropped by this path's adapter)."""
    from speceq.models.mtp import mtp_model_folder
    from speceq.models.multi_token import gemma4_folders

    options = {"hf-universal": {"vocab_order": "id"}, "hf-multi-token": {"draft_law": "argmax"}}.get(path, {})
    candidate = resolve_engine(path, options=options)
    if dropped is not None:
        kwargs = candidate._kwargs
        candidate._kwargs = lambda params: {**kwargs(params), dropped: None}
    target = {"hf-mtp": lambda: str(mtp_model_folder()), "hf-multi-token": lambda: str(gemma4_folders()[0])}
    baseline = HFSampleEngine(target[path]()) if path in target else resolve_engine("hf-sample")
    params = replace(WORLD_FIELDS, ignore_eos=path in target)  # the tiny random worlds end rows at once otherwise
    return field_run(baseline, candidate, out, 400, params)


OTHER_PATHS = ["hf-early-exit", "hf-dflash", "hf-prompt-lookup", "hf-universal", "hf-mtp", "hf-multi-token"]


@pytest.mark.slow
@pytest.mark.parametrize("path", OTHER_PATHS)
def test_every_path_with_the_fields_is_not_shifted(path: str, model_cache: Any, tmp_path: Path) -> None:
    """Each other hf-* path with the fields, 400 samples: not shifted. About 4 minutes in all on the shared 2-core
    machine."""
    result = path_field_run(path, tmp_path)
    assert result.verdict != "shifted", result.reason


@pytest.mark.slow
@pytest.mark.parametrize("path", OTHER_PATHS)
def test_every_path_dropping_a_field_is_shifted(path: str, model_cache: Any, tmp_path: Path) -> None:
    """The planted failure of the check above, per path: the same run with the path's adapter dropping one field is
    shifted, so each path's not-shifted run above can fail. The byte-world paths drop logit_bias (``sequence_bias``
    back to None: the -100 token appears); the tiny random worlds (hf-mtp, hf-multi-token) drop min_p, since their
    laws are nearly flat over their vocabulary and the bias on two ids moves too little mass to see at 400 samples
    (measured: inconclusive, smallest Holm p 0.005 and 0.001), while min_p cuts most of it (hard failures in 196
    and 364 of 400 rows)."""
    dropped = "min_p" if path in ("hf-mtp", "hf-multi-token") else "sequence_bias"
    result = path_field_run(path, tmp_path, dropped=dropped)
    assert result.verdict == "shifted", result.reason


def test_universal_drafts_bias_the_wrong_token(tmp_path: Path) -> None:
    """A transformers finding (5.25.0): with the draft's head pruned, universal speculative decoding hands the draft
    the call's own processors (``UniversalSpeculativeDecodingGenerator.get_candidates`` replaces them only when the
    translator has its own, generation/candidate_generator.py:964-965), built for target token ids, while the
    pruned head's index i is the i-th shared draft token (:741-748), not target token i. So the draft biases the
    wrong token: a -100 bias on the token it drafts most leaves its drafts of it as they were, and lands on another.
    The output law stays exact (the draft's q is the law it sampled, the verifier biases the right token): only
    acceptance is lost. Measured: '(' drafted 61 times in 405 drafts with the bias, as often as without it."""
    import contextlib
    from collections import Counter

    from transformers.generation.candidate_generator import AssistantVocabTranslatorCache

    engine = resolve_engine("hf-universal", options={"vocab_order": "id"})

    def drafts(params: SamplingParams) -> tuple[list[int], Any]:
        seen: list[int] = []
        counting = engine._counting

        @contextlib.contextmanager
        def spying() -> Any:
            with counting() as counts:
                inner = engine.target._get_candidate_generator

                def wrapped(*args: Any, **kwargs: Any) -> Any:
                    gen = inner(*args, **kwargs)
                    get = gen.get_candidates

                    def spied(input_ids: Any, **kw: Any) -> Any:
                        ids, logits = get(input_ids, **kw)
                        seen.extend(ids[0, input_ids.shape[1]:].tolist())
                        return ids, logits

                    gen.get_candidates = spied
                    return gen

                engine.target._get_candidate_generator = wrapped
                yield counts

        engine._counting = spying
        try:
            batch = engine.sample(SampleRequest(prompts=(CODE_PROMPT,), params=params, n=20, seed=1))
        finally:
            del engine._counting
        return seen, batch

    plain, _ = drafts(SamplingParams(temperature=1.0, max_new_tokens=8, ignore_eos=True))
    token = Counter(plain).most_common(1)[0][0]
    biased, batch = drafts(SamplingParams(temperature=1.0, max_new_tokens=8, ignore_eos=True,
                                          logit_bias={token: -100.0}, processing="hf"))
    assert token not in batch.tokens  # the verifier applies the bias
    assert biased.count(token) >= 20 and biased.count(token) >= plain.count(token) // 2  # the draft does not
    translator = AssistantVocabTranslatorCache.get_translator(engine.target_tokenizer, engine.draft_tokenizer,
                                                              engine.vocab_size)
    draft_id = int(translator.assistant_overlap_token_ids[token])  # pruned index ``token`` is this draft token ...
    assert int(translator._assistant_to_target_input_ids[draft_id]) != token  # ... another target token


def test_a_pair_of_an_hf_engine_and_a_vllm_order_engine_takes_no_case_with_a_field(hf_sample, tmp_path: Path) -> None:
    """The processing order is the case's, shared by baseline, candidate and oracle: paired with an engine that
    applies min_p in the vllm order only (as the openai engine does), hf-sample refuses the vllm-order case and the
    other engine the hf-order one, each naming the case, the field and the engine; without a field they run."""

    class VllmOnly(HFSampleEngine):
        sampling_fields = {"min_p": ("vllm",)}

    vllm_only = VllmOnly(name="vllm-only")
    engines = {"baseline": hf_sample, "candidate": vllm_only}
    config = RunConfig(samples=20, seed=0, workers=1, oracle=False, out_dir=tmp_path / "o", progress=False)
    for order, who in (("vllm", "the baseline engine 'hf-sample'"), ("hf", "the candidate engine 'vllm-only'")):
        case = Case(case_id=order, prompt_ids=CODE_PROMPT, params=SamplingParams(max_new_tokens=2, min_p=0.1,
                                                                                 processing=order))
        with pytest.raises(ConfigError, match=f"case '{order}'.min_p: {who} applies min_p only in the processing"):
            run(config, [case], engines=engines)
    plain = Case(case_id="plain", prompt_ids=CODE_PROMPT, params=SamplingParams(max_new_tokens=2, processing="hf"))
    assert run(config, [plain], engines=engines).cases[0].case_id == "plain"
