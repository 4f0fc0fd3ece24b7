"""The ``speceq`` command line: ``run``, ``report``, ``engines`` (and commands other modules plug in).

Exit codes: 0 every case equivalent, 1 some case shifted, 3 inconclusive and none shifted,
2 usage, configuration or engine error (one line on stderr; ``--debug`` shows the
traceback), 130 interrupted (finished chunks are kept; rerun to resume).

A new subcommand lives in its own module providing ``HELP`` (one line),
``add_arguments(parser)`` and ``handle(args) -> int``, registered by one line in
:data:`PLUGIN_COMMANDS`.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from speceq.errors import SpeceqError, StoreError
from speceq.verdicts.result import EXIT_USAGE, RunResult

EXIT_INTERRUPTED = 130
AddArguments = Callable[[argparse.ArgumentParser], None]
Handler = Callable[[argparse.Namespace], int]

#: Subcommands defined in other modules: name -> module with HELP, add_arguments, handle.
PLUGIN_COMMANDS: dict[str, str] = {
    "calibrate": "speceq.cli_calibrate",
}


# ----- speceq run ------------------------------------------------------------------------
def add_run_arguments(p: argparse.ArgumentParser) -> None:
    from speceq.defaults import DEFAULT_ALPHA, DEFAULT_CHUNK_SIZE, DEFAULT_SAMPLES, DEFAULT_TOLERANCE
    from speceq.greedy import NEAR_TIE_NATS

    g = p.add_argument_group("what to compare")
    g.add_argument("--cases", metavar="FILE", help="cases file (.json or .toml, see docs/CASES.md). Default: the built-in cases")
    g.add_argument("--baseline", default="baseline", metavar="SPEC", help="baseline engine (name or module:attr). Default: %(default)s")
    g.add_argument("--candidate", default="reference", metavar="SPEC", help="candidate engine. Default: %(default)s")
    g.add_argument("--baseline-option", action="append", default=[], metavar="K=V", help="baseline engine option (repeatable)")
    g.add_argument("--candidate-option", action="append", default=[], metavar="K=V", help="candidate engine option (repeatable)")
    g = p.add_argument_group("sampling")
    g.add_argument("--samples", type=int, default=DEFAULT_SAMPLES, metavar="N", help="samples per case and engine. Default: %(default)s")
    g.add_argument("--chunk-size", type=int, default=DEFAULT_CHUNK_SIZE, metavar="N", help="samples per stored chunk. Default: %(default)s")
    g.add_argument("--seed", type=int, default=0, help="run seed; chunk seeds derive from it. Default: %(default)s")
    g.add_argument("--threads", type=int, default=None, metavar="N",
                   help="torch threads (default: $SPECEQ_TORCH_THREADS, else 1)")
    g = p.add_argument_group("statistics")
    g.add_argument("--no-oracle", dest="oracle", action="store_false", help="black-box tests only (no target scoring)")
    g.add_argument("--oracle-model", metavar="DIR", default=None,
                   help="target model folder of the oracle. Default: the baseline engine's target model if it "
                        "loads one, else the bundled target")
    g.add_argument("--oracle-draft", metavar="auto|bundled|none|DIR", default="auto",
                   help="draft the oracle scores for the draft-drift test. Default: %(default)s (the candidate "
                        "engine's own draft model, if it has one)")
    g.add_argument("--alpha", type=float, default=DEFAULT_ALPHA, help="family-wise false-alarm level. Default: %(default)g")
    g.add_argument("--tolerance", type=float, default=DEFAULT_TOLERANCE, help="TV distance that counts as equivalent. Default: %(default)g")
    g.add_argument("--near-tie-nats", type=float, default=NEAR_TIE_NATS, metavar="NATS",
                   help="greedy cases: target top-2 margin up to which a divergence is a numerical near-tie "
                        "(1e-3 measured on float32 CPU; use ~1e-2 for bf16 engines). Default: %(default)g")
    g = p.add_argument_group("output")
    g.add_argument("--out", default="speceq-out", metavar="DIR", help="samples, result.json, provenance.json. Default: %(default)s")
    mode = g.add_mutually_exclusive_group()
    mode.add_argument("--resume", dest="resume", action="store_true", default=True, help="reuse stored chunks (default)")
    mode.add_argument("--fresh", dest="resume", action="store_false", help="discard stored chunks first")
    g.add_argument("--report", metavar="PATH", help="also write the HTML report there")
    g.add_argument("--json", action="store_true", help="print the result as JSON instead of the table")
    g.add_argument("--no-progress", dest="progress", action="store_false", help="no progress bar")


def handle_run(args: argparse.Namespace) -> int:
    from speceq.cases import default_cases, load_cases
    from speceq.engines.registry import parse_engine_options
    from speceq.run import RunConfig, run

    config = RunConfig(
        baseline=args.baseline, candidate=args.candidate,
        baseline_options=parse_engine_options(args.baseline_option),
        candidate_options=parse_engine_options(args.candidate_option),
        oracle=args.oracle, oracle_model=args.oracle_model,
        oracle_draft=None if args.oracle_draft == "none" else args.oracle_draft,
        samples=args.samples, chunk_size=args.chunk_size, seed=args.seed, alpha=args.alpha,
        tolerance=args.tolerance, out_dir=Path(args.out), resume=args.resume, threads=args.threads,
        progress=args.progress, near_tie_nats=args.near_tie_nats,
    )
    cases = load_cases(args.cases) if args.cases else default_cases()
    try:
        result = run(config, cases)
    except StoreError as e:
        raise StoreError(f"{e} [--fresh discards the stored samples; --out DIR uses another folder]") from e
    if args.report:
        _write_report(result, args.report)
    if args.json:
        print(result.to_json())
    else:
        print_summary(result, out_dir=config.out_dir, report=args.report)
    return result.exit_code


def _write_report(result: RunResult, path: str) -> Path:
    from speceq.reports.render import write_report

    return write_report(result, path)


def _fmt(x: float | None, spec: str = ".3f") -> str:
    return "—" if x is None else format(x, spec)


def print_summary(result: RunResult, *, out_dir: Path | None = None, report: str | None = None) -> None:
    """The result table and the run verdict, on stdout.

    One row per case: id, parameters, verdict, TV estimate and its upper confidence bound,
    acceptance rate, speedup per token (candidate over baseline), samples per engine needed
    to decide an inconclusive case.
    """
    from rich.console import Console
    from rich.table import Table

    style = {"equivalent": "green", "shifted": "bold red", "inconclusive": "yellow"}
    table = Table(title="speceq", title_justify="left")
    table.add_column("case", no_wrap=True)
    table.add_column("params", overflow="fold")
    for col in ("verdict", "TV", "TV bound", "accept", "speedup", "need n"):
        table.add_column(col, justify="left" if col == "verdict" else "right", no_wrap=True)
    for c in result.cases:
        label = _params_label(c.case.get("params", {}), c.case.get("batch_size"))
        speed = "—" if c.speedup_per_token is None else f"{c.speedup_per_token:.2f}x"
        need = "—" if c.required_n is None else f"{c.required_n:,}"
        table.add_row(c.case_id, label, f"[{style.get(c.verdict, '')}]{c.verdict}[/]", _fmt(c.tv_estimate),
                      _fmt(c.tv_upper_bound), _fmt(c.acceptance_rate, ".2f"), speed, need)
    console = Console(highlight=False)
    if not console.is_terminal:  # a file or a pipe: room for the whole row
        console = Console(highlight=False, width=120)
    console.print(table)
    console.print(result.summary(), style=style.get(result.verdict, ""))
    if out_dir is not None:  # plain print: paths must not be wrapped
        print(f"result: {out_dir / 'result.json'}   samples and provenance: {out_dir}")
    if report:
        print(f"report: {report}")


def _params_label(params: dict[str, Any], batch_size: Any) -> str:
    from speceq.params import SamplingParams

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
    from speceq.errors import ConfigError

    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"cannot read the result: {e}", where=str(path)) from None
    try:
        return RunResult.from_json(text)
    except (ValueError, KeyError, TypeError) as e:
        raise ConfigError(f"not a speceq result.json ({type(e).__name__}: {e})", where=str(path)) from None


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
        raise ConfigError(f"cannot write the report: {e}", where=str(out)) from None
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
    print("or any 'package.module:attr' / 'path/to/file.py:attr' (see README)")
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
    common.add_argument("--debug", action="store_true", help="show tracebacks of errors")
    parser = argparse.ArgumentParser(
        prog="speceq", description="Distribution-equivalence tests for speculative decoding.",
        epilog="exit codes: 0 equivalent, 1 shifted, 3 inconclusive, 2 usage/engine error, 130 interrupted",
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
    from speceq.run import RunInterrupted

    try:
        return args.handler(args)
    except RunInterrupted as e:
        print(f"\nspeceq: {e.message}", file=sys.stderr)
        return EXIT_INTERRUPTED
    except KeyboardInterrupt:
        print("\nspeceq: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except (SpeceqError, OSError) as e:
        if args.debug:
            raise
        print(f"speceq: error: {e}", file=sys.stderr)
        return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
