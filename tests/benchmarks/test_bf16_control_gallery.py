"""benchmarks/bf16_control_gallery.py: which mutants it runs, the chunks it shares between candidates, the evidence
it reads from a reason (no engine is sampled here)."""

from __future__ import annotations

import json
from pathlib import Path

from benchmark_scripts import load_script

from speceq.engines.mutants import MUTANTS
from speceq.verdicts.result import RunResult
from speceq.verdicts.verdict import Verdict


def _gallery():  # noqa: ANN202
    return load_script("bf16_control_gallery")


def test_it_runs_every_statistical_mutant_and_the_others_only_when_asked() -> None:
    g = _gallery()
    core = g.statistical_mutants(request_fields=False, lossless=False)
    everything = g.statistical_mutants(request_fields=True, lossless=True)
    assert "biased-ratio" in core and "shared-uniforms" in core
    assert not any(MUTANTS[n].lossless or MUTANTS[n].bug_class == "request-fields" for n in core)
    # the contract and grammar mutants need no statistics; every other mutant is run when asked
    left_out = set(MUTANTS) - set(everything)
    assert left_out == {"stop-at-block-end", "grammar-not-advanced-over-drafts"}


def test_the_baseline_and_control_chunks_are_linked_not_the_candidates(tmp_path: Path) -> None:
    g = _gallery()
    pool, out = tmp_path / "reference", tmp_path / "mutant"
    for role in ("baseline", "control", "candidate"):
        f = pool / "chunks" / role / "case-1" / "slice-00000-n500.npz"
        f.parent.mkdir(parents=True)
        f.write_bytes(role.encode())
    assert g.link_shared(pool, out) == 2
    assert (out / "chunks" / "control" / "case-1" / "slice-00000-n500.npz").read_bytes() == b"control"
    assert (out / "chunks" / "baseline" / "case-1" / "slice-00000-n500.npz").stat().st_nlink == 2
    assert not (out / "chunks" / "candidate").exists()
    assert g.link_shared(pool, out) == 0  # what is there already is kept


def test_the_deciding_evidence_read_from_a_reason() -> None:
    g = _gallery()
    prefix = ("speculation shift against the numerics control (the baseline engine at the candidate's numerics, "
              "bfloat16 on cpu; it stands in the baseline's place in what follows): ")
    assert g._decider(prefix + "chi2 prompt 0 position 0 rejects, Holm-adjusted p=4.6e-10 <= alpha=0.001: ...") == (
        "chi2 position 0", 4.6e-10)
    assert g._decider(prefix + "hard failure: 1156 candidate row(s) hold a token outside ...") == ("hard failure", "1156")
    assert g._decider("rows are not independent: row independence rejects, ...")[0].startswith("rows are not")


def test_a_request_field_mutant_gets_its_gallery_case(tmp_path: Path) -> None:
    g = _gallery()
    path = g.own_case_file("min-p-untempered", tmp_path)
    (case,) = json.loads(path.read_text())["cases"]
    assert case["min_p"] == MUTANTS["min-p-untempered"].params["min_p"] and case["batch_size"] == 64
    assert case["max_new_tokens"] == 6 and case["prompt_ids"][-4:] == list(b"def ")


def test_each_seed_gets_its_folder_and_each_ratio_its_run_larger_first(tmp_path: Path, monkeypatch) -> None:
    """main with two seeds and two ratios runs four commands, the ratio flag passed as given, the larger first,
    each seed in DIR/seed-S; the commands are recorded, not run."""
    g = _gallery()
    recorded = []

    def record(candidate, out, samples, seed, workers, cases, options, control_ratio=None):  # noqa: ANN001, ANN202
        recorded.append((candidate, out.relative_to(tmp_path).as_posix(), seed, control_ratio))
        return RunResult(verdict=Verdict.EQUIVALENT, alpha=1e-3, tolerance=0.15, seed=seed, engines={}, cases=(),
                         provenance={"settings": {"control_ratio": control_ratio}}), 1.0

    monkeypatch.setattr(g, "run_one", record)
    g.main(["--mutants", "biased-ratio", "--no-reference", "--seed", "3", "4", "--control-ratio", "2", "1",
            "--out", str(tmp_path)])
    assert recorded == [("mutant:biased-ratio", "seed-3/biased-ratio", 3, 2.0),
                        ("mutant:biased-ratio", "seed-3/biased-ratio", 3, 1.0),
                        ("mutant:biased-ratio", "seed-4/biased-ratio", 4, 2.0),
                        ("mutant:biased-ratio", "seed-4/biased-ratio", 4, 1.0)]
    rows = json.loads((tmp_path / "summary.json").read_text())
    assert [(r["seed"], r["control_ratio"]) for r in rows] == [(3, 2.0), (3, 1.0), (4, 2.0), (4, 1.0)]
