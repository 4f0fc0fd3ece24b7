"""The decision of a sequential case at one look (pure, no I/O).

At each look: a hard failure makes the case ``shifted``; so does any e-process that reached
the threshold K / alpha (K = sequential tests of the run: e-value Bonferroni, family-wise
error <= alpha however often one looks); else it is ``equivalent`` when the time-uniform TV
upper bound is below the tolerance; else it stays open, and at its last look it is
``inconclusive``. The reason of every decided case begins with ``sequential:``.
"""

from __future__ import annotations

from speceq.verdicts.evidence import CERTIFIES, SequentialEvidence

__all__ = ["decide_look"]


def decide_look(ev: SequentialEvidence, *, tolerance: float, threshold: float) -> tuple[str | None, str]:
    """(verdict, reason) of a case after look ``ev.look``; verdict None while the case stays open."""
    at = f"decided at n = {ev.n} samples per engine after {ev.look} look{'s' if ev.look > 1 else ''}"
    if ev.hard_failures:
        return "shifted", f"sequential: {at}; hard failure: {ev.hard_failures[0]}"
    crossed = [t for t in ev.tests if t.crossing_sample is not None]
    if crossed:
        t = min(crossed, key=lambda x: x.crossing_sample)  # type: ignore[arg-type, return-value]
        return "shifted", (f"sequential: {at}; {t.name} e-value {t.max_evalue:.3g} >= {threshold:.3g} (K/alpha; "
                           f"always-valid p = {t.pvalue:.3g}), first crossed at sample {t.crossing_sample}")
    if ev.tv_upper_bound is not None and ev.tv_upper_bound < tolerance:
        return "equivalent", (f"sequential: {at}; no e-process reached {threshold:.3g} and the time-uniform TV upper "
                              f"bound {ev.tv_upper_bound:.4f} < tolerance {tolerance:g} (data up to grid point "
                              f"n = {ev.bound_grid_n}); this {CERTIFIES}")
    if ev.look < ev.looks:
        return None, ""
    bound = "no time-uniform TV bound yet" if ev.tv_upper_bound is None else (
        f"the time-uniform TV upper bound {ev.tv_upper_bound:.4f} >= tolerance {tolerance:g}")
    return "inconclusive", (
        f"sequential: undecided at the budget n = {ev.budget} after {ev.looks} looks: no e-process reached "
        f"{threshold:.3g} and {bound}; rerun with a larger --samples (same --out and seed) to continue the "
        "same sequence, which stays valid")
