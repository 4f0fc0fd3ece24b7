"""The result of a kernel check and the verdict rule (every layout's, through speceq.kernels.kernel_check.KernelCheck).

Verdicts: ``shifted`` (a broken invariant, or a test rejecting at the Holm level alpha over
every test of the check), ``equivalent`` (nothing rejects; with a ``tolerance``, every tested
TV upper bound below it, else ``inconclusive``), ``lossy`` (a declared-lossy method: its TV is
reported with a confidence interval; it never passes). Exit codes as ``speceq run``: 0
equivalent, 1 shifted or lossy, 3 inconclusive, 2 usage or kernel error.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from speceq.core.defaults import DEFAULT_ALPHA
from speceq.kernels.contract import Kernel, KernelSpec
from speceq.kernels.diagnosis import Finding, diagnose
from speceq.kernels.law_tests import KernelTest
from speceq.kernels.outcomes import Violation
from speceq.stats import holm
from speceq.verdicts.verdict import Verdict

__all__ = ["DEFAULT_ALPHA", "KernelCheckResult", "ScenarioSummary", "decide"]


@dataclass(frozen=True, slots=True)
class ScenarioSummary:
    name: str
    vocab_size: int
    templates: int
    requests: int
    calls: int
    kernel_seconds: float
    harness_seconds: float
    skipped: tuple[str, ...]
    kernel_cpu_seconds: float = 0.0  # the process's CPU time (all threads) inside the kernel's calls
    harness_cpu_seconds: float = 0.0  # and around them (building requests, reading outputs)
    #: the kernel wrote into its reused inputs: the scenario was collected again, every call's inputs copied
    inputs_written: bool = False


@dataclass(frozen=True, slots=True)
class KernelCheckResult:
    """The outcome of a check: verdict, every test, every broken invariant, the findings."""

    kernel: str
    spec: KernelSpec
    verdict: Verdict
    reason: str
    alpha: float
    tests: tuple[KernelTest, ...]
    violations: tuple[Violation, ...]
    findings: tuple[Finding, ...]
    scenarios: tuple[ScenarioSummary, ...]
    seconds: float
    device: str
    seed: int

    @property
    def exit_code(self) -> int:
        return Verdict.parse(self.verdict).exit_code

    @property
    def rejected(self) -> tuple[KernelTest, ...]:
        return tuple(t for t in self.tests if t.rejected)

    @property
    def max_tv_upper(self) -> float:
        return max((t.tv_upper for t in self.tests if t.n > 0), default=1.0)

    def summary(self) -> str:
        lines = [f"kernel {self.kernel} ({self.spec.layout}, {self.spec.method}{', lossy' if self.spec.lossy else ''}):"
                 f" {self.verdict} -- {self.reason}"]
        for f in self.findings[:12]:
            lines.append(f"  - {f.text}")
        if len(self.findings) > 12:
            lines.append(f"  ... {len(self.findings) - 12} more findings")
        req = sum(s.requests for s in self.scenarios)
        ks = sum(s.kernel_seconds for s in self.scenarios)
        lines.append(f"  {len(self.tests)} tests over {len(self.scenarios)} scenarios, {req} requests; "
                     f"{self.seconds:.1f} s ({ks:.1f} s in the kernel) on {self.device}, seed {self.seed}")
        skipped = [s for sc in self.scenarios for s in sc.skipped]
        for s in dict.fromkeys(skipped):
            lines.append(f"  not tested: {s}")
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        return {
            "kernel": self.kernel, "spec": asdict(self.spec), "verdict": str(self.verdict), "reason": self.reason,
            "exit_code": self.exit_code, "alpha": self.alpha, "seconds": self.seconds, "device": self.device,
            "seed": self.seed,
            "tests": [{**{k: getattr(t, k) for k in t.__slots__ if k != "features"}, "features": dict(t.features)}
                      for t in self.tests],
            "violations": [asdict(v) for v in self.violations],
            "findings": [asdict(f) for f in self.findings],
            "scenarios": [asdict(s) for s in self.scenarios],
        }


def decide(kern: Kernel, tests: Sequence[KernelTest], violations: Sequence[Violation],
           summaries: Sequence[ScenarioSummary], features: dict[str, dict[str, str]], *, alpha: float, tolerance: float | None, start: float, device: str,
           seed: int) -> KernelCheckResult:
    """Holm over every test, the verdict and its reason, the findings."""
    spec = kern.spec
    if tests and not spec.lossy:
        adjusted = holm(np.array([t.pvalue for t in tests]))
        # a test that could not read every request ran on a subset the kernel chose: never a rejection (diagnosis)
        tests = [_with(t, holm=float(a), rejected=bool(a <= alpha) and not t.unread) for t, a in zip(tests, adjusted)]
    tests = tuple(tests)
    rejected = [t for t in tests if t.rejected]
    findings = tuple(diagnose(tests, violations, features, alpha=alpha)) + _inputs_written(summaries)
    # a declared-lossy method may emit tokens the target gives probability 0 (that is part of its loss)
    hard = [v for v in violations if not (spec.lossy and v.kind == "zero-probability")]
    n_viol = sum(v.count for v in hard)
    if hard:
        verdict = Verdict.SHIFTED
        reason = f"{n_viol} request(s) broke an invariant ({', '.join(sorted({v.kind for v in hard}))})"
    elif spec.lossy:
        verdict = Verdict.LOSSY
        token_tests = [t for t in tests if t.component != "length"]
        worst = max(token_tests, key=lambda t: t.tv_lower or 0.0, default=None)
        if worst is None or not worst.tv_lower:
            reason = (f"declared lossy; no loss of the token law measured (every TV lower bound is 0; largest "
                      f"upper bound {max((t.tv_upper for t in token_tests), default=1.0):.3f})")
        else:
            reason = (f"declared lossy; largest measured TV of a token law {worst.tv:.3f} in [{worst.tv_lower:.3f}, "
                      f"{worst.tv_upper:.3f}] at {worst.where}")
        lengths = [t for t in tests if t.component == "length" and t.tv_lower]
        if lengths:
            top = max(lengths, key=lambda t: t.tv_lower or 0.0)
            reason += f"; accepted-length law moved too (TV {top.tv:.3f} in [{top.tv_lower:.3f}, {top.tv_upper:.3f}])"
        outside = sum(v.count for v in violations if v.kind == "zero-probability")
        if outside:
            reason += f"; {outside} request(s) emitted a token of target probability 0 (part of the loss)"
    elif rejected:
        verdict = Verdict.SHIFTED
        reason = f"{len(rejected)} of {len(tests)} tests reject at the Holm level {alpha:g}"
    else:
        bounds = sorted((t.tv_upper, t.n, t.where) for t in tests if t.n > 0)
        top = bounds[-1] if bounds else (1.0, 0, "no test")
        median = bounds[len(bounds) // 2][0] if bounds else 1.0
        spread = f"per-test TV upper bounds: median {median:.2f}, largest {top[0]:.2f} ({top[2]}, n={top[1]})"
        if tolerance is not None and top[0] > tolerance:
            verdict = Verdict.INCONCLUSIVE
            reason = (f"no test rejects ({len(tests)} tests), but not every TV upper bound is below the tolerance "
                      f"{tolerance:g}; {spread}; more draws (scale) would certify it")
        else:
            verdict = Verdict.EQUIVALENT
            reason = f"no test rejects at the Holm level {alpha:g} ({len(tests)} tests); {spread}"
    return KernelCheckResult(kernel=kern.name, spec=spec, verdict=verdict, reason=reason, alpha=alpha, tests=tests,
                             violations=tuple(violations), findings=findings, scenarios=tuple(summaries),
                             seconds=time.perf_counter() - start, device=device, seed=seed)


def _inputs_written(summaries: Sequence[ScenarioSummary]) -> tuple[Finding, ...]:
    """A note when the kernel wrote into its inputs: not a failure, but why the check copied every call's inputs."""
    written = [s.name for s in summaries if s.inputs_written]
    if not written:
        return ()
    text = (f"the kernel wrote into its inputs (first seen in {written[0]}); inputs are copied per call from then "
            f"on, and {'that scenario was' if len(written) == 1 else 'those scenarios were'} collected again with "
            f"fresh draws: {', '.join(written)}")
    return (Finding(component="inputs-written", text=text, failed=0, tested=len(summaries), tv=None, tv_upper=None,
                    predicates=(), where=tuple(written)),)


def _with(t: KernelTest, **changes: Any) -> KernelTest:
    values = {k: getattr(t, k) for k in t.__slots__}
    values.update(changes)
    return KernelTest(**values)
