"""The kernel check: scenarios -> kernel calls -> exact tests -> Holm over the whole check -> verdict.

``check(kernel)`` runs the default scenarios of the kernel's spec (or the ones given), with
speceq's seeds, on ``device`` (cpu or cuda; nothing assumes a GPU). Verdicts:

- ``shifted``: an invariant is broken (a hard failure), or a test rejects at the Holm level
  alpha over every test of the check (the family-wise false-alarm rate of a correct kernel is
  at most alpha: every p-value is exact-valid, and Holm holds under any dependence);
- ``equivalent``: nothing rejects (and, when ``tolerance`` is given, every tested TV upper
  bound is below it; otherwise ``inconclusive``);
- ``lossy``: the kernel declared a lossy method; its TV to the target law is reported with a
  confidence interval, and it never passes (a broken invariant still makes it ``shifted``).

Exit codes (as ``speceq run``): 0 equivalent, 1 shifted or lossy, 3 inconclusive, 2 usage or
kernel error.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np
import torch

from speceq.kernels.check_result import DEFAULT_ALPHA, KernelCheckResult, ScenarioSummary, decide
from speceq.kernels.contract import Kernel, KernelSpec, as_kernel
from speceq.kernels.diagnosis import Finding
from speceq.kernels.kernel_calls import ScenarioRecord, collect
from speceq.kernels.law_tests import gof_power, observations, plan, run_tests, shrunk_alternative
from speceq.kernels.scenarios import Scenario, Template, default_scenarios
from speceq.verdicts.verdict import Verdict

__all__ = ["DEFAULT_ALPHA", "KernelCheckResult", "analyse", "check", "planned_tests", "solo_findings", "solo_power"]



def planned_tests(scenarios: Sequence[Scenario], spec: KernelSpec) -> int:
    """How many tests the check will run (known before any kernel call)."""
    return sum(len(plan(t, spec, sc.copies(t))) for sc in scenarios for t in sc.templates)


def check(kernel: Any, spec: KernelSpec | None = None, *, scenarios: Sequence[Scenario] | None = None,
          scale: float = 1.0, seed: int = 0, device: str | torch.device = "cpu", alpha: float = DEFAULT_ALPHA,
          tolerance: float | None = None, solo: bool = True) -> KernelCheckResult:
    """Check ``kernel`` (a :class:`~speceq.kernels.contract.Kernel`, or a callable plus ``spec``).

    scale multiplies the default scenarios' replicates (ignored when ``scenarios`` is given).
    solo: when the verdict is shifted, rerun the failing templates alone (:func:`solo_findings`).
    """
    kern: Kernel = as_kernel(kernel, spec)
    if kern.spec.layout == "tree":
        from speceq.kernels.trees import check_tree

        return check_tree(kern, scale=scale, seed=seed, device=device, alpha=alpha, tolerance=tolerance)
    if kern.spec.layout == "model":
        from speceq.kernels.model_layout import check_model

        return check_model(kern, scale=scale, seed=seed, device=device, alpha=alpha, tolerance=tolerance,
                           scenarios=scenarios)
    start = time.perf_counter()
    chosen = list(scenarios) if scenarios is not None else default_scenarios(kern.spec, scale=scale, seed=seed)
    records = collect(kern, chosen, seed=seed, device=device)
    result = analyse(kern, chosen, records, alpha=alpha, tolerance=tolerance, start=start, device=str(device),
                     seed=seed)
    if solo and result.verdict == Verdict.SHIFTED and kern.spec.layout in ("ragged", "padded"):
        extra = solo_findings(kern, chosen, result, seed=seed, device=device, alpha=alpha, records=records)
        result = replace(result, findings=result.findings + tuple(extra), seconds=time.perf_counter() - start)
    return result


#: Most failing templates rerun alone, and the draws of each rerun.
SOLO_TEMPLATES = 6
SOLO_REPLICATES = 400
#: Smallest power of a solo rerun to see a template's batch effect for "passes alone" to mean "needs the batch".
SOLO_POWER = 0.9
#: Simulated solo tests per power estimate, and rejected batch tests per template whose effect is simulated.
POWER_DRAWS = 200
POWER_TESTS = 3
#: Templates named per solo finding (the rest are counted).
NAMED = 3


def solo_findings(kern: Kernel, scenarios: Sequence[Scenario], result: KernelCheckResult, *, seed: int,
                  device: str | torch.device, alpha: float,
                  records: Sequence[ScenarioRecord] | None = None) -> list[Finding]:
    """Rerun failing templates in batches of their own (equal draft counts, no neighbours), weighed by power.

    A template that fails in the mixed batches but not alone points at a batch-composition bug
    (ragged offsets, per-request parameters expanded over the wrong tokens, greedy and random
    rows mixed); one that fails alone too is wrong on its own. The reruns use the same tests
    (Holm over the rerun's tests) and :data:`SOLO_REPLICATES` draws per template. Passing alone
    says "needs the batch" only when the rerun had the power to see the batch's effect: at least
    :data:`SOLO_POWER` (:func:`solo_power`); otherwise the template is "not resolved at N solo
    draws". Each finding names its templates, so the lines never speak of the same evidence.
    ``records``: the batch collection (its counts give the effect; without them only a broken
    invariant's rate does).
    """
    failing: list[str] = []
    for v in result.violations:
        if v.template not in failing:
            failing.append(v.template)
    for t in result.rejected:
        key = f"{t.scenario}/{t.template}"
        if key not in failing:
            failing.append(key)
    by_key = {f"{sc.name}/{t.name}": (sc, t) for sc in scenarios for t in sc.templates}
    picked = [by_key[k] for k in failing if k in by_key][:SOLO_TEMPLATES]
    if not picked:
        return []
    solos = [Scenario(name=f"{sc.name}-alone-{i}", vocab_size=sc.vocab_size, templates=(t,),
                      replicates=min(SOLO_REPLICATES, sc.copies(t)), boundary_replicates=min(SOLO_REPLICATES,
                                                                                             sc.copies(t)))
             for i, (sc, t) in enumerate(picked)]
    solo_records = collect(kern, solos, seed=seed + 1, device=device)
    solo = analyse(kern, solos, solo_records, alpha=alpha, seed=seed)
    bad = {v.template.split("/", 1)[0] for v in solo.violations} | {t.scenario for t in solo.rejected}
    alone_bad: list[str] = []
    needs_batch: list[tuple[str, float]] = []
    unresolved: list[tuple[str, float]] = []
    for i, ((sc, t), s) in enumerate(zip(picked, solos)):
        key = f"{sc.name}/{t.name}"
        if s.name in bad:
            alone_bad.append(key)
            continue
        power = solo_power(kern.spec, key, sc, t, s, result, solo, records or (), alpha=alpha,
                           rng=np.random.default_rng([seed, 23, i]))
        (needs_batch if power >= SOLO_POWER else unresolved).append((key, power))
    out = []
    total = len(picked)
    if alone_bad:
        out.append(Finding(component="alone", text=(
            f"{_count(alone_bad, total)} fail in a batch of their own too ({SOLO_REPLICATES} draws each, equal draft "
            f"counts): the bug does not need other requests: {_names(alone_bad)}"), failed=len(alone_bad),
            tested=total, tv=None, tv_upper=None, predicates=(), where=tuple(alone_bad)))
    if needs_batch:
        names = [k for k, _ in needs_batch]
        low = min(p for _, p in needs_batch)
        out.append(Finding(component="batch", text=(
            f"{_count(names, total)} pass in a batch of their own although the solo test had power >= {low:.2f} to "
            f"see the batch's effect ({SOLO_REPLICATES} draws each): the failure depends on the other requests of "
            f"the batch (ragged offsets, per-request parameters applied to the wrong tokens, greedy and random rows "
            f"mixed): {_names(names, dict(needs_batch))}"), failed=len(names), tested=total, tv=None, tv_upper=None,
            predicates=(), where=tuple(names)))
    if unresolved:
        names = [k for k, _ in unresolved]
        out.append(Finding(component="solo-unresolved", text=(
            f"{_count(names, total)} pass in a batch of their own, but the solo test had power < {SOLO_POWER:g} to "
            f"see the batch's effect: not resolved at {SOLO_REPLICATES} solo draws (neither batch-dependent nor "
            f"shown alone): {_names(names, dict(unresolved))}"), failed=len(names), tested=total, tv=None,
            tv_upper=None, predicates=(), where=tuple(names)))
    return out


def _count(names: Sequence[str], total: int) -> str:
    return f"{len(names)} of {total} failing template{'s' if total != 1 else ''}"


def _names(names: Sequence[str], power: dict[str, float] | None = None) -> str:
    shown = [f"{n} (power {power[n]:.2f})" if power else n for n in names[:NAMED]]
    more = f" and {len(names) - NAMED} more" if len(names) > NAMED else ""
    return "; ".join(shown) + more


def solo_power(spec: KernelSpec, key: str, sc: Scenario, tpl: Template, solo_sc: Scenario,
               result: KernelCheckResult, solo: KernelCheckResult, records: Sequence[ScenarioRecord], *,
               alpha: float, rng: np.random.Generator) -> float:
    """A lower bound on the chance that a template's solo rerun fails, if its batch effect were its own.

    Two effects, the larger counts (the rerun fails when either shows): a broken invariant at
    the batch's rate r per request fails the rerun of N requests with probability
    1 - (1 - r)^N; a rejected batch test (the :data:`POWER_TESTS` smallest p-values) is
    replayed: its batch counts, shrunk for the plug-in's upward bias
    (:func:`~speceq.kernels.law_tests.shrunk_alternative`), drawn at the solo test's n and tested
    at alpha / (the rerun's tests), the smallest of Holm's levels (:func:`~speceq.kernels.law_tests.gof_power`).
    """
    copies = max(sc.copies(tpl), 1)
    broke = sum(v.count for v in result.violations if v.template == key)
    solo_n = solo_sc.copies(tpl)
    power = 1.0 - (1.0 - min(1.0, broke / copies)) ** solo_n if broke else 0.0
    batch_tests = sorted((t for t in result.rejected if f"{t.scenario}/{t.template}" == key), key=lambda t: t.pvalue)
    record = next((r for sr in records if sr.scenario.name == sc.name for r in sr.records
                   if r.template.name == tpl.name), None)
    if not batch_tests or record is None:
        return power
    d, tok, lengths = record.arrays()
    planned = {(p.component, p.position): p for p in plan(tpl, spec, sc.copies(tpl))}
    solo_n_of = {(t.component, t.position): t.n for t in solo.tests if t.scenario == solo_sc.name}
    level = alpha / max(len(solo.tests), 1)
    for t in batch_tests[:POWER_TESTS]:
        test = planned.get((t.component, t.position))
        n = solo_n_of.get((t.component, t.position), 0)
        if test is None or n == 0:
            continue
        labels = observations(test, d, tok, lengths)
        counts = np.bincount(labels, minlength=test.law.size)[: test.law.size]
        alt = shrunk_alternative(counts, test.law)
        power = max(power, gof_power(alt, test.law, n, level, draws=POWER_DRAWS, rng=rng))
        if power >= SOLO_POWER:
            break  # resolved: the other tests could only raise this lower bound
    return power


def analyse(kern: Kernel, scenarios: Sequence[Scenario], records: Sequence[ScenarioRecord], *,
            alpha: float = DEFAULT_ALPHA, tolerance: float | None = None, start: float | None = None,
            device: str = "cpu", seed: int = 0) -> KernelCheckResult:
    """Tests, Holm and the verdict from collected records (e.g. records collected in another process)."""
    start = time.perf_counter() if start is None else start
    m = planned_tests(scenarios, kern.spec)
    tests = run_tests(list(records), kern.spec, tv_alpha=alpha / max(m, 1))
    violations = tuple(v for r in records for v in r.violations)
    summaries = tuple(ScenarioSummary(r.scenario.name, r.scenario.vocab_size, len(r.scenario.templates), r.requests,
                                      r.calls, r.kernel_seconds, r.harness_seconds, r.scenario.skipped,
                                      r.kernel_cpu_seconds, r.harness_cpu_seconds, r.inputs_written)
                      for r in records)
    features = {f"{sc.name}/{t.name}": dict(t.features) for sc in scenarios for t in sc.templates}
    return decide(kern, tests, violations, summaries, features, alpha=alpha, tolerance=tolerance, start=start,
                  device=device, seed=seed)


