"""Sequential (anytime-valid) runs: stop every case as soon as its evidence decides it.

``speceq.run(RunConfig(sequential=True), cases)`` (``speceq run --sequential``) runs the
:class:`~speceq.pipeline.sequential.driver.SequentialLoop` inside the same run skeleton as a
fixed-size run. See :mod:`speceq.pipeline.sequential.driver` for the schedule,
:mod:`speceq.verdicts.sequential` for the decision rule and :mod:`speceq.stats.sequential` for
the e-processes and the time-uniform TV bound.
"""

from speceq.pipeline.sequential.driver import CaseProgress, SequentialLoop, look_totals, samples_used
from speceq.pipeline.sequential.evidence import CaseSequentialEvidence, evaluate_case, planned_tests

__all__ = ["CaseProgress", "CaseSequentialEvidence", "SequentialLoop", "evaluate_case", "look_totals",
           "planned_tests", "samples_used"]
