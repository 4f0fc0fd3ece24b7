"""The kernel check: scenarios -> kernel calls -> exact tests -> Holm over the whole check -> verdict.

One skeleton for every layout (:class:`KernelCheck`): choose the scenarios, count the planned
tests, collect scenario by scenario, test the records, Holm and the verdict over the
whole check, then the layout's notes and reruns. The layout (:class:`~speceq.kernels.check_layout.Layout`)
says what differs: chain (ragged, padded, single: :mod:`speceq.kernels.chain_layout`), tree
(:mod:`speceq.kernels.trees`), model (:mod:`speceq.kernels.model_layout`).

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
from dataclasses import dataclass, replace
from typing import Any

import torch

from speceq.errors import ConfigError
from speceq.kernels.chain_layout import CHAIN, SOLO_POWER, planned_tests, solo_findings, solo_power
from speceq.kernels.check_layout import Layout
from speceq.kernels.check_result import DEFAULT_ALPHA, KernelCheckResult, decide
from speceq.kernels.contract import Kernel, KernelSpec, as_kernel
from speceq.kernels.model_layout import MODEL
from speceq.kernels.trees import TREE
from speceq.verdicts.verdict import Verdict

__all__ = ["DEFAULT_ALPHA", "LAYOUT_CHECKS", "SOLO_POWER", "KernelCheck", "KernelCheckResult", "analyse", "check",
           "planned_tests", "solo_findings", "solo_power"]

#: The layout strategy of each request layout (:data:`speceq.kernels.contract.LAYOUTS`).
LAYOUT_CHECKS: dict[str, Layout] = {"ragged": CHAIN, "padded": CHAIN, "single": CHAIN, "tree": TREE, "model": MODEL}


@dataclass(frozen=True)
class KernelCheck:
    """One check of one kernel: the loop every layout runs (module docstring); ``layout`` supplies the rest."""

    kernel: Kernel
    layout: Layout
    seed: int = 0
    device: str | torch.device = "cpu"
    alpha: float = DEFAULT_ALPHA
    tolerance: float | None = None

    def run(self, scenarios: Sequence[Any] | None = None, *, scale: float = 1.0,
            solo: bool = True) -> KernelCheckResult:
        """The whole check: ``scenarios`` (else the layout's defaults at ``scale``), then collect, analyse, notes,
        and, when ``solo`` and the verdict is shifted, the layout's reruns of the failing templates."""
        start = time.perf_counter()
        spec = self.kernel.spec
        chosen = list(scenarios) if scenarios is not None else self.layout.default_scenarios(spec, scale=scale,
                                                                                             seed=self.seed)
        wrong = [type(s).__name__ for s in chosen if not isinstance(s, self.layout.scenario_type)]
        if wrong:
            raise ConfigError(f"a {spec.layout}-layout kernel is checked on {self.layout.scenario_type.__name__} "
                              f"scenarios, got {', '.join(dict.fromkeys(wrong))}", where=f"kernel {self.kernel.name}")
        records = self.collect(chosen, seed=self.seed)
        result = self.analyse(chosen, records, start=start)
        extra = list(self.layout.notes(records))
        if solo and result.verdict == Verdict.SHIFTED:
            extra += self.layout.rerun(self, chosen, records, result)
        if extra:
            result = replace(result, findings=result.findings + tuple(extra), seconds=time.perf_counter() - start)
        return result

    def collect(self, scenarios: Sequence[Any], *, seed: int) -> list[Any]:
        """The layout's records of ``scenarios`` (one per scenario, in order), collected with ``seed``."""
        return self.layout.collect(self.kernel, scenarios, seed=seed, device=self.device)

    def analyse(self, scenarios: Sequence[Any], records: Sequence[Any], *,
                start: float | None = None) -> KernelCheckResult:
        """Every planned test of every record, Holm over all of them, the verdict and the diagnosis.

        The TV bounds are at level alpha / (the planned tests of ``scenarios``), counted before any call.
        """
        start = time.perf_counter() if start is None else start
        spec = self.kernel.spec
        tv_alpha = self.alpha / max(self.layout.planned(scenarios, spec, seed=self.seed), 1)
        violations = self.layout.violations(records)
        summaries = self.layout.summaries(records)
        tests = self.layout.tests(records, spec, seed=self.seed, tv_alpha=tv_alpha)
        features = {f"{s.name}/{t.name}": dict(t.features) for s in scenarios for t in s.templates}
        return decide(self.kernel, tests, violations, summaries, features, alpha=self.alpha, tolerance=self.tolerance,
                      start=start, device=str(self.device), seed=self.seed)


def check(kernel: Any, spec: KernelSpec | None = None, *, scenarios: Sequence[Any] | None = None,
          scale: float = 1.0, seed: int = 0, device: str | torch.device = "cpu", alpha: float = DEFAULT_ALPHA,
          tolerance: float | None = None, solo: bool = True) -> KernelCheckResult:
    """Check ``kernel`` (a :class:`~speceq.kernels.contract.Kernel`, or a callable plus ``spec``).

    scenarios: the layout's own (chain :class:`~speceq.kernels.scenarios.Scenario`, tree
    :class:`~speceq.kernels.trees.TreeScenario`, model :class:`~speceq.kernels.model_layout.ModelScenario`);
    scale multiplies the default scenarios' replicates (ignored when ``scenarios`` is given).
    solo: when the verdict is shifted, rerun the failing templates alone (ragged and padded layouts:
    :func:`~speceq.kernels.chain_layout.solo_findings`).
    """
    kern: Kernel = as_kernel(kernel, spec)
    steps = KernelCheck(kern, LAYOUT_CHECKS[kern.spec.layout], seed=seed, device=device, alpha=alpha,
                        tolerance=tolerance)
    return steps.run(scenarios, scale=scale, solo=solo)


def analyse(kern: Kernel, scenarios: Sequence[Any], records: Sequence[Any], *, alpha: float = DEFAULT_ALPHA,
            tolerance: float | None = None, start: float | None = None, device: str = "cpu",
            seed: int = 0) -> KernelCheckResult:
    """Tests, Holm and the verdict from collected records (e.g. records collected in another process).

    ``records``: the kernel's layout's collection of ``scenarios`` (chain: :func:`speceq.kernels.kernel_calls.collect`).
    """
    steps = KernelCheck(kern, LAYOUT_CHECKS[kern.spec.layout], seed=seed, device=device, alpha=alpha,
                        tolerance=tolerance)
    return steps.analyse(scenarios, records, start=start)
