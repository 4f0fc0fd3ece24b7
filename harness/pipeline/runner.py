"""One equivalence run: one skeleton, two loops.

:func:`run` is the same session for a fixed-size and a sequential run; only the loop in the
middle differs (as pytest's main loop and xdist's test loop share one session):

- **prepare** (:func:`prepare`): refuse bad cases and budgets, set the torch threads, open the
  executor session (worker processes start while this process loads its engines), resolve
  the engines, check that they can be compared and that every prompt fits their vocabulary,
  refuse cases a top-K server oracle cannot score, build the oracle and check it scores the
  baseline's vocabulary, and write the first provenance (status ``collecting``) -- all before
  any sample is drawn;
- **loop**: :class:`~speceq.pipeline.fixed.FixedSizeLoop` (every chunk, then one analysis) or
  :class:`~speceq.pipeline.sequential.driver.SequentialLoop` (look by look);
- **finish** (:func:`finish`): ``result.json`` and ``provenance.json`` in the output folder,
  next to the store's ``chunks/``.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from speceq.core.provenance import collect_provenance
from speceq.engines.base import Engine
from speceq.errors import ConfigError
from speceq.inputs.cases import Case
from speceq.oracles.build import check_oracle_matches, make_oracle, oracle_sources
from speceq.oracles.protocol import Oracle
from speceq.pipeline.checks import (
    check_case_vocabularies,
    check_cases,
    check_engines_comparable,
    check_sample_sizes,
    check_sampling_fields,
)
from speceq.pipeline.collect.pool import WorkerPool
from speceq.pipeline.collect.session import ExecutorSession
from speceq.pipeline.config import PROVENANCE_FILE, RESULT_FILE, RunConfig
from speceq.pipeline.control_arm import check_control, numerics_warning
from speceq.pipeline.fixed import FixedSizeLoop
from speceq.pipeline.plan import engine_identities, role_spec
from speceq.pipeline.prepared import EngineSpecs, PreparedRun
from speceq.pipeline.sequential.driver import SequentialLoop
from speceq.store import CONTROL_ROLE, ROLES, atomic_write, write_json_atomic
from speceq.verdicts.result import RunResult


class RunLoop(Protocol):
    """The part of a run that differs between fixed-size and sequential runs."""

    seed_derivation: str  #: how chunk seeds derive from the run seed (provenance)
    extra_settings: Mapping[str, Any]  #: settings the loop adds to provenance

    def first_round(self, config: RunConfig, cases: Sequence[Case]) -> int:
        """Chunks sampled first (sizes the worker pool started before the engines load)."""
        ...

    def run(self, prepared: PreparedRun) -> RunResult:
        """Collect and analyse; the result carries the final provenance."""
        ...


def resolve_engines(config: RunConfig) -> dict[str, Engine]:
    """The baseline and candidate engines of ``config`` (and its numerics control) from the engine registry."""
    from speceq.engines.registry import resolve_engine

    return {r: resolve_engine(spec, options=options) for r, (spec, options) in engine_specs(config).items()}


def apply_threads(threads: int | None) -> None:
    """Make ``threads`` the torch thread count of this process and of every engine built afterwards.

    None leaves it to the engines (``$SPECEQ_TORCH_THREADS``, else 1; see
    :func:`speceq.models.torch_utils.configure_threads`) and does not import torch.
    """
    if threads is None:
        return
    from speceq.models.torch_utils import THREADS_ENV, configure_threads

    os.environ[THREADS_ENV] = str(threads)  # read by the project's engines and the oracle
    configure_threads(threads)


def engine_specs(config: RunConfig) -> EngineSpecs:
    """role -> (spec, options) of ``config``: what worker processes rebuild the engines from."""
    roles = ROLES + ((CONTROL_ROLE,) if config.numerics_control is not None else ())
    return {r: role_spec(config, r) for r in roles}


def prepare(config: RunConfig, cases: Sequence[Case], engines: Mapping[str, Engine] | None, loop: RunLoop,
            session: ExecutorSession, specs: EngineSpecs | None, oracle: Oracle | None = None) -> PreparedRun:
    """Everything a loop needs, checked before any sample is drawn (see the module docstring).

    ``oracle``: use this oracle (scoring in this process) instead of building the one of ``config``.
    """

    engines = dict(engines) if engines is not None else resolve_engines(config)
    session.set_engines(engines)
    check_engines_comparable(engines)
    check_control(config, engines, cases)
    check_case_vocabularies(cases, engines)
    check_sampling_fields(cases, engines)
    spec = config.oracle_spec()
    if spec is not None and spec.server is not None:  # refuse what the server cannot score
        from speceq.oracles.server import check_server_cases

        check_server_cases(cases, spec.top_logprobs, engines["baseline"].vocab_size)
    described = engine_identities(config, engines)
    warning = numerics_warning(config, described)
    if warning is not None:  # before any sample: the user may stop and add the control
        print(f"speceq: note: {warning}", file=sys.stderr, flush=True)
    seeds = {"run_seed": config.seed, "derivation": loop.seed_derivation}
    provenance = collect_provenance(seeds=seeds, engines=described, settings={**config.settings(), **loop.extra_settings},
                                    extra={"cases": [c.to_dict() for c in cases], "status": "collecting",
                                           **({"numerics_warning": warning} if warning else {})})
    sources = None
    if oracle is not None:
        check_oracle_matches(oracle, engines)
        provenance["oracle"] = oracle.describe()
    elif spec is not None:
        oracle = make_oracle(spec, engines)
        check_oracle_matches(oracle, engines)
        provenance["oracle"] = oracle.describe()
        sources = oracle_sources(spec, engines)
    config.out_dir.mkdir(parents=True, exist_ok=True)
    (config.out_dir / RESULT_FILE).unlink(missing_ok=True)  # never leave a stale result beside new samples
    write_json_atomic(config.out_dir / PROVENANCE_FILE, provenance)
    return PreparedRun(config=config, cases=tuple(cases), engines=engines, specs=specs, session=session,
                       described=described, provenance=provenance, oracle=oracle, sources=sources)


def finish(config: RunConfig, result: RunResult) -> None:
    """Write ``result.json`` and the final ``provenance.json`` (the result's own) atomically."""
    result_json = (result.to_json() + "\n").encode("utf-8")
    atomic_write(config.out_dir / RESULT_FILE, lambda f: f.write(result_json))
    write_json_atomic(config.out_dir / PROVENANCE_FILE, dict(result.provenance))


def run(config: RunConfig, cases: Sequence[Case], *, engines: Mapping[str, Engine] | None = None,
        oracle: Oracle | None = None, pool: WorkerPool | None = None) -> RunResult:
    """Prepare, run the loop (fixed-size, or sequential when ``config.sequential``) and finish; return the result.

    ``engines`` ({"baseline": ..., "candidate": ...}, and ``"control"`` when ``config.numerics_control``
    is set) replaces resolving the specs of ``config`` (for library use and tests); the specs are still recorded. ``oracle`` replaces
    building the oracle of ``config`` (which must have the oracle on): several runs of one
    process can share one, e.g. a :class:`speceq.oracles.memo.RememberingOracle`; it scores in
    this process, not in worker processes. ``pool``: local worker processes the caller keeps across
    runs (:class:`speceq.pipeline.collect.pool.WorkerPool`, which then decides how many a run uses,
    instead of ``config.workers``); the run uses them and leaves them running.
    """
    check_cases(cases)
    if oracle is not None and not config.oracle:
        raise ConfigError("an oracle was given to a run whose oracle is off (RunConfig.oracle=False)", where="oracle")
    apply_threads(config.threads)
    check_sample_sizes(config, cases)
    loop: RunLoop = SequentialLoop() if config.sequential else FixedSizeLoop()
    specs = None if engines is not None else engine_specs(config)
    with ExecutorSession(executor=config.executor, workers=config.workers, ray_address=config.ray_address,
                         threads=config.threads, engines=engines, specs=specs, pool=pool) as session:
        session.prestart(pending=loop.first_round(config, cases))  # workers load engines while this process does
        prepared = prepare(config, cases, engines, loop, session, specs, oracle)
        result = loop.run(prepared)
    finish(config, result)
    return result


__all__ = ["RunLoop", "apply_threads", "engine_specs", "finish", "prepare", "resolve_engines", "run"]
