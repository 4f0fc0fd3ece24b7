"""Sequential (anytime-valid) runs: stop every case as soon as its evidence decides it.

See :mod:`speceq.pipeline.sequential.driver` for the schedule and the decision rule and
:mod:`speceq.stats.sequential` for the e-processes and the time-uniform TV bound.
"""

from speceq.pipeline.sequential.driver import CaseProgress, look_totals, run_sequential, samples_used
from speceq.pipeline.sequential.evidence import CaseSequentialEvidence, evaluate_case, planned_tests

__all__ = ["CaseProgress", "CaseSequentialEvidence", "evaluate_case", "look_totals", "planned_tests",
           "run_sequential", "samples_used"]
