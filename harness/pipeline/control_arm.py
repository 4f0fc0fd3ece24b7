"""The numerics control arm: a third engine that tells numerics drift apart from a speculation shift.

A candidate in bf16 against a float32 baseline differs for two reasons at once: the numerics
(another dtype or device moves every logit a little, and a top-p or top-k cut with it) and,
perhaps, the speculation. One comparison cannot tell them apart. With ``numerics_control``
(``--numerics-control``) the run samples a third engine, the *control*: the baseline engine at
the candidate's declared numerics (``"auto"``: the baseline's spec and options with the
candidate's ``dtype`` and ``device``; a URL: the baseline server at a second plain endpoint,
e.g. one serving the candidate's dtype without speculation). Its chunks are stored beside the
others (role ``control``, its own seed stream), so the run resumes like any other. Then

- **candidate against control** decides the verdict: same numerics, so a difference is the
  speculation's (its own Holm family at alpha, every test of a plain run). The control is plain
  sampling, cheaper than a speculative candidate, so it draws ``control_ratio`` times the
  candidate's samples (``--control-ratio``, default 2); the row-score comparisons then put each
  candidate row against its share of the control's rows (:mod:`speceq.stats.blocked`, exact), and the
  chi-square and support tests take unequal groups as they are;
- **control against baseline** is the numerics drift, a finding with its size
  (:class:`speceq.verdicts.numerics_drift.NumericsControl`), never the verdict.

Without a control, a run whose engines declare different numerics says so before sampling
(:func:`numerics_warning`) and names the difference and the flag in the reason of every
``shifted`` (:func:`name_numerics`), in a sequential run too, where the words say that the control needs a fixed-size
run. The control itself runs in fixed-size runs only (the config refuses a sequential one).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from speceq.engines.base import Engine, SampleBatch
from speceq.errors import ConfigError
from speceq.inputs.cases import Case
from speceq.oracles.protocol import Oracle
from speceq.pipeline.analysis import analyse_run, declared_numerics, score_requests
from speceq.pipeline.checks import check_case_vocabularies, check_engines_comparable, check_sampling_fields
from speceq.pipeline.collect.oracle_tasks import request_fingerprint
from speceq.pipeline.collect.session import ScoreRequest
from speceq.pipeline.config import CONTROL_AUTO, NUMERICS_OPTIONS, RunConfig
from speceq.stats.scores import TokenScores
from speceq.store import CONTROL_ROLE
from speceq.verdicts.notes import Note, NoteKind
from speceq.verdicts.numerics_drift import (
    CONTROL_FLAG,
    FIXED_SIZE_CONTROL,
    CaseDrift,
    NumericsControl,
    against_control,
    numerics_differ_hint,
    numerics_words,
    pooled_against_control,
)
from speceq.verdicts.result import RunResult
from speceq.verdicts.verdict import Verdict


#: The note every case of a controlled run carries: whose rows its tests call "baseline".
def check_control(config: RunConfig, engines: Mapping[str, Engine], cases: Sequence[Case]) -> None:
    """Before any sample: the control is there exactly when asked for, comparable with the candidate, and (``"auto"``)
    declares the candidate's numerics. ConfigError naming what to set otherwise."""
    if config.numerics_control is None:
        if CONTROL_ROLE in engines:
            raise ConfigError("a 'control' engine was given to a run without numerics_control", where="engines.control")
        return
    if CONTROL_ROLE not in engines:
        raise ConfigError("numerics_control is set but the engines given have no 'control' entry",
                          where="engines.control")
    control, candidate = engines[CONTROL_ROLE], engines["candidate"]
    pair = {"baseline": control, "candidate": candidate}
    try:
        check_engines_comparable(pair)
        check_case_vocabularies(cases, pair)
        check_sampling_fields(cases, pair)
    except ConfigError as e:
        raise ConfigError(f"the numerics control (the baseline engine at the candidate's numerics; 'baseline' below): "
                          f"{e}", where="run.numerics_control") from None
    if config.numerics_control != CONTROL_AUTO:
        return  # a server declares no numerics: the user named the endpoint that has the candidate's
    own, theirs = declared_numerics(control.describe()), declared_numerics(candidate.describe())
    if theirs is None and config.control_options:
        return  # the candidate declares nothing; the user set the control's numerics
    if theirs is None:
        raise ConfigError(
            f"the candidate {candidate.name!r} declares no numerics (no dtype in its describe()), so the control cannot "
            f"copy them: set the control's options (--control-option dtype=..., device=...), or name a second plain "
            f"server endpoint ({CONTROL_FLAG} URL)", where="run.numerics_control")
    if own != theirs:
        raise ConfigError(
            f"the control (baseline engine {config.baseline!r} with the candidate's "
            f"{'/'.join(NUMERICS_OPTIONS)} options) declares {numerics_words(own)} but the candidate declares "
            f"{numerics_words(theirs)}: set the control's options (--control-option dtype=..., device=...)",
            where="run.numerics_control")


def declared_pair(engines: Mapping[str, Any]) -> tuple[tuple[str, str] | None, tuple[str, str] | None]:
    """(baseline, candidate) numerics as their ``describe()`` configs declare them (None: undeclared)."""
    b, c = (declared_numerics(engines.get(r) or {}) for r in ("baseline", "candidate"))
    return b, c


def numerics_warning(config: RunConfig, described: Mapping[str, Mapping[str, Any]]) -> str | None:
    """The pre-sampling note of a run whose engines declare different numerics and that has no control (None: none)."""
    if config.numerics_control is not None:
        return None
    b, c = declared_pair({r: (described.get(r) or {}).get("config") or {} for r in ("baseline", "candidate")})
    if b is None or c is None or b == c:
        return None
    where = f"{FIXED_SIZE_CONTROL}: " if config.sequential else ""
    return (f"the engines declare different numerics (baseline {numerics_words(b)}, candidate {numerics_words(c)}): "
            f"a difference found may be numerics drift, not speculation; {where}{CONTROL_FLAG} adds the baseline "
            "engine at the candidate's numerics and separates the two")


def name_numerics(result: RunResult, *, sequential: bool = False) -> RunResult:
    """``result`` with every ``shifted`` reason naming the engines' numerics difference and the flag, when they
    declare different numerics and the run has no control (else unchanged); in a ``sequential`` run the words say
    that the control needs a fixed-size run."""
    if result.numerics_control is not None:
        return result
    b, c = declared_pair(result.engines)
    if b is None or c is None or b == c:
        return result
    hint = numerics_differ_hint(numerics_words(b), numerics_words(c), sequential=sequential)

    def named(reason: str) -> str:  # idempotent: a sequential run names the reasons it decided after the analysis did
        return reason if not reason or hint in reason else f"{reason} [{hint}]"

    cases = tuple(dataclasses.replace(x, reason=named(x.reason)) if x.verdict == Verdict.SHIFTED else x
                  for x in result.cases)
    note = Note(kind=NoteKind.NUMERICS_DIFFER, values={"baseline": numerics_words(b), "candidate": numerics_words(c),
                                                       **({"sequential": 1} if sequential else {})})
    notes = result.notes if note in result.notes else (*result.notes, note)
    return dataclasses.replace(result, cases=cases, pooled_reason=named(result.pooled_reason), notes=notes)


class ScoreOnce:
    """An oracle that scores each distinct request (prompts, rows, parameters) once: the control's rows enter both
    comparisons and are scored once. Every other member passes through to ``oracle``."""

    def __init__(self, oracle: Oracle) -> None:
        self.inner = oracle
        self.vocab_size = oracle.vocab_size
        self.eos_token_id = oracle.eos_token_id
        self._scores: dict[str, TokenScores] = {}

    @property
    def has_draft(self) -> bool:
        return self.inner.has_draft

    def knows_full_law(self, params: Any) -> bool:
        return self.inner.knows_full_law(params)

    def next_token_probs(self, prefixes: Sequence[Sequence[int]], params: Any) -> np.ndarray:
        return self.inner.next_token_probs(prefixes, params)

    def raw_top2_margin(self, prefixes: Sequence[Sequence[int]]) -> np.ndarray:
        return self.inner.raw_top2_margin(prefixes)

    def describe(self) -> dict[str, Any]:
        return self.inner.describe()

    def score(self, prompts: Sequence[Sequence[int]], batch: SampleBatch, params: Any) -> TokenScores:
        key = request_fingerprint(prompts, batch, params)
        if key not in self._scores:
            self._scores[key] = self.inner.score(prompts, batch, params)
        return self._scores[key]


def control_score_requests(cases: Sequence[Case], rows: Mapping[str, Mapping[str, SampleBatch]]) -> list[ScoreRequest]:
    """The score requests of both comparisons, in the order :func:`analyse_with_control` asks, each batch once."""
    both = (score_requests(cases, rows[CONTROL_ROLE], rows["candidate"])
            + score_requests(cases, rows["baseline"], rows[CONTROL_ROLE]))
    seen: set[int] = set()
    out = []
    for request in both:
        if id(request[2]) not in seen:
            seen.add(id(request[2]))
            out.append(request)
    return out


def analyse_with_control(config: RunConfig, cases: Sequence[Case], rows: Mapping[str, Mapping[str, SampleBatch]],
                         described: Mapping[str, Mapping[str, Any]], oracle: Oracle | None,
                         provenance: Mapping[str, Any]) -> RunResult:
    """The verdict from candidate against control, and the numerics drift from control against baseline.

    rows: role -> case id -> every row of that engine (baseline, candidate, control). described:
    role -> the engine identity of :func:`speceq.pipeline.plan.engine_identities`. Each comparison is
    a whole analysis (:func:`speceq.pipeline.analysis.analyse_run`) with the run's settings and its own
    Holm family at alpha; the oracle scores the control's rows once for both.
    """
    scorer = None if oracle is None else ScoreOnce(oracle)
    config_of = {r: dict(described[r]["config"]) for r in described}
    common: dict[str, Any] = dict(
        oracle=scorer, alpha=config.alpha, tolerance=config.tolerance, seed=config.seed, provenance=provenance,
        progress=config.progress, near_tie_nats=config.near_tie_nats, certificate=config.certificate,
        support_margin_nats=config.support_margin_nats, numerics_tolerance=config.numerics_tolerance)
    shift = analyse_run(cases, rows[CONTROL_ROLE], rows["candidate"],
                        engines={"baseline": config_of[CONTROL_ROLE], "candidate": config_of["candidate"]}, **common)
    drift = analyse_run(cases, rows["baseline"], rows[CONTROL_ROLE],
                        engines={"baseline": config_of["baseline"], "candidate": config_of[CONTROL_ROLE]}, **common)
    b, c = declared_pair(config_of)
    control_words = numerics_words(c) if config.numerics_control == CONTROL_AUTO else \
        f"the endpoint {described[CONTROL_ROLE]['options'].get('base_url')}"
    found = NumericsControl(
        baseline=numerics_words(b), candidate=numerics_words(c),
        control={k: described[CONTROL_ROLE][k] for k in ("spec", "options", "config")},
        drift=tuple(CaseDrift(case_id=x.case_id, verdict=x.verdict, reason=x.reason, tv_estimate=x.tv_estimate,
                              tv_upper_bound=x.tv_upper_bound, n_baseline=x.n_baseline, n_control=x.n_candidate)
                    for x in drift.cases),
        pooled_reason=drift.pooled_reason, control_ratio=float(config.control_ratio))
    cases_out = tuple(dataclasses.replace(
        x, reason=against_control(x.reason, control_words) if x.verdict == Verdict.SHIFTED else x.reason,
        notes=(Note(kind=NoteKind.AGAINST_CONTROL), *x.notes)) for x in shift.cases)
    return dataclasses.replace(
        shift, cases=cases_out, engines={**shift.engines, "baseline": config_of["baseline"],
                                         CONTROL_ROLE: config_of[CONTROL_ROLE]},
        pooled_reason=pooled_against_control(shift.pooled_reason, control_words) if shift.pooled_reason else "",
        numerics_control=found, notes=(*shift.notes, Note(kind=NoteKind.NUMERICS_DRIFT, values={
            "drift_found": int(found.drift_found), "cases": ",".join(found.drift_cases),
            "baseline": found.baseline, "candidate": found.candidate})))


__all__ = ["ScoreOnce", "analyse_with_control", "check_control", "control_score_requests",
           "declared_pair", "name_numerics", "numerics_warning"]
