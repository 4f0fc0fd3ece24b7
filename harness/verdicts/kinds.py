"""What each test of a run is, as data: :class:`TestKind` names the test, independent of the
prompt and position it ran at, so that every face picks its words by kind and never reads a
test's name or summary back.
"""

from __future__ import annotations

import enum

from speceq.stats.results import Effect


class TestKind(enum.StrEnum):
    """The fixed set of tests a run (or a look of a sequential run) can hold; the value is stored in ``result.json``.

    The one-sample diagnostics of the baseline (``"baseline z argmax leak"``, ...) share the kind of the
    candidate's test: the kind says what is tested, the name whose rows.
    """

    __test__ = False  # not a pytest test class, despite the name

    CHI2_POSITION = "chi2 position"  # two-sample chi-square of one generated position (prompt, position fields)
    CHI2_JOINT = "chi2 joint"  # two-sample chi-square of the pairs of the first two tokens
    CHI2_LENGTH = "chi2 length"  # two-sample chi-square of the row lengths
    CHI2_FIRST_TOKEN_GOF = "chi2 GOF first token"  # the candidate's first token against the oracle's law
    ARGMAX_COMPARISON = "argmax comparison"  # paired comparisons of a row score, candidate minus baseline
    LOG_LIKELIHOOD_COMPARISON = "log-likelihood comparison"
    PIT_COMPARISON = "PIT comparison"
    DRAFT_RATIO_COMPARISON = "draft ratio comparison"
    DRAFT_LOG_RATIO_COMPARISON = "draft log-ratio comparison"
    SUPPORT_COMPARISON = "support comparison"  # rows holding a token of oracle probability 0
    ROW_INDEPENDENCE = "row independence"  # rows of one call agree more often than rows of two calls (each engine)
    POOLED_COMPARISON = "pooled comparison"  # a row score's comparison pooled over the run's cases
    PIT_UNIFORMITY = "PIT uniformity"  # one-sample uniformity of the oracle PIT (AD, KS, CvM, histogram)
    Z_ARGMAX_LEAK = "z argmax leak"  # one-sample martingale z-tests against the oracle
    Z_TEMPERATURE_DRIFT = "z temperature drift"
    Z_DRAFT_RATIO = "z draft ratio"
    Z_DRAFT_DRIFT = "z draft drift"
    # the e-processes of a sequential run (``--sequential``), valid at every look
    SEQ_PAIR_POSITION = "seq pair position"  # paired exchangeability of one generated position (prompt, position)
    SEQ_PAIR_JOINT = "seq pair joint"  # of the pairs of the first two tokens
    SEQ_PAIR_LENGTH = "seq pair length"  # of the row lengths
    SEQ_ARGMAX_COMPARISON = "seq argmax comparison"  # paired sign e-processes of a row score, candidate minus baseline
    SEQ_LOG_LIKELIHOOD_COMPARISON = "seq log-likelihood comparison"
    SEQ_PIT_COMPARISON = "seq PIT comparison"
    SEQ_DRAFT_RATIO_COMPARISON = "seq draft ratio comparison"
    SEQ_DRAFT_LOG_RATIO_COMPARISON = "seq draft log-ratio comparison"
    SEQ_SUPPORT_COMPARISON = "seq support comparison"  # of the rows holding a token of oracle probability 0

    @property
    def is_row_comparison(self) -> bool:
        """A paired comparison of one row score of a case (its effect: the mean row-score difference)."""
        return self in _ROW_COMPARISONS

    @property
    def is_z_test(self) -> bool:
        """A one-sample martingale z-test (its effect: the per-token excess of the score)."""
        return self in _Z_TESTS

    @property
    def is_eprocess(self) -> bool:
        """An e-process of a sequential run (its effect: the plug-in estimate so far, without an interval)."""
        return self in _EPROCESSES

    @property
    def is_pair_eprocess(self) -> bool:
        """A paired exchangeability e-process (its effect: the plug-in TV between the two samples so far)."""
        return self in _PAIR_EPROCESSES

    @property
    def is_chi2(self) -> bool:
        """A chi-square test (its effect: the plug-in TV with its upper bound)."""
        return self in _CHI2


_ROW_COMPARISONS = frozenset({TestKind.ARGMAX_COMPARISON, TestKind.LOG_LIKELIHOOD_COMPARISON, TestKind.PIT_COMPARISON,
                              TestKind.DRAFT_RATIO_COMPARISON, TestKind.DRAFT_LOG_RATIO_COMPARISON})
_Z_TESTS = frozenset({TestKind.Z_ARGMAX_LEAK, TestKind.Z_TEMPERATURE_DRIFT, TestKind.Z_DRAFT_RATIO,
                      TestKind.Z_DRAFT_DRIFT})
_CHI2 = frozenset({TestKind.CHI2_POSITION, TestKind.CHI2_JOINT, TestKind.CHI2_LENGTH, TestKind.CHI2_FIRST_TOKEN_GOF})
_PAIR_EPROCESSES = frozenset({TestKind.SEQ_PAIR_POSITION, TestKind.SEQ_PAIR_JOINT, TestKind.SEQ_PAIR_LENGTH})
_EPROCESSES = _PAIR_EPROCESSES | {TestKind.SEQ_ARGMAX_COMPARISON, TestKind.SEQ_LOG_LIKELIHOOD_COMPARISON,
                                  TestKind.SEQ_PIT_COMPARISON, TestKind.SEQ_DRAFT_RATIO_COMPARISON,
                                  TestKind.SEQ_DRAFT_LOG_RATIO_COMPARISON, TestKind.SEQ_SUPPORT_COMPARISON}


class EffectName(enum.StrEnum):
    """What a test's effect (:class:`speceq.stats.results.Effect`) measures; the value is stored as ``effect.name``."""

    TV = "TV"  # total variation distance between the two engines' laws (chi-square, paired exchangeability)
    ROW_SCORE_DIFFERENCE = "row score difference"  # mean row score, candidate minus baseline
    STANDARDISED_ROW_SCORE_DIFFERENCE = "standardised row score difference"  # pooled over cases, in rms units
    ROW_RATE_DIFFERENCE = "row rate difference"  # share of rows holding a token of oracle probability 0, cand - base
    PER_TOKEN_EXCESS = "per-token excess"  # mean of f minus its mean under the oracle (one-sample z-tests)
    #: share of pairs of rows of one call agreeing at a position minus that of pairs of rows of two calls
    WITHIN_CALL_AGREEMENT_EXCESS = "within-call agreement excess"
    #: share of a greedy case's row pairs (every prompt of its batch) that diverge beyond a numerical near-tie: the
    #: first divergence a real mismatch, or the candidate row off the target's argmax later (no TV: greedy rows are
    #: compared pair by pair, and their share is the size of a greedy ``shifted``)
    GREEDY_DIVERGENCE = "greedy row pairs diverging beyond a near-tie"


#: The unit of each effect, stored as ``effect.unit`` (what each measures: the comments of EffectName).
EFFECT_UNITS = {
    EffectName.TV: "total variation distance",
    EffectName.ROW_SCORE_DIFFERENCE: "score units per row",
    EffectName.STANDARDISED_ROW_SCORE_DIFFERENCE: "rms of the pair differences",
    EffectName.ROW_RATE_DIFFERENCE: "share of rows",
    EffectName.PER_TOKEN_EXCESS: "f units per token",
    EffectName.WITHIN_CALL_AGREEMENT_EXCESS: "share of pairs",
    EffectName.GREEDY_DIVERGENCE: "share of row pairs",
}


def named_effect(name: EffectName, estimate: float, *, low: float | None = None, high: float | None = None,
                 level: float | None = None) -> Effect:
    """The effect ``name`` with its stored unit (:data:`EFFECT_UNITS`), estimate and interval (None: none)."""
    return Effect(name=name.value, unit=EFFECT_UNITS[name], estimate=float(estimate), low=low, high=high, level=level)
