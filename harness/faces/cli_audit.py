"""``speceq audit FAMILY``: the conformance matrix of an engine family (methods x settings x shapes).

A family's methods are the built-in engines of the registry whose name starts with the family's
prefix, except its baseline (:data:`FAMILIES`, the one list): a method added to the registry is
audited without another change. Each cell is one ``speceq run`` (:mod:`speceq.pipeline.audit`);
the audit writes ``audit.json``, ``audit.md`` and ``audit.html`` into ``--out`` and a
``report.html`` beside every cell's ``result.json``.

Exit code: the worst verdict of the cells (``not run`` counts as inconclusive, ``not supported``
not at all; :attr:`speceq.pipeline.audit.AuditResult.exit_code`); 2 when no cell ran.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HELP = "run the conformance matrix of an engine family: every method x sampling setting x batch shape"


@dataclass(frozen=True, slots=True)
class Family:
    """An engine family: its plain sampler (the baseline) and the registry-name prefix of its methods."""

    baseline: str
    prefix: str


#: The families ``speceq audit`` knows.
FAMILIES: dict[str, Family] = {"transformers": Family(baseline="hf-sample", prefix="hf-")}


def family_methods(family: str) -> list[str]:
    """The registry's built-in engines of ``family`` (registry order), its baseline excluded."""
    from speceq.engines.registry import BUILTIN_ENGINES

    fam = FAMILIES[family]
    return [n for n in BUILTIN_ENGINES if n.startswith(fam.prefix) and n != fam.baseline]


def _names(text: str) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    if not names:
        raise argparse.ArgumentTypeError(f"expected comma-separated names, got {text!r}")
    return names


def add_arguments(p: argparse.ArgumentParser) -> None:
    from speceq.core.defaults import DEFAULT_ALPHA, DEFAULT_TOLERANCE
    from speceq.models.worlds import WORLDS
    from speceq.pipeline.audit import SETTINGS, SHAPES

    p.add_argument("family", choices=sorted(FAMILIES), help="engine family to audit")
    p.add_argument("--models", default="byte", choices=WORLDS,
                   help="bundled model world the engines and cases use (as speceq run --models). Default: %(default)s")
    p.add_argument("--methods", type=_names, default=None, metavar="A,B",
                   help="audit only these methods (engine names; an unknown one is a 'not run' row). "
                        "Default: every built-in method of the family")
    p.add_argument("--settings", type=_names, default=None, metavar="S,T",
                   help=f"only these settings, of {', '.join(s.name for s in SETTINGS)}. Default: all")
    p.add_argument("--shapes", type=_names, default=None, metavar="S,T",
                   help=f"only these shapes, of {', '.join(s.name for s in SHAPES)}. Default: all")
    p.add_argument("--samples", type=int, default=1000, metavar="N",
                   help="samples per engine and cell. Default: %(default)s")
    p.add_argument("--chunk-size", type=int, default=250, metavar="N", help="samples per stored chunk. Default: %(default)s")
    p.add_argument("--seed", type=int, default=0, help="run seed of every cell. Default: %(default)s")
    p.add_argument("--alpha", type=float, default=DEFAULT_ALPHA, help="family-wise false-alarm level per cell. "
                   "Default: %(default)g")
    p.add_argument("--tolerance", type=float, default=DEFAULT_TOLERANCE,
                   help="TV distance that counts as equivalent. Default: %(default)g")
    p.add_argument("--no-oracle", dest="oracle", action="store_false", help="black-box tests only (no target scoring)")
    p.add_argument("--threads", type=int, default=None, metavar="N",
                   help="torch threads (default: $SPECEQ_TORCH_THREADS, else 1)")
    p.add_argument("--out", default="speceq-audit", metavar="DIR",
                   help="the audit folder: cells/, audit.json, audit.md, audit.html. A rerun resumes. Default: %(default)s")
    p.add_argument("--json", action="store_true", help="print the audit as JSON instead of the Markdown table")


def build_plan(args: argparse.Namespace) -> Any:
    """The :class:`~speceq.pipeline.audit.AuditPlan` of the command line (ConfigError on bad input)."""
    from speceq.core.defaults import SUPPORT_MARGIN_NATS_BY_WORLD, SUPPORT_MARGIN_OFF
    from speceq.errors import ConfigError
    from speceq.models.worlds import runs_world_models, world_engine_options
    from speceq.pipeline.audit import SETTINGS, SHAPES, AuditMethod, AuditPlan, pick
    from speceq.pipeline.config import RunConfig

    fam = FAMILIES[args.family]
    names = args.methods if args.methods is not None else family_methods(args.family)
    if not names:
        raise ConfigError(f"the registry has no {args.family} method (no built-in engine named {fam.prefix}*)",
                          where="--methods")
    methods = tuple(AuditMethod(n, n, world_engine_options(args.models, n, {})) for n in names)
    own = all(runs_world_models(s, {}) for s in (fam.baseline, *names))
    margin = SUPPORT_MARGIN_NATS_BY_WORLD.get(args.models, SUPPORT_MARGIN_OFF) if own else SUPPORT_MARGIN_OFF
    run = RunConfig(samples=args.samples, chunk_size=args.chunk_size, seed=args.seed, alpha=args.alpha,
                    tolerance=args.tolerance, oracle=args.oracle, threads=args.threads, workers=1, progress=False,
                    support_margin_nats=margin)
    prompt, companion = world_prompts(args.models)
    return AuditPlan(family=args.family, baseline=fam.baseline,
                     baseline_options=world_engine_options(args.models, fam.baseline, {}), methods=methods,
                     prompt_ids=prompt, companion_ids=companion, settings=pick(SETTINGS, args.settings, "setting"),
                     shapes=pick(SHAPES, args.shapes, "shape"), run=run, out_dir=Path(args.out), world=args.models)


def world_prompts(world: str) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(prompt, companion of another length) of a world: its first default case's prompt, and the
    first companion among its cases (else its second case's prompt)."""
    from speceq.inputs.cases import bpe_cases, default_cases, smollm2_cases

    cases = {"bpe": bpe_cases, "smollm2": smollm2_cases}.get(world, default_cases)()
    companion = next((c.companions[0] for c in cases if c.companions), cases[1].prompt_ids)
    return tuple(cases[0].prompt_ids), tuple(companion)


def cell_command(args: argparse.Namespace, plan: Any) -> Any:
    """The reproducing ``speceq run`` of a cell: the world, baseline, method, its column's cases file,
    the audit's budget and the cell's folder (its stored samples are reused)."""
    from speceq.pipeline.audit import folder_name

    def command(method: Any, case: Any, cell_dir: Path) -> str:
        words = ["speceq", "run", "--models", args.models, "--baseline", plan.baseline, "--candidate", method.spec,
                 "--cases", str(plan.out_dir / "cases" / f"{folder_name(case.case_id)}.json"),
                 "--samples", str(args.samples), "--chunk-size", str(args.chunk_size), "--seed", str(args.seed),
                 "--alpha", f"{args.alpha:g}", "--tolerance", f"{args.tolerance:g}", "--out", str(cell_dir)]
        if not args.oracle:
            words.append("--no-oracle")
        return shlex.join(words)

    return command


def audit_markdown(result: Any) -> str:
    """The matrix as GitHub-flavoured Markdown (for a pull request or an upstream issue): a row per
    method, a column per setting and shape, then the command of every shifted cell."""
    from speceq.faces.markdown import code_block, code_span, plain_text

    def fmt(x: float | None, spec: str = ".3f") -> str:
        return "—" if x is None else format(x, spec)

    columns = [(s, h) for s, _ in result.settings for h, _ in result.shapes]
    head = "NO CELL RAN" if result.verdict is None else str(result.verdict).upper()
    versions = ", ".join(f"{k} {v}" for k, v in result.versions.items() if v)
    lines = [f"### speceq audit {plain_text(result.family)}: {head}", "",
             f"baseline {code_span(result.baseline, table_cell=False)} · world {plain_text(str(result.world))} · "
             f"{result.samples} samples per engine and cell · seed {result.seed} · α = {result.alpha:g} · "
             f"tolerance TV < {result.tolerance:g} · {plain_text(versions)}", "",
             "| method | " + " | ".join(f"{s} · {h}" for s, h in columns) + " |",
             "|---|" + "---|" * len(columns)]
    for m in result.methods:
        cells = []
        for s, h in columns:
            c = result.cell(m, s, h)
            if c.verdict is not None:
                accept = "" if c.acceptance is None else f", accept {c.acceptance:.2f}"
                cells.append(f"**{c.word()}** TV {fmt(c.tv_estimate)} ≤ {fmt(c.tv_upper_bound)}{accept}")
            else:
                cells.append(f"{c.word()}: {plain_text(c.reason)}")
        lines.append(f"| {code_span(m)} | " + " | ".join(cells) + " |")
    lines += ["", plain_text(result.summary(), table_cell=False)]
    shifted = [c for c in result.cells if str(c.verdict) == "shifted"]
    for c in shifted:
        lines += ["", f"{code_span(c.method, table_cell=False)} · {c.setting} · {c.shape}: "
                      f"{plain_text(c.reason, table_cell=False)}", "", *code_block(c.command, "sh")]
    return "\n".join(lines) + "\n"


def write_outputs(result: Any, out_dir: Path) -> list[Path]:
    """``audit.md``, ``audit.html`` and a ``report.html`` per cell that ran; the paths written."""
    from speceq.faces.cli import load_result
    from speceq.reports.audit import AUDIT_HTML, CELL_REPORT, write_audit_report
    from speceq.reports.render import write_report

    written = []
    for c in result.cells:
        if c.result is None:
            continue
        result_path = out_dir / c.result
        report = result_path.with_name(CELL_REPORT)
        if not report.exists() or report.stat().st_mtime < result_path.stat().st_mtime:
            write_report(load_result(result_path), report)
    md = out_dir / "audit.md"
    md.write_text(audit_markdown(result), encoding="utf-8")
    written.append(md)
    written.append(write_audit_report(result.to_dict(), out_dir / AUDIT_HTML))
    return written


def handle(args: argparse.Namespace) -> int:
    from speceq.faces.cli import check_run_outputs
    from speceq.pipeline.audit import AUDIT_JSON, run_audit

    plan = build_plan(args)
    check_run_outputs(plan.out_dir)
    result = run_audit(plan, command=cell_command(args, plan))
    written = write_outputs(result, plan.out_dir)
    if args.json:
        print(result.to_json())
    else:
        print(audit_markdown(result), end="")
        print(f"audit: {', '.join(str(p) for p in [plan.out_dir / AUDIT_JSON, *written])} "
              f"({result.wall_s:.0f} s)", file=sys.stderr)
    return result.exit_code


__all__ = ["FAMILIES", "HELP", "Family", "add_arguments", "audit_markdown", "build_plan", "cell_command",
           "family_methods", "handle", "world_prompts", "write_outputs"]
