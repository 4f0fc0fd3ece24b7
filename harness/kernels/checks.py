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

import torch

from speceq.kernels.collect import ScenarioRecord, collect
from speceq.kernels.contract import Kernel, KernelSpec, as_kernel
from speceq.kernels.diagnosis import Finding
from speceq.kernels.evidence import plan, run_tests
from speceq.kernels.result import DEFAULT_ALPHA, KernelCheckResult, ScenarioSummary, decide
from speceq.kernels.scenarios import Scenario, default_scenarios
from speceq.verdicts.verdict import Verdict

__all__ = ["DEFAULT_ALPHA", "KernelCheckResult", "analyse", "check", "planned_tests", "solo_findings"]



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
    start = time.perf_counter()
    chosen = list(scenarios) if scenarios is not None else default_scenarios(kern.spec, scale=scale, seed=seed)
    records = collect(kern, chosen, seed=seed, device=device)
    result = analyse(kern, chosen, records, alpha=alpha, tolerance=tolerance, start=start, device=str(device),
                     seed=seed)
    if solo and result.verdict == Verdict.SHIFTED and kern.spec.layout in ("ragged", "padded"):
        extra = solo_findings(kern, chosen, result, seed=seed, device=device, alpha=alpha)
        result = replace(result, findings=result.findings + tuple(extra), seconds=time.perf_counter() - start)
    return result


#: Most failing templates rerun alone, and the draws of each rerun.
SOLO_TEMPLATES = 6
SOLO_REPLICATES = 400


def solo_findings(kern: Kernel, scenarios: Sequence[Scenario], result: KernelCheckResult, *, seed: int,
                  device: str | torch.device, alpha: float) -> list[Finding]:
    """Rerun failing templates in batches of their own (equal draft counts, no neighbours).

    A template that fails in the mixed batches but not alone points at a batch-composition bug
    (ragged offsets, per-request parameters expanded over the wrong tokens, greedy and random
    rows mixed); one that fails alone too is wrong on its own. The reruns use the same tests
    (Holm over the rerun's tests) and :data:`SOLO_REPLICATES` draws per template.
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
    records = collect(kern, solos, seed=seed + 1, device=device)
    solo = analyse(kern, solos, records, alpha=alpha, seed=seed)
    bad = {v.template.split("/", 1)[0] for v in solo.violations} | {t.scenario for t in solo.rejected}
    alone_ok = [f"{sc.name}/{t.name}" for (sc, t), s in zip(picked, solos) if s.name not in bad]
    alone_bad = [f"{sc.name}/{t.name}" for (sc, t), s in zip(picked, solos) if s.name in bad]
    out = []
    if alone_ok:
        out.append(Finding(component="batch", text=(
            f"{len(alone_ok)} of {len(picked)} failing templates pass in a batch of their own "
            f"({SOLO_REPLICATES} draws each, equal draft counts): the failure depends on the other requests of the "
            f"batch (ragged offsets, per-request parameters applied to the wrong tokens, greedy and random rows "
            f"mixed); e.g. {alone_ok[0]}"), failed=len(alone_ok), tested=len(picked), tv=None, tv_upper=None,
            predicates=(), where=tuple(alone_ok)))
    if alone_bad:
        out.append(Finding(component="alone", text=(
            f"{len(alone_bad)} of {len(picked)} failing templates fail in a batch of their own too: the bug does not "
            f"need other requests; e.g. {alone_bad[0]}"), failed=len(alone_bad), tested=len(picked), tv=None,
            tv_upper=None, predicates=(), where=tuple(alone_bad)))
    return out


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


