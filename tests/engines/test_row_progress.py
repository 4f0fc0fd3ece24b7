"""The optional rows-done hook (engines/row_progress.py): engines may call it, collection hears it, nobody must."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from speceq.core.params import SamplingParams
from speceq.engines.base import SampleRequest, batch_from_lists
from speceq.engines.function import FunctionEngine
from speceq.engines.hf import HFPromptLookupEngine, HFSampleEngine
from speceq.engines.row_progress import listen_rows, report_rows
from speceq.pipeline.collect.executors import SerialExecutor


@dataclass(frozen=True)
class _Case:
    case_id: str
    prompts: tuple = ((1, 2),)
    batch_size: int = 1


@dataclass(frozen=True)
class _Chunk:
    role: str
    case: _Case
    slice_index: int
    n: int

    def request(self) -> SampleRequest:
        return SampleRequest(prompts=self.case.prompts, params=SamplingParams(max_new_tokens=2), n=self.n, seed=1,
                             batch_size=1)


class _Reporting:
    """Reports after each row, as a slow one-row-at-a-time engine would."""

    name = "reporting"
    vocab_size = 10
    eos_token_id = None

    def sample(self, request: SampleRequest) -> object:
        rows = []
        for i in range(request.n):
            rows.append([1, 2])
            report_rows(i + 1)
        return batch_from_lists(rows, request.rows(), 2)


class _Silent(_Reporting):
    name = "silent"

    def sample(self, request: SampleRequest) -> object:
        return batch_from_lists([[1, 2]] * request.n, request.rows(), 2)


class _Stop:
    requested = False


def _collect(engine: object, n: int) -> tuple[list[tuple[str, int]], int]:
    heard: list[tuple[str, int]] = []
    results = []
    chunk = _Chunk("candidate", _Case("a"), 0, n)
    SerialExecutor({"candidate": engine}).run([chunk], lambda c: None, lambda c, b, s: results.append(b), _Stop(),
                                              on_rows=lambda c, done: heard.append((c.case.case_id, done)))
    return heard, results[0].rows


def test_the_serial_executor_hears_the_rows_an_engine_reports():
    heard, rows = _collect(_Reporting(), 4)
    assert heard == [("a", 1), ("a", 2), ("a", 3), ("a", 4)] and rows == 4


def test_an_engine_that_never_reports_samples_as_before():
    heard, rows = _collect(_Silent(), 3)
    assert heard == [] and rows == 3


def test_a_report_outside_a_collection_does_nothing_and_listeners_nest():
    report_rows(5)  # nobody listens: no error
    outer: list[int] = []
    inner: list[int] = []
    with listen_rows(outer.append):
        report_rows(1)
        with listen_rows(inner.append):
            report_rows(2)
        report_rows(3)
    report_rows(4)
    assert outer == [1, 3] and inner == [2]


def test_built_in_engines_report_rows():
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=50, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                         num_attention_heads=2, num_key_value_heads=2, bos_token_id=None,
                                         eos_token_id=48, pad_token_id=49)).eval()
    request = SampleRequest(prompts=((1, 2, 3), (4, 5)), params=SamplingParams(max_new_tokens=2, ignore_eos=True), n=2,
                            seed=3, batch_size=2)
    fn = FunctionEngine(lambda prompt, n, params, seed: [[7, 8]] * n, vocab_size=50, eos_token_id=48, name="fn")
    for engine, expected in ((HFSampleEngine(model), [2, 4]), (HFPromptLookupEngine(model), [1, 2, 3, 4]),
                             (fn, [2, 4])):
        heard: list[int] = []
        with listen_rows(heard.append):
            engine.sample(request)
        assert heard == expected, engine.name


SLOW_REPORTER = '''
import time
from speceq.engines.base import batch_from_lists
from speceq.engines.row_progress import report_rows


class SlowReporter:
    name, vocab_size, eos_token_id = "slow-reporter", 10, None

    def describe(self):
        return {"engine": "slow-reporter"}

    def sample(self, request):
        rows = []
        for i in range(request.n):
            time.sleep(0.4)
            rows.append([1, 2])
            report_rows(i + 1)
        return batch_from_lists(rows, request.rows(), 2)
'''


def test_a_worker_process_forwards_the_rows_its_engine_reports(tmp_path):
    from speceq.inputs.cases import Case
    from speceq.pipeline.collect.executors import ProcessExecutor
    from speceq.pipeline.collect.sampling import EngineRecipe
    from speceq.pipeline.plan import ChunkPlan
    from speceq.store import ChunkKey

    (tmp_path / "slow_reporter.py").write_text(SLOW_REPORTER)
    case = Case(case_id="a", prompt_ids=(1, 2), params=SamplingParams(max_new_tokens=2), batch_size=1)
    chunk = ChunkPlan("candidate", case, 0, 6, 1, ChunkKey.build("candidate", "a", 0, {"x": 1}))
    recipe = EngineRecipe(spec=f"{tmp_path / 'slow_reporter.py'}:SlowReporter")
    heard: list[int] = []
    results = []
    ProcessExecutor({"candidate": recipe}, workers=1, threads=1).run(
        [chunk], lambda c: None, lambda c, b, s: results.append(b), _Stop(),
        on_rows=lambda c, done: heard.append(done))
    assert results[0].rows == 6
    assert heard and heard == sorted(heard) and 1 <= heard[0] and heard[-1] <= 6  # at most one message a second
    assert len(heard) <= 3
