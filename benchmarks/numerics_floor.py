"""The numerics floor: how far bf16 / fp16 plain sampling of the bundled target is from float32.

Speculative decoding is exact in exact arithmetic; real engines run bf16/fp16. This script
measures, on the CPU with the bundled models, the distance that low precision alone puts
between plain sampling (the ``baseline`` engine) and the float32 target law:

1. Exact TV per position: rows sampled in the low dtype are teacher-forced through the
   float32 and the low-dtype target (full-sequence forward); at every generated position the
   total variation between the two processed next-token laws is computed exactly. This is the
   per-token numerics floor a perfect test could at best detect.
2. Statistical distinguishability: float32, bf16 and fp16 plain samples (``--tokens``
   generated tokens per engine) analysed with :func:`speceq.pipeline.analysis.analyse_run` against a
   float32 plain run (two-sample tests; the float32 oracle's comparisons of both engines' scores,
   and its one-sample diagnostics: z-tests, PIT, GOF), at
   ``--alpha``. A float32 A/A run (second seed) is the control. The bf16 candidate is also
   analysed with a bf16 oracle (the oracle in the deployment's dtype).
3. Greedy (temperature 0): how often bf16 / fp16 rows diverge from float32 rows, and how the
   first divergences classify by the float32 target's raw top-2 margin: at
   :data:`speceq.pipeline.greedy.NEAR_TIE_NATS` (the float32 batching threshold) and at the dtype's own
   noise scale (99th percentile of |low-dtype margin - float32 margin| over the positions of
   part 1).

Usage (about 15 minutes on one loaded CPU core; see docs/explanation/numerics.md for measured numbers):

    python benchmarks/numerics_floor.py --tokens 100000 --greedy-prompts 256 --json numerics.json

Smoke: ``python benchmarks/numerics_floor.py --tokens 2000 --greedy-prompts 8 --tv-rows 32``.

``--floor-models target,bpe-target,smollm2`` measures part 1 only, on each named model (the bundled
byte target, the bundled BPE target, SmolLM2-135M-Instruct as ``speceq smollm2 prepare`` made it):
``--floor-rows`` rows of ``--floor-len`` tokens per prompt (the model's default prompts; SmolLM2's
three chats too), sampled at T = 1 by the low-dtype model without EOS, are teacher-forced through
the float32 and the low-dtype model, and the exact TV between the two processed laws is taken at
every position under each of the four settings of the sampling cases. This is the numerics floor
``--numerics-tolerance``'s default comes from (speceq.core.defaults.NUMERICS_TOLERANCE):

    python benchmarks/numerics_floor.py --floor-models target,bpe-target,smollm2 --json floor.json
"""

from __future__ import annotations

import argparse
import json
import sys
import sysconfig
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from speceq.core.defaults import NEAR_TIE_NATS
from speceq.core.params import SamplingParams
from speceq.core.processing import process_logits
from speceq.engines.base import SampleBatch, SampleRequest
from speceq.engines.baseline import BaselineEngine
from speceq.inputs.cases import Case
from speceq.models import ByteTokenizer, load_target
from speceq.models.prompts import DEFAULT_PROMPTS
from speceq.models.torch_utils import resolve_dtype
from speceq.oracles.hf import TargetOracle
from speceq.pipeline.analysis import analyse_run
from speceq.pipeline.greedy import classify_margin, first_divergence

ORACLE_TESTS = ("argmax comparison", "log-likelihood comparison", "PIT comparison", "support comparison",
                "z argmax leak", "z temperature drift", "PIT Anderson-Darling", "PIT Kolmogorov-Smirnov",
                "chi2 GOF first token", "baseline vs oracle PIT Anderson-Darling")


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def make_cases(sample_len: int) -> list[Case]:
    """Four single-prompt cases: T=1, T=0.7 with top-k 50, T=1 with top-p 0.9, T=1.3."""
    tok = ByteTokenizer()
    settings = [dict(temperature=1.0), dict(temperature=0.7, top_k=50), dict(temperature=1.0, top_p=0.9),
                dict(temperature=1.3)]
    cases = []
    for i, (prompt, kw) in enumerate(zip((DEFAULT_PROMPTS[j] for j in (0, 4, 7, 10)), settings)):
        params = SamplingParams(max_new_tokens=sample_len, **kw)
        cases.append(Case(case_id=f"c{i}", prompt_ids=tuple(tok.encode(prompt)), text=prompt, batch_size=512,
                          params=params))
    return cases


def collect(engine: BaselineEngine, cases: list[Case], rows: int, seed: int) -> tuple[dict[str, SampleBatch], int, float]:
    """``rows`` rows per case; returns the batches, generated tokens and seconds."""
    started, out, generated = time.perf_counter(), {}, 0
    for i, case in enumerate(cases):
        request = SampleRequest(prompts=case.prompts, params=case.params, n=rows, seed=seed * 1009 + i,
                                batch_size=case.batch_size)
        batch = engine.sample(request)
        out[case.case_id] = batch
        generated += int(batch.lengths.sum())
    return out, generated, time.perf_counter() - started


def processed_and_raw(model: Any, prompt: tuple[int, ...], rows: np.ndarray, params: SamplingParams) -> tuple[torch.Tensor, torch.Tensor]:
    """Processed laws and raw log-probs, float32 ``[rows, L, vocab]``, at each generated position (teacher forcing)."""
    L = rows.shape[1]
    ids = torch.as_tensor(np.concatenate([np.tile(np.asarray(prompt), (len(rows), 1)), np.maximum(rows, 0)], axis=1))
    with torch.inference_mode():
        logits = model(input_ids=ids[:, :-1]).logits[:, len(prompt) - 1 :].float()  # [rows, L, V]
    flat = logits.reshape(-1, logits.shape[-1])
    probs = process_logits(flat, params, eos_token_id=257).reshape(len(rows), L, -1)
    return probs, torch.log_softmax(logits, dim=-1)


def exact_tv(dtype: str, cases: list[Case], samples: dict[str, SampleBatch], tv_rows: int) -> dict[str, Any]:
    """Exact TV(low dtype, float32) per generated position along rows sampled in ``dtype``."""
    f32, low = load_target(dtype=torch.float32), load_target(dtype=resolve_dtype(dtype))
    f32.eval()
    low.eval()
    per_case, noise = [], []
    for case in cases:
        b = samples[case.case_id]
        full = np.flatnonzero(b.lengths == case.params.max_new_tokens)[:tv_rows]  # rows without an early EOS
        rows = b.tokens[full]
        p32, lp32 = processed_and_raw(f32, case.prompt_ids, rows, case.params)
        plo, lplo = processed_and_raw(low, case.prompt_ids, rows, case.params)
        tv = 0.5 * (p32 - plo).abs().sum(-1)  # [rows, L]
        top2 = lp32.topk(2, dim=-1).indices
        m32 = lp32.gather(-1, top2[..., :1]) - lp32.gather(-1, top2[..., 1:])
        mlo = lplo.gather(-1, top2[..., :1]) - lplo.gather(-1, top2[..., 1:])
        noise.append((m32 - mlo).abs().flatten().numpy())
        per_case.append({"case": case.case_id, "rows": len(full), "mean_tv": float(tv.mean()),
                         "median_tv": float(tv.median()), "p99_tv": float(tv.flatten().quantile(0.99)),
                         "max_tv": float(tv.max()), "mean_tv_by_position": [round(float(x), 5) for x in tv.mean(0)]})
    margin_noise = np.concatenate(noise)
    return {"cases": per_case, "margin_noise_median": float(np.median(margin_noise)),
            "margin_noise_p99": float(np.quantile(margin_noise, 0.99)), "margin_noise_max": float(margin_noise.max())}


def verdicts(cases: list[Case], base: dict[str, SampleBatch], cand: dict[str, SampleBatch], oracle: TargetOracle,
             alpha: float, tolerance: float, label: str) -> dict[str, Any]:
    started = time.perf_counter()
    result = analyse_run(cases, base, cand, oracle=oracle, alpha=alpha, tolerance=tolerance, seed=0,
                         engines={"baseline": {}, "candidate": {}}, provenance={})
    per_case = []
    for c in result.cases:
        tests = {t.name: t for t in c.tests}
        primary = [t for t in c.tests if t.primary and t.adjusted_pvalue is not None]
        smallest = min(primary, key=lambda t: t.adjusted_pvalue, default=None)
        two_sample = [t.pvalue for t in c.tests if t.family not in ("oracle", "oracle comparison")]
        per_case.append({
            "case": c.case_id, "verdict": c.verdict, "tv": c.tv_estimate, "tv_upper": c.tv_upper_bound,
            "tokens": c.candidate_tokens,
            "min_two_sample_p": min(two_sample, default=None),
            "oracle_p": {n: (tests[n].pvalue if n in tests else None) for n in ORACLE_TESTS},
            "smallest_adjusted_p": None if smallest is None else smallest.adjusted_pvalue,
            "smallest_test": None if smallest is None else smallest.name,
            "hard_failures": list(c.hard_failures[:3]),  # e.g. sampled tokens outside the oracle's top-p/top-k support
        })
    log(f"analysed {label}: {result.verdict} in {time.perf_counter() - started:.0f} s")
    return {"comparison": label, "verdict": result.verdict, "cases": per_case}


SETTINGS = (dict(temperature=1.0), dict(temperature=0.7, top_k=50), dict(temperature=1.0, top_p=0.9),
            dict(temperature=1.3))


def floor_model(name: str, dtype: torch.dtype) -> tuple[Any, list[list[int]]]:
    """A model to measure the floor on, in ``dtype``, and its prompts."""
    from speceq.models.bpe import encode_prompts, load_bpe_target

    if name == "target":
        tok = ByteTokenizer()
        return load_target(dtype=dtype), [tok.encode(p) for p in DEFAULT_PROMPTS]
    if name == "bpe-target":
        return load_bpe_target(dtype=dtype), encode_prompts(DEFAULT_PROMPTS)
    if name == "smollm2":
        from transformers import AutoTokenizer

        from speceq.models import load_model
        from speceq.models.smollm2 import CHATS, prepared

        folder = prepared().target
        tok = AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
        chats = [tok.apply_chat_template([dict(m) for m in chat], add_generation_prompt=True, tokenize=True,
                                         return_dict=False) for chat in CHATS.values()]
        prompts = [[int(i) for i in ids] for ids in chats] + [tok.encode(p) for p in DEFAULT_PROMPTS]
        return load_model(folder, dtype=dtype), prompts
    raise SystemExit(f"unknown model {name!r}; expected target, bpe-target or smollm2")


def floor_tv(name: str, dtype: str, rows: int, length: int, prompts_max: int, seed: int) -> dict[str, Any]:
    """Exact per-position TV(processed law in ``dtype``, in float32) of model ``name`` under each setting."""
    from speceq.models.torch_utils import first_eos_id

    low, prompts = floor_model(name, resolve_dtype(dtype))
    f32, _ = floor_model(name, torch.float32)
    low.eval()
    f32.eval()
    eos = first_eos_id(f32.config)
    gen = torch.Generator().manual_seed(seed)
    tvs: dict[int, list[np.ndarray]] = {i: [] for i in range(len(SETTINGS))}
    for prompt in prompts[:prompts_max]:
        ids = torch.tensor(prompt, dtype=torch.long)[None, :].expand(rows, -1).contiguous()
        with torch.inference_mode():
            for _ in range(length):  # T = 1 ancestral sampling in the low dtype, EOS masked (full forward: short rows)
                logits = low(input_ids=ids).logits[:, -1].double()
                if eos is not None:
                    logits[:, eos] = -torch.inf
                nxt = torch.multinomial(torch.softmax(logits, dim=-1), 1, generator=gen)
                ids = torch.cat([ids, nxt], dim=1)
            a = f32(input_ids=ids[:, :-1]).logits[:, len(prompt) - 1 :].float()
            b = low(input_ids=ids[:, :-1]).logits[:, len(prompt) - 1 :].float()
        for i, kw in enumerate(SETTINGS):
            params = SamplingParams(max_new_tokens=length, **kw)
            pa = process_logits(a.reshape(-1, a.shape[-1]), params, eos_token_id=eos)
            pb = process_logits(b.reshape(-1, b.shape[-1]), params, eos_token_id=eos)
            tvs[i].append((0.5 * (pa.double() - pb.double()).abs().sum(-1)).numpy())
    out = []
    for i, kw in enumerate(SETTINGS):
        tv = np.concatenate(tvs[i])
        out.append({"setting": ", ".join(f"{k}={v}" for k, v in kw.items()), "positions": int(tv.size),
                    "mean_tv": float(tv.mean()), "median_tv": float(np.median(tv)),
                    "p99_tv": float(np.quantile(tv, 0.99)), "max_tv": float(tv.max())})
    log(f"floor {name} {dtype}: mean TV {np.mean([o['mean_tv'] for o in out]):.2e}, "
        f"p99 {max(o['p99_tv'] for o in out):.2e}")
    return {"model": name, "dtype": dtype, "prompts": min(prompts_max, len(prompts)), "rows": rows,
            "length": length, "settings": out}


def floor_table(floors: list[dict[str, Any]]) -> str:
    lines = ["| model | dtype | setting | positions | mean TV | median TV | p99 TV | max TV |",
             "|---|---|---|---|---|---|---|---|"]
    for f in floors:
        for o in f["settings"]:
            lines.append(f"| {f['model']} | {f['dtype']} | {o['setting']} | {o['positions']} | {o['mean_tv']:.2e} | "
                         f"{o['median_tv']:.2e} | {o['p99_tv']:.2e} | {o['max_tv']:.2e} |")
    return "\n".join(lines)


def greedy_prompts(count: int) -> list[tuple[int, ...]]:
    """``count`` prompts: the default prompts, then prefixes (6-63 bytes) of stdlib sources."""
    tok = ByteTokenizer()
    texts = list(DEFAULT_PROMPTS)
    files = sorted(p for p in Path(sysconfig.get_paths()["stdlib"]).glob("*.py") if p.stat().st_size > 2000)
    rng = np.random.default_rng(0)
    i = 0
    while len(texts) < count and files:
        data = files[i % len(files)].read_bytes()
        start = int(rng.integers(0, len(data) - 200))
        texts.append(data[start : start + 6 + (i * 7) % 58].decode("utf-8", errors="replace"))
        i += 1
    return [tuple(tok.encode(t))[:80] for t in texts[:count]]


def greedy(dtypes: list[str], prompts: list[tuple[int, ...]], length: int, oracle: TargetOracle,
           noise: dict[str, float]) -> list[dict[str, Any]]:
    """First divergences of greedy rows in each dtype from the float32 rows, classified by float32 margin."""
    params = SamplingParams(temperature=0.0, max_new_tokens=length, ignore_eos=True)
    request = SampleRequest(prompts=tuple(prompts), params=params, n=1, seed=0, batch_size=64)
    truth = BaselineEngine(dtype="float32").sample(request)
    out = []
    for dtype in dtypes:
        batch = BaselineEngine(dtype=dtype).sample(request)
        prefixes, positions = [], []
        for r in range(batch.rows):
            d = first_divergence(truth.tokens[r, : truth.lengths[r]], batch.tokens[r, : batch.lengths[r]])
            if d is not None:
                prefixes.append(list(prompts[int(batch.prompt_index[r])]) + list(d.prefix))
                positions.append(d.position)
        margins = [float(m) for m in oracle.raw_top2_margin(prefixes)] if prefixes else []
        scale = noise.get(dtype, NEAR_TIE_NATS)
        out.append({
            "dtype": dtype, "rows": batch.rows, "tokens_per_row": length, "divergent_rows": len(prefixes),
            "near_ties_1e-3": sum(classify_margin(m) == "near-tie" for m in margins),
            "noise_scale_nats": scale,
            "near_ties_noise_scale": sum(classify_margin(m, scale) == "near-tie" for m in margins),
            "margin_quantiles": [round(float(q), 5) for q in np.quantile(margins, (0, 0.5, 0.9, 1))] if margins else [],
            "median_first_position": float(np.median(positions)) if positions else None,
        })
        log(f"greedy {dtype}: {len(prefixes)}/{batch.rows} rows diverge")
    return out


def checkpoint(report: dict[str, Any], path: Path | None) -> None:
    """Write what is measured so far (a long run keeps its finished parts)."""
    if path is not None:
        path.write_text(json.dumps(report, indent=1, default=str))


def table(report: dict[str, Any]) -> str:
    lines = ["## Exact TV per generated position (low dtype vs float32, teacher-forced on low-dtype samples)", "",
             "| dtype | case | rows | mean TV | median TV | p99 TV | max TV |", "|---|---|---|---|---|---|---|"]
    for dtype, tv in report["exact_tv"].items():
        for c in tv["cases"]:
            lines.append(f"| {dtype} | {c['case']} | {c['rows']} | {c['mean_tv']:.2e} | {c['median_tv']:.2e} | "
                         f"{c['p99_tv']:.2e} | {c['max_tv']:.2e} |")
    lines += ["", "| dtype | top-2 margin error median | p99 | max (nats) |", "|---|---|---|---|"]
    lines += [f"| {d} | {t['margin_noise_median']:.2e} | {t['margin_noise_p99']:.2e} | {t['margin_noise_max']:.2e} |"
              for d, t in report["exact_tv"].items()]
    lines += ["", "## Sampling collection", "", "| run | tokens | seconds | tokens/s |", "|---|---|---|---|"]
    lines += [f"| {k} | {v['tokens']} | {v['seconds']} | {v['tokens_per_s']} |" for k, v in report["collection"].items()]
    lines += ["", f"## Verdicts (alpha {report['settings']['alpha']}, tolerance {report['settings']['tolerance']})", "",
              "| comparison | case | verdict | TV est. | TV bound | min 2-sample p | argmax cmp p | log-lik cmp p | "
              "PIT cmp p | support cmp p | z temp p (diagnostic) | smallest adj. p (test) | hard failures |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    fmt = lambda x: "-" if x is None else f"{x:.2g}"  # noqa: E731
    for comp in report.get("comparisons", []):
        for c in comp["cases"]:
            o = c["oracle_p"]
            lines.append(f"| {comp['comparison']} | {c['case']} | {c['verdict']} | {fmt(c['tv'])} | {fmt(c['tv_upper'])} | "
                         f"{fmt(c['min_two_sample_p'])} | {fmt(o['argmax comparison'])} | "
                         f"{fmt(o['log-likelihood comparison'])} | {fmt(o['PIT comparison'])} | "
                         f"{fmt(o['support comparison'])} | {fmt(o['z temperature drift'])} | "
                         f"{fmt(c['smallest_adjusted_p'])} ({c['smallest_test']}) | "
                         f"{'; '.join(c.get('hard_failures', [])) or '-'} |")
    lines += ["", "## Greedy divergence from float32", "",
              "| dtype | rows x tokens | divergent rows | near-tie at 1e-3 nats | noise scale (nats) | near-tie at noise scale | "
              "float32 margin min/median/p90/max | median position |", "|---|---|---|---|---|---|---|---|"]
    for g in report.get("greedy", []):
        lines.append(f"| {g['dtype']} | {g['rows']} x {g['tokens_per_row']} | {g['divergent_rows']} | {g['near_ties_1e-3']} | "
                     f"{g['noise_scale_nats']:.2e} | {g['near_ties_noise_scale']} | {g['margin_quantiles']} | "
                     f"{g['median_first_position']} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tokens", type=int, default=100_000, help="generated tokens per engine (all cases). Default: %(default)s")
    p.add_argument("--sample-len", type=int, default=16, help="tokens per sampled row. Default: %(default)s")
    p.add_argument("--dtypes", default="bfloat16,float16", help="low dtypes, comma-separated. Default: %(default)s")
    p.add_argument("--tv-rows", type=int, default=256, help="rows per case for the exact TV. Default: %(default)s")
    p.add_argument("--greedy-prompts", type=int, default=256, help="greedy prompts. Default: %(default)s")
    p.add_argument("--greedy-len", type=int, default=32, help="greedy tokens per prompt. Default: %(default)s")
    p.add_argument("--alpha", type=float, default=1e-3, help="family-wise level. Default: %(default)s")
    p.add_argument("--tolerance", type=float, default=0.15, help="TV tolerance. Default: %(default)s")
    p.add_argument("--seed", type=int, default=0, help="base seed. Default: %(default)s")
    p.add_argument("--json", type=Path, default=None, help="also write the report as JSON there")
    p.add_argument("--no-low-dtype-oracle", dest="low_dtype_oracle", action="store_false",
                   help="skip analysing the first low dtype with an oracle in that dtype")
    p.add_argument("--floor-models", default="", help="measure only the exact TV floor on these models "
                   "(comma-separated: target, bpe-target, smollm2)")
    p.add_argument("--floor-rows", type=int, default=16, help="rows per prompt for --floor-models. Default: %(default)s")
    p.add_argument("--floor-len", type=int, default=16, help="tokens per row for --floor-models. Default: %(default)s")
    p.add_argument("--floor-prompts", type=int, default=14, help="prompts per model for --floor-models. "
                   "Default: %(default)s")
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    if args.floor_models:
        floors = []
        for name in (m.strip() for m in args.floor_models.split(",") if m.strip()):
            for dtype in (d.strip() for d in args.dtypes.split(",") if d.strip()):
                floors.append(floor_tv(name, dtype, args.floor_rows, args.floor_len, args.floor_prompts, args.seed))
                checkpoint({"floor": floors, "settings": vars(args) | {"json": str(args.json)}}, args.json)
        print(floor_table(floors))
        return 0
    dtypes = [d.strip() for d in args.dtypes.split(",") if d.strip()]
    cases = make_cases(args.sample_len)
    rows = max(16, -(-args.tokens // (len(cases) * args.sample_len)))
    started = time.perf_counter()
    report: dict[str, Any] = {"settings": vars(args) | {"json": str(args.json), "rows_per_case": rows},
                              "torch": torch.__version__, "collection": {}, "exact_tv": {}, "comparisons": []}
    samples = {}
    for label, dtype, seed in [("float32", "float32", args.seed), ("float32 A/A", "float32", args.seed + 1),
                               *((d, d, args.seed + 2 + i) for i, d in enumerate(dtypes))]:
        engine = BaselineEngine(dtype=dtype)
        samples[label], n, s = collect(engine, cases, rows, seed)
        report["collection"][label] = {"tokens": n, "seconds": round(s, 1), "tokens_per_s": round(n / s, 1)}
        log(f"sampled {label}: {n} tokens in {s:.0f} s")
    for dtype in dtypes:
        report["exact_tv"][dtype] = exact_tv(dtype, cases, samples[dtype], args.tv_rows)
        checkpoint(report, args.json)
        log(f"exact TV {dtype}: mean {np.mean([c['mean_tv'] for c in report['exact_tv'][dtype]['cases']]):.2e}")
    oracle = TargetOracle(dtype="float32")
    noise = {d: t["margin_noise_p99"] for d, t in report["exact_tv"].items()}
    report["greedy"] = greedy(dtypes, greedy_prompts(args.greedy_prompts), args.greedy_len, oracle, noise)
    checkpoint(report, args.json)
    for label in ("float32 A/A", *dtypes):
        report["comparisons"].append(verdicts(cases, samples["float32"], samples[label], oracle, args.alpha,
                                              args.tolerance, f"{label} vs float32, float32 oracle"))
        checkpoint(report, args.json)
    for dtype in dtypes[: 1 if args.low_dtype_oracle else 0]:
        low_oracle = TargetOracle(dtype=dtype)
        report["comparisons"].append(verdicts(cases, samples["float32"], samples[dtype], low_oracle, args.alpha,
                                              args.tolerance, f"{dtype} vs float32, {dtype} oracle"))
    report["seconds"] = round(time.perf_counter() - started, 1)
    print(table(report))
    print(f"\ntotal {report['seconds']} s")
    checkpoint(report, args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
