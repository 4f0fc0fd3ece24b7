"""Calibration reports: goals, markdown, JSON round trip and the hand-written SVG (no engines)."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import pytest

from speceq.errors import ConfigError
from speceq.power.plot import power_curve_svg
from speceq.power.results import CurvePoint, Detection, PowerResult, VariantResult
from speceq.power.settings import QUICK, settings_for
from speceq.power.tables import load_power_result, markdown, write_outputs


def det(method: str, sizes, rates, n90, reps=10, source="engine samples") -> Detection:
    return Detection(method=method, sizes=tuple(sizes), rates=tuple(rates), reps=reps, source=source, n90=n90)


def variant(name: str, *, lossless: bool, tv, dets, budget=None, row_tvs=(), complete=False) -> VariantResult:
    return VariantResult(name=name, bug=f"{name} bug", bug_class="lossless" if lossless else "rejection", lossless=lossless,
                         params="T=1 len=8", batch_size=128, companions=0, tv=tuple(tv), tv_source="exact (enumeration)",
                         accept_rate=0.8, detections=tuple(dets), budget_rate=budget, budget_reps=None if budget is None else 10,
                         seconds=1.0, row_tvs=tuple(row_tvs), row_tv_complete=complete)


def row_tv(kind: str, estimate: float, upper: float) -> dict:
    return {"kind": kind, "estimate": estimate, "upper": upper, "rows": 1000}


def result(*, speceq_n90: int = 250, alarm: float = 0.0) -> PowerResult:
    strong = variant("strong", lossless=False, tv=(0.08, 0.06), budget=1.0, dets=[
        det("speceq", [250], [1.0], speceq_n90), det("np", [100, 200], [0.5, 0.95], 200, 400, "exact law"),
        det("vllm", [1000, 10000], [0.2, 0.95], 10000, 400, "exact law"),
        det("trtllm", [1000, 5000], [0.5, 0.92], 5000, 400, "exact law"), det("greedy", [1, 4], [0.0, 0.0], None)])
    weak = variant("weak", lossless=False, tv=(0.01, 0.01), budget=0.2, dets=[
        det("speceq", [250, 1000], [0.2, 0.6], None), det("greedy", [1], [0.0], None)])
    clean = variant("clean", lossless=True, tv=(0.0, 0.0), dets=[det("speceq", [1000], [alarm], None),
                                                                 det("vllm_published", [1000], [1.0], 1000)])
    curve = (CurvePoint(mix=0.1, tv=0.016, n=1000, rates={"speceq": 0.6, "np": 0.9, "vllm": 0.05, "trtllm": 0.1},
                        reps={"speceq": 10, "np": 400, "vllm": 400, "trtllm": 400}),
             CurvePoint(mix=0.4, tv=0.066, n=1000, rates={"speceq": 1.0, "np": 1.0, "vllm": 0.3, "trtllm": 0.7},
                        reps={"speceq": 10, "np": 400, "vllm": 400, "trtllm": 400}))
    return PowerResult(settings=QUICK.to_dict(), variants=(strong, weak, clean), curve=curve,
                             provenance={"seconds": 60.0})


def test_goals_say_what_was_met() -> None:
    goals = result().goals()
    # the weak mutant (TV 0.01 < 0.02) is exempt from the budget goal but never reached by speceq within its grid
    assert [g["met"] for g in goals] == [True, False, True, True]
    assert "met: strong (250 vs trtllm 5000)" in goals[1]["detail"] and "NOT met: weak (> 1000 vs > 1)" in goals[1]["detail"]
    assert "strong 1.2" in goals[2]["detail"]
    ratios = result(speceq_n90=100).goals()
    assert "strong (100 vs trtllm 5000)" in ratios[1]["detail"] and "strong 0.5" in ratios[2]["detail"]


def tenth_goal(*dets, row_tvs=(), complete=False) -> dict:
    v = variant("m", lossless=False, tv=(0.1, 0.1), budget=1.0, dets=dets, row_tvs=row_tvs, complete=complete)
    return PowerResult(settings=QUICK.to_dict(), variants=(v,), curve=()).goals()[1]


def test_tenth_goal_takes_speceqs_best_check_and_says_when_no_method_can_meet_it() -> None:
    # speceq's greedy check counts: 1 greedy row vs trtllm's 20 samples -> met
    g = tenth_goal(det("speceq", [5, 10], [0.5, 1.0], 10), det("speceq_greedy", [1], [1.0], 1),
                   det("trtllm", [10, 20], [0.5, 0.95], 20), det("greedy", [1], [0.0], None))
    assert g["met"] is True and "met: m (1 vs trtllm 20)" in g["detail"]
    # the best engine method needs 5 samples: 1/10 is half a sample, which no method can use
    g = tenth_goal(det("speceq", [1, 3], [0.5, 1.0], 3), det("trtllm", [5], [1.0], 5))
    assert g["met"] is True and "unattainable by any method: m (3 vs trtllm 5: 1/10 of it is below one sample)" in g["detail"]
    # 1/10 of 10 allows one sample: unattainable only with a known ceiling below 90 %
    dets = (det("speceq", [1, 3], [0.7, 1.0], 3), det("trtllm", [10], [1.0], 10))
    g = tenth_goal(*dets)
    assert g["met"] is False and "NOT met: m (3 vs trtllm 10)" in g["detail"]
    tvs = (row_tv("greedy", 0.0, 0.004), row_tv("support", 0.70, 0.73))
    g = tenth_goal(*dets, row_tvs=tvs, complete=False)  # sampled rows' TV unknown: no ceiling
    assert g["met"] is False
    g = tenth_goal(*dets, row_tvs=tvs, complete=True)
    assert g["met"] is True and "ceiling alpha + one-row TV <= 0.74" in g["detail"]
    g = tenth_goal(*dets, row_tvs=(row_tv("greedy", 0.0, 0.004), row_tv("support", 0.95, 0.97)), complete=True)
    assert g["met"] is False  # a one-row test could reach 90 %: speceq's 3 samples miss the goal
    assert result(alarm=0.2).goals()[3]["met"] is False  # 2/10 at alpha = 0.01: binomial p ~ 0.004
    assert result(alarm=0.1).goals()[3]["met"] is True  # 1/10: p ~ 0.1, no evidence above alpha


def test_markdown_lists_every_variant_and_marks_unreached_sizes() -> None:
    text = markdown(result())
    assert "| strong | strong bug | T=1 len=8 | 0.080 / 0.060 | 250 | — | 200 | 10,000 | 5,000 | > 4 | 10/10 |" in text
    assert "| weak |" in text and "> 1,000" in text
    assert "| clean | clean bug | 0/10 | — |" in text
    assert "One-row TVs" not in text  # no mutant has one
    assert "![power curve](power-curve.svg)" in text and "**NOT met**" in text


def test_markdown_lists_one_row_tvs_and_the_ceiling() -> None:
    v = variant("m", lossless=False, tv=(0.1, 0.1), budget=1.0, dets=[det("speceq", [1], [1.0], 1)],
                row_tvs=(row_tv("greedy", 0.0, 0.004), row_tv("support", 0.70, 0.73)), complete=True)
    text = markdown(PowerResult(settings=QUICK.to_dict(), variants=(v,), curve=()))
    assert "| m | 0.000 [0.004] (greedy, 1,000 rows) | 0.700 [0.730] (support, 1,000 rows) | 0.740 |" in text


def test_json_round_trip_and_files(tmp_path) -> None:
    rep = result()
    paths = write_outputs(rep, tmp_path)
    assert sorted(p.name for p in paths.values()) == ["power-curve.svg", "power.json", "power.md"]
    loaded = load_power_result(paths["json"])
    assert json.loads(json.dumps(loaded.to_dict())) == json.loads(json.dumps(rep.to_dict()))
    assert loaded.variants == rep.variants and markdown(loaded) == markdown(rep)


def test_svg_is_well_formed_with_one_line_per_method() -> None:
    root = ET.fromstring(power_curve_svg(result().curve))
    lines = root.findall("{http://www.w3.org/2000/svg}polyline")
    assert len(lines) == 4
    assert all(len(line.get("points").split()) == 2 for line in lines)
    with pytest.raises(ValueError, match="empty"):
        power_curve_svg(())


def test_settings_are_validated_with_the_field_named() -> None:
    assert settings_for("full").reps > QUICK.reps
    with pytest.raises(ConfigError, match="grid"):
        settings_for("quick", grid=(1000, 100))
    with pytest.raises(ConfigError, match="mode"):
        settings_for("medium")
    with pytest.raises(ConfigError, match="null_reps"):
        settings_for("quick", null_reps=100)
