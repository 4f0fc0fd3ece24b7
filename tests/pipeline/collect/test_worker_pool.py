"""WorkerPool: worker processes started once and kept across runs give every run its serial samples;
auto is capped at the pool's limit; engines known to come from a spec are rebuilt from it; engine
objects holding torch tensors reach a worker process."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]
if str(TESTS) not in sys.path:
    sys.path.insert(0, str(TESTS))  # test_runner.py (fake_engines.py: tests/conftest.py)

from fake_engines import FakeEngine  # noqa: E402
from test_runner import cases, config, frame  # noqa: E402

import speceq.pipeline.collect as collect_pkg  # noqa: E402
from speceq.pipeline.collect.executors import ProcessExecutor, SerialExecutor  # noqa: E402
from speceq.pipeline.collect.pool import WorkerPool  # noqa: E402
from speceq.pipeline.runner import run  # noqa: E402

SPEC = "fake_engines:FakeEngine"


def _run(out: Path, shift: float, pool: WorkerPool | None) -> dict:
    engines = {"baseline": FakeEngine(), "candidate": FakeEngine(shift=shift)}
    result = run(config(out, oracle=False, workers=1 if pool is None else None), cases(), engines=engines,
                 pool=pool)
    return {"result": result, "engines": engines}


def test_two_runs_share_two_worker_processes_and_each_gets_its_serial_samples(tmp_path):
    with WorkerPool(workers=2, threads=1) as pool:
        first = _run(tmp_path / "p1", 0.0, pool)
        second = _run(tmp_path / "p2", 0.3, pool)  # other engines: the same workers get new recipes
        assert pool.started == 2  # started once for both runs, not per run
    for got in (first, second):
        assert got["result"].provenance["executor"].startswith("2 worker processes kept across runs")
        assert all(e.calls == 0 for e in got["engines"].values())  # the driver sampled nothing
    _run(tmp_path / "s1", 0.0, None)
    _run(tmp_path / "s2", 0.3, None)
    assert frame(tmp_path / "p1").equals(frame(tmp_path / "s1"))
    assert frame(tmp_path / "p2").equals(frame(tmp_path / "s2"))
    assert not frame(tmp_path / "p1").equals(frame(tmp_path / "p2"))  # the second run did use its own engines


def test_one_worker_samples_in_this_process_and_starts_nothing(tmp_path):
    with WorkerPool(workers=1, threads=1) as pool:
        got = _run(tmp_path, 0.0, pool)
        assert pool.started == 0
    assert got["result"].provenance["executor"] == "serial, in this process"


def test_auto_is_capped_at_the_limit_and_a_fixed_count_is_not(monkeypatch):
    monkeypatch.setattr(collect_pkg, "usable_cpus", lambda: 8)
    monkeypatch.setattr(collect_pkg, "busy_cpus_now", lambda: 0.0)
    assert WorkerPool(workers=None, threads=1).count(20)[0] == 8
    n, why = WorkerPool(workers=None, threads=1, limit=2).count(20)
    assert n == 2 and "capped at 2" in why
    assert WorkerPool(workers=None, threads=1, limit=2).count(1)[0] == 1  # one chunk: one process
    assert WorkerPool(workers=3, threads=1, limit=2).count(20) == (3, "")
    with pytest.raises(ValueError, match="limit"):
        WorkerPool(workers=None, threads=1, limit=0)


def test_an_engine_known_to_come_from_a_spec_is_rebuilt_from_it():
    known, other = FakeEngine(), FakeEngine(shift=0.1)
    with WorkerPool(workers=2, threads=1) as pool:
        pool.know(known, SPEC, {})
        ex = pool.executor({"baseline": known, "candidate": other}, None, pending=4)
        assert isinstance(ex, ProcessExecutor)
        assert ex.recipes["baseline"].spec == SPEC and ex.recipes["baseline"].pickled is None
        assert ex.recipes["candidate"].spec is None and ex.recipes["candidate"].pickled  # an object: pickled
        assert isinstance(pool.executor({"baseline": known, "candidate": other}, None, pending=1), SerialExecutor)
        assert pool.started == 0  # nothing sampled yet: no process started


def test_an_engine_object_holding_a_torch_tensor_samples_in_a_worker_process(tmp_path):
    torch = pytest.importorskip("torch")
    engines = {"baseline": FakeEngine(), "candidate": FakeEngine()}
    for e in engines.values():
        e.weights = torch.arange(6.0)  # multiprocessing's pickler would send it as a handle the worker cannot open
    result = run(config(tmp_path / "w", oracle=False, workers=2), cases(), engines=engines)
    assert result.provenance["executor"].startswith("2 worker processes")
    run(config(tmp_path / "s", oracle=False, workers=1), cases(), engines={"baseline": FakeEngine(),
                                                                           "candidate": FakeEngine()})
    assert frame(tmp_path / "w").equals(frame(tmp_path / "s"))
