"""The real-model job: every check of speceq on SmolLM2-135M-Instruct, in one command (~22 CPU minutes).

    python scripts/smollm2/job.py [--out speceq-out/smollm2-job] [--samples 800] [--workers auto] [--processes auto]

Prepares the model and its draft (``speceq smollm2 prepare``, idempotent), then
runs, each with the oracle on and the cases of ``speceq.inputs.cases.smollm2_cases()``:

- ``reference`` vs ``baseline`` on the T = 1.0 batch-64 case with a ragged companion, the T = 0.7
  top-p 0.9 case and the greedy case;
- the A/A check, ``baseline`` vs ``baseline`` (independent seeds), on the T = 0.7 case;
- ``hf-assisted`` vs ``hf-sample`` and ``hf-prompt-lookup`` vs ``hf-sample`` on the unbatched case;
- the strongest mutants of the gallery (``greedy-acceptance``, ``resample-from-target``,
  ``target-no-temperature``) vs ``baseline``, with ``--mutant-samples`` samples.

Sampling cases are certified with ``--certificate pit-law`` (what that certifies:
``docs/how-to/real-model.md``); greedy cases by their equal rows. Samples of an engine role that
several runs share (the baseline of the reference run, the hf-sample baseline) are drawn once:
their chunks are copied into the later runs' stores (same seeds, same samples). When it runs in
one process (``--workers auto`` on a busy machine, or 1), each oracle is built once and shared
by the runs, and scores each distinct row once
(:class:`speceq.oracles.memo.RememberingOracle`). With ``--processes 2`` (``auto``: when two CPUs
are free) the transformers-generate runs (``hf-*``, about half the CPU time, one row at a time)
run in a second process beside the others, each process with one worker and its own shared
oracles; the two halves share no samples. Prints a verdict
table and writes ``summary.json`` in ``--out``. Exit status (:func:`job_status`): 0 when every
verdict is the expected one (equivalent for the lossless pairs, shifted for the mutants); 1 when
a decision is wrong (a lossless pair shifted, a mutant not shifted); 3 when the decisions are
right but a lossless pair stayed inconclusive (its certificate needs more samples than the
budget; exit 3 means the same in ``speceq run``); 2 on a usage or configuration error.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from speceq.engines.base import Engine
from speceq.engines.registry import check_engine_spec, resolve_engine
from speceq.errors import SpeceqError
from speceq.inputs.cases import smollm2_cases
from speceq.models.smollm2 import prepare
from speceq.oracles.build import make_oracle
from speceq.oracles.memo import RememberingOracle
from speceq.oracles.protocol import Oracle
from speceq.pipeline.collect import auto_workers
from speceq.pipeline.config import RunConfig
from speceq.pipeline.runner import run
from speceq.store import ROLES
from speceq.verdicts.notes import NoteKind
from speceq.verdicts.reasons import note_line

C1, C2, GREEDY, B1 = ("smol-capital-t1-b64-ragged", "smol-animal-t07-topp09-b64", "smol-capital-greedy-b8-ragged",
                      "smol-repeat-t1-b1")
#: Samples per stored chunk: small, so that a mutant run's first slices are the reference run's.
CHUNK = 100


@dataclass(frozen=True)
class Job:
    """One ``speceq run`` of the job: engines, cases, expected verdict, and whose baseline chunks it reuses."""

    name: str
    baseline: str
    candidate: str
    cases: tuple[str, ...]
    expect: str  # "equivalent" or "shifted"
    mutant: bool = False
    baseline_from: str | None = None


JOBS = (
    Job("reference", "baseline", "reference", (C1, C2, GREEDY), "equivalent"),
    Job("aa", "baseline", "baseline", (C2,), "equivalent", baseline_from="reference"),
    Job("hf-assisted", "hf-sample", "hf-assisted", (B1,), "equivalent"),
    Job("hf-prompt-lookup", "hf-sample", "hf-prompt-lookup", (B1,), "equivalent", baseline_from="hf-assisted"),
    Job("greedy-acceptance", "baseline", "mutant:greedy-acceptance", (C1,), "shifted", True, "reference"),
    Job("resample-from-target", "baseline", "mutant:resample-from-target", (C1,), "shifted", True, "reference"),
    Job("target-no-temperature", "baseline", "mutant:target-no-temperature", (C2,), "shifted", True, "reference"),
)


#: The jobs the second process runs with ``--processes 2``: they share their hf-sample baseline and
#: nothing with the others, and hold about half of the job's CPU time.
SECOND_PROCESS = ("hf-assisted", "hf-prompt-lookup")


#: Draft tokens per step of the speculative engines. Most answers are 1-3 tokens and end at EOS, and
#: on a CPU a batched verification of k + 1 tokens costs about k + 1 single-token steps: k = 2 keeps
#: several drafts per step (ragged acceptance) at 4.6x the baseline's CPU time per token (k = 4: ~6x,
#: k = 1: 3.6x, measured on the two batch-64 cases). hf-assisted runs one row at a time (memory-bound:
#: the verification costs about one step), where each extra draft costs almost a whole step: k = 1.
DRAFT_TOKENS = 2
HF_ASSISTANT_TOKENS = 1


#: Exit statuses of the job, worst first (:func:`job_status`).
EXIT_OK, EXIT_WRONG_DECISION, EXIT_ERROR, EXIT_UNCERTIFIED = 0, 1, 2, 3


def row_status(verdict: str, expect: str) -> int:
    """One case's status: a wrong decision (shifted where none was expected, or a planted bug not
    shifted) is :data:`EXIT_WRONG_DECISION`; an expected ``equivalent`` left ``inconclusive`` is
    :data:`EXIT_UNCERTIFIED` (the decision is right, the certificate is missing)."""
    if verdict == expect:
        return EXIT_OK
    if expect == "equivalent" and verdict == "inconclusive":
        return EXIT_UNCERTIFIED
    return EXIT_WRONG_DECISION


def job_status(statuses: list[int]) -> int:
    """The job's exit status from its parts' (cases' or processes'): an error (any status not
    one of the four, e.g. a child process killed by a signal, is one), then a wrong decision,
    then a missing certificate, else 0."""
    if any(s not in (EXIT_OK, EXIT_WRONG_DECISION, EXIT_ERROR, EXIT_UNCERTIFIED) for s in statuses):
        return EXIT_ERROR
    for worst in (EXIT_ERROR, EXIT_WRONG_DECISION, EXIT_UNCERTIFIED):
        if worst in statuses:
            return worst
    return EXIT_OK


def engine_options(spec: str, target: str, draft: str) -> dict[str, object]:
    if spec in ("baseline", "hf-sample", "hf-prompt-lookup"):
        return {"target": target}
    if spec == "hf-assisted":
        return {"target": target, "draft": draft, "num_assistant_tokens": HF_ASSISTANT_TOKENS}
    return {"target": target, "draft": draft, "k": DRAFT_TOKENS}


class Shared:
    """Oracles built once in this process and handed to every run that scores with them.

    Oracles are keyed by what they score with (the target, with or without the candidate's
    draft), each wrapped in a :class:`RememberingOracle`, so the baseline rows that the A/A and
    mutant runs reuse from the ``reference`` run, and the repeated rows of every case, are scored
    once. Engines are built afresh for each run (the models they load are loaded once per
    process anyway): engines kept for the whole job held their working buffers too (peak RSS
    of a 30-sample trial of five runs: 6.4 GB with the engines kept, 3.7 GB without, 2.9 GB
    without any sharing).
    """

    def __init__(self) -> None:
        self.oracles: dict[str, RememberingOracle] = {}

    @staticmethod
    def engines_for(config: RunConfig) -> dict[str, Engine]:
        return {role: resolve_engine(getattr(config, role), options=dict(getattr(config, f"{role}_options")))
                for role in ROLES}

    def oracle_for(self, config: RunConfig, engines: dict[str, Engine]) -> Oracle:
        spec = config.oracle_spec()
        assert spec is not None  # the job always runs with the oracle
        oracle = make_oracle(spec, engines)
        key = json.dumps(oracle.describe(), sort_keys=True, default=str)
        if key not in self.oracles:
            self.oracles[key] = RememberingOracle(oracle)
        return self.oracles[key]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="speceq-out/smollm2-job", help="output folder. Default: %(default)s")
    ap.add_argument("--samples", type=int, default=800, help="samples per engine of the lossless runs. Default: %(default)s")
    ap.add_argument("--mutant-samples", type=int, default=200, help="samples per engine of the mutant runs. "
                    "Default: %(default)s")
    ap.add_argument("--seed", type=int, default=0, help="run seed of every run (another seed: other samples, "
                    "e.g. to measure a detection rate). Default: %(default)s")
    ap.add_argument("--workers", default="auto", help="worker processes per run (auto, or a number). Default: %(default)s")
    ap.add_argument("--only", nargs="*", default=None, help="run only these jobs (names as printed)")
    ap.add_argument("--fresh", action="store_true", help="discard stored samples first")
    ap.add_argument("--processes", default="1", choices=("1", "2", "auto"),
                    help=f"2: run {', '.join(SECOND_PROCESS)} in a second process beside the others (one worker each); "
                         "auto: 2 when two CPUs are free. Default: %(default)s")
    ap.add_argument("--summary", default="summary.json", help=argparse.SUPPRESS)  # the second process's own file
    args = ap.parse_args(argv)
    out = Path(args.out)
    if args.fresh and out.exists():
        shutil.rmtree(out)
    processes = (2 if auto_workers(pending=2) >= 2 else 1) if args.processes == "auto" else int(args.processes)
    if processes == 2 and args.only is None:
        return run_split(args, out)
    workers = auto_workers(pending=2) if args.workers == "auto" else int(args.workers)
    # one process: oracles built once and shared by the runs; more: each run's own workers
    shared = Shared() if workers == 1 else None
    print(f"workers: {workers} ({'one process, oracle scores shared by the runs' if shared else 'per run'})",
          flush=True)
    start = time.perf_counter()
    try:
        world = prepare(log=lambda msg: print(f"prepare: {msg}", flush=True))
        cases = {c.case_id: c for c in smollm2_cases()}
    except SpeceqError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"prepared in {time.perf_counter() - start:.0f} s", flush=True)
    try:  # every engine spec resolves before anything runs
        for job in JOBS:
            check_engine_spec(job.baseline)
            check_engine_spec(job.candidate)
    except SpeceqError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    rows: list[dict] = []
    failed = 0
    statuses: list[int] = []
    for job in JOBS:
        if args.only is not None and job.name not in args.only:
            continue
        folder = out / job.name
        if job.baseline_from is not None:  # the same seeds give the same samples: copy, do not redraw
            src = out / job.baseline_from / "chunks" / "baseline"
            dst = folder / "chunks" / "baseline"
            if src.is_dir() and not dst.exists():
                shutil.copytree(src, dst)
        config = RunConfig(
            baseline=job.baseline, candidate=job.candidate,
            baseline_options=engine_options(job.baseline, str(world.target), str(world.draft)),
            candidate_options=engine_options(job.candidate, str(world.target), str(world.draft)),
            samples=args.mutant_samples if job.mutant else args.samples, chunk_size=CHUNK,
            certificate="tv" if job.mutant else "pit-law", out_dir=folder, progress=False, workers=workers,
            oracle_model=str(world.target), seed=args.seed,
        )
        t0 = time.perf_counter()
        try:
            if shared is None:
                result = run(config, [cases[c] for c in job.cases])
            else:
                engines = shared.engines_for(config)
                result = run(config, [cases[c] for c in job.cases], engines=engines,
                             oracle=shared.oracle_for(config, engines))
        except SpeceqError as exc:
            print(f"error in {job.name}: {exc}", file=sys.stderr)
            return 2
        seconds = time.perf_counter() - t0
        for c in result.cases:
            status = row_status(c.verdict, job.expect)
            statuses.append(status)
            ok = status == EXIT_OK
            failed += not ok
            rows.append({"job": job.name, "baseline": job.baseline, "candidate": job.candidate, "case": c.case_id,
                         "verdict": c.verdict, "expected": job.expect, "ok": ok, "n": c.n_candidate,
                         "acceptance": c.acceptance_rate, "tv_upper_bound": c.tv_upper_bound,
                         "pit_law": next((note_line(n) for n in c.notes if n.kind is NoteKind.PIT_LAW_BOUND), None),
                         "reason": c.reason, "run_seconds": seconds})
            accept = "" if c.acceptance_rate is None else f" acceptance {c.acceptance_rate:.2f}"
            label = {EXIT_OK: "ok  ", EXIT_UNCERTIFIED: "OPEN"}.get(status, "FAIL")
            print(f"{label} {job.name:<27} {c.case_id:<30} {c.verdict:<12} (expected {job.expect})"
                  f"{accept}  [{seconds:.0f} s]", flush=True)
            if not ok:
                print(f"     {c.reason}", flush=True)
    total = time.perf_counter() - start
    if shared is not None:
        for memo in shared.oracles.values():
            draft = "with" if memo.has_draft else "without"
            print(f"oracle {draft} the draft: {memo.scored_rows} rows scored, {memo.reused_rows} answered from memory",
                  flush=True)
    out.mkdir(parents=True, exist_ok=True)
    status = job_status(statuses)
    (out / args.summary).write_text(json.dumps({"seconds": total, "failed": failed, "status": status, "rows": rows},
                                               indent=2) + "\n")
    print(f"{len(rows) - failed} of {len(rows)} verdicts as expected in {total:.0f} s (summary: {out / args.summary})")
    return status


def run_split(args: argparse.Namespace, out: Path) -> int:
    """The job in two processes: :data:`SECOND_PROCESS` in a child, the rest here; one summary."""
    import subprocess

    base = [sys.executable, __file__, "--out", str(out), "--samples", str(args.samples),
            "--mutant-samples", str(args.mutant_samples), "--seed", str(args.seed), "--workers", "1"]
    first = [j.name for j in JOBS if j.name not in SECOND_PROCESS]
    print(f"processes: 2 ({', '.join(SECOND_PROCESS)} in the second)", flush=True)
    start = time.perf_counter()
    try:  # before the child starts, so that two processes never convert the model at once
        prepare(log=lambda msg: print(f"prepare: {msg}", flush=True))
    except SpeceqError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    child = subprocess.Popen([*base, "--only", *SECOND_PROCESS, "--summary", "summary-second.json"])
    rc_first = main(base[2:] + ["--only", *first, "--summary", "summary-first.json"])
    rc_second = child.wait()
    if EXIT_ERROR in (rc_first, rc_second):
        return EXIT_ERROR
    parts = [json.loads((out / name).read_text()) for name in ("summary-first.json", "summary-second.json")]
    rows = [r for part in parts for r in part["rows"]]
    failed = sum(part["failed"] for part in parts)
    total = time.perf_counter() - start
    status = job_status([rc_first, rc_second])
    (out / "summary.json").write_text(json.dumps({"seconds": total, "failed": failed, "status": status,
                                                  "rows": rows, "processes": 2}, indent=2) + "\n")
    print(f"{len(rows) - failed} of {len(rows)} verdicts as expected in {total:.0f} s, two processes "
          f"(summary: {out / 'summary.json'})")
    return status


if __name__ == "__main__":
    sys.exit(main())
