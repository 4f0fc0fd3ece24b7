"""speceq audit: the family's methods from the registry, the Markdown, and one real small audit."""

from __future__ import annotations

import json

import pytest
from audit_example import example_audit

from speceq.engines import registry
from speceq.faces.cli import main
from speceq.faces.cli_audit import audit_markdown, family_methods
from speceq.pipeline.audit import AUDIT_JSON, NOT_RUN, NOT_SUPPORTED, RAN, load_audit


def test_family_methods_come_from_the_registry(monkeypatch):
    methods = family_methods("transformers")
    assert {"hf-assisted", "hf-prompt-lookup", "hf-early-exit", "hf-universal"} <= set(methods)
    assert "hf-sample" not in methods and "reference" not in methods and "openai" not in methods
    monkeypatch.setitem(registry.BUILTIN_ENGINES, "hf-new-path", "speceq.engines.hf:HFAssistedEngine")
    assert family_methods("transformers")[-1] == "hf-new-path"  # a new registry name is audited, no other change


def test_markdown_has_every_cell_and_the_command_of_each_shifted_cell():
    md = audit_markdown(example_audit())
    assert md.startswith("### speceq audit transformers: SHIFTED\n")
    assert "| method | t1 · single | t1 · ragged-b4 | greedy · single | greedy · ragged-b4 |" in md
    row = next(line for line in md.splitlines() if line.startswith("| `hf-assisted`"))
    assert row.count("|") == 6
    assert "**equivalent** TV 0.021 ≤ 0.064, accept 0.61" in row and "not supported: transformers runs" in row
    assert "```sh\nspeceq run --candidate hf-universal --out audit/cells/hf-universal/t1-single\n```" in md
    assert "--candidate hf-assisted" not in md  # only shifted cells get their command
    assert "<script>" not in md and "\\|" in md  # user text is escaped: no markup, no broken table


def test_audit_of_the_byte_world_runs_cells_and_marks_faults(tmp_path, capsys):
    """Two real methods at a tiny budget (about 40 s on 2 CPU cores) in the world --models names, all in --out:
    ran, shared, not supported, not run."""
    out = tmp_path / "audit"
    code = main(["audit", "transformers", "--models", "byte", "--methods", "hf-prompt-lookup,hf-early-exit,hf-nope",
                 "--settings", "t1",
                 "--shapes", "single,ragged-b4", "--samples", "60", "--chunk-size", "60", "--out", str(out), "--json"])
    printed = json.loads(capsys.readouterr().out)
    result = load_audit(out / AUDIT_JSON)
    assert printed == result.to_dict()
    assert code == result.exit_code and code in (0, 3)  # a lossless path: never shifted
    single = result.cell("hf-prompt-lookup", "t1", "single")
    assert single.status == RAN and single.n == 60 and single.acceptance is not None
    assert single.command.startswith("speceq run --models byte --baseline hf-sample --candidate hf-prompt-lookup "
                                     f"--cases {out}/cases/t1-single.json --samples 60")
    # the second method shares the first one's baseline samples and, with the same oracle (no draft), its scores
    second = result.cell("hf-early-exit", "t1", "single")
    assert second.status == RAN and second.baseline_chunks_sampled == 0 and single.baseline_chunks_sampled == 1
    assert single.oracle_rows_scored > 60 and second.oracle_rows_scored <= 60 <= second.oracle_rows_reused
    batch = result.cell("hf-prompt-lookup", "t1", "ragged-b4")
    assert batch.status == NOT_SUPPORTED and "batch size 1 only" in batch.reason
    nope = result.cell("hf-nope", "t1", "single")
    assert nope.status == NOT_RUN and nope.reason.startswith("EngineNotFound: unknown engine 'hf-nope'")
    for name in ("audit.md", "audit.html", "cells/hf-prompt-lookup/t1-single/report.html"):
        assert (out / name).is_file(), name
    # the reproducing command reruns the cell alone on its stored samples, to the same verdict
    argv = single.command.split()[1:]
    assert main(argv) == single.verdict.exit_code
    rerun = json.loads((out / single.result).read_text())
    assert rerun["provenance"]["chunks"]["sampled"] == 0
    assert rerun["cases"][0]["verdict"] == single.verdict


def test_request_field_settings_run_in_the_familys_order_when_named(tmp_path, capsys):
    """min-p, penalty and bias settings reach the hf engines in the hf order (else they would be refused), and the
    cell's cases file keeps that order, so its command reproduces it."""
    out = tmp_path / "fields"
    code = main(["audit", "transformers", "--models", "byte", "--methods", "hf-prompt-lookup", "--settings",
                 "minp01,rep13,bias", "--shapes", "single", "--samples", "40", "--chunk-size", "40", "--out", str(out),
                 "--json"])
    result = load_audit(out / AUDIT_JSON)
    assert code in (0, 3)
    for setting in ("minp01", "rep13", "bias"):
        cell = result.cell("hf-prompt-lookup", setting, "single")
        assert cell.status == RAN and cell.n == 40, (setting, cell.reason)
        (case,) = json.loads((out / "cases" / f"{setting}-single.json").read_text())["cases"]
        assert case["processing"] == "hf", case


def test_bad_input_is_one_line_naming_the_option(tmp_path, capsys):
    assert main(["audit", "transformers", "--settings", "t1,hot", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "unknown setting 'hot'" in err and err.count("\n") == 1


@pytest.mark.parametrize("word", ["", ","])
def test_empty_method_list_is_a_usage_error(tmp_path, word, capsys):
    assert main(["audit", "transformers", "--methods", word, "--out", str(tmp_path)]) == 2
    assert "expected comma-separated names" in capsys.readouterr().err




def test_a_method_that_needs_another_world_is_not_run_and_the_audit_goes_on() -> None:
    """hf-mtp needs --models mtp: in the byte world its row is planned ``not run`` with that reason."""
    from speceq.faces.cli_audit import _world_method

    row = _world_method("byte", "hf-mtp")
    assert row.problem is not None and "--models mtp" in row.problem and row.options == {}
    assert _world_method("byte", "hf-assisted").problem is None


def test_without_models_each_method_runs_in_its_own_world_and_the_matrix_joins_them(tmp_path, capsys):
    """hf-mtp runs in the mtp world, hf-prompt-lookup in byte (about 25 s on 2 CPU cores); one joined matrix."""
    out = tmp_path / "audit"
    code = main(["audit", "transformers", "--methods", "hf-mtp,hf-prompt-lookup", "--settings", "t1", "--shapes",
                 "single", "--samples", "30", "--chunk-size", "30", "--out", str(out), "--json"])
    captured = capsys.readouterr()
    printed = json.loads(captured.out)
    result = load_audit(out / AUDIT_JSON)
    assert printed == result.to_dict() and code == result.exit_code
    assert result.methods == ("hf-mtp", "hf-prompt-lookup")
    assert result.method_worlds == {"hf-mtp": "mtp", "hf-prompt-lookup": "byte"} and result.world is None
    mtp, lookup = result.cell("hf-mtp", "t1", "single"), result.cell("hf-prompt-lookup", "t1", "single")
    assert mtp.status == RAN and lookup.status == RAN, (mtp.reason, lookup.reason)
    assert mtp.result == "worlds/mtp/cells/hf-mtp/t1-single/result.json"
    assert mtp.command.startswith(f"speceq run --models mtp --baseline hf-sample --candidate hf-mtp "
                                  f"--cases {out}/worlds/mtp/cases/t1-single.json")
    assert lookup.command.startswith("speceq run --models byte --baseline hf-sample --candidate hf-prompt-lookup ")
    for name in ("audit.md", "audit.html", "worlds/mtp/audit.json", "worlds/byte/audit.json",
                 "worlds/mtp/cells/hf-mtp/t1-single/report.html"):
        assert (out / name).is_file(), name
    md = (out / "audit.md").read_text()
    assert "worlds mtp, byte" in md and "| `hf-mtp` (mtp) |" in md
    assert "world mtp: hf-mtp" in captured.err
    # the mtp cell's command reruns it alone on its stored samples, to the same verdict
    assert main(mtp.command.split()[1:]) == mtp.verdict.exit_code
    assert json.loads((out / mtp.result).read_text())["provenance"]["chunks"]["sampled"] == 0
    # a second run resumes every cell of every world
    assert main(["audit", "transformers", "--methods", "hf-mtp,hf-prompt-lookup", "--settings", "t1", "--shapes",
                 "single", "--samples", "30", "--chunk-size", "30", "--out", str(out)]) == code
    assert all(c.resumed for c in load_audit(out / AUDIT_JSON).cells)


def test_an_explicit_world_keeps_the_methods_it_cannot_run_as_not_run_rows(tmp_path):
    from speceq.faces.cli import build_parser
    from speceq.faces.cli_audit import build_plans

    args = build_parser().parse_args(["audit", "transformers", "--models", "byte", "--out", str(tmp_path)])
    (plan,) = build_plans(args)
    assert plan.world == "byte" and plan.out_dir == tmp_path
    rows = {m.name: m for m in plan.methods}
    assert "--models mtp" in rows["hf-mtp"].problem and "--models gemma4" in rows["hf-multi-token"].problem
    assert rows["hf-assisted"].problem is None
    # without --models: one plan per world, every row runnable there
    plans = build_plans(build_parser().parse_args(["audit", "transformers", "--out", str(tmp_path)]))
    assert [p.world for p in plans] == ["byte", "mtp", "gemma4"]
    assert [m.name for p in plans[1:] for m in p.methods] == ["hf-mtp", "hf-multi-token"]
    assert all(m.problem is None for p in plans for m in p.methods)
    assert [p.out_dir for p in plans] == [tmp_path / "worlds" / w for w in ("byte", "mtp", "gemma4")]
