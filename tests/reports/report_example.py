"""Builds the fixed example RunResult that the report tests render (and examples/ ships).

The numbers are not typed in: each case is simulated with a seeded numpy generator from a
small known next-token distribution (positions independent, so the oracle's probability of a
token at a position is its probability in that position's distribution), and every statistic
is computed the way speceq computes it (Pearson chi-square on pooled-count bins, randomized
PIT, martingale z-test, plug-in TV with its McDiarmid bound, Holm and Benjamini-Hochberg over
the run, noncentral chi-square sample size). Four cases:

1. an equivalent case (candidate samples the target exactly);
2. a shifted case (a mutant that mixes 30 % of the draft into its output);
3. an inconclusive case (a 5 % mixture seen through only 600 samples; no oracle);
4. a greedy case with two numerical near-ties and one real mismatch.

Sample texts, token texts, the prompt and an engine config string carry HTML, script and
replacement/control characters on purpose. Regenerate the stored files with
``python tests/reports/report_example.py`` (writes examples/result-example.json).
"""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import numpy as np
from scipy import optimize, stats

from speceq.pipeline.pictures import thin_path
from speceq.stats.results import Effect
from speceq.verdicts.notes import Note
from speceq.verdicts.result import (
    CaseResult,
    GreedyDivergence,
    GreedySummary,
    RunResult,
    SampleText,
    TestOutcome,
    TokenFrequency,
)

ALPHA = 1e-3
TOLERANCE = 0.05
SEED = 20240611
PIT_BINS = 20
MIN_POOLED = 10  # tokens with a pooled count below this are merged into one bin (pooled counts only)

REPO = Path(__file__).resolve().parents[2]
#: The example result: shown to users in examples/ and read by the report tests.
EXAMPLE_FILE = REPO / "examples" / "result-example.json"
#: A real result (not built here): ``python benchmarks/report_gallery.py --mutants resample-from-target``, model
#: paths shortened to speceq/models/.
MUTANT_FILE = Path(__file__).resolve().parent / "data" / "result-mutant-resample-from-target.json"

VOCAB: dict[int, str] = {
    11: " the", 12: " a", 13: " cat", 14: " dog", 15: " sat", 16: " on", 17: " mat", 18: ".", 19: "\n",
    20: " <b>", 21: "<script>alert(1)</script>", 22: "\ufffd", 23: " caf\u00e9", 24: " &amp;", 25: " \"quoted\"",
    26: " onerror=", 27: "\x1b[31m", 28: " 東京", 29: " 🙂", 30: " and",
}
TOKENS = np.array(sorted(VOCAB))


def _dirichlet_like(rng: np.random.Generator, k: int, concentration: float) -> np.ndarray:
    p = rng.gamma(concentration, size=k)
    return p / p.sum()


def _position_dists(seed: int, positions: int, concentration: float) -> tuple[np.ndarray, np.ndarray]:
    """Target and draft distributions over TOKENS, one row per position (draft = perturbed target)."""
    rng = np.random.default_rng(seed)
    target = np.stack([_dirichlet_like(rng, len(TOKENS), concentration) for _ in range(positions)])
    draft = target * rng.lognormal(0.0, 1.2, size=target.shape)
    return target, draft / draft.sum(axis=1, keepdims=True)


def _draw(rng: np.random.Generator, dists: np.ndarray, n: int) -> np.ndarray:
    """n sequences, one token index per position: shape [n, positions]."""
    return np.stack([rng.choice(len(TOKENS), size=n, p=d) for d in dists], axis=1)


def _chi2_two_sample(a: np.ndarray, b: np.ndarray, k: int) -> tuple[float, float, int]:
    """Pearson chi-square homogeneity of two samples of labels in [0, k); rare bins merged by pooled count."""
    ca, cb = np.bincount(a, minlength=k), np.bincount(b, minlength=k)
    pooled = ca + cb
    keep = pooled >= MIN_POOLED
    table = np.array([np.append(ca[keep], ca[~keep].sum()), np.append(cb[keep], cb[~keep].sum())])
    table = table[:, table.sum(axis=0) > 0]
    res = stats.chi2_contingency(table, correction=False)
    return float(res.statistic), float(res.pvalue), int(res.dof)


def _tv(a: np.ndarray, b: np.ndarray, k: int) -> float:
    return 0.5 * float(np.abs(np.bincount(a, minlength=k) / len(a) - np.bincount(b, minlength=k) / len(b)).sum())


def _tv_upper(tv: float, n1: int, n2: int) -> float:
    return tv + math.sqrt((1 / n1 + 1 / n2) * math.log(1 / ALPHA) / 2)


def _pit(rng: np.random.Generator, tokens: np.ndarray, target: np.ndarray) -> np.ndarray:
    """Randomized PIT u = F(x-) + V p(x), tokens ordered by descending target probability (ties by id)."""
    u = []
    for pos in range(tokens.shape[1]):
        p = target[pos]
        order = np.lexsort((np.arange(len(p)), -p))
        cdf_before = np.empty_like(p)
        cdf_before[order] = np.concatenate([[0.0], np.cumsum(p[order])[:-1]])
        x = tokens[:, pos]
        u.append(cdf_before[x] + rng.uniform(size=len(x)) * p[x])
    return np.concatenate(u)


def _argmax_leak_z(tokens: np.ndarray, target: np.ndarray) -> float:
    """Martingale z of f = 1{x = argmax p}: (hits - sum p_max) / sqrt(sum p_max (1 - p_max))."""
    top = target.argmax(axis=1)
    pmax = target.max(axis=1)
    n = tokens.shape[0]
    hits = float((tokens == top[None, :]).sum())
    return (hits - n * pmax.sum()) / math.sqrt(n * float((pmax * (1 - pmax)).sum()))


def _argmax_leak_path(tokens: np.ndarray, target: np.ndarray):
    """Running sums of the argmax-leak z-test over the tokens in row order (row 0 positions 0..2, row 1, ...)."""
    top = target.argmax(axis=1)
    pmax = target.max(axis=1)
    n, positions = tokens.shape
    f = (tokens == top[None, :]).astype(np.float64).ravel()
    mean = np.tile(pmax, n)
    return thin_path("z argmax leak", f, mean, mean * (1 - mean))


def _required_n(dof: int, delta: float) -> int:
    """Per-engine n for 90 % power at alpha against a TV shift delta (chi-square >= 4 delta^2): 2 lambda / (4 delta^2)."""
    crit = stats.chi2.isf(ALPHA, dof)
    lam = optimize.brentq(lambda nc: stats.ncx2.sf(crit, dof, nc) - 0.9, 1e-6, 1e4)
    return int(math.ceil(2 * lam / (4 * delta**2)))


def _top_tokens(base: np.ndarray, cand: np.ndarray, target: np.ndarray | None, positions: int, top: int) -> list[TokenFrequency]:
    out = []
    k = len(TOKENS)
    for pos in range(positions):
        cb, cc = np.bincount(base[:, pos], minlength=k), np.bincount(cand[:, pos], minlength=k)
        for i in np.lexsort((TOKENS, -(cb + cc)))[:top]:
            out.append(TokenFrequency(position=pos, token=int(TOKENS[i]), text=VOCAB[int(TOKENS[i])],
                                      baseline_count=int(cb[i]), candidate_count=int(cc[i]),
                                      oracle_prob=None if target is None or pos > 0 else round(float(target[pos, i]), 6)))
    return out


def _text(row: np.ndarray) -> str:
    return "".join(VOCAB[int(TOKENS[i])] for i in row)


def _samples(base: np.ndarray, cand: np.ndarray, extra: dict[str, str]) -> list[SampleText]:
    out = []
    for engine, arr in (("baseline", base), ("candidate", cand)):
        for j in range(3):
            ids = tuple(int(TOKENS[i]) for i in arr[j])
            out.append(SampleText(engine=engine, prompt_index=0, text=_text(arr[j]), token_ids=ids))
        out.append(SampleText(engine=engine, prompt_index=1, text=extra[engine], token_ids=()))
    return out


def _sampled_case(case_id: str, *, dist_seed: int, mix: float, n: int, oracle: bool, text: str,
                  params: dict[str, object], speed: tuple[float, float, float]) -> CaseResult:
    positions = 3
    target, draft = _position_dists(dist_seed, positions, concentration=0.6)
    cand_dists = (1 - mix) * target + mix * draft
    rng = np.random.default_rng([SEED, dist_seed])
    base, cand = _draw(rng, target, n), _draw(rng, cand_dists, n)
    k = len(TOKENS)
    tests: list[TestOutcome] = []
    for pos in range(positions):
        stat, p, dof = _chi2_two_sample(base[:, pos], cand[:, pos], k)
        tests.append(TestOutcome(name=f"chi2 position {pos}", family="two-sample", primary=pos == 0, statistic=stat,
                                 pvalue=p, dof=dof, n=2 * n, summary=f"Pearson, bins with pooled count >= {MIN_POOLED}",
                                 position=pos))
    joint_b, joint_c = base[:, 0] * k + base[:, 1], cand[:, 0] * k + cand[:, 1]
    stat, p, dof = _chi2_two_sample(joint_b, joint_c, k * k)
    tests.append(TestOutcome(name="chi2 positions 0-1 joint", family="two-sample", primary=False, statistic=stat,
                             pvalue=p, dof=dof, n=2 * n, summary="pairs of the first two tokens"))
    pit_hist: tuple[int, ...] = ()
    z_paths = ()
    if oracle:
        z_paths = (_argmax_leak_path(cand, target),)
        u = _pit(rng, cand, target)
        ks = stats.kstest(u, "uniform")
        cvm = stats.cramervonmises(u, "uniform")
        z = _argmax_leak_z(cand, target)
        tests += [
            TestOutcome(name="PIT Kolmogorov-Smirnov", family="oracle", primary=True, statistic=float(ks.statistic),
                        pvalue=float(ks.pvalue), n=len(u), summary="randomized PIT, tokens by descending p"),
            TestOutcome(name="PIT Cramér-von Mises", family="oracle", primary=False, statistic=float(cvm.statistic),
                        pvalue=float(cvm.pvalue), n=len(u), summary="same u as KS"),
            TestOutcome(name="z argmax leak", family="oracle", primary=True, statistic=z,
                        pvalue=float(2 * stats.norm.sf(abs(z))), n=len(u), summary="f = 1{x = argmax p}, two-sided"),
        ]
        pit_hist = tuple(int(c) for c in np.histogram(u, bins=PIT_BINS, range=(0.0, 1.0))[0])
    tv = _tv(base[:, 0], cand[:, 0], k)
    bt, ct, acc = speed
    case = CaseResult(
        case_id=case_id,
        case={"id": case_id, "prompt_ids": [11, 13, 15, 16, 11, 17, 18], "text": text, "params": params,
              "batch_size": 4, "companions": [[12, 14], [11, 14, 15, 16, 12, 17, 18, 19, 30]]},
        verdict="", reason="", tolerance=TOLERANCE, n_baseline=n, n_candidate=n, tests=tuple(tests),
        tv_estimate=tv, tv_upper_bound=_tv_upper(tv, n, n), tv_reference="two-sample",
        candidate_tokens=n * positions, acceptance_rate=acc, baseline_tokens_per_s=bt, candidate_tokens_per_s=ct,
        speedup_per_token=ct / bt, top_tokens=tuple(_top_tokens(base, cand, target if oracle else None, positions, 8)),
        pit_histogram=pit_hist, z_paths=z_paths,
        samples=tuple(_samples(base, cand, {
            "baseline": "<script>window.__pwned=1</script> the cat sat\ufffd\ufffd on the mat",
            "candidate": "<img src=x onerror=\"window.__pwned=2\"> caf\ufffd & \x00 \x1b[31mred\x1b[0m </pre></details>",
        })),
        notes=(Note.words(f"mixture weight of the draft in the candidate: {mix:g} (known by construction of this example)"),),
    )
    return case


def _greedy_case() -> CaseResult:
    divergences = (
        GreedyDivergence(prompt_index=7, position=5, baseline_token=13, candidate_token=14, margin=0.0021,
                         classification="near-tie", prefix_text=" the cat sat on the"),
        GreedyDivergence(prompt_index=23, position=2, baseline_token=17, candidate_token=21, margin=2.31,
                         classification="mismatch", prefix_text=" a <b>dog</b> &"),
        GreedyDivergence(prompt_index=40, position=11, baseline_token=18, candidate_token=19, margin=0.0007,
                         classification="near-tie", prefix_text="caf\ufffd\ufffd and the mat"),
    )
    return CaseResult(
        case_id="greedy/capitals <batch 8>",
        case={"id": "greedy/capitals <batch 8>", "prompt_ids": [11, 28, 16], "text": "The capital of Japan is",
              "params": {"temperature": 0.0, "top_k": 0, "top_p": 1.0, "max_new_tokens": 16, "ignore_eos": True},
              "batch_size": 8, "companions": []},
        verdict="shifted", reason="1 real mismatch (margin 2.31 nats > 0.01) among 3 divergences in 64 rows",
        tolerance=TOLERANCE, n_baseline=64, n_candidate=64, candidate_tokens=64 * 16,
        acceptance_rate=0.83, baseline_tokens_per_s=455.0, candidate_tokens_per_s=1012.0, speedup_per_token=1012.0 / 455.0,
        greedy=GreedySummary(rows_compared=64, rows_equal=61, near_tie_threshold=0.01, divergences=divergences,
                             mismatches=1, near_ties=2, distinct_divergences=3, rows_beyond_near_tie=1),
        size=Effect(name="greedy row pairs diverging beyond a near-tie", unit="share of row pairs", estimate=1 / 64,
                    low=7.8144e-06, high=0.14571, level=0.999),  # clopper_pearson(1, 64, 1e-3)
        hard_failures=("greedy rows differ at position 2 where the target's top-2 margin is 2.31 nats (> 0.01): "
                       "“ mat” #17 vs “<script>alert(1)</script>” #21 after ' a <b>dog</b> &'",),
        samples=(SampleText(engine="baseline", prompt_index=23, text=" a <b>dog</b> & the mat.", token_ids=(12, 20, 14, 24, 11, 17, 18)),
                 SampleText(engine="candidate", prompt_index=23, text=" a <b>dog</b> &<script>alert(1)</script>", token_ids=(12, 20, 14, 24, 21))),
    )


def _holm(pvalues: list[float]) -> list[float]:
    m = len(pvalues)
    order = sorted(range(m), key=lambda i: pvalues[i])
    adjusted, running = [0.0] * m, 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * pvalues[i]))
        adjusted[i] = running
    return adjusted


def _bh(pvalues: list[float]) -> list[float]:
    m = len(pvalues)
    order = sorted(range(m), key=lambda i: pvalues[i], reverse=True)
    q, running = [0.0] * m, 1.0
    for rank, i in enumerate(order):
        running = min(running, pvalues[i] * m / (m - rank))
        q[i] = running
    return q


def _decide(case: CaseResult, adjusted: dict[str, float], required_dof: int) -> CaseResult:
    rejecting = [t for t in case.tests if t.primary and adjusted[t.name] <= ALPHA]
    if rejecting:
        worst = min(rejecting, key=lambda t: adjusted[t.name])
        return replace(case, verdict="shifted",
                       reason=f"{worst.name} rejects (Holm p = {adjusted[worst.name]:.2g}); TV ≈ {case.tv_estimate:.3f}")
    if case.tv_upper_bound is not None and case.tv_upper_bound < TOLERANCE:
        return replace(case, verdict="equivalent",
                       reason=f"no primary test rejects; TV ≤ {case.tv_upper_bound:.3f} < ε = {TOLERANCE:g}")
    need = _required_n(required_dof, TOLERANCE)
    return replace(case, verdict="inconclusive", required_n=need,
                   reason=f"no test rejects, but TV bound {case.tv_upper_bound:.3f} ≥ ε = {TOLERANCE:g}; ~{need:,} samples per engine would decide")


def build_example_result() -> RunResult:
    """The example run: equivalent, shifted, inconclusive and greedy cases, Holm/BH over the run."""
    params = {"temperature": 1.0, "top_k": 0, "top_p": 1.0, "max_new_tokens": 3, "ignore_eos": True}
    eq = _sampled_case("haiku/T=1", dist_seed=1, mix=0.0, n=20000, oracle=True, speed=(402.0, 771.0, 0.74),
                          text="Write a haiku about a cat.", params=params)
    sh = _sampled_case("story/T=0.8 <mutant: draft mixture>", dist_seed=2, mix=0.15, n=20000, oracle=True,
                          speed=(398.0, 802.0, 0.81),
                          text="Tell a story about <b>Tokyo</b> & a cat <script>window.__pwned=4</script>",
                          params={**params, "temperature": 0.8, "top_k": 20})
    inc = _sampled_case("code/top_p=0.9 (no oracle)", dist_seed=3, mix=0.05, n=600, oracle=False,
                           speed=(410.0, 655.0, 0.62), text="def fib(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"",
                           params={**params, "top_p": 0.9})
    sampled = [eq, sh, inc]
    every = [(ci, t) for ci, c in enumerate(sampled) for t in c.tests]
    primary = [(ci, t) for ci, t in every if t.primary]
    holm = dict(zip([(ci, t.name) for ci, t in primary], _holm([t.pvalue for _, t in primary])))
    bh = dict(zip([(ci, t.name) for ci, t in every], _bh([t.pvalue for _, t in every])))
    decided = []
    for ci, c in enumerate(sampled):
        tests = tuple(replace(t, adjusted_pvalue=holm.get((ci, t.name)), qvalue=bh[(ci, t.name)]) for t in c.tests)
        c = replace(c, tests=tests)
        dof = next(t.dof for t in tests if t.name == "chi2 position 0")
        decided.append(_decide(c, {t.name: t.adjusted_pvalue for t in tests if t.primary}, int(dof)))
    cases = (*decided, _greedy_case())
    verdict = "shifted" if any(c.verdict == "shifted" for c in cases) else (
        "inconclusive" if any(c.verdict == "inconclusive" for c in cases) else "equivalent")
    return RunResult(
        verdict=verdict, alpha=ALPHA, tolerance=TOLERANCE, seed=SEED,
        engines={
            "baseline": {"name": "baseline", "model": "speceq-tiny-target", "dtype": "float32", "batch_size": 4},
            "candidate": {"name": "reference-speculative", "target": "speceq-tiny-target", "draft": "speceq-tiny-draft <q8>",
                          "k": 4, "label": "</code></td><script>window.__pwned=3</script>"},
        },
        oracle={"model": "speceq-tiny-target", "dtype": "float64", "processing": "temperature → top-k → top-p"},
        provenance={"speceq": "0.1.0", "python": "3.11.9", "torch": "2.13.0", "transformers": "5.24.0",
                    "numpy": "2.3.1", "scipy": "1.17.0", "git_commit": "8c0560f0d1c2b3a4e5f60718293a4b5c6d7e8f90",
                    "git_dirty": False, "machine": {"arch": "x86_64", "cpus": 2, "os": "Linux 6.1"},
                    "started": "2025-06-11T09:30:00Z", "example": "built by tests/reports/report_example.py"},
        notes=(Note.words("Example result for the report tests: simulated, not a real engine run."),),
        cases=cases,
    )


def write_example_files() -> list[Path]:
    """Write the example JSON to examples/result-example.json."""
    EXAMPLE_FILE.parent.mkdir(parents=True, exist_ok=True)
    EXAMPLE_FILE.write_text(build_example_result().to_json() + "\n", encoding="utf-8")
    return [EXAMPLE_FILE]


#: Strings that would run code or fetch something if a report ever emitted them as markup.
PAYLOADS: tuple[str, ...] = (
    "<script>window.__pwned=1</script>",
    "<img src=x onerror=\"window.__pwned=2\">",
    "\"><svg onload=window.__pwned=3>",
    "</text></svg><script>window.__pwned=4</script>",
    "</pre></details></section><iframe src=\"https://example.com/\"></iframe>",
    "' onmouseover='window.__pwned=5",
    "<style>@import url(https://example.com/x.css);</style>",
    "<a href=\"javascript:window.__pwned=6\">x</a>",
    "]]><!-- --><![CDATA[",
    "&lt;script&gt;&amp;",
)

#: How many strings :func:`inject` places.
INJECTION_SLOTS = 16


def inject(result: RunResult, strings: list[str]) -> RunResult:
    """``result`` with ``strings`` (cycled) in every kind of text field a report shows.

    Slots: case id, reason, prompt text, an extra case field, test name and summary, two
    token texts, a baseline and a candidate sample text, a greedy prefix, a hard failure,
    a case note, an engine config value and key, a provenance value, and a run note.
    """
    s = [strings[i % len(strings)] for i in range(INJECTION_SLOTS)]
    eq, sh, inc, greedy = result.cases
    tests = (replace(sh.tests[0], name=s[4], summary=s[5]), *sh.tests[1:])
    tokens = (replace(sh.top_tokens[0], text=s[6]), replace(sh.top_tokens[1], text=s[7]), *sh.top_tokens[2:])
    samples = list(sh.samples)
    samples[0] = replace(samples[0], text=s[8])
    samples[-1] = replace(samples[-1], text=s[9])
    sh = replace(sh, case_id=s[0], reason=s[1], case={**sh.case, "text": s[2], "origin": s[3]}, tests=tests,
                 top_tokens=tokens, samples=tuple(samples), hard_failures=(s[11],), notes=(Note.words(s[12]),))
    g = greedy.greedy
    greedy = replace(greedy, greedy=replace(g, divergences=(replace(g.divergences[0], prefix_text=s[10]), *g.divergences[1:])))
    engines = {**result.engines, "candidate": {**result.engines["candidate"], "label": s[13], f"k:{s[14]}": 1}}
    return replace(result, cases=(eq, sh, inc, greedy), engines=engines,
                   provenance={**result.provenance, "host": s[15]}, notes=(Note.words(s[15]),))


if __name__ == "__main__":
    for p in write_example_files():
        print(f"wrote {p}")
