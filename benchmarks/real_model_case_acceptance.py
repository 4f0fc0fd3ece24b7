"""Expected acceptance of the SmolLM2 draft, per generated position, on the job's cases and the cost benchmark's prompt.

For each sampling case of ``speceq.inputs.cases.smollm2_cases()`` (at the case's temperature
and top-p) and for the chat prompt of ``benchmarks/bench_real_model.py`` (T = 1.0, 16 tokens,
EOS disabled), ``baseline`` samples ``--rows`` continuations and the oracle, given the prepared
layer-skipping draft, scores them: ``1 - draft_tv`` at a token's prefix is the probability that
one draft token drafted there is accepted (sum_x min(p(x), q(x)), Leviathan et al., Theorem 3.5).
Prints its mean per generated position and over all positions. Explains the acceptance an
engine reports on a case: with 2 new tokens and one draft per step, ``hf-assisted`` drafts at
position 0 only (a rejected draft leaves one token, which transformers samples without drafting).

Usage: python benchmarks/real_model_case_acceptance.py [--rows 64] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
from typing import Any

import numpy as np

from speceq.core.params import SamplingParams
from speceq.engines.base import SampleRequest
from speceq.engines.baseline import BaselineEngine
from speceq.inputs.cases import smollm2_cases
from speceq.models.smollm2 import prepared
from speceq.models.torch_utils import configure_threads
from speceq.oracles.hf import TargetOracle


def position_acceptance(engine: BaselineEngine, oracle: TargetOracle, prompt: tuple[int, ...],
                        params: SamplingParams, rows: int) -> dict[str, Any]:
    """Mean expected one-draft acceptance (1 - TV(p_t, q_t)) per generated position of ``rows`` sampled rows."""
    batch = engine.sample(SampleRequest(prompts=(prompt,), params=params, n=rows, seed=0, batch_size=rows))
    scores = oracle.score([prompt], batch, params)
    accept = 1.0 - np.asarray(scores.draft_tv, dtype=np.float64)
    pos = np.asarray(scores.position)
    per = [float(accept[pos == t].mean()) for t in range(int(pos.max()) + 1)]
    return {"per_position": per, "rows_reaching": [int((pos == t).sum()) for t in range(len(per))],
            "mean": float(accept.mean())}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=64, help="sampled rows per case. Default: %(default)s")
    ap.add_argument("--json", default=None, help="write the numbers here")
    args = ap.parse_args()
    configure_threads(1)
    world = prepared(None)
    engine = BaselineEngine(str(world.target))
    oracle = TargetOracle(engine.model, draft=str(world.draft), eos_token_id=engine.eos_token_id, share_prefix=True)
    out: dict[str, Any] = {}
    for case in smollm2_cases():
        if case.params.greedy:
            continue
        out[case.case_id] = position_acceptance(engine, oracle, case.prompt_ids, case.params, args.rows)
    from bench_real_model import chat_prompt  # the cost benchmark's prompt, next to this file

    bench = SamplingParams(temperature=1.0, max_new_tokens=16, ignore_eos=True)
    out["bench_real_model prompt (T = 1.0, 16 tokens, EOS disabled)"] = position_acceptance(
        engine, oracle, chat_prompt(str(world.target)), bench, args.rows)
    for name, r in out.items():
        per = " ".join(f"{a:.2f}" for a in r["per_position"])
        print(f"{name}: mean {r['mean']:.3f}; per position {per}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=2)


if __name__ == "__main__":
    main()
