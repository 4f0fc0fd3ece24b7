"""The ``speceq`` command line: ``run``, ``report``, ``engines`` (and commands other modules plug in).

Exit codes: 0 every case equivalent, 1 some case shifted, 3 inconclusive and none shifted,
4 within-tolerance (a difference certified below ``--numerics-tolerance``) and none worse, 2 usage, configuration or engine error, or an unexpected crash (one line on stderr; ``--debug``
adds the traceback and keeps the exit code), 130 interrupted (finished chunks are kept; rerun to
resume).

A new subcommand lives in its own module providing ``HELP`` (one line),
``add_arguments(parser)`` and ``handle(args) -> int``, registered by one line in
:data:`PLUGIN_COMMANDS`.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from speceq.errors import SpeceqError, StoreError
from speceq.verdicts.result import RunResult
from speceq.verdicts.verdict import EXIT_INTERRUPTED, EXIT_USAGE, Verdict

AddArguments = Callable[[argparse.ArgumentParser], None]
Handler = Callable[[argparse.Namespace], int]

#: Subcommands defined in other modules: name -> module with HELP, add_arguments, handle.
PLUGIN_COMMANDS: dict[str, str] = {
    "power": "speceq.faces.cli_power",
    "kernel": "speceq.faces.cli_kernel",
    "smollm2": "speceq.faces.cli_smollm2",
    "audit": "speceq.faces.cli_audit",
}


# ----- speceq run ------------------------------------------------------------------------
def add_run_arguments(p: argparse.ArgumentParser) -> None:
    from speceq.core.defaults import (
        CERTIFICATES,
        CONTROL_RATIO,
        DEFAULT_ALPHA,
        DEFAULT_CHUNK_SIZE,
        DEFAULT_CHUNK_TIMEOUT_S,
        DEFAULT_SAMPLES,
        DEFAULT_TOLERANCE,
        DEFAULT_WORKERS,
        NEAR_TIE_NATS,
        NUMERICS_TOLERANCE,
        ORACLE_DTYPES,
        SUPPORT_MARGIN_NATS_BY_WORLD,
    )

    g = p.add_argument_group("what to compare")
    g.add_argument("--cases", metavar="FILE", help="cases file (.json or .toml, see docs/reference/cases.md). Default: the built-in cases")
    g.add_argument("--models", default="byte", choices=("byte", "bpe", "smollm2", "mtp", "gemma4"),
                   help="bundled model world: its target/draft fill the built-in engines' model options and its "
                        "cases are the default (byte: 259 tokens; bpe: 32 000, see docs/explanation/bpe-world.md; "
                        "smollm2: SmolLM2-135M-Instruct, 49 152, after speceq smollm2 prepare, see "
                        "docs/how-to/real-model.md; mtp: a tiny DeepSeek-V3 with an MTP layer, for hf-mtp; gemma4: a tiny Gemma-4 pair, for "
                        "hf-multi-token). Default: %(default)s")
    g.add_argument("--baseline", default="baseline", metavar="SPEC", help="baseline engine (name or module:attr). Default: %(default)s")
    g.add_argument("--candidate", default="reference", metavar="SPEC", help="candidate engine. Default: %(default)s")
    g.add_argument("--baseline-option", action="append", default=[], metavar="K=V", help="baseline engine option (repeatable)")
    g.add_argument("--candidate-option", action="append", default=[], metavar="K=V", help="candidate engine option (repeatable)")
    g.add_argument("--numerics-control", nargs="?", const="auto", default=None, metavar="URL",
                   help="add a third engine, the control: the baseline engine with the candidate's dtype and device "
                        "options (or, given a URL, the baseline server at that second plain endpoint). The candidate "
                        "is compared with the control (the verdict: a speculation shift) and the control with the "
                        "baseline (numerics drift, reported with its size); fixed-size runs only "
                        "(docs/how-to/numerics-control.md). Default: off")
    g.add_argument("--control-option", action="append", default=[], metavar="K=V",
                   help="numerics control engine option, over the baseline's and the candidate's dtype/device "
                        "(repeatable; needs --numerics-control)")
    g.add_argument("--control-ratio", type=float, default=CONTROL_RATIO, metavar="R",
                   help="the numerics control's samples per candidate sample (1 to 64; needs --numerics-control): "
                        "each candidate row is compared with its share of the control's rows, so more control rows "
                        "(plain sampling, cheaper than the candidate) give the verdict's comparison more power. "
                        "Default: %(default)g")
    g = p.add_argument_group("sampling")
    g.add_argument("--samples", type=int, default=DEFAULT_SAMPLES, metavar="N", help="samples per case and engine. Default: %(default)s")
    g.add_argument("--chunk-size", type=int, default=DEFAULT_CHUNK_SIZE, metavar="N", help="samples per stored chunk. Default: %(default)s")
    g.add_argument("--seed", type=int, default=0, help="run seed; chunk seeds derive from it. Default: %(default)s")
    g.add_argument("--chunk-timeout", type=float, default=DEFAULT_CHUNK_TIMEOUT_S, metavar="SECONDS",
                   help="stop with an engine error (naming engine, case and slice; stored chunks kept) when one "
                        "chunk takes longer than this to sample (not with --executor ray). Default: no limit")
    g.add_argument("--threads", type=int, default=None, metavar="N",
                   help="torch threads (default: $SPECEQ_TORCH_THREADS, else 1)")
    # ----- parallel collection (executors: speceq.pipeline.collect; docs/how-to/scale.md) -----
    g = p.add_argument_group("parallel collection")
    g.add_argument("--workers", type=_workers_arg, default=DEFAULT_WORKERS, metavar="N|auto",
                   help="local worker processes sampling chunks and scoring them with the oracle (1: in this "
                        "process). Default: auto, one per CPU that other processes leave at least a quarter idle "
                        "right now (measured over 0.25 s), at most one per chunk to sample; with --executor ray: tasks in "
                        "flight (default: one per cluster CPU)")
    g.add_argument("--executor", choices=("local", "ray"), default="local",
                   help="local: this machine; ray: tasks on a Ray cluster (pip install 'speceq[ray]'). "
                        "Default: %(default)s")
    g.add_argument("--ray-address", metavar="ADDR", default=None,
                   help="Ray cluster to use with --executor ray ('auto', HOST:PORT, ray://HOST:PORT). "
                        "Default: start a local Ray instance for the run")
    # ----- end of parallel collection -----
    g = p.add_argument_group("statistics")
    g.add_argument("--no-oracle", dest="oracle", action="store_false", help="black-box tests only (no target scoring)")
    g.add_argument("--oracle-model", metavar="DIR", default=None,
                   help="target model folder of the oracle. Default: the baseline engine's target model if it "
                        "loads one, else the bundled target")
    g.add_argument("--oracle-draft", metavar="auto|bundled|none|DIR", default="auto",
                   help="draft the oracle scores for the draft ratio comparison. Default: %(default)s (the candidate "
                        "engine's own draft model, if it has one)")
    g.add_argument("--oracle-share-prefix", action=argparse.BooleanOptionalAction, default=True,
                   help="the oracle runs each prompt once and scores only the generated tokens against its cache: "
                        "about 6x less oracle work; log-probabilities equal to 1e-5, not bit for bit; "
                        "--no-oracle-share-prefix scores whole rows, bit-identical to transformers' forward "
                        "(docs/explanation/fast-forward.md). Default: on")
    g.add_argument("--oracle-dtype", choices=ORACLE_DTYPES, default="float32",
                   help="precision of the transformers oracle (a loaded engine model of another dtype is copied, "
                        "not cast). Default: %(default)s")
    g.add_argument("--oracle-server", metavar="URL", default=None,
                   help="score with an OpenAI-compatible server's prompt log-probabilities (vLLM prompt_logprobs) "
                        "instead of loading the target in transformers (docs/explanation/server-oracle.md). Default: off")
    g.add_argument("--oracle-top-logprobs", type=_top_logprobs_arg, default=None, metavar="N|all",
                   help="raw log-probabilities the server oracle asks per position; all: the whole vocabulary "
                        "(vLLM: --max-logprobs -1). Default: all")
    g.add_argument("--alpha", type=float, default=DEFAULT_ALPHA, help="family-wise false-alarm level. Default: %(default)g")
    g.add_argument("--tolerance", type=float, default=DEFAULT_TOLERANCE, help="TV distance that counts as equivalent. Default: %(default)g")
    g.add_argument("--numerics-tolerance", type=float, default=None, metavar="TV",
                   help="a detected difference whose certified size (upper bound of the largest TV of a position's or the first two tokens' law) "
                        "is below TV is within-tolerance (exit code 4), not shifted; 0: off. Default: by --models, "
                        "from the measured bf16 numerics floor: byte and bpe 0.01, smollm2 0.05, others "
                        f"{NUMERICS_TOLERANCE:g} (docs/explanation/numerics.md)")
    g.add_argument("--near-tie-nats", type=float, default=NEAR_TIE_NATS, metavar="NATS",
                   help="greedy cases: target top-2 margin up to which a divergence is a numerical near-tie "
                        "(1e-3 measured on float32 CPU; use ~1e-2 for bf16 engines). Default: %(default)g")
    g.add_argument("--support-margin-nats", type=float, default=None, metavar="NATS",
                   help="numerics margin of the support hard failure: a candidate token fails the case only when "
                        "every law whose logits are within NATS of the oracle's excludes it; 0: an exact oracle, "
                        "any token of oracle probability 0; inf: no hard failure (docs/explanation/numerics.md). "
                        "Default: when every engine and the oracle run the bundled world's models, by --models, "
                        + ", ".join(f"{k} {v:g}" for k, v in SUPPORT_MARGIN_NATS_BY_WORLD.items())
                        + " (about twice the measured bf16 logit spread); otherwise inf")
    g.add_argument("--sequential", action="store_true",
                   help="anytime-valid mode: look after every step of a doubling schedule up to --samples and stop "
                        "each case once decided (docs/how-to/sequential.md)")
    g.add_argument("--certificate", choices=CERTIFICATES, default="tv",
                   help="what 'equivalent' certifies: tv, the per-position TV bound; pit-law, the coarser bound on "
                        "the law of the oracle PIT per position, which a large vocabulary affords at a few hundred "
                        "samples (needs the oracle, not with --sequential; docs/how-to/real-model.md). "
                        "Default: %(default)s")
    g = p.add_argument_group("output")
    g.add_argument("--out", default="speceq-out", metavar="DIR", help="samples, result.json, provenance.json. Default: %(default)s")
    mode = g.add_mutually_exclusive_group()
    mode.add_argument("--resume", dest="resume", action="store_true", default=True, help="reuse stored chunks (default)")
    mode.add_argument("--fresh", dest="resume", action="store_false", help="discard stored chunks first")
    g.add_argument("--report", metavar="PATH", help="also write the HTML report there")
    g.add_argument("--summary-md", metavar="PATH",
                   help="also write a short Markdown verdict table there (for a pull-request comment or "
                        "$GITHUB_STEP_SUMMARY, which is appended to; see docs/how-to/ci-summaries.md)")
    g.add_argument("--json", action="store_true", help="print the result as JSON instead of the table")
    g.add_argument("--no-progress", dest="progress", action="store_false", help="no progress bar")


def default_support_margin(args: argparse.Namespace) -> float:
    """``--support-margin-nats`` when not given: the world's measured margin if every engine and the
    oracle run the bundled world's models (built-in engines, no model options, no other oracle
    model or server), else inf: a safe margin depends on the model's numerics, unknown for others."""
    from speceq.core.defaults import SUPPORT_MARGIN_NATS_BY_WORLD, SUPPORT_MARGIN_OFF
    from speceq.engines.registry import parse_engine_options
    from speceq.models.worlds import runs_world_models

    own = all(runs_world_models(spec, parse_engine_options(opts)) for spec, opts in
              ((args.baseline, args.baseline_option), (args.candidate, args.candidate_option)))
    if not own or args.oracle_model is not None or args.oracle_server is not None:
        return SUPPORT_MARGIN_OFF
    return SUPPORT_MARGIN_NATS_BY_WORLD.get(args.models, SUPPORT_MARGIN_OFF)


def handle_run(args: argparse.Namespace) -> int:
    from speceq.core.defaults import CONTROL_RATIO, NUMERICS_TOLERANCE, NUMERICS_TOLERANCE_BY_WORLD
    from speceq.engines.registry import parse_engine_options
    from speceq.errors import ConfigError
    from speceq.inputs.cases import bpe_cases, default_cases, load_cases, smollm2_cases
    from speceq.models.worlds import world_engine_options
    from speceq.pipeline.config import RunConfig
    from speceq.pipeline.runner import run

    if args.control_ratio != CONTROL_RATIO and args.numerics_control is None:
        raise ConfigError(f"--control-ratio {args.control_ratio:g} sets the numerics control's samples, but the run "
                          "has no control: add --numerics-control", where="--control-ratio")
    config = RunConfig(
        baseline=args.baseline, candidate=args.candidate,
        baseline_options=world_engine_options(args.models, args.baseline, parse_engine_options(args.baseline_option)),
        candidate_options=world_engine_options(args.models, args.candidate, parse_engine_options(args.candidate_option)),
        oracle=args.oracle, oracle_model=args.oracle_model, oracle_share_prefix=args.oracle_share_prefix,
        oracle_draft=None if args.oracle_draft == "none" else args.oracle_draft,
        oracle_dtype=args.oracle_dtype, oracle_server=args.oracle_server, oracle_top_logprobs=args.oracle_top_logprobs,
        samples=args.samples, chunk_size=args.chunk_size, chunk_timeout=args.chunk_timeout, seed=args.seed,
        alpha=args.alpha,
        tolerance=args.tolerance, out_dir=Path(args.out),
        numerics_tolerance=(NUMERICS_TOLERANCE_BY_WORLD.get(args.models, NUMERICS_TOLERANCE)
                            if args.numerics_tolerance is None else args.numerics_tolerance), resume=args.resume, threads=args.threads,
        progress=args.progress, near_tie_nats=args.near_tie_nats, sequential=args.sequential,
        support_margin_nats=(default_support_margin(args) if args.support_margin_nats is None
                             else args.support_margin_nats),
        numerics_control=args.numerics_control, control_options=parse_engine_options(args.control_option),
        control_ratio=args.control_ratio,
        certificate=args.certificate, workers=args.workers, executor=args.executor, ray_address=args.ray_address,  # parallel collection
    )
    if args.cases:
        cases = load_cases(args.cases)
    else:
        cases = {"bpe": bpe_cases, "smollm2": smollm2_cases}.get(args.models, default_cases)()  # mtp, gemma4: byte vocabulary
    check_run_outputs(config.out_dir, report=args.report, summary_md=args.summary_md)
    check_engine_specs(config)
    try:
        result = run(config, cases)
    except StoreError as e:
        raise StoreError(f"{e} [--fresh discards the stored samples; --out DIR uses another folder]") from e
    argv = getattr(args, "argv", None) or []
    if args.json:
        print(result.to_json())
    else:
        print_summary(result, out_dir=config.out_dir, argv=argv)
    # written after the verdict is printed: a failing write cannot hide it
    failed = False
    for flag, path, write in (("--report", args.report, _write_report),
                              ("--summary-md", args.summary_md, lambda r, p: write_summary_md(r, p, argv=argv))):
        if not path:
            continue
        try:
            write(result, path)
        except OSError as e:
            print(f"speceq: error: {flag}: {os_error_message(e, path)} (the result is in {config.out_dir})",
                  file=sys.stderr)
            failed = True
            continue
        if not args.json:
            print(f"{flag.removeprefix('--').replace('-md', '')}: {path}")
    return EXIT_USAGE if failed else result.exit_code


def os_error_message(e: OSError, path: str | os.PathLike[str] | None = None) -> str:
    """One line for an OS error: what failed and on which path (no errno noise)."""
    where = e.filename if e.filename is not None else path
    what = e.strerror or str(e)
    if e.filename2 is not None:
        return f"{what}: {str(where)!r} -> {str(e.filename2)!r}"
    return f"{what}: {str(where)!r}" if where is not None else what


def _check_writable_folder(folder: Path, flag: str) -> None:
    """``folder`` (or its nearest existing parent, when it does not exist yet) accepts a new file."""
    from speceq.errors import ConfigError

    probe = folder
    while not probe.exists():
        if probe.parent == probe:
            break
        probe = probe.parent
    if not probe.is_dir():
        raise ConfigError(f"{str(probe)!r} is not a folder, so {str(folder)!r} cannot be created", where=flag)
    try:
        with tempfile.TemporaryFile(dir=probe):
            pass
    except OSError as e:
        raise ConfigError(f"cannot write in {str(probe)!r}: {e.strerror or e}", where=flag) from None


def check_run_outputs(out_dir: Path, *, report: str | None = None, summary_md: str | None = None) -> None:
    """Before any sampling: the output folder and the report/summary paths can be written.

    Raises ConfigError naming the option and the path (a file where a folder is needed, a
    folder where a file is needed, no write permission, a read-only file system).
    """
    from speceq.errors import ConfigError

    out_dir = Path(out_dir)
    if out_dir.exists() and not out_dir.is_dir():
        raise ConfigError(f"{str(out_dir)!r} is a file, expected a folder", where="--out")
    _check_writable_folder(out_dir, "--out")
    for flag, value in (("--report", report), ("--summary-md", summary_md)):
        if not value:
            continue
        path = Path(value)
        if path.is_dir():
            raise ConfigError(f"{value!r} is a folder, expected a file path", where=flag)
        if path.exists() and not os.access(path, os.W_OK):
            raise ConfigError(f"{value!r} is not writable", where=flag)
        _check_writable_folder(path.parent, flag)


def check_engine_specs(config: Any) -> None:
    """Before any model loads: both engine specs name something that exists and imports."""
    from speceq.engines.registry import check_engine_spec

    for role in ("baseline", "candidate"):
        spec = getattr(config, role)
        try:
            check_engine_spec(spec)
        except SpeceqError as e:
            raise type(e)(f"--{role}: {e}") from e


def _word_or_int(word: str, minimum: int) -> Callable[[str], int | None]:
    """An argparse type: ``word`` (None) or an integer >= ``minimum``."""

    def parse(text: str) -> int | None:
        if text == word:
            return None
        try:
            n = int(text)
        except ValueError:
            n = minimum - 1
        if n < minimum:
            raise argparse.ArgumentTypeError(f"expected {word!r} or an integer >= {minimum}, got {text!r}")
        return n

    return parse


#: ``--oracle-top-logprobs``: ``all`` (None: the whole vocabulary) or an integer >= 2.
_top_logprobs_arg = _word_or_int("all", 2)
#: ``--workers``: ``auto`` (None) or an integer >= 1.
_workers_arg = _word_or_int("auto", 1)


def _write_report(result: RunResult, path: str) -> Path:
    from speceq.reports.render import write_report

    return write_report(result, path)


def _fmt(x: float | None, spec: str = ".3f") -> str:
    return "—" if x is None else format(x, spec)


def print_summary(result: RunResult, *, out_dir: Path | None = None, report: str | None = None,
                  argv: Sequence[str] = ()) -> None:
    """The result table and the run verdict, on stdout.

    One row per case: id, parameters, verdict, TV estimate, the upper bound that decides (the TV bound, or
    the PIT-law bound under ``--certificate pit-law``: the column names it),
    acceptance rate, speedup per token (candidate over baseline), and why: for a shifted case
    the test that decided it (name, Holm-adjusted p, effect) or the hard failure, for an
    inconclusive one the samples per engine that would decide. Then the engines (as typed),
    primary tests that did not run, and the command that would decide the inconclusive
    cases (``argv``: the ``speceq`` arguments of this run).
    """
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    from speceq.verdicts import reasons

    style = {Verdict.EQUIVALENT: "green", Verdict.SHIFTED: "bold red", Verdict.INCONCLUSIVE: "yellow",
             Verdict.WITHIN_TOLERANCE: "cyan", Verdict.LOSSY: "magenta"}
    table = Table()
    table.add_column("case", no_wrap=True)
    table.add_column("params", overflow="fold")
    for col in ("verdict", "TV", reasons.bound_name(result.certificate), "accept", "speedup"):
        table.add_column(col, justify="left" if col == "verdict" else "right", no_wrap=True)
    table.add_column("why", overflow="fold", ratio=1)
    for c in result.cases:
        label = _params_label(c.case.get("params", {}), c.case.get("batch_size"))
        speed = "—" if c.speedup_per_token is None else f"{c.speedup_per_token:.2f}x"
        why = reasons.decided_by(c, result.alpha) or reasons.samples_needed(c)
        table.add_row(escape(c.case_id), label, f"[{style.get(c.verdict, '')}]{c.verdict}[/]", _fmt(c.tv_estimate),
                      _fmt(reasons.shown_bound(c)), _fmt(c.acceptance_rate, ".2f"), speed, escape(why))
    console = Console(highlight=False)
    if not console.is_terminal:  # a file or a pipe: room for the whole row
        console = Console(highlight=False, width=160)
    # plain print: engine specs are paths and must not be wrapped
    print(f"speceq: {reasons.engine_label(result, 'candidate')} vs {reasons.engine_label(result, 'baseline')}", flush=True)
    for verdict, line in plain_lines(result):  # the answer first, in plain words; the evidence below
        console.print(escape(line), style=style.get(verdict, ""))
    console.print(table)
    console.print(result.summary(), style=style.get(result.verdict, ""))
    # plain prints below: paths and commands must not be wrapped
    if result.numerics_control is not None:  # control against baseline: a finding, not the verdict
        for drift in result.numerics_control.drift:
            print(f"numerics control: {drift.words()}")
    for line in reasons.skipped_tests(result):
        print(f"note: {line}")
    rerun = rerun_line(result, argv)
    if rerun:
        from speceq.core.credentials import redact_text

        print(redact_text(rerun))
    if out_dir is not None:
        print(f"result: {out_dir / 'result.json'}   samples and provenance: {out_dir}")
    for c in result.cases:  # sequential mode: say when each case was decided
        if c.reason.startswith("sequential:"):
            print(f"{c.case_id}: {c.reason}")
    if report:
        print(f"report: {report}")


def plain_lines(result: RunResult) -> list[tuple[Verdict, str]]:
    """The run's answer in plain words, then each case's (:mod:`speceq.verdicts.reasons`), with their verdicts.

    When every case is equivalent the run's line covers them all and the cases get no line of their own."""
    from speceq.verdicts import reasons

    lines = [(Verdict.parse(result.verdict), reasons.plain_run_summary(result))]
    if result.verdict != Verdict.EQUIVALENT:
        lines += [(Verdict.parse(c.verdict), f"  {c.case_id}: {reasons.plain_case_summary(c, result.alpha)}")
                  for c in result.cases]
    return lines


def rerun_line(result: RunResult, argv: Sequence[str]) -> str:
    """'to decide: <command>' for the inconclusive cases ('' when there is none or no command line)."""
    from speceq.verdicts import reasons

    need = [c for c in result.cases if c.verdict == Verdict.INCONCLUSIVE and c.required_n is not None]
    if not need:
        return ""
    n = max(c.required_n for c in need if c.required_n is not None)
    own = [c.case_id for c in need if isinstance(c.case, dict) and c.case.get("samples")]
    tail = (f" (cases {', '.join(own)} set their own samples in the cases file: raise them there)" if own else "")
    if not argv:
        return (f"to decide: rerun with --samples {n} and the same --out (stored samples are reused; "
                f"{reasons.SECOND_LOOK}){tail}")
    return f"to decide: {reasons.argv_rerun_command(argv, n)}   (reuses the stored samples; {reasons.SECOND_LOOK}){tail}"


def summary_markdown(result: RunResult, *, argv: Sequence[str] = ()) -> str:
    """A short Markdown verdict table (GitHub-flavoured) for a pull-request comment or a CI step summary.

    Every string that can hold user text (case ids, engine specs, reasons, the rerun command) is
    escaped by :mod:`speceq.faces.markdown`, so it renders as text and never as HTML or Markdown.
    """
    from speceq.core.credentials import redact_text
    from speceq.faces.markdown import code_block, code_span, plain_text
    from speceq.verdicts import reasons

    mark = {Verdict.EQUIVALENT: "✅ equivalent", Verdict.SHIFTED: "❌ shifted", Verdict.INCONCLUSIVE: "⚠️ inconclusive",
            Verdict.WITHIN_TOLERANCE: "〰️ within-tolerance", Verdict.LOSSY: "🟣 lossy"}
    lines = [
        f"### speceq: {plain_text(result.verdict.upper())}",
        "",
        f"{code_span(reasons.engine_label(result, 'candidate'), table_cell=False)} vs "
        f"{code_span(reasons.engine_label(result, 'baseline'), table_cell=False)} · "
        f"α = {result.alpha:g} · {reasons.tolerance_rule(result.certificate, result.tolerance)}",
        "",
        plain_text(reasons.plain_run_summary(result), table_cell=False),
        "",
        *([f"- {code_span(c.case_id, table_cell=False)}: {plain_text(reasons.plain_case_summary(c, result.alpha), table_cell=False)}"
           for c in result.cases] + [""] if result.verdict != Verdict.EQUIVALENT else []),
        f"| case | verdict | TV | {reasons.bound_name(result.certificate)} | why |",
        "|---|---|---:|---:|---|",
    ]
    for c in result.cases:
        why = reasons.decided_by(c, result.alpha) or reasons.samples_needed(c)
        lines.append(f"| {code_span(c.case_id)} | {mark.get(c.verdict, plain_text(c.verdict))} | "
                     f"{_fmt(c.tv_estimate)} | {_fmt(reasons.shown_bound(c))} | {plain_text(why)} |")
    lines += ["", plain_text(result.summary(), table_cell=False)]
    for note in reasons.skipped_tests(result):
        lines += ["", f"> note: {plain_text(note)}"]
    rerun = rerun_line(result, argv)
    if rerun:
        lines += ["", "To decide the inconclusive cases:", "", *code_block(redact_text(rerun.removeprefix("to decide: ")))]
    return "\n".join(lines) + "\n"


def write_summary_md(result: RunResult, path: str | os.PathLike[str], *, argv: Sequence[str] = ()) -> Path:
    """Write :func:`summary_markdown` to ``path``; append when ``path`` is ``$GITHUB_STEP_SUMMARY``."""
    target = Path(path)
    text = summary_markdown(result, argv=argv)
    step_summary = os.environ.get("GITHUB_STEP_SUMMARY")
    append = bool(step_summary) and target.exists() and target.resolve() == Path(step_summary).resolve()
    target.parent.mkdir(parents=True, exist_ok=True)
    with target.open("a" if append else "w", encoding="utf-8") as f:
        f.write(text)
    return target


def _params_label(params: dict[str, Any], batch_size: Any) -> str:
    from speceq.core.params import SamplingParams

    try:
        label = SamplingParams(**params).label()
    except (TypeError, SpeceqError):
        label = str(params)
    return f"{label} bs={batch_size}" if batch_size and batch_size != 1 else label


# ----- speceq report ---------------------------------------------------------------------
def add_report_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("result", metavar="RESULT", help="a result.json written by speceq run")
    p.add_argument("-o", "--output", default=None, metavar="OUT.html",
                   help="where to write the HTML report. Default: RESULT with the suffix .html")


def load_result(path: str | Path) -> RunResult:
    """A RunResult from a result.json; ConfigError naming the file when it is not one."""
    from speceq.store.atomic import load_saved

    return load_saved(path, RunResult.from_json, "result.json")


def handle_report(args: argparse.Namespace) -> int:
    """Write the HTML report of a saved result; every failure is a ConfigError naming the file."""
    from speceq.errors import ConfigError

    result = load_result(args.result)
    out = Path(args.output) if args.output is not None else Path(args.result).with_suffix(".html")
    try:
        path = _write_report(result, str(out))
    except ConfigError as e:
        raise ConfigError(f"cannot render the result: {e}", where=str(args.result)) from None
    except OSError as e:
        raise ConfigError(f"cannot write the report: {os_error_message(e)}", where=str(out)) from None
    print(result.summary())
    print(f"report: {path}")
    return 0


# ----- speceq engines --------------------------------------------------------------------
def add_engines_arguments(p: argparse.ArgumentParser) -> None:
    del p  # no options


def handle_engines(args: argparse.Namespace) -> int:
    from speceq.engines.registry import BUILTIN_ENGINES, list_engines

    for name in list_engines():
        target = BUILTIN_ENGINES.get(name)
        print(f"{name:<20} {target}" if target else name)
    print("or any 'package.module:attr' / 'path/to/file.py:attr' (see docs/how-to/test-your-engine.md)")
    return 0


COMMANDS: dict[str, tuple[str, AddArguments, Handler]] = {
    "run": ("sample a baseline and a candidate engine and test that they sample the same distribution",
            add_run_arguments, handle_run),
    "report": ("render a saved result.json as an HTML report", add_report_arguments, handle_report),
    "engines": ("list the engines speceq knows", add_engines_arguments, handle_engines),
}


def _plugin_commands() -> dict[str, tuple[str, AddArguments, Handler]]:
    found = {}
    for name, module_name in PLUGIN_COMMANDS.items():
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as e:
            if e.name != module_name:  # the module exists but one of its imports is missing
                raise
            continue
        found[name] = (module.HELP, module.add_arguments, module.handle)
    return found


def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--debug", action="store_true", help="show tracebacks of errors (the exit code stays 2)")
    parser = argparse.ArgumentParser(
        prog="speceq", description="Distribution-equivalence tests for speculative decoding.",
        epilog="exit codes: 0 equivalent, 1 shifted, 3 inconclusive, 4 within-tolerance, 2 usage/engine error or crash, "
               "130 interrupted",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, (help_text, add_arguments, handler) in {**COMMANDS, **_plugin_commands()}.items():
        p = sub.add_parser(name, help=help_text, description=help_text, parents=[common])
        add_arguments(p)
        p.set_defaults(handler=handler)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``speceq`` command line; return the exit code."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # argparse: --help (0) or a usage error (2, message printed)
        return int(e.code) if isinstance(e.code, int) else EXIT_USAGE
    from speceq.pipeline.stopping import RunInterrupted

    args.argv = list(sys.argv[1:] if argv is None else argv)
    try:
        return args.handler(args)
    except RunInterrupted as e:
        print(f"\nspeceq: {e.message}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        print("\nspeceq: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except (SpeceqError, OSError) as e:
        message = os_error_message(e) if isinstance(e, OSError) and not isinstance(e, SpeceqError) else str(e)
        return _error_exit(message, debug=args.debug)
    except Exception as e:  # a bug in speceq, an engine or a library: an error, never a verdict's code
        return _error_exit(f"unexpected {type(e).__name__}: {e} (a bug; --debug shows the traceback)", debug=args.debug)


def _error_exit(message: str, *, debug: bool) -> int:
    """Print the error line (after the traceback of the exception being handled, with ``--debug``); return 2.

    ``--debug`` only adds the traceback: the exit code stays :data:`EXIT_USAGE`, so a CI gate never
    reads a crash or a bad input as a verdict (exit 1 is *shifted*).
    """
    from speceq.core.credentials import redact_text

    if debug:
        import traceback

        print(redact_text(traceback.format_exc()), end="", file=sys.stderr)
    print(f"speceq: error: {redact_text(message)}", file=sys.stderr)
    return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
