"""Executors behind collect: worker processes give the serial samples bit for bit, retry a
worker that dies, report engine errors, and fall back to serial for engines they cannot send."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import numpy as np
import pytest

TESTS = Path(__file__).resolve().parents[1]
if str(TESTS) not in sys.path:
    sys.path.insert(0, str(TESTS))  # test_runner.py (fake_engines.py: tests/conftest.py)

from fake_engines import FakeEngine  # noqa: E402
from test_runner import assert_same_samples, cases, config, frame  # noqa: E402

from speceq.engines.function import FunctionEngine  # noqa: E402
from speceq.errors import EngineError  # noqa: E402
from speceq.pipeline.collect import auto_workers, choose_executor, engine_recipes, usable_cpus  # noqa: E402
from speceq.pipeline.collect.executors import ProcessExecutor, SerialExecutor  # noqa: E402
from speceq.pipeline.fixed import collect  # noqa: E402
from speceq.pipeline.stopping import RunInterrupted  # noqa: E402
from speceq.store import SampleStore  # noqa: E402

SPEC = "fake_engines:FakeEngine"


def spec_engines(**candidate_options):
    specs = {"baseline": (SPEC, {}), "candidate": (SPEC, dict(candidate_options))}
    return {"baseline": FakeEngine(), "candidate": FakeEngine(**candidate_options)}, specs


def fingerprints(out: Path) -> list[tuple[str, str, int, str]]:
    return [(k.role, k.case_id, k.slice_index, k.fingerprint) for k in SampleStore(out).keys()]


@pytest.fixture(scope="module")
def serial(tmp_path_factory):
    out = tmp_path_factory.mktemp("serial")
    got = collect(config(out), cases(), *spec_engines()[:1])
    return out, got


def test_two_worker_processes_store_the_serial_samples_bit_for_bit(tmp_path, serial, capsys):
    serial_out, serial_got = serial
    engines, specs = spec_engines()
    got = collect(config(tmp_path, workers=2), cases(), engines, specs=specs)
    assert (got.chunks_sampled, got.executor) == (18, "2 worker processes, 1 torch thread(s) each")
    assert engines["baseline"].calls == engines["candidate"].calls == 0  # the driver sampled nothing
    assert_same_samples(got, serial_got)
    assert frame(tmp_path).equals(frame(serial_out))
    assert fingerprints(tmp_path) == fingerprints(serial_out)


def test_engine_objects_are_pickled_to_workers_when_no_spec_is_given(tmp_path, serial):
    got = collect(config(tmp_path, workers=2), cases(), {"baseline": FakeEngine(), "candidate": FakeEngine()})
    assert got.executor.startswith("2 worker processes")
    assert_same_samples(got, serial[1])


def test_a_worker_that_dies_is_replaced_and_its_chunk_resampled_from_its_seed(tmp_path, serial, capsys):
    marker = tmp_path / "died-once"
    engines, specs = spec_engines(kill_once_marker=str(marker))
    got = collect(config(tmp_path / "out", workers=2), cases(), engines, specs=specs)
    assert marker.exists() and got.chunks_sampled == 18
    assert "worker process died (exit code -9) while sampling candidate" in capsys.readouterr().err
    assert_same_samples(got, serial[1])


def test_a_worker_that_always_dies_gives_up_after_three_attempts(tmp_path):
    engines, specs = spec_engines(kill_on_call=1)  # every fresh worker dies on its first candidate chunk
    with pytest.raises(EngineError, match=r"case 'a'.*died 3 times \(last exit code -9\)"):
        collect(config(tmp_path, workers=2), cases()[:1], engines, specs=specs)
    assert {k.role for k in SampleStore(tmp_path).keys()} <= {"baseline"}  # finished chunks are kept


def test_an_engine_error_in_a_worker_names_case_engine_and_slice(tmp_path):
    # raised in the worker, sent back pickled (output checks run in the driver, as in a serial run)
    engines, specs = spec_engines(fail_on_call=1)
    with pytest.raises(EngineError, match=r"engine 'fake', case 'a': sample\(\) failed on slice \d: RuntimeError"):
        collect(config(tmp_path, workers=2), cases()[:1], engines, specs=specs)


def _closure_engine() -> FunctionEngine:
    inner = FakeEngine()

    def sample(prompt_ids, n, params, seed):  # a local function: cannot be pickled
        from speceq.engines.base import SampleRequest

        batch = inner.sample(SampleRequest(prompts=(tuple(prompt_ids),), params=params, n=n, seed=seed))
        return [batch.row_tokens(i) for i in range(batch.rows)]

    return FunctionEngine(sample, vocab_size=8, eos_token_id=7, name="closure")


def test_an_engine_object_that_cannot_be_pickled_samples_serially_and_says_so(tmp_path, capsys):
    engines = {"baseline": _closure_engine(), "candidate": _closure_engine()}
    assert isinstance(engine_recipes(engines, None), str)
    got = collect(config(tmp_path, workers=2), cases()[:1], engines)
    assert got.executor == "serial, in this process" and got.chunks_sampled == 6
    err = capsys.readouterr().err
    assert "sampling serially: the baseline engine 'closure' was given as a Python object" in err


def test_executor_choice():
    engines, specs = spec_engines()
    pick = dict(executor="local", ray_address=None, threads=None, engines=engines, specs=specs)
    assert isinstance(choose_executor(workers=1, pending=10, **pick), SerialExecutor)
    assert isinstance(choose_executor(workers=4, pending=1, **pick), SerialExecutor)  # one chunk: no pool
    assert isinstance(choose_executor(workers=4, pending=0, **pick), SerialExecutor)
    proc = choose_executor(workers=3, pending=2, **{**pick, "threads": 2})
    assert isinstance(proc, ProcessExecutor) and (proc.workers, proc.threads) == (2, 2)
    assert 1 <= auto_workers(100) and auto_workers(1) == 1
    cpus = usable_cpus()
    assert auto_workers(100, busy=0.0) == cpus and auto_workers(100, busy=float(cpus)) == 1
    assert auto_workers(1, busy=0.0) == 1
    recipes = engine_recipes(engines, {"baseline": ("rel/my_engine.py:fn", {}), "candidate": (SPEC, {"shift": 0.1})})
    assert Path(recipes["baseline"].spec.rpartition(":")[0]).is_absolute()
    assert recipes["candidate"].spec == SPEC and dict(recipes["candidate"].options) == {"shift": 0.1}


def test_auto_workers_on_a_nearly_idle_machine_uses_every_core(monkeypatch):
    import speceq.pipeline.collect as collect_pkg

    monkeypatch.setattr(collect_pkg, "usable_cpus", lambda: 2)
    assert auto_workers(72, busy=0.0) == 2
    assert auto_workers(72, busy=0.7) == 2  # the second CPU is still 30 % idle
    assert auto_workers(72, busy=0.9) == 1  # only 10 % of it is left
    assert auto_workers(72, busy=1.0) == 1  # one CPU is taken


def test_busy_cpus_are_measured_now_and_leave_out_this_process(monkeypatch):
    """The figure is the CPU time other processes take in the window, not the 1-minute load average."""
    import speceq.pipeline.collect as collect_pkg

    readings = iter([(1000, 10_000, 2), (1150, 10_200, 2)])  # 150 busy of 200 ticks over 2 CPUs
    own = iter([collect_pkg.os.times_result((1.0, 0.0, 0.0, 0.0, 0.0)),
                collect_pkg.os.times_result((1.5, 0.0, 0.0, 0.0, 0.0))])  # this process: 0.5 s = 50 ticks
    monkeypatch.setattr(collect_pkg, "_cpu_jiffies", lambda cpus: next(readings))
    monkeypatch.setattr(collect_pkg.os, "times", lambda: next(own))
    monkeypatch.setattr(collect_pkg.os, "sysconf", lambda name: 100)
    monkeypatch.setattr(collect_pkg.os, "getloadavg", lambda: (1.3, 1.3, 1.3))  # a stale average: not read
    monkeypatch.setattr(collect_pkg.time, "sleep", lambda s: None)
    assert collect_pkg.busy_cpus_now() == pytest.approx(1.0)  # (150 - 50) / 200 * 2
    monkeypatch.setattr(collect_pkg, "_cpu_jiffies", lambda cpus: None)  # no /proc/stat: every CPU is free
    monkeypatch.setattr(collect_pkg.os, "times", lambda: collect_pkg.os.times_result((0.0,) * 5))
    assert collect_pkg.busy_cpus_now() is None


def test_busy_cpu_reading_counts_only_this_process_cpus(monkeypatch, tmp_path):
    import speceq.pipeline.collect as collect_pkg

    stat = tmp_path / "stat"
    stat.write_text("cpu  9 9 9 9 9 0 0 0 0 0\ncpu0 10 0 10 80 0 0 0 0 0 0\ncpu1 50 0 0 50 0 0 0 0 0 0\nintr 1\n")
    real_open = open
    monkeypatch.setattr("builtins.open", lambda path, *a, **k: real_open(stat if path == "/proc/stat" else path, *a, **k))
    assert collect_pkg._cpu_jiffies({1}) == (50, 100, 1)
    assert collect_pkg._cpu_jiffies(None) == (70, 200, 2)


def test_resume_with_workers_reuses_what_serial_stored(tmp_path):
    engines, specs = spec_engines()
    collect(config(tmp_path, samples=40), cases(), engines, specs=specs)
    got = collect(config(tmp_path, samples=60, workers=2), cases(), engines, specs=specs)
    assert (got.chunks_reused, got.chunks_sampled) == (12, 6)
    fresh = collect(config(tmp_path / "fresh", samples=60), cases(), engines, specs=specs)
    assert_same_samples(got, fresh)
    assert np.array_equal(got.baseline["a"].tokens, fresh.baseline["a"].tokens)


def test_ctrl_c_with_workers_stores_the_running_chunks_and_resume_gives_the_serial_samples(tmp_path, serial):
    before = signal.signal(signal.SIGINT, signal.default_int_handler)  # whatever the test run started with
    try:
        engines, specs = spec_engines(sigint_parent_on_call=2)  # the driver gets Ctrl-C mid-run
        with pytest.raises(RunInterrupted, match=r"interrupted: \d+ of 18 chunks are stored") as e:
            collect(config(tmp_path, workers=2), cases(), engines, specs=specs)
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    finally:
        signal.signal(signal.SIGINT, before)
    stored = len(SampleStore(tmp_path).keys())
    assert 0 < stored < 18 and f"{stored} of 18" in e.value.message
    got = collect(config(tmp_path), cases(), *spec_engines()[:1])
    assert (got.chunks_reused, got.chunks_sampled) == (stored, 18 - stored)
    assert_same_samples(got, serial[1])


def worker_pids(driver: int) -> list[int]:
    """Pids of the speceq worker processes whose parent is ``driver`` (Linux /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:  # ended meanwhile
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if ppid == driver and b"speceq.pipeline.collect.worker" in cmdline:
            found.append(int(entry.name))
    return found


def alive(pid: int) -> bool:
    try:
        state = (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads worker processes from Linux /proc")
def test_sigterm_with_workers_stops_now_terminates_them_keeps_stored_chunks_and_exits_143(tmp_path, serial):
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    engines, specs = spec_engines(sigterm_parent_on_call=2)  # a CI runner cancels the job mid-run
    with pytest.raises(RunInterrupted, match=r"interrupted: \d+ of 18 chunks are stored") as e:
        collect(config(tmp_path, workers=2), cases(), engines, specs=specs)
    assert e.value.exit_code == 128 + signal.SIGTERM
    assert {s: signal.getsignal(s) for s in before} == before  # the handlers in place before are back
    assert [pid for pid in worker_pids(os.getpid()) if alive(pid)] == []  # no worker lives on
    stored = len(SampleStore(tmp_path).keys())
    assert 0 < stored < 18 and f"{stored} of 18" in e.value.message
    got = collect(config(tmp_path), cases(), *spec_engines()[:1])
    assert (got.chunks_reused, got.chunks_sampled) == (stored, 18 - stored)
    assert_same_samples(got, serial[1])


DRIVER = """
import sys
sys.path[:0] = {paths!r}
from pathlib import Path
from fake_engines import FakeEngine
from test_runner import cases, config
from speceq.pipeline.fixed import collect
spec = ("fake_engines:FakeEngine", {{"delay_s": 600.0, "calls_dir": {calls!r}}})  # a hung engine: ten minutes a chunk
collect(config(Path({out!r}), workers=2), cases(), {{"baseline": FakeEngine(), "candidate": FakeEngine()}},
        specs={{"baseline": spec, "candidate": spec}})
"""


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads worker processes from Linux /proc")
def test_workers_end_themselves_when_their_driver_is_killed_even_inside_a_hung_chunk(tmp_path):
    import subprocess
    import time

    paths = [str(TESTS.parent), str(TESTS)]  # fake_engines.py, test_runner.py
    calls = tmp_path / "calls"
    calls.mkdir()
    driver = subprocess.Popen([sys.executable, "-c", DRIVER.format(paths=paths, out=str(tmp_path / "out"),
                                                                   calls=str(calls))])
    workers: list[int] = []
    try:
        deadline = time.monotonic() + 120
        inside: set[int] = set()  # workers inside a call (a ten-minute chunk)
        while len(inside) < 2 and time.monotonic() < deadline and driver.poll() is None:
            time.sleep(0.2)
            inside = {int(f.name.split("-")[0]) for f in calls.iterdir()}
        workers = worker_pids(driver.pid)
        assert len(inside) == 2 and inside == set(workers), "the driver's two workers never started a chunk"
        driver.kill()  # SIGKILL: the driver cleans nothing up
        driver.wait()
        deadline = time.monotonic() + 15
        while any(alive(pid) for pid in workers) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not any(alive(pid) for pid in workers), "a worker outlived its killed driver"
    finally:
        if driver.poll() is None:
            driver.kill()
        for pid in [*workers, *worker_pids(driver.pid)]:  # a failed check leaves none behind
            if alive(pid):
                os.kill(pid, signal.SIGKILL)


def test_workers_set_the_thread_variable_speceq_engines_read():
    from speceq.models.torch_utils import THREADS_ENV as ENGINES_THREADS_ENV
    from speceq.pipeline.collect.sampling import THREADS_ENV

    assert THREADS_ENV == ENGINES_THREADS_ENV
