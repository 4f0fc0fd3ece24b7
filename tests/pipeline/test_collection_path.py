"""One collection path for both loops: the same chunk identity, progress and Ctrl-C in fixed and sequential runs."""

from __future__ import annotations

import json
import re
import signal
from pathlib import Path

import pytest
from fake_engines import FakeEngine

from speceq.core.params import SamplingParams
from speceq.inputs.cases import Case
from speceq.pipeline.config import RunConfig
from speceq.pipeline.plan import chunk_seed, engine_identities, plan_chunks
from speceq.pipeline.runner import run
from speceq.pipeline.sequential.driver import SCHEDULE, STORE_SUBDIR, expected_slices, look_totals
from speceq.pipeline.stopping import RunInterrupted
from speceq.store import ROLES, STORE_FORMAT, ChunkKey, SampleStore

FAKE = "fake_engines:FakeEngine"


def cases() -> list[Case]:
    return [Case(case_id="a", prompt_ids=(1, 2, 3), params=SamplingParams(max_new_tokens=4)),
            Case(case_id="b", prompt_ids=(4,), params=SamplingParams(temperature=0.7, max_new_tokens=3))]


def config(out: Path, **kw) -> RunConfig:
    return RunConfig(**{"baseline": FAKE, "candidate": FAKE, "oracle": False, "samples": 300, "seed": 3,
                        "out_dir": out, "progress": False, **kw})


@pytest.fixture
def sigint_default():
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, before)


def stored(root: Path) -> dict[tuple[str, str, int], tuple[dict, bytes]]:
    return {(k.role, k.case_id, k.slice_index): (k.identity, b.tokens.tobytes()) for k, b in SampleStore(root).items()}


def test_both_loops_store_the_same_chunk_for_the_same_slice(tmp_path: Path) -> None:
    # slice 0 of a fixed run in chunks of 3 = the sequential run's first look (the look grid starts at 3)
    one = [Case(case_id="a", prompt_ids=(1, 2, 3), params=SamplingParams(max_new_tokens=4))]
    run(config(tmp_path / "fixed", samples=12, chunk_size=3), one, engines={r: FakeEngine() for r in ROLES})
    run(config(tmp_path / "seq", samples=12, sequential=True), one, engines={r: FakeEngine() for r in ROLES})
    fixed, seq = stored(tmp_path / "fixed"), stored(tmp_path / "seq" / STORE_SUBDIR)
    for role in ROLES:
        where = (role, "a", 0)
        (identity, tokens), (seq_identity, seq_tokens) = fixed[where], seq[where]
        assert identity["n"] == seq_identity["n"] == 3
        assert seq_identity.pop("schedule") == SCHEDULE  # the only difference: the sequential schedule is named
        assert seq_identity == identity
        assert seq_tokens == tokens  # same seed, same engine: the same samples


def test_each_loop_stores_exactly_its_planned_keys_with_the_identity_of_before(tmp_path: Path) -> None:
    cfg = config(tmp_path / "fixed", samples=50, chunk_size=20)
    engines = {r: FakeEngine() for r in ROLES}
    run(cfg, cases(), engines=engines)
    plan = plan_chunks(cfg, cases(), engines)
    assert {k.fingerprint for k in SampleStore(cfg.out_dir).keys()} == {c.key.fingerprint for c in plan}
    ident = engine_identities(cfg, engines)
    for c in plan:  # the identity as the fixed loop wrote it before the collection path was shared
        case_doc = {k: v for k, v in c.case.to_dict().items() if k != "text"}
        old = {"format": STORE_FORMAT, "role": c.role, "engine": ident[c.role], "case": case_doc, "run_seed": 3,
               "seed": chunk_seed(3, c.role, c.case.case_id, c.slice_index), "slice": c.slice_index, "n": c.n}
        assert c.key == ChunkKey.build(c.role, c.case.case_id, c.slice_index, old, samples=c.n)

    scfg = config(tmp_path / "seq", samples=300, sequential=True)
    run(scfg, cases(), engines={r: FakeEngine() for r in ROLES})
    written = SampleStore(scfg.out_dir / STORE_SUBDIR).keys()
    expected = {c.key for c in expected_slices(scfg, cases(), ident, {"a": 1, "b": 1})}
    assert written and set(written) <= expected  # cases may stop early: a prefix of their slices
    for k in written:  # the identity as the sequential loop wrote it before
        case = next(c for c in cases() if c.case_id == k.case_id)
        totals = (0, *look_totals(300))
        old = {"format": STORE_FORMAT, "schedule": SCHEDULE, "role": k.role, "engine": ident[k.role],
               "case": {x: v for x, v in case.to_dict().items() if x != "text"}, "run_seed": 3,
               "seed": chunk_seed(3, k.role, k.case_id, k.slice_index), "slice": k.slice_index,
               "n": totals[k.slice_index + 1] - totals[k.slice_index]}
        assert k == ChunkKey.build(k.role, k.case_id, k.slice_index, old)


def test_a_sequential_run_stops_cleanly_on_ctrl_c_and_resumes_to_the_same_result(tmp_path: Path,
                                                                                  sigint_default: None) -> None:
    # baseline calls: 1 = a slice 0, 2 = b slice 0 (first round), 3 = a slice 1: Ctrl-C there
    before = signal.getsignal(signal.SIGINT)
    out = tmp_path / "out"
    with pytest.raises(RunInterrupted) as e:
        run(config(out, sequential=True), cases(),
            engines={"baseline": FakeEngine(sigint_on_calls=(3,)), "candidate": FakeEngine()})
    assert "5 of 8 chunks are stored" in e.value.message and "resume" in e.value.message
    assert signal.getsignal(signal.SIGINT) is before
    assert len(SampleStore(out / STORE_SUBDIR).keys()) == 5  # the chunk being sampled was stored
    assert not (out / "result.json").exists()
    resumed = run(config(out, sequential=True), cases(), engines={r: FakeEngine() for r in ROLES})
    assert json.loads((out / "provenance.json").read_text())["chunks"]["reused"] == 5
    clean = run(config(tmp_path / "clean", sequential=True), cases(), engines={r: FakeEngine() for r in ROLES})
    assert [(c.verdict, c.reason, c.n_baseline) for c in resumed.cases] == \
        [(c.verdict, c.reason, c.n_baseline) for c in clean.cases]


def test_a_second_ctrl_c_stops_a_sequential_run_at_once(tmp_path: Path, sigint_default: None) -> None:
    with pytest.raises(RunInterrupted, match="4 of 8 chunks are stored"):
        run(config(tmp_path, sequential=True), cases(),
            engines={"baseline": FakeEngine(sigint_on_calls=(3, 3)), "candidate": FakeEngine()})


def test_a_sequential_run_shows_progress_in_a_log(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run(config(tmp_path, sequential=True, progress=True), cases(), engines={r: FakeEngine() for r in ROLES})
    err = capsys.readouterr().err  # pytest captures stderr: not a terminal, so plain lines
    for cid in ("a", "b"):  # (a fast run: one line per case, at its first slice)
        line = next(x for x in err.splitlines() if x.startswith(f"speceq: case {cid!r}: "))
        for role in ROLES:  # rows counted against the case's last look
            assert re.search(rf"{role} \d+/{look_totals(300)[-1]} rows", line), line


def test_ctrl_c_during_a_sequential_look_stops_at_once_with_the_resume_hint(
        tmp_path: Path, sigint_default: None, monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    import speceq.pipeline.sequential.driver as driver

    real = driver.evaluate_case

    def interrupted(*args, **kwargs):  # the user presses Ctrl-C while the first look is evaluated
        os.kill(os.getpid(), signal.SIGINT)
        return real(*args, **kwargs)

    monkeypatch.setattr(driver, "evaluate_case", interrupted)
    with pytest.raises(RunInterrupted, match="4 of 4 chunks are stored") as e:
        run(config(tmp_path, sequential=True), cases(), engines={r: FakeEngine() for r in ROLES})
    assert "resume" in e.value.message
