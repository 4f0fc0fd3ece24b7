"""Compare two speceq results of the same samples: transformers oracle vs server oracle.

Usage: python scripts/vllm/compare_oracles.py TRANSFORMERS_RESULT.json SERVER_RESULT.json [--server-subset] [--not-shifted]

Prints one line per case: both verdicts and the oracle tests' p-values side by side (the
baseline A/A PIT of each oracle too). Exit 1 when a case is shifted under one oracle and not
under the other, or (``--not-shifted``, the A/A run) when a case is shifted under the server
oracle; 0 otherwise. ``--server-subset``: the server run scored only some of the cases (a top-K
server oracle scores plain temperature-1 cases only); the others are listed, not compared. With
``--server-subset``, a case shifted under one oracle only is not a disagreement either when the
test that decided it did not run under the other oracle (a top-K oracle runs no log-likelihood
comparison): its line is marked ``~~`` and says so; cases decided by a hard failure or by a test
both oracles ran are compared as before.
Standard library only (runs with any python).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from speceq.verdicts.notes import notes_from_saved
from speceq.verdicts.reasons import note_lines

ORACLE_TESTS = ("PIT Anderson-Darling", "z argmax leak", "z temperature drift", "chi2 GOF first token",
                "baseline vs oracle PIT Anderson-Darling")


def _cases(path: Path) -> dict[str, dict]:
    return {c["case_id"]: c for c in json.loads(path.read_text())["cases"]}


def _p(case: dict, name: str) -> str:
    hit = [t for t in case.get("tests", []) if t["name"] == name]
    return f"{hit[0]['pvalue']:.3g}" if hit else "not run"


def _deciding(case: dict, alpha: float) -> str | None:
    """The primary test that made ``case`` shifted (smallest Holm-adjusted p <= alpha); None when
    none did (a hard failure or a greedy mismatch decided it, or the case is not shifted)."""
    rejecting = [t for t in case.get("tests", []) if t.get("primary") and t.get("adjusted_pvalue") is not None
                 and t["adjusted_pvalue"] <= alpha]
    if case.get("hard_failures") or not rejecting:
        return None
    return min(rejecting, key=lambda t: (t["adjusted_pvalue"], t["pvalue"]))["name"]


def _ran(case: dict, name: str) -> bool:
    return any(t["name"] == name for t in case.get("tests", []))


def main(argv: list[str]) -> int:
    flags = argv[2:]
    if len(argv) < 2 or any(f not in ("--not-shifted", "--server-subset") for f in flags) or len(set(flags)) < len(flags):
        print(__doc__, file=sys.stderr)
        return 2
    ref, srv = _cases(Path(argv[0])), _cases(Path(argv[1]))
    alpha = {side: json.loads(Path(path).read_text()).get("alpha", 1e-3) for side, path in zip(("ref", "srv"), argv)}
    not_shifted = "--not-shifted" in flags
    subset = "--server-subset" in flags
    status = 0
    print(f"   {'case':24} {'transformers oracle':20} {'server oracle':20} oracle-test p-values (transformers / server)")
    for cid, a in ref.items():
        b = srv.get(cid)
        if b is None:
            if subset:
                print(f"   {cid:24} {a['verdict']:20} {'(not scored)':20}")
                continue
            print(f"!! case {cid} missing from {argv[1]}", file=sys.stderr)
            status = 1
            continue
        ps = "; ".join(f"{n}: {_p(a, n)} / {_p(b, n)}" for n in ORACLE_TESTS if _p(a, n) != "not run" or _p(b, n) != "not run")
        flag, why = "  ", ""
        if (a["verdict"] == "shifted") != (b["verdict"] == "shifted"):
            shifted, other, side = (a, b, "ref") if a["verdict"] == "shifted" else (b, a, "srv")
            test = _deciding(shifted, alpha[side])
            if subset and test is not None and not _ran(other, test):
                flag = "~~"
                why = (f"      not compared: the {'transformers' if side == 'ref' else 'server'} oracle's verdict "
                       f"was decided by the {test}, which did not run under the other oracle")
            else:
                flag, status = "!!", 1
        if not_shifted and b["verdict"] == "shifted":
            flag, status = "!!", 1
        print(f"{flag} {cid:24} {a['verdict']:20} {b['verdict']:20} {ps}")
        if why:
            print(why)
        for note in note_lines(notes_from_saved(b.get("notes"))):  # records (older results: sentences) in words
            if "oracle" in note:
                print(f"      server oracle note: {note}")
    print("== oracles agree" if status == 0 else "!! the oracles disagree (see !! lines)")
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
