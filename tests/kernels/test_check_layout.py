"""The one kernel-check skeleton (speceq.kernels.kernel_check.KernelCheck) and what a layout hands it.

A stub layout with hand-made records shows what the skeleton itself decides: Holm over the tests of
every record together, the TV level from the planned count, the layout's notes after the
diagnosis, reruns only for a shifted check with solo on. Then the real layouts: every layout name
maps to its strategy, the tree layout checks the scenarios it is given, and scenarios of another
layout are refused with an error that names both.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest

from speceq.errors import ConfigError
from speceq.kernels import Kernel, KernelSpec, Outcome, check
from speceq.kernels.chain_layout import CHAIN
from speceq.kernels.check_result import KernelCheckResult, ScenarioSummary
from speceq.kernels.contract import LAYOUTS
from speceq.kernels.diagnosis import Finding
from speceq.kernels.kernel_check import LAYOUT_CHECKS, KernelCheck
from speceq.kernels.law_tests import KernelTest
from speceq.kernels.model_layout import MODEL, default_model_scenarios, reference_model_kernel
from speceq.kernels.outcomes import Violation
from speceq.kernels.scenarios import default_scenarios
from speceq.kernels.trees import TREE, default_tree_scenarios, reference_tree_kernel


@dataclass(frozen=True)
class StubTemplate:
    name: str
    features: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class StubScenario:
    name: str
    pvalues: tuple[float, ...]  # the p-values its tests will have
    templates: tuple[StubTemplate, ...] = (StubTemplate("t"),)


@dataclass
class StubLayout:
    """A layout whose tests have the p-values its scenarios carry; it logs what the skeleton asks."""

    scenario_type: type = StubScenario
    log: list[tuple[str, Any]] = field(default_factory=list)

    def default_scenarios(self, spec: KernelSpec, *, scale: float, seed: int) -> list[StubScenario]:
        return [StubScenario("a", (0.5,))]

    def planned(self, scenarios: Sequence[StubScenario], spec: KernelSpec, *, seed: int) -> int:
        return sum(len(s.pvalues) for s in scenarios)

    def collect(self, kern: Kernel, scenarios: Sequence[StubScenario], *, seed: int, device: Any) -> list[Any]:
        self.log.append(("collect", (tuple(s.name for s in scenarios), seed)))
        return list(scenarios)

    def tests(self, records: Sequence[StubScenario], spec: KernelSpec, *, seed: int,
              tv_alpha: float) -> list[KernelTest]:
        self.log.append(("tv_alpha", tv_alpha))
        return [KernelTest(scenario=r.name, template="t", component="token", position=i, n=100, expected_n=100.0,
                           pvalue=p, statistic=0.0, tv=0.0, tv_upper=0.1, tv_lower=None, support_violations=0,
                           support=2, requests=100)
                for r in records for i, p in enumerate(r.pvalues)]

    def violations(self, records: Sequence[StubScenario]) -> tuple[Violation, ...]:
        return ()

    def summaries(self, records: Sequence[StubScenario]) -> list[ScenarioSummary]:
        return [ScenarioSummary(r.name, 2, 1, 100, 1, 0.0, 0.0, ()) for r in records]

    def notes(self, records: Sequence[StubScenario]) -> list[Finding]:
        return [Finding(component="note", text="a note", failed=0, tested=len(records), tv=None, tv_upper=None,
                        predicates=(), where=())]

    def rerun(self, steps: Any, scenarios: Sequence[StubScenario], records: Sequence[StubScenario],
              result: KernelCheckResult) -> list[Finding]:
        again = steps.analyse(scenarios, steps.collect(scenarios, seed=result.seed + 1))
        return [Finding(component="rerun", text=str(again.verdict), failed=0, tested=0, tv=None, tv_upper=None,
                        predicates=(), where=())]


STUB_KERNEL = Kernel(lambda r: None, KernelSpec(layout="ragged", name="stub"))


def test_holm_runs_over_the_tests_of_every_record_together() -> None:
    # 2e-4 rejects at 1e-3 alone (and in a family of 2: 4e-4), not in a family of 6 (Holm: 1.2e-3)
    lone = [StubScenario("a", (2e-4, 0.9))]
    crowd = [StubScenario("a", (2e-4, 0.9)), StubScenario("b", (0.5, 0.6, 0.7, 0.8))]
    layout = StubLayout()
    alone = KernelCheck(STUB_KERNEL, layout, alpha=1e-3).run(lone, solo=False)
    assert alone.verdict == "shifted" and alone.rejected[0].holm == pytest.approx(4e-4)
    together = KernelCheck(STUB_KERNEL, layout, alpha=1e-3).run(crowd, solo=False)
    assert together.verdict == "equivalent" and together.tests[0].holm == pytest.approx(1.2e-3)
    assert [t.scenario for t in together.tests] == ["a", "a", "b", "b", "b", "b"]
    assert [v for k, v in layout.log if k == "tv_alpha"] == [pytest.approx(1e-3 / 2), pytest.approx(1e-3 / 6)]


def test_notes_follow_the_diagnosis_and_reruns_come_only_for_a_shifted_check_with_solo() -> None:
    shifted = [StubScenario("a", (1e-6,))]
    layout = StubLayout()
    r = KernelCheck(STUB_KERNEL, layout, seed=4).run(shifted)
    assert [f.component for f in r.findings] == ["token", "note", "rerun"]
    assert [v for k, v in layout.log if k == "collect"] == [(("a",), 4), (("a",), 5)]  # the rerun: seed + 1
    layout.log.clear()
    r = KernelCheck(STUB_KERNEL, layout, seed=4).run(shifted, solo=False)
    assert [f.component for f in r.findings] == ["token", "note"]
    r = KernelCheck(STUB_KERNEL, layout).run([StubScenario("a", (0.5,))])
    assert r.verdict == "equivalent" and [f.component for f in r.findings] == ["note"]
    assert [v for k, v in layout.log if k == "collect"] == [(("a",), 4), (("a",), 0)]
    assert KernelCheck(STUB_KERNEL, layout).run(scale=2.0).scenarios[0].name == "a"  # the layout's defaults


def test_every_layout_has_its_strategy() -> None:
    assert set(LAYOUT_CHECKS) == set(LAYOUTS)
    assert {n: LAYOUT_CHECKS[n] for n in ("ragged", "padded", "single", "tree", "model")} == {
        "ragged": CHAIN, "padded": CHAIN, "single": CHAIN, "tree": TREE, "model": MODEL}


def test_the_tree_layout_checks_the_scenarios_it_is_given() -> None:
    tree = reference_tree_kernel("target-only")
    small = [s for s in default_tree_scenarios(tree.spec, scale=0.05, seed=2) if s.vocab_size <= 61]
    r = check(tree, scenarios=small, seed=2)
    assert [s.name for s in r.scenarios] == [s.name for s in small] == ["tree-v61", "tree-v2"]
    assert r.verdict == "equivalent" and {t.scenario for t in r.tests} <= {"tree-v61", "tree-v2"}


def test_scenarios_of_another_layout_are_refused_naming_both() -> None:
    chain = default_scenarios(KernelSpec(layout="ragged"), scale=0.05)[:1]
    with pytest.raises(ConfigError, match="tree-layout kernel is checked on TreeScenario scenarios, got Scenario"):
        check(reference_tree_kernel("target-only"), scenarios=chain)
    with pytest.raises(ConfigError, match="model-layout kernel is checked on ModelScenario scenarios, got Scenario"):
        check(reference_model_kernel(), scenarios=chain)
    models = default_model_scenarios(2, scale=0.05)

    def never(req: Any) -> Outcome:  # the check refuses before any call
        raise AssertionError("called")

    with pytest.raises(ConfigError, match="ragged-layout kernel is checked on Scenario scenarios, got ModelScenario"):
        check(Kernel(never, KernelSpec(layout="ragged")), scenarios=models)
