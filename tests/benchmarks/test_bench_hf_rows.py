"""benchmarks/bench_hf_rows.py's --breakdown: the parts of an hf-assisted call add up and count what they claim."""

from __future__ import annotations

import os

import pytest
import torch
from benchmark_scripts import load_script

from speceq.core.params import SamplingParams
from speceq.engines._prefill import ENV_SWITCH
from speceq.engines.base import SampleRequest
from speceq.engines.hf import HFAssistedEngine
from speceq.models import ByteTokenizer
from speceq.models.prompts import DEFAULT_PROMPTS

torch.set_num_threads(1)


def test_breakdown_of_assisted_rows_on_the_byte_world(monkeypatch: pytest.MonkeyPatch) -> None:
    bench = load_script("bench_hf_rows")
    monkeypatch.delenv(ENV_SWITCH, raising=False)
    prompt = tuple(ByteTokenizer().encode(DEFAULT_PROMPTS[4]))
    request = SampleRequest(prompts=(prompt,), params=SamplingParams(temperature=1.0, max_new_tokens=6), n=8, seed=2,
                            batch_size=1)
    made: list[HFAssistedEngine] = []

    def make() -> HFAssistedEngine:
        made.append(HFAssistedEngine())
        return made[-1]

    got = bench.measure_breakdown(make, request)
    assert ENV_SWITCH not in os.environ  # the switch is put back as it was
    engine = made[0]
    target_memo, draft_memo = engine.target._speceq_prefill_memo, engine.draft._speceq_prefill_memo
    assert got.asked == {"target": target_memo.hits + target_memo.misses, "draft": draft_memo.hits + draft_memo.misses}
    assert got.computed == {"target": target_memo.misses, "draft": draft_memo.misses}
    assert draft_memo.hits >= request.n - 1  # the draft's prompt prefill: computed once, remembered after
    assert got.draws >= 6  # every row draws at least one token from the target's verify step
    assert got.rows == 8 and got.total_s > 0 and min(got.forward_s.values()) > 0
    assert got.memo_s >= 0 and got.draws_s > 0
    assert got.rest_s == pytest.approx(got.total_s - sum(got.forward_s.values()) - got.memo_s - got.draws_s)
    line = got.line("hf-assisted", 6)
    assert "target forwards" in line and "draft forwards" in line and f"({got.draws} draws)" in line
