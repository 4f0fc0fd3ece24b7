"""scripts/smollm2/job.py's exit status: a wrong decision fails, a missing certificate is told apart."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "smollm2" / "job.py"


@pytest.fixture(scope="module")
def job():
    spec = importlib.util.spec_from_file_location("smollm2_job", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["smollm2_job"] = module  # the script's dataclasses resolve their module
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(("verdict", "expect", "status"), [
    ("equivalent", "equivalent", 0),
    ("shifted", "shifted", 0),
    ("inconclusive", "equivalent", 3),   # right decision, certificate missing
    ("shifted", "equivalent", 1),        # a lossless pair called shifted
    ("inconclusive", "shifted", 1),      # a planted bug not detected
    ("equivalent", "shifted", 1),
])
def test_row_status_separates_wrong_decisions_from_missing_certificates(job, verdict, expect, status) -> None:
    assert job.row_status(verdict, expect) == status


def test_job_status_takes_the_worst_part_and_counts_unknown_codes_as_errors(job) -> None:
    assert job.job_status([0, 0, 0]) == 0
    assert job.job_status([0, 3, 0]) == 3
    assert job.job_status([3, 1, 3]) == 1
    assert job.job_status([1, 2]) == 2
    assert job.job_status([0, -9]) == 2   # a child process killed by a signal
    assert job.job_status([]) == 0
