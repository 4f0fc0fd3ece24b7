"""Analysis glue: samples (+ oracle scores) of every case -> tests -> decisions -> RunResult.

The primary tests of a case are fixed by its settings before any data is seen:

black-box (always)
    ``chi2 prompt j position 0`` for every prompt j of the batch layout (the case's prompt
    and its companions), ``chi2 joint first 2`` on the case's prompt, and, unless
    ``ignore_eos``, ``chi2 length``. Without an oracle, ``chi2 prompt j position t`` for
    every later position t is primary too; with one, those are diagnostics.
oracle (when a target oracle is given; over every generated token of the candidate, all
prompts of the batch)
    ``PIT Anderson-Darling``, ``z argmax leak``, ``z temperature drift``, ``z draft drift``
    (when the oracle has the draft) and ``chi2 GOF first token`` (case prompt). KS, Cramér-von
    Mises and the PIT histogram are diagnostics, and so is the same PIT on the *baseline*'s
    tokens (an A/A check of the oracle itself: if it rejects, the oracle does not model the
    baseline and the oracle tests are not trustworthy; a note says so).

Effect size: for the case's prompt, the plug-in TV between baseline and candidate of the
token (or END) at every generated position; the case's TV is the largest over positions and
its upper bound is the largest per-position bound, each at level alpha / (positions), so the
bound holds for all positions at once (union bound). With an oracle, position 0 uses the
one-sample bound against the exact target law instead.

Greedy cases (temperature 0) are not tested statistically: rows must be equal token for
token; each distinct first divergence is classified by the target's raw top-2 margin there
(:mod:`speceq.greedy`). A real mismatch is a hard failure (``shifted``); near-ties alone are
reported and the case stays ``equivalent``; divergences without an oracle to explain them
make it ``inconclusive``.
"""

from __future__ import annotations

import dataclasses
import math
import zlib
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from speceq import stats
from speceq.cases import Case
from speceq.engines.base import SampleBatch
from speceq.greedy import NEAR_TIE_NATS, classify_margin, first_divergence
from speceq.pictures import chi2_bins, martingale_paths
from speceq.verdicts.decide import CaseDecision, CaseEvidence, decide_run, run_verdict
from speceq.verdicts.result import (
    CaseResult,
    GreedyDivergence,
    GreedySummary,
    RunResult,
    SampleText,
    TestOutcome,
    TokenFrequency,
)

#: Top tokens shown per position in the report, and positions shown.
TOP_TOKENS = 8
TOP_POSITIONS = (0, 1)
#: Decoded sample texts kept per engine.
SAMPLE_TEXTS = 3
#: Baseline rows scored by the oracle for the A/A diagnostic (the oracle's own check).
BASELINE_AA_ROWS = 1000
#: Most greedy divergences listed per case.
MAX_DIVERGENCES = 10


def case_rng(seed: int, case_id: str, stream: int) -> np.random.Generator:
    """Independent generator per (run seed, case, purpose): PIT V draws, Monte Carlo tables."""
    return np.random.default_rng([seed, zlib.crc32(case_id.encode()), stream])


def _outcome(name: str, family: str, primary: bool, res: Any, summary: str | None = None) -> TestOutcome:
    stat = float(res.statistic)
    return TestOutcome(
        name=name,
        family=family,
        primary=primary,
        statistic=stat if math.isfinite(stat) else float("inf"),
        pvalue=float(res.pvalue),
        dof=float(res.dof) if getattr(res, "dof", None) is not None else None,
        n=int(res.n) if getattr(res, "n", None) is not None else None,
        summary=summary if summary is not None else res.summary(),
    )


def _head(batch: SampleBatch, rows: int) -> SampleBatch:
    """The first ``rows`` rows of a batch (totals and timing dropped)."""
    if batch.rows <= rows:
        return batch
    return SampleBatch(tokens=batch.tokens[:rows], lengths=batch.lengths[:rows], prompt_index=batch.prompt_index[:rows])


def _rows_of(batch: SampleBatch, prompt: int) -> tuple[np.ndarray, np.ndarray]:
    keep = np.asarray(batch.prompt_index) == prompt
    return batch.tokens[keep], batch.lengths[keep]


def _tokens_per_s(batch: SampleBatch) -> float | None:
    if not batch.wall_time_s:
        return None
    return float(batch.lengths.sum()) / batch.wall_time_s


class _Tok:
    """Token labels for display: ByteTokenizer for the bundled vocabulary, ids otherwise."""

    def __init__(self, vocab_size: int) -> None:
        from speceq.models import VOCAB_SIZE, ByteTokenizer

        self._bt = ByteTokenizer() if vocab_size == VOCAB_SIZE else None

    def token(self, t: int) -> str:
        if t == stats.END:
            return "<END>"
        return self._bt.token_text(int(t)) if self._bt else f"#{int(t)}"

    def text(self, ids: Sequence[int]) -> str:
        return self._bt.decode([int(i) for i in ids]) if self._bt else " ".join(str(int(i)) for i in ids)


def _effective_support(counts: np.ndarray) -> float:
    p = counts / max(1, counts.sum())
    return max(1.0, float(np.sqrt(p).sum() ** 2))


def _two_sample(case: Case, base: SampleBatch, cand: SampleBatch, *, oracle_mode: bool, alpha: float, rng: np.random.Generator,
                tok: _Tok):
    """Per-position chi-square tests (all prompts), joint and length tests; TV of the case prompt.

    Also the largest bins of every primary test with raw p <= alpha (one that may decide the
    case), for the report's picture of it.
    """
    L = case.params.max_new_tokens
    tests: list[TestOutcome] = []
    bins: list[Any] = []
    per_position: list[tuple[int, Any, np.ndarray, np.ndarray, np.ndarray]] = []  # case prompt only
    tv_alpha = alpha / L
    for j in range(len(case.prompts)):
        ta, la = _rows_of(base, j)
        tb, lb = _rows_of(cand, j)
        if len(la) == 0 or len(lb) == 0:
            continue
        for t in range(L):
            sa, sb = stats.position_symbols(ta, la, t), stats.position_symbols(tb, lb, t)
            if t > 0 and (sa == stats.END).all() and (sb == stats.END).all():
                break
            labels, ca, cb = stats.paired_counts(sa, sb)
            res = stats.chisquare_homogeneity(ca, cb, rng=rng, tv_alpha=tv_alpha)
            primary = t == 0 or not oracle_mode
            tests.append(_outcome(f"chi2 prompt {j} position {t}", "two-sample", primary, res))
            if primary and res.pvalue <= alpha:
                bins.append(chi2_bins(tests[-1].name, [tok.token(int(x)) for x in labels], ca, cb))
            if j == 0:
                per_position.append((t, res, labels, ca, cb))
    ta, la = _rows_of(base, 0)
    tb, lb = _rows_of(cand, 0)
    if L >= 2:
        labels, ca, cb = stats.paired_counts(stats.joint_symbols(ta, la, 2), stats.joint_symbols(tb, lb, 2))
        res = stats.chisquare_homogeneity(ca, cb, rng=rng)
        tests.append(_outcome("chi2 joint first 2", "two-sample", True, res))
        if res.pvalue <= alpha:
            pairs = [" ".join(tok.token(x) for x in stats.decode_joint(int(c), 2)) for c in labels]
            bins.append(chi2_bins("chi2 joint first 2", pairs, ca, cb))
    if not case.params.ignore_eos and L >= 2:
        labels, ca, cb = stats.paired_counts(la, lb)
        res = stats.chisquare_homogeneity(ca, cb, rng=rng)
        tests.append(_outcome("chi2 length", "sequence", True, res))
        if res.pvalue <= alpha:
            bins.append(chi2_bins("chi2 length", [f"{int(x)} tokens" for x in labels], ca, cb))
    return tests, per_position, bins


def _top_tokens(per_position, tok: _Tok, first_probs: np.ndarray | None) -> tuple[TokenFrequency, ...]:
    out = []
    for t, _res, labels, ca, cb in per_position:
        if t not in TOP_POSITIONS:
            continue
        order = np.argsort(-(ca + cb), kind="stable")[:TOP_TOKENS]
        for i in order:
            lab = int(labels[i])
            prob = None
            if t == 0 and first_probs is not None and lab >= 0:
                prob = float(first_probs[lab])
            out.append(TokenFrequency(position=t, token=lab, text=tok.token(lab), baseline_count=int(ca[i]),
                                      candidate_count=int(cb[i]), oracle_prob=prob))
    return tuple(out)


def _oracle_tests(case: Case, base: SampleBatch, cand: SampleBatch, oracle: Any, rng: np.random.Generator,
                  tok: _Tok, first_probs: np.ndarray):
    """PIT, martingale z-tests, first-token GOF; hard failures; baseline A/A diagnostic."""
    params = case.params
    scores = oracle.score(case.prompts, cand, params)
    tests: list[TestOutcome] = []
    notes: list[str] = []
    failures: list[str] = []
    sup = stats.support_violations(scores)
    for idx in sup.indices[:5]:
        r, t = int(scores.row[idx]), int(scores.position[idx])
        pj = int(cand.prompt_index[r])
        prefix = tok.text(list(case.prompts[pj]) + cand.row_tokens(r)[:t])
        failures.append(f"row {r} (prompt {pj}) position {t}: token {tok.token(int(scores.token[idx]))} has probability 0 "
                        f"under the processed target after {prefix[-40:]!r}")
    if sup.failed and sup.statistic > 5:
        failures.append(f"... {sup.statistic} such tokens in all")
    u = stats.randomized_pit(scores, rng)
    pit = stats.pit_uniformity(u)
    tests.append(_outcome("PIT Anderson-Darling", "oracle", True, pit.anderson_darling))
    tests.append(_outcome("PIT Kolmogorov-Smirnov", "oracle", False, pit.ks))
    tests.append(_outcome("PIT Cramér-von Mises", "oracle", False, pit.cramervonmises))
    tests.append(_outcome("PIT histogram chi2", "oracle", False, pit.histogram_chi2))
    tests.append(_outcome("z argmax leak", "oracle", True, stats.argmax_leak_z(scores)))
    tests.append(_outcome("z temperature drift", "oracle", True, stats.temperature_drift_z(scores)))
    if scores.has_draft:
        tests.append(_outcome("z draft drift", "oracle", True, stats.draft_drift_z(scores)))
    first = scores.position == 0
    first_tokens = scores.token[first & (np.asarray(cand.prompt_index)[scores.row] == 0)]
    counts = np.bincount(first_tokens, minlength=first_probs.size)
    gof = stats.chisquare_gof(counts, first_probs / first_probs.sum())
    tests.append(_outcome("chi2 GOF first token", "oracle", True, gof))
    # A/A diagnostic: the same PIT on the baseline's tokens
    base_scores = oracle.score(case.prompts, _head(base, BASELINE_AA_ROWS), params)
    base_pit = stats.pit_uniformity(stats.randomized_pit(base_scores, rng))
    tests.append(_outcome("baseline vs oracle PIT Anderson-Darling", "oracle", False, base_pit.anderson_darling))
    base_sup = stats.support_violations(base_scores)
    if base_sup.failed or base_pit.anderson_darling.pvalue < 1e-6:
        notes.append("the oracle does not model the baseline (baseline PIT p="
                     f"{base_pit.anderson_darling.pvalue:.2g}, {base_sup.statistic} zero-probability tokens): "
                     "oracle tests of this case are not trustworthy; check the oracle model and its processing")
    return tests, failures, notes, pit.histogram, gof, martingale_paths(scores)


def _greedy(case: Case, base: SampleBatch, cand: SampleBatch, oracle: Any | None, tok: _Tok):
    ta, la = _rows_of(base, 0)
    tb, lb = _rows_of(cand, 0)
    rows = min(len(la), len(lb))
    divergences: dict[tuple, GreedyDivergence] = {}
    equal = 0
    for r in range(rows):
        d = first_divergence(ta[r, : la[r]], tb[r, : lb[r]])
        if d is None:
            equal += 1
            continue
        key = (d.position, d.baseline_token, d.candidate_token, d.prefix)
        if key in divergences or len(divergences) >= MAX_DIVERGENCES:
            continue
        margin = None
        if oracle is not None:
            margin = float(oracle.raw_top2_margin([list(case.prompt_ids) + list(d.prefix)])[0])
        divergences[key] = GreedyDivergence(
            prompt_index=0, position=d.position, baseline_token=d.baseline_token, candidate_token=d.candidate_token,
            margin=margin, classification=classify_margin(margin), prefix_text=tok.text(list(case.prompt_ids) + list(d.prefix))[-60:],
        )
    return GreedySummary(rows_compared=rows, rows_equal=equal, near_tie_threshold=NEAR_TIE_NATS,
                         divergences=tuple(divergences.values()))


def _samples(case: Case, base: SampleBatch, cand: SampleBatch, tok: _Tok) -> tuple[SampleText, ...]:
    out = []
    for role, batch in (("baseline", base), ("candidate", cand)):
        rows = np.flatnonzero(np.asarray(batch.prompt_index) == 0)[:SAMPLE_TEXTS]
        for r in rows:
            ids = batch.row_tokens(int(r))
            out.append(SampleText(engine=role, prompt_index=0, text=tok.text(ids), token_ids=tuple(ids)))
    return tuple(out)


def _analyse_case(case: Case, base: SampleBatch, cand: SampleBatch, *, oracle: Any | None, alpha: float,
                  seed: int, tok: _Tok) -> tuple[CaseEvidence, dict[str, Any]]:
    n_base = int((np.asarray(base.prompt_index) == 0).sum())
    n_cand = int((np.asarray(cand.prompt_index) == 0).sum())
    extra: dict[str, Any] = dict(
        samples=_samples(case, base, cand, tok), notes=[],
        acceptance_rate=cand.acceptance_rate,
        baseline_tokens_per_s=_tokens_per_s(base), candidate_tokens_per_s=_tokens_per_s(cand),
        candidate_tokens=int(cand.lengths.sum()),
    )
    if extra["baseline_tokens_per_s"] and extra["candidate_tokens_per_s"]:
        extra["speedup_per_token"] = extra["candidate_tokens_per_s"] / extra["baseline_tokens_per_s"]
    if case.params.greedy:
        g = _greedy(case, base, cand, oracle, tok)
        extra["greedy"] = g
        kinds = [d.classification for d in g.divergences]
        failures = tuple(f"greedy rows differ at position {d.position} where the target's top-2 margin is "
                         f"{d.margin:.3g} nats (> {NEAR_TIE_NATS:g}): {tok.token(d.baseline_token)} vs "
                         f"{tok.token(d.candidate_token)} after {d.prefix_text[-30:]!r}"
                         for d in g.divergences if d.classification == "mismatch")
        unexplained = "unexplained" in kinds
        if "near-tie" in kinds:
            extra["notes"].append(f"{g.rows_compared - g.rows_equal} of {g.rows_compared} rows diverge; "
                                  "divergences at numerical near-ties are expected and not a failure")
        tv = 0.0 if not unexplained else (g.rows_compared - g.rows_equal) / max(1, g.rows_compared)
        ev = CaseEvidence(case_id=case.case_id, tests=(), tv_estimate=tv, tv_upper_bound=None if unexplained else 0.0,
                          effective_support=1.0, mode="two-sample", n_baseline=n_base, n_candidate=n_cand,
                          hard_failures=failures)
        if unexplained:
            extra["greedy_reason"] = (f"{g.rows_compared - g.rows_equal} of {g.rows_compared} greedy rows diverge and no "
                                      "oracle is available to classify them; rerun with the oracle")
        return ev, extra

    rng = case_rng(seed, case.case_id, 0)
    tests, per_position, bins = _two_sample(case, base, cand, oracle_mode=oracle is not None, alpha=alpha, rng=rng,
                                            tok=tok)
    extra["test_bins"] = tuple(bins)
    failures: list[str] = []
    first_probs = None
    bounds = [(t, res.tv, res.tv_upper_bound) for t, res, *_ in per_position]
    if oracle is not None:
        first_probs = oracle.next_token_probs([list(case.prompt_ids)], case.params)[0].astype(np.float64)
        o_tests, failures, notes, hist, gof, extra["z_paths"] = _oracle_tests(case, base, cand, oracle, case_rng(seed, case.case_id, 1),
                                                             tok, first_probs)
        tests += o_tests
        extra["notes"] += notes
        extra["pit_histogram"] = tuple(int(h) for h in hist)
        if bounds:
            alpha_t = alpha / max(1, len(bounds))
            bounds[0] = (0, gof.tv, stats.tv_upper_bound_oracle(gof.tv, gof.n, alpha_t))
    extra["top_tokens"] = _top_tokens(per_position, tok, first_probs)
    if bounds:
        worst = max(range(len(bounds)), key=lambda i: bounds[i][2])
        tv_est = max(b[1] for b in bounds)
        tv_up = bounds[worst][2]
        _, _, _, ca, cb = per_position[worst]
        k_eff = _effective_support(ca + cb)
    else:
        tv_est = tv_up = None
        k_eff = 1.0
    extra["tv_reference"] = "oracle (position 0) and two-sample" if oracle is not None else "two-sample"
    ev = CaseEvidence(case_id=case.case_id, tests=tuple(tests), tv_estimate=tv_est, tv_upper_bound=tv_up,
                      effective_support=k_eff, mode="two-sample", n_baseline=n_base, n_candidate=n_cand,
                      hard_failures=tuple(failures), bound_alpha=alpha / max(1, len(bounds)))
    return ev, extra


def analyse_run(
    cases: Sequence[Case],
    baseline: Mapping[str, SampleBatch],
    candidate: Mapping[str, SampleBatch],
    *,
    oracle: Any | None,
    alpha: float,
    tolerance: float,
    seed: int,
    engines: Mapping[str, Any],
    provenance: Mapping[str, Any],
    progress: bool = False,
) -> RunResult:
    """Analyse a run and decide every case.

    baseline / candidate: case id -> every row collected for that case (chunks concatenated
    in slice order; ``prompt_index`` says which prompt of ``case.prompts`` a row continues).
    ``oracle``: a :class:`speceq.oracle.TargetOracle` or None for black-box mode.
    ``engines``: {"baseline": describe(), "candidate": describe()}.
    """
    vocab = getattr(oracle, "vocab_size", None) or 259
    tok = _Tok(vocab)
    evidence: list[CaseEvidence] = []
    extras: list[dict[str, Any]] = []
    iterator: Any = cases
    if progress:
        from rich.progress import track

        iterator = track(cases, description="analysing", transient=True)
    for case in iterator:
        ev, extra = _analyse_case(case, baseline[case.case_id], candidate[case.case_id], oracle=oracle, alpha=alpha,
                                  seed=seed, tok=tok)
        evidence.append(ev)
        extras.append(extra)
    decisions = decide_run(evidence, alpha=alpha, tolerance=tolerance)
    results = tuple(_case_result(c, ev, d, x, tolerance) for c, ev, d, x in zip(cases, evidence, decisions, extras))
    verdict = run_verdict([dataclasses.replace(d, verdict=r.verdict) for d, r in zip(decisions, results)])
    return RunResult(
        verdict=verdict, alpha=alpha, tolerance=tolerance, seed=seed, engines=dict(engines), cases=results,
        oracle=None if oracle is None else oracle.describe(), provenance=dict(provenance),
    )


def _case_result(case: Case, ev: CaseEvidence, d: CaseDecision, x: Mapping[str, Any], tolerance: float) -> CaseResult:
    verdict, reason = d.verdict, d.reason
    if "greedy_reason" in x and verdict != "shifted":
        verdict, reason = "inconclusive", x["greedy_reason"]
    elif case.params.greedy and verdict == "equivalent":
        g = x["greedy"]
        reason = (f"{g.rows_equal} of {g.rows_compared} greedy rows equal token for token"
                  + ("; the others diverge only at numerical near-ties" if g.rows_equal < g.rows_compared else ""))
    return CaseResult(
        case_id=case.case_id, case=case.to_dict(), verdict=verdict, reason=reason, tolerance=tolerance,
        n_baseline=ev.n_baseline, n_candidate=ev.n_candidate, tests=d.tests, tv_estimate=d.tv_estimate,
        tv_upper_bound=d.tv_upper_bound, tv_reference=x.get("tv_reference", "two-sample"),
        required_n=d.required_n if verdict == "inconclusive" and "greedy_reason" not in x else None,
        candidate_tokens=x["candidate_tokens"], acceptance_rate=x["acceptance_rate"],
        baseline_tokens_per_s=x["baseline_tokens_per_s"], candidate_tokens_per_s=x["candidate_tokens_per_s"],
        speedup_per_token=x.get("speedup_per_token"), top_tokens=x.get("top_tokens", ()),
        pit_histogram=x.get("pit_histogram", ()), greedy=x.get("greedy"), samples=x["samples"],
        hard_failures=ev.hard_failures, notes=tuple(x["notes"]),
        z_paths=x.get("z_paths", ()), test_bins=x.get("test_bins", ()),
    )
