"""Speed of ``speceq audit transformers``: the matrix in one command vs its cells run alone (issue 44, item 5).

``python benchmarks/bench_audit.py --samples N`` does, in one run and with one budget (samples,
chunk size, seed) for both sides:

1. **the audit**: ``speceq audit transformers`` at the settings t1, t07-p09, topk10 and greedy and
   the shape ``single`` (every method of the family, each in its own model world: one audit per
   world, joined), timed wall clock;
2. **each cell alone**: for every cell the audit ran, ``speceq run`` of that method on that cell's
   cases file (the one the audit wrote) with the same samples, chunk size and seed, in a fresh
   output folder, ``--workers 1`` as the audit's cells, timed wall clock (process start, model
   loads and report included: what a user pays to run the cell by itself);
3. **the shared work** of each setting (in each world: a world's audit has its own baseline and
   oracle): what every one of the setting's cells does when it runs alone and the audit does once. Baseline sampling: the sampling seconds ``speceq`` stores in each
   baseline chunk (``wall_time_s``, the engine's own clock) of the alone runs, averaged over the
   setting's cells (they sample the same rows). Oracle scores of the baseline rows: timed here, by
   scoring one alone run's stored baseline rows with a fresh target oracle (the part of scoring
   every method's oracle does; methods whose oracle adds their own draft re-score it with that
   draft, in the audit too); zero for greedy, whose rows the run does not score.

It prints the audit's wall time against the 30-minute target and
``audit / (sum of cells alone - sum over settings of (cells - 1) x shared)`` against 1.2, with
the per-cell times and the audit's own sharing counts (baseline chunks sampled, oracle rows
scored and reused). ``--json FILE`` writes every figure; ``--keep`` keeps the output folders.
Methods the audit could not run (``not run`` cells) have no alone run: both sides count the
cells that ran.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

#: The issue's targets: the whole matrix within 30 minutes, and at most 1.2x the cells alone less the shared work.
TARGET_WALL_S = 30 * 60.0
TARGET_RATIO = 1.2
SETTINGS = ("t1", "t07-p09", "topk10", "greedy")
SHAPE = "single"


@dataclass(frozen=True, slots=True)
class SpeedRatios:
    """The benchmark's two figures and what they are made of (seconds).

    audit_s: the audit's wall time. alone_s: the sum of the cells' alone wall times. shared_saved_s:
    the shared work the alone runs repeat, sum over settings of (cells - 1) x shared.
    fair_alone_s: alone_s - shared_saved_s. ratio: audit_s / fair_alone_s. wall_met / ratio_met:
    the targets.
    """

    audit_s: float
    alone_s: float
    shared_saved_s: float
    fair_alone_s: float
    ratio: float
    target_wall_s: float
    target_ratio: float
    wall_met: bool
    ratio_met: bool


def speed_ratios(audit_s: float, alone_s: Mapping[str, Sequence[float]], shared_s: Mapping[str, float], *,
                 target_wall_s: float = TARGET_WALL_S, target_ratio: float = TARGET_RATIO) -> SpeedRatios:
    """The ratios of the issue from the measured seconds.

    alone_s: per setting (or any group of cells sharing one baseline and oracle: a setting in one
    model world), the alone wall time of each of its cells; shared_s: per setting, the shared work
    one alone cell does (baseline sampling + oracle scores of the baseline rows). A setting's k
    cells repeat it k - 1 times more than the audit, which does it once. ValueError on a negative
    time, a setting without shared work, or no time left after the subtraction.
    """
    missing = sorted(set(alone_s) - set(shared_s))
    if missing:
        raise ValueError(f"no shared work measured for setting(s) {missing}")
    times = [audit_s, *shared_s.values(), *(t for ts in alone_s.values() for t in ts)]
    if any(t < 0 for t in times):
        raise ValueError("a negative time")
    total = sum(sum(ts) for ts in alone_s.values())
    saved = sum(max(len(ts) - 1, 0) * shared_s[s] for s, ts in alone_s.items())
    fair = total - saved
    if fair <= 0:
        raise ValueError(f"the shared work ({saved:.1f} s) is not less than the cells' alone time ({total:.1f} s)")
    ratio = audit_s / fair
    return SpeedRatios(audit_s=audit_s, alone_s=total, shared_saved_s=saved, fair_alone_s=fair, ratio=ratio,
                       target_wall_s=target_wall_s, target_ratio=target_ratio, wall_met=audit_s <= target_wall_s,
                       ratio_met=ratio <= target_ratio)


def timed(cmd: list[str], log: Path) -> tuple[float, int]:
    """Run ``cmd`` with its output in ``log``; (wall seconds, exit code)."""
    t0 = time.perf_counter()
    with log.open("w", encoding="utf-8") as fh:
        rc = subprocess.run(cmd, stdout=fh, stderr=subprocess.STDOUT, check=False).returncode
    return time.perf_counter() - t0, rc


def baseline_rows(out_dir: Path, case_id: str):  # noqa: ANN201 (a SampleBatch; speceq imported lazily)
    """The baseline rows a run stored for ``case_id`` (one batch) and the seconds its engine spent sampling them."""
    from speceq.pipeline.plan import concat_batches
    from speceq.store.chunks import SampleStore

    batches = [b for k, b in sorted(SampleStore(out_dir).items(), key=lambda kb: kb[0].slice_index)
               if k.role == "baseline" and k.case_id == case_id]
    if not batches:
        raise SystemExit(f"no baseline chunk of {case_id} under {out_dir}")
    return concat_batches(batches), sum(float(b.wall_time_s or 0.0) for b in batches)


def oracle_seconds(cases_file: Path, rows_dir: Path, world: str) -> float:
    """Seconds a fresh target oracle (``world``'s, as ``speceq run`` builds it) takes to score the
    baseline rows stored under ``rows_dir`` for the case of ``cases_file``; 0 for a greedy case."""
    from speceq.engines.registry import resolve_engine
    from speceq.inputs.cases import load_cases
    from speceq.models.worlds import world_engine_options
    from speceq.oracles.build import OracleSpec, make_oracle

    (case,) = load_cases(cases_file)
    if case.params.greedy:
        return 0.0
    batch, _ = baseline_rows(rows_dir, case.case_id)
    engine = resolve_engine("hf-sample", options=world_engine_options(world, "hf-sample", {}))
    oracle = make_oracle(OracleSpec(), {"baseline": engine, "candidate": engine})
    t0 = time.perf_counter()
    oracle.score(case.prompts, batch, case.params)
    return time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--samples", type=int, default=1000, help="samples per engine and cell, both sides")
    ap.add_argument("--chunk-size", type=int, default=250, help="samples per stored chunk, both sides")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--settings", default=",".join(SETTINGS), help="audit settings (comma-separated)")
    ap.add_argument("--out", default=None, help="a new work folder (default: a temporary one, removed unless --keep)")
    ap.add_argument("--keep", action="store_true", help="keep the audit's and the alone runs' folders")
    ap.add_argument("--json", default=None, metavar="FILE", help="write every figure to FILE")
    args = ap.parse_args(argv)

    work = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="speceq-bench-audit-"))
    if work.is_dir() and any(work.iterdir()):  # a rerun would resume the audit's cells: no time measured
        print(f"{work} is not empty: give a new --out (an audit there would resume, not run)", file=sys.stderr)
        return 2
    work.mkdir(parents=True, exist_ok=True)
    speceq = [sys.executable, "-m", "speceq"]
    budget = ["--samples", str(args.samples), "--chunk-size", str(args.chunk_size), "--seed", str(args.seed)]
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    load0 = os.getloadavg()[0]
    try:
        audit_dir = work / "audit"
        audit_cmd = [*speceq, "audit", "transformers", "--settings", args.settings, "--shapes", SHAPE, *budget,
                     "--out", str(audit_dir)]
        audit_s, audit_rc = timed(audit_cmd, work / "audit.log")
        if audit_rc == 2 or not (audit_dir / "audit.json").is_file():  # noqa: PLR2004 (usage error)
            print((work / "audit.log").read_text(encoding="utf-8")[-3000:], file=sys.stderr)
            return 2
        doc = json.loads((audit_dir / "audit.json").read_text(encoding="utf-8"))
        ran = [c for c in doc["cells"] if c["status"] == "ran"]
        print(f"audit: {audit_s:.1f} s wall, exit {audit_rc}, {len(ran)} of {len(doc['cells'])} cells ran", flush=True)

        alone: dict[str, list[float]] = {}
        cells = []
        for c in ran:
            case_id = f"{c['setting']}-{c['shape']}"
            world = doc.get("method_worlds", {}).get(c["method"]) or doc["world"]
            cases_dir = audit_dir / Path(c["result"]).parents[3] / "cases"  # <world folder>/cells/<m>/<case>/
            group = f"{c['setting']} ({world})"  # the cells that share a baseline and an oracle
            out = work / "alone" / c["method"] / case_id
            shutil.rmtree(out, ignore_errors=True)
            out.parent.mkdir(parents=True, exist_ok=True)
            cmd = [*speceq, "run", "--models", world, "--baseline", doc["baseline"], "--candidate",
                   c["method"], "--cases", str(cases_dir / f"{case_id}.json"), *budget, "--workers", "1",
                   "--no-progress", "--out", str(out)]
            seconds, rc = timed(cmd, out.parent / f"{case_id}.log")
            if rc == 2:  # noqa: PLR2004
                print((out.parent / f"{case_id}.log").read_text(encoding="utf-8")[-3000:], file=sys.stderr)
                return 2
            _, base_sampling = baseline_rows(out, case_id)
            alone.setdefault(group, []).append(seconds)
            cells.append({"method": c["method"], "setting": c["setting"], "world": world, "group": group,
                          "cases": str(cases_dir / f"{case_id}.json"), "audit_s": c["seconds"], "alone_s": seconds,
                          "alone_exit": rc, "baseline_sampling_s": base_sampling, "verdict": c["verdict"],
                          "baseline_chunks_sampled": c["baseline_chunks_sampled"],
                          "oracle_rows_scored": c["oracle_rows_scored"], "oracle_rows_reused": c["oracle_rows_reused"]})
            print(f"  {c['method']:<18} {c['setting']:<8} audit {c['seconds']:6.1f} s  alone {seconds:6.1f} s "
                  f"(baseline sampling {base_sampling:5.1f} s)  {c['verdict']}", flush=True)

        shared: dict[str, float] = {}
        shared_parts: dict[str, dict[str, float]] = {}
        for group in alone:  # a setting in one world
            own = [x for x in cells if x["group"] == group]
            sampling = sum(x["baseline_sampling_s"] for x in own) / len(own)
            first = work / "alone" / own[0]["method"] / f"{own[0]['setting']}-{SHAPE}"
            scoring = oracle_seconds(Path(own[0]["cases"]), first, own[0]["world"])
            shared[group] = sampling + scoring
            shared_parts[group] = {"baseline_sampling_s": sampling, "oracle_scoring_s": scoring}
            print(f"  shared per cell, {group}: baseline sampling {sampling:.1f} s + oracle scores of its rows "
                  f"{scoring:.1f} s = {shared[group]:.1f} s ({len(own)} cells)", flush=True)

        r = speed_ratios(audit_s, alone, shared)
        print(f"bench_audit ({started}, 2 cores shared with other jobs; load average at start {load0:.2f}): "
              f"{args.samples} samples per engine and cell, chunk {args.chunk_size}, seed {args.seed}, settings "
              f"{args.settings}, shape {SHAPE}")
        print(f"  audit wall: {r.audit_s / 60:.1f} min (target <= {r.target_wall_s / 60:.0f} min: "
              f"{'met' if r.wall_met else 'NOT met'})")
        print(f"  cells alone: {r.alone_s:.1f} s; shared work they repeat: {r.shared_saved_s:.1f} s; "
              f"alone less shared: {r.fair_alone_s:.1f} s")
        print(f"  audit / (alone - shared) = {r.ratio:.2f} (target <= {r.target_ratio}: "
              f"{'met' if r.ratio_met else 'NOT met'})")
        if args.json:
            Path(args.json).write_text(json.dumps(
                {"started": started, "load_average_at_start": load0, "samples": args.samples,
                 "chunk_size": args.chunk_size, "seed": args.seed, "settings": args.settings.split(","),
                 "shape": SHAPE, "audit_command": audit_cmd[2:], "audit_exit": audit_rc,
                 "audit_cells": len(doc["cells"]),
                 "not_run": [{k: c[k] for k in ("method", "setting", "reason")} for c in doc["cells"]
                             if c["status"] != "ran"],
                 "cells": cells, "shared": shared_parts, "ratios": asdict(r)}, indent=2) + "\n", encoding="utf-8")
        return 0
    finally:
        if not args.keep and not args.out:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
