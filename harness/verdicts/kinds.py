"""What each test of a run is, as data: :class:`TestKind` names the test, independent of the
prompt and position it ran at, so that every face picks its words by kind and never reads a
test's name or summary back.
"""

from __future__ import annotations

import enum


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

    @property
    def is_row_comparison(self) -> bool:
        """A paired comparison of one row score of a case (its effect: the mean row-score difference)."""
        return self in _ROW_COMPARISONS

    @property
    def is_z_test(self) -> bool:
        """A one-sample martingale z-test (its effect: the per-token excess of the score)."""
        return self in _Z_TESTS

    @property
    def is_chi2(self) -> bool:
        """A chi-square test (its effect: the plug-in TV with its upper bound)."""
        return self in _CHI2


_ROW_COMPARISONS = frozenset({TestKind.ARGMAX_COMPARISON, TestKind.LOG_LIKELIHOOD_COMPARISON, TestKind.PIT_COMPARISON,
                              TestKind.DRAFT_RATIO_COMPARISON, TestKind.DRAFT_LOG_RATIO_COMPARISON})
_Z_TESTS = frozenset({TestKind.Z_ARGMAX_LEAK, TestKind.Z_TEMPERATURE_DRIFT, TestKind.Z_DRAFT_RATIO,
                      TestKind.Z_DRAFT_DRIFT})
_CHI2 = frozenset({TestKind.CHI2_POSITION, TestKind.CHI2_JOINT, TestKind.CHI2_LENGTH, TestKind.CHI2_FIRST_TOKEN_GOF})
