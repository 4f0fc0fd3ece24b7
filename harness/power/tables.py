"""Markdown and JSON tables of a power result, and the files ``speceq power`` writes."""

from __future__ import annotations

import json
from pathlib import Path

from speceq.power.plot import power_curve_svg
from speceq.power.results import METHOD_LABELS, Detection, PowerResult, VariantResult
from speceq.store import write_json_atomic

MARKDOWN_FILE = "power.md"
JSON_FILE = "power.json"
SVG_FILE = "power-curve.svg"
#: Columns of the samples-to-detect table.
DETECT_METHODS = ("speceq", "speceq_greedy", "np", "vllm", "trtllm", "greedy")
#: Columns of the false-alarm table.
ALARM_METHODS = ("speceq", "speceq_greedy", "vllm", "trtllm", "greedy", "vllm_published", "trtllm_published")


def _n90(d: Detection | None) -> str:
    if d is None:
        return "—"
    if d.n90 is not None:
        return f"{d.n90:,}"
    return f"> {max(d.sizes):,}" if d.sizes else "—"


def _tv(v: VariantResult) -> str:
    cells = ["n/a" if t is None else f"{t:.3f}" for t in v.tv]
    return " / ".join(cells) + ("" if v.tv_source.startswith("exact") else " (emp.)")


def _count(d: Detection | None) -> str:
    if d is None or not d.rates:
        return "—"
    rate = d.rates[0]
    return f"{round(rate * d.reps)}/{d.reps}"


def _row_tv(r: dict | None) -> str:
    return "unknown" if r is None else f"{r['estimate']:.3f} [{r['upper']:.3f}] ({r['kind']}, {r['rows']:,} rows)"


def _budget(v: VariantResult) -> str:
    if v.budget_rate is None or v.budget_reps is None:
        return "—"
    return f"{round(v.budget_rate * v.budget_reps)}/{v.budget_reps}"


def markdown(result: PowerResult) -> str:
    """The result as markdown: settings, samples-to-detect, false alarms, power curve, goals, notes."""
    s = result.settings
    lines = [
        f"# speceq calibration ({s['mode']} mode)",
        "",
        f"Samples per engine for the method to reject at alpha = {s['alpha']:g} in at least {s['power']:.0%} of "
        f"the repetitions. speceq and greedy: {s['reps']} repetitions on engine samples, sizes {list(s['grid'])} "
        f"(greedy rows {list(s['greedy_grid'])}); first-token methods: {s['sim_reps']} repetitions simulated from "
        f"the mutant's exact first-token law (engine samples when it has none), sizes "
        f"{s['method_grid'][0]:,}..{s['method_grid'][-1]:,}; calibrated thresholds from {s['null_reps']} "
        f"simulations under H0. Cases: prompt {s['prompt_index']} of DEFAULT_PROMPTS, {s['max_new_tokens']} new "
        f"tokens, batch size {s['batch_size']}, seed {s['seed']}.",
        "",
        "## Samples to detect each mutant",
        "",
        "| mutant | bug | params | TV pos 0 / 1 | " + " | ".join(METHOD_LABELS[m] for m in DETECT_METHODS)
        + f" | shifted at n={s['budget']}, alpha={s['budget_alpha']:g} |",
        "|" + "---|" * (5 + len(DETECT_METHODS)),
    ]
    for v in result.mutants:
        cells = [_n90(v.detection(m)) for m in DETECT_METHODS]
        lines.append(f"| {v.name} | {v.bug} | {v.params} | {_tv(v)} | " + " | ".join(cells) + f" | {_budget(v)} |")
    lines += [
        "",
        "`> N`: not reached within the sizes tried (largest N). `—`: not applicable (no exact law for the "
        "Neyman-Pearson limit). `(emp.)`: TV measured on engine samples, bias-corrected.",
        "",
        f"## False alarms on lossless variants (n = {s['false_alarm_n']:,} per engine)",
        "",
        "| variant | why it only looks wrong | " + " | ".join(METHOD_LABELS[m] for m in ALARM_METHODS) + " |",
        "|" + "---|" * (2 + len(ALARM_METHODS)),
    ]
    for v in result.lossless:
        lines.append(f"| {v.name} | {v.bug} | " + " | ".join(_count(v.detection(m)) for m in ALARM_METHODS) + " |")
    lines += ["", "Counts are rejections / repetitions; greedy exact match: repetitions with a row unequal to the "
              f"baseline's; speceq greedy check: repetitions with a divergence that is not a near-tie (both at "
              f"{s['greedy_grid'][0]} row(s))."]
    ceilings = [v for v in result.mutants if v.row_tvs]
    if ceilings:
        lines += ["", "## One-row TVs and the one-sample ceiling", "",
                  "No level-alpha test detects from one row with probability above alpha + TV(one-row laws). "
                  "Greedy and support TVs are exact (estimated on mutant rows), the mixture's is an upper bound; "
                  "95% upper bounds in brackets.", "",
                  "| mutant | greedy rows | sampled rows | ceiling at one row |", "|---|---|---|---|"]
        for v in ceilings:
            by_kind = {r["kind"]: r for r in v.row_tvs}
            greedy = by_kind.get("greedy")
            sampled = next((r for k, r in by_kind.items() if k != "greedy"), None)
            ceiling = v.one_sample_ceiling(float(s["alpha"]))
            lines.append(f"| {v.name} | {_row_tv(greedy)} | {_row_tv(sampled)} | "
                         + ("unknown (sampled rows' TV not known)" if ceiling is None else f"{ceiling:.3f}") + " |")
    if result.curve:
        methods = [m for m in ("speceq", "np", "vllm", "trtllm") if any(m in c.rates for c in result.curve)]
        lines += ["", f"## Mixture power curve (n = {result.curve[0].n:,} per engine)", "",
                  "| mix | TV | " + " | ".join(METHOD_LABELS[m] for m in methods) + " |",
                  "|" + "---|" * (2 + len(methods))]
        for c in result.curve:
            lines.append(f"| {c.mix:g} | {c.tv:.4f} | " + " | ".join(
                f"{c.rates[m]:.2f}" if m in c.rates else "—" for m in methods) + " |")
        lines += ["", f"![power curve]({SVG_FILE})"]
    lines += ["", "## Goals", ""]
    for g in result.goals():
        mark = {True: "met", False: "NOT met", None: "not measured"}[g["met"]]
        lines.append(f"- **{mark}**: {g['goal']} — {g['detail']}")
    notes = [f"- {v.name}: {n}" for v in result.variants for n in v.notes]
    if notes:
        lines += ["", "## Notes", "", *notes]
    seconds = result.provenance.get("seconds")
    if seconds is not None:
        lines += ["", f"Run time: {seconds / 60:.1f} min."]
    return "\n".join(lines) + "\n"


def write_outputs(result: PowerResult, out_dir: str | Path) -> dict[str, Path]:
    """Write power.md, power.json and (with a curve) power-curve.svg into ``out_dir``; return their paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {"markdown": out / MARKDOWN_FILE, "json": out / JSON_FILE}
    paths["markdown"].write_text(markdown(result), encoding="utf-8")
    write_json_atomic(paths["json"], result.to_dict())
    if result.curve:
        paths["svg"] = out / SVG_FILE
        paths["svg"].write_text(power_curve_svg(result.curve), encoding="utf-8")
    return paths


def load_power_result(path: str | Path) -> PowerResult:
    """A PowerResult from a power.json."""
    return PowerResult.from_dict(json.loads(Path(path).read_text(encoding="utf-8")))
