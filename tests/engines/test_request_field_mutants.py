"""The request-field mutants: each bug shows in the verified law itself (deterministically), and on the
bundled models a case using the field goes ``shifted`` for each mutant and not for the reference engine.

Sample sizes: measured with ``benchmarks``-style runs of :func:`verdict` below (see the commit message and
docs/measurements/power.md for the figures); the budgets here are what detected every mutant at the fixed seeds.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from speceq.core.params import SamplingParams
from speceq.core.processing import process_logits, token_history
from speceq.engines.base import SampleRequest
from speceq.engines.baseline import BaselineEngine
from speceq.engines.mutants import MUTANTS, make_mutant
from speceq.engines.reference import ReferenceSpeculativeEngine
from speceq.inputs.cases import Case
from speceq.models import EOS_ID, ByteTokenizer, load_draft, load_target
from speceq.models.prompts import DEFAULT_PROMPTS
from speceq.oracles.hf import TargetOracle
from speceq.pipeline.analysis import analyse_run

#: The request-field bugs that shift the verified law (the stop-string one breaks the row contract instead:
#: tests/engines/test_stop_strings.py).
NEW = [n for n, s in MUTANTS.items() if s.bug_class == "request-fields" and not s.contract
       and "structured_outputs" not in s.params]  # the grammar mutant: tests/engines/test_structured_outputs.py
PROMPT = tuple(ByteTokenizer().encode(DEFAULT_PROMPTS[0]))
#: Samples per engine of the fixed-seed verdicts (see the module docstring).
SAMPLES = 800


@pytest.fixture(scope="module")
def models() -> tuple[torch.nn.Module, torch.nn.Module]:
    return load_target(), load_draft()


def case_of(name: str, tokens: int = 6) -> Case:
    return Case(case_id=name, prompt_ids=PROMPT, params=SamplingParams(max_new_tokens=tokens, **MUTANTS[name].params),
                batch_size=64)


def engine_of(name: str, models, *, reference: bool = False, trace: bool = False) -> ReferenceSpeculativeEngine:
    options = {"target": models[0], "draft": models[1], **MUTANTS[name].options, "trace": trace}
    return ReferenceSpeculativeEngine(**options) if reference else make_mutant(name, **options)


def test_the_gallery_lists_the_four_request_field_bugs() -> None:
    assert set(NEW) == {"penalty-history-late", "penalty-block-start", "min-p-untempered", "logit-bias-verify-dropped"}
    for name in NEW:
        assert not MUTANTS[name].lossless and MUTANTS[name].params


@pytest.mark.parametrize("name", NEW)
def test_each_bug_moves_the_verified_law_away_from_the_rows_own_processed_law(models, name) -> None:
    """The traced target law at emitted positions against the law computed by hand from each row's history:
    equal for the reference engine (1e-5), off by more than 0.01 somewhere for the mutant."""
    case = case_of(name)
    request = SampleRequest(prompts=(PROMPT,), params=case.params, n=64, seed=3, batch_size=64)
    target = models[0]
    gaps = {}
    for reference in (True, False):
        batch = engine_of(name, models, reference=reference, trace=True).sample(request)
        worst = 0.0
        with torch.inference_mode():
            for r in range(batch.rows):
                row = batch.row_tokens(r)
                logits = target(input_ids=torch.tensor([list(PROMPT) + row[:-1]])).logits[0]  # [len(row)+P-1, V]
                for t in range(len(row)):
                    hist = token_history([PROMPT], [row[:t]], logits.shape[-1])
                    want = process_logits(logits[len(PROMPT) - 1 + t][None], case.params, eos_token_id=EOS_ID,
                                          history=hist)[0].numpy()
                    worst = max(worst, float(np.abs(batch.info["trace_probs"][r, t] - want).max()))
        gaps[reference] = worst
    assert gaps[True] < 1e-5, gaps
    assert gaps[False] > 0.01, gaps


def verdict(models, name: str, n: int, *, reference: bool, seed: int = 202) -> str:
    case = case_of(name)
    request = SampleRequest(prompts=(PROMPT,), params=case.params, n=n, seed=seed, batch_size=case.batch_size)
    base = BaselineEngine(models[0]).sample(SampleRequest(prompts=(PROMPT,), params=case.params, n=n, seed=101,
                                                          batch_size=case.batch_size))
    engine = engine_of(name, models, reference=reference)
    oracle = TargetOracle(models[0], draft=models[1])
    result = analyse_run([case], {name: base}, {name: engine.sample(request)}, oracle=oracle, alpha=1e-3,
                         tolerance=0.05, seed=0, engines={"baseline": {}, "candidate": engine.describe()},
                         provenance={})
    return result.cases[0].verdict


@pytest.mark.slow
@pytest.mark.parametrize("name", NEW)
def test_a_case_with_the_field_is_shifted_for_the_mutant_and_not_for_the_reference(models, name) -> None:
    assert verdict(models, name, SAMPLES, reference=False) == "shifted"
    assert verdict(models, name, SAMPLES, reference=True) != "shifted"


def test_exact_laws_of_a_penalty_case_match_the_reference_engines_samples(models) -> None:
    """speceq power's enumeration gives the second position the history prompt + first token: its exact
    law agrees with 2 000 reference rows (chi-square p > 1e-3), and the penalty-free law does not."""
    from scipy import stats as sps

    from speceq.power.exact import exact_laws

    case = case_of("penalty-history-late", tokens=3)
    engine = engine_of("penalty-history-late", models, reference=True)
    laws = exact_laws(engine, case)
    plain = exact_laws(engine, Case(case_id="plain", prompt_ids=PROMPT, params=SamplingParams(max_new_tokens=3)))
    batch = engine.sample(SampleRequest(prompts=(PROMPT,), params=case.params, n=2000, seed=11, batch_size=256))
    V = engine.vocab_size
    second = batch.tokens[:, 1]
    counts = np.bincount(np.where(second < 0, V, second), minlength=V + 1)

    def pvalue(law: np.ndarray) -> float:
        if counts[law == 0].sum() > 0:
            return 0.0
        big = 2000 * law >= 5
        observed = np.append(counts[big], counts[~big].sum())
        expected = np.append(2000 * law[big], 2000 * law[~big].sum())
        return float(sps.chisquare(observed, expected / expected.sum() * observed.sum()).pvalue)

    assert max(laws.tv) < 1e-6  # the reference engine is exact
    assert pvalue(laws.target[1]) > 1e-3
    assert pvalue(plain.target[1]) < 1e-6
