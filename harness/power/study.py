"""The power study: samples-to-detect of every method against every mutant, false alarms, power curve.

For each mutant (at the sampling parameters where its bug acts, :attr:`MutantSpec.params`):

- speceq: the full analysis (:func:`speceq.pipeline.analysis.analyse_run`, oracle on) of ``n``
  baseline and ``n`` candidate samples per repetition (disjoint slices of seeded sample
  pools), ``reps`` repetitions, sizes from ``grid`` in increasing order until the rejection
  rate at ``alpha`` reaches ``power``; the default budget of ``speceq run`` is measured too
  (from the same analyses: Holm-adjusted p-values do not depend on alpha).
- first-token methods (:mod:`~speceq.power.simulate`): simulated from the mutant's exact
  first-token law when it has one (many cheap repetitions), else on engine samples.
- greedy exact match and speceq's own greedy check: the same case at temperature 0.
- one-row TVs (:mod:`~speceq.power.ceiling`): what any test could detect from one row.

Lossless variants and the reference engine get the same measurements at one size
(``false_alarm_n``): every rejection there is a false alarm.
"""

from __future__ import annotations

import dataclasses
import time
import zlib
from collections.abc import Callable
from typing import Any

import numpy as np

from speceq.core.params import SamplingParams
from speceq.engines.mutants import MUTANTS, MutantSpec, enumerable, make_mutant
from speceq.errors import ConfigError
from speceq.inputs.cases import Case
from speceq.power.ceiling import RowTV, greedy_row_tv, mixture_row_tv, support_row_tv
from speceq.power.exact import ExactLaws, exact_laws
from speceq.power.pools import SamplePool
from speceq.power.results import CurvePoint, Detection, PowerResult, VariantResult
from speceq.power.settings import PowerSettings
from speceq.power.simulate import FIRST_TOKEN_METHODS, first_token_rates

Log = Callable[[str], None]
#: The reference engine's row in the lossless table.
REFERENCE = "reference"
#: Companion prompts (indices into DEFAULT_PROMPTS) of batch-bug cases: other lengths.
COMPANIONS = (7, 8)


def _quiet(_: str) -> None:
    return None


class PowerStudy:
    """Loads the bundled models once and measures variants; see the module docstring."""

    def __init__(self, settings: PowerSettings, *, threads: int | None = None, log: Log = _quiet) -> None:
        from speceq.engines.baseline import BaselineEngine
        from speceq.engines.reference import ReferenceSpeculativeEngine
        from speceq.models import ByteTokenizer, load_draft
        from speceq.models.prompts import DEFAULT_PROMPTS
        from speceq.models.torch_utils import configure_threads

        configure_threads(threads)
        self.s = settings
        self.log = log
        self.baseline = BaselineEngine()
        self.draft_model = load_draft()
        self.reference = ReferenceSpeculativeEngine(self.baseline.model, self.draft_model, name=REFERENCE)
        tok = ByteTokenizer()
        self.prompt = tuple(tok.encode(DEFAULT_PROMPTS[settings.prompt_index]))
        self.companions = tuple(tuple(tok.encode(DEFAULT_PROMPTS[i])) for i in COMPANIONS)
        self._baseline_pools: dict[str, SamplePool] = {}

    # ---- building blocks ------------------------------------------------------------------
    def case(self, name: str, spec: MutantSpec | None, *, greedy: bool = False) -> Case:
        params: dict[str, Any] = dict(spec.params) if spec is not None else {}
        if greedy:
            params["temperature"] = 0.0
        batch = spec is not None and spec.bug_class == "batch"
        sampling = SamplingParams(max_new_tokens=self.s.max_new_tokens, **params)
        return Case(case_id=name, prompt_ids=self.prompt, params=sampling, batch_size=self.s.batch_size,
                    companions=self.companions if batch else ())

    def engine(self, spec: MutantSpec | None, **options: Any) -> Any:
        if spec is None:
            return self.reference
        shared = {"target": self.baseline.model}
        if spec.name != "draft-is-target":
            shared["draft"] = self.draft_model
        return make_mutant(spec.name, **shared, **{**spec.options, **options})

    def baseline_pool(self, case: Case) -> SamplePool:
        key = f"baseline|{case.params.label()}|{case.companions}"
        if key not in self._baseline_pools:
            self._baseline_pools[key] = SamplePool(self.baseline, case, seed=self.s.seed, label=key)
        return self._baseline_pools[key]

    def rng(self, name: str, stream: int) -> np.random.Generator:
        return np.random.default_rng([self.s.seed, zlib.crc32(name.encode()), stream])

    def speceq_min_p(self, case: Case, base: SamplePool, cand: SamplePool, oracle: Any, n: int, r: int) -> float:
        """Smallest Holm-adjusted primary p-value of one repetition (0 on a hard failure)."""
        from speceq.core.defaults import SUPPORT_MARGIN_NATS  # the bundled byte models' measured margin
        from speceq.pipeline.analysis import analyse_run

        cid = case.case_id
        result = analyse_run([case], {cid: base.rep(r, n)}, {cid: cand.rep(r, n)}, oracle=oracle, alpha=self.s.alpha,
                             tolerance=0.05, seed=self.s.seed * 1_000_003 + r, engines={"baseline": {}, "candidate": {}},
                             provenance={}, support_margin_nats=SUPPORT_MARGIN_NATS)
        res = result.cases[0]
        if res.hard_failures:
            return 0.0
        return min((t.adjusted_pvalue for t in res.tests if t.primary and t.adjusted_pvalue is not None), default=1.0)

    def speceq_rates(self, case: Case, base: SamplePool, cand: SamplePool, oracle: Any, n: int, reps: int
                     ) -> tuple[float, float]:
        """(rate at alpha, rate at budget_alpha) over ``reps`` repetitions of size ``n``."""
        cand.ensure(reps * n)
        base.ensure(reps * n)
        ps = np.array([self.speceq_min_p(case, base, cand, oracle, n, r) for r in range(reps)])
        return float(np.mean(ps <= self.s.alpha)), float(np.mean(ps <= self.s.budget_alpha))

    def greedy_checks(self, name: str, spec: MutantSpec | None, engine: Any, oracle: Any, reps: int
                      ) -> tuple[Detection, Detection, RowTV]:
        """Greedy exact match and speceq's greedy check at each size of ``greedy_grid``, and the greedy one-row TV.

        Both use the same case at temperature 0. Exact match flags a repetition when any of its
        rows (every prompt of the layout) differs from the baseline's greedy row; speceq's check
        is the full analysis of the greedy case (a divergence that is not a numerical near-tie
        of the target is a hard failure). The one-row TV is the fraction of all greedy samples
        drawn that differ (exact: the correct law is a point mass).
        """
        case = self.case(name, spec, greedy=True)
        sizes = self.s.greedy_grid
        total = max(sizes) * reps
        base = SamplePool(self.baseline, case, seed=self.s.seed, label=f"greedy-baseline|{name}", chunk=total)
        cand = SamplePool(engine, case, seed=self.s.seed, label=f"greedy|{name}", chunk=total)
        prompts = len(case.prompts)
        expected = base.take(0, 1)
        drawn = cand.take(0, total)
        width = min(drawn.tokens.shape[1], expected.tokens.shape[1])
        tok = drawn.tokens.reshape(total, prompts, -1)
        differs_row = (np.any(tok[:, :, :width] != expected.tokens[None, :, :width], axis=2)
                       | (drawn.lengths.reshape(total, prompts) != expected.lengths[None, :]))
        differs = differs_row.any(axis=1)  # per sample (one row per prompt)
        exact, mine = [], []
        for n in sizes:
            exact.append(float(np.mean([differs[r * n:(r + 1) * n].any() for r in range(reps)])))
            ps = [self.speceq_min_p(case, base, cand, oracle, n, r) for r in range(reps)]
            mine.append(float(np.mean(np.asarray(ps) <= self.s.alpha)))
        return (self._detection("greedy", list(sizes), exact, reps, "engine samples"),
                self._detection("speceq_greedy", list(sizes), mine, reps, "engine samples"),
                greedy_row_tv(differs))

    def sampled_row_tv(self, spec: MutantSpec, engine: Any, case: Case, pool: SamplePool, oracle: Any) -> RowTV | None:
        """The one-row TV of a mutant's sampled rows where its ``row_law`` says how (else None)."""
        if spec.row_law is None:
            return None
        batch = pool.take(0, self.s.ceiling_rows)
        scores = oracle.score(list(case.prompts), batch, case.params)
        rows = batch.rows
        if spec.row_law == "support":
            bad = np.zeros(rows, dtype=bool)
            bad[scores.row[np.asarray(scores.prob) <= 0]] = True
            return support_row_tv(bad)
        if spec.row_law == "mixture":
            if scores.draft_tv is None:
                raise ValueError("the mixture ceiling needs an oracle with the draft model")
            sums = np.bincount(scores.row, weights=scores.draft_tv, minlength=rows)
            return mixture_row_tv(float(engine.mix), sums)
        raise ValueError(f"unknown row_law {spec.row_law!r} of mutant {spec.name}; expected 'support' or 'mixture'")

    def _n90(self, sizes: list[int], rates: list[float]) -> int | None:
        return next((n for n, r in zip(sizes, rates) if r >= self.s.power), None)

    def _detection(self, method: str, sizes: list[int], rates: list[float], reps: int, source: str) -> Detection:
        return Detection(method=method, sizes=tuple(sizes), rates=tuple(float(r) for r in rates), reps=reps, source=source,
                         n90=self._n90(sizes, rates))

    # ---- first-token methods ----------------------------------------------------------------
    def simulated_detections(self, name: str, laws: ExactLaws) -> list[Detection]:
        """First-token methods against an exact law, each over ``method_grid`` until it reaches ``power``."""
        V = laws.engine.shape[1] - 1
        p = laws.target[0, :V]
        law = laws.engine[0, :V]
        joint = None if laws.joint_target is None else (laws.joint_target, laws.joint_engine)
        rng = self.rng(name, 2)
        found: dict[str, tuple[list[int], list[float]]] = {m: ([], []) for m in FIRST_TOKEN_METHODS}
        pending = [m for m in FIRST_TOKEN_METHODS if m != "np" or joint is not None]
        for n in self.s.method_grid:
            if not pending:
                break
            got = first_token_rates(p, n=n, alpha=self.s.alpha, rng=rng, null_reps=self.s.null_reps, law=law, joint=joint,
                                    reps=self.s.sim_reps, methods=tuple(pending))
            for m, rate in got.items():
                found[m][0].append(n)
                found[m][1].append(rate)
                if rate >= self.s.power and m in pending:
                    pending.remove(m)
        return [self._detection(m, sizes, rates, self.s.sim_reps, "exact law") for m, (sizes, rates) in found.items() if sizes]

    def engine_first_token_rates(self, name: str, base: SamplePool, cand: SamplePool, n: int, reps: int) -> dict[str, float]:
        cand_tokens = np.stack([cand.first_tokens(r * n, n) for r in range(reps)])
        plain_tokens = np.stack([base.first_tokens(r * n, n) for r in range(reps)])
        return first_token_rates(self.reference_first_law(cand.case), n=n, alpha=self.s.alpha, rng=self.rng(name, 3),
                                 null_reps=self.s.null_reps, candidate_tokens=cand_tokens, plain_tokens=plain_tokens)

    def target_laws(self, case: Case) -> ExactLaws:
        """Exact laws of the reference engine (= the target's) for ``case``'s prompt and parameters."""
        return exact_laws(self.reference, case)

    def reference_first_law(self, case: Case) -> np.ndarray:
        laws = self.target_laws(case)
        return laws.target[0, : laws.target.shape[1] - 1]

    def empirical_tv(self, case: Case, pool: SamplePool, samples: int) -> tuple[float, ...]:
        """Bias-corrected plug-in TV of positions 0 and 1 (case prompt) against the exact target marginals.

        Plug-in TV minus its mean under H0 (simulated draws of the same size from the exact
        marginal), floored at 0.
        """
        from speceq import stats

        target = self.target_laws(case).target
        batch = pool.take(0, samples)
        rows = np.asarray(batch.prompt_index) == 0
        V = target.shape[1] - 1
        rng = self.rng(case.case_id, 4)
        out = []
        for t in range(target.shape[0]):
            sym = stats.position_symbols(batch.tokens[rows], batch.lengths[rows], t)
            counts = np.bincount(np.where(sym == stats.END, V, sym), minlength=V + 1)
            plug = 0.5 * float(np.abs(counts / counts.sum() - target[t]).sum())
            null = rng.multinomial(int(counts.sum()), target[t], size=50) / counts.sum()
            bias = float(np.mean(0.5 * np.abs(null - target[t][None, :]).sum(axis=1)))
            out.append(max(0.0, plug - bias))
        return tuple(out)

    # ---- one variant ------------------------------------------------------------------------
    def run_variant(self, name: str) -> VariantResult:
        """Measure one gallery entry (or ``"reference"``)."""
        t0 = time.perf_counter()
        spec = None if name == REFERENCE else MUTANTS[name]
        lossless = spec is None or spec.lossless
        engine = self.engine(spec)
        case = self.case(name, spec)
        from speceq.oracles.hf import TargetOracle

        oracle = TargetOracle(self.baseline.model, draft=engine.draft)
        base, cand = self.baseline_pool(case), SamplePool(engine, case, seed=self.s.seed, label=f"candidate|{name}")
        laws = exact_laws(engine, case) if enumerable(engine) else None
        notes: list[str] = []
        detections: list[Detection] = []
        budget_rate, budget_reps = None, None
        if lossless:
            n, reps = self.s.false_alarm_n, self.s.false_alarm_reps
            self.log(f"{name}: false alarms, {reps} x {n} samples")
            rate, _ = self.speceq_rates(case, base, cand, oracle, n, reps)
            detections.append(self._detection("speceq", [n], [rate], reps, "engine samples"))
            for m, r in self.engine_first_token_rates(name, base, cand, n, reps).items():
                detections.append(self._detection(m, [n], [r], reps, "engine samples"))
        else:
            sizes, rates = [], []
            for n in self.s.grid:
                self.log(f"{name}: speceq, {self.s.reps} x {n} samples")
                rate, at_budget = self.speceq_rates(case, base, cand, oracle, n, self.s.reps)
                sizes.append(n)
                rates.append(rate)
                if n == self.s.budget:
                    budget_rate, budget_reps = at_budget, self.s.reps
                if rate >= self.s.power:
                    break
            if budget_rate is None:
                self.log(f"{name}: speceq at the default budget, {self.s.budget_reps} x {self.s.budget} samples")
                budget_rate = self.speceq_rates(case, base, cand, oracle, self.s.budget, self.s.budget_reps)[1]
                budget_reps = self.s.budget_reps
            detections.append(self._detection("speceq", sizes, rates, self.s.reps, "engine samples"))
            if laws is not None:
                self.log(f"{name}: first-token methods (exact law)")
                detections += self.simulated_detections(name, laws)
            else:
                extra = sorted(set(sizes) | {self.s.false_alarm_n})  # also one size where speceq's work is done
                per_n = {n: self.engine_first_token_rates(name, base, cand, n, self.s.reps) for n in extra}
                for m in FIRST_TOKEN_METHODS:
                    got = [(n, r[m]) for n, r in per_n.items() if m in r]
                    if got:
                        detections.append(self._detection(m, [g[0] for g in got], [g[1] for g in got], self.s.reps,
                                                          "engine samples"))
                notes.append("no exact law: first-token methods on engine samples (speceq's sizes and "
                             f"n={self.s.false_alarm_n}); no Neyman-Pearson limit")
        self.log(f"{name}: greedy exact match and speceq's greedy check")
        reps = self.s.false_alarm_reps if lossless else self.s.reps
        exact_match, speceq_greedy, greedy_tv = self.greedy_checks(name, spec, engine, oracle, reps)
        detections += [exact_match, speceq_greedy]
        row_tvs: list[RowTV] = []
        if not lossless:
            row_tvs.append(greedy_tv)
            sampled = self.sampled_row_tv(spec, engine, case, cand, oracle)
            if sampled is not None:
                row_tvs.append(sampled)
        if laws is not None:
            tv, source = laws.tv, "exact (enumeration)"
        else:
            used = max(cand.size, 1)
            tv, source = self.empirical_tv(case, cand, used), f"empirical, bias-corrected, n={used}"
        return VariantResult(
            name=name, bug=spec.bug if spec else "the reference engine itself",
            bug_class=spec.bug_class if spec else "lossless", lossless=lossless, params=case.params.label(),
            batch_size=case.batch_size, companions=len(case.companions), tv=tuple(tv), tv_source=source,
            accept_rate=None if laws is None else laws.accept_rate, detections=tuple(detections),
            budget_rate=budget_rate, budget_reps=budget_reps, seconds=time.perf_counter() - t0, notes=tuple(notes),
            row_tvs=tuple(r.to_dict() for r in row_tvs), row_tv_complete=bool(spec is not None and spec.row_law),
        )

    # ---- the mixture power curve ------------------------------------------------------------
    def curve_point(self, mix: float) -> CurvePoint:
        spec = MUTANTS["mixture"]
        name = f"mixture-{mix:g}"
        engine = self.engine(spec, mix=mix)
        case = dataclasses.replace(self.case(name, spec), case_id=name)
        laws = exact_laws(engine, case)
        from speceq.oracles.hf import TargetOracle

        oracle = TargetOracle(self.baseline.model, draft=engine.draft)
        n, reps = self.s.curve_n, self.s.curve_reps
        self.log(f"power curve: mix={mix:g}, {reps} x {n} samples")
        cand = SamplePool(engine, case, seed=self.s.seed, label=f"candidate|{name}")
        rate, _ = self.speceq_rates(case, self.baseline_pool(case), cand, oracle, n, reps)
        V = laws.engine.shape[1] - 1
        sim = first_token_rates(laws.target[0, :V], n=n, alpha=self.s.alpha, rng=self.rng(name, 5),
                                null_reps=self.s.null_reps, law=laws.engine[0, :V],
                                joint=(laws.joint_target, laws.joint_engine), reps=self.s.sim_reps)
        rates = {"speceq": rate, **sim}
        counts = {m: (reps if m == "speceq" else self.s.sim_reps) for m in rates}
        return CurvePoint(mix=float(mix), tv=float(max(laws.tv)), n=n, rates=rates, reps=counts)


def measure_power(settings: PowerSettings, *, threads: int | None = None, log: Log = _quiet) -> PowerResult:
    """Run the whole calibration of ``settings`` and return its report."""
    from speceq.core.provenance import collect_provenance

    names = list(settings.mutants) or [n for n, s in MUTANTS.items()
                                       if not s.contract and "structured_outputs" not in s.params]
    unknown = [n for n in names if n not in MUTANTS and n != REFERENCE]
    if unknown:
        make_mutant(unknown[0])  # raises EngineNotFound with "did you mean"
    caught = [n for n in names if n in MUTANTS and MUTANTS[n].contract]
    if caught:
        raise ConfigError(f"mutant {caught[0]!r} breaks the engine contract (every run stops on it with an EngineError "
                          "naming the row), so there is no detection rate to measure", where="power.mutants")
    grammar = [n for n in names if n in MUTANTS and "structured_outputs" in MUTANTS[n].params]
    if grammar:
        raise ConfigError(f"mutant {grammar[0]!r} is caught by the grammar check (a row that leaves its case's grammar "
                          "is a hard failure), and the exact enumeration carries no grammar state: measure it with "
                          "speceq run (docs/measurements/power.md)", where="power.mutants")
    if not settings.mutants:
        names.append(REFERENCE)
    t0 = time.perf_counter()
    cal = PowerStudy(settings, threads=threads, log=log)
    variants = tuple(cal.run_variant(n) for n in names)
    curve = tuple(cal.curve_point(m) for m in settings.curve_mix) if not settings.mutants or "mixture" in names else ()
    provenance = collect_provenance(seeds={"seed": settings.seed}, engines={}, settings=settings.to_dict(),
                                    extra={"seconds": time.perf_counter() - t0})
    return PowerResult(settings=settings.to_dict(), variants=variants, curve=curve, provenance=provenance)
