"""The numerics control arm's findings: what the control says about numerics drift, in data and words.

With a numerics control (``--numerics-control``) a run samples three engines: the baseline, the
candidate, and the *control*, the baseline engine at the candidate's declared numerics (dtype,
device; for a server, a second plain endpoint). Two comparisons answer two questions:

- candidate against control, same numerics: a difference is a **speculation shift**; this
  comparison decides the verdict (its own Holm family at alpha);
- control against baseline, same algorithm: a difference is **numerics drift**, reported as a
  finding with its size (TV estimate and upper bound per case), never as the verdict (its own
  Holm family at alpha, so a drift found is as sure as a shift would be).

:class:`NumericsControl` carries the second comparison into the run's result; words for the
faces are here too, so the CLI, the pytest report and the HTML page say the same.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from speceq.verdicts.verdict import Verdict

#: The flag that adds the control, named in the words of runs without one.
CONTROL_FLAG = "--numerics-control"


@dataclass(frozen=True, slots=True, kw_only=True)
class CaseDrift:
    """Control against baseline for one case: its verdict there (``shifted``: numerics drift detected) and size.

    tv_estimate / tv_upper_bound: the per-position TV between the baseline's and the control's
    token laws (plug-in estimate, biased upward, and the case's upper bound, as for the verdict).
    """

    case_id: str
    verdict: Verdict
    reason: str
    tv_estimate: float | None = None
    tv_upper_bound: float | None = None
    n_baseline: int = 0
    n_control: int = 0

    def words(self) -> str:
        """One line: drift found or not, with its size."""
        size = "" if self.tv_estimate is None or self.tv_upper_bound is None else \
            f" (TV estimate {self.tv_estimate:.3f}, upper bound {self.tv_upper_bound:.3f})"
        if self.verdict == Verdict.SHIFTED:
            return (f"{self.case_id}: numerics drift: the control differs from the baseline{size}: {self.reason} "
                    "(in this comparison the control is the 'candidate')")
        if self.verdict == Verdict.EQUIVALENT:
            return f"{self.case_id}: no numerics drift beyond the tolerance{size}"
        return f"{self.case_id}: no numerics drift detected, not certified below the tolerance{size}"


@dataclass(frozen=True, slots=True, kw_only=True)
class NumericsControl:
    """The numerics control of a run: which numerics it stood for and the drift it found per case.

    baseline / candidate: the numerics each engine declares, in words (``float32 on cpu``;
    ``undeclared`` for a server); control: the control engine's spec and options as run.
    drift: control against baseline per case. pooled_reason: a drift pooled over the cases
    found (empty when none). control_ratio: the control's samples per candidate sample (1: as many;
    results saved before the setting read as 1).
    """

    baseline: str
    candidate: str
    control: dict[str, Any]
    drift: tuple[CaseDrift, ...] = ()
    pooled_reason: str = ""
    control_ratio: float = 1.0

    @property
    def drift_found(self) -> bool:
        return bool(self.pooled_reason) or any(d.verdict == Verdict.SHIFTED for d in self.drift)

    @property
    def drift_cases(self) -> tuple[str, ...]:
        """The cases whose control differs from the baseline."""
        return tuple(d.case_id for d in self.drift if d.verdict == Verdict.SHIFTED)

    def words(self) -> str:
        """The finding in plain words, for the run's summary."""
        words = drift_words(self.drift_found, self.drift_cases, self.baseline, self.candidate)
        if self.control_ratio == 1:
            return words
        rows = ", ".join(f"{d.case_id} {d.n_control}" for d in self.drift)
        return (f"{words} The control drew {self.control_ratio:g} times the candidate's samples (rows per case: "
                f"{rows}); each candidate row was compared with its share of them.")

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> NumericsControl:
        """The control of ``to_dict`` / ``result.json``."""
        drift = tuple(CaseDrift(**{**x, "verdict": Verdict.parse(x["verdict"])}) for x in d.get("drift", ()))
        return cls(**{**d, "drift": drift})


def numerics_words(declared: tuple[str, str] | None) -> str:
    """``bfloat16 on cpu`` for a declared (dtype, device); ``undeclared`` for None."""
    if declared is None:
        return "undeclared"
    return f"{declared[0]} on {declared[1]}" if declared[1] else declared[0]


def against_control(reason: str, control: str) -> str:
    """A shifted reason of the candidate-against-control comparison, saying what it compared."""
    return (f"speculation shift against the numerics control (the baseline engine at the candidate's numerics, "
            f"{control}; it stands in the baseline's place in what follows): {reason}")


def pooled_against_control(reason: str, control: str) -> str:
    """A run-level pooled reason of the candidate-against-control comparison: the test's words first (faces read the
    test's name before the first colon), what it compared after."""
    return (f"{reason} [against the numerics control, the baseline engine at the candidate's numerics ({control}), "
            "in the baseline's place]")


def drift_words(drift_found: bool, cases: tuple[str, ...], baseline: str, candidate: str) -> str:
    """The numerics control's finding in plain words (``cases``: those with drift; none: pooled)."""
    if drift_found:
        where = f" in {', '.join(cases)}" if cases else " pooled over the cases"
        return (f"Numerics drift: the baseline engine at the candidate's numerics ({candidate}) samples "
                f"differently from the baseline ({baseline}){where}; that difference is the numerics', "
                "not the speculation's, and does not decide the verdict.")
    return (f"No numerics drift shows between the baseline ({baseline}) and the baseline engine at the "
            f"candidate's numerics ({candidate}).")


#: What each case of a run with a numerics control notes.
CONTROL_NOTE = ("numerics control: this case's tests compare the candidate with the control (the baseline engine at "
                "the candidate's numerics), which stands in the baseline's place in their words and counts; the "
                "control against the baseline is the run's numerics drift finding")


def numerics_differ_hint(baseline: str, candidate: str, *, sequential: bool = False) -> str:
    """What a shifted reason adds when the engines declare different numerics and the run has no control; in a
    sequential run it says that the control needs a fixed-size run (a sequential run refuses it)."""
    where = f"{FIXED_SIZE_CONTROL}: " if sequential else ""
    return (f"the engines declare different numerics (baseline {baseline}, candidate {candidate}): this shift may be "
            f"numerics drift, not speculation; {where}{CONTROL_FLAG} adds the baseline at the candidate's numerics "
            "and tells the two apart")


#: Where the control runs, said in a sequential run's numerics words (the config refuses it with --sequential).
FIXED_SIZE_CONTROL = "the numerics control needs a fixed-size run (rerun without --sequential)"


__all__ = ["CONTROL_FLAG", "CONTROL_NOTE", "FIXED_SIZE_CONTROL", "CaseDrift", "NumericsControl", "against_control", "drift_words", "numerics_differ_hint",
           "numerics_words", "pooled_against_control"]
