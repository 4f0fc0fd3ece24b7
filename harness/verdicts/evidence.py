"""The typed hand-off from the analysis to the decision layer (pure data, no I/O).

:class:`CaseEvidence` is everything :func:`speceq.verdicts.decide.decide_run` needs to
decide one case: raw test outcomes, the TV estimate and bound, the effective bin count for
sample sizes, hard failures, the greedy comparison (temperature 0 cases) and whether the
oracle was trusted. The verdict of every case, greedy ones included, is decided there and
only there.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from speceq.stats.tv_interval import TVInterval
from speceq.verdicts.failures import HardFailure
from speceq.verdicts.kinds import TestKind
from speceq.verdicts.notes import Note
from speceq.verdicts.result import TestOutcome

#: What an ``equivalent`` sampling verdict certifies, said in every such verdict's reason.
CERTIFIES = (
    "certifies the per-position marginal TV of the case's prompt, between the baseline's and the candidate's "
    "laws of the token (or END) at each generated position; companion prompts and dependence beyond the "
    "joint test of the first 2 tokens are tested, not certified"
)
#: What an ``equivalent`` greedy verdict certifies.
GREEDY_CERTIFIES = (
    "certifies, for the case's prompt, the TV between the two engines' laws of whole greedy rows (hence of every "
    "position); companion prompts' rows are compared token for token, not certified"
)
#: What an ``equivalent`` verdict under ``--certificate pit-law`` certifies (speceq.stats.pit_law).
CERTIFIES_PIT_LAW = (
    "certifies, at every position t of the case's prompt, that P(reach t and emit one of the target's "
    "most likely tokens covering mass u) is within the bound of u P(reach t) for every u (the law of the "
    "oracle PIT); it does not bound the TV between the token laws, nor mass swapped between tokens of "
    "equal target probability or errors that cancel across prefixes; companion prompts and dependence "
    "between positions are tested, not certified"
)


@dataclass(frozen=True, slots=True, kw_only=True)
class GreedyEvidence:
    """Row-by-row comparison of a temperature-0 case over every prompt of the batch.

    rows_compared / rows_equal: row pairs (baseline row i vs candidate row i of the same
    prompt) compared and found equal token for token. mismatches / near_ties / unexplained:
    diverging row pairs whose first divergence is a real mismatch (target top-2 margin above
    ``near_tie_nats``), a numerical near-tie, or could not be classified (no oracle).
    differ_rate / tv_upper_bound: the share of the case prompt's row pairs that differ (an estimate
    of P(rows differ), not of a TV) and the upper (1 - alpha) Clopper-Pearson bound of that
    probability; P(rows differ) >= TV for any coupling, so the bound is an upper bound on the TV
    between the engines' row laws for that prompt (what an ``equivalent`` greedy verdict certifies).
    case_rows / case_rows_diverging: row pairs of the case's prompt compared and diverging.
    rows_teacher_forced: diverging candidate rows scored through the oracle after their
    divergence; rows_off_argmax: those with a later token that is neither the target's argmax
    nor a near-tie (hard failures). rows_beyond_near_tie: row pairs (every prompt) whose first
    divergence is a real mismatch or whose candidate row is off the argmax later: the numerator of
    a greedy ``shifted``'s size (:func:`speceq.verdicts.decide.greedy_size`).
    """

    rows_compared: int
    rows_equal: int
    mismatches: int
    near_ties: int
    unexplained: int
    near_tie_nats: float
    differ_rate: float
    tv_upper_bound: float
    case_rows: int = 0
    case_rows_diverging: int = 0
    rows_teacher_forced: int = 0
    rows_off_argmax: int = 0
    rows_beyond_near_tie: int = 0

    @property
    def rows_diverging(self) -> int:
        return self.rows_compared - self.rows_equal

    @property
    def rows_near_tie_only(self) -> int:
        """Diverging row pairs whose every departure from the target's argmax path is a near-tie."""
        return self.rows_diverging - self.rows_beyond_near_tie - self.unexplained


@dataclass(frozen=True, slots=True, kw_only=True)
class CaseEvidence:
    """What the analysis produced for one case, before any multiplicity adjustment.

    tests: raw outcomes (``adjusted_pvalue``/``qvalue`` left None). tv_estimate and
    tv_upper_bound: the case's plug-in TV and its upper confidence bound (None when not
    computed: the case can then not be ``equivalent``). effective_support: an UPPER estimate
    of the effective number of bins k_eff = (sum sqrt p)^2 of the case's widest position, used
    by the sample-size formulas. n_baseline / n_candidate: samples of the case's prompt.
    hard_failures: records of events impossible under H0, with their token ids (candidate rows
    with tokens of oracle probability 0 where the baseline has none, significant at the first
    Holm step; tokens outside the support margin; a greedy mismatch; a teacher-forced greedy row
    off the target's argmax), worded by :func:`speceq.verdicts.reasons.failure_lines`. greedy: the row comparison of a temperature-0 case (None for sampling
    cases). bound_alpha: level at which
    ``tv_upper_bound`` was computed when it is not ``alpha`` (e.g. alpha / L for a bound that
    holds over L positions at once); the certification size uses it. pit_law_upper_bound: the
    simultaneous (1 - alpha) bound of :func:`speceq.stats.pit_law_bound` over the case prompt's
    ``pit_law_positions`` positions (None without a full-law oracle); an ``equivalent`` verdict
    rests on it only when the run's certificate is ``pit-law``. pooled_counts: both engines' token
    counts at the position whose TV bound is the largest (the one the certificate waits on), from
    which :func:`speceq.stats.estimate_law` estimates the law the sample sizes are computed for;
    vocabulary: how many labels that position can hold (None: estimated from the counts);
    positions: how many positions the TV bound holds over (L of ``bound_alpha`` = alpha / L).
    Without pooled_counts the sizes fall back to the effective-support formulas. size: the
    largest TV of the case prompt's per-position token laws and of its first two tokens' joint law, held-out estimate with [low, high] at level
    1 - alpha over its positions (:func:`speceq.stats.max_tv_size`); what a ``shifted`` verdict says
    the difference's size is, and what ``within-tolerance`` compares with the numerics tolerance
    (None: not computed). independence_untested: the ``independence untested`` notes of the engines whose
    row-independence test could not run (e.g. every row from one forward batch of one call); the reason of a
    detected difference names them, since every token-law test assumes independent rows.
    """

    case_id: str
    tests: tuple[TestOutcome, ...]
    tv_estimate: float | None
    tv_upper_bound: float | None
    effective_support: float
    n_baseline: int
    n_candidate: int
    hard_failures: tuple[HardFailure, ...] = ()
    greedy: GreedyEvidence | None = None
    bound_alpha: float | None = None
    pit_law_upper_bound: float | None = None
    pit_law_positions: int = 0
    pooled_counts: np.ndarray | None = None
    vocabulary: int | None = None
    positions: int = 1
    size: TVInterval | None = None
    independence_untested: tuple[Note, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class SequentialTestEvidence:
    """One e-process of a sequential case at the current look.

    max_evalue: the largest e-value so far; pvalue: its always-valid p-value (1 / max e-value,
    capped at 1); crossing_sample: samples per engine at which it first reached the threshold
    (None: not reached); kind: what test it is (None: not known, so no size stands for it); prompt: the prompt of
    the batch a one-position test is of (None: not one).
    """

    name: str
    max_evalue: float
    pvalue: float
    crossing_sample: int | None = None
    kind: TestKind | None = None
    prompt: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class SequentialEvidence:
    """A sequential case after one look, as the decision layer sees it.

    n: samples per engine so far; look / looks: this look and the looks the budget allows;
    budget: the case's budget (samples per engine); tests: every planned e-process;
    tv_upper_bound: the time-uniform TV upper bound (None before the first grid point) and
    bound_grid_n, the grid point its data reach; hard_failures: events impossible under H0, as records with
    token ids (worded by :func:`speceq.verdicts.reasons.failure_lines`).
    """

    n: int
    look: int
    looks: int
    budget: int
    tests: tuple[SequentialTestEvidence, ...]
    tv_upper_bound: float | None = None
    bound_grid_n: int | None = None
    hard_failures: tuple[HardFailure, ...] = ()
