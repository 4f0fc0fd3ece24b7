"""GPU check: greedy divergence by dtype and batch size, and whether bf16 speculation is detectable.

Prepared for one H200 (torch 2.11 + CUDA, transformers 5.17, no registry access); runs on a
CPU as a smoke test (``--device cpu --tokens 2000``). Writes ``gpu-check.md`` and
``gpu-check.json`` under ``--out`` (default ``$OUT`` or ``./gpu-report``).

Part 1, greedy (temperature 0): the project's baseline and reference speculative engines at
batch sizes 1 and 32, and transformers' assisted generation (batch size 1 only), in float32,
bfloat16 and float16, on ``--greedy-prompts`` prompts of different lengths. Every row is
compared with the float32 baseline at batch size 1; each first divergence is classified by
the float32 target's raw top-2 log-probability margin at that prefix (near-tie when
<= ``speceq.pipeline.greedy.NEAR_TIE_NATS``, else a real mismatch).

Part 2, sampling (temperature 1): float32 plain, bfloat16 plain and bfloat16 reference
speculative samples of a few cases (batch size 32), up to ``--tokens`` generated tokens per
engine (time-boxed), analysed with :func:`speceq.pipeline.analysis.analyse_run` against the float32
oracle at 10 % of the tokens and at all of them: is bf16 speculation distinguishable from bf16
plain sampling (two-sample tests), and from the float32 target (oracle tests)?
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[2]


sys.path.insert(0, str(REPO))  # tools/ of this checkout
from tools.checkout_import import import_speceq_from_checkout  # noqa: E402

import_speceq_from_checkout()  # a bare checkout (no pip install) maps speceq onto harness/

from speceq.core.defaults import NEAR_TIE_NATS  # noqa: E402
from speceq.core.params import SamplingParams  # noqa: E402
from speceq.engines.base import SampleBatch, SampleRequest, validate_batch  # noqa: E402
from speceq.inputs.cases import Case  # noqa: E402
from speceq.models import ByteTokenizer  # noqa: E402
from speceq.models.prompts import DEFAULT_PROMPTS  # noqa: E402
from speceq.pipeline.greedy import classify_margin, first_divergence  # noqa: E402

DTYPES = ("float32", "bfloat16", "float16")
GREEDY_BATCH_SIZES = (1, 32)


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def greedy_prompts(count: int) -> list[tuple[int, ...]]:
    """``count`` prompts of different lengths: the default prompts, then prefixes of stdlib sources."""
    import sysconfig

    tok = ByteTokenizer()
    texts = list(DEFAULT_PROMPTS)
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    files = sorted(p for p in stdlib.glob("*.py") if p.stat().st_size > 2000)
    rng = np.random.default_rng(0)
    for i, path in enumerate(files):
        if len(texts) >= count:
            break
        data = path.read_bytes()
        start = int(rng.integers(0, len(data) - 200))
        length = 6 + (i * 7) % 58
        texts.append(data[start : start + length].decode("utf-8", errors="replace"))
    return [tuple(tok.encode(t))[:80] for t in texts[:count]]


def make_engine(kind: str, device: str, dtype: str) -> Any:
    if kind == "baseline":
        from speceq.engines.baseline import BaselineEngine

        return BaselineEngine(device=device, dtype=dtype, name=f"baseline-{dtype}")
    if kind == "reference":
        from speceq.engines.reference import ReferenceSpeculativeEngine

        return ReferenceSpeculativeEngine(device=device, dtype=dtype, k=4, name=f"reference-{dtype}")
    if kind == "hf-assisted":
        from speceq.engines.hf import HFAssistedEngine

        return HFAssistedEngine(device=device, dtype=dtype, num_assistant_tokens=4, name=f"hf-assisted-{dtype}")
    raise ValueError(kind)


def timed_sample(engine: Any, request: SampleRequest) -> tuple[SampleBatch, float]:
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    started = time.perf_counter()
    batch = engine.sample(request)
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    validate_batch(batch, request, engine)
    return batch, time.perf_counter() - started


def greedy_part(args: argparse.Namespace, oracle: Any) -> list[dict[str, Any]]:
    prompts = greedy_prompts(args.greedy_prompts)
    params = SamplingParams(temperature=0.0, max_new_tokens=args.greedy_len, ignore_eos=True)
    runs: list[tuple[str, str, int]] = []
    for dtype in DTYPES:
        for kind in ("baseline", "reference"):
            runs += [(kind, dtype, bs) for bs in GREEDY_BATCH_SIZES]
        runs.append(("hf-assisted", dtype, 1))
    truth: SampleBatch | None = None
    rows_out: list[dict[str, Any]] = []
    engines: dict[tuple[str, str], Any] = {}
    for kind, dtype, bs in runs:
        engine = engines.get((kind, dtype)) or engines.setdefault((kind, dtype), make_engine(kind, args.device, dtype))
        request = SampleRequest(prompts=tuple(prompts), params=params, n=1, seed=0, batch_size=bs)
        batch, seconds = timed_sample(engine, request)
        if truth is None:
            truth = batch  # float32 baseline, batch size 1 (the first run)
        divergences, margins = [], []
        prefixes = []
        for r in range(batch.rows):
            d = first_divergence(truth.tokens[r, : truth.lengths[r]], batch.tokens[r, : batch.lengths[r]])
            if d is not None:
                divergences.append((r, d))
                prefixes.append(list(prompts[int(batch.prompt_index[r])]) + list(d.prefix))
        if prefixes:
            margins = [float(m) for m in oracle.raw_top2_margin(prefixes)]
        classes = [classify_margin(m) for m in margins]
        rows_out.append({
            "engine": kind, "dtype": dtype, "batch_size": bs, "rows": batch.rows, "seconds": round(seconds, 3),
            "divergent_rows": len(divergences), "divergence_rate": len(divergences) / batch.rows,
            "near_ties": classes.count("near-tie"), "mismatches": classes.count("mismatch"),
            "max_near_tie_margin": max((m for m, c in zip(margins, classes) if c == "near-tie"), default=None),
            "min_mismatch_margin": min((m for m, c in zip(margins, classes) if c == "mismatch"), default=None),
            "first_positions": [d.position for _, d in divergences[:10]],
            "acceptance_rate": batch.acceptance_rate,
        })
        log(f"greedy {kind:12s} {dtype:9s} bs={bs:2d}: {len(divergences)}/{batch.rows} rows diverge "
            f"({classes.count('near-tie')} near-tie, {classes.count('mismatch')} mismatch) in {seconds:.1f} s")
    return rows_out


def sampling_cases(args: argparse.Namespace) -> list[Case]:
    tok = ByteTokenizer()
    texts = [DEFAULT_PROMPTS[i] for i in (0, 4, 7, 10)]
    return [
        Case(case_id=f"t1-{i}", prompt_ids=tuple(tok.encode(t)), text=t, batch_size=32,
             params=SamplingParams(temperature=1.0, max_new_tokens=args.sample_len),
             companions=(tuple(tok.encode(DEFAULT_PROMPTS[(i + 3) % len(DEFAULT_PROMPTS)])),))
        for i, t in enumerate(texts)
    ]


def collect(engine: Any, cases: list[Case], tokens: int, seconds: float, seed: int) -> tuple[dict[str, SampleBatch], int, float]:
    """Rows per case until ``tokens`` generated tokens in all (or the time box is spent)."""
    from speceq.engines.base import batch_from_lists

    parts: dict[str, list[SampleBatch]] = {c.case_id: [] for c in cases}
    generated, started, round_ = 0, time.perf_counter(), 0
    per_round = max(32, min(2048, tokens // (len(cases) * 2 * cases[0].params.max_new_tokens) or 32))
    while generated < tokens and (time.perf_counter() - started < seconds or round_ == 0):
        for case in cases:
            request = SampleRequest(prompts=tuple(tuple(p) for p in case.prompts), params=case.params, n=per_round,
                                    seed=seed * 1_000_003 + round_ * 101 + len(parts[case.case_id]), batch_size=case.batch_size)
            batch, _ = timed_sample(engine, request)
            parts[case.case_id].append(batch)
            generated += int(batch.lengths.sum())
        round_ += 1
    out = {}
    for cid, batches in parts.items():
        rows = [b.row_tokens(r) for b in batches for r in range(b.rows)]
        index = np.concatenate([b.prompt_index for b in batches])
        out[cid] = batch_from_lists(rows, index, batches[0].tokens.shape[1])
    return out, generated, time.perf_counter() - started


def head(batches: dict[str, SampleBatch], fraction: float) -> dict[str, SampleBatch]:
    """The first ``fraction`` of every case's rows (whole rounds of the prompt layout)."""
    from speceq.engines.base import SampleBatch as SB

    out = {}
    for cid, b in batches.items():
        prompts = int(b.prompt_index.max()) + 1
        keep = max(prompts, int(b.rows * fraction) // prompts * prompts)
        out[cid] = SB(tokens=b.tokens[:keep], lengths=b.lengths[:keep], prompt_index=b.prompt_index[:keep])
    return out


def verdicts(cases: list[Case], base: dict[str, SampleBatch], cand: dict[str, SampleBatch], oracle: Any, label: str) -> dict[str, Any]:
    from speceq.pipeline.analysis import analyse_run

    result = analyse_run(cases, base, cand, oracle=oracle, alpha=1e-3, tolerance=0.01, seed=0,
                         engines={"baseline": {"name": label.split(" vs ")[1]}, "candidate": {"name": label.split(" vs ")[0]}},
                         provenance={})
    per_case = []
    for c in result.cases:
        primary = [t for t in c.tests if t.primary]
        smallest = min(primary, key=lambda t: t.adjusted_pvalue if t.adjusted_pvalue is not None else 1.0, default=None)
        pit_base = next((t for t in c.tests if "baseline" in t.name.lower() and "pit" in t.name.lower()), None)
        per_case.append({
            "case": c.case_id, "verdict": c.verdict, "tv": c.tv_estimate, "tv_upper": c.tv_upper_bound,
            "tokens": c.candidate_tokens,
            "smallest_adjusted_p": None if smallest is None else smallest.adjusted_pvalue,
            "smallest_test": None if smallest is None else smallest.name,
            "baseline_pit_p": None if pit_base is None else pit_base.pvalue,
        })
    return {"comparison": label, "verdict": result.verdict, "cases": per_case}


def sampling_part(args: argparse.Namespace, oracle: Any, started: float) -> dict[str, Any]:
    cases = sampling_cases(args)
    samples, info = {}, {}
    engines = (("baseline", "float32"), ("baseline", "bfloat16"), ("reference", "bfloat16"))
    for i, (kind, dtype) in enumerate(engines):
        # time box: what is left of --budget-s, less a reserve for the analysis, shared by the engines left
        left = args.budget_s - (time.perf_counter() - started) - args.analysis_reserve_s
        box = max(1.0, min(args.collect_seconds, left / (len(engines) - i)))
        engine = make_engine(kind, args.device, dtype)
        batches, generated, seconds = collect(engine, cases, args.tokens, box, seed=len(samples) + 1)
        samples[(kind, dtype)] = batches
        info[f"{kind}-{dtype}"] = {"tokens": generated, "seconds": round(seconds, 2), "tokens_per_s": round(generated / seconds, 1)}
        log(f"sampled {kind} {dtype}: {generated} tokens in {seconds:.1f} s")
        del engine
    comparisons = []
    for fraction in (0.1, 1.0):
        f32, bf16, spec = (head(samples[k], fraction) for k in (("baseline", "float32"), ("baseline", "bfloat16"), ("reference", "bfloat16")))
        t0 = time.perf_counter()
        comparisons.append({"fraction": fraction, **verdicts(cases, f32, bf16, oracle, "bf16 plain vs fp32 plain")})
        comparisons.append({"fraction": fraction, **verdicts(cases, bf16, spec, oracle, "bf16 speculative vs bf16 plain")})
        log(f"analysed {fraction:.0%} of the samples in {time.perf_counter() - t0:.1f} s")
    return {"collection": info, "comparisons": comparisons}


def environment(device: str) -> dict[str, Any]:
    import transformers

    env = {"python": platform.python_version(), "torch": torch.__version__, "transformers": transformers.__version__,
           "device": device, "cuda": torch.version.cuda, "host": platform.node()}
    if device.startswith("cuda") and torch.cuda.is_available():
        env["gpu"] = torch.cuda.get_device_name(0)
    return env


def markdown(report: dict[str, Any]) -> str:
    lines = ["# speceq GPU check", "", "```", json.dumps(report["environment"], indent=1), "```", "",
             f"## Greedy divergence vs float32 baseline at batch size 1 (near-tie: top-2 margin <= {NEAR_TIE_NATS} nats)", "",
             "| engine | dtype | batch | rows | divergent | rate | near-tie | mismatch | max near-tie margin | min mismatch margin | s |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in report["greedy"]:
        lines.append(f"| {r['engine']} | {r['dtype']} | {r['batch_size']} | {r['rows']} | {r['divergent_rows']} | "
                     f"{r['divergence_rate']:.3f} | {r['near_ties']} | {r['mismatches']} | {r['max_near_tie_margin']} | "
                     f"{r['min_mismatch_margin']} | {r['seconds']} |")
    s = report["sampling"]
    lines += ["", "## Sampling: is bf16 distinguishable? (alpha 1e-3, float32 oracle)", "",
              "| engine | tokens | seconds | tokens/s |", "|---|---|---|---|"]
    lines += [f"| {k} | {v['tokens']} | {v['seconds']} | {v['tokens_per_s']} |" for k, v in s["collection"].items()]
    lines += ["", "| fraction | comparison | run verdict | case | verdict | TV | TV bound | smallest adj. p (test) | baseline PIT p |",
              "|---|---|---|---|---|---|---|---|---|"]
    for c in s["comparisons"]:
        for k in c["cases"]:
            lines.append(f"| {c['fraction']:.0%} | {c['comparison']} | {c['verdict']} | {k['case']} | {k['verdict']} | "
                         f"{k['tv']} | {k['tv_upper']} | {k['smallest_adjusted_p']} ({k['smallest_test']}) | {k['baseline_pit_p']} |")
    lines += ["", f"Total time: {report['seconds']:.1f} s", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda", help="cuda or cpu (smoke test). Default: %(default)s")
    p.add_argument("--tokens", type=int, default=1_000_000, help="sampled tokens per engine. Default: %(default)s")
    p.add_argument("--collect-seconds", type=float, default=90.0, help="most seconds per sampling engine. Default: %(default)s")
    p.add_argument("--budget-s", type=float, default=420.0, help="whole-check time budget the sampling boxes shrink to. Default: %(default)s")
    p.add_argument("--analysis-reserve-s", type=float, default=60.0, help="seconds kept for the analysis. Default: %(default)s")
    p.add_argument("--greedy-prompts", type=int, default=64, help="prompts of the greedy part. Default: %(default)s")
    p.add_argument("--greedy-len", type=int, default=32, help="greedy tokens per prompt. Default: %(default)s")
    p.add_argument("--sample-len", type=int, default=16, help="tokens per sampled row. Default: %(default)s")
    p.add_argument("--out", default=os.environ.get("OUT") or "gpu-report", help="report folder. Default: $OUT or ./gpu-report")
    args = p.parse_args(argv)
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        p.error("CUDA is not available; use --device cpu for the smoke test")
    if args.device == "cpu":
        torch.set_num_threads(1)
    started = time.perf_counter()
    from speceq.oracles.hf import TargetOracle

    oracle = TargetOracle(device=args.device, dtype="float32")
    report: dict[str, Any] = {"environment": environment(args.device), "settings": vars(args)}
    report["greedy"] = greedy_part(args, oracle)
    report["sampling"] = sampling_part(args, oracle, started)
    report["seconds"] = time.perf_counter() - started
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "gpu-check.json").write_text(json.dumps(report, indent=1, default=str))
    (out / "gpu-check.md").write_text(markdown(report))
    log(f"wrote {out / 'gpu-check.md'} and gpu-check.json in {report['seconds']:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
