"""The mutant gallery in bf16 against a float32 baseline, with the numerics control: still `shifted`?

For every statistical mutant of the gallery (``speceq.engines.mutants.MUTANTS``: not lossless, not
caught by the engine contract or the grammar check, which need no statistics) and for the correct
``reference`` engine, runs the command a user runs::

    speceq run --candidate C --candidate-option dtype=bfloat16 --numerics-control --seed S --samples N

on the default cases (float32 baseline, the control: the baseline engine in bf16, float32 oracle),
each candidate in its own ``--out`` folder. The baseline's and the control's chunks do not depend
on the candidate, so they are sampled once (by the ``reference`` run, which goes first) and
hard-linked into every mutant's folder: every candidate faces the same baseline and control rows,
and a mutant costs its own sampling and the analysis only. A larger ``--samples`` resumes each
folder (the stored chunks are reused, the reference first again).

The request-field mutants act only on cases that use their field, which the default cases do not
(``--request-fields`` runs each on its gallery case instead: the first default prompt, the
mutant's ``params``, 6 tokens, batch 64, with the mutant's engine options; each such case has its
own baseline and control rows). ``--lossless`` adds the lossless mutants (must not be shifted).

Prints one Markdown row per candidate and budget: the run verdict, how many cases are shifted,
the deciding evidence (each shifted case's deciding test and Holm-adjusted p, or the hard
failure; the run-level pooled rejection; for a run that is not shifted, the smallest Holm-adjusted
p of the cases and of the pooled tests), the numerics drift finding and the wall time; writes
``summary.json`` into ``--out``.

Usage: python benchmarks/bf16_control_gallery.py [--samples 3000] [--out DIR] [--mutants a,b]
       [--seed 0 [1 ...]] [--control-ratio 2 [1 ...]] [--workers 1] [--request-fields] [--lossless]
       [--no-reference]
       python benchmarks/bf16_control_gallery.py --render DIR/*/result.json   (the rows of saved results)
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from speceq.engines.mutants import MUTANTS
from speceq.models import ByteTokenizer
from speceq.models.prompts import DEFAULT_PROMPTS
from speceq.verdicts.result import RunResult

#: The roles whose chunks do not depend on the candidate (shared between the candidates of one cases file).
SHARED_ROLES = ("baseline", "control")
REFERENCE = "reference"
#: The run-level test that decides the subtlest mutant (biased-ratio): always printed.
POOLED_RATIO = "pooled draft ratio comparison"
#: How the reason of a case shifted against the control begins (speceq.verdicts.numerics_drift.against_control).
CONTROL_PREFIX = "speculation shift against the numerics control"
#: Tokens and batch of a request-field mutant's own case (as in docs/measurements/power.md).
FIELD_TOKENS, FIELD_BATCH = 6, 64


def statistical_mutants(*, request_fields: bool, lossless: bool) -> list[str]:
    """The gallery names this benchmark runs: every mutant a statistical test must catch (no contract or
    grammar mutant); the request-field ones only when asked, the lossless ones only when asked."""
    out = []
    for name, spec in MUTANTS.items():
        if spec.contract or "structured_outputs" in spec.params:
            continue  # caught by the engine contract / the grammar check: no statistics
        if spec.lossless:
            if lossless:
                out.append(name)
            continue
        if spec.bug_class == "request-fields" and not request_fields:
            continue
        out.append(name)
    return out


def own_case_file(name: str, folder: Path) -> Path:
    """A cases file holding the gallery case of a request-field mutant (its ``params``)."""
    spec = MUTANTS[name]
    prompt = ByteTokenizer().encode(DEFAULT_PROMPTS[0])
    case = {"id": f"{name}-case", "prompt_ids": list(prompt), "max_new_tokens": FIELD_TOKENS,
            "batch_size": FIELD_BATCH, **{k: v for k, v in spec.params.items()}}
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}-case.json"
    path.write_text(json.dumps({"cases": [case]}, default=list))
    return path


def link_shared(pool: Path, out: Path) -> int:
    """Hard-link the pool's baseline and control chunk files that ``out`` lacks; how many were linked."""
    linked = 0
    for role in SHARED_ROLES:
        src_root = pool / "chunks" / role
        if not src_root.is_dir():
            continue
        for src in src_root.rglob("*.npz"):
            dst = out / "chunks" / role / src.relative_to(src_root)
            if dst.exists():
                continue
            dst.parent.mkdir(parents=True, exist_ok=True)
            os.link(src, dst)
            linked += 1
    return linked


def run_one(candidate: str, out: Path, samples: int, seed: int, workers: str, cases: Path | None,
            options: dict[str, Any], control_ratio: float | None = None) -> tuple[RunResult, float]:
    """``speceq run`` of ``candidate`` (bf16, with the control) into ``out``; its result and wall seconds.
    control_ratio: ``--control-ratio`` (None: the default)."""
    cmd = [sys.executable, "-m", "speceq", "run", "--candidate", candidate, "--candidate-option", "dtype=bfloat16",
           "--numerics-control", "--seed", str(seed), "--samples", str(samples), "--workers", workers,
           "--out", str(out), "--no-progress", "--json"]
    if control_ratio is not None:
        cmd += ["--control-ratio", f"{control_ratio:g}"]
    for k, v in options.items():
        cmd += ["--candidate-option", f"{k}={json.dumps(v)}"]
    if cases is not None:
        cmd += ["--cases", str(cases)]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - t0
    if proc.returncode not in (0, 1, 3, 4):
        raise RuntimeError(f"{' '.join(cmd)} exited {proc.returncode}:\n{proc.stderr[-3000:]}")
    return RunResult.from_json((out / "result.json").read_text()), wall


def _decider(reason: str) -> tuple[str, float | str | None]:
    """The deciding evidence of a shifted case's reason: the test's name and its Holm-adjusted p (a hard failure:
    the number of candidate rows beyond the margin; None: a row-dependence finding, or a p not found in the words)."""
    if reason.startswith(CONTROL_PREFIX):  # every shifted reason of a controlled run: what it compared, then the test
        reason = reason.split("in what follows): ", 1)[-1]
    if reason.startswith("hard failure"):
        rows = re.match(r"hard failure: (\d+) candidate row", reason)
        return "hard failure", (rows.group(1) if rows else None)
    if reason.startswith("rows are not independent"):
        return "rows are not independent (row independence)", None
    name, _, rest = reason.partition(" rejects, Holm-adjusted p=")
    try:
        p = float(rest.split(" ", 1)[0])
    except ValueError:
        p = None
    return re.sub(r"prompt \d+ ", "", name), p


def evidence(result: RunResult) -> tuple[int, str]:
    """How many cases are shifted, and the deciding evidence in words: each deciding test with the number of cases
    it decided and its largest Holm-adjusted p there; the run-level pooled rejection; otherwise the smallest p's."""
    shifted = [c for c in result.cases if str(c.verdict) == "shifted"]
    by_test: dict[str, list[tuple[str, float | str | None]]] = {}
    for c in shifted:
        name, p = _decider(c.reason)
        by_test.setdefault(name, []).append((c.case_id, p))
    parts = []
    for name, ps in sorted(by_test.items(), key=lambda kv: -len(kv[1])):
        known = [p for _, p in ps if isinstance(p, float)]
        rows = [f"{case} {p} rows" for case, p in ps if isinstance(p, str)]
        worst = f", Holm p <= {max(known):.2g}" if known else (f": {', '.join(rows)}" if rows else "")
        parts.append(f"{name} ({len(ps)}{worst})")
    pooled = [t for t in result.pooled_tests if t.adjusted_pvalue is not None]
    best_pooled = min(pooled, key=lambda t: t.adjusted_pvalue, default=None)
    if result.pooled_reason and best_pooled is not None:
        parts.append(f"run level: {best_pooled.name}, Z {best_pooled.statistic:.2f}, Holm p {best_pooled.adjusted_pvalue:.2g}")
    ratio = next((t for t in pooled if t.name == POOLED_RATIO), None)
    if ratio is not None and not (result.pooled_reason and best_pooled is ratio):
        parts.append(f"{POOLED_RATIO} Z {ratio.statistic:.2f}, Holm p {ratio.adjusted_pvalue:.2g}")
    if not shifted and not result.pooled_reason:
        case_ps = [t.adjusted_pvalue for c in result.cases for t in c.tests if t.primary and t.adjusted_pvalue is not None]
        smallest = min(case_ps, default=None)
        parts.append("nothing rejects: smallest case-level Holm p " + ("-" if smallest is None else f"{smallest:.2g}"))
    return len(shifted), "; ".join(parts)


def drift(result: RunResult) -> str:
    """The numerics drift finding of the run (the control against the baseline)."""
    for note in result.notes:
        if str(getattr(note, "kind", "")) == "numerics drift":
            cases = str(note.values.get("cases") or "")
            return ("drift: " + (cases or "pooled")) if note.values.get("drift_found") else "none"
    return "-"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, nargs="+", default=[3000], help="budgets per engine, in order")
    parser.add_argument("--out", type=Path, default=Path("speceq-bf16-gallery"))
    parser.add_argument("--mutants", default="", help="comma-separated gallery names (default: all statistical)")
    parser.add_argument("--seed", type=int, nargs="+", default=[0],
                        help="run seeds; each seed's runs go into DIR/seed-S when more than one is given")
    parser.add_argument("--control-ratio", type=float, nargs="+", default=[None], metavar="R",
                        help="--control-ratio values, largest first (the smaller ones reuse its stored chunks); "
                             "default: the run's default")
    parser.add_argument("--workers", default="1")
    parser.add_argument("--request-fields", action="store_true", help="also the request-field mutants, on their cases")
    parser.add_argument("--lossless", action="store_true", help="also the lossless mutants (must not be shifted)")
    parser.add_argument("--render", type=Path, nargs="+", metavar="RESULT_JSON",
                        help="only print the rows of saved result.json files (the candidate read from each)")
    parser.add_argument("--no-reference", action="store_true",
                        help="skip the reference run (its folder must hold the baseline and control chunks)")
    args = parser.parse_args(argv)
    names = [n for n in args.mutants.split(",") if n] or statistical_mutants(
        request_fields=args.request_fields, lossless=args.lossless)
    unknown = [n for n in names if n not in MUTANTS]
    if unknown:
        parser.error(f"unknown mutants {unknown}; known: {', '.join(MUTANTS)}")
    if args.render:
        print("| candidate | samples per engine | run verdict | cases shifted | deciding evidence | numerics drift |")
        print("|---|---|---|---|---|---|")
        for path in args.render:
            result = RunResult.from_json(path.read_text())
            k, words = evidence(result)
            n = result.cases[0].n_candidate if result.cases else 0
            name = str(result.provenance.get("settings", {}).get("candidate") or path.parent.name)
            print(f"| `{name}` | {n} | {result.verdict} | "
                  f"{k} of {len(result.cases)} | {words} | {drift(result)} |")
        return 0
    rows: list[dict[str, Any]] = []
    print("| candidate | seed | samples per engine | control ratio | run verdict | cases shifted | deciding evidence "
          "| numerics drift | wall |")
    print("|---|---|---|---|---|---|---|---|---|")
    for seed in args.seed:
        root = args.out if len(args.seed) == 1 else args.out / f"seed-{seed}"
        pool = root / REFERENCE
        for n in args.samples:
            for ratio in args.control_ratio:
                plan = ([] if args.no_reference else [REFERENCE]) + names
                for name in plan:
                    spec = MUTANTS.get(name)
                    own = spec is not None and spec.bug_class == "request-fields"
                    out = root / name
                    cases = own_case_file(name, root / "cases") if own else None
                    if name != REFERENCE and not own:
                        link_shared(pool, out)
                    result, wall = run_one(REFERENCE if name == REFERENCE else f"mutant:{name}", out, n, seed,
                                           args.workers, cases, dict(spec.options) if own else {}, ratio)
                    k, words = evidence(result)
                    used = result.provenance.get("settings", {}).get("control_ratio")
                    row = {"candidate": name, "seed": seed, "samples": n, "control_ratio": used,
                           "verdict": str(result.verdict), "cases_shifted": k, "cases": len(result.cases),
                           "evidence": words, "drift": drift(result), "wall_s": round(wall)}
                    rows.append(row)
                    print(f"| `{name}` | {seed} | {n} | {used} | {row['verdict']} | {k} of {len(result.cases)} | {words} "
                          f"| {row['drift']} | {row['wall_s']} s |", flush=True)
                    args.out.mkdir(parents=True, exist_ok=True)
                    (args.out / "summary.json").write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
