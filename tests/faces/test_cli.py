"""The speceq command line: subcommands, exit codes, one-line errors, Ctrl-C, plug-in commands."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]  # fake_engines.py (on sys.path through tests/conftest.py)

from speceq.faces import cli  # noqa: E402
from speceq.faces.cli import EXIT_INTERRUPTED, main  # noqa: E402
from speceq.store import SampleStore  # noqa: E402
from speceq.verdicts.result import CaseResult, RunResult  # noqa: E402

REPO = TESTS.parent
FAKE = "fake_engines:FakeEngine"


def cases_file(tmp_path: Path, **defaults) -> Path:
    p = tmp_path / "cases.json"
    p.write_text(json.dumps({"defaults": {"max_new_tokens": 3, **defaults}, "cases": [
        {"id": "one", "prompt_ids": [1, 2, 3]},
        {"id": "two", "prompt_ids": [4], "batch_size": 2, "companions": [[1, 1, 1, 1]]},
    ]}))
    return p


def fake_run(tmp_path: Path, *extra: str) -> list[str]:
    # --workers 1: the fake engine's *_on_call options count the calls of one engine object, and
    # its SIGINT goes to the process that samples; in one process they mean what the tests say
    return ["run", "--baseline", FAKE, "--candidate", FAKE, "--cases", str(cases_file(tmp_path)), "--no-oracle",
            "--out", str(tmp_path / "out"), "--no-progress", "--samples", "40", "--chunk-size", "20",
            "--workers", "1", *extra]


def test_engines_lists_the_builtin_engines(capsys):
    assert main(["engines"]) == 0
    out = capsys.readouterr().out
    for name in ("baseline", "reference", "hf-assisted", "mutant:<name>"):
        assert name in out


@pytest.mark.parametrize("argv", [[], ["bogus"], ["run", "--samples", "many"], ["run", "--fresh", "--resume"],
                                  ["report"], ["run", "--alpha"]])
def test_usage_errors_exit_2(argv, capsys):
    assert main(argv) == 2
    assert "usage: speceq" in capsys.readouterr().err


def test_help_exits_0(capsys):
    assert main(["run", "--help"]) == 0
    out = capsys.readouterr().out
    for option in ("--samples", "--seed", "--cases", "--baseline-option", "--no-oracle", "--alpha", "--tolerance",
                   "--out", "--fresh", "--threads", "--no-progress", "--report", "--json"):
        assert option in out


def test_unknown_engine_is_one_line_exit_2(tmp_path, capsys):
    argv = fake_run(tmp_path)
    argv[argv.index("--candidate") + 1] = "refrence"
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("speceq: error: --candidate: unknown engine 'refrence'. Did you mean 'reference'")
    assert err.count("\n") == 1 and "Traceback" not in err


def test_bad_engine_option_and_bad_run_setting_exit_2(tmp_path, capsys):
    assert main(fake_run(tmp_path, "--candidate-option", "colour=3")) == 2
    assert "colour" in capsys.readouterr().err
    assert main(fake_run(tmp_path, "--samples", "0")) == 2
    assert "run.samples: expected an integer >= 1, got 0" in capsys.readouterr().err


def test_bad_cases_file_exit_2_naming_file_case_and_field(tmp_path, capsys):
    p = tmp_path / "bad.json"
    p.write_text('{"cases": [{"id": "x", "prompt": "a", "temperature": "hot"}]}')
    argv = fake_run(tmp_path)
    argv[argv.index("--cases") + 1] = str(p)
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert f"{p}: case 0 (id 'x'), field 'temperature': expected a number" in err


def test_engine_failure_exit_2_one_line_and_debug_shows_it(tmp_path, capsys):
    argv = fake_run(tmp_path, "--candidate-option", "fail_on_call=2")
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("speceq: error: engine 'fake', case 'one': sample() failed on slice 1: RuntimeError")
    assert "Traceback" not in err
    assert main([*argv, "--debug"]) == 2  # the same code: --debug only adds the traceback
    err = capsys.readouterr().err
    assert err.startswith("Traceback") and "simulated engine crash" in err
    last = err.splitlines()[-1]  # the rerun resumes from the stored chunks, so another call fails
    assert last.startswith("speceq: error: engine 'fake', case ") and "simulated engine crash" in last


def test_debug_keeps_the_exit_code_of_a_malformed_cases_file(tmp_path):
    """Through the interpreter, as CI runs it: exit 2 (never 1, which means shifted) with or without --debug."""
    p = tmp_path / "bad.json"
    p.write_text('{"cases": [{"id": "x", "prompt": "a",')
    argv = fake_run(tmp_path)
    argv[argv.index("--cases") + 1] = str(p)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")])}
    for extra, traceback in (([], False), (["--debug"], True)):
        done = subprocess.run([sys.executable, "-m", "speceq", *argv, *extra], capture_output=True, text=True,
                              env=env, timeout=120, check=False)
        assert done.returncode == 2, done.stderr
        assert ("Traceback" in done.stderr) is traceback
        assert done.stderr.splitlines()[-1].startswith(f"speceq: error: {p}: malformed JSON")


@pytest.mark.parametrize("debug", [False, True])
def test_an_unexpected_crash_exits_2_not_1_with_or_without_debug(tmp_path, capsys, monkeypatch, debug):
    def crash(args):
        raise ZeroDivisionError("division by zero in a bug")

    help_text, add_arguments, _ = cli.COMMANDS["run"]
    monkeypatch.setitem(cli.COMMANDS, "run", (help_text, add_arguments, crash))
    assert main(fake_run(tmp_path, *(["--debug"] if debug else []))) == 2
    err = capsys.readouterr().err
    assert err.splitlines()[-1] == ("speceq: error: unexpected ZeroDivisionError: division by zero in a bug "
                                    "(a bug; --debug shows the traceback)")
    assert ("Traceback" in err) is debug


def test_changed_settings_on_resume_exit_2_with_a_hint(tmp_path, capsys):
    assert main(fake_run(tmp_path, "--candidate-option", "fail_on_call=3")) == 2
    capsys.readouterr()
    assert main(fake_run(tmp_path, "--seed", "5")) == 2
    err = capsys.readouterr().err
    assert "run_seed: stored 0, now 5" in err and "--fresh discards the stored samples" in err


def test_fresh_discards_a_symlinked_chunks_folder_and_never_reports_reuse(tmp_path, capsys):
    first = main(fake_run(tmp_path))
    assert first in (0, 3)  # a verdict, not an error
    out = tmp_path / "out"
    (out / "chunks").rename(tmp_path / "kept-elsewhere")
    (out / "chunks").symlink_to(tmp_path / "kept-elsewhere", target_is_directory=True)
    capsys.readouterr()
    assert main(fake_run(tmp_path, "--fresh")) == first
    err = capsys.readouterr().err
    assert "chunks: 0 reused from the store, 8 sampled" in err, err


def test_an_unreadable_chunk_is_reported_and_recorded_when_it_is_sampled_again(tmp_path, capsys):
    first = main(fake_run(tmp_path))
    assert first in (0, 3)
    broken = sorted((tmp_path / "out" / "chunks").rglob("slice-*.npz"))[0]
    broken.write_bytes(b"not a chunk")
    capsys.readouterr()
    assert main(fake_run(tmp_path)) == first
    err = capsys.readouterr().err
    assert f"chunk file {broken} is unreadable" in err and "drawn again" in err
    assert "chunks: 7 reused from the store, 1 sampled" in err
    chunks = json.loads((tmp_path / "out" / "provenance.json").read_text())["chunks"]
    assert [d["path"] for d in chunks["discarded_unreadable"]] == [str(broken)]


@pytest.mark.parametrize("debug", [False, True])
def test_credentials_in_an_openai_url_reach_neither_provenance_nor_the_error_line(tmp_path, capsys, debug):
    url = "http://alice:PASSWORD-1@127.0.0.1:9/v1?api_key=QUERY-KEY-2"  # nothing listens on port 9
    argv = ["run", "--candidate", "openai", "--candidate-option", f"base_url={url}", "--candidate-option",
            "max_retries=0", "--cases", str(cases_file(tmp_path)), "--no-oracle", "--out", str(tmp_path / "out"),
            "--no-progress", "--samples", "40", "--workers", "1", *(["--debug"] if debug else [])]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "speceq: error: engine 'openai'" in err and "alice" not in err
    written = "".join(p.read_text(errors="replace") for p in (tmp_path / "out").rglob("*") if p.is_file())
    assert "127.0.0.1:9" in written  # the provenance names the server...
    for secret in ("PASSWORD-1", "QUERY-KEY-2"):
        assert secret not in err and secret not in written  # ...but not its credentials


def test_ctrl_c_exit_130_says_how_to_resume(tmp_path, capsys):
    assert main(fake_run(tmp_path, "--candidate-option", "sigint_on_calls=[1]")) == EXIT_INTERRUPTED
    err = capsys.readouterr().err
    assert "interrupted: 3 of 8 chunks are stored" in err and "to resume" in err


def test_sigterm_exit_143_keeps_the_stored_chunks_and_a_rerun_resumes(tmp_path, capsys):
    assert main(fake_run(tmp_path, "--candidate-option", "sigterm_on_call=2")) == 128 + signal.SIGTERM
    err = capsys.readouterr().err
    stored = re.search(r"interrupted: (\d+) of 8 chunks are stored", err)
    assert "SIGTERM: stopping now" in err and stored and "to resume" in err
    n = int(stored.group(1))
    assert 0 < n < 8 and len(SampleStore(tmp_path / "out").keys()) == n  # the second call abandoned, the rest kept
    # (resuming them is tested on the collector: tests/pipeline/collect/test_collect_executors.py)


def test_report_subcommand_renders_a_saved_result(tmp_path, capsys):
    result = RunResult(verdict="inconclusive", alpha=1e-3, tolerance=0.05, seed=0, engines={"baseline": {}, "candidate": {}},
                       cases=(CaseResult(case_id="c", case={"id": "c", "params": {}}, verdict="inconclusive",
                                         reason="too few samples", tolerance=0.05, n_baseline=10, n_candidate=10),))
    src = tmp_path / "result.json"
    src.write_text(result.to_json())
    out = tmp_path / "report.html"
    assert main(["report", str(src), "-o", str(out)]) == 0
    assert out.is_file() and "<html" in out.read_text().lower()
    assert f"report: {out}" in capsys.readouterr().out


@pytest.mark.parametrize("content,message", [(None, "cannot read the result"), ("{", "not a speceq result.json"),
                                             ('{"verdict": 1}', "not a speceq result.json")])
def test_report_of_a_bad_file_exit_2(tmp_path, capsys, content, message):
    src = tmp_path / "result.json"
    if content is not None:
        src.write_text(content)
    assert main(["report", str(src), "-o", str(tmp_path / "r.html")]) == 2
    assert message in capsys.readouterr().err


def test_a_plugin_command_plugs_in_by_one_line(tmp_path, monkeypatch, capsys):
    module = tmp_path / "speceq_test_plugin_cmd.py"
    module.write_text(
        "HELP = 'say hello'\n"
        "def add_arguments(p):\n    p.add_argument('--name', default='world')\n"
        "def handle(args):\n    print('hello', args.name)\n    return 7\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(cli.PLUGIN_COMMANDS, "hello", "speceq_test_plugin_cmd")
    assert main(["hello", "--name", "there"]) == 7
    assert capsys.readouterr().out == "hello there\n"
    monkeypatch.setitem(cli.PLUGIN_COMMANDS, "absent", "speceq_no_such_module_xyz")
    assert main(["engines"]) == 0  # a registered module that does not exist yet is skipped


def test_module_entry_point_exit_code_and_no_traceback(tmp_path):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), str(TESTS)])}
    argv = fake_run(tmp_path, "--candidate-option", "bad_output_on_call=1")
    proc = subprocess.run([sys.executable, "-m", "speceq.faces.cli", *argv], capture_output=True, text=True, env=env,
                          timeout=120, cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith("speceq: error: engine 'fake', case 'one': token 13 (row 0, prompt index 0, "
                                  "position 0) is outside the candidate's vocabulary (8); this engine declares its "
                                  "vocabulary itself (it takes no vocab_size option)")
    assert "Traceback" not in proc.stderr


def one_case_run(tmp_path: Path, samples: int, *extra: str) -> list[str]:
    p = tmp_path / "one.json"
    p.write_text(json.dumps({"defaults": {"max_new_tokens": 2}, "cases": [{"id": "one", "prompt_ids": [1, 2, 3]}]}))
    return ["run", "--baseline", FAKE, "--candidate", FAKE, "--cases", str(p), "--no-oracle", "--out",
            str(tmp_path / "out"), "--no-progress", "--samples", str(samples), "--chunk-size", "10000", *extra]


@pytest.mark.parametrize("samples,extra,verdict,code", [
    (20000, (), "equivalent", 0),
    (4000, ("--candidate-option", "shift=0.2"), "shifted", 1),
    (300, (), "inconclusive", 3),
])
def test_exit_code_follows_the_run_verdict(tmp_path, capsys, samples, extra, verdict, code):
    assert main(one_case_run(tmp_path, samples, *extra, "--json")) == code
    result = RunResult.from_json(capsys.readouterr().out)
    assert result.verdict == verdict and result.cases[0].verdict == verdict
    assert result.cases[0].n_candidate == samples
    assert RunResult.from_json((tmp_path / "out" / "result.json").read_text()) == result


def test_table_and_report_of_a_run(tmp_path, capsys):
    report = tmp_path / "r.html"
    assert main(one_case_run(tmp_path, 300, "--report", str(report))) == 3
    out = capsys.readouterr().out
    assert "inconclusive" in out and "run verdict INCONCLUSIVE" in out and "T=1" in out
    assert f"report: {report}" in out and report.is_file()
    # the stored samples are reused: a rerun gives the same result without sampling again
    first = (tmp_path / "out" / "result.json").read_text()
    assert main(one_case_run(tmp_path, 300, "--json")) == 3
    again, before = RunResult.from_json(capsys.readouterr().out), RunResult.from_json(first)
    assert again.provenance["chunks"] == {"total": 2, "reused": 2, "sampled": 0, "discarded_unreadable": []}
    assert before.provenance["chunks"] == {"total": 2, "reused": 0, "sampled": 2, "discarded_unreadable": []}
    assert dataclasses.replace(again, provenance={}) == dataclasses.replace(before, provenance={})


@pytest.mark.slow
def test_bundled_engines_end_to_end(tmp_path, capsys):
    """speceq run on the bundled models (baseline vs reference, oracle on), then an identical rerun."""
    from speceq.store import load_samples_frame

    p = tmp_path / "cases.json"
    p.write_text(json.dumps({"cases": [
        {"id": "plain", "prompt": "def "},
        {"id": "ragged", "prompt": "class ", "temperature": 0.7, "batch_size": 4, "companions": ["import os\nimport "]},
    ]}))

    def argv(out: str, *extra: str) -> list[str]:
        return ["run", "--cases", str(p), "--samples", "40", "--chunk-size", "20", "--out", str(tmp_path / out),
                "--no-progress", "--json", *extra]

    assert main(argv("one")) == 3  # 40 samples cannot certify TV < 0.05, and correct engines are not shifted
    result = RunResult.from_json(capsys.readouterr().out)
    assert [c.verdict for c in result.cases] == ["inconclusive", "inconclusive"]
    assert all(c.acceptance_rate is not None and 0 < c.acceptance_rate <= 1 for c in result.cases)
    assert any(t.family == "oracle" for t in result.cases[0].tests)
    assert result.provenance["oracle"]["draft"] is not None  # the reference engine's draft, scored by the oracle
    assert result.provenance["engines"]["candidate"]["config"]["engine"] == "reference-speculative"
    assert main(argv("two", "--no-oracle")) == 3
    capsys.readouterr()
    assert load_samples_frame(tmp_path / "one").equals(load_samples_frame(tmp_path / "two"))


# ---- why: the table, the Markdown summary, the rerun command ------------------------------------------
def test_table_names_the_deciding_test_of_a_shifted_case(tmp_path, capsys):
    assert main(one_case_run(tmp_path, 4000, "--candidate-option", "shift=0.2")) == 1
    out = capsys.readouterr().out
    result = RunResult.from_json((tmp_path / "out" / "result.json").read_text())
    decider = min((t for t in result.cases[0].tests if t.primary), key=lambda t: (t.adjusted_pvalue, t.pvalue))
    assert f"{decider.name}: Holm p=" in out and "size: largest TV of" in out  # the held-out size, not the plug-in
    size = result.cases[0].size
    assert size is not None and 0.0 <= size.low <= size.estimate <= size.high
    assert "speceq: fake_engines:FakeEngine vs fake_engines:FakeEngine" in out  # the engines as typed
    assert "note: oracle tests not run (black-box mode)" in out  # a skipped primary family says so


def test_inconclusive_case_gives_the_samples_and_the_exact_rerun_command(tmp_path, capsys):
    import shlex

    argv = one_case_run(tmp_path, 300, "--fresh")
    assert main(argv) == 3
    out = capsys.readouterr().out
    case = RunResult.from_json((tmp_path / "out" / "result.json").read_text()).cases[0]
    need = case.required_n
    assert f"~{need:,} samples per engine would decide (now 300; its tests detect TV shifts >= " in out
    assert case.min_detectable_tv is not None and f"TV shifts >= {case.min_detectable_tv:.3f}" in out  # the table wraps
    line = next(x for x in out.splitlines() if x.startswith("to decide: "))
    assert "second look" in line and "up to k x alpha" in line and "--sequential" in line  # issue #22: say the cost
    command = shlex.split(line.removeprefix("to decide: ").split("   (")[0])
    rerun = command[1:]
    assert command[0] == "speceq" and "--fresh" not in rerun and rerun[-2:] == ["--samples", str(need)]
    assert rerun[:-2] == [a for a in argv if a != "--fresh" and a != "300" and a != "--samples"]
    assert cli.build_parser().parse_args(rerun).samples == need


def test_summary_md_is_a_markdown_verdict_table(tmp_path, capsys):
    md = tmp_path / "ci" / "summary.md"
    assert main(one_case_run(tmp_path, 4000, "--candidate-option", "shift=0.2", "--summary-md", str(md))) == 1
    assert f"summary: {md}" in capsys.readouterr().out
    text = md.read_text()
    lines = text.splitlines()
    assert lines[0] == "### speceq: SHIFTED"
    assert "| case | verdict | TV | TV bound | why |" in lines and "|---|---|---:|---:|---|" in lines
    row = next(x for x in lines if x.startswith("| `one` |"))
    assert "❌ shifted" in row and "Holm p=" in row and row.count("|") == 6
    assert "run verdict SHIFTED" in text


def test_summary_md_appends_to_the_github_step_summary(tmp_path, capsys, monkeypatch):
    step = tmp_path / "step_summary"
    step.write_text("## earlier step output\n")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(step))
    assert main(one_case_run(tmp_path, 300, "--summary-md", str(step))) == 3
    text = step.read_text()
    assert text.startswith("## earlier step output\n### speceq: INCONCLUSIVE")
    assert "To decide the inconclusive cases:" in text and "--samples" in text


def test_markdown_cells_escape_pipes_and_newlines():
    case = CaseResult(case_id="a|b", case={"id": "a|b", "params": {}}, verdict="shifted", reason="r",
                      tolerance=0.05, n_baseline=10, n_candidate=10, hard_failures=("token x|y\nat 3",))
    result = RunResult(verdict="shifted", alpha=1e-3, tolerance=0.05, seed=0, engines={"baseline": {}, "candidate": {}},
                       cases=(case,))
    row = next(x for x in cli.summary_markdown(result).splitlines() if x.startswith("| `a"))
    assert "a\\|b" in row and "hard failure: token x\\|y at 3" in row and row.count(" | ") == 4


HOSTILE_ID = "x`<img src=x onerror=alert(1)>`|y ``z"


def test_summary_md_keeps_hostile_case_ids_and_reasons_as_text():
    """A case id with backticks stays in its code span: no raw HTML reaches a PR comment (#47)."""
    import html

    from markdown_it import MarkdownIt  # rich's Markdown parser: CommonMark, plus GitHub's tables

    case = CaseResult(case_id=HOSTILE_ID, case={"id": HOSTILE_ID, "params": {}}, verdict="shifted", reason="r",
                      tolerance=0.05, n_baseline=10, n_candidate=10,
                      hard_failures=("<b>bold</b> *em* [link](http://evil.example) `code`",))
    result = RunResult(verdict="shifted", alpha=1e-3, tolerance=0.05, seed=0, cases=(case,),
                       engines={"baseline": {}, "candidate": {}},
                       provenance={"engines": {"candidate": {"spec": "my`<script>`.py:fn"}}})
    text = cli.summary_markdown(result)
    rendered = MarkdownIt("commonmark").enable("table").render(text)
    for tag in ("<img", "<b>", "<script", "<a ", "<em>"):
        assert tag not in rendered, (tag, text)
    cells = re.findall(r"<td[^>]*>(.*?)</td>", rendered)
    assert len(cells) == 5, rendered  # the row still has its five cells
    assert cells[0] == f"<code>{html.escape(HOSTILE_ID, quote=False)}</code>"
    assert html.unescape(re.sub(r"<[^>]+>", "", cells[4])).endswith(
        "<b>bold</b> *em* [link](http://evil.example) `code`")
    assert f"<code>{html.escape('my`<script>`.py:fn', quote=False)}</code>" in rendered


def test_summary_md_fences_a_rerun_command_that_holds_backticks():
    from speceq.faces.markdown import code_block

    assert code_block("speceq run --cases 'a```b.json'") == ["````", "speceq run --cases 'a```b.json'", "````"]


# ---- everything that can fail is checked before sampling ------------------------------------------
@pytest.mark.parametrize("flag", ["--report", "--summary-md"])
def test_unwritable_output_fails_before_sampling(tmp_path, capsys, flag):
    blocker = tmp_path / "a_file"
    blocker.write_text("x")
    assert main(fake_run(tmp_path, flag, str(blocker / "r.html"))) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"speceq: error: {flag}: '{blocker}' is not a folder") and err.count("\n") == 1
    assert not (tmp_path / "out").exists()  # nothing was sampled
    assert main(fake_run(tmp_path, flag, str(tmp_path))) == 2
    assert f"{flag}: '{tmp_path}' is a folder, expected a file path" in capsys.readouterr().err


def test_out_that_is_a_file_fails_before_sampling(tmp_path, capsys):
    argv = fake_run(tmp_path)
    blocker = tmp_path / "out"
    blocker.write_text("x")
    assert main(argv) == 2
    assert f"--out: '{blocker}' is a file, expected a folder" in capsys.readouterr().err


@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0, reason="root may write anywhere")
def test_read_only_folder_fails_before_sampling(tmp_path, capsys):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    try:
        assert main(fake_run(tmp_path, "--report", str(ro / "r.html"))) == 2
        assert f"--report: cannot write in '{ro}'" in capsys.readouterr().err
    finally:
        ro.chmod(0o755)


def test_bad_engine_spec_fails_before_any_engine_is_built(tmp_path, capsys, monkeypatch):
    import speceq.pipeline.runner

    built = []
    monkeypatch.setattr(speceq.pipeline.runner, "resolve_engines", lambda config: built.append(config) or {})
    bad = tmp_path / "my_engine.py"
    bad.write_text("def sampel(prompt_ids, n, params, seed):\n    return []\n")
    argv = fake_run(tmp_path)
    argv[argv.index("--candidate") + 1] = f"{bad}:sample"
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "--candidate: engine" in err and "has no attribute 'sample'. Did you mean 'sampel'" in err
    assert built == [] and not (tmp_path / "out").exists()


def test_a_failing_report_write_still_prints_the_verdict(tmp_path, capsys, monkeypatch):
    def refuse(result, path):
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(cli, "_write_report", refuse)
    report = tmp_path / "r.html"
    assert main(one_case_run(tmp_path, 300, "--report", str(report))) == 2
    captured = capsys.readouterr()
    assert "run verdict INCONCLUSIVE" in captured.out
    # the last stderr line is the one-line error (the run's "chunks: ..." line comes before it)
    assert captured.err.splitlines()[-1] == (f"speceq: error: --report: Permission denied: '{report}' "
                                             f"(the result is in {tmp_path / 'out'})")
    assert captured.err.endswith("\n") and "Traceback" not in captured.err


def test_os_errors_are_one_line_naming_the_path(tmp_path, capsys, monkeypatch):
    def handler(args):
        raise IsADirectoryError(21, "Is a directory", str(tmp_path))

    monkeypatch.setattr(cli, "handle_engines", handler)
    monkeypatch.setitem(cli.COMMANDS, "engines", (cli.COMMANDS["engines"][0], cli.add_engines_arguments, handler))
    assert main(["engines"]) == 2
    assert capsys.readouterr().err == f"speceq: error: Is a directory: '{tmp_path}'\n"


def test_documented_run_commands_parse():
    """Every `speceq run` command in docs/how-to/ci-summaries.md uses options the parser knows (the recipe cannot rot)."""
    import re
    import shlex

    text = (REPO / "docs" / "how-to" / "ci-summaries.md").read_text(encoding="utf-8")
    commands = [" ".join(part.strip().rstrip("\\") for part in m.split("\n"))
                for m in re.findall(r"^[ \t]*(speceq run(?:[^\n]*\\\n)*[^\n]*)", text, re.M)]
    assert len(commands) >= 3
    parser = cli.build_parser()
    for command in commands:
        args = parser.parse_args(shlex.split(command)[1:])
        assert args.command == "run", command
    assert any("--summary-md" in c and "$GITHUB_STEP_SUMMARY" in c for c in commands)


def test_documented_plain_function_runs(tmp_path, capsys):
    """The plain-function example of docs/how-to/ci-summaries.md works as an engine (here against itself)."""
    import re

    text = (REPO / "docs" / "how-to" / "ci-summaries.md").read_text(encoding="utf-8")
    source = next(b for b in re.findall(r"```python\n(.*?)```", text, re.S) if "def sample(prompt_ids" in b)
    (tmp_path / "my_engine.py").write_text(source)
    spec = f"{tmp_path / 'my_engine.py'}:sample"
    cases = tmp_path / "one.json"
    cases.write_text(json.dumps({"cases": [{"id": "one", "prompt_ids": [256, 100], "max_new_tokens": 3}]}))
    assert main(["run", "--baseline", spec, "--candidate", spec, "--cases", str(cases), "--samples", "30",
                 "--no-oracle", "--out", str(tmp_path / "out"), "--no-progress"]) in (0, 3)
    assert f"speceq: {spec} vs {spec}" in capsys.readouterr().out


@pytest.mark.parametrize(("argv", "expected"), [
    ([], 0.5),                                                        # the bundled byte models: measured margin
    (["--models", "bpe"], 12.0),
    (["--models", "smollm2"], 3.0),                                   # SmolLM2's bf16 spread: up to 1.43
    (["--models", "smollm2", "--candidate", "mutant:greedy-acceptance"], 3.0),
    (["--models", "smollm2", "--candidate-option", "draft=/my/draft"], float("inf")),
    (["--models", "smollm2", "--oracle-model", "/my/model"], float("inf")),
    (["--candidate", "mutant:top-p-draft-only"], 0.5),
    (["--baseline-option", "target=/my/model"], float("inf")),        # the user's own model
    (["--candidate", "my_engines:fast"], float("inf")),               # a user engine
    (["--candidate", "openai", "--candidate-option", "base_url=http://x"], float("inf")),
    (["--oracle-model", "/my/model"], float("inf")),
])
def test_support_margin_default_is_measured_only_for_bundled_models(argv: list[str], expected: float) -> None:
    from speceq.faces.cli import build_parser, default_support_margin

    args = build_parser().parse_args(["run", *argv])
    assert args.support_margin_nats is None
    assert default_support_margin(args) == expected
