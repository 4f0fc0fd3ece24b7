"""Seeds: same-seed repeatability (information only) and seed sensitivity.

Same seed: the candidate samples one request twice with one seed. Identical rows are
expected of a seeded engine; rows that differ are a "different draw" (nondeterministic
kernels, a server that does not honour the seed) and are reported in the test's
``speceq`` section, never as a failure by themselves (the equivalence tests do not need
repeatability). The test fails only if the engine breaks the output contract.

Different seeds: two requests with different seeds must not give identical batches.
Bug class: an engine that ignores ``seed`` and reseeds a fixed generator, so every chunk of
a run repeats the same rows and the samples are not independent (the statistics then
understate the variance). At T = 1 over 8 tokens the chance that 64 independent rows repeat
exactly is negligible.

Budget: 64 rows of 8 tokens per request (``--speceq-samples`` overrides).
"""

from __future__ import annotations

import numpy as np
import pytest

from speceq.engines.base import SampleRequest, validate_batch
from speceq.suites._cases import PROMPTS, byte_case

pytestmark = pytest.mark.speceq_budget(samples=64)


def test_same_seed_repeatability(speceq) -> None:
    case = byte_case("repeat-same-seed", PROMPTS[2], temperature=1.0, max_new_tokens=8)
    speceq.repeatability(case)  # validates both batches; the comparison goes to the report section


def test_different_seeds_differ(speceq) -> None:
    case = byte_case("repeat-other-seed", PROMPTS[2], temperature=1.0, max_new_tokens=8)
    engine = speceq.engine("candidate")
    batches = []
    for seed in (speceq.settings.seed + 1, speceq.settings.seed + 2):
        request = SampleRequest(prompts=(case.prompt_ids,), params=case.params, n=speceq.samples, seed=seed,
                                batch_size=case.batch_size)
        batch = engine.sample(request)
        validate_batch(batch, request, engine, case_id=case.case_id)
        batches.append(batch)
    a, b = batches
    assert not (np.array_equal(a.tokens, b.tokens) and np.array_equal(a.lengths, b.lengths)), (
        f"engine {engine.name!r} returned identical rows for seeds {speceq.settings.seed + 1} and "
        f"{speceq.settings.seed + 2}: it ignores the request seed, so the chunks of a run are not independent"
    )
