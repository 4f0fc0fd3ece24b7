"""The speceq_kernel fixture: a kernel check inside a test, its verdict, report section and session report."""

from __future__ import annotations

import json

import pytest

import speceq.kernels.kernel_check  # noqa: F401  (imported before the in-process runs, as conftest.py explains)
import speceq.reports.kernels  # noqa: F401

KERNEL_TESTS = """
import dataclasses

from speceq.kernels import kernel
from speceq.kernels.kernel_mutants import make
from speceq.kernels.reference_kernels import ReferenceChainKernel

core = ReferenceChainKernel()

@kernel(layout="padded", method="standard", uniforms=True, padding=True, max_vocab=20000)
def my_kernel(req):
    return core.padded(req)

def test_good_kernel(speceq_kernel):
    result = speceq_kernel.check(my_kernel)
    assert result.verdict == "equivalent"

def test_bad_kernel(speceq_kernel):
    bad = make("bonus-from-draft")
    speceq_kernel.check(bad.fn, dataclasses.replace(bad.spec, max_vocab=20000))

def test_builtin_by_name(speceq_kernel):
    assert speceq_kernel.check("reference:padded").verdict == "equivalent"
"""


def test_kernel_fixture_verdicts_and_report(project: pytest.Pytester) -> None:
    project.makepyfile(test_kernels=KERNEL_TESTS)
    result = project.runpytest("--speceq-kernel-scale=0.05", "--speceq-report=out/kernels.html", "-rA")
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines(["*DistributionMismatch*", "*bonus*"])
    result.stdout.fnmatch_lines(["*info: kernel check 1: kernel my_kernel (padded, standard): equivalent*"])
    result.stdout.fnmatch_lines(["speceq: report of 0 checks and 3 kernel checks: *out/kernels.html*"])
    html = (project.path / "out" / "kernels.html").read_text(encoding="utf-8")
    assert "Kernel checks" in html and "bonus-from-draft" in html and "test_kernels.py::test_bad_kernel" in html
    data = json.loads((project.path / "out" / "kernels.json").read_text(encoding="utf-8"))
    assert sorted(k["verdict"] for k in data["kernels"]) == ["equivalent", "equivalent", "shifted"]
    assert {k["label"] for k in data["kernels"]} == {"test_kernels.py::test_good_kernel",
                                                     "test_kernels.py::test_bad_kernel",
                                                     "test_kernels.py::test_builtin_by_name"}


MODEL_TESTS = """
def test_block_kernel(speceq_kernel):
    assert speceq_kernel.check("model:block-resampling").verdict == "equivalent"

def test_truncated_block_kernel(speceq_kernel):
    speceq_kernel.check("model:block-resampling-truncated")
"""


def test_the_fixture_checks_model_layout_kernels(project: pytest.Pytester) -> None:
    project.makepyfile(test_models=MODEL_TESTS)
    result = project.runpytest("--speceq-report=out/kernels.html", "-rA")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*DistributionMismatch*", "*token law after a prefix*"])
    data = json.loads((project.path / "out" / "kernels.json").read_text(encoding="utf-8"))
    assert sorted(k["verdict"] for k in data["kernels"]) == ["equivalent", "shifted"]
    assert "position 1, row" in (project.path / "out" / "kernels.html").read_text(encoding="utf-8")


def test_kernel_options_are_validated(project: pytest.Pytester) -> None:
    project.makepyfile(test_x="def test_x(): pass\n")
    result = project.runpytest("--speceq-kernel-scale=-1")
    assert result.ret != 0
    result.stderr.fnmatch_lines(["*--speceq-kernel-scale*positive number*"])
