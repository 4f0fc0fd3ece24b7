"""``speceq calibrate`` end to end at toy size: one bug, one lossless variant, files written."""

from __future__ import annotations

import json

from harness.cli import main


def test_calibrate_writes_tables_for_a_bug_and_a_lossless_variant(tmp_path, capsys) -> None:
    rc = main(["calibrate", "--mutants", "top-k-draft-only,k1", "--reps", "2", "--grid", "60", "--sim-reps", "20",
               "--null-reps", "500", "--false-alarm-n", "60", "--false-alarm-reps", "2", "--budget", "60", "--budget-reps", "1",
               "--out", str(tmp_path), "--quiet"])
    assert rc == 0
    out = capsys.readouterr().out
    assert "| top-k-draft-only |" in out and "| k1 |" in out
    doc = json.loads((tmp_path / "power.json").read_text())
    bug, lossless = doc["variants"]
    speceq = next(d for d in bug["detections"] if d["method"] == "speceq")
    assert speceq["rates"] == [1.0] and speceq["n90"] == 60  # top-k leak: every repetition rejects
    assert bug["budget_rate"] == 1.0 and bug["tv"][0] > 0.3
    alarms = next(d for d in lossless["detections"] if d["method"] == "speceq")
    assert alarms["rates"] == [0.0]
    assert not (tmp_path / "power-curve.svg").exists()  # no mixture, no curve


def test_unknown_mutant_is_a_usage_error(tmp_path, capsys) -> None:
    assert main(["calibrate", "--mutants", "resample-from-targt", "--out", str(tmp_path)]) == 2
    assert "Did you mean 'mutant:resample-from-target'" in capsys.readouterr().err
