"""Which call (chunk) and batch each row came from: kept when chunks are joined, read back by the analysis."""

from __future__ import annotations

import numpy as np

from speceq.engines.base import SampleBatch
from speceq.pipeline.analysis import row_groups
from speceq.pipeline.plan import concat_batches, row_calls


def _batch(rows: int, first: int) -> SampleBatch:
    return SampleBatch(tokens=np.full((rows, 2), first, dtype=np.int64), lengths=np.full(rows, 2, dtype=np.int64),
                       prompt_index=np.zeros(rows, dtype=np.int64))


def test_joined_chunks_keep_each_rows_call() -> None:
    joined = concat_batches([_batch(3, 0), _batch(2, 1), _batch(4, 2)])
    assert row_calls(joined).tolist() == [0, 0, 0, 1, 1, 2, 2, 2, 2]
    assert (row_calls(joined) == joined.tokens[:, 0]).all()
    assert row_groups(joined, 8).tolist() == row_calls(joined).tolist()  # two or more calls: the calls


def test_one_call_groups_by_forward_batch() -> None:
    one = _batch(10, 0)  # an engine's own batch (no chunk record): one call
    assert row_calls(one).tolist() == [0] * 10
    assert row_groups(one, 4).tolist() == [0, 0, 0, 0, 1, 1, 1, 1, 2, 2]
    assert row_groups(one, 1).tolist() == [0] * 10  # one call of single-row batches: nothing to compare


def test_a_record_that_does_not_fit_the_rows_is_ignored() -> None:
    odd = SampleBatch(tokens=np.zeros((3, 1), dtype=np.int64), lengths=np.ones(3, dtype=np.int64),
                      prompt_index=np.zeros(3, dtype=np.int64), info={"chunk_rows": (2, 2)})
    assert row_calls(odd).tolist() == [0, 0, 0]


def test_a_power_pool_slice_keeps_the_calls_of_its_rows() -> None:
    from speceq.core.params import SamplingParams
    from speceq.engines.function import FunctionEngine
    from speceq.inputs.cases import Case
    from speceq.power.pools import SamplePool

    def fn(prompt, n, params, seed):  # every row holds its call's seed: rows of one call are equal
        return [[seed % 200, seed % 200] for _ in range(n)]

    case = Case(case_id="c", prompt_ids=(1, 2), params=SamplingParams(max_new_tokens=2, ignore_eos=True))
    pool = SamplePool(FunctionEngine(fn, eos_token_id=None), case, seed=0, label="x", chunk=4)
    part = pool.take(2, 6)  # rows 2..7: the end of call 0, all of call 1
    assert row_calls(part).tolist() == [0, 0, 1, 1, 1, 1]
    assert len(set(part.tokens[:2, 0])) == 1 and len(set(part.tokens[2:, 0])) == 1
