"""Power of speceq in the BPE world (V = 32 000): samples needed to catch mutants, false shifts of the reference.

The BPE world's counterpart of ``speceq power`` (docs/measurements/power.md), for the bpe cases at
batch 1 and 4 (``PAIRS``) or 32 (``--pairs batch32``), oracle on (the BPE target, with the BPE draft for the draft-drift test):

- each mutant runs on the case where its bug acts. Repetition r at size n analyses samples
  [r n, (r + 1) n) of seeded pools of the baseline and of the mutant (disjoint, independent
  repetitions, as ``speceq.power.pools.SamplePool`` draws them) with the full analysis
  (:func:`speceq.pipeline.analysis.analyse_run`), and records the smallest Holm-adjusted primary
  p-value (0 on a hard failure). A mutant is *detected* at level alpha when that p-value is
  <= alpha. Sizes are tried in increasing order until the detection rate at ``--alpha``
  reaches 90 %: that size is n90 (with R repetitions, 90 % means at least ceil(0.9 R)).
- the reference engine (lossless) runs on every case at ``--false-alarm-n`` samples for
  ``--false-alarm-reps`` repetitions: every rejection is a false shift.

The oracle scores each distinct row once (the law of a token depends only on its prefix, so
rows with the same prompt and tokens have the same scores): pools are scored once, however
many sizes slice them. Prints a markdown table and writes JSON.

    python benchmarks/bpe_power.py --reps 5 --grid 25,100,400 --out /tmp/bpe-power
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

#: (mutant, case where its bug acts). bonus-from-draft acts on the bonus token: the 1-token
#: case drafts nothing (k1 = 0), so its only token is a bonus token.
PAIRS: tuple[tuple[str, str], ...] = (
    ("bonus-from-draft", "bpe-def-b1"),
    ("resample-from-target", "bpe-import-b4-ragged"),
    ("greedy-acceptance", "bpe-import-b4-ragged"),
    ("top-k-draft-only", "bpe-raise-topk-b4"),
    ("target-no-temperature", "bpe-ignore-eos-t07-b4"),
)
#: Pairs on the batch-32 cases (with companions of other lengths; EOS-prone prompts in bpe-eos-b32).
#: wrong-positions acts on ragged batches; resample-from-target on bpe-eos-b32 acts where the draft
#: rarely proposes the target's likely <eos>, so most of the first token's mass is the residual.
BATCH32_PAIRS: tuple[tuple[str, str], ...] = (
    ("target-no-temperature", "bpe-repr-t07-b32"),
    ("wrong-positions", "bpe-repr-t07-b32"),
    ("top-p-draft-only", "bpe-class-topp-b32"),
    ("resample-from-target", "bpe-eos-b32"),
)
#: The cases at batch 1 and 4.
SMALL_BATCH_CASES = ("bpe-def-b1", "bpe-import-b4-ragged", "bpe-raise-topk-b4", "bpe-ignore-eos-t07-b4")
#: The cases at batch 32.
BATCH32_CASES = ("bpe-repr-t07-b32", "bpe-class-topp-b32", "bpe-eos-b32")
#: The per-token fields of ``speceq.stats.scores.TokenScores`` (everything but row, position, token).
FIELDS = ("prob", "cdf_before", "argmax_prob", "is_argmax", "logp", "logp_mean", "logp_var", "raw_top2_margin",
          "draft_llr", "draft_llr_mean", "draft_llr_var", "draft_tv")


class RowCachedOracle:
    """A :class:`speceq.oracles.hf.TargetOracle` that scores each distinct (prompts, params, row) once.

    ``score`` returns exactly what the wrapped oracle returns for the same batch (each row's
    fields depend only on its prompt and tokens); everything else is delegated.
    """

    def __init__(self, oracle: Any) -> None:
        self.oracle = oracle
        self.rows: dict[tuple, dict[str, np.ndarray]] = {}
        self.scored_tokens = 0
        self.seconds = 0.0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.oracle, name)

    def score(self, prompts: Any, batch: Any, params: Any) -> Any:
        from speceq.engines.base import SampleBatch
        from speceq.stats.scores import TokenScores

        if batch.rows == 0:
            return self.oracle.score(prompts, batch, params)
        head = (tuple(tuple(int(t) for t in p) for p in prompts), params)
        keys = [(head, int(batch.prompt_index[r]), tuple(batch.row_tokens(r))) for r in range(batch.rows)]
        todo = list(dict.fromkeys(k for k in keys if k not in self.rows))
        if todo:
            width = max(1, max(len(k[2]) for k in todo))
            tokens = np.zeros((len(todo), width), dtype=np.int64)
            for i, k in enumerate(todo):
                tokens[i, : len(k[2])] = k[2]
            new = SampleBatch(tokens=tokens, lengths=np.array([len(k[2]) for k in todo], dtype=np.int64),
                              prompt_index=np.array([k[1] for k in todo], dtype=np.int64))
            t0 = time.perf_counter()
            scores = self.oracle.score(prompts, new, params)
            self.seconds += time.perf_counter() - t0
            self.scored_tokens += len(scores.token)
            bounds = np.concatenate([[0], np.cumsum(new.lengths)])
            for i, k in enumerate(todo):
                self.rows[k] = {n: (None if getattr(scores, n) is None else getattr(scores, n)[bounds[i]:bounds[i + 1]])
                                for n in FIELDS}
        lengths = [len(k[2]) for k in keys]
        fields = {}
        for n in FIELDS:
            vals = [self.rows[k][n] for k in keys]
            fields[n] = None if any(v is None for v in vals) else np.concatenate(vals)
        return TokenScores(row=np.repeat(np.arange(len(keys), dtype=np.int64), lengths),
                           position=np.concatenate([np.arange(n, dtype=np.int64) for n in lengths]),
                           token=np.concatenate([np.asarray(k[2], dtype=np.int64) for k in keys]), **fields)


def min_pvalue(case: Any, base: Any, cand: Any, oracle: Any, alpha: float, seed: int) -> float:
    """Smallest Holm-adjusted primary p-value of one analysis (0 on a hard failure)."""
    from speceq.pipeline.analysis import analyse_run

    result = analyse_run([case], {case.case_id: base}, {case.case_id: cand}, oracle=oracle, alpha=alpha,
                         tolerance=0.05, seed=seed, engines={"baseline": {}, "candidate": {}}, provenance={})
    res = result.cases[0]
    if res.hard_failures:
        return 0.0
    return min((t.adjusted_pvalue for t in res.tests if t.primary and t.adjusted_pvalue is not None), default=1.0)


def main(argv: list[str] | None = None) -> int:
    import torch

    from speceq.engines.baseline import BaselineEngine
    from speceq.engines.mutants import make_mutant
    from speceq.engines.reference import ReferenceSpeculativeEngine
    from speceq.inputs.cases import bpe_cases
    from speceq.models.bpe import BPE_DRAFT_DIR, BPE_TARGET_DIR
    from speceq.oracles.hf import TargetOracle
    from speceq.power.pools import SamplePool

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--grid", default="25,100,400", help="samples per engine tried, increasing")
    ap.add_argument("--reps", type=int, default=5, help="repetitions per size")
    ap.add_argument("--pairs", default="",
                    help="comma-separated mutant@case; 'batch32': BATCH32_PAIRS (default: all of PAIRS)")
    ap.add_argument("--false-alarm-cases", default=",".join(SMALL_BATCH_CASES),
                    help="comma-separated cases of the reference runs; 'batch32': BATCH32_CASES. Default: %(default)s")
    ap.add_argument("--false-alarm-n", type=int, default=400, help="samples per engine of the reference runs")
    ap.add_argument("--false-alarm-reps", type=int, default=5, help="repetitions of the reference runs per case")
    ap.add_argument("--no-false-alarms", dest="false_alarms", action="store_false")
    ap.add_argument("--alpha", type=float, default=1e-3, help="detection level (speceq run's default: 1e-3)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=Path("bpe-power-out"))
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    grid = [int(x) for x in args.grid.split(",")]
    if args.pairs == "batch32":
        pairs = list(BATCH32_PAIRS)
    else:
        pairs = [tuple(p.split("@")) for p in args.pairs.split(",")] if args.pairs else list(PAIRS)
    fa_cases = BATCH32_CASES if args.false_alarm_cases == "batch32" else tuple(args.false_alarm_cases.split(","))
    need = math.ceil(0.9 * args.reps)
    cases = {c.case_id: c for c in bpe_cases()}
    start = time.perf_counter()

    def log(msg: str) -> None:
        print(f"[{time.perf_counter() - start:7.1f}s] {msg}", file=sys.stderr, flush=True)

    baseline = BaselineEngine(target=str(BPE_TARGET_DIR))
    draft = ReferenceSpeculativeEngine(baseline.model, str(BPE_DRAFT_DIR)).draft
    oracle = RowCachedOracle(TargetOracle(baseline.model, draft=draft))
    pools: dict[str, SamplePool] = {}

    def base_pool(cid: str) -> SamplePool:
        if cid not in pools:
            pools[cid] = SamplePool(baseline, cases[cid], seed=args.seed, label=f"baseline|{cid}", chunk=200)
        return pools[cid]

    rows: list[dict[str, Any]] = []
    for name, cid in pairs:
        case = cases[cid]
        engine = make_mutant(name, target=baseline.model, draft=draft)
        cand = SamplePool(engine, case, seed=args.seed, label=f"{name}|{cid}", chunk=200)
        sizes, rates, rates01 = [], [], []
        n90 = None
        for n in grid:
            ps = [min_pvalue(case, base_pool(cid).rep(r, n), cand.rep(r, n), oracle, args.alpha,
                             args.seed * 1_000_003 + r) for r in range(args.reps)]
            sizes.append(n)
            rates.append(float(np.mean(np.asarray(ps) <= args.alpha)))
            rates01.append(float(np.mean(np.asarray(ps) <= 0.01)))
            log(f"{name} on {cid}: n={n} detected {sum(p <= args.alpha for p in ps)}/{args.reps} "
                f"(min p {min(ps):.2g}); oracle {oracle.scored_tokens} tokens in {oracle.seconds:.0f} s")
            if sum(p <= args.alpha for p in ps) >= need:
                n90 = n
                break
        rows.append({"kind": "mutant", "candidate": f"mutant:{name}", "case": cid, "sizes": sizes, "rates": rates,
                     "rates_at_0.01": rates01, "reps": args.reps, "n90": n90})
        print(json.dumps(rows[-1]), flush=True)
    if args.false_alarms:
        reference = ReferenceSpeculativeEngine(baseline.model, draft)
        for cid in fa_cases:
            case = cases[cid]
            cand = SamplePool(reference, case, seed=args.seed, label=f"reference|{cid}", chunk=200)
            n = args.false_alarm_n
            ps = [min_pvalue(case, base_pool(cid).rep(r, n), cand.rep(r, n), oracle, args.alpha,
                             args.seed * 1_000_003 + r) for r in range(args.false_alarm_reps)]
            log(f"reference on {cid}: n={n} shifted {sum(p <= args.alpha for p in ps)}/{len(ps)} (min p {min(ps):.2g})")
            rows.append({"kind": "reference", "candidate": "reference", "case": cid, "n": n, "reps": len(ps),
                         "false_shifts": int(sum(p <= args.alpha for p in ps)),
                         "false_shifts_at_0.01": int(sum(p <= 0.01 for p in ps)), "min_p": float(min(ps))})
            print(json.dumps(rows[-1]), flush=True)
    seconds = time.perf_counter() - start
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "bpe-power.json").write_text(json.dumps({"settings": {k: str(v) for k, v in vars(args).items()},
                                                        "seconds": round(seconds, 1), "rows": rows}, indent=2) + "\n")
    print(f"\nalpha = {args.alpha:g}, {args.reps} repetitions per size; n90: smallest size detected in >= {need}/{args.reps}")
    print("\n| mutant | case | detection rate at each size (samples per engine) | n90 |")
    print("|---|---|---|---:|")
    for r in rows:
        if r["kind"] == "mutant":
            cells = ", ".join(f"{n}: {rate:.0%}" for n, rate in zip(r["sizes"], r["rates"]))
            n90 = r["n90"] if r["n90"] else "> " + str(r["sizes"][-1])
            print(f"| `{r['candidate']}` | `{r['case']}` | {cells} | {n90} |")
    refs = [r for r in rows if r["kind"] == "reference"]
    if refs:
        print("\n| reference vs baseline | samples per engine | false shifts at alpha | at 0.01 | smallest p |")
        print("|---|---:|---:|---:|---:|")
        for r in refs:
            print(f"| `{r['case']}` | {r['n']} | {r['false_shifts']}/{r['reps']} | {r['false_shifts_at_0.01']}/{r['reps']} "
                  f"| {r['min_p']:.2g} |")
    print(f"\ntotal {seconds:.0f} s (oracle: {oracle.scored_tokens} distinct tokens in {oracle.seconds:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
