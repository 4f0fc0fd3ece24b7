"""Padded and tree calls keep one layout per composition and reuse their input rows, safely.

The rows a call needs are copied once per composition; a kernel that writes into its inputs
(through torch or a raw pointer) is found by the bit-for-bit compare of the reused buffers with
the tables, and the check then copies every call's inputs and collects the scenario again, so
every kept call saw exactly the tables' rows.
"""

from __future__ import annotations

import ctypes
import dataclasses

import numpy as np
import pytest
import torch

from speceq.kernels import Kernel, check
from speceq.kernels.contract import Outcome
from speceq.kernels.kernel_calls import (
    DIRECT_RUN_BYTES,
    RowBuffers,
    collect,
    fixed_layout_plan,
    rows_equal_in_place,
    run_scenario,
    same_bits,
)
from speceq.kernels.reference_kernels import reference_kernel
from speceq.kernels.scenarios import MAX_CELLS_PER_CALL, default_scenarios
from speceq.kernels.trees import collect_tree, default_tree_scenarios, reference_tree_kernel


def _raw_write(t: torch.Tensor, value: int = 0x7F) -> None:
    """Overwrite a tensor's first bytes through its raw pointer: invisible to torch's version counter."""
    ctypes.memset(t.data_ptr(), value, 16)


# ---- RowBuffers ---------------------------------------------------------------------------------
def test_reused_rows_are_not_copied_again_and_a_raw_write_is_found() -> None:
    table = torch.arange(20 * 9, dtype=torch.float32).view(20, 9)
    rows = np.array([3, 3, 7, 0, 19])
    bufs = RowBuffers()
    first = bufs.gather("t", table, rows, reuse=True)
    again = bufs.gather("t", table, rows, reuse=True)
    assert torch.equal(again, table[torch.from_numpy(rows)]) and again.data_ptr() == first.data_ptr()
    assert (bufs.copies, bufs.reuses) == (1, 1)
    assert bufs.verify() and not bufs.written and bufs.compares == 1  # untouched: equal
    bufs.gather("t", table, rows, reuse=True)  # copied again (verify forgot what was held)
    held = bufs.gather("t", table, rows, reuse=True)  # handed out again ...
    _raw_write(held)  # ... and written by a "kernel" through its pointer
    assert not bufs.verify() and bufs.written


def test_the_compare_before_other_rows_finds_a_write_too() -> None:
    table = torch.rand(10, 4)
    bufs = RowBuffers()
    bufs.gather("t", table, np.array([1, 2]), reuse=True)
    bufs.gather("t", table, np.array([1, 2]), reuse=True).fill_(5.0)
    got = bufs.gather("t", table, np.array([4, 4, 4]), reuse=True)  # other rows: the held ones are compared first
    assert bufs.written and torch.equal(got, table[[4, 4, 4]])


def test_a_buffer_handed_out_once_needs_no_compare_and_copy_mode_always_copies() -> None:
    table = torch.rand(10, 4)
    bufs = RowBuffers()
    bufs.gather("t", table, np.array([1, 2]), reuse=True).fill_(5.0)  # written, but no call saw stale rows
    got = bufs.gather("t", table, np.array([0]), reuse=True)
    assert not bufs.written and bufs.compares == 0 and torch.equal(got, table[[0]])
    bufs.copy_every_call = True
    for _ in range(3):
        got = bufs.gather("t", table, np.array([0]), reuse=True)
        got.fill_(7.0)
    assert bufs.copies == 5 and bufs.reuses == 0 and bufs.verify()
    assert torch.equal(bufs.gather("t", table, np.array([0]), reuse=True), table[[0]])


@pytest.mark.parametrize("where", ["first", "last"])
def test_the_in_place_compare_of_long_row_runs_finds_a_write_anywhere(where: str) -> None:
    # rows in runs of consecutive table rows (the tree layout: a request's N node rows), 64 KiB each:
    # compared in place, run by run, and a write in any byte of any run is found
    width = DIRECT_RUN_BYTES // 4
    table = torch.rand(12, width)
    rows = np.array([4, 5, 6, 0, 1, 2, 9, 10, 11])
    assert rows_equal_in_place(table[torch.from_numpy(rows)], table, rows, width) is True
    assert rows_equal_in_place(table[:1].clone(), table, np.array([0]), 4) is None  # 16-byte runs: the scratch path
    cell = (3, 0) if where == "first" else (8, width - 1)  # the first value of the second run; the last of all
    written = table[torch.from_numpy(rows)]
    written[cell] = torch.nextafter(written[cell], torch.tensor(2.0))
    assert rows_equal_in_place(written, table, rows, width) is False  # found by the in-place path itself
    bufs = RowBuffers()  # and through the buffers that use it
    bufs.gather("t", table, rows, reuse=True)
    bufs.gather("t", table, rows, reuse=True)
    assert bufs.verify() and bufs.compares == 1
    bufs.gather("t", table, rows, reuse=True)
    held = bufs.gather("t", table, rows, reuse=True)
    held[cell] = torch.nextafter(held[cell], torch.tensor(2.0))
    assert not bufs.verify() and bufs.written


def test_the_compare_is_bit_for_bit_nan_and_signed_zero() -> None:
    table = torch.zeros(4, 3)
    table[1] = float("nan")
    assert same_bits(table, table.clone())  # NaN rows equal themselves bit for bit
    bufs = RowBuffers()
    bufs.gather("t", table, np.array([1, 0]), reuse=True)
    bufs.gather("t", table, np.array([1, 0]), reuse=True)
    assert bufs.verify()
    bufs.gather("t", table, np.array([1, 0]), reuse=True)
    bufs.gather("t", table, np.array([1, 0]), reuse=True)[1, 2] = -0.0  # == 0.0 as a float, not as bits
    assert not bufs.verify()
    a = torch.rand(3, 5, dtype=torch.float64)
    assert same_bits(a, a.clone()) and same_bits(a.t(), a.clone().t())
    b = a.clone()
    b[2, 4] = torch.nextafter(b[2, 4], torch.tensor(2.0, dtype=torch.float64))
    assert not same_bits(a, b) and not same_bits(a.t(), b.t())  # non-contiguous views: torch.equal on integer bits


def test_the_compare_walks_every_chunk() -> None:
    """A write in the last row of a buffer larger than one compare chunk is found."""
    table = torch.rand(50, 1000)
    rows = np.random.default_rng(0).integers(0, 50, 300)
    bufs = RowBuffers()
    bufs.COMPARE_CELLS = 4096  # 4 rows per chunk: 75 chunks
    bufs.gather("t", table, rows, reuse=True)
    bufs.gather("t", table, rows, reuse=True)[-1, -1] += 1.0
    assert not bufs.verify()


# ---- the plan of compositions ---------------------------------------------------------------------
def test_fixed_layout_plan_totals_bounds_and_few_compositions() -> None:
    rng = np.random.default_rng(5)
    for _ in range(300):
        t = int(rng.integers(1, 9))
        want = rng.integers(0, 3000, t)
        want[rng.integers(0, t)] = int(rng.integers(1, 3000))
        per_call = int(rng.integers(1, 900))
        plan = fixed_layout_plan(want, per_call)
        assert np.array_equal(np.sum(plan, axis=0), want)  # exactly the replicates
        assert all(int(p.max()) <= per_call and int(p.min()) >= 0 and p.any() for p in plan)
        calls = -(-int(want.max()) // per_call)
        assert len(plan) <= calls + -(-(calls - 1) // per_call)  # as many calls as min(want - have, per_call), or 1-2 more
        assert len({p.tobytes() for p in plan}) <= 1 + -(-(calls - 1) // per_call)  # the bulk, then the remainders
    big = fixed_layout_plan(np.array([250, 32, 32]), 17)  # 15 equal calls, then the remainders in one more
    assert [p.tolist() for p in big] == [[16, 2, 2]] * 15 + [[10, 2, 2]]
    assert len(fixed_layout_plan(np.array([2000] * 15), 273)) == 8  # 8 equal calls of 250 each, one composition


# ---- in the checks ---------------------------------------------------------------------------------
def _recording(ref: Kernel, log: list) -> Kernel:
    def rec(req):  # noqa: ANN001, ANN202
        big = req.target_probs if hasattr(req, "target_probs") else req.target_logits
        log.append((req.vocab_size, tuple(req.num_draft_tokens), big.data_ptr()))
        return ref(req)
    return Kernel(rec, ref.spec)


def test_padded_calls_keep_one_layout_per_composition_and_copy_once() -> None:
    ref = reference_kernel("padded")
    scn = next(s for s in default_scenarios(ref.spec) if s.name == "mixed-v61")
    log: list = []
    bufs = RowBuffers()
    rec = run_scenario(_recording(ref, log), scn, np.random.default_rng(0), torch.device("cpu"), bufs)
    assert rec.calls == len(log) >= 4 and not rec.inputs_written
    assert len({k for _, k, _ in log}) == 1 and len({p for *_, p in log}) == 1  # one layout, one buffer
    assert bufs.copies == 2 and bufs.reuses == 2 * (rec.calls - 1) and bufs.compares == 2  # target and draft rows
    assert sorted(log[0][1]) != list(log[0][1])  # the layout is shuffled, not sorted


def test_ragged_calls_still_draw_a_layout_and_copy_every_call() -> None:
    ref = reference_kernel("ragged")
    scn = next(s for s in default_scenarios(ref.spec) if s.name == "mixed-v61")
    log: list = []
    bufs = RowBuffers()
    rec = run_scenario(_recording(ref, log), scn, np.random.default_rng(0), torch.device("cpu"), bufs)
    assert rec.calls == len(log) >= 4
    assert len({k for _, k, _ in log}) == len(log)  # a fresh permutation for every call
    assert bufs.reuses == 0 and bufs.copies == 2 * rec.calls and bufs.compares == 0


def test_padded_calls_hold_at_most_the_cell_bound_counting_every_row_sent() -> None:
    ref = reference_kernel("padded")
    sizes: list[tuple[int, int, int]] = []

    def cheap(req):  # noqa: ANN001, ANN202 - the sizes only (its outputs break invariants; not checked here)
        sizes.append((req.vocab_size, req.target_probs.numel() + req.draft_probs.numel(), req.batch_size))
        return torch.full((req.batch_size, req.draft_token_ids.shape[1] + 1), -1, dtype=torch.int64)

    scenarios = [s for s in default_scenarios(ref.spec, scale=0.1) if s.vocab_size > 61]
    collect(Kernel(cheap, ref.spec), scenarios)
    by_v = {s.vocab_size: len(s.templates) for s in scenarios}
    k = ref.spec.max_draft
    for v, cells, b in sizes:
        assert cells == b * (2 * k + 1) * v
        assert cells <= max(MAX_CELLS_PER_CALL, by_v[v] * (2 * k + 1) * v)
    assert max(c for _, c, _ in sizes) > MAX_CELLS_PER_CALL / 2  # the bound is what sizes the calls



def test_ragged_calls_hold_at_most_the_cell_bound_counting_the_draft_rows_sent() -> None:
    """A ragged call's target logits and draft probs together fit the bound (it counted target rows only: 1.5x)."""
    ref = reference_kernel("ragged")
    assert ref.spec.takes_draft_probs
    sizes: list[tuple[int, int]] = []  # (V, bytes of the V-wide rows sent)

    def sized(req):  # noqa: ANN001, ANN202 - the reference, with every call's V-wide rows measured
        rows = [t for t in (req.target_logits, req.draft_probs) if t is not None]
        sizes.append((req.vocab_size, sum(t.numel() * t.element_size() for t in rows)))
        return ref(req)

    scenarios = [s for s in default_scenarios(ref.spec, scale=0.05) if s.vocab_size > 1000]
    collect(Kernel(sized, ref.spec), scenarios)
    bound = MAX_CELLS_PER_CALL * 4  # bytes of float32
    assert {v for v, _ in sizes} == {s.vocab_size for s in scenarios}
    for v, sent in sizes:
        assert sent <= bound, (v, sent / 2**20)
    assert max(b for _, b in sizes) > bound * 0.75  # the bound is what sizes the calls


@pytest.mark.parametrize("method", ["target-only", "multi-draft"])
def test_tree_calls_hold_at_most_the_cell_bound_counting_every_row_sent(method: str) -> None:
    """Every tensor a tree call sends (N target rows per request, N draft rows too for multi-draft) fits the bound."""
    spec = reference_tree_kernel(method).spec
    sizes: list[tuple[int, int, int]] = []  # (V, bytes of the V-wide rows, bytes of every tensor sent)

    def cheap(req):  # noqa: ANN001, ANN202 - the sizes only (its outputs break invariants; not checked here)
        sent = [getattr(req, f.name) for f in dataclasses.fields(req)]
        rows = [t for t in (req.target_probs, req.draft_probs) if t is not None]
        assert (req.draft_probs is not None) == (method == "multi-draft")
        sizes.append((req.vocab_size, sum(t.numel() * t.element_size() for t in rows),
                      sum(t.numel() * t.element_size() for t in sent if isinstance(t, torch.Tensor))))
        b, n = req.tokens.shape
        tokens = torch.full((b, n), -1, dtype=torch.int64)
        tokens[:, 0] = req.target_probs[:, 0].argmax(dim=1)
        return Outcome(tokens=tokens, accepted_nodes=torch.full((b, n), -1, dtype=torch.int64))

    scenarios = default_tree_scenarios(spec, scale=0.05, seed=1)
    collect_tree(Kernel(cheap, spec), scenarios, seed=1)
    bound = MAX_CELLS_PER_CALL * 4  # bytes of float32
    assert {v for v, _, _ in sizes} == {s.vocab_size for s in scenarios}
    for v, rows, sent in sizes:
        assert rows <= bound and sent <= bound, (v, rows / 2**20, sent / 2**20)
    assert max(r for _, r, _ in sizes) > bound / 2  # the bound is what sizes the calls at V = 40 000


def _inputs(req) -> list[torch.Tensor]:  # noqa: ANN001
    return [t for t in (getattr(req, "target_probs", None), getattr(req, "draft_probs", None)) if t is not None]


def _scribbler(ref: Kernel, seen: list, valid: dict[int, set[bytes]]) -> Kernel:
    """The reference kernel, then NaN over its inputs; logs whether each call's input rows were table rows."""
    def scribbling(req):  # noqa: ANN001, ANN202
        blocks = valid[req.vocab_size]
        ok = all(t[i].numpy().tobytes() in blocks for t in _inputs(req) for i in range(t.shape[0]))
        seen.append((req.vocab_size, ok))
        out = ref(req)
        for t in _inputs(req):
            t.fill_(float("nan"))
        return out
    return Kernel(scribbling, ref.spec)


def _padded_blocks(scenarios) -> dict[int, set[bytes]]:  # noqa: ANN001
    """Every request's exact input blocks: target [k + 1, V] (bonus row repeated) and draft [k, V] (zero padded)."""
    k = 3
    out: dict[int, set[bytes]] = {}
    for s in scenarios:
        blocks = out.setdefault(s.vocab_size, set())
        for t in s.templates:
            n = t.n_draft
            law = t.law.astype(np.float32)
            blocks.add(law[np.minimum(np.arange(k + 1), n)].tobytes())
            q = np.zeros((k, s.vocab_size), np.float32)
            q[:n] = t.draft32
            blocks.add(q.tobytes())
    return out


def _tree_blocks(scenarios) -> dict[int, set[bytes]]:  # noqa: ANN001
    out: dict[int, set[bytes]] = {}
    for s in scenarios:
        n = max(t.num_nodes for t in s.templates)
        blocks = out.setdefault(s.vocab_size, set())
        for t in s.templates:
            law = np.zeros((n, s.vocab_size), np.float32)
            law[: t.num_nodes] = t.law.astype(np.float32)
            blocks.add(law.tobytes())
    return out


def _kept_calls_clean(seen: list, records: list) -> bool:
    """Whether every call whose outputs a record kept saw exactly the tables' rows (a record's last ``calls``)."""
    for r in records:
        v, calls = (r.scenario.vocab_size, r.calls) if hasattr(r, "calls") else (r.scenario.vocab_size,
                                                                                  r.summary.calls)
        mine = [ok for vv, ok in seen if vv == v]
        if not all(mine[len(mine) - calls:]):
            return False
    return True


def _padded_scribble_run() -> tuple[list, list]:
    ref = reference_kernel("padded")
    scenarios = [s for s in default_scenarios(ref.spec) if s.vocab_size <= 61]
    seen: list = []
    records = collect(_scribbler(ref, seen, _padded_blocks(scenarios)), scenarios)
    return seen, records


def _tree_scribble_run() -> tuple[list, list]:
    ref = reference_tree_kernel("target-only")
    scenarios = [s for s in default_tree_scenarios(ref.spec, scale=0.5) if s.vocab_size <= 61]
    seen: list = []
    records = collect_tree(_scribbler(ref, seen, _tree_blocks(scenarios)), scenarios)
    return seen, records


@pytest.mark.parametrize("run", [_padded_scribble_run, _tree_scribble_run], ids=["padded", "tree"])
def test_a_kernel_that_writes_into_its_inputs_gets_exact_inputs_in_every_kept_call(run) -> None:  # noqa: ANN001
    seen, records = run()
    assert not all(ok for _, ok in seen)  # some calls saw written rows: the reuse was exercised
    assert _kept_calls_clean(seen, records)  # but no call whose outputs were kept
    flags = [r.inputs_written for r in records]
    assert flags[0] and not any(flags[1:])  # found in the first scenario; copied every call from then on


@pytest.mark.parametrize("run", [_padded_scribble_run, _tree_scribble_run], ids=["padded", "tree"])
def test_without_the_end_compare_kept_calls_see_written_inputs(run, monkeypatch) -> None:  # noqa: ANN001
    """The plant: skip the end-of-scenario compare; the test above would then fail."""
    monkeypatch.setattr(RowBuffers, "verify", lambda self: True)
    seen, records = run()
    assert not _kept_calls_clean(seen, records)


def test_the_result_says_the_kernel_wrote_into_its_inputs() -> None:
    ref = reference_kernel("padded")
    scenarios = [s for s in default_scenarios(ref.spec) if s.vocab_size <= 61]

    def scribbling(req):  # noqa: ANN001, ANN202
        out = ref(req)
        req.target_probs.fill_(float("nan"))
        return out

    r = check(Kernel(scribbling, ref.spec), scenarios=scenarios)
    assert r.verdict == "equivalent" and r.scenarios[0].inputs_written and not r.scenarios[1].inputs_written
    assert any(f.component == "inputs-written" for f in r.findings)
    assert "the kernel wrote into its inputs" in r.summary() and "copied per call" in r.summary()
    clean = check(ref, scenarios=scenarios)
    assert not any(f.component == "inputs-written" for f in clean.findings)
    tree = reference_tree_kernel("target-only")

    def tree_scribbling(req):  # noqa: ANN001, ANN202
        out = tree(req)
        _raw_write(req.target_probs)
        return out

    t = check(Kernel(tree_scribbling, tree.spec),
              scenarios=[s for s in default_tree_scenarios(tree.spec, scale=0.5) if s.vocab_size <= 61])
    assert t.verdict == "equivalent" and t.scenarios[0].inputs_written
    assert "the kernel wrote into its inputs" in t.summary()
