"""The ``speceq`` fixture's object: run equivalence checks inside a test and apply the verdict.

``speceq.check(case)`` runs the session's baseline and candidate engines on ``case`` (see
:func:`speceq.pipeline.runner.run`), records the result for the report and the test's report section,
then applies the verdict: ``shifted`` raises :class:`~speceq.errors.DistributionMismatch`
with the evidence; ``within-tolerance`` (a difference certified below ``--speceq-numerics-tolerance``)
marks the test xfailed with the size (``pytest.xfail``: visible as ``x`` in the summary, never a pass,
never a session failure); ``inconclusive`` fails (:class:`EquivalenceInconclusive`), skips or passes
as ``--speceq-inconclusive`` (or ``inconclusive=``) says; ``equivalent`` passes.

Settings resolve as :mod:`speceq.faces.pytest_support.options` describes (keyword > command
line > marker > ini > default). Each check stores its samples in its own folder, named from
the test id, the check's index in the test and a digest of what determines the samples, so
a rerun with ``--speceq-store`` reuses them. Each case's chunk folders are links into the
session's shared folders (:mod:`speceq.pipeline.sharing`: one per engine identity, case and
seed), so a check whose baseline (or candidate) samples another check of the session already
drew reuses them, and one oracle per distinct oracle scores each row once for the session.
Chunks are sampled on the session's worker processes (``--speceq-workers``, default auto as
``speceq run``; :attr:`EquivalenceSession.pool`), started once and kept across checks; the shared
oracle scores in the pytest process.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from speceq.core.defaults import CONTROL_RATIO
from speceq.engines.base import Engine, SampleRequest
from speceq.errors import ConfigError, DistributionMismatch, SpeceqError
from speceq.faces.pytest_support.explain import explain_run
from speceq.faces.pytest_support.options import INCONCLUSIVE_OUTCOMES, Settings
from speceq.faces.pytest_support.probes import Repeatability, SoloEngine, repeatability
from speceq.faces.pytest_support.session import ITEM_NOTES_KEY, ITEM_RESULTS_KEY, EquivalenceSession
from speceq.inputs.cases import Case
from speceq.verdicts.result import CaseResult, RunResult
from speceq.verdicts.verdict import Verdict

CaseLike = Case | Mapping[str, Any]
Cases = CaseLike | Sequence[CaseLike] | str | Path | None


class EquivalenceInconclusive(SpeceqError, AssertionError):
    """A check was inconclusive and ``--speceq-inconclusive=fail``; carries the result."""

    def __init__(self, message: str, result: RunResult) -> None:
        self.result = result
        super().__init__(message)


def _safe_name(text: str, *, limit: int = 80, digest: bool = True) -> str:
    """A folder name from a test id: safe characters, at most ``limit`` of them, plus a short digest."""
    name = re.sub(r"[^A-Za-z0-9._-]+", "_", text)[:limit].strip("_.") or "test"
    return f"{name}-{hashlib.sha1(text.encode('utf-8')).hexdigest()[:8]}" if digest else name


def _marker_budget(item: pytest.Item) -> int | None:
    marker = item.get_closest_marker("speceq_budget")
    if marker is None:
        return None
    unknown = sorted(set(marker.kwargs) - {"samples"})
    samples = marker.kwargs.get("samples")
    if marker.args or unknown or isinstance(samples, bool) or not isinstance(samples, int) or samples < 1:
        raise ConfigError(f"expected speceq_budget(samples=<integer >= 1>), got args {marker.args} "
                          f"kwargs {marker.kwargs}",
                          where=f"{item.nodeid}: marker speceq_budget")
    return samples


class EquivalenceChecker:
    """What the ``speceq`` fixture gives a test (see the module docstring).

    ``settings``: the session's resolved options; ``samples``: this test's budget before
    keyword overrides (command line > ``speceq_budget`` marker > ini > default).
    """

    def __init__(self, session: EquivalenceSession, item: pytest.Item, store_root: Path,
                 shared: Path | None = None) -> None:
        self._session = session
        self._item = item
        self._store_root = store_root
        self._shared = shared  # the session's shared chunk folders (None: this check's store only)
        self.settings: Settings = session.settings
        budget = _marker_budget(item)
        from_cli = self.settings.sources.get("samples") == "command line"
        self.samples: int = self.settings.budget() if from_cli or budget is None else budget
        item.stash.setdefault(ITEM_RESULTS_KEY, [])
        item.stash.setdefault(ITEM_NOTES_KEY, [])

    # ----- cases ---------------------------------------------------------------------------
    def case(self, **fields: Any) -> Case:
        """A Case from the fields of a cases-file entry (docs/reference/cases.md), e.g. ``id``, ``prompt``, ``temperature``."""
        from speceq.inputs.cases import parse_cases

        return parse_cases([dict(fields)], source=f"{self._item.nodeid}: speceq.case")[0]

    def marked_cases(self) -> list[Case]:
        """The cases of the test's ``speceq_case`` markers, in the order they are written."""
        from speceq.inputs.cases import parse_cases

        markers = list(self._item.iter_markers("speceq_case"))[::-1]  # decorators apply bottom-up
        if not markers:
            return []
        for m in markers:
            if m.args:
                raise ConfigError(f"give the case as keywords, got positional {m.args}",
                                  where=f"{self._item.nodeid}: marker speceq_case")
        return parse_cases([dict(m.kwargs) for m in markers], source=f"{self._item.nodeid}: speceq_case marker")

    def _cases(self, cases: Cases) -> list[Case]:
        from speceq.inputs.cases import load_cases, parse_cases

        where = f"{self._item.nodeid}: speceq.check"
        if cases is None:
            found = self.marked_cases()
            if not found:
                raise ConfigError("no cases: pass cases to speceq.check() or mark the test with "
                                  "@pytest.mark.speceq_case(id=..., prompt=...)", where=where)
            return found
        if isinstance(cases, (str, Path)):
            return load_cases(cases)
        items = [cases] if isinstance(cases, (Case, Mapping)) else list(cases)
        if not items:
            raise ConfigError("empty list of cases", where=where)
        out = []
        for i, c in enumerate(items):
            if isinstance(c, Case):
                out.append(c)
            elif isinstance(c, Mapping):
                out.extend(parse_cases([dict(c)], source=f"{where} case {i}"))
            else:
                raise ConfigError(f"case {i} is a {type(c).__name__}; expected a Case or a mapping of case fields",
                                  where=where)
        return out

    # ----- engines -------------------------------------------------------------------------
    def _choose(self, role: str, spec: str | Engine | None,
                options: Mapping[str, Any] | None) -> tuple[str, dict[str, Any], Engine]:
        """(spec label, options, engine) of ``role``: an Engine instance as is, else the session's cached one."""
        __tracebackhide__ = True
        if role not in ("baseline", "candidate"):
            raise ConfigError(f"expected 'baseline' or 'candidate', got {role!r}", where="speceq engine role")
        if spec is not None and not isinstance(spec, str):
            if options:
                raise ConfigError(f"options {sorted(options)} given with an engine instance; "
                                  "build the engine with them", where=f"speceq {role}")
            return str(getattr(spec, "name", role)), {}, spec
        label = spec if spec is not None else getattr(self.settings, role)
        opts = dict(options) if options is not None else self.settings.engine_options(role, label)
        return label, opts, self._session.engine(role, label, opts)

    def engine(self, role: str, spec: str | Engine | None = None, options: Mapping[str, Any] | None = None) -> Engine:
        """The session's engine of ``role`` (or of ``spec``/``options``), built once per session."""
        __tracebackhide__ = True
        return self._choose(role, spec, options)[2]

    def solo(self, engine: Engine | str | None = None, *, batch_size: int = 1) -> SoloEngine:
        """``engine`` (default: the candidate) with every prompt sampled alone (:class:`SoloEngine`)."""
        inner = engine if isinstance(engine, Engine) else self.engine("candidate", engine)
        return SoloEngine(inner, batch_size=batch_size)

    # ----- checks --------------------------------------------------------------------------
    def run(self, cases: Cases = None, *, samples: int | None = None, alpha: float | None = None,
            tolerance: float | None = None, seed: int | None = None, oracle: bool | str | None = None,
            baseline: str | Engine | None = None, candidate: str | Engine | None = None,
            baseline_options: Mapping[str, Any] | None = None,
            candidate_options: Mapping[str, Any] | None = None, sequential: bool | None = None,
            numerics_control: str | None = None) -> RunResult:
        """Run one check and record it for the report; never fails the test on the verdict.

        ``sequential``: the anytime-valid sequential mode (default: ``--speceq-sequential``);
        the test's report section then says when each case was decided. ``numerics_control``:
        ``"auto"`` or a second plain endpoint's URL (default: ``--speceq-numerics-control``), see
        docs/how-to/numerics-control.md; the baseline must then be given as a spec.

        ``oracle``: True/"on", False/"off", or a target model folder. ``baseline`` /
        ``candidate``: an engine spec or an Engine instance; their options default to the
        session's when the spec is the session's.
        """
        __tracebackhide__ = True
        from speceq.pipeline.config import RunConfig
        from speceq.pipeline.runner import run as run_equivalence

        case_list = self._cases(cases)
        chosen = {"baseline": self._choose("baseline", baseline, baseline_options),
                  "candidate": self._choose("candidate", candidate, candidate_options)}
        specs = {role: c[0] for role, c in chosen.items()}
        options = {role: c[1] for role, c in chosen.items()}
        engines = {role: c[2] for role, c in chosen.items()}
        if oracle is None:
            oracle_setting = self.settings.oracle
        else:
            oracle_setting = "on" if oracle is True else "off" if oracle is False else str(oracle)
        run_seed = self.settings.seed if seed is None else seed
        control = self.settings.numerics_control if numerics_control is None else numerics_control
        if control is not None and baseline is not None and not isinstance(baseline, str):
            raise ConfigError("a numerics control is the baseline engine at the candidate's numerics: give the "
                              "baseline as a spec, not an engine instance", where="speceq numerics_control")
        index = len(self._item.stash[ITEM_RESULTS_KEY])
        identity = {"engines": {r: [specs[r], options[r], engines[r].describe()] for r in engines},
                    "cases": [c.to_dict() for c in case_list], "seed": run_seed, "numerics_control": control,
                    **({"control_ratio": self.settings.control_ratio} if control is not None else {})}
        digest = hashlib.sha256(json.dumps(identity, sort_keys=True, default=repr).encode()).hexdigest()[:10]
        out_dir = self._store_root / f"check{index + 1}-{digest}"
        config = RunConfig(
            baseline=specs["baseline"], candidate=specs["candidate"],
            baseline_options=options["baseline"], candidate_options=options["candidate"],
            oracle=oracle_setting != "off", oracle_model=None if oracle_setting in ("on", "off") else oracle_setting,
            samples=self.samples if samples is None else samples,
            alpha=self.settings.alpha if alpha is None else alpha,
            tolerance=self.settings.tolerance if tolerance is None else tolerance,
            numerics_tolerance=self.settings.numerics_tolerance, seed=run_seed, threads=self.settings.threads,
            workers=self.settings.workers, out_dir=out_dir, resume=True, progress=False,
            near_tie_nats=self.settings.near_tie(), support_margin_nats=self.settings.support_margin(),
            sequential=self.settings.sequential if sequential is None else sequential,
            numerics_control=control,
            control_ratio=self.settings.control_ratio if control is not None else CONTROL_RATIO,
        )
        if config.numerics_control is not None:
            engines["control"] = self._session.engine("control", *config.control_spec())
        shared_oracle = None
        if self._shared is not None:  # chunks and oracle scores shared with the session's other checks
            from speceq.pipeline.sharing import share_case_chunks

            share_case_chunks(self._shared, config, engines, case_list)  # baseline and candidate; the control its own
            shared_oracle = self._session.shelf.oracle_for(config, engines)
        result = run_equivalence(config, case_list, engines=engines, oracle=shared_oracle, pool=self._session.pool)
        if config.sequential:
            self.note(f"speceq check {index + 1}: sequential mode (anytime-valid, stops each case once decided)")
            for c in result.cases:
                self.note(f"  {c.case_id}: {c.verdict} — {c.reason}")
        self._item.stash[ITEM_RESULTS_KEY].append((result, out_dir))
        self._item.user_properties.append((f"speceq_check_{index + 1}", str(result.verdict)))
        self._session.record(self._item.nodeid, index, result, out_dir)
        self._item.config.hook.pytest_speceq_result(config=self._item.config, item=self._item, result=result)
        return result

    def check(self, cases: Cases = None, *, inconclusive: str | None = None,
              **overrides: Any) -> CaseResult | RunResult:
        """Run one check (see :meth:`run`) and apply its verdict to the test.

        Returns the CaseResult when ``cases`` is one Case or mapping, else the RunResult.
        Raises DistributionMismatch when the run is shifted; when it is inconclusive, fails
        (EquivalenceInconclusive), skips or passes per ``inconclusive`` (default: the option).
        """
        __tracebackhide__ = True
        outcome = self.settings.inconclusive if inconclusive is None else inconclusive
        if outcome not in INCONCLUSIVE_OUTCOMES:
            raise ConfigError(f"expected one of {INCONCLUSIVE_OUTCOMES}, got {outcome!r}",
                              where="speceq.check inconclusive")
        result = self.run(cases, **overrides)
        store = self._item.stash[ITEM_RESULTS_KEY][-1][1]
        if result.verdict in (Verdict.SHIFTED, Verdict.LOSSY):  # a lossy candidate is never equivalent: it fails
            raise DistributionMismatch(explain_run(result, store=store), verdict=result)
        if result.verdict == Verdict.WITHIN_TOLERANCE:
            pytest.xfail(_within_reason(result))
        if result.verdict == Verdict.INCONCLUSIVE:
            if outcome == "fail":
                raise EquivalenceInconclusive(
                    "INCONCLUSIVE (no shift detected, but equivalence within the tolerance is not shown at this "
                    "budget; more samples, a larger --speceq-tolerance, or --speceq-inconclusive=skip|pass)\n"
                    + explain_run(result, store=store), result)
            if outcome == "skip":
                pytest.skip(_skip_reason(result))
        single = isinstance(cases, (Case, Mapping))
        return result.cases[0] if single else result

    def repeatability(self, case: CaseLike, *, role: str = "candidate", samples: int | None = None,
                      seed: int | None = None, engine: str | Engine | None = None) -> Repeatability:
        """Sample ``case`` twice with one seed (``seed``, else the case's own ``seed``, else the run's) and report
        (as information) whether the rows repeat."""
        __tracebackhide__ = True
        (c,) = self._cases(case)
        eng = self.engine(role, engine)
        n = self.samples if samples is None else samples
        if seed is None:
            seed = self.settings.seed if c.params.seed is None else c.params.seed
        request = SampleRequest(prompts=tuple(tuple(p) for p in c.prompts), params=c.params, n=n, seed=seed,
                                batch_size=c.batch_size)
        rep = repeatability(eng, request, case_id=c.case_id)
        self.note(rep.summary())
        return rep

    def note(self, text: str) -> None:
        """Add an information line to the test's ``speceq`` report section."""
        self._item.stash[ITEM_NOTES_KEY].append(str(text))


def _within_reason(result: RunResult) -> str:
    within = [c for c in result.cases if c.verdict == Verdict.WITHIN_TOLERANCE]
    more = f" (+{len(within) - 1} more cases)" if len(within) > 1 else ""
    return f"speceq within-tolerance: case {within[0].case_id!r}: {within[0].reason}{more}"


def _skip_reason(result: RunResult) -> str:
    undecided = [c for c in result.cases if c.verdict == Verdict.INCONCLUSIVE]
    first = undecided[0]
    more = f" (+{len(undecided) - 1} more cases)" if len(undecided) > 1 else ""
    return f"speceq inconclusive: case {first.case_id!r}: {first.reason}{more}"
