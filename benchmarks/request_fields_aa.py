"""Pipeline A/A with the request fields on: false `shifted` runs when laws depend on history (issue #45).

Both engines draw rows exactly from one small model's *processed* law -- the raw law is a Markov
model built from the bundled target (:func:`tail_calibration.markov_model`, EOS-prone), processed
by :func:`speceq.core.processing.process_logits` given each row's own history (its prompt and the
tokens it generated so far) -- and the oracle (:class:`ProcessedMarkovOracle`) scores every token
with that same processed law given the row's history. Each run is one call of the real
:func:`speceq.pipeline.analysis.analyse_run` over four cases, one per field family (every primary
test, the run-level pooled tests, Holm over the run, the decision):

- ``penalties-vllm``: repetition 1.5 (prompt and generated tokens), frequency 0.8, presence 0.8, vllm order;
- ``min-p``: min_p 0.1 at temperature 0.7;
- ``logit-bias``: +2 and -3 on head tokens, -100 on the most likely one (banned in practice);
- ``hf-order``: repetition 1.2, top-k 40, top-p 0.9, min_p 0.05 at temperature 0.8, transformers' order.

A run is a false alarm when its verdict is ``shifted``; the count is compared with alpha through
P(X >= k), X ~ Binomial(runs, alpha). ``--wrong``: the control that the check can fail -- the
candidate engine draws from a wrong law (``history``: its penalties see the prompt but not the
row's generated tokens, a verifier whose history is never advanced; ``bias``: logit_bias
dropped), so runs must come out ``shifted``. With ``--wrong-side oracle`` the oracle scores both
engines with that wrong law instead: the primary oracle tests compare the candidate with the
baseline through the oracle, so a wrong oracle shared by two equal engines is no shift; the last
column counts the runs where the secondary one-sample PIT test (candidate vs oracle) sees it.

Usage::

    python benchmarks/request_fields_aa.py --runs 100000 --minutes 21   # A/A, alpha 1e-3, for 21 minutes
    python benchmarks/request_fields_aa.py --runs 5 --wrong history
    python benchmarks/request_fields_aa.py --runs 3 --wrong history --wrong-side oracle
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from scipy import stats as sps

from speceq.core.params import SamplingParams
from speceq.core.processing import TokenHistory, process_logits
from speceq.engines.base import SampleBatch
from speceq.inputs.cases import Case
from speceq.stats.synthetic import sample_categorical, scores_from_probs

ALPHA = 1e-3
#: The oracle's wrong laws of the control (``--wrong``).
WRONG = ("history", "bias")
#: Who uses the wrong law in the control: the candidate engine or the oracle.
SIDES = ("candidate", "oracle")
MAX_NEW_TOKENS = 6


class ProcessedMarkov:
    """A first-order Markov model's raw laws, processed per row given the row's own history.

    initial: ``[V]`` raw law of the first generated token; transition: ``[V, V]`` raw law of the
    next token given the previous one (row ``eos`` unused: a row ends at EOS). The raw logits are
    log-probabilities (a zero probability is a -inf logit).
    """

    def __init__(self, initial: np.ndarray, transition: np.ndarray, eos: int) -> None:
        self.initial = np.asarray(initial, dtype=np.float64)
        self.transition = np.asarray(transition, dtype=np.float64)
        self.eos = int(eos)
        self.vocab_size = self.initial.size
        with np.errstate(divide="ignore"):
            self.init_logits = torch.from_numpy(np.log(self.initial)).float()
            self.trans_logits = torch.from_numpy(np.log(self.transition)).float()

    def laws(self, prompt: Sequence[int], tokens: np.ndarray, positions: np.ndarray, rows: np.ndarray,
             params: SamplingParams, *, generated_history: bool = True) -> np.ndarray:
        """Processed laws ``[n, V]`` (float64, rows sum to 1) at (rows[i], positions[i]) of ``tokens``.

        ``tokens``: ``[R, L]`` generated ids (only the tokens before each position are read);
        every row continues ``prompt``. ``generated_history=False`` gives the penalties the prompt
        only (the wrong oracle of the control).
        """
        V, n = self.vocab_size, rows.size
        prev = tokens[rows, np.maximum(positions - 1, 0)]
        logits = torch.where(torch.from_numpy(positions > 0)[:, None], self.trans_logits[torch.from_numpy(prev)],
                             self.init_logits[None, :])
        history = None
        if params.uses_history:
            mask = torch.zeros((n, V), dtype=torch.bool)
            mask[:, torch.as_tensor(list(prompt), dtype=torch.long)] = True
            counts = np.zeros((n, V), dtype=np.float32)
            if generated_history:
                for j in range(int(positions.max(initial=0))):
                    at = positions > j
                    np.add.at(counts, (np.flatnonzero(at), tokens[rows[at], j]), 1.0)
            history = TokenHistory(prompt_mask=mask, output_counts=torch.from_numpy(counts))
        probs = process_logits(logits, params, history=history).double().numpy()
        return probs / probs.sum(axis=1, keepdims=True)

    def sample(self, prompt: Sequence[int], params: SamplingParams, rows: int,
               rng: np.random.Generator, *, generated_history: bool = True) -> SampleBatch:
        """``rows`` rows drawn exactly from the processed law, token by token, each given its own history.

        ``generated_history=False``: the penalties see the prompt only (the wrong engine of the control).
        """
        L = params.max_new_tokens
        tokens = np.full((rows, L), -1, dtype=np.int64)
        lengths = np.zeros(rows, dtype=np.int64)
        alive = np.arange(rows)
        for t in range(L):
            p = self.laws(prompt, tokens, np.full(alive.size, t), alive, params, generated_history=generated_history)
            tok = sample_categorical(p, rng)
            tokens[alive, t] = tok
            lengths[alive] += 1
            alive = alive[tok != self.eos]
            if alive.size == 0:
                break
        return SampleBatch(tokens=tokens, lengths=lengths, prompt_index=np.zeros(rows, dtype=np.int64))


class ProcessedMarkovOracle:
    """Exact oracle of a :class:`ProcessedMarkov` model (an :class:`speceq.oracles.protocol.Oracle`).

    ``wrong``: None (exact), ``"history"`` (the penalties never see the generated tokens) or
    ``"bias"`` (logit_bias dropped): the controls that must be detected.
    """

    has_draft = False
    eos_token_id = None

    def __init__(self, model: ProcessedMarkov, wrong: str | None = None) -> None:
        if wrong not in (None, *WRONG):
            raise ValueError(f"wrong must be None or one of {WRONG}, got {wrong!r}")
        self.model, self.wrong = model, wrong
        self.vocab_size = model.vocab_size

    def knows_full_law(self, params: SamplingParams) -> bool:
        return True

    def describe(self) -> dict[str, Any]:
        return {"model": "processed Markov oracle" + (f" (wrong: {self.wrong})" if self.wrong else "")}

    def _params(self, params: SamplingParams) -> SamplingParams:
        return wrong_params(params, self.wrong)

    def next_token_probs(self, prefixes: Sequence[Sequence[int]], params: SamplingParams) -> np.ndarray:
        """The first generated token's processed law after each prompt (the prompt is its history)."""
        none = np.zeros((1, 1), dtype=np.int64)
        return np.concatenate([self.model.laws(p, none, np.zeros(1, dtype=np.int64), np.zeros(1, dtype=np.int64),
                                               self._params(params)) for p in prefixes])

    def raw_top2_margin(self, prefixes: Sequence[Sequence[int]]) -> np.ndarray:
        top = np.sort(self.model.initial)[-2:]
        return np.full(len(prefixes), math.log(top[1]) - math.log(top[0]))

    def score(self, prompts: Sequence[Sequence[int]], batch: SampleBatch, params: SamplingParams) -> Any:
        if len(prompts) != 1:
            raise ValueError(f"one prompt per case expected, got {len(prompts)}")
        tokens, lengths = np.asarray(batch.tokens), np.asarray(batch.lengths)
        rows, pos = np.nonzero(np.arange(tokens.shape[1])[None, :] < lengths[:, None])
        probs = self.model.laws(prompts[0], tokens, pos, rows, self._params(params),
                                generated_history=self.wrong != "history")
        s = scores_from_probs(probs, tokens[rows, pos])
        return dataclasses.replace(s, row=rows.astype(np.int64), position=pos.astype(np.int64))


def wrong_params(params: SamplingParams, wrong: str | None) -> SamplingParams:
    """``params`` as the ``"bias"`` control sees them (logit_bias dropped); unchanged otherwise."""
    return dataclasses.replace(params, logit_bias=()) if wrong == "bias" else params


def field_cases(initial: np.ndarray, prompt_head: int = 100) -> list[Case]:
    """The four cases, one per field family; prompts hold two head tokens so the repetition penalty bites at once."""
    heads = [int(x) for x in np.argsort(-initial)[:6]]
    prompt = (prompt_head, heads[0], heads[2])
    L = MAX_NEW_TOKENS
    return [
        Case(case_id="penalties-vllm", prompt_ids=prompt, params=SamplingParams(max_new_tokens=L, repetition_penalty=1.5,
                                                      frequency_penalty=0.8, presence_penalty=0.8)),
        Case(case_id="min-p", prompt_ids=prompt, params=SamplingParams(max_new_tokens=L, temperature=0.7, min_p=0.1)),
        Case(case_id="logit-bias", prompt_ids=prompt, params=SamplingParams(max_new_tokens=L, logit_bias={heads[0]: -100.0, heads[1]: 2.0,
                                                                                  heads[3]: -3.0, heads[5]: 2.0})),
        Case(case_id="hf-order", prompt_ids=prompt, params=SamplingParams(max_new_tokens=L, temperature=0.8, repetition_penalty=1.2, top_k=40,
                                                top_p=0.9, min_p=0.05, processing="hf")),
    ]


def bundled_model(eos_boost: float = 0.1) -> ProcessedMarkov:
    """The Markov model of the bundled target (tail_calibration's), EOS probability ``eos_boost`` per step."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from tail_calibration import markov_model

    from speceq.models import EOS_ID

    init, trans = markov_model(1.0, eos_boost=eos_boost)
    return ProcessedMarkov(init, trans, EOS_ID)


def _deciding(result: Any) -> str:
    """The case and primary test with the smallest Holm-adjusted p-value (or the first hard failure)."""
    from speceq.verdicts.result import POOLED_CASE_ID

    for c in result.cases:
        if c.hard_failures:
            return f"{c.case_id}: hard failure: {c.hard_failures[0][:60]}"
    tests = [(c.case_id, t) for c in result.cases for t in c.tests] + [(POOLED_CASE_ID, t) for t in result.pooled_tests]
    tests = [(c, t) for c, t in tests if t.primary and t.adjusted_pvalue is not None]
    if not tests:
        return "?"
    case_id, t = min(tests, key=lambda ct: ct[1].adjusted_pvalue)
    return f"{case_id}: {t.name}"


def aa_runs(model: ProcessedMarkov, runs: int, samples: int, seed: int = 0, wrong: str | None = None,
            wrong_side: str = "candidate", alpha: float = ALPHA, progress: Callable[[str], None] | None = None,
            cases: Sequence[Case] | None = None) -> tuple[int, Counter, list[Any]]:
    """``shifted`` runs of the whole analysis over A/A runs, what decided them, and every RunResult.

    ``wrong=None``: both engines and the oracle exact (the A/A). Otherwise the control: the
    ``wrong_side`` (``"candidate"`` engine or ``"oracle"``) uses the ``wrong`` law of :data:`WRONG`.
    """
    from speceq.pipeline.analysis import analyse_run

    cases = list(cases) if cases is not None else field_cases(model.initial)
    if wrong_side not in SIDES:
        raise ValueError(f"wrong_side must be one of {SIDES}, got {wrong_side!r}")
    oracle = ProcessedMarkovOracle(model, wrong if wrong_side == "oracle" else None)
    bad = wrong if wrong_side == "candidate" else None
    shifted, why, results = 0, Counter(), []
    children = np.random.SeedSequence(seed).spawn(runs)
    for r in range(runs):
        rng = np.random.default_rng(children[r])
        base = {c.case_id: model.sample(c.prompt_ids, c.params, samples, rng) for c in cases}
        cand = {c.case_id: model.sample(c.prompt_ids, wrong_params(c.params, bad), samples, rng,
                                        generated_history=bad != "history") for c in cases}
        res = analyse_run(cases, base, cand, oracle=oracle, alpha=alpha, tolerance=0.15, seed=r,
                          engines={"baseline": {}, "candidate": {}}, provenance={})
        results.append(res)
        if res.verdict == "shifted":
            shifted += 1
            why[_deciding(res)] += 1
        if progress is not None and (r + 1) % max(1, runs // 20) == 0:
            progress(f"{r + 1}/{runs} runs, {shifted} shifted")
    return shifted, why, results


def one_sample_alarm(result: Any, alpha: float = ALPHA) -> bool:
    """Whether a case's one-sample (candidate vs oracle) PIT Anderson-Darling test has p < alpha.

    A secondary test: it is where an oracle that is wrong for both engines alike shows, since the
    primary oracle tests compare the candidate with the baseline through the oracle.
    """
    return any(t.name == "PIT Anderson-Darling" and t.pvalue < alpha for c in result.cases for t in c.tests)


def binomial_tail(k: int, runs: int, alpha: float = ALPHA) -> float:
    """P(X >= k) for X ~ Binomial(runs, alpha): small means more false alarms than an alpha-level decision gives."""
    return float(sps.binom.sf(k - 1, runs, alpha)) if k else 1.0


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=400)
    ap.add_argument("--samples", type=int, default=1000, help="rows per engine and case. Default: %(default)s")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--wrong", choices=WRONG, default=None, help="the control: a wrong law on --wrong-side")
    ap.add_argument("--wrong-side", choices=SIDES, default="candidate", help="Default: %(default)s")
    ap.add_argument("--minutes", type=float, default=0.0, help="stop after this many minutes (0: run every run)")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    t0 = time.time()

    def say(msg: str) -> None:
        print(f"[{time.time() - t0:6.0f} s] {msg}", file=sys.stderr, flush=True)

    model = bundled_model()
    done, shifted, why, one_sample = 0, 0, Counter(), 0
    block = 10  # runs per block; the time limit is checked between blocks, each with its own seed
    while done < args.runs and not (args.minutes and time.time() - t0 > 60 * args.minutes):
        n = min(block, args.runs - done)
        k, w, results = aa_runs(model, n, args.samples, seed=args.seed * 1_000_003 + done, wrong=args.wrong,
                          wrong_side=args.wrong_side)
        done, shifted = done + n, shifted + k
        why.update(w)
        one_sample += sum(one_sample_alarm(r) for r in results)
        say(f"{done} runs, {shifted} shifted")
    band = ALPHA + 3 * math.sqrt(ALPHA * (1 - ALPHA) / done)
    label = f"wrong {args.wrong_side} ({args.wrong})" if args.wrong else "A/A: engines and oracle exact"
    print(f"| world | runs | `shifted` runs | rate | 3-sigma band at alpha {ALPHA:g} | P(X >= k) | decided by | "
          f"runs with a one-sample PIT AD p < {ALPHA:g} |")
    print("|---|---|---|---|---|---|---|---|")
    decided = "; ".join(f"{n}: {c}" for n, c in why.most_common(4)) or "—"
    print(f"| {label} | {done} | {shifted} | {shifted / done:.4f} | {band:.4f} | {binomial_tail(shifted, done):.2f} | "
          f"{decided} | {one_sample} |")
    say("done")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
