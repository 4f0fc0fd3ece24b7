"""A conformance matrix of an engine family: methods x settings x shapes (``speceq audit``).

Every cell is one ``speceq run`` of one method (the candidate) against the family's plain
sampler (the baseline) on one case: a sampling setting (:data:`SETTINGS`) at one batch shape
(:data:`SHAPES`). The case id is ``<setting>-<shape>``, the same for every method, so:

- **the baseline is sampled once per cell column**: every cell's store (``cells/<method>/<case
  id>/chunks/``) has its ``baseline/`` folder linked to one shared folder (``baseline/chunks``),
  and a baseline chunk's identity (baseline engine, case, run seed, slice) does not involve the
  method; the first method's cell samples it, every later one reuses it (each cell records how
  many baseline chunks it sampled: ``baseline_chunks_sampled``);
- **the oracle scores each row once**: oracles are built once per distinct oracle
  (``describe()``), wrapped in :class:`~speceq.oracles.memo.RememberingOracle` and handed to
  every cell that scores with them, so a baseline row is scored once however many methods use it
  (methods whose oracle adds their own draft share it only with methods of the same draft);
- **a finished cell is never redone**: after its run, a cell writes ``cell.json`` (the cell and
  the identity of what it ran); a rerun with the same identity takes the cell from there (a
  killed audit loses no finished cell; an unfinished one resumes from its stored chunks);
- **one cell's fault stays in its cell**: an unknown method, a method the installed library
  lacks, or an engine error mid-run makes the cell ``not run`` with a one-line reason; a batch
  shape the engine declares it cannot run (``describe()["batch_size_limit"]``, with its
  ``limitation``, as transformers' assisted generation at batch size 1), or a request field it
  declares it cannot apply (:func:`~speceq.engines.base.check_sampling_support`, with its reason),
  makes it ``not supported`` with the engine's message; the other cells still run;
- **a method lossy by design is measured, not judged**: an engine whose ``describe()["lossless"]``
  is False gets ``lossy`` cells (:attr:`Verdict.LOSSY`) with the distance measured, never
  ``shifted``, and they do not enter the audit's verdict.

:func:`run_audit` returns an :class:`AuditResult` (JSON round-trippable), each cell with its
verdict (:class:`~speceq.verdicts.verdict.Verdict`), TV estimate and upper bound, acceptance
and the ``speceq run`` command that reproduces it alone (reusing its stored samples).
"""

from __future__ import annotations

import json
import re
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC
from pathlib import Path
from typing import Any

from speceq.core.params import SamplingParams
from speceq.engines.base import Engine, check_sampling_support
from speceq.errors import ConfigError
from speceq.inputs.cases import Case, cases_document
from speceq.oracles.protocol import Oracle
from speceq.pipeline.config import RESULT_FILE, RunConfig
from speceq.pipeline.sharing import OracleShelf, link_folder, rows_scored
from speceq.store.chunks import CHUNKS_DIR
from speceq.verdicts.result import RunResult
from speceq.verdicts.verdict import EXIT_USAGE, Verdict

#: A cell's status: it ran (and has a verdict), or why not.
RAN, NOT_RUN, NOT_SUPPORTED = "ran", "not run", "not supported"
STATUSES: tuple[str, ...] = (RAN, NOT_RUN, NOT_SUPPORTED)
#: File of one finished cell, in its folder next to its result.json.
CELL_FILE = "cell.json"
#: The audit's own files in its output folder.
AUDIT_JSON = "audit.json"
AUDIT_FORMAT = 1


@dataclass(frozen=True, slots=True)
class AuditSetting:
    """One column group of the matrix: sampling parameters every method is run with."""

    name: str
    params: SamplingParams
    label: str


@dataclass(frozen=True, slots=True)
class AuditShape:
    """How requests reach the engine: ``batch_size`` rows per batch, with ``companions`` (prompts
    of other lengths sharing the batch: ragged rows, left padding)."""

    name: str
    batch_size: int
    ragged: bool
    label: str


#: The settings of the matrix (issue 44): T = 1, T = 0.7 with top-p 0.9, top-k, greedy, a long one.
SETTINGS: tuple[AuditSetting, ...] = (
    AuditSetting("t1", SamplingParams(temperature=1.0, max_new_tokens=4), "T = 1.0, 4 tokens"),
    AuditSetting("t07-p09", SamplingParams(temperature=0.7, top_p=0.9, max_new_tokens=4),
                 "T = 0.7, top-p 0.9, 4 tokens"),
    AuditSetting("topk10", SamplingParams(temperature=1.0, top_k=10, max_new_tokens=4), "T = 1.0, top-k 10, 4 tokens"),
    AuditSetting("greedy", SamplingParams(temperature=0.0, max_new_tokens=4), "greedy, 4 tokens"),
    AuditSetting("long64", SamplingParams(temperature=1.0, max_new_tokens=64), "T = 1.0, 64 tokens"),
)
#: The regex of the ``regex`` setting: words of 1-4 lowercase letters separated by single spaces. Every world's
#: vocabulary spells it (bytes; BPE and SmolLM2 tokens of letters and a leading space), and its state matters at
#: every token (after 4 letters only a space or EOS, after a space only a letter), across draft blocks too.
AUDIT_REGEX = "[a-z]{1,4}( [a-z]{1,4})*"
#: Request-field settings (issue 45's fields), run when named in ``--settings``: min-p, a repetition
#: penalty over 8 tokens (its history matters), a logit bias (+3 on id 101, -100 on id 32: ids every
#: bundled world has), a grammar (:data:`AUDIT_REGEX` over 8 tokens, compiled against the world's tokenizer,
#: :meth:`AuditPlan.case`). They run in the plan's processing order (:attr:`AuditPlan.processing`).
FIELD_SETTINGS: tuple[AuditSetting, ...] = (
    AuditSetting("minp01", SamplingParams(temperature=1.0, min_p=0.1, max_new_tokens=4),
                 "T = 1.0, min-p 0.1, 4 tokens"),
    AuditSetting("rep13", SamplingParams(temperature=1.0, repetition_penalty=1.3, max_new_tokens=8),
                 "T = 1.0, repetition penalty 1.3, 8 tokens"),
    AuditSetting("bias", SamplingParams(temperature=1.0, logit_bias=((101, 3.0), (32, -100.0)), max_new_tokens=4),
                 "T = 1.0, logit bias +3 on id 101 and -100 on id 32, 4 tokens"),
    AuditSetting("regex", SamplingParams(temperature=1.0, max_new_tokens=8, tokenizer="bytes",
                                         structured_outputs={"regex": AUDIT_REGEX}),
                 f"T = 1.0, structured output regex {AUDIT_REGEX}, 8 tokens"),
)


def pick_settings(names: Sequence[str] | None) -> tuple[AuditSetting, ...]:
    """The settings named (of :data:`SETTINGS` and :data:`FIELD_SETTINGS`), in the order given; None:
    :data:`SETTINGS` (the request-field settings only when named)."""
    return SETTINGS if names is None else pick((*SETTINGS, *FIELD_SETTINGS), names, "setting")


#: The shapes: one request at a time; a ragged batch of 4 (the prompt with a longer companion).
SHAPES: tuple[AuditShape, ...] = (
    AuditShape("single", 1, False, "one request at a time"),
    AuditShape("ragged-b4", 4, True, "ragged batch of 4"),
)


def pick(items: Sequence[Any], names: Sequence[str] | None, what: str) -> tuple[Any, ...]:
    """The ``items`` (settings or shapes) named in ``names`` (None: all), in the order given;
    ConfigError naming an unknown one and the known names."""
    if names is None:
        return tuple(items)
    known = {i.name: i for i in items}
    unknown = [n for n in names if n not in known]
    if unknown or not names:
        raise ConfigError(f"unknown {what} {', '.join(map(repr, unknown)) or '(none given)'}; expected some of "
                          f"{', '.join(known)}", where=f"audit {what}s")
    return tuple(known[n] for n in names)


@dataclass(frozen=True, slots=True)
class AuditMethod:
    """One row of the matrix: the candidate engine ``spec`` with ``options``, shown as ``name``.

    problem: why the method cannot run in this audit, found while planning (e.g. it needs another
    model world); its cells are then ``not run`` with this reason, and the other rows still run.
    """

    name: str
    spec: str
    options: Mapping[str, Any] = field(default_factory=dict)
    problem: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class AuditPlan:
    """What an audit runs.

    family: the engine family's name (display). baseline / baseline_options: the plain sampler
    every method is compared with. methods: the rows. prompt_ids / companion_ids: the cases'
    prompt and, in a ragged shape, its companion (another length). settings / shapes: the
    columns. run: the settings every cell's run shares (samples, seed, oracle, alpha, ...;
    its engines, options and ``out_dir`` are the audit's). out_dir: the audit's folder.
    world: the ``--models`` world the commands name (None: no ``--models`` flag).
    """

    family: str
    baseline: str
    baseline_options: Mapping[str, Any] = field(default_factory=dict)
    methods: tuple[AuditMethod, ...]
    prompt_ids: tuple[int, ...]
    companion_ids: tuple[int, ...]
    settings: tuple[AuditSetting, ...] = SETTINGS
    shapes: tuple[AuditShape, ...] = SHAPES
    run: RunConfig
    out_dir: Path
    world: str | None = None
    processing: str = "vllm"

    def __post_init__(self) -> None:
        if not self.methods:
            raise ConfigError("no method to audit", where="audit methods")
        names = [m.name for m in self.methods]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ConfigError(f"method(s) {', '.join(twice)} given twice", where="audit methods")
        if len(self.companion_ids) == 0:
            raise ConfigError("the ragged shape needs a companion prompt", where="audit companion")
        object.__setattr__(self, "out_dir", Path(self.out_dir))

    def case(self, setting: AuditSetting, shape: AuditShape) -> Case:
        """The case of one column: ``<setting>-<shape>``, the same for every method; a setting with
        request fields runs in the plan's processing order (the others keep the default, so their
        stored cases are what they always were); a grammar is compiled against the plan's world's
        tokenizer (:func:`speceq.models.worlds.world_tokenizer`; the byte world's without a world)."""
        from speceq.models.worlds import DEFAULT_WORLD, world_tokenizer

        params = setting.params
        if params.extra_fields and self.processing != params.processing:
            params = replace(params, processing=self.processing)
        if params.structured_outputs is not None:
            params = replace(params, tokenizer=world_tokenizer(self.world or DEFAULT_WORLD))
        return Case(case_id=f"{setting.name}-{shape.name}", prompt_ids=tuple(self.prompt_ids), params=params,
                    batch_size=shape.batch_size, companions=(tuple(self.companion_ids),) if shape.ragged else ())

    def cell_dir(self, method: AuditMethod, case: Case) -> Path:
        return self.out_dir / "cells" / folder_name(method.name) / folder_name(case.case_id)


def folder_name(text: str) -> str:
    """A file-system-safe folder name for a method or case name (``mutant:x`` -> ``mutant_x``)."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("._") or "_"


@dataclass(frozen=True, slots=True, kw_only=True)
class AuditCell:
    """One cell: ``method`` on ``setting`` at ``shape``.

    status: :data:`RAN`, :data:`NOT_RUN` or :data:`NOT_SUPPORTED`; verdict: the case's verdict
    (None unless it ran); reason: the verdict's reason, or why the cell did not run (one line).
    tv_estimate / tv_upper_bound: the effect, total-variation distance estimate and its upper
    confidence bound (``tv_reference`` says against what). acceptance: drafts accepted over
    drafts proposed (None: the engine does not report it). n: samples per engine.
    command: the ``speceq run`` command that reproduces the cell alone (reusing its samples).
    result: the cell's result.json, relative to the audit folder. seconds: wall time of the
    cell in this audit (0 for a cell taken from a finished earlier run). chunks_sampled /
    baseline_chunks_sampled: chunks this cell sampled, and how many of them were the baseline's.
    oracle_rows_scored / oracle_rows_reused: rows the shared oracle scored for this cell, and rows
    it answered from an earlier cell's (or this cell's) scores (None: no oracle).
    resumed: taken from an earlier run's ``cell.json``.
    """

    method: str
    setting: str
    shape: str
    status: str
    verdict: Verdict | None = None
    reason: str = ""
    tv_estimate: float | None = None
    tv_upper_bound: float | None = None
    tv_reference: str = ""
    acceptance: float | None = None
    n: int | None = None
    command: str = ""
    result: str | None = None
    seconds: float = 0.0
    chunks_sampled: int | None = None
    baseline_chunks_sampled: int | None = None
    oracle_rows_scored: int | None = None
    oracle_rows_reused: int | None = None
    resumed: bool = False

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"cell status {self.status!r}; expected one of {STATUSES}")
        if (self.verdict is None) != (self.status != RAN):
            raise ValueError(f"cell {self.method} {self.setting} {self.shape}: a verdict exactly when it ran")
        if self.verdict is not None:
            object.__setattr__(self, "verdict", Verdict.parse(str(self.verdict)))

    @property
    def case_id(self) -> str:
        return f"{self.setting}-{self.shape}"

    def word(self) -> str:
        """The cell's verdict, or its status when it did not run."""
        return str(self.verdict) if self.verdict is not None else self.status

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["verdict"] = None if self.verdict is None else str(self.verdict)
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> AuditCell:
        return cls(**dict(d))


@dataclass(frozen=True, slots=True, kw_only=True)
class AuditResult:
    """The matrix: rows ``methods``, columns ``settings`` x ``shapes``, and every cell.

    settings / shapes: (name, label) pairs; baseline: the baseline spec; samples, seed, alpha,
    tolerance: the runs' shared settings; versions: installed package versions; created: UTC
    time the audit finished; wall_s: its wall time in this process.
    world: the model world every row ran in (None: rows of several worlds, or no ``--models``);
    method_worlds: the world each row's cells ran in, by method name (empty: no world named);
    :meth:`world_of` reads it.
    """

    family: str
    world: str | None
    baseline: str
    methods: tuple[str, ...]
    settings: tuple[tuple[str, str], ...]
    shapes: tuple[tuple[str, str], ...]
    cells: tuple[AuditCell, ...]
    samples: int
    seed: int
    alpha: float
    tolerance: float
    versions: dict[str, str | None] = field(default_factory=dict)
    created: str = ""
    wall_s: float = 0.0
    method_worlds: dict[str, str] = field(default_factory=dict)

    def world_of(self, method: str) -> str | None:
        """The model world ``method``'s cells ran in (None: none named)."""
        return self.method_worlds.get(method, self.world)

    @property
    def verdict(self) -> Verdict | None:
        """The worst verdict of the cells that ran and of those not run (counted ``inconclusive``:
        nothing was shown); ``not supported`` cells and the ``lossy`` cells of methods declared lossy
        (a measured distance, not a failure) do not count. None when no cell ran."""
        ran = [c for c in self.cells if c.status == RAN]
        if not ran:
            return None
        words = [c.word() for c in ran if c.verdict != Verdict.LOSSY]
        words += [str(Verdict.INCONCLUSIVE) for c in self.cells if c.status == NOT_RUN]
        return Verdict.worst(words)

    @property
    def exit_code(self) -> int:
        """The worst verdict's exit code (:attr:`Verdict.exit_code`); 2 when no cell ran."""
        v = self.verdict
        return EXIT_USAGE if v is None else v.exit_code

    def cell(self, method: str, setting: str, shape: str) -> AuditCell:
        for c in self.cells:
            if (c.method, c.setting, c.shape) == (method, setting, shape):
                return c
        raise KeyError((method, setting, shape))

    def summary(self) -> str:
        """One line: the audit's verdict and how many cells have each word."""
        words = [c.word() for c in self.cells]
        counts = ", ".join(f"{words.count(w)} {w}" for w in (*[str(v) for v in Verdict], NOT_RUN, NOT_SUPPORTED)
                           if words.count(w))
        head = "NO CELL RAN" if self.verdict is None else str(self.verdict).upper()
        return f"audit {self.family}: {head} ({len(self.cells)} cells: {counts})"

    def to_dict(self) -> dict[str, Any]:
        return {"format": AUDIT_FORMAT, "family": self.family, "world": self.world, "baseline": self.baseline,
                "methods": list(self.methods), "settings": [list(s) for s in self.settings],
                "shapes": [list(s) for s in self.shapes], "samples": self.samples, "seed": self.seed,
                "alpha": self.alpha, "tolerance": self.tolerance, "versions": dict(self.versions),
                "created": self.created, "wall_s": self.wall_s, "method_worlds": dict(self.method_worlds),
                "verdict": None if self.verdict is None else str(self.verdict),
                "cells": [c.to_dict() for c in self.cells]}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, allow_nan=False)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> AuditResult:
        if d.get("format") != AUDIT_FORMAT:
            raise ValueError(f"audit format {d.get('format')!r}; expected {AUDIT_FORMAT}")
        return cls(family=d["family"], world=d["world"], baseline=d["baseline"], methods=tuple(d["methods"]),
                   settings=tuple(tuple(s) for s in d["settings"]), shapes=tuple(tuple(s) for s in d["shapes"]),
                   cells=tuple(AuditCell.from_dict(c) for c in d["cells"]), samples=d["samples"], seed=d["seed"],
                   alpha=d["alpha"], tolerance=d["tolerance"], versions=dict(d.get("versions", {})),
                   created=d.get("created", ""), wall_s=d.get("wall_s", 0.0),
                   method_worlds=dict(d["method_worlds"]) if "method_worlds" in d  # older files: every row in world
                   else {m: d["world"] for m in d["methods"]} if d["world"] is not None else {})

    @classmethod
    def from_json(cls, text: str) -> AuditResult:
        return cls.from_dict(json.loads(text))


def package_versions() -> dict[str, str | None]:
    """Installed versions of speceq and the libraries engines run on (None: not installed)."""
    import importlib.metadata

    out: dict[str, str | None] = {}
    for name in ("speceq", "torch", "transformers", "vllm"):
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = None
    return out


def first_line(exc: BaseException) -> str:
    """``ExceptionType: first line of its message`` (one line for a matrix cell)."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}".rstrip(": ")


#: Progress sink: one line per event.
Log = Callable[[str], None]


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _count_chunks(folder: Path) -> int:
    return sum(1 for _ in folder.glob("*/slice-*.npz")) if folder.is_dir() else 0


class _Audit:
    """The state of one audit: shared baseline engine, oracles, progress."""

    def __init__(self, plan: AuditPlan, log: Log, command: Callable[[AuditMethod, Case, Path], str]) -> None:
        self.plan = plan
        self.log = log
        self.command = command
        self.baseline_engine: Engine | None = None
        self.shelf = OracleShelf()
        self.shared_baseline = plan.out_dir / "baseline" / CHUNKS_DIR / "baseline"
        self.versions = package_versions()
        self.total = len(plan.methods) * len(plan.settings) * len(plan.shapes)
        self.done = 0
        self.ran_seconds: list[float] = []  #: wall time of every cell this process did (s)

    # ----- one cell ----------------------------------------------------------------------
    def identity(self, method: AuditMethod, case: Case) -> dict[str, Any]:
        """Everything a finished cell's outcome depends on (a rerun reuses it only when all agree)."""
        from speceq.core.credentials import redact

        settings = self.plan.run.settings()
        for k in ("out_dir", "progress", "threads", "workers", "executor", "ray_address", "resume", "chunk_timeout"):
            settings.pop(k, None)
        settings.update(baseline=self.plan.baseline, baseline_options=dict(self.plan.baseline_options),
                        candidate=method.spec, candidate_options=dict(method.options))
        return redact({"format": AUDIT_FORMAT, "case": case.to_dict(), "run": settings, "versions": self.versions})

    def config(self, method: AuditMethod, case: Case) -> RunConfig:
        from dataclasses import replace

        return replace(self.plan.run, baseline=self.plan.baseline, baseline_options=dict(self.plan.baseline_options),
                       candidate=method.spec, candidate_options=dict(method.options),
                       out_dir=self.plan.cell_dir(method, case), resume=True)

    def link_baseline(self, cell_dir: Path) -> None:
        """Make the cell's ``chunks/baseline`` the audit's shared baseline folder (a relative link)."""
        link_folder(cell_dir / CHUNKS_DIR / "baseline", self.shared_baseline, where="audit store",
                    what="the audit's shared baseline")

    def finished(self, method: AuditMethod, case: Case) -> AuditCell | None:
        """The cell of an earlier run of the same identity, if its cell.json and result.json are there."""
        cell_dir = self.plan.cell_dir(method, case)
        try:
            doc = json.loads((cell_dir / CELL_FILE).read_text(encoding="utf-8"))
            if doc.get("identity") != json.loads(json.dumps(self.identity(method, case))):
                return None
            if not (cell_dir / RESULT_FILE).is_file():
                return None
            cell = AuditCell.from_dict(doc["cell"])
        except (OSError, ValueError, KeyError, TypeError):
            return None
        return AuditCell.from_dict({**cell.to_dict(), "seconds": 0.0, "resumed": True,
                                    "command": self.command(method, case, cell_dir)})

    def oracle_for(self, config: RunConfig, engines: Mapping[str, Engine]) -> Oracle | None:
        """The shared (remembering) oracle of ``config``, built once per distinct oracle; None when off."""
        return self.shelf.oracle_for(config, engines)

    def run_cell(self, method: AuditMethod, engine: Engine, case: Case) -> AuditCell:
        from speceq.pipeline.runner import run

        plan = self.plan
        cell_dir = plan.cell_dir(method, case)
        setting, shape = self.names(case)
        base = {"method": method.name, "setting": setting, "shape": shape,
                "command": self.command(method, case, cell_dir)}
        limit = engine.describe().get("batch_size_limit")
        if isinstance(limit, int) and case.batch_size > limit:
            why = engine.describe().get("limitation") or f"the engine runs at most {limit} rows per batch"
            return AuditCell(**base, status=NOT_SUPPORTED, reason=str(why))
        try:  # a request field the method declares it cannot apply (its sampling_fields / refused_fields)
            check_sampling_support(engine, case.params, case.case_id, role="candidate")
        except ConfigError as exc:
            return AuditCell(**base, status=NOT_SUPPORTED, reason=str(exc))
        config = self.config(method, case)
        before = _count_chunks(self.shared_baseline)
        t0 = time.perf_counter()
        assert self.baseline_engine is not None
        engines = {"baseline": self.baseline_engine, "candidate": engine}
        oracle: Any = None
        try:
            self.link_baseline(cell_dir)
            oracle = self.oracle_for(config, engines)
            rows_before = rows_scored(oracle) if oracle is not None else (0, 0)
            result = run(config, [case], engines=engines, oracle=oracle)
        except KeyboardInterrupt:
            raise
        except Exception as exc:  # an engine's or a library's fault: this cell only, never the audit
            return AuditCell(**base, status=NOT_RUN, reason=first_line(exc), seconds=time.perf_counter() - t0)
        seconds = time.perf_counter() - t0
        cell = cell_from_result(result, base, cell_dir.relative_to(plan.out_dir) / RESULT_FILE, seconds=seconds,
                                baseline_sampled=_count_chunks(self.shared_baseline) - before,
                                declared_lossy=engine.describe().get("lossless") is False)
        if oracle is not None:
            scored, reused = (after - before for after, before in zip(rows_scored(oracle), rows_before))
            cell = AuditCell.from_dict({**cell.to_dict(), "oracle_rows_scored": scored, "oracle_rows_reused": reused})
        from speceq.store import write_json_atomic

        write_json_atomic(cell_dir / CELL_FILE, {"identity": self.identity(method, case), "cell": cell.to_dict()})
        return cell

    def names(self, case: Case) -> tuple[str, str]:
        for s in self.plan.settings:
            for h in self.plan.shapes:
                if f"{s.name}-{h.name}" == case.case_id:
                    return s.name, h.name
        raise KeyError(case.case_id)

    # ----- progress ----------------------------------------------------------------------
    def report(self, cell: AuditCell) -> None:
        self.done += 1
        if not cell.resumed:  # cells done in this process, quick ones (not supported, not run) included
            self.ran_seconds.append(cell.seconds)
        left = eta_seconds(self.ran_seconds, self.total - self.done)
        eta = "" if left is None else f"  ETA {_duration(left)}"
        effect = "" if cell.tv_upper_bound is None else f" TV bound {cell.tv_upper_bound:.3f}"
        took = " (from an earlier run)" if cell.resumed else f" [{cell.seconds:.1f} s]"
        why = f": {cell.reason}" if cell.status != RAN else ""
        self.log(f"[{self.done}/{self.total}] {cell.method} · {cell.setting} · {cell.shape}: {cell.word()}"
                 f"{effect}{why}{took}{eta}")


def eta_seconds(durations: Sequence[float], remaining: int) -> float | None:
    """Seconds the ``remaining`` cells should take at the mean wall time of the cells done so far
    (``durations``, quick not-supported or failed ones included, as they recur); None when nothing
    is left or nothing took time yet."""
    if remaining <= 0 or not any(durations):
        return None
    return sum(durations) / len(durations) * remaining


def _duration(seconds: float) -> str:
    seconds = int(round(seconds))
    return f"{seconds // 60} min {seconds % 60:02d} s" if seconds >= 60 else f"{seconds} s"  # noqa: PLR2004


def cell_from_result(result: RunResult, base: Mapping[str, Any], result_path: Path, *, seconds: float,
                     baseline_sampled: int, declared_lossy: bool = False) -> AuditCell:
    """The cell of a one-case run's result.

    ``declared_lossy``: the method is lossy by design (its engine's ``describe()["lossless"]`` is
    False): the cell is :attr:`Verdict.LOSSY` with its distance measured, never ``shifted``.
    """
    c = result.cases[0]
    chunks = result.provenance.get("chunks", {}) if isinstance(result.provenance, Mapping) else {}
    verdict, reason = c.verdict, c.reason
    if declared_lossy and c.verdict != Verdict.LOSSY:  # the run itself makes a declared-lossy candidate lossy
        verdict, reason = Verdict.LOSSY, f"declared lossy by the engine; the run said {c.verdict}: {c.reason}"
    return AuditCell(**{**base, "n": c.n_candidate}, status=RAN, verdict=verdict, reason=reason,
                     tv_estimate=c.tv_estimate, tv_upper_bound=c.tv_upper_bound, tv_reference=c.tv_reference,
                     acceptance=c.acceptance_rate, result=str(result_path), seconds=seconds,
                     chunks_sampled=chunks.get("sampled"), baseline_chunks_sampled=baseline_sampled)


def run_audit(plan: AuditPlan, *, command: Callable[[AuditMethod, Case, Path], str] | None = None,
              log: Log | None = None, build: Callable[[str, Mapping[str, Any]], Engine] | None = None) -> AuditResult:
    """Run every cell of ``plan`` (method by method), write ``audit.json``, return the matrix.

    command(method, case, cell folder): the reproducing command of a cell (the face knows its
    flags; default: a ``speceq run`` line from the plan). log: progress lines (default stderr).
    build(spec, options): builds an engine (default the registry's ``resolve_engine``).
    The baseline engine failing to build is no cell's fault: its error propagates.
    """
    from datetime import datetime

    from speceq.engines.registry import check_engine_spec, resolve_engine

    build = build or (lambda spec, options: resolve_engine(spec, options=options))
    audit = _Audit(plan, log or _stderr, command or default_command(plan))
    started = time.perf_counter()
    plan.out_dir.mkdir(parents=True, exist_ok=True)
    cases = [plan.case(s, h) for s in plan.settings for h in plan.shapes]
    cases_dir = plan.out_dir / "cases"
    cases_dir.mkdir(exist_ok=True)
    for case in cases:  # each column's case as a cases file, for the reproducing commands
        (cases_dir / f"{folder_name(case.case_id)}.json").write_text(
            json.dumps(cases_document([case]), indent=2) + "\n", encoding="utf-8")
    cells: list[AuditCell] = []
    for method in plan.methods:
        todo = []
        for case in cases:
            done = audit.finished(method, case)
            if done is not None:
                cells.append(done)
                audit.report(done)
            else:
                todo.append(case)
        if not todo:
            continue
        try:
            if method.problem is not None:
                raise ConfigError(method.problem, where=f"method {method.name!r}")
            check_engine_spec(method.spec)
            engine = build(method.spec, dict(method.options))
        except KeyboardInterrupt:
            raise
        except Exception as exc:  # unknown method, a path the installed library lacks, a failing constructor
            reason = first_line(exc)
            for case in todo:
                setting, shape = audit.names(case)
                cell = AuditCell(method=method.name, setting=setting, shape=shape, status=NOT_RUN, reason=reason,
                                 command=audit.command(method, case, plan.cell_dir(method, case)))
                cells.append(cell)
                audit.report(cell)
            continue
        if audit.baseline_engine is None:
            audit.baseline_engine = build(plan.baseline, dict(plan.baseline_options))
        for case in todo:
            cell = audit.run_cell(method, engine, case)
            cells.append(cell)
            audit.report(cell)
        del engine
    order = {(m.name, s.name, h.name): i for i, (m, s, h) in
             enumerate((m, s, h) for m in plan.methods for s in plan.settings for h in plan.shapes)}
    cells.sort(key=lambda c: order[(c.method, c.setting, c.shape)])
    result = AuditResult(
        family=plan.family, world=plan.world, baseline=plan.baseline, methods=tuple(m.name for m in plan.methods),
        settings=tuple((s.name, s.label) for s in plan.settings), shapes=tuple((h.name, h.label) for h in plan.shapes),
        cells=tuple(cells), samples=plan.run.samples, seed=plan.run.seed, alpha=plan.run.alpha,
        tolerance=plan.run.tolerance, versions=audit.versions,
        created=datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"), wall_s=time.perf_counter() - started,
        method_worlds={} if plan.world is None else {m.name: plan.world for m in plan.methods})
    from speceq.store import write_json_atomic

    write_json_atomic(plan.out_dir / AUDIT_JSON, result.to_dict())
    return result


def join_audits(parts: Sequence[tuple[AuditResult, Path]], out_dir: Path,
                order: Sequence[str] | None = None) -> AuditResult:
    """One matrix from the audits of one family run in several model worlds (``parts``: each audit and
    the folder it ran in, inside ``out_dir``), a row per method in ``order`` (default: as the parts
    give them). Each row keeps the world its cells ran in (:attr:`AuditResult.method_worlds`) and
    each cell's ``result`` becomes relative to ``out_dir``. ConfigError when the parts are not one
    audit's (another family, baseline, columns or budget) or share a method.
    """
    from dataclasses import replace

    if not parts:
        raise ConfigError("no audit to join", where="audit worlds")
    first = parts[0][0]
    shared = ("family", "baseline", "settings", "shapes", "samples", "seed", "alpha", "tolerance")
    methods: list[str] = []
    cells: list[AuditCell] = []
    worlds: dict[str, str] = {}
    for result, folder in parts:
        differ = [k for k in shared if getattr(result, k) != getattr(first, k)]
        if differ:
            raise ConfigError(f"the audit in {folder} differs from the first in {', '.join(differ)}",
                              where="audit worlds")
        twice = sorted(set(result.methods) & set(methods))
        if twice:
            raise ConfigError(f"method(s) {', '.join(twice)} audited in two worlds", where="audit worlds")
        prefix = Path(folder).resolve().relative_to(Path(out_dir).resolve())
        methods += result.methods
        worlds.update({m: w for m in result.methods if (w := result.world_of(m)) is not None})
        cells += [c if c.result is None else replace(c, result=str(prefix / c.result)) for c in result.cells]
    if order is not None:
        if sorted(order) != sorted(methods):
            raise ConfigError(f"the order {list(order)} does not list the audited methods {methods}",
                              where="audit worlds")
        methods = list(order)
    rank = {m: i for i, m in enumerate(methods)}
    cells.sort(key=lambda c: rank[c.method])  # stable: each row keeps its columns' order
    named = set(worlds.values())
    return replace(first, world=named.pop() if len(named) == 1 and len(worlds) == len(methods) else None,
                   methods=tuple(methods), cells=tuple(cells), method_worlds=worlds,
                   wall_s=sum(r.wall_s for r, _ in parts), created=max(r.created for r, _ in parts))


def default_command(plan: AuditPlan) -> Callable[[AuditMethod, Case, Path], str]:
    """``speceq run`` of one cell: its baseline and method, its column's cases file, its folder."""
    import shlex

    def command(method: AuditMethod, case: Case, cell_dir: Path) -> str:
        words = ["speceq", "run"]
        if plan.world is not None:
            words += ["--models", plan.world]
        words += ["--baseline", plan.baseline, "--candidate", method.spec]
        words += [w for k, v in method.options.items() for w in ("--candidate-option", f"{k}={_option(v)}")]
        words += ["--cases", str(plan.out_dir / "cases" / f"{folder_name(case.case_id)}.json"),
                  "--samples", str(plan.run.samples), "--seed", str(plan.run.seed), "--out", str(cell_dir)]
        if not plan.run.oracle:
            words.append("--no-oracle")
        return shlex.join(words)

    return command


def _option(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def load_audit(path: str | Path) -> AuditResult:
    """An AuditResult from an ``audit.json``; ConfigError naming the file when it is not one."""
    from speceq.store.atomic import load_saved

    return load_saved(path, AuditResult.from_json, "audit.json")


__all__ = [
    "AUDIT_JSON", "AUDIT_REGEX", "CELL_FILE", "FIELD_SETTINGS", "NOT_RUN", "NOT_SUPPORTED", "RAN", "SETTINGS", "SHAPES",
    "STATUSES",
    "AuditCell", "AuditMethod", "AuditPlan", "AuditResult", "AuditSetting", "AuditShape", "cell_from_result",
    "default_command", "eta_seconds", "first_line", "folder_name", "join_audits", "load_audit", "package_versions",
    "pick", "pick_settings", "run_audit",
]
