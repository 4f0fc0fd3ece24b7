"""The one vocabulary of answers: :class:`Verdict`, its order and its exit codes.

Every face and wing speaks it: a run and its cases (``speceq run``, the Python API), a kernel
check and a drafter check (``speceq kernel``), both report modules and the pytest session.
A ``Verdict`` is a ``str`` (``Verdict.SHIFTED == "shifted"``), so result.json files keep their
words and a verdict read back from JSON compares equal to the member.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable

#: Exit code of a usage, input or engine error (no verdict was reached).
EXIT_USAGE = 2
#: Exit code of a run stopped by the user (Ctrl-C): 128 + SIGINT, as shells report it (SIGTERM: 143).
EXIT_INTERRUPTED = 130


class Verdict(enum.StrEnum):
    """The answer of a check, from worst to best.

    - ``shifted``: a test rejected at the family-wise level, or a hard failure / broken invariant;
    - ``lossy``: a method declared lossy by design, whose distance is measured, never passed
      (a kernel check of a lossy kernel; a run whose candidate engine declares ``lossless: False``);
    - ``inconclusive``: nothing rejected, but equivalence within the tolerance is not shown yet;
    - ``within-tolerance``: a difference is detected (a test rejected at the family-wise level, no hard
      failure), but its size is certified below the numerics tolerance (``--numerics-tolerance``): the
      upper confidence bound of its largest per-position (and first-two-token) TV is below it (runs only). Exit code 4, so
      that no job that failed on a detected difference passes silently; the pytest plugin marks
      the test xfailed (docs/reference/cli.md#exit-codes says why);
    - ``equivalent``: nothing rejected and, where a tolerance applies, the distance is certified below it.
    """

    SHIFTED = "shifted"
    LOSSY = "lossy"
    INCONCLUSIVE = "inconclusive"
    WITHIN_TOLERANCE = "within-tolerance"
    EQUIVALENT = "equivalent"

    @property
    def rank(self) -> int:
        """0 for the worst verdict (``shifted``), increasing towards ``equivalent``."""
        return _ORDER.index(self)

    @property
    def exit_code(self) -> int:
        """The CLI's and CI's exit code: 0 equivalent, 1 shifted or lossy, 3 inconclusive, 4 within-tolerance
        (2 is an error)."""
        return _EXIT_CODES[self]

    @classmethod
    def parse(cls, word: str, *, allowed: Iterable[Verdict] | None = None) -> Verdict:
        """The member named by ``word``; ``ValueError`` naming the allowed words otherwise."""
        choices = tuple(allowed) if allowed is not None else tuple(cls)
        for v in choices:
            if v.value == word:
                return v
        raise ValueError(f"unknown verdict {word!r}; expected one of {[v.value for v in choices]}")

    @classmethod
    def worst(cls, verdicts: Iterable[str]) -> Verdict:
        """The worst of ``verdicts`` (``equivalent`` for none); a word that is no verdict raises ``ValueError``."""
        seen = [cls.parse(v) for v in verdicts]
        return min(seen, key=lambda v: v.rank, default=cls.EQUIVALENT)


_ORDER: tuple[Verdict, ...] = (Verdict.SHIFTED, Verdict.LOSSY, Verdict.INCONCLUSIVE, Verdict.WITHIN_TOLERANCE,
                               Verdict.EQUIVALENT)
_EXIT_CODES: dict[Verdict, int] = {Verdict.SHIFTED: 1, Verdict.LOSSY: 1, Verdict.INCONCLUSIVE: 3,
                                   Verdict.WITHIN_TOLERANCE: 4, Verdict.EQUIVALENT: 0}

#: The verdicts a run or a case of a run can have (``lossy``: only when the candidate declares itself lossy).
RUN_VERDICTS: tuple[Verdict, ...] = (Verdict.EQUIVALENT, Verdict.SHIFTED, Verdict.INCONCLUSIVE,
                                     Verdict.WITHIN_TOLERANCE, Verdict.LOSSY)
