"""The Ray executor on a real local Ray cluster: same stores and verdicts as serial sampling.

Skipped only when Ray is not installed (``pip install 'speceq[ray]'``, part of the test
extra); under CI (``CI=true``) a missing Ray is a failure, not a skip.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]
if str(TESTS) not in sys.path:
    sys.path.insert(0, str(TESTS))  # test_runner.py (fake_engines.py: tests/conftest.py)

try:
    import ray
except ImportError:
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        raise  # CI installs the test extra, which includes Ray: its absence is a broken setup
    pytest.skip("Ray is not installed (pip install 'speceq[ray]')", allow_module_level=True)

from test_runner import assert_same_samples, cases, config, frame  # noqa: E402

from speceq.pipeline.fixed import collect  # noqa: E402
from speceq.pipeline.runner import run  # noqa: E402
from speceq.store import SampleStore  # noqa: E402
from speceq.verdicts.notes import NoteKind

SPEC = "fake_engines:FakeEngine"


@pytest.fixture(scope="module")
def ray_cluster():
    """A local Ray head on 127.0.0.1 with 2 CPUs, started for this module and shut down after it
    (only the processes it started). Its workers can import fake_engines (PYTHONPATH)."""
    if ray.is_initialized():
        pytest.fail("a Ray instance is already initialised in this process")
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False, _node_ip_address="127.0.0.1",
             runtime_env={"env_vars": {"PYTHONPATH": os.pathsep.join([str(TESTS), *sys.path])}})
    yield
    ray.shutdown()


def fingerprints(out: Path) -> list[tuple[str, str, int, str]]:
    return [(k.role, k.case_id, k.slice_index, k.fingerprint) for k in SampleStore(out).keys()]


def test_ray_tasks_give_the_serial_store_and_verdicts_and_retry_a_dead_worker(tmp_path, ray_cluster, capsys):
    kw = {"baseline": SPEC, "candidate": SPEC, "candidate_options": {"shift": 0.3}, "oracle": False}
    serial = run(config(tmp_path / "serial", **kw), cases())
    on_ray = run(config(tmp_path / "ray", executor="ray", workers=None, **kw), cases())
    assert "Ray tasks on a local Ray instance" in capsys.readouterr().err
    assert frame(tmp_path / "ray").equals(frame(tmp_path / "serial"))
    assert fingerprints(tmp_path / "ray") == fingerprints(tmp_path / "serial")
    assert [c.verdict for c in on_ray.cases] == [c.verdict for c in serial.cases]
    assert "shifted" in {c.verdict for c in serial.cases}  # the comparison covers a real verdict
    strip = ("provenance",)
    # the two runs differ only in their --out folder (named in rerun commands)
    ray_json = on_ray.to_json().replace(str(tmp_path / "ray"), str(tmp_path / "serial"))
    doc = {k: v for k, v in json.loads(ray_json).items() if k not in strip}
    assert doc == {k: v for k, v in json.loads(serial.to_json()).items() if k not in strip}

    # a Ray worker killed while sampling: Ray runs the task again, from the same seed
    marker = tmp_path / "died-once"
    engines = {"baseline": __import__("fake_engines").FakeEngine(),
               "candidate": __import__("fake_engines").FakeEngine(kill_once_marker=str(marker))}
    specs = {"baseline": (SPEC, {}), "candidate": (SPEC, {"kill_once_marker": str(marker)})}
    got = collect(config(tmp_path / "retry", executor="ray", workers=2), cases(), engines, specs=specs)
    assert marker.exists() and got.chunks_sampled == 18
    assert_same_samples(got, collect(config(tmp_path / "serial2"), cases(), engines))


def test_oracle_scoring_on_ray_gives_the_serial_result(tmp_path, ray_cluster, capsys):
    """With the oracle on, Ray tasks both sample and score (the bundled target, loaded in each Ray
    worker); the result equals the serial run's in every field, p-values and pictures included."""
    from speceq.inputs.cases import default_cases

    picked = [c for c in default_cases() if c.case_id in ("def-b1", "for-range-b4-ragged")]
    kw = {"baseline": "baseline", "candidate": "reference", "samples": 120, "chunk_size": 60, "oracle": True}
    serial = run(config(tmp_path / "serial", **kw), picked)
    on_ray = run(config(tmp_path / "ray", executor="ray", workers=None, **kw), picked)
    assert "Ray tasks on a local Ray instance" in capsys.readouterr().err
    assert "Ray" in json.loads(on_ray.to_json())["provenance"].get("oracle_scoring", "")
    assert any(t.name.startswith("PIT") for c in serial.cases for t in c.tests)  # the oracle's tests ran
    ray_json = on_ray.to_json().replace(str(tmp_path / "ray"), str(tmp_path / "serial"))
    assert without_timings(json.loads(ray_json)) == without_timings(json.loads(serial.to_json()))


#: The start of the note that prices an inconclusive case's required samples at the measured sampling speed.
SPEED_NOTE = "at this run's sampling speed"


def without_timings(doc):
    """``doc`` without provenance and the measured throughputs (tokens/s, speedup, the inconclusive cases'
    time-to-decide notes, in words in older results, records of kind "sampling time" now), which vary run to run."""
    if isinstance(doc, dict):
        return {k: without_timings(v) for k, v in doc.items()
                if k != "provenance" and not k.endswith("per_s") and not k.startswith("speedup")}
    if isinstance(doc, list):
        return [without_timings(v) for v in doc if not (isinstance(v, str) and v.startswith(SPEED_NOTE))
                and not (isinstance(v, dict) and v.get("kind") == NoteKind.SAMPLING_TIME.value)]
    return doc
