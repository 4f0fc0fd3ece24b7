"""How much of a gallery mutant's drift each draft score can see, against the best possible score.

For a row score s summed over tokens, the paired comparison's Z grows like
sqrt(N / 2) * sum_t (E_mutant s_t - E_p s_t) / sqrt(sum_t Var_p s_t) over N pairs (the
baseline's own variance doubles the denominator's sum). This script computes that efficacy,
sum(delta) / sqrt(sum(var)), exactly at every position of target-sampled rows of the default
cases: p and q are the processed target and draft laws there, the mutant's law is its own
single-step law (:meth:`single_step_law`, the law of a verified draft position; bonus positions
are ignored, which dilutes every score alike). The locally most powerful score,
(p' - p) / p, has the largest efficacy of all by Cauchy-Schwarz (sqrt(sum chi2_t)); the others
are candidates a general harness can use without knowing the bug.

Usage::

    python benchmarks/draft_score_efficacy.py                          # biased-ratio, 150 rows per case
    python benchmarks/draft_score_efficacy.py --mutants biased-ratio,mixture --rows 300 --seed 1
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Sequence

import numpy as np
import torch

from speceq.engines.mutants import make_mutant
from speceq.inputs.cases import Case, default_cases

#: The draft scores compared, as functions of (p, q) over the vocabulary (float64 arrays).
SCORES: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "min(q/p, 10) (speceq's draft ratio)": lambda p, q: np.where(p > 0, np.minimum(q / np.maximum(p, 1e-300), 10.0), 10.0),
    "min(q/p, 3)": lambda p, q: np.where(p > 0, np.minimum(q / np.maximum(p, 1e-300), 3.0), 3.0),
    "q/(p+q)": lambda p, q: np.where(p + q > 0, q / np.maximum(p + q, 1e-300), 0.5),
    "clip(log q - log p, 5) (speceq's draft log-ratio)": lambda p, q: np.where(
        p > 0, np.clip(np.log(np.maximum(q, 1e-30)) - np.log(np.maximum(p, 1e-300)), -5.0, 5.0), 0.0),
}
OPTIMAL = "(p' - p)/p (locally most powerful, knows the bug)"


def efficacy_sums(mutant: str, cases: Sequence[Case], rows: int, seed: int) -> dict[str, dict[str, list[float]]]:
    """Per case and score: [sum of drifts, sum of variances] over every position of ``rows`` target-sampled rows."""
    engine = make_mutant(mutant)
    gen = torch.Generator().manual_seed(seed)
    out: dict[str, dict[str, list[float]]] = {}
    for case in cases:
        params = case.params
        ids = torch.tensor([list(case.prompt_ids)] * rows)
        sums = out.setdefault(case.case_id, {name: [0.0, 0.0] for name in [*SCORES, OPTIMAL]})
        for _ in range(params.max_new_tokens):
            with torch.inference_mode():
                p_all = engine.process_target(engine.model(input_ids=ids).logits[:, -1].float(), params).double()
                q_all = engine.process_draft(engine.draft(input_ids=ids).logits[:, -1].float(), params).double()
                laws = torch.stack([engine.single_step_law(p_all[i], q_all[i]).double() for i in range(rows)])
            laws = (laws / laws.sum(dim=1, keepdim=True)).numpy()
            for p, q, law in zip(p_all.numpy(), q_all.numpy(), laws):
                scored = {name: f(p, q) for name, f in SCORES.items()}
                scored[OPTIMAL] = np.where(p > 0, (law - p) / np.maximum(p, 1e-300), 0.0)
                for name, s in scored.items():
                    mean = float((p * s).sum())
                    sums[name][0] += float(((law - p) * s).sum())
                    sums[name][1] += max(0.0, float((p * s * s).sum()) - mean * mean)
            ids = torch.cat([ids, torch.multinomial(p_all.float(), 1, generator=gen)], dim=1)
    return out


def efficacy(sums: dict[str, dict[str, list[float]]], case_ids: Sequence[str] | None = None) -> dict[str, float]:
    """sum(drift) / sqrt(sum(variance)) per score over the given cases (all when None)."""
    chosen = list(sums) if case_ids is None else list(case_ids)
    names = list(next(iter(sums.values())))
    res = {}
    for name in names:
        drift = sum(sums[c][name][0] for c in chosen)
        var = sum(sums[c][name][1] for c in chosen)
        res[name] = drift / np.sqrt(var) if var > 0 else 0.0
    return res


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mutants", default="biased-ratio", help="comma-separated gallery names")
    ap.add_argument("--rows", type=int, default=150, help="target-sampled rows per default case")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    cases = default_cases()
    for mutant in args.mutants.split(","):
        start = time.perf_counter()
        sums = efficacy_sums(mutant, cases, args.rows, args.seed)
        total = efficacy(sums)
        best = total[OPTIMAL]
        print(f"## {mutant}: efficacy sum(drift)/sqrt(sum(var)), {args.rows} rows per case, seed {args.seed} "
              f"({time.perf_counter() - start:.0f} s)")
        print("| score | all cases | share of the optimum | " + " | ".join(sums) + " |")
        print("|---|---|---|" + "---|" * len(sums))
        per_case = {c: efficacy(sums, [c]) for c in sums}
        for name, value in total.items():
            share = value / best if best > 0 else float("nan")
            print(f"| {name} | {value:.3f} | {share:.2f} | " + " | ".join(f"{per_case[c][name]:.3f}" for c in sums) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
