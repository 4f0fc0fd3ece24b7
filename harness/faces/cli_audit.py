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
import json
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HELP = "run the conformance matrix of an engine family: every method x sampling setting x batch shape"


@dataclass(frozen=True, slots=True)
class Family:
    """An engine family: its plain sampler (the baseline), the registry-name prefix of its methods and
    the processing order its engines apply request fields in (the request-field settings use it)."""

    baseline: str
    prefix: str
    processing: str = "vllm"


#: The families ``speceq audit`` knows.
FAMILIES: dict[str, Family] = {"transformers": Family(baseline="hf-sample", prefix="hf-", processing="hf")}


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
    from speceq.pipeline.audit import FIELD_SETTINGS, SETTINGS, SHAPES

    p.add_argument("family", choices=[*FAMILIES, "openai"],
                   help="engine family to audit: transformers (the registry's hf-* engines against hf-sample) or "
                        "openai (the servers of --servers against their plain one)")
    p.add_argument("--servers", default=None, metavar="FILE",
                   help="openai: a JSON file naming OpenAI-compatible endpoints, exactly one of them plain (the "
                        "baseline); see docs/how-to/audit-an-engine.md")
    p.add_argument("--models", default=None, choices=WORLDS,
                   help="bundled model world the engines and cases use (as speceq run --models); a method this "
                        "world cannot run is a 'not run' row. Default: transformers: each method in its own world "
                        "(byte, or the one world it runs in: hf-mtp in mtp, ...), one audit per world under "
                        "OUT/worlds/, joined into one matrix; openai: byte")
    p.add_argument("--methods", type=_names, default=None, metavar="A,B",
                   help="audit only these methods (engine names; an unknown one is a 'not run' row). "
                        "Default: every built-in method of the family")
    p.add_argument("--settings", type=_names, default=None, metavar="S,T",
                   help=f"these settings, of {', '.join(s.name for s in SETTINGS)} and the request-field settings "
                        f"{', '.join(s.name for s in FIELD_SETTINGS)}. Default: all but the request-field ones")
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


#: Subfolder of ``--out`` holding one audit per model world when ``--models`` is not given.
WORLDS_DIR = "worlds"


def method_world(name: str) -> str:
    """The world a method of ``speceq audit transformers`` runs in when no ``--models`` is given: the one
    world its engine declares it runs in (:func:`speceq.models.worlds.home_world`), else the default."""
    from speceq.models.worlds import DEFAULT_WORLD, home_world

    return home_world(name) or DEFAULT_WORLD


def build_plans(args: argparse.Namespace) -> list[Any]:
    """The audits of the command line, one :class:`~speceq.pipeline.audit.AuditPlan` per model world:
    with ``--models`` (or for openai) one plan in ``--out``; else (transformers) the family's methods
    grouped by :func:`method_world`, each world's plan in ``--out/worlds/<world>`` (default world
    first, then in :data:`~speceq.models.worlds.WORLDS` order). ConfigError on bad input."""
    from speceq.models.worlds import DEFAULT_WORLD, WORLDS

    if args.models is not None or args.family == "openai":
        return [build_plan(args)]
    names = args.methods if args.methods is not None else family_methods(args.family)
    groups: dict[str, list[str]] = {}
    for name in names:
        groups.setdefault(method_world(name), []).append(name)
    rank = {w: i for i, w in enumerate((DEFAULT_WORLD, *WORLDS))}
    return [build_plan(args, world=w, methods=groups[w], out_dir=Path(args.out) / WORLDS_DIR / w)
            for w in sorted(groups, key=rank.__getitem__)] or [build_plan(args)]


def build_plan(args: argparse.Namespace, *, world: str | None = None, methods: list[str] | None = None,
               out_dir: Path | None = None) -> Any:
    """The :class:`~speceq.pipeline.audit.AuditPlan` of the command line (ConfigError on bad input);
    ``world`` / ``methods`` / ``out_dir``: this world's part of a multi-world audit (default: the
    command line's ``--models`` (else byte), ``--methods`` and ``--out``)."""
    from speceq.core.defaults import SUPPORT_MARGIN_NATS_BY_WORLD, SUPPORT_MARGIN_OFF
    from speceq.errors import ConfigError
    from speceq.models.worlds import DEFAULT_WORLD, runs_world_models, world_engine_options
    from speceq.pipeline.audit import SHAPES, AuditPlan, pick, pick_settings
    from speceq.pipeline.config import RunConfig

    world = world or args.models or DEFAULT_WORLD
    processing = "vllm"  # openai: the servers apply the fields in vLLM's order
    prompt, companion = world_prompts(world)
    if args.family == "openai":
        if args.servers is None:
            raise ConfigError("give the servers file: speceq audit openai --servers FILE", where="--servers")
        servers = load_servers(args.servers, world)
        baseline, baseline_options, oracle = "openai", servers.baseline_options, False  # no local target to score with
        methods = servers.methods
        if args.methods is not None:
            known = {m.name: m for m in methods}
            unknown = [n for n in args.methods if n not in known]
            if unknown:
                raise ConfigError(f"unknown server(s) {', '.join(map(repr, unknown))}; {args.servers} names "
                                  f"{', '.join(known)}", where="--methods")
            methods = tuple(known[n] for n in args.methods)
        prompt, companion = servers.prompt_ids or prompt, servers.companion_ids or companion
        margin = SUPPORT_MARGIN_OFF
    else:
        if args.servers is not None:
            raise ConfigError("--servers is for speceq audit openai", where="--servers")
        fam = FAMILIES[args.family]
        names = methods if methods is not None else args.methods if args.methods is not None \
            else family_methods(args.family)
        if not names:
            raise ConfigError(f"the registry has no {args.family} method (no built-in engine named {fam.prefix}*)",
                              where="--methods")
        methods = tuple(_world_method(world, n) for n in names)
        own = all(runs_world_models(s, {}) for s in (fam.baseline, *names))
        margin = SUPPORT_MARGIN_NATS_BY_WORLD.get(world, SUPPORT_MARGIN_OFF) if own else SUPPORT_MARGIN_OFF
        baseline, baseline_options, oracle = fam.baseline, world_engine_options(world, fam.baseline, {}), args.oracle
        processing = fam.processing
    run = RunConfig(samples=args.samples, chunk_size=args.chunk_size, seed=args.seed, alpha=args.alpha,
                    tolerance=args.tolerance, oracle=oracle, threads=args.threads, workers=1, progress=False,
                    support_margin_nats=margin)
    return AuditPlan(family=args.family, baseline=baseline, baseline_options=baseline_options, methods=methods,
                     prompt_ids=prompt, companion_ids=companion, settings=pick_settings(args.settings),
                     shapes=pick(SHAPES, args.shapes, "shape"), run=run, out_dir=out_dir or Path(args.out),
                     world=world, processing=processing)


def _world_method(world: str, name: str) -> Any:
    """The row of method ``name`` in ``world`` (an ``AuditMethod``); one that needs another world is planned
    as ``not run``, so the other rows still run."""
    from speceq.errors import ConfigError
    from speceq.models.worlds import world_engine_options
    from speceq.pipeline.audit import AuditMethod

    try:
        return AuditMethod(name, name, world_engine_options(world, name, {}))
    except ConfigError as e:
        if e.where != "--models":
            raise
        return AuditMethod(name, name, {}, problem=str(e))


@dataclass(frozen=True, slots=True)
class Servers:
    """A servers file: the plain endpoint's options (the baseline), the others as methods, and the
    prompt ids to use instead of the world's (None: the world's)."""

    baseline_options: dict[str, Any]
    methods: tuple[Any, ...]
    prompt_ids: tuple[int, ...] | None
    companion_ids: tuple[int, ...] | None


#: Keys of one server entry, and of the file.
SERVER_KEYS = ("name", "url", "model", "plain", "options")
SERVERS_FILE_KEYS = ("servers", "options", "prompt_ids", "companion_ids")


def load_servers(path: str, world: str) -> Servers:
    """Read a servers file (JSON)::

        {"options": {...every server's openai engine options...},
         "servers": [{"name": "plain", "url": "http://host:8000", "model": "m", "plain": true},
                     {"name": "ngram", "url": "http://host:8001", "model": "m", "options": {...}}],
         "prompt_ids": [..], "companion_ids": [..]}

    Exactly one server is ``plain``: the baseline. ``name``, ``url`` and ``model`` (the served model's
    name) are required. A server's engine options are ``base_url`` (its url), ``model``, the file's
    ``options`` and its own, and the world's tokenizer unless the options
    set ``tokenizer`` or ``vocab_size``. ConfigError names the file, the server and the field.
    """
    from speceq.errors import ConfigError
    from speceq.models.worlds import world_engine_options
    from speceq.pipeline.audit import AuditMethod

    try:
        doc = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"cannot read the servers file: {e}", where=path) from None
    except ValueError as e:
        raise ConfigError(f"not JSON: {e}", where=path) from None
    if not isinstance(doc, dict) or not isinstance(doc.get("servers"), list) or not doc["servers"]:
        raise ConfigError('expected an object with a non-empty "servers" list', where=path)
    unknown = sorted(set(doc) - set(SERVERS_FILE_KEYS))
    if unknown:
        raise ConfigError(f"unknown key(s) {unknown}; expected some of {list(SERVERS_FILE_KEYS)}", where=path)
    shared = doc.get("options", {})
    if not isinstance(shared, dict):
        raise ConfigError("expected an object of engine options", where=f"{path}: options")
    plain, methods = [], []
    for i, entry in enumerate(doc["servers"]):
        where = f"{path}: servers[{i}]"
        if not isinstance(entry, dict):
            raise ConfigError("expected an object with name and url", where=where)
        where = f"{path}: servers[{i}] ({entry.get('name')!r})"
        bad = sorted(set(entry) - set(SERVER_KEYS))
        if bad:
            raise ConfigError(f"unknown key(s) {bad}; expected some of {list(SERVER_KEYS)}", where=where)
        for key in ("name", "url", "model"):  # model: without it the engine learns it at its first call, which
            # changes its identity mid-audit, and the shared baseline samples would no longer match it
            if not isinstance(entry.get(key), str) or not entry[key]:
                raise ConfigError(f"expected a non-empty string {key!r}", where=where)
        own = entry.get("options", {})
        if not isinstance(own, dict) or not isinstance(entry.get("plain", False), bool):
            raise ConfigError("expected options to be an object and plain true or false", where=where)
        options = {"base_url": entry["url"], "model": entry["model"], **shared, **own, "name": entry["name"]}
        if "tokenizer" in options or "vocab_size" in options:
            options = dict(options)
        else:
            options = world_engine_options(world, "openai", options)
        (plain if entry.get("plain") else methods).append(AuditMethod(entry["name"], "openai", options))
    if len(plain) != 1:
        raise ConfigError(f"expected exactly one server with \"plain\": true (the baseline), got {len(plain)}",
                          where=path)
    if not methods:
        raise ConfigError("no server to audit besides the plain one", where=path)

    def ids(key: str) -> tuple[int, ...] | None:
        v = doc.get(key)
        if v is None:
            return None
        if not isinstance(v, list) or not v or not all(isinstance(t, int) and not isinstance(t, bool) and t >= 0
                                                        for t in v):
            raise ConfigError("expected a non-empty list of token ids", where=f"{path}: {key}")
        return tuple(v)

    return Servers(dict(plain[0].options), tuple(methods), ids("prompt_ids"), ids("companion_ids"))


def world_prompts(world: str) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(prompt, companion of another length) of a world: its first default case's prompt, and the
    first companion among its cases (else its second case's prompt)."""
    from speceq.inputs.cases import bpe_cases, default_cases, smollm2_cases

    cases = {"bpe": bpe_cases, "smollm2": smollm2_cases}.get(world, default_cases)()
    companion = next((c.companions[0] for c in cases if c.companions), cases[1].prompt_ids)
    return tuple(cases[0].prompt_ids), tuple(companion)


def cell_command(args: argparse.Namespace, plan: Any) -> Any:
    """The reproducing ``speceq run`` of a cell: the plan's world, baseline, method, its column's cases
    file, the audit's budget and the cell's folder (its stored samples are reused)."""
    from speceq.pipeline.audit import folder_name

    def options(flag: str, opts: Any) -> list[str]:
        return [w for k, v in opts.items() for w in (flag, f"{k}={v if isinstance(v, str) else json.dumps(v)}")]

    def command(method: Any, case: Any, cell_dir: Path) -> str:
        words = ["speceq", "run", "--models", plan.world, "--baseline", plan.baseline, "--candidate", method.spec]
        if args.family == "openai":  # the servers' options; a world's tokenizer is filled in by --models again
            words += options("--baseline-option", plan.baseline_options) + options("--candidate-option", method.options)
        words += ["--cases", str(plan.out_dir / "cases" / f"{folder_name(case.case_id)}.json"),
                 "--samples", str(args.samples), "--chunk-size", str(args.chunk_size), "--seed", str(args.seed),
                 "--alpha", f"{args.alpha:g}", "--tolerance", f"{args.tolerance:g}", "--out", str(cell_dir)]
        if not plan.run.oracle:
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
    worlds = list(dict.fromkeys(w for m in result.methods if (w := result.world_of(m)) is not None))
    several = len(worlds) > 1
    where = f"worlds {', '.join(worlds)}" if several else f"world {plain_text(str(result.world))}"
    lines = [f"### speceq audit {plain_text(result.family)}: {head}", "",
             f"baseline {code_span(result.baseline, table_cell=False)} · {where} · "
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
                tv = "TV" if c.tv_estimate is None else f"TV {fmt(c.tv_estimate)}"  # greedy cells: no TV estimate
                cells.append(f"**{c.word()}** {tv} ≤ {fmt(c.tv_upper_bound)}{accept}")
            else:
                cells.append(f"{c.word()}: {plain_text(c.reason)}")
        world = f" ({plain_text(str(result.world_of(m)))})" if several else ""
        lines.append(f"| {code_span(m)}{world} | " + " | ".join(cells) + " |")
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
    from speceq.pipeline.audit import AUDIT_JSON, join_audits, run_audit

    plans = build_plans(args)
    out = Path(args.out)
    check_run_outputs(out)
    parts = []
    for plan in plans:
        if len(plans) > 1:
            print(f"world {plan.world}: {', '.join(m.name for m in plan.methods)} (in {plan.out_dir})",
                  file=sys.stderr, flush=True)
        parts.append((run_audit(plan, command=cell_command(args, plan)), plan.out_dir))
    if plans[0].out_dir == out:
        result = parts[0][0]
    else:  # one audit per world: their rows joined into one matrix in --out
        from speceq.store import write_json_atomic

        order = args.methods if args.methods is not None else family_methods(args.family)  # as given: rows
        result = join_audits(parts, out, order=order)
        write_json_atomic(out / AUDIT_JSON, result.to_dict())
    written = write_outputs(result, out)
    if args.json:
        print(result.to_json())
    else:
        print(audit_markdown(result), end="")
        print(f"audit: {', '.join(str(p) for p in [out / AUDIT_JSON, *written])} "
              f"({result.wall_s:.0f} s)", file=sys.stderr)
    return result.exit_code


__all__ = ["FAMILIES", "HELP", "SERVERS_FILE_KEYS", "SERVER_KEYS", "WORLDS_DIR", "Family", "Servers", "add_arguments",
           "audit_markdown", "build_plan", "build_plans", "cell_command", "family_methods", "handle", "load_servers",
           "method_world", "world_prompts", "write_outputs"]
