"""Options of the plugin: one group, --speceq- prefix, ini mirrors, precedence, validation."""

from __future__ import annotations

import argparse
import re

import pytest
from plugin_support import INI, TOY

from speceq.faces.plugin import SESSION_KEY
from speceq.faces.pytest_support.options import OPTION_BY_NAME, OPTIONS, BuiltinDefault, Settings, default_samples


def settings_of(project: pytest.Pytester, *args: str) -> Settings:
    config = project.parseconfigure(*args)
    return config.stash[SESSION_KEY].settings


CHECK_IMPORTS = """
import sys
import pytest

# run a plain test with the plugin loaded (entry point or conftest), other plugins off (they import their own deps)
pytest.main(["-q", "-p", "no:hypothesispytest", "-p", "no:benchmark",
             "-p", "no:html", "-p", "no:metadata", "-p", "no:anyio", "-p", "no:xdist"])
print("HEAVY", sorted(m for m in ("torch", "numpy", "scipy", "speceq.pipeline.runner") if m in sys.modules))
"""


def test_default_samples_are_the_run_default_and_loading_the_plugin_stays_cheap(project: pytest.Pytester) -> None:
    from speceq.core.defaults import DEFAULT_SAMPLES

    assert default_samples() == DEFAULT_SAMPLES
    project.makepyfile(check_imports=CHECK_IMPORTS, test_plain="def test_plain():\n    pass\n")
    result = project.runpython(project.path / "check_imports.py")
    result.stdout.fnmatch_lines(["*1 passed*", "HEAVY []"])


def test_help_lists_every_option_in_one_group_with_defaults(project: pytest.Pytester) -> None:
    result = project.runpytest("--help")
    out = result.stdout.str()
    group = out[out.index("speceq: distribution-equivalence checks"):]
    group = group[: group.index("\n\n")]
    for o in OPTIONS:
        assert o.flag in group, o.flag
        assert f"  {o.ini} (" in out, o.ini
    assert f"Default: {default_samples()}" in group and "Default: 0.001" in group and "Default: 'skip'" in group


def test_builtin_defaults(project: pytest.Pytester) -> None:
    project.makeini(INI.replace("speceq_workers = 1\n", ""))  # the inner projects' ini pins the workers
    s = settings_of(project)
    assert (s.baseline, s.candidate, s.oracle, s.budget(), s.alpha, s.tolerance, s.seed, s.inconclusive) == (
        "baseline", "reference", "on", default_samples(), 1e-3, 0.05, 0, "skip")
    assert s.store is None and s.report is None and s.threads is None and s.numerics_tolerance == 0.01
    assert s.workers is None  # auto, as `speceq run`
    assert set(s.sources.values()) == {"default"}


def test_ini_mirrors_every_option_and_command_line_wins(project: pytest.Pytester) -> None:
    project.makeini("""
        [pytest]
        speceq_baseline = toy_engines:baseline_engine
        speceq_candidate = toy_engines:correct_engine
        speceq_candidate_options =
            name=from-ini
        speceq_oracle = off
        speceq_samples = 123
        speceq_alpha = 0.01
        speceq_tolerance = 0.2
        speceq_seed = 9
        speceq_threads = 2
        speceq_store = stored
        speceq_report = out/r.html
        speceq_inconclusive = pass
        speceq_sequential = off
        speceq_near_tie_nats = 0.01
        speceq_support_margin_nats = 2.5
        speceq_numerics_control = auto
        speceq_control_ratio = 3
        speceq_kernel_scale = 0.5
        speceq_kernel_device = cpu
        speceq_numerics_tolerance = 0.03
        speceq_workers = 3
    """)
    s = settings_of(project)
    assert (s.baseline, s.candidate, s.oracle, s.samples, s.alpha, s.tolerance, s.seed, s.threads, s.inconclusive) == (
        "toy_engines:baseline_engine", "toy_engines:correct_engine", "off", 123, 0.01, 0.2, 9, 2, "pass")
    assert s.candidate_options == {"name": "from-ini"} and s.near_tie() == 0.01 and s.support_margin() == 2.5
    assert s.store == project.path / "stored" and s.report == project.path / "out" / "r.html"  # ini-relative
    assert (s.kernel_scale, s.kernel_device, s.numerics_tolerance, s.numerics_control) == (0.5, "cpu", 0.03, "auto")
    assert s.workers == 3 and s.control_ratio == 3.0
    assert set(s.sources.values()) == {"ini"}, {k: v for k, v in s.sources.items() if v != "ini"}

    s = settings_of(project, "--speceq-samples=7", "--speceq-alpha=0.05", "--speceq-inconclusive=fail",
                    "--speceq-candidate-option", "k=3")
    assert (s.samples, s.alpha, s.inconclusive) == (7, 0.05, "fail")
    assert s.sources["samples"] == "command line" and s.sources["tolerance"] == "ini"
    assert s.candidate_options == {"name": "from-ini", "k": 3}  # same engine: command-line options merge over ini's


def test_ini_engine_options_do_not_follow_another_engine(project: pytest.Pytester) -> None:
    project.makeini("""
        [pytest]
        speceq_candidate = toy_engines:correct_engine
        speceq_candidate_options = name=from-ini
    """)
    s = settings_of(project, "--speceq-candidate=reference", "--speceq-candidate-option=k=4")
    assert s.candidate == "reference" and s.candidate_options == {"k": 4}
    assert s.engine_options("candidate", "reference") == {"k": 4}
    assert s.engine_options("candidate", "something-else") == {}


def test_engine_options_parse_json_values(project: pytest.Pytester) -> None:
    s = settings_of(project, "--speceq-baseline-option=threads=1", "--speceq-baseline-option", "dtype=float32",
                    "--speceq-candidate-option=k=[1, 2]", "--speceq-candidate-option=trace=true")
    assert s.baseline_options == {"threads": 1, "dtype": "float32"}
    assert s.candidate_options == {"k": [1, 2], "trace": True}


@pytest.mark.parametrize(("name", "text", "message"), [
    ("samples", "0", "expected an integer >= 1, got 0"),
    ("samples", "many", "expected an integer >= 1, got 'many'"),
    ("alpha", "1", "expected a level in (0, 1), got 1.0"),
    ("tolerance", "0", "expected a total-variation distance in (0, 1], got 0.0"),
    ("seed", "-1", "expected an integer >= 0, got -1"),
    ("inconclusive", "maybe", "expected one of fail, skip, pass, got 'maybe'"),
    ("candidate", " ", "expected a non-empty value"),
])
def test_invalid_values_are_refused_with_what_was_expected(name: str, text: str, message: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match=re.escape(message)):
        OPTION_BY_NAME[name].convert(text)


@pytest.mark.parametrize(("args", "message"), [
    (["--speceq-samples=0"], "argument --speceq-samples: expected an integer >= 1, got 0"),
    (["--speceq-oracle=no/such/folder"], "--speceq-oracle: 'no/such/folder' is neither on, off nor a model folder"),
    (["--speceq-candidate-option=novalue"], "--speceq-candidate-option: engine option 'novalue': expected key=value"),
    (["--speceq-report=out.json"], "give an HTML path"),
])
def test_invalid_command_line_values_are_usage_errors(project: pytest.Pytester, args: list[str], message: str) -> None:
    result = project.runpytest(*args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert message in result.stderr.str()


def test_invalid_ini_values_name_the_ini_option(project: pytest.Pytester) -> None:
    project.makeini("""
        [pytest]
        speceq_alpha = 2
    """)
    result = project.runpytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*ini option speceq_alpha = '2': expected a level in (0, 1)*"])


def test_oracle_accepts_a_model_folder_and_on_off_words(project: pytest.Pytester) -> None:
    from speceq.models import TARGET_DIR

    assert settings_of(project, f"--speceq-oracle={TARGET_DIR}").oracle == str(TARGET_DIR)
    assert settings_of(project, "--speceq-oracle=false").oracle == "off"
    assert settings_of(project, "--speceq-oracle=ON").oracle == "on"


def test_builtin_default_shows_its_value_and_is_not_converted() -> None:
    d = BuiltinDefault(2000)
    assert repr(d) == "2000" and "%(default)r" % {"default": d} == "2000"  # noqa: UP031 (argparse formats help this way)
    parser = argparse.ArgumentParser()
    parser.add_argument("--x", type=int, default=d)
    assert parser.parse_args([]).x is d and parser.parse_args(["--x", "5"]).x == 5


def test_report_header_only_when_configured(project: pytest.Pytester) -> None:
    project.makepyfile("def test_nothing():\n    pass\n")
    project.makeini(INI.replace("speceq_workers = 1\n", ""))  # nothing configured
    assert "speceq:" not in project.runpytest().stdout.str()
    header = "speceq: baseline=toy_engines:baseline_engine candidate=*oracle=off*workers=auto*"
    project.runpytest(*TOY).stdout.fnmatch_lines([header])
    project.runpytest(*TOY, "--speceq-workers=2").stdout.fnmatch_lines(["speceq: *workers=2*"])

