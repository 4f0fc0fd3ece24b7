"""How a run's evidence travels from the analysis to the faces (issue #43, "evidence as data"): counts, no timing.

Static counts on a source tree (ROOT, default: this repository), read with ast, nothing imported:

- lines of pipeline/analysis.py and verdicts/reasons.py;
- prose lines of each: lines holding a string literal (or f-string text) of 4 words or more, docstrings excluded;
- functions of pipeline/analysis.py that make token labels (call ``tok.token`` or ``tok.text``);
- regular expressions (re.* or a compiled pattern's search/match/sub...) that read a summary, reason, failure
  or note back, in harness/, reports/ and suites/.

With ``--trace N`` it also runs the main job (``speceq run``, the built-in cases, N samples per engine, one
worker, the installed speceq) under a profiler and counts, from the first call into pipeline/analysis.py
to the end of the run, the module-level functions that receive the run's data (a SampleBatch, TokenScores,
a result of speceq.stats, an evidence, decision or result object, or a list or dict of them): the distinct
call edges into analysis.py from other modules, the modules whose functions receive the data, and the
visits (consecutive such calls in one module are one visit) with how many enter analysis.py again.

With ``--trace-kernel NAME`` it runs ``speceq kernel NAME --scale S`` (default 0.05) the same way and counts,
over the whole check, the calls (functions and methods) that receive the kernel check's data as an argument
other than ``self``: a scenario's or template's record, a parsed call, a test, a violation, a finding, a
scenario summary or the result (or a list or dict of them): the modules whose functions receive it, the visits
and how many of them return to a module already visited.

Usage: python benchmarks/evidence_structure.py [--root DIR] [--trace 100] [--trace-kernel reference:padded]
"""

from __future__ import annotations

import argparse
import ast
import collections
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
#: Attributes and names that hold words a face prints.
WORDS = {"summary", "reason", "hard_failures", "notes", "note", "failure", "failures"}
#: Methods of re and of compiled patterns that read a string.
REGEX_METHODS = {"search", "match", "fullmatch", "findall", "finditer", "sub", "subn"}


def prose_lines(path: Path) -> int:
    """Lines holding a string literal of 4 words or more (f-string text included), docstrings excluded."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docstrings = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                docstrings.add(id(first.value))
    lines = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):
            text = "".join(v.value for v in node.values if isinstance(v, ast.Constant))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            text = node.value
        else:
            continue
        if len(text.split()) >= 4:
            lines.add(node.lineno)
    return len(lines)


def token_label_functions(path: Path) -> list[str]:
    """Functions that call ``tok.token(...)`` or ``tok.text(...)``."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return [f.name for f in ast.walk(tree) if isinstance(f, ast.FunctionDef)
            and any(isinstance(n, ast.Attribute) and n.attr in ("token", "text") and isinstance(n.value, ast.Name)
                    and n.value.id == "tok" for n in ast.walk(f))]


def regex_reads(root: Path) -> list[str]:
    """file:line of every regex call whose arguments read a summary, reason, failure or note."""
    out = []
    for path in sorted(p for d in ("harness", "reports", "suites") for p in (root / d).rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in REGEX_METHODS:
                read = {n.attr for a in node.args for n in ast.walk(a) if isinstance(n, ast.Attribute)}
                read |= {n.id for a in node.args for n in ast.walk(a) if isinstance(n, ast.Name)}
                if read & WORDS:
                    out.append(f"{path.relative_to(root)}:{node.lineno}")
    return out


def static(root: Path) -> None:
    analysis, reasons = root / "harness/pipeline/analysis.py", root / "harness/verdicts/reasons.py"
    for path in (analysis, reasons):
        text = path.read_text(encoding="utf-8")
        print(f"{path.relative_to(root)}: {len(text.splitlines())} lines, {prose_lines(path)} prose lines")
    labels = token_label_functions(analysis)
    print(f"analysis.py functions making token labels: {len(labels)} ({', '.join(labels)})")
    reads = regex_reads(root)
    print(f"regular expressions reading words back: {len(reads)} ({', '.join(reads) or 'none'})")


def trace(samples: int) -> None:
    import speceq
    from speceq.engines.base import SampleBatch
    from speceq.faces.cli import main
    from speceq.stats.scores import TokenScores

    root = os.path.dirname(os.path.dirname(speceq.__file__))
    data_modules = ("speceq.stats.results", "speceq.verdicts.result", "speceq.verdicts.evidence",
                    "speceq.verdicts.decide", "speceq.verdicts.failures")

    def is_data(v: Any, deep: bool = True) -> bool:
        if isinstance(v, (SampleBatch, TokenScores)) or (type(v).__module__ in data_modules and not isinstance(v, type)):
            return True
        if deep and isinstance(v, (list, tuple)) and v:
            return any(is_data(x, False) for x in list(v)[:3])
        if deep and isinstance(v, dict) and v:
            return any(is_data(x, False) for x in list(v.values())[:3])
        return False

    def module(filename: str) -> str | None:
        if not filename.startswith(root) or "/.venv/" in filename:
            return None
        rel = os.path.relpath(filename, root)
        return os.path.splitext(rel.split(os.sep, 1)[1])[0] if rel.split(os.sep)[0] in ("harness", "reports",
                                                                                           "suites") else None

    state = {"started": False}
    visits: list[str] = []
    edges: collections.Counter = collections.Counter()

    def profile(frame: Any, event: str, arg: Any) -> None:
        if event != "call":
            return
        m = module(frame.f_code.co_filename)
        code = frame.f_code
        if m is None or code.co_varnames[:1] in (("self",), ("cls",)):
            return
        args = [frame.f_locals.get(n) for n in code.co_varnames[:code.co_argcount + code.co_kwonlyargcount]]
        if not any(is_data(a) for a in args):
            return
        state["started"] = state["started"] or m == "pipeline/analysis"
        if not state["started"]:
            return
        caller, f = None, frame.f_back
        while f is not None and caller is None:
            caller, f = module(f.f_code.co_filename), f.f_back
        edges[(caller, m, code.co_name)] += 1
        if not visits or visits[-1] != m:
            visits.append(m)

    out = tempfile.mkdtemp()
    sys.setprofile(profile)
    try:
        main(["run", "--samples", str(samples), "--chunk-size", str(samples), "--workers", "1", "--no-progress",
              "--fresh", "--out", out])
    except SystemExit:
        pass
    finally:
        sys.setprofile(None)
    into = sorted({(c, f) for (c, m, f) in edges if m == "pipeline/analysis" and c != m}, key=str)
    print(f"call edges into analysis.py from other modules: {len(into)} "
          f"({', '.join(f'{c} -> {f}' for c, f in into)})")
    print(f"modules whose functions receive the data: {len({m for (_, m, _) in edges})}")
    print(f"visits: {len(visits)}, of which into analysis.py: {visits.count('pipeline/analysis')}")


#: The kernel check's data: classes of speceq.kernels whose instances carry what was collected or decided.
KERNEL_DATA = {"ScenarioRecord", "TemplateRecord", "TreeScenarioRecord", "TreeRecord", "ModelRecord", "ParsedCall",
               "KernelTest", "Violation", "Finding", "ScenarioSummary", "KernelCheckResult"}


def trace_kernel(name: str, scale: float) -> None:
    """Modules, visits and returns of the kernel check's data in ``speceq kernel NAME --scale SCALE``."""
    import speceq
    from speceq.faces.cli import main

    root = os.path.dirname(os.path.dirname(speceq.__file__))

    def is_data(v: Any, deep: bool = True) -> bool:
        kind = type(v)
        if kind.__module__.startswith("speceq.kernels") and kind.__name__ in KERNEL_DATA:
            return True
        if deep and isinstance(v, (list, tuple)) and v:
            return any(is_data(x, False) for x in list(v)[:3])
        if deep and isinstance(v, dict) and v:
            return any(is_data(x, False) for x in list(v.values())[:3])
        return False

    def module(filename: str) -> str | None:
        if not filename.startswith(root) or "/.venv/" in filename:
            return None
        rel = os.path.relpath(filename, root)
        top = rel.split(os.sep)[0]
        return os.path.splitext(rel.split(os.sep, 1)[1])[0] if top in ("harness", "reports", "suites") else None

    visits: list[str] = []

    def profile(frame: Any, event: str, arg: Any) -> None:
        if event != "call":
            return
        m = module(frame.f_code.co_filename)
        code = frame.f_code
        if m is None:
            return
        names = code.co_varnames[:code.co_argcount + code.co_kwonlyargcount]
        if not any(is_data(frame.f_locals.get(n)) for n in names if n not in ("self", "cls")):
            return
        if not visits or visits[-1] != m:
            visits.append(m)

    sys.setprofile(profile)
    try:
        main(["kernel", name, "--scale", str(scale)])
    except SystemExit:
        pass
    finally:
        sys.setprofile(None)
    returns = sum(1 for i, m in enumerate(visits) if m in visits[:i])
    print(f"kernel check {name} (scale {scale}): modules whose functions receive the data: {len(set(visits))} "
          f"({', '.join(sorted(set(visits)))})")
    print(f"visits: {len(visits)}, of which return to a module already visited: {returns}")
    print(f"path: {' -> '.join(visits)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--root", type=Path, default=REPO, help="source tree to count (default: this repository)")
    parser.add_argument("--trace", type=int, default=0, metavar="N",
                        help="also trace the main job with N samples per engine (the installed speceq)")
    parser.add_argument("--trace-kernel", default=None, metavar="NAME",
                        help="also trace `speceq kernel NAME` (the installed speceq), e.g. reference:padded")
    parser.add_argument("--kernel-scale", type=float, default=0.05, help="--scale of the traced kernel check")
    args = parser.parse_args()
    static(args.root)
    if args.trace:
        trace(args.trace)
    if args.trace_kernel:
        trace_kernel(args.trace_kernel, args.kernel_scale)


if __name__ == "__main__":
    main()
