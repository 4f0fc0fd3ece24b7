"""What a request layout tells the one kernel-check skeleton (:class:`speceq.kernels.kernel_check.KernelCheck`).

The skeleton is the same for every layout: choose the scenarios, count the tests planned from
the exact laws (before any kernel call: Holm's family and the TV bounds' level), collect the
scenarios one after the other (:func:`speceq.kernels.kernel_calls.scenario_loop`), run the
planned tests on the records, Holm and the verdict over the whole check
(:func:`speceq.kernels.check_result.decide`), then the layout's notes and, when the verdict is
``shifted``, its reruns of the failing templates. A :class:`Layout` supplies what differs: the
chain layouts (ragged, padded, single; :mod:`speceq.kernels.chain_layout`), the tree layout
(:mod:`speceq.kernels.trees`) and the model layout (:mod:`speceq.kernels.model_layout`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import torch

from speceq.kernels.check_result import KernelCheckResult, ScenarioSummary
from speceq.kernels.contract import Kernel, KernelSpec
from speceq.kernels.diagnosis import Finding
from speceq.kernels.law_tests import KernelTest
from speceq.kernels.outcomes import Violation


class CheckSteps(Protocol):
    """The steps of the running check a layout may call again (a rerun of failing templates)."""

    def collect(self, scenarios: Sequence[Any], *, seed: int) -> list[Any]:
        """The layout's records of ``scenarios``, collected with ``seed``."""

    def analyse(self, scenarios: Sequence[Any], records: Sequence[Any]) -> KernelCheckResult:
        """Tests, Holm and the verdict over ``records`` (a check of its own)."""


class Layout(Protocol):
    """One request layout of the kernel check: its scenarios, collection, tests and extra findings.

    A record is whatever the layout's collection returns for one scenario (in scenario order).
    A strategy subclasses this Protocol, so a layout without notes or reruns inherits the empty ones.
    """

    #: The class of the layout's scenarios (given scenarios of another class are refused).
    scenario_type: type

    def default_scenarios(self, spec: KernelSpec, *, scale: float, seed: int) -> list[Any]:
        """The scenarios of a check when none are given (``scale`` multiplies their draws)."""

    def planned(self, scenarios: Sequence[Any], spec: KernelSpec, *, seed: int) -> int:
        """How many tests ``scenarios`` hold, from their laws and replicates only (before any kernel call)."""

    def collect(self, kern: Kernel, scenarios: Sequence[Any], *, seed: int,
                device: str | torch.device) -> list[Any]:
        """Call the kernel on every scenario with speceq's seeds: one record per scenario, no statistics."""

    def tests(self, records: Sequence[Any], spec: KernelSpec, *, seed: int, tv_alpha: float) -> list[KernelTest]:
        """The planned tests of every record, in scenario order, with raw p-values (Holm is the skeleton's)."""

    def violations(self, records: Sequence[Any]) -> tuple[Violation, ...]:
        """Every broken invariant of the check, in the order the result lists them."""

    def summaries(self, records: Sequence[Any]) -> list[ScenarioSummary]:
        """Each scenario's counts and times."""

    def notes(self, records: Sequence[Any]) -> list[Finding]:
        """Findings that are not failures (e.g. how often a kernel called the models), after the diagnosis."""
        return []

    def rerun(self, steps: CheckSteps, scenarios: Sequence[Any], records: Sequence[Any],
              result: KernelCheckResult) -> list[Finding]:
        """Findings of reruns of a ``shifted`` check's failing templates (none unless the layout reruns)."""
        return []
