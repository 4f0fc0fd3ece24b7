"""speceq audit's matrix core: cells, shared baseline, faults per cell, resume, JSON (fake engines, no torch)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from audit_fakes import ROW_LIMIT_MESSAGE

from speceq.errors import ConfigError
from speceq.pipeline.audit import (
    AUDIT_JSON,
    FIELD_SETTINGS,
    NOT_RUN,
    NOT_SUPPORTED,
    RAN,
    SETTINGS,
    SHAPES,
    AuditMethod,
    AuditPlan,
    AuditResult,
    eta_seconds,
    load_audit,
    pick,
    pick_settings,
    run_audit,
)
from speceq.pipeline.config import RunConfig
from speceq.verdicts.verdict import Verdict

FAKE = "fake_engines:FakeEngine"


def plan(out: Path, methods: list[AuditMethod], *, settings=("t1",), shapes=("single", "ragged-b4"),
         samples: int = 300) -> AuditPlan:
    run = RunConfig(oracle=False, samples=samples, chunk_size=samples, seed=3, progress=False, workers=1)
    return AuditPlan(family="fake", baseline=FAKE, methods=tuple(methods), prompt_ids=(1, 2, 3),
                     companion_ids=(4, 5, 6, 1, 2), settings=pick(SETTINGS, settings, "setting"),
                     shapes=pick(SHAPES, shapes, "shape"), run=run, out_dir=out)


def test_shifted_method_and_equal_method_in_one_matrix(tmp_path):
    lines: list[str] = []
    result = run_audit(plan(tmp_path, [AuditMethod("same", FAKE), AuditMethod("bug", FAKE, {"shift": 0.3})]),
                       log=lines.append)
    same = [c for c in result.cells if c.method == "same"]
    bug = [c for c in result.cells if c.method == "bug"]
    assert all(c.verdict == Verdict.SHIFTED for c in bug)
    assert all(c.verdict != Verdict.SHIFTED for c in same)
    assert all(c.tv_estimate is not None and c.tv_upper_bound is not None for c in result.cells)
    assert min(c.tv_estimate for c in bug) > 0.2 > max(c.tv_estimate for c in same)
    assert result.verdict == Verdict.SHIFTED and result.exit_code == 1
    # progress: one line per cell, with the count and an ETA until the last
    assert len(lines) == 4 and lines[0].startswith("[1/4] same · t1 · single: ") and "ETA" in lines[0]
    assert "ETA" not in lines[-1]
    # every cell has its own result.json and a command that reruns it alone on its folder
    for c in result.cells:
        assert (tmp_path / c.result).is_file()
        assert c.command.startswith("speceq run --baseline fake_engines:FakeEngine --candidate fake_engines:FakeEngine")
        assert f"--out {tmp_path / 'cells' / c.method / c.case_id}" in c.command
    assert "--candidate-option shift=0.3" in bug[0].command
    assert (tmp_path / "cases" / "t1-ragged-b4.json").is_file()


def test_baseline_chunks_are_sampled_once_per_column(tmp_path):
    result = run_audit(plan(tmp_path, [AuditMethod("a", FAKE), AuditMethod("b", FAKE, {"shift": 0.1})]),
                       log=lambda _: None)
    first = [c for c in result.cells if c.method == "a"]
    second = [c for c in result.cells if c.method == "b"]
    assert [c.baseline_chunks_sampled for c in first] == [1, 1]  # one chunk (chunk_size == samples) per column
    assert [c.baseline_chunks_sampled for c in second] == [0, 0]  # measured: nothing of the baseline sampled again
    assert [c.chunks_sampled for c in second] == [1, 1]  # the candidate's own chunk only
    shared = tmp_path / "baseline" / "chunks" / "baseline"
    assert len(list(shared.glob("*/slice-*.npz"))) == 2


def test_row_limited_engine_is_not_supported_at_batch_and_still_runs_single(tmp_path):
    result = run_audit(plan(tmp_path, [AuditMethod("one-row", "audit_fakes:OneRowFake")]), log=lambda _: None)
    single = result.cell("one-row", "t1", "single")
    batch = result.cell("one-row", "t1", "ragged-b4")
    assert single.status == RAN and single.verdict is not None
    assert batch.status == NOT_SUPPORTED and batch.reason == ROW_LIMIT_MESSAGE and batch.verdict is None
    assert result.verdict == single.verdict  # not supported does not count


def test_faults_stay_in_their_cells(tmp_path):
    methods = [AuditMethod("typo", "hf-asisted"), AuditMethod("missing", "audit_fakes:MissingPathFake"),
               AuditMethod("crash", FAKE, {"fail_on_call": 1}), AuditMethod("ok", FAKE)]
    result = run_audit(plan(tmp_path, methods, shapes=("single",)), log=lambda _: None)
    words = {c.method: (c.status, c.reason) for c in result.cells}
    assert words["typo"][0] == NOT_RUN and "unknown engine 'hf-asisted'" in words["typo"][1]
    assert words["missing"] == (NOT_RUN, "ImportError: cannot import name 'NoSuchGenerator' from "
                                         "'transformers.generation'")
    assert words["crash"][0] == NOT_RUN and "simulated engine crash" in words["crash"][1]
    assert "\n" not in "".join(r for _, r in words.values())
    assert words["ok"][0] == RAN
    # not run counts as inconclusive (nothing shown), never as equivalent
    assert result.verdict == Verdict.INCONCLUSIVE and result.exit_code == 3


def test_rerun_resumes_finished_cells_and_retries_failed_ones(tmp_path):
    p = plan(tmp_path, [AuditMethod("a", FAKE), AuditMethod("crash", FAKE, {"fail_on_call": 1})], shapes=("single",))
    first = run_audit(p, log=lambda _: None)
    lines: list[str] = []
    again = run_audit(p, log=lines.append)
    a1, a2 = first.cell("a", "t1", "single"), again.cell("a", "t1", "single")
    assert not a1.resumed and a2.resumed and a2.verdict == a1.verdict and a2.tv_estimate == a1.tv_estimate
    assert "(from an earlier run)" in lines[0]
    assert again.cell("crash", "t1", "single").status == NOT_RUN  # retried (fails again: a fresh engine, call 1)
    # a changed budget is another cell: it runs again, reusing the stored samples it still fits
    bigger = run_audit(replace(p, run=replace(p.run, samples=600, chunk_size=300)), log=lambda _: None)
    assert not bigger.cell("a", "t1", "single").resumed
    assert bigger.cell("a", "t1", "single").n == 600


def test_killed_cell_resumes_from_its_chunks(tmp_path):
    """An audit killed inside a cell (Ctrl-C) keeps the finished cells and the chunks stored so far."""
    p = plan(tmp_path, [AuditMethod("a", FAKE), AuditMethod("b", FAKE, {"sigint_on_calls": (2,)})],
             shapes=("single",), samples=300)
    p = replace(p, run=replace(p.run, chunk_size=100))
    with pytest.raises(KeyboardInterrupt):
        run_audit(p, log=lambda _: None)
    assert (tmp_path / "cells" / "a" / "t1-single" / "cell.json").is_file()
    assert not (tmp_path / AUDIT_JSON).exists()
    stored = len(list((tmp_path / "cells" / "b" / "t1-single" / "chunks" / "candidate").glob("*/slice-*.npz")))
    assert stored == 2  # the chunk being sampled at Ctrl-C is stored too
    # the same plan again: a fresh engine counts its calls from 1, and samples only the missing chunk
    again = run_audit(p, log=lambda _: None)
    assert again.cell("a", "t1", "single").resumed
    b = again.cell("b", "t1", "single")
    assert b.status == RAN, b.reason
    assert b.baseline_chunks_sampled == 0 and b.chunks_sampled == 3 - stored


def test_json_round_trip_and_load(tmp_path):
    result = run_audit(plan(tmp_path, [AuditMethod("a", FAKE), AuditMethod("typo", "nope-engine")],
                            shapes=("single",)), log=lambda _: None)
    back = AuditResult.from_json(result.to_json())
    assert back == result
    assert load_audit(tmp_path / AUDIT_JSON) == result
    (tmp_path / "bad.json").write_text("{}")
    with pytest.raises(ConfigError, match="not a speceq audit.json"):
        load_audit(tmp_path / "bad.json")


def test_bad_plans_are_refused(tmp_path):
    with pytest.raises(ConfigError, match="unknown setting 'hot'; expected some of t1, t07-p09"):
        pick(SETTINGS, ["t1", "hot"], "setting")
    with pytest.raises(ConfigError, match="given twice"):
        plan(tmp_path, [AuditMethod("a", FAKE), AuditMethod("a", FAKE)])
    with pytest.raises(ConfigError, match="no method"):
        plan(tmp_path, [])


def test_eta_is_the_mean_cell_time_times_the_cells_left():
    assert eta_seconds([40.0, 0.0], 38) == 20.0 * 38  # a quick not-supported cell lowers the mean
    assert eta_seconds([0.0], 5) is None and eta_seconds([3.0], 0) is None


def test_a_declared_lossy_method_is_measured_never_shifted(tmp_path):
    methods = [AuditMethod("ok", FAKE), AuditMethod("lossy", "audit_fakes:LossyFake", {"shift": 0.3})]
    result = run_audit(plan(tmp_path, methods, shapes=("single",)), log=lambda _: None)
    cell = result.cell("lossy", "t1", "single")
    assert cell.verdict == Verdict.LOSSY and cell.reason.startswith("declared lossy by the engine, so measured, not judged")
    assert "the tests said shifted" in cell.reason
    assert cell.tv_estimate > 0.2 and cell.tv_upper_bound >= cell.tv_estimate
    assert result.verdict == result.cell("ok", "t1", "single").verdict != Verdict.SHIFTED


def test_a_cell_whose_baseline_folder_is_its_own_is_not_run_and_the_others_run(tmp_path):
    own = tmp_path / "cells" / "a" / "t1-single" / "chunks" / "baseline"
    own.mkdir(parents=True)  # e.g. left by `speceq run --fresh` on the cell's folder
    result = run_audit(plan(tmp_path, [AuditMethod("a", FAKE)]), log=lambda _: None)
    cell = result.cell("a", "t1", "single")
    assert cell.status == NOT_RUN and "is a folder of its own, not the audit's shared baseline" in cell.reason
    assert result.cell("a", "t1", "ragged-b4").status == RAN


def test_audits_of_two_worlds_join_into_one_matrix_that_keeps_each_rows_world(tmp_path):
    """One audit per world (each in its folder), joined: a row per method, its world, paths from the top folder."""
    from speceq.pipeline.audit import join_audits

    byte = replace(plan(tmp_path / "worlds" / "byte", [AuditMethod("a", FAKE), AuditMethod("c", FAKE)],
                        shapes=("single",)), world="byte")
    mtp = replace(plan(tmp_path / "worlds" / "mtp", [AuditMethod("b", FAKE, {"shift": 0.3})], shapes=("single",)),
                  world="mtp")
    parts = [(run_audit(p, log=lambda _: None), p.out_dir) for p in (byte, mtp)]
    assert parts[1][0].method_worlds == {"b": "mtp"}  # a one-world audit records its rows' world too
    joined = join_audits(parts, tmp_path, order=["a", "b", "c"])
    assert joined.methods == ("a", "b", "c") and [c.method for c in joined.cells] == ["a", "b", "c"]
    assert joined.method_worlds == {"a": "byte", "b": "mtp", "c": "byte"} and joined.world is None
    assert joined.world_of("b") == "mtp" and joined.world_of("a") == "byte"
    b = joined.cell("b", "t1", "single")
    assert b.result == "worlds/mtp/cells/b/t1-single/result.json" and (tmp_path / b.result).is_file()
    assert b.command == parts[1][0].cell("b", "t1", "single").command  # the world's own command, untouched
    assert joined.verdict == Verdict.SHIFTED
    assert AuditResult.from_json(joined.to_json()) == joined
    # parts that are not one audit's, or share a row, are refused
    with pytest.raises(ConfigError, match="audited in two worlds"):
        join_audits([parts[0], parts[0]], tmp_path)
    with pytest.raises(ConfigError, match="differs from the first in samples"):
        join_audits([parts[0], (replace(parts[1][0], samples=5), parts[1][1])], tmp_path)
    with pytest.raises(ConfigError, match="does not list the audited methods"):
        join_audits(parts, tmp_path, order=["a", "b"])


def test_an_audit_json_without_method_worlds_loads_with_every_row_in_its_world(tmp_path):
    """audit.json files written before rows had worlds: every row is in the file's world (none if it named none)."""
    result = run_audit(replace(plan(tmp_path, [AuditMethod("a", FAKE)], shapes=("single",)), world="byte"),
                       log=lambda _: None)
    old = result.to_dict()
    del old["method_worlds"]
    assert AuditResult.from_dict(old).method_worlds == {"a": "byte"}
    assert AuditResult.from_dict({**old, "world": None}).method_worlds == {}
    assert AuditResult.from_dict({**old, "world": None}).world_of("a") is None


def test_request_field_settings_are_named_to_run_and_take_the_plans_processing_order(tmp_path):
    assert pick_settings(None) == SETTINGS and not set(FIELD_SETTINGS) & set(SETTINGS)
    assert [s.name for s in pick_settings(["bias", "t1"])] == ["bias", "t1"]
    with pytest.raises(ConfigError, match="expected some of t1, .*minp01, rep13, bias"):
        pick_settings(["nope"])
    p = replace(plan(tmp_path, [AuditMethod("m", FAKE)]), settings=pick_settings(["t1", "minp01"]), processing="hf")
    t1, minp = p.settings
    assert p.case(minp, SHAPES[0]).params.processing == "hf" and p.case(minp, SHAPES[0]).params.min_p == 0.1
    assert p.case(t1, SHAPES[0]).params == t1.params  # no field: the stored case is what it always was
    assert replace(p, processing="vllm").case(minp, SHAPES[0]).params.processing == "vllm"
