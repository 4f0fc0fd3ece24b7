"""Oracle scoring through the executors: the serial TokenScores, bit for bit.

The bundled target and draft score the rows of real bundled-engine samples: serially in this
process, and through 2 worker processes cut along the serial call's forward batches. Every
per-token array must have the same bytes.
"""

from __future__ import annotations

from dataclasses import fields

import pytest

from speceq.engines.base import SampleBatch, SampleRequest
from speceq.inputs.cases import default_cases
from speceq.pipeline.collect.oracle_tasks import ModelSource, plan_score_tasks, serial_batches
from speceq.pipeline.collect.session import ExecutorSession
from speceq.pipeline.config import RunConfig
from speceq.pipeline.runner import resolve_engines
from speceq.stats.scores import TokenScores

ROWS = 300  # more than one forward batch of 256 rows, so there is something to cut


def same_scores(a: TokenScores, b: TokenScores) -> list[str]:
    """Names of the fields whose bytes differ."""
    out = []
    for f in fields(TokenScores):
        x, y = getattr(a, f.name), getattr(b, f.name)
        if (x is None) != (y is None) or (x is not None and (x.dtype != y.dtype or x.tobytes() != y.tobytes())):
            out.append(f.name)
    return out


@pytest.fixture(scope="module")
def scored():
    config = RunConfig(baseline="baseline", candidate="reference", workers=2)
    engines = resolve_engines(config)
    case = next(c for c in default_cases() if c.case_id == "self-attr-ragged-b32")  # 3 prompts, 4 tokens
    request = SampleRequest(prompts=tuple(tuple(p) for p in case.prompts), params=case.params, n=ROWS, seed=5,
                            batch_size=case.batch_size)
    batch = engines["candidate"].sample(request)
    return config, engines, case, batch


def test_tasks_are_whole_serial_forward_batches(scored):
    from speceq.oracles.hf import TargetOracle

    _, engines, case, batch = scored
    oracle = TargetOracle(engines["baseline"].model, draft=engines["candidate"].draft)
    batches = serial_batches(case.prompts, batch, oracle.vocab_size)
    assert len(batches) >= 2 and sorted(r for b in batches for r in b) == list(range(batch.rows))
    shared = serial_batches(case.prompts, batch, oracle.vocab_size, share_prefix=True)
    assert sorted(r for b in shared for r in b) == list(range(batch.rows))
    assert all(len({int(batch.prompt_index[r]) for r in b}) == 1 for b in shared)  # one prompt per forward batch
    from speceq.pipeline.collect.oracle_tasks import oracle_recipe

    recipe = oracle_recipe(oracle, target=ModelSource(), draft=None)
    tasks = plan_score_tasks(case.case_id, case.prompts, batch, case.params, recipe, oracle.vocab_size, 2)
    assert len(tasks) == 2
    whole = [set(b) for b in batches]
    for t in tasks:  # every serial batch lies inside exactly one task
        rows = set(t.rows.tolist())
        assert all(b <= rows or not (b & rows) for b in whole)


def test_two_worker_processes_score_the_serial_token_scores_bit_for_bit(scored):
    from speceq.oracles.hf import TargetOracle

    config, engines, case, batch = scored
    head = SampleBatch(tokens=batch.tokens[:100], lengths=batch.lengths[:100], prompt_index=batch.prompt_index[:100])
    specs = {r: (getattr(config, r), {}) for r in ("baseline", "candidate")}
    with ExecutorSession(executor="local", workers=2, ray_address=None, threads=None, engines=engines,
                         specs=specs) as session:
        for share_prefix in (False, True):  # the default whole-row scoring, and one prefill per prompt
            oracle = TargetOracle(engines["baseline"].model, draft=engines["candidate"].draft,
                                  eos_token_id=engines["baseline"].eos_token_id, share_prefix=share_prefix)
            serial = oracle.score(case.prompts, batch, case.params)
            serial_head = oracle.score(case.prompts, head, case.params)
            proxy = session.prefetch_scores(
                oracle, [(case.case_id, case.prompts, head, case.params),
                         (case.case_id, case.prompts, batch, case.params)],
                target=ModelSource(engine_role="baseline", engine_attribute="model"),
                draft=ModelSource(engine_role="candidate", engine_attribute="draft"))
            assert proxy is not oracle and session._open is not None
            parallel_head = proxy.score(case.prompts, head, case.params)
            parallel = proxy.score(case.prompts, batch, case.params)
            assert parallel.has_draft and len(parallel) == len(serial) > ROWS
            assert same_scores(parallel, serial) == [], share_prefix
            assert same_scores(parallel_head, serial_head) == [], share_prefix
            assert proxy.worker_seconds > 0
            # a request nobody prefetched is scored by the driver's oracle itself
            assert same_scores(proxy.score(case.prompts, head, case.params), serial_head) == []


def test_the_share_prefix_option_reaches_the_oracle_and_the_rerun_command(scored):
    from speceq.oracles.build import make_oracle
    from speceq.pipeline.analysis import settings_rerun_command

    _, engines, case, _ = scored
    off = RunConfig(oracle_share_prefix=False)
    assert make_oracle(off.oracle_spec(), engines).share_prefix is False
    assert make_oracle(RunConfig().oracle_spec(), engines).share_prefix is True  # the default since the main-job measurement
    assert "--no-oracle-share-prefix" in settings_rerun_command(off.settings(), 100, case)
    assert "share-prefix" not in settings_rerun_command(RunConfig().settings(), 100, case)
