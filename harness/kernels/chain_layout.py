"""The chain layouts (ragged, padded, single) of the kernel check, and the reruns of failing templates alone.

:data:`CHAIN` is the :class:`~speceq.kernels.check_layout.Layout` the check skeleton
(:class:`speceq.kernels.kernel_check.KernelCheck`) runs for a chain kernel: the scenarios of
:mod:`speceq.kernels.scenarios`, the collection of :mod:`speceq.kernels.kernel_calls`, the
tests of :mod:`speceq.kernels.law_tests`, and, when a ragged or padded check is ``shifted``,
the failing templates rerun in batches of their own (:func:`solo_findings`): a template that
fails in the mixed batches but not alone points at a batch-composition bug.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from speceq.kernels.check_layout import CheckSteps, Layout
from speceq.kernels.check_result import KernelCheckResult, ScenarioSummary
from speceq.kernels.contract import Kernel, KernelSpec
from speceq.kernels.diagnosis import Finding
from speceq.kernels.kernel_calls import ScenarioRecord, collect
from speceq.kernels.law_tests import KernelTest, gof_power, observations, plan, run_tests, shrunk_alternative
from speceq.kernels.outcomes import Violation
from speceq.kernels.scenarios import Scenario, Template, default_scenarios

__all__ = ["CHAIN", "ChainLayout", "SOLO_POWER", "planned_tests", "solo_findings", "solo_power"]


def planned_tests(scenarios: Sequence[Scenario], spec: KernelSpec) -> int:
    """How many tests the check will run (known before any kernel call)."""
    return sum(len(plan(t, spec, sc.copies(t))) for sc in scenarios for t in sc.templates)


class ChainLayout(Layout):
    """The ragged, padded and single layouts: one request per draft chain (:mod:`speceq.kernels.contract`)."""

    scenario_type = Scenario

    def default_scenarios(self, spec: KernelSpec, *, scale: float, seed: int) -> list[Scenario]:
        return default_scenarios(spec, scale=scale, seed=seed)

    def planned(self, scenarios: Sequence[Scenario], spec: KernelSpec, *, seed: int) -> int:
        return planned_tests(scenarios, spec)

    def collect(self, kern: Kernel, scenarios: Sequence[Scenario], *, seed: int,
                device: str | torch.device) -> list[ScenarioRecord]:
        return collect(kern, list(scenarios), seed=seed, device=device)

    def tests(self, records: Sequence[ScenarioRecord], spec: KernelSpec, *, seed: int,
              tv_alpha: float) -> list[KernelTest]:
        return run_tests(list(records), spec, tv_alpha=tv_alpha)

    def violations(self, records: Sequence[ScenarioRecord]) -> tuple[Violation, ...]:
        return tuple(v for r in records for v in r.violations)  # each scenario's own, merged within it

    def summaries(self, records: Sequence[ScenarioRecord]) -> list[ScenarioSummary]:
        return [ScenarioSummary(r.scenario.name, r.scenario.vocab_size, len(r.scenario.templates), r.requests,
                                r.calls, r.kernel_seconds, r.harness_seconds, r.scenario.skipped, r.kernel_cpu_seconds,
                                r.harness_cpu_seconds, r.inputs_written) for r in records]

    def rerun(self, steps: CheckSteps, scenarios: Sequence[Scenario], records: Sequence[ScenarioRecord],
              result: KernelCheckResult) -> list[Finding]:
        """Solo reruns (:func:`solo_findings`) for the batched layouts; a single-layout call holds one request."""
        if result.spec.layout not in ("ragged", "padded"):
            return []
        return solo_findings(steps, result.spec, scenarios, result, seed=result.seed, alpha=result.alpha,
                             records=records)


#: The chain layouts' strategy (stateless; one instance serves every check).
CHAIN = ChainLayout()


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


def solo_findings(steps: CheckSteps, spec: KernelSpec, scenarios: Sequence[Scenario], result: KernelCheckResult, *,
                  seed: int, alpha: float, records: Sequence[ScenarioRecord] | None = None) -> list[Finding]:
    """Rerun failing templates in batches of their own (equal draft counts, no neighbours), weighed by power.

    A template that fails in the mixed batches but not alone points at a batch-composition bug
    (ragged offsets, per-request parameters expanded over the wrong tokens, greedy and random
    rows mixed); one that fails alone too is wrong on its own. The reruns use the same tests
    (Holm over the rerun's tests) and :data:`SOLO_REPLICATES` draws per template. Passing alone
    says "needs the batch" only when the rerun had the power to see the batch's effect: at least
    :data:`SOLO_POWER` (:func:`solo_power`); otherwise the template is "not resolved at N solo
    draws". Each finding names its templates, so the lines never speak of the same evidence.
    ``records``: the batch collection (its counts give the effect; without them only a broken
    invariant's rate does). ``steps``: the running check, which collects and analyses the reruns
    as it did the batch (with ``seed + 1``).
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
    solo = steps.analyse(solos, steps.collect(solos, seed=seed + 1))
    bad = {v.template.split("/", 1)[0] for v in solo.violations} | {t.scenario for t in solo.rejected}
    alone_bad: list[str] = []
    needs_batch: list[tuple[str, float]] = []
    unresolved: list[tuple[str, float]] = []
    for i, ((sc, t), s) in enumerate(zip(picked, solos)):
        key = f"{sc.name}/{t.name}"
        if s.name in bad:
            alone_bad.append(key)
            continue
        power = solo_power(spec, key, sc, t, s, result, solo, records or (), alpha=alpha,
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
