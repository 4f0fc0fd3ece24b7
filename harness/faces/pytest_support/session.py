"""Per-session state of the plugin: the engine cache, every check's result, the HTML report.

:class:`EquivalenceSession` is registered as the plugin object ``speceq-session``; its hook
methods run in every pytest process. Under pytest-xdist each worker keeps its own records
and sends them, as JSON, to the controller in ``workeroutput`` when it finishes; only the
controller (or the single process without xdist) writes the report: one HTML file for the
whole session, plus the merged result as JSON beside it. Heavy modules (numpy, the run
machinery, the report renderer) are imported on first use.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from speceq.faces.pytest_support.options import Settings
from speceq.verdicts.notes import Note

if TYPE_CHECKING:
    from speceq.engines.base import Engine
    from speceq.verdicts.result import RunResult

#: Per-item stash: the test's checks (result, store folder) and its information notes.
ITEM_RESULTS_KEY = pytest.StashKey[list]()
ITEM_NOTES_KEY = pytest.StashKey[list]()
#: Key of the records a worker sends to the controller in ``workeroutput``.
WORKER_OUTPUT_KEY = "speceq_records"
#: Key of the kernel-check results (``speceq_kernel`` fixture) a worker sends to the controller.
WORKER_KERNEL_KEY = "speceq_kernel_records"


@dataclass(frozen=True, slots=True)
class CheckRecord:
    """One check of one test: where it ran and its result."""

    nodeid: str
    index: int  # 0-based, per test
    result: RunResult
    store: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"nodeid": self.nodeid, "index": self.index, "store": self.store, "result": self.result.to_dict()}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> CheckRecord:
        from speceq.verdicts.result import RunResult

        return cls(str(d["nodeid"]), int(d["index"]), RunResult.from_dict(dict(d["result"])), d.get("store"))


def xdist_share(config: pytest.Config) -> int | None:
    """In a pytest-xdist worker: the usable CPUs divided by the number of xdist processes (at least 1),
    the most worker processes auto gives each of its checks; None outside xdist (no cap)."""
    count = getattr(config, "workerinput", {}).get("workercount")
    if count is None:
        return None
    from speceq.pipeline.collect import usable_cpus

    return max(1, usable_cpus() // max(1, int(count)))


def _engine_key(spec: str, options: Mapping[str, Any]) -> tuple[str, str]:
    return spec, json.dumps(dict(options), sort_keys=True, default=repr)


def _distinct_engines(records: Sequence[CheckRecord]) -> dict[str, Any]:
    """Engines of the merged result: ``baseline``/``candidate`` when all checks agree, else numbered."""
    out: dict[str, Any] = {}
    for role in ("baseline", "candidate"):
        seen: list[Any] = []
        for r in records:
            d = r.result.engines.get(role)
            if d not in seen:
                seen.append(d)
        if len(seen) == 1:
            out[role] = seen[0]
        else:
            out.update({f"{role} #{i + 1}": d for i, d in enumerate(seen)})
    return out


def merge_results(records: Sequence[CheckRecord]) -> RunResult:
    """One RunResult of every check (cases renamed ``<test id> :: <case id>``), for one report.

    The run verdict is the worst of the checks' verdicts. Each check's Holm adjustment is
    over its own tests: the merged result does not re-adjust (a note says so).
    """
    from speceq.verdicts.result import RunResult
    from speceq.verdicts.verdict import Verdict

    if not records:
        raise ValueError("`records` is empty: no check ran")
    ordered = sorted(records, key=lambda r: (r.nodeid, r.index))
    per_test: dict[str, int] = {}
    for r in ordered:
        per_test[r.nodeid] = per_test.get(r.nodeid, 0) + 1
    cases = []
    for r in ordered:
        label = r.nodeid if per_test[r.nodeid] == 1 else f"{r.nodeid} #{r.index + 1}"
        cases.extend(dataclasses.replace(c, case_id=f"{label} :: {c.case_id}") for c in r.result.cases)
    verdict = Verdict.worst(r.result.verdict for r in ordered)
    first = ordered[0].result
    notes = [f"merged from {len(ordered)} checks of {len(per_test)} tests; each check's Holm adjustment "
             f"covers its own tests (family-wise error <= alpha per check, <= {len(ordered)} x alpha for the session)"]
    other_alpha = sorted({r.result.alpha for r in ordered} - {first.alpha})
    if other_alpha:
        notes.append(f"some checks used alpha {other_alpha} instead of {first.alpha:g}; "
                     f"their 'rejects' marks in this report use {first.alpha:g}")
    provenance = {
        "checks": [{"test": r.nodeid, "check": r.index + 1, "verdict": r.result.verdict, "store": r.store,
                    "seed": r.result.seed, "alpha": r.result.alpha} for r in ordered],
        **{k: first.provenance[k] for k in ("packages", "git", "machine") if k in first.provenance},
    }
    oracle = next((r.result.oracle for r in ordered if r.result.oracle is not None), None)
    return RunResult(verdict=verdict, alpha=first.alpha, tolerance=first.tolerance, seed=first.seed,
                     engines=_distinct_engines(ordered), cases=tuple(cases), oracle=oracle,
                     provenance=provenance, notes=tuple(Note.words(n) for n in notes),  # this face's own words
                     numerics_tolerance=first.numerics_tolerance)


class EquivalenceSession:
    """Session state and session-level hooks (registered as plugin ``speceq-session``)."""

    def __init__(self, config: pytest.Config, settings: Settings) -> None:
        self.config = config
        self.settings = settings
        self.records: list[CheckRecord] = []
        self.kernel_records: list[dict[str, Any]] = []  # KernelCheckResult.to_dict() + "label" (test id)
        self.report_written: Path | None = None
        self._engines: dict[tuple[str, str], Any] = {}
        self._engine_errors: dict[tuple[str, str], str] = {}
        self._shelf: Any = None
        self._shared_root: Path | None = None
        self._pool: Any = None

    @property
    def shelf(self) -> Any:
        """The session's oracles, each scoring a row once for every check (an ``OracleShelf`` of
        pipeline/sharing.py, built on first use: loading the plugin imports nothing heavy)."""
        if self._shelf is None:
            from speceq.pipeline.sharing import OracleShelf

            self._shelf = OracleShelf()
        return self._shelf

    def shared_root(self, tmp_path_factory: pytest.TempPathFactory) -> Path:
        """The folder of the chunks every check of the session shares (``<store>/shared``, or a session
        temporary folder without ``--speceq-store``); one per pytest-xdist worker, since two writers
        must not clean up each other's partly written chunks."""
        if self._shared_root is None:
            worker = getattr(self.config, "workerinput", {}).get("workerid")
            name = "shared" if worker is None else f"shared-{worker}"
            if self.settings.store is not None:
                self._shared_root = self.settings.store / name
            else:
                self._shared_root = tmp_path_factory.mktemp(f"speceq-{name}", numbered=True)
        return self._shared_root

    @property
    def pool(self) -> Any:
        """The session's worker processes (a ``WorkerPool`` of pipeline/collect/pool.py, built on first use).

        ``--speceq-workers`` (default: auto, as ``speceq run``) sets the count per check; the processes
        start at the first check that uses them and serve every later one until the session ends.
        Under pytest-xdist, which already runs tests in parallel, auto is capped at
        :func:`xdist_share` worker processes per xdist process, so the session does not start more
        processes than there are CPUs.
        """
        if self._pool is None:
            from speceq.pipeline.collect.pool import WorkerPool

            self._pool = WorkerPool(workers=self.settings.workers, threads=self.settings.threads,
                                    limit=xdist_share(self.config))
        return self._pool

    def close_pool(self) -> None:
        """Stop the session's worker processes (at the end of the session)."""
        if self._pool is not None:
            self._pool.close()
            self._pool = None

    @property
    def is_worker(self) -> bool:
        """True in a pytest-xdist worker process."""
        return hasattr(self.config, "workerinput")

    # ----- engines -----------------------------------------------------------------------
    def engine(self, role: str, spec: str, options: Mapping[str, Any]) -> Engine:
        """The engine of ``spec`` with ``options``, built once per session (hook, then registry).

        A spec that failed to build fails every test that asks for it, with the first error.
        """
        __tracebackhide__ = True
        key = _engine_key(spec, options)
        if key in self._engines:
            return self._engines[key]
        if key in self._engine_errors:
            pytest.fail(self._engine_errors[key], pytrace=False)
        from speceq.engines.registry import resolve_engine
        from speceq.errors import SpeceqError

        try:
            engine = self.config.hook.pytest_speceq_make_engine(config=self.config, role=role, spec=spec,
                                                                 options=dict(options))
            if engine is None:
                engine = resolve_engine(spec, options=dict(options))
                self.pool.know(engine, spec, options)  # worker processes rebuild it from the spec
        except SpeceqError as e:
            self._engine_errors[key] = f"speceq: cannot build the {role} engine {spec!r}: {e}"
            pytest.fail(self._engine_errors[key], pytrace=False)
        self._engines[key] = engine
        return engine

    # ----- results -----------------------------------------------------------------------
    def record(self, nodeid: str, index: int, result: RunResult, store: Path | None) -> None:
        self.records.append(CheckRecord(nodeid, index, result, None if store is None else str(store)))

    def record_kernel(self, nodeid: str, index: int, result: Mapping[str, Any]) -> None:
        """Keep a kernel check's result (``to_dict()``) for the session report."""
        label = nodeid if index == 0 else f"{nodeid} #{index + 1}"
        self.kernel_records.append({**dict(result), "label": label})

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: Any, error: Any) -> None:
        """Controller side of pytest-xdist: take the records a finished worker sent."""
        output = getattr(node, "workeroutput", None) or {}
        payload = output.get(WORKER_OUTPUT_KEY)
        if payload:
            self.records.extend(CheckRecord.from_json(d) for d in json.loads(payload))
        kernels = output.get(WORKER_KERNEL_KEY)
        if kernels:
            self.kernel_records.extend(json.loads(kernels))

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        self.close_pool()
        if self.is_worker:
            self.config.workeroutput[WORKER_OUTPUT_KEY] = json.dumps(  # type: ignore[attr-defined]
                [r.to_json() for r in self.records], allow_nan=True)
            self.config.workeroutput[WORKER_KERNEL_KEY] = json.dumps(  # type: ignore[attr-defined]
                self.kernel_records, allow_nan=True, default=str)
            return
        if self.settings.report is not None and (self.records or self.kernel_records):
            self.report_written = write_session_report(self.records, self.settings.report, self.kernel_records)

    def pytest_report_header(self, config: pytest.Config) -> str | None:
        if all(source == "default" for source in self.settings.sources.values()):
            return None
        return self.settings.header()

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if self.is_worker or self.settings.report is None:
            return
        if self.report_written is not None:
            json_path = self.report_written.with_suffix(".json")
            kernels = f" and {len(self.kernel_records)} kernel checks" if self.kernel_records else ""
            terminalreporter.write_line(f"speceq: report of {len(self.records)} checks{kernels}: "
                                        f"{self.report_written} (result: {json_path})")
        else:
            terminalreporter.write_line("speceq: no check ran; no report written")


def write_session_report(records: Sequence[CheckRecord], path: Path,
                         kernel_records: Sequence[Mapping[str, Any]] = ()) -> Path:
    """Write the session's HTML report to ``path`` and its JSON beside it; return ``path``.

    Equivalence checks: the merged result (JSON: PATH with suffix .json). Kernel checks
    (``speceq_kernel``): a section of their own (JSON: {"kernels": [...]} in PATH with suffix
    .json when there is no equivalence check, else in PATH with suffix .kernels.json).
    """
    from speceq.store import atomic_write

    kernels = [dict(k) for k in kernel_records]
    kernel_data = (json.dumps({"kernels": kernels}, allow_nan=True, default=str) + "\n").encode("utf-8")
    if not records:
        from speceq.reports.kernels import write_kernel_report

        atomic_write(path.with_suffix(".json"), lambda f: f.write(kernel_data))
        return write_kernel_report(kernels, path)
    from speceq.reports.render import write_report

    merged = merge_results(records)
    data = (merged.to_json() + "\n").encode("utf-8")
    atomic_write(path.with_suffix(".json"), lambda f: f.write(data))
    if kernels:
        atomic_write(path.with_suffix(".kernels.json"), lambda f: f.write(kernel_data))
    return write_report(merged, path, kernels)
