"""``speceq power`` end to end at toy size: one bug, one lossless variant, files written."""

from __future__ import annotations

import json

from speceq.faces.cli import main


def test_calibrate_writes_tables_for_a_bug_and_a_lossless_variant(tmp_path, capsys) -> None:
    rc = main(["power", "--mutants", "top-k-draft-only,k1", "--reps", "2", "--grid", "60", "--sim-reps", "20",
               "--null-reps", "500", "--false-alarm-n", "60", "--false-alarm-reps", "2", "--budget", "60", "--budget-reps", "1",
               "--ceiling-rows", "200", "--out", str(tmp_path), "--quiet"])
    assert rc == 0
    out = capsys.readouterr().out
    assert "| top-k-draft-only |" in out and "| k1 |" in out
    doc = json.loads((tmp_path / "power.json").read_text())
    bug, lossless = doc["variants"]
    speceq = next(d for d in bug["detections"] if d["method"] == "speceq")
    assert speceq["rates"] == [1.0] and speceq["n90"] == 60  # top-k leak: every repetition rejects
    assert bug["budget_rate"] == 1.0 and bug["tv"][0] > 0.3
    # top-k on the draft only never changes a greedy row: neither greedy check sees it
    for method in ("greedy", "speceq_greedy"):
        assert next(d for d in bug["detections"] if d["method"] == method)["rates"] == [0.0, 0.0, 0.0]
    # one-row TVs: greedy rows never differ; about 70 % of sampled rows leave the top-10 support
    tvs = {r["kind"]: r for r in bug["row_tvs"]}
    assert tvs["greedy"]["estimate"] == 0.0 and tvs["greedy"]["rows"] == 32 and bug["row_tv_complete"]
    assert 0.6 < tvs["support"]["estimate"] < 0.8 and tvs["support"]["rows"] >= 200
    alarms = {d["method"]: d["rates"] for d in lossless["detections"]}
    assert alarms["speceq"] == [0.0] and alarms["speceq_greedy"] == [0.0, 0.0, 0.0] and alarms["greedy"] == [0.0, 0.0, 0.0]
    assert lossless["row_tvs"] == [] and not lossless["row_tv_complete"]
    assert not (tmp_path / "power-curve.svg").exists()  # no mixture, no curve


def test_unknown_mutant_is_a_usage_error(tmp_path, capsys) -> None:
    assert main(["power", "--mutants", "resample-from-targt", "--out", str(tmp_path)]) == 2
    assert "Did you mean 'mutant:resample-from-target'" in capsys.readouterr().err
