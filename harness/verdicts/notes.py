"""Notes as data: what a case's (or a run's) evidence adds besides its tests, each a record of its numbers.

The analysis and the decision layer make :class:`Note` records; :func:`speceq.verdicts.reasons.note_line` words
them for every face (the report, the pytest section), so a note's numbers are read from its fields, never from
its words. A note of kind ``text`` holds words as given: a note of a result written before notes were records,
or one a face writes in its own words (the pytest session's merged result).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from speceq.verdicts.failures import HardFailure

#: A note's values: numbers, the odd short identifier (a dtype, a verdict word, a test's kind), None (not known).
NoteValue = float | int | str | None


class NoteKind(enum.StrEnum):
    """What a note says; its ``values`` keys are listed with each kind (the value is stored in ``result.json``)."""

    TEXT = "text"  # ``text``: words as given (an older result's note, or a face's own)
    TOP_K_ORACLE = "top-k oracle"  # no values: the oracle knows only the top-K of each law
    UNBOUNDED_SUPPORT = "unbounded support"  # no values: the oracle cannot bound the support near its own law
    # ``count`` tokens of the baseline outside the support beyond the margin; ``example``: the first of them
    BASELINE_OUTSIDE_MARGIN = "baseline outside margin"
    # ``count`` tokens of oracle probability 0 emitted by the baseline; ``example``: the first of them
    BASELINE_ZERO_PROBABILITY = "baseline zero probability"
    # boundary tokens read as numerics: candidate_rows of candidate_total, baseline_rows of baseline_total rows,
    # margin_nats (inf: any finite logit error), baseline_dtype / baseline_device / candidate_dtype /
    # candidate_device (None: undeclared; device '' when not declared)
    NUMERICS_BOUNDARY = "numerics boundary"
    # a one-sample z diagnostic worth reading: test (the candidate's test name), baseline_z, candidate_z,
    # comparison_pvalue (None: the comparison was not run), reading (one of OffsetReading)
    OFFSET_READING = "offset reading"
    # the PIT-law bound of the case prompt: bound, position (the worst), n (its rows reaching it), rows,
    # statistic (its Kolmogorov statistic), positions, alpha
    PIT_LAW_BOUND = "PIT-law bound"
    # how long the samples that would decide take at the run's speed: required_n, seconds,
    # baseline_tokens_per_s, candidate_tokens_per_s
    SAMPLING_TIME = "sampling time"
    # a sequential case: what the fixed-size analysis of the same rows would say: verdict, tv_upper_bound (None)
    FIXED_SIZE_VERDICT = "fixed-size verdict"
    # a sequential run (run note): tests, the e-processes of the run
    SEQUENTIAL_MODE = "sequential mode"
    # an engine's row-independence test could not run: role ("candidate" / "baseline", or BOTH_ROLES when both
    # engines' tests could not run for the same numbers), rows (per engine), calls (the
    # groups its rows came in: no pair of rows of one call to set against a pair of rows of two calls),
    # sample_calls (the engine's sample() calls the rows came from) and batch_size (the case's rows per forward
    # batch; both None in results written before they were recorded): one call of one forward batch is the
    # limit of the test, rows with nothing independent to compare them with, which a detected difference's
    # reason names too (speceq.verdicts.decide)
    INDEPENDENCE_UNTESTED = "independence untested"
    # the engines declare different numerics and the run has no control: baseline, candidate (their numerics in words),
    # sequential (1 in a sequential run, which cannot have the control; absent in older results and fixed-size runs)
    NUMERICS_DIFFER = "numerics differ"
    # a case of a run with a numerics control: its tests compare the candidate with the control (no values)
    AGAINST_CONTROL = "against control"
    # the run's numerics control finding: drift_found (1/0), cases (comma-separated case ids with drift, '' when
    # pooled or none), baseline, candidate (the numerics in words)
    NUMERICS_DRIFT = "numerics drift"


#: ``role`` of an ``independence untested`` note that stands for both engines (the same rows, calls and batch size).
BOTH_ROLES = "both"


class OffsetReading(enum.StrEnum):
    """How a one-sample z diagnostic reads next to its comparison (``reading`` of an ``offset reading`` note)."""

    SPECULATION = "speculation"  # the candidate departs more than the baseline, and the comparison rejects
    SHARED = "shared"  # both engines depart alike: the oracle or the numerics
    ONE_ENGINE = "one engine"  # one engine departs, the comparison does not reject


@dataclass(frozen=True, slots=True, kw_only=True)
class Note:
    """One note: its kind, its values (keys by kind: :class:`NoteKind`), an example hard-failure record with token
    ids where the note names one, and words (``text`` kind only)."""

    kind: NoteKind
    values: Mapping[str, NoteValue] = field(default_factory=dict)
    example: HardFailure | None = None
    text: str = ""

    @classmethod
    def words(cls, text: str) -> Note:
        """A note of given words (kind ``text``)."""
        return cls(kind=NoteKind.TEXT, text=str(text))

    @classmethod
    def from_saved(cls, saved: str | Mapping[str, Any]) -> Note:
        """The note of ``to_dict`` / ``result.json``; a plain string (a result written before notes were records)
        reads as a ``text`` note. Raises ValueError naming the kind when it is not one speceq knows."""
        if isinstance(saved, str):
            return cls.words(saved)
        try:
            kind = NoteKind(saved["kind"])
        except (KeyError, ValueError) as e:
            raise ValueError(f"note {dict(saved)!r}: `kind` must be one of {[k.value for k in NoteKind]}") from e
        example = saved.get("example")
        return cls(kind=kind, values=dict(saved.get("values") or {}), text=str(saved.get("text") or ""),
                   example=None if example is None else HardFailure.from_dict(example))


def notes_from_saved(saved: Any) -> tuple[Note, ...]:
    """The notes of a saved result (a list of records or, in older results, of strings)."""
    return tuple(n if isinstance(n, Note) else Note.from_saved(n) for n in saved or ())


class _Tested(Protocol):
    """What :func:`offset_notes` reads of a test outcome (:class:`speceq.verdicts.result.TestOutcome`, which
    stores notes and so is not imported here)."""

    name: str
    statistic: float
    pvalue: float


def offset_notes(pairs: Sequence[tuple[_Tested, _Tested, _Tested | None]], alpha: float) -> list[Note]:
    """One ``offset reading`` note per one-sample z diagnostic worth reading: (baseline's test, candidate's test,
    their comparison).

    Made when either engine departs from the oracle at ``alpha``: a departure both share is the
    oracle's or the numerics', not the speculation's; only the comparison can say the latter.
    """
    out = []
    for baseline, candidate, comparison in pairs:
        if min(baseline.pvalue, candidate.pvalue) > alpha:
            continue
        if comparison is not None and comparison.pvalue <= alpha:
            reading = OffsetReading.SPECULATION
        elif baseline.pvalue <= alpha and candidate.pvalue <= alpha and baseline.statistic * candidate.statistic > 0:
            reading = OffsetReading.SHARED
        else:
            reading = OffsetReading.ONE_ENGINE
        out.append(Note(kind=NoteKind.OFFSET_READING, values={
            "test": candidate.name, "baseline_z": float(baseline.statistic), "candidate_z": float(candidate.statistic),
            "comparison_pvalue": None if comparison is None else float(comparison.pvalue), "reading": reading.value}))
    return out


def sampling_time_note(required_n: int, n_now: int, *, prompts: int, candidate_tokens: int,
                       baseline_tokens_per_s: float | None, candidate_tokens_per_s: float | None) -> Note | None:
    """How long drawing ``required_n`` samples per engine would take at a run's measured sampling speed
    (tokens/s of both engines; the oracle's scoring not included), as a ``sampling time`` note; None when the
    speeds are unknown or ``n_now`` samples suffice already.

    n_now: samples per engine so far; prompts: prompts of the case's batch (rows = samples x prompts);
    candidate_tokens: tokens the candidate generated so far (the tokens per row it measures).
    """
    if required_n <= n_now or n_now <= 0 or not baseline_tokens_per_s or not candidate_tokens_per_s:
        return None
    rows_now = n_now * prompts
    tokens_per_row = candidate_tokens / rows_now
    extra_rows = (required_n - n_now) * prompts
    seconds = extra_rows * tokens_per_row * (1.0 / baseline_tokens_per_s + 1.0 / candidate_tokens_per_s)
    return Note(kind=NoteKind.SAMPLING_TIME, values={
        "required_n": int(required_n), "seconds": float(seconds), "baseline_tokens_per_s": float(baseline_tokens_per_s),
        "candidate_tokens_per_s": float(candidate_tokens_per_s)})
