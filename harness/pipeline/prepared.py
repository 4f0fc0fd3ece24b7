"""A prepared run: everything both loops share, set up once before any sample is drawn.

:func:`speceq.pipeline.runner.run` checks the cases and engines, opens the executor session,
loads the engines and the oracle and writes the first provenance (status ``collecting``),
then hands a :class:`PreparedRun` to the fixed-size or the sequential loop. Both loops end in
:func:`analyse_rows`, the one call into the analysis, so every run setting reaches it in both
modes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from speceq.core.provenance import utc_now
from speceq.engines.base import Engine, SampleBatch
from speceq.inputs.cases import Case
from speceq.oracles.build import ModelSource
from speceq.oracles.protocol import Oracle
from speceq.pipeline.collect.session import ExecutorSession, ScoreRequest
from speceq.pipeline.config import RunConfig
from speceq.pipeline.control_arm import name_numerics
from speceq.store import ROLES
from speceq.verdicts.result import RunResult

#: role -> (engine spec, options): what worker processes rebuild the engines from (None: engine objects).
EngineSpecs = Mapping[str, tuple[str, Mapping[str, Any]]]


@dataclass(slots=True, kw_only=True)
class PreparedRun:
    """The checked inputs, loaded engines and oracle, executor session and provenance of one run."""

    config: RunConfig
    cases: tuple[Case, ...]
    engines: dict[str, Engine]
    specs: EngineSpecs | None
    session: ExecutorSession
    described: dict[str, dict[str, Any]]
    provenance: dict[str, Any]
    oracle: Oracle | None
    sources: tuple[ModelSource, ModelSource | None] | None

    def prefetch(self, requests: Sequence[ScoreRequest]) -> Oracle | None:
        """The oracle the analysis should use for ``requests``: scored ahead on the workers when there are any."""
        if self.oracle is None or self.sources is None:
            return self.oracle
        scorer = self.session.prefetch_scores(self.oracle, requests, target=self.sources[0], draft=self.sources[1])
        self.provenance.setdefault(
            "oracle_scoring", self.session.description if scorer is not self.oracle else "serial, in this process")
        return scorer

    def completed(self, finished: Mapping[str, Any]) -> dict[str, Any]:
        """The provenance of the finished collection: status ``complete``, the time, and the loop's own record."""
        return {**self.provenance, "status": "complete", "finished": utc_now(), **finished}


def analyse_rows(prepared: PreparedRun, baseline: Mapping[str, SampleBatch], candidate: Mapping[str, SampleBatch],
                 oracle: Oracle | None, provenance: Mapping[str, Any]) -> RunResult:
    """The one call into :func:`speceq.pipeline.analysis.analyse_run`, with every setting of the run.

    When the engines declare different numerics, every ``shifted`` reason names the difference and the
    numerics control flag (:func:`speceq.pipeline.control_arm.name_numerics`); a run with a control is
    analysed by :func:`speceq.pipeline.control_arm.analyse_with_control` instead.
    """
    from speceq.pipeline.analysis import analyse_run

    config = prepared.config
    return name_numerics(analyse_run(
        prepared.cases, baseline, candidate, oracle=oracle, alpha=config.alpha, tolerance=config.tolerance,
        seed=config.seed, engines={r: prepared.described[r]["config"] for r in ROLES}, provenance=provenance,
        progress=config.progress, near_tie_nats=config.near_tie_nats, certificate=config.certificate,
        support_margin_nats=config.support_margin_nats, numerics_tolerance=config.numerics_tolerance,
    ), sequential=config.sequential)


__all__ = ["EngineSpecs", "PreparedRun", "analyse_rows"]
