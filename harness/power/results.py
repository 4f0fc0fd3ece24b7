"""Result objects of a calibration run: per-variant detection curves, the power curve, goals.

Plain frozen dataclasses of JSON-able values (``to_dict`` / ``from_dict``), read by the
markdown table, the SVG plot and the JSON file.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

#: Display names of the methods, in table order.
METHOD_LABELS: dict[str, str] = {
    "speceq": "speceq (this project)",
    "speceq_greedy": "speceq greedy check (rows)",
    "np": "Neyman-Pearson limit",
    "vllm": "vLLM L2 heuristic (calibrated)",
    "trtllm": "TensorRT-LLM KL gap (calibrated, binned)",
    "greedy": "greedy exact match (rows)",
    "vllm_published": "vLLM L2 heuristic (published rule)",
    "trtllm_published": "TensorRT-LLM KL gap (published rule)",
}
#: Engine methods (re-implementations) compared with speceq for the 1/10 goal.
ENGINE_METHODS = ("vllm", "trtllm", "greedy")
#: speceq's checks: its statistical analysis of sampled rows and its greedy check of greedy rows.
SPECEQ_METHODS = ("speceq", "speceq_greedy")


@dataclass(frozen=True, slots=True, kw_only=True)
class Detection:
    """Rejection rates of one method at the sample sizes tried (n per engine)."""

    method: str
    sizes: tuple[int, ...]
    rates: tuple[float, ...]
    reps: int
    source: str  # "engine samples" or "exact law"
    n90: int | None  # smallest size with rate >= power; None when none reached it


@dataclass(frozen=True, slots=True, kw_only=True)
class VariantResult:
    """Calibration of one engine variant (a mutant, a lossless variant or the reference)."""

    name: str
    bug: str
    bug_class: str
    lossless: bool
    params: str
    batch_size: int
    companions: int
    tv: tuple[float | None, ...]
    tv_source: str
    accept_rate: float | None
    detections: tuple[Detection, ...]
    budget_rate: float | None  # speceq shifted rate at the default budget and alpha
    budget_reps: int | None
    seconds: float
    notes: tuple[str, ...] = ()
    #: one-row TVs (:class:`speceq.power.ceiling.RowTV` as dicts) and whether they cover
    #: both kinds of row (greedy and sampled), so that the one-sample ceiling is valid.
    row_tvs: tuple[dict[str, Any], ...] = ()
    row_tv_complete: bool = False

    def one_sample_ceiling(self, alpha: float) -> float | None:
        """alpha + the largest one-row TV upper bound, when it covers every kind of row; else None."""
        from speceq.power.ceiling import RowTV, one_sample_ceiling

        if not self.row_tv_complete:
            return None
        return one_sample_ceiling(alpha, [RowTV(**r) for r in self.row_tvs])

    def best_speceq(self) -> Detection | None:
        """speceq's check that detects with the fewest samples (sampled analysis or greedy check)."""
        dets = [d for m in SPECEQ_METHODS if (d := self.detection(m)) is not None]
        reached = [d for d in dets if d.n90 is not None]
        if reached:
            return min(reached, key=lambda d: d.n90)
        return dets[0] if dets else None

    @property
    def max_tv(self) -> float | None:
        known = [t for t in self.tv if t is not None]
        return max(known) if known else None

    def detection(self, method: str) -> Detection | None:
        return next((d for d in self.detections if d.method == method), None)


@dataclass(frozen=True, slots=True, kw_only=True)
class CurvePoint:
    """The mixture mutant at one weight: exact TV shift and each method's detection rate at ``n``."""

    mix: float
    tv: float
    n: int
    rates: dict[str, float]
    reps: dict[str, int]


@dataclass(frozen=True, slots=True, kw_only=True)
class PowerResult:
    """Everything ``speceq power`` measured, with its settings and provenance."""

    settings: dict[str, Any]
    variants: tuple[VariantResult, ...]
    curve: tuple[CurvePoint, ...]
    provenance: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @staticmethod
    def from_dict(d: dict[str, Any]) -> PowerResult:
        variants = []
        for v in d["variants"]:
            dets = tuple(Detection(**{**x, "sizes": tuple(x["sizes"]), "rates": tuple(x["rates"])})
                         for x in v["detections"])
            variants.append(VariantResult(**{**v, "tv": tuple(v["tv"]), "detections": dets, "notes": tuple(v["notes"]),
                                             "row_tvs": tuple(v.get("row_tvs", ()))}))
        curve = tuple(CurvePoint(**c) for c in d["curve"])
        return PowerResult(settings=d["settings"], variants=tuple(variants), curve=curve,
                                 provenance=d.get("provenance", {}))

    @property
    def mutants(self) -> tuple[VariantResult, ...]:
        return tuple(v for v in self.variants if not v.lossless)

    @property
    def lossless(self) -> tuple[VariantResult, ...]:
        return tuple(v for v in self.variants if v.lossless)

    def goals(self) -> list[dict[str, Any]]:
        """The four goals of the issue, each with ``met`` (True, False or None = not measurable) and detail."""
        s = self.settings
        out = []
        big = [v for v in self.mutants if v.max_tv is not None and v.max_tv >= 0.02]
        missed = [v.name for v in big if v.budget_rate is None or v.budget_rate < 1.0]
        out.append({"goal": f"every mutant with TV >= 0.02 is shifted at the default budget "
                            f"(n={s['budget']}, alpha={s['budget_alpha']:g}) in every repetition",
                    "met": not missed if big else None,
                    "detail": "missed: " + ", ".join(missed) if missed else f"{len(big)} mutants, all shifted"})
        out.append(self._tenth_goal())
        out.append(self._ratio_goal("speceq samples-to-detect within 3x of the Neyman-Pearson limit", ("np",), 3.0))
        out.append(self._alarm_goal())
        return out

    def _ratio_goal(self, goal: str, others: tuple[str, ...], limit: float) -> dict[str, Any]:
        """speceq's n90 over the best n90 of ``others``, per mutant; met when every ratio <= ``limit``.

        When no method of ``others`` reached the power within its sizes, the ratio is at most
        speceq's n90 over the largest size they tried (an upper bound, shown with "<").
        """
        parts, verdicts = [], []
        for v in self.mutants:
            mine = v.detection("speceq")
            dets = [d for m in others if (d := v.detection(m)) is not None]
            if mine is None or not dets:
                continue
            if mine.n90 is None:
                parts.append(f"{v.name}: speceq not at {self.settings['power']:.0%} by n={max(mine.sizes)}")
                verdicts.append(False)
                continue
            reached = [d for d in dets if d.n90 is not None]
            if reached:
                best = min(reached, key=lambda d: d.n90)
                ratio = mine.n90 / best.n90
                parts.append(f"{v.name} {ratio:.2g}" + (f" (vs {best.method})" if len(others) > 1 else ""))
            else:
                ratio = mine.n90 / max(max(d.sizes) for d in dets)
                parts.append(f"{v.name} <{ratio:.2g}")
            verdicts.append(ratio <= limit)
        return {"goal": goal, "met": all(verdicts) if verdicts else None,
                "detail": "ratios: " + ", ".join(parts) if parts else "no comparable mutant"}

    def _tenth_goal(self) -> dict[str, Any]:
        """speceq's best check needs <= 1/10 of the samples of the best engine method, per mutant.

        Per mutant: met, NOT met, or unattainable. Unattainable when 1/10 of the best engine
        method's samples is below one sample, or when it allows exactly one sample and the
        one-sample ceiling (alpha + the one-row TV, :mod:`speceq.power.ceiling`) is
        below the target power: then no method at all can meet it. The goal is met when no
        mutant is NOT met.
        """
        alpha, power = float(self.settings["alpha"]), float(self.settings["power"])
        met, missed, unattainable = [], [], []
        for v in self.mutants:
            mine = v.best_speceq()
            others = [d for m in ENGINE_METHODS if (d := v.detection(m)) is not None]
            if mine is None or not others:
                continue
            reached = [d for d in others if d.n90 is not None]
            best = min(reached, key=lambda d: d.n90) if reached else None
            largest = max(max(d.sizes) for d in others)
            allowed = (best.n90 if best else largest) / 10
            label = f"{mine.n90 if mine.n90 is not None else '> ' + str(max(mine.sizes))} vs " + (
                f"{best.method} {best.n90}" if best else f"> {largest}")
            if mine.n90 is not None and mine.n90 <= allowed:
                met.append(f"{v.name} ({label})")
            elif best is not None and allowed < 1:
                unattainable.append(f"{v.name} ({label}: 1/10 of it is below one sample)")
            elif allowed < 2 and (ceiling := v.one_sample_ceiling(alpha)) is not None and ceiling < power:
                unattainable.append(f"{v.name} ({label}: one sample allowed, and no test reaches {power:.0%} from one "
                                    f"row: ceiling alpha + one-row TV <= {ceiling:.2f})")
            else:
                missed.append(f"{v.name} ({label})")
        detail = "; ".join(part for part in (
            "met: " + ", ".join(met) if met else "",
            "NOT met: " + ", ".join(missed) if missed else "",
            "unattainable by any method: " + ", ".join(unattainable) if unattainable else "",
        ) if part)
        return {"goal": "speceq samples-to-detect (best of its sampled analysis and greedy check) <= 1/10 of the best "
                        "re-implemented engine method, where any method can",
                "met": (not missed) if (met or missed or unattainable) else None, "detail": detail or "no comparable mutant"}

    def _alarm_goal(self) -> dict[str, Any]:
        """speceq's false alarms on the lossless variants against alpha (one-sided binomial tests).

        Met when no variant's count is significantly above alpha (binomial p >= 0.05) and the
        pooled count is not either; the detail gives the pooled rate and its 95% upper bound.
        """
        from scipy import stats

        alpha = float(self.settings["alpha"])
        counts = []
        for v in self.lossless:
            d = v.detection("speceq")
            if d is not None and d.rates:
                counts.append((v.name, round(d.rates[0] * d.reps), d.reps))
        goal = f"speceq false alarms <= alpha={alpha:g} on every lossless variant"
        if not counts:
            return {"goal": goal, "met": None, "detail": "no lossless variant measured"}
        above = [f"{n} ({k}/{r})" for n, k, r in counts if stats.binomtest(k, r, alpha, alternative="greater").pvalue < 0.05]
        k_all, r_all = sum(c[1] for c in counts), sum(c[2] for c in counts)
        pooled = stats.binomtest(k_all, r_all, alpha, alternative="greater")
        upper = stats.binomtest(k_all, r_all, alpha, alternative="less").proportion_ci(0.95, method="exact").high
        detail = (f"pooled {k_all}/{r_all} = {k_all / r_all:.3g} (95% upper bound {upper:.3g}); "
                  + (f"significantly above alpha: {', '.join(above)}" if above else "no variant significantly above alpha"))
        return {"goal": goal, "met": bool(not above and pooled.pvalue >= 0.05), "detail": detail}
