"""Sequential runs on the executors: worker processes give the serial run's slices, looks and verdicts.

The cases go look by look in lock step (each round samples the next slice of every open case
at once); each slice is seeded, so the stored slices, the look at which each case stops and
the whole result must be those of a serial run (only timings and the executor differ).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
if str(TESTS) not in sys.path:
    sys.path.insert(0, str(TESTS))  # test_sequential_run.py (fake_engines.py: tests/conftest.py)

from test_sequential_run import FAKE, cases, config  # noqa: E402

from speceq.core.params import SamplingParams  # noqa: E402
from speceq.inputs.cases import Case  # noqa: E402
from speceq.pipeline.runner import run  # noqa: E402
from speceq.store import SampleStore  # noqa: E402

VOLATILE = ("per_s", "speedup", "time", "elapsed", "created", "finished", "wall", "rerun_command")


def decisions(doc):
    if isinstance(doc, dict):
        return {k: decisions(v) for k, v in doc.items() if not any(s in k for s in VOLATILE) and k != "provenance"}
    if isinstance(doc, list):
        return [decisions(v) for v in doc]
    return doc


def stored(out: Path) -> dict[str, tuple[str, bytes]]:
    store = SampleStore(out / "sequential")
    return {k.label(): (k.fingerprint, b.tokens.tobytes()) for k, b in store.items()}


def test_two_worker_processes_give_the_serial_sequential_run(tmp_path: Path) -> None:
    # a shifted case stops early, an equal one goes on (different stopping looks), a greedy one takes one slice
    run_cases = [*cases(), Case(case_id="g", prompt_ids=(1, 2), params=SamplingParams(temperature=0.0,
                                                                                          max_new_tokens=3))]
    opts = {"candidate": FAKE, "candidate_options": {"shift": 0.08}, "samples": 1200}
    serial = run(config(tmp_path / "serial", **opts), run_cases)
    parallel = run(config(tmp_path / "workers", workers=2, **opts), run_cases)
    prov = {n: json.loads((tmp_path / n / "provenance.json").read_text()) for n in ("serial", "workers")}
    assert prov["serial"]["executor"] == "serial, in this process"
    assert prov["workers"]["executor"].startswith("2 worker processes")
    assert prov["serial"]["sequential"]["cases"] == prov["workers"]["sequential"]["cases"]
    looks = {cid: c["looks"] for cid, c in prov["serial"]["sequential"]["cases"].items()}
    assert len(set(looks.values())) > 1, looks  # cases stopped at different looks: the lock step is exercised
    assert prov["serial"]["chunks"] == prov["workers"]["chunks"]
    assert stored(tmp_path / "serial") == stored(tmp_path / "workers")
    a, b = json.loads(serial.to_json()), json.loads(parallel.to_json())
    assert decisions(a) == decisions(b)
    assert [c.verdict for c in serial.cases] == [c.verdict for c in parallel.cases]
