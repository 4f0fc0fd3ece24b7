"""A hung engine: --chunk-timeout turns it into an engine error, and one Ctrl-C stops the run within seconds."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from fake_engines import FakeEngine
from hanging_engine import HangingEngine, arm, release_all

import speceq.pipeline.collect.executors as executors
from speceq.core.params import SamplingParams
from speceq.errors import ConfigError, EngineError
from speceq.faces.cli import main
from speceq.inputs.cases import Case
from speceq.pipeline.config import RunConfig
from speceq.pipeline.runner import run
from speceq.pipeline.stopping import RunInterrupted
from speceq.store import SampleStore

HERE = Path(__file__).resolve().parent
TESTS = HERE.parents[1]
REPO = TESTS.parent


def cases() -> list[Case]:
    return [Case(case_id="a", prompt_ids=(1, 2, 3), params=SamplingParams(max_new_tokens=4)),
            Case(case_id="b", prompt_ids=(4,), params=SamplingParams(max_new_tokens=3))]


def config(out: Path, **kw) -> RunConfig:
    return RunConfig(**{"baseline": "fake_engines:FakeEngine", "candidate": "hanging_engine:HangingEngine",
                        "oracle": False, "samples": 60, "chunk_size": 20, "seed": 5, "out_dir": out,
                        "progress": False, **kw})


@pytest.fixture(autouse=True)
def released():
    arm()
    yield
    release_all()  # no sampling thread is left hanging after the test


@pytest.fixture
def sigint_default():
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, before)


def test_a_chunk_past_the_timeout_is_an_engine_error_naming_engine_case_and_slice(tmp_path: Path) -> None:
    # candidate calls: case a slices 0, 1, 2, then case b slice 0 (call 4) hangs
    engines = {"baseline": FakeEngine(), "candidate": HangingEngine(hang_on_call=4, hang_s=30)}
    t0 = time.monotonic()
    with pytest.raises(EngineError, match=r"engine 'hanging', case 'b': slice 0 \(candidate\) gave no result "
                                          r"within the chunk timeout of 0\.5 s"):
        run(config(tmp_path, chunk_timeout=0.5), cases(), engines=engines)
    assert time.monotonic() - t0 < 10
    # kept: case a (both engines, 3 slices each) and case b's baseline slices, sampled before the hang
    assert len(SampleStore(tmp_path).keys()) == 9
    release_all()
    again = run(config(tmp_path, chunk_timeout=5.0), cases(),
                engines={"baseline": FakeEngine(), "candidate": HangingEngine(hang_on_call=0)})
    chunks = again.provenance["chunks"]
    assert (chunks["total"], chunks["reused"], chunks["sampled"]) == (12, 9, 3)


def test_a_worker_process_past_the_timeout_is_an_engine_error(tmp_path: Path) -> None:
    cfg = config(tmp_path, workers=2, chunk_timeout=1.0, candidate_options={"hang_on_call": 1, "hang_s": 60})
    t0 = time.monotonic()
    with pytest.raises(EngineError, match=r"hanging_engine:HangingEngine', case '[ab]': slice \d \(candidate\) gave "
                                          r"no result within the chunk timeout of 1 s"):
        run(cfg, cases())
    assert time.monotonic() - t0 < 30  # worker start-up included; the hang alone would take 60 s


def test_chunk_timeout_is_checked_where_it_is_set(tmp_path: Path) -> None:
    for bad in (0, -1.0, float("inf"), True, "5"):
        with pytest.raises(ConfigError, match=r"^run\.chunk_timeout: expected a number of seconds > 0"):
            config(tmp_path, chunk_timeout=bad)
    with pytest.raises(ConfigError, match=r"^run\.chunk_timeout: expected None with executor='ray'"):
        config(tmp_path, chunk_timeout=5.0, executor="ray")
    assert config(tmp_path, chunk_timeout=2).settings()["chunk_timeout"] == 2


def test_one_ctrl_c_stops_an_in_process_run_with_a_hung_engine_within_the_grace(
        tmp_path: Path, sigint_default: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(executors, "STOP_GRACE_S", 1.0)
    engines = {"baseline": FakeEngine(), "candidate": HangingEngine(hang_on_call=2, hang_s=30, sigint=True)}
    t0 = time.monotonic()
    with pytest.raises(RunInterrupted, match="4 of 12 chunks are stored"):
        run(config(tmp_path), cases(), engines=engines)  # no chunk timeout: Ctrl-C alone must stop it
    assert time.monotonic() - t0 < 6
    assert len(SampleStore(tmp_path).keys()) == 4  # the hung chunk is not stored


def test_the_cli_exits_130_within_seconds_after_one_ctrl_c_with_a_hung_engine(tmp_path: Path) -> None:
    marker = tmp_path / "hanging"
    cases_file = tmp_path / "cases.json"
    cases_file.write_text('{"defaults": {"max_new_tokens": 3}, "cases": [{"id": "one", "prompt_ids": [1, 2, 3]}]}')
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), str(TESTS), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen(
        [sys.executable, "-m", "speceq", "run", "--baseline", "fake_engines:FakeEngine",
         "--candidate", "hanging_engine:HangingEngine", "--candidate-option", "hang_on_call=1",
         "--candidate-option", f"marker={marker}", "--cases", str(cases_file), "--samples", "40",
         "--chunk-size", "20", "--no-oracle", "--workers", "1", "--out", str(tmp_path / "out")],
        cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not marker.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert marker.exists(), proc.communicate(timeout=5)
        t0 = time.monotonic()
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
        took = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, err
    assert took < executors.STOP_GRACE_S + 5, took
    assert "interrupted: 2 of 4 chunks are stored" in err


def test_cli_chunk_timeout_option(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cases_file = tmp_path / "cases.json"
    cases_file.write_text('{"defaults": {"max_new_tokens": 3}, "cases": [{"id": "one", "prompt_ids": [1, 2, 3]}]}')
    code = main(["run", "--baseline", "fake_engines:FakeEngine", "--candidate", "hanging_engine:HangingEngine",
                 "--candidate-option", "hang_on_call=2", "--candidate-option", "hang_s=30", "--cases", str(cases_file),
                 "--samples", "40", "--chunk-size", "20", "--no-oracle", "--workers", "1", "--chunk-timeout", "0.5",
                 "--out", str(tmp_path / "out")])
    assert code == 2
    assert "case 'one': slice 1 (candidate) gave no result within the chunk timeout of 0.5 s" in \
        capsys.readouterr().err
