"""Result objects of the statistical tests: one style for all of them.

Every result is a ``@dataclass(frozen=True, slots=True, kw_only=True)`` holding plain Python
numbers (never numpy scalars), with ``statistic`` and ``pvalue`` where it is a single test,
``n`` (and ``dof`` where a chi-square law is used), effect sizes where they mean something,
``summary() -> str`` (one line) and ``to_dict()`` (JSON-able). Single-test results unpack
like scipy's: ``statistic, pvalue = result``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from scipy import optimize, stats

from speceq.stats.bounds import BD_CONSTANT, newcombe_interval
from speceq.stats.tv import tv_upper_bound_oracle, tv_upper_bound_two_sample


def _fmt_p(p: float) -> str:
    return f"{p:.3g}"


def _to_builtin(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _to_builtin(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Mapping):
        return {k: _to_builtin(v) for k, v in value.items()}
    if isinstance(value, (tuple, list)):
        return [_to_builtin(v) for v in value]
    if hasattr(value, "tolist") and getattr(value, "ndim", 0) > 0:  # numpy array
        return value.tolist()
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):  # numpy scalar
        return value.item()
    return value


class _Result:
    """Mixin: ``to_dict()`` for the frozen result dataclasses."""

    __slots__ = ()

    def to_dict(self) -> dict[str, Any]:
        """Field name -> JSON-able value (nested results become dicts, tuples lists)."""
        return _to_builtin(self)


@dataclass(frozen=True, slots=True, kw_only=True)
class ConfidenceInterval(_Result):
    """A confidence interval [low, high] at ``level`` (one-sided bounds use 0 or 1 as the open end)."""

    low: float
    high: float
    level: float

    def summary(self) -> str:
        return f"[{self.low:.4g}, {self.high:.4g}] ({self.level:.0%})"


@dataclass(frozen=True, slots=True, kw_only=True)
class Effect(_Result):
    """An effect size as data: what is measured (``name``, in ``unit``), its estimate and a confidence interval.

    low / high: the interval's ends at ``level`` (None when the test gives none; a one-sided bound
    has the open end at the quantity's limit, e.g. 0 for a TV). Faces pick their words from these
    fields; nothing reads an effect back from a summary.
    """

    name: str
    unit: str
    estimate: float
    low: float | None = None
    high: float | None = None
    level: float | None = None


class _Test(_Result):
    """Mixin of single tests: ``statistic, pvalue = result`` (as scipy's result objects)."""

    __slots__ = ()

    def __iter__(self) -> Iterator[float]:
        return iter((self.statistic, self.pvalue))  # type: ignore[attr-defined]


@dataclass(frozen=True, slots=True, kw_only=True)
class HomogeneityResult(_Test):
    """Pearson chi-square homogeneity test of two count vectors (2 x K table).

    method: ``"asymptotic"`` (chi2 law, Cochran's rule holds), ``"monte-carlo"`` (margins
    fixed, ``mc_samples`` null tables) or ``"degenerate"`` (fewer than 2 non-empty bins: no
    information, p = 1). n_bins: bins after merging; merged_labels: input labels merged into
    the one ``other`` bin. tv: plug-in total variation distance on the UNMERGED labels;
    tv_upper_bound: its distribution-free upper confidence bound at level 1 - ``tv_alpha``.
    largest_cells: input indices of the bins contributing most to X^2 (-1 = the merged bin).
    """

    statistic: float
    pvalue: float
    dof: int
    n: int
    n_a: int
    n_b: int
    method: str
    n_bins: int
    merged_labels: int
    mc_samples: int | None
    tv: float
    tv_upper_bound: float
    tv_alpha: float
    largest_cells: tuple[int, ...] = ()

    def confidence_interval(self, level: float = 0.95) -> ConfidenceInterval:
        """One-sided upper confidence bound on TV at ``level`` (McDiarmid + Jensen bias)."""
        return ConfidenceInterval(low=0.0, high=tv_upper_bound_two_sample(self.tv, self.n_a, self.n_b, 1.0 - level), level=level)

    def summary(self, *, effect: bool = True) -> str:
        """One line; ``effect=False`` leaves out the TV and its bound (for a caller that carries them as data)."""
        mc = f", {self.mc_samples} MC tables" if self.method == "monte-carlo" else ""
        tv = f"TV={self.tv:.4f} <= {self.tv_upper_bound:.4f} (confidence 1-{self.tv_alpha:.2g}); " if effect else ""
        return (
            f"chi2 homogeneity X2={self.statistic:.4g}, dof={self.dof}, p={_fmt_p(self.pvalue)} "
            f"({self.method}{mc}; {self.n_bins} bins, {self.merged_labels} merged); {tv}n={self.n_a}+{self.n_b}"
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class GoodnessOfFitResult(_Test):
    """Pearson chi-square goodness of fit of counts against known probabilities.

    Bins are chosen from the probabilities and n alone. method: ``"asymptotic"`` (every bin
    expected >= the rule and p >= 0.01), ``"exact"`` (2 bins, binomial), ``"monte-carlo"`` (tables drawn under the known law; mc_samples
    of them), ``"degenerate"`` (one bin) or ``"support"`` (a violation). support_violations: observations on labels
    with probability 0 (any makes X^2 infinite and p = 0). tv: plug-in TV(p_hat, p) on the
    unbinned labels; tv_upper_bound: its one-sample upper bound at level 1 - ``tv_alpha``.
    """

    statistic: float
    pvalue: float
    dof: int
    n: int
    n_bins: int
    support_violations: int
    tv: float
    tv_upper_bound: float
    tv_alpha: float
    method: str = "asymptotic"
    mc_samples: int | None = None

    def confidence_interval(self, level: float = 0.95) -> ConfidenceInterval:
        """One-sided upper confidence bound on TV(p_hat law, p) at ``level``."""
        return ConfidenceInterval(low=0.0, high=tv_upper_bound_oracle(self.tv, self.n, 1.0 - level), level=level)

    def summary(self, *, effect: bool = True) -> str:
        """One line; ``effect=False`` leaves out the TV and its bound (for a caller that carries them as data)."""
        sv = f", {self.support_violations} outside the support" if self.support_violations else ""
        mc = f", {self.mc_samples} MC tables" if self.method == "monte-carlo" else ""
        tv = f"TV={self.tv:.4f} <= {self.tv_upper_bound:.4f} (confidence 1-{self.tv_alpha:.2g}); " if effect else ""
        return (
            f"chi2 goodness of fit X2={self.statistic:.4g}, dof={self.dof}, p={_fmt_p(self.pvalue)} "
            f"({self.method}{mc}; {self.n_bins} bins{sv}); {tv}n={self.n}"
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class TwoSampleResult(_Test):
    """A two-sample test of a scalar (KS with jitter, Cramér-von Mises by permutation).

    statistic: the KS distance sup|F_a - F_b| or the CvM T statistic (midranks).
    method: how the p-value was obtained; n_resamples: permutations used, if any.
    """

    name: str
    statistic: float
    pvalue: float
    n_a: int
    n_b: int
    method: str
    n_resamples: int | None = None

    @property
    def n(self) -> int:
        return self.n_a + self.n_b

    def summary(self) -> str:
        return f"{self.name} statistic={self.statistic:.4g}, p={_fmt_p(self.pvalue)} ({self.method}); n={self.n_a}+{self.n_b}"


@dataclass(frozen=True, slots=True, kw_only=True)
class UniformityResult(_Test):
    """One test of u_1..u_n against the fully specified Uniform(0, 1)."""

    name: str
    statistic: float
    pvalue: float
    n: int
    dof: int | None = None

    def summary(self) -> str:
        dof = f", dof={self.dof}" if self.dof is not None else ""
        return f"{self.name} statistic={self.statistic:.4g}{dof}, p={_fmt_p(self.pvalue)}; n={self.n}"


@dataclass(frozen=True, slots=True, kw_only=True)
class PITResult(_Result):
    """Uniformity of randomized PIT values: KS, Cramér-von Mises, Anderson-Darling, and a
    chi-square on the ``len(histogram)``-bin histogram of u (bin counts kept for the report).

    A bundle of four single tests; ``tests()`` lists them for the decision layer.
    """

    n: int
    ks: UniformityResult
    cramervonmises: UniformityResult
    anderson_darling: UniformityResult
    histogram_chi2: UniformityResult
    histogram: tuple[int, ...]

    def tests(self) -> tuple[UniformityResult, ...]:
        return (self.ks, self.cramervonmises, self.anderson_darling, self.histogram_chi2)

    def summary(self) -> str:
        parts = ", ".join(f"{t.name} p={_fmt_p(t.pvalue)}" for t in self.tests())
        return f"PIT uniformity over {self.n} tokens: {parts}"


@dataclass(frozen=True, slots=True, kw_only=True)
class ZTestResult(_Test):
    """Martingale z-test Z = sum(f - E_p f) / sqrt(sum Var_p f), two-sided normal p-value.

    method ``"normal"``: the normal law (martingale CLT) with a one-term Edgeworth correction
    for the observed skewness on the side of the observed Z (never below the normal p-value),
    used when the effective number of jumps is at least the validity threshold; ``"e-process"``
    (``guarded``): below it, the always-valid p of a scale-free mixture e-process (conservative);
    ``"deterministic"``: zero variance. summed_variance: sum Var_p f; skewness:
    sum (f - E_p f)^3 / (sum Var_p f)^1.5; effective_jumps: (sum Var)^2 / sum E (f - E f)^4.

    observed_mean / expected_mean: mean of f and of E_p f over the n tokens used; effect is
    their difference (per-token bias of f, in f's units). excluded: tokens left out because
    f is undefined there (e.g. log p = -inf on a support violation, reported separately).
    """

    name: str
    statistic: float
    pvalue: float
    n: int
    observed_mean: float
    expected_mean: float
    excluded: int = 0
    summed_variance: float | None = None
    guarded: bool = False
    skewness: float = 0.0
    effective_jumps: float | None = None
    method: str = "normal"

    @property
    def effect(self) -> float:
        return self.observed_mean - self.expected_mean

    def summary(self) -> str:
        ex = f", {self.excluded} excluded" if self.excluded else ""
        if self.guarded:
            ex += (f"; {self.effective_jumps:.3g} effective jumps, too few for the normal tail: "
                   "always-valid e-process p")
        return (
            f"z {self.name} Z={self.statistic:.4g}, p={_fmt_p(self.pvalue)}; mean f {self.observed_mean:.5g} "
            f"vs expected {self.expected_mean:.5g} (n={self.n}{ex})"
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class SupportResult(_Test):
    """Tokens emitted with probability 0 under the processed target: a hard failure.

    statistic: how many; pvalue: 0 if any (impossible under H0), else 1; indices: their
    positions in the TokenScores arrays, so the caller can show each prefix.
    """

    statistic: int
    pvalue: float
    n: int
    indices: tuple[int, ...] = ()

    @property
    def failed(self) -> bool:
        return self.statistic > 0

    def summary(self) -> str:
        if not self.failed:
            return f"support: all {self.n} tokens have positive target probability"
        return f"support: {self.statistic} of {self.n} tokens have target probability 0 (hard failure)"


@dataclass(frozen=True, slots=True, kw_only=True)
class ComparisonResult(_Test):
    """Paired sign-flip comparison of a row score, candidate minus baseline (:mod:`speceq.stats.comparison`).

    statistic: Z = sum D / sqrt(sum D^2) over the pairs, D = candidate score - baseline score;
    pvalue: exact sign-flip p (integer scores) or the Bentkus-Dzindzalieta bound (method says
    which), valid at every level whatever the oracle's error. n_pairs: pairs used;
    n_informative: pairs with D != 0. mean_difference: mean D (score units per row), the effect;
    rms_difference: sqrt(mean D^2). baseline_mean / candidate_mean: mean score of each side's rows.
    """

    name: str
    statistic: float
    pvalue: float
    n_pairs: int
    n_informative: int
    mean_difference: float
    rms_difference: float
    baseline_mean: float
    candidate_mean: float
    method: str
    alternative: str = "two-sided"

    @property
    def n(self) -> int:
        return self.n_pairs

    @property
    def effect(self) -> float:
        return self.mean_difference

    def confidence_interval(self, level: float = 0.95) -> ConfidenceInterval:
        """Two-sided interval for the mean row-score difference under a location-shift model.

        The set of shifts delta for which the sign-flip bound does not reject D - delta at
        1 - level: {delta : |sum (D - delta)| < x ||D - delta||} with c* (1 - Phi(x)) = (1 - level) / 2.
        """
        n = self.n_pairs
        if n == 0:
            return ConfidenceInterval(low=-float("inf"), high=float("inf"), level=level)
        tail = (1.0 - level) / 2.0
        x = float(optimize.brentq(lambda t: BD_CONSTANT * stats.norm.sf(t) - tail, 0.0, 40.0))
        s1, s2 = self.mean_difference * n, self.rms_difference**2 * n
        if n <= x * x:
            return ConfidenceInterval(low=-float("inf"), high=float("inf"), level=level)
        centre = s1 / n
        disc = centre * centre - (s1 * s1 - x * x * s2) / (n * (n - x * x))
        half = float(disc) ** 0.5 if disc > 0 else 0.0
        return ConfidenceInterval(low=centre - half, high=centre + half, level=level)

    def summary(self) -> str:
        return (f"{self.name}: Z={self.statistic:.4g}, p={_fmt_p(self.pvalue)} ({self.method}, {self.alternative}); "
                f"mean row score candidate {self.candidate_mean:.5g} vs baseline {self.baseline_mean:.5g} "
                f"(difference {self.mean_difference:+.4g}; {self.n_pairs} pairs, {self.n_informative} differ)")


@dataclass(frozen=True, slots=True, kw_only=True)
class PooledComparisonResult(_Test):
    """One row score's paired comparison pooled over the cases of a run (:func:`speceq.stats.pooled_comparison`).

    statistic: Z = sum D / ||D|| over every pair of every case (each pair weighs the same; the
    cases' own z_c = sum D_c / ||D_c|| combined with weights ||D_c||, functions of the magnitudes
    only); pvalue: the exact sign-flip p of that sum (or its Bentkus-Dzindzalieta bound), valid
    at every level under the intersection null "no case's score is shifted", whatever the
    oracle's error. case_statistics: z_c per case, in input order (0 for a case without
    informative pairs), showing where the pooled shift leans. effect: the standardised mean
    difference over all pairs, mean D / rms D = Z / sqrt(n_pairs).
    """

    name: str
    statistic: float
    pvalue: float
    n_cases: int
    n_pairs: int
    case_statistics: tuple[float, ...]
    method: str
    alternative: str = "two-sided"

    @property
    def n(self) -> int:
        return self.n_pairs

    @property
    def effect(self) -> float:
        return self.statistic / self.n_pairs ** 0.5 if self.n_cases else 0.0

    def confidence_interval(self, level: float = 0.95) -> ConfidenceInterval:
        """Approximate interval for mean D / rms D: effect +- x / sqrt(n_pairs), c* (1 - Phi(x)) = (1 - level) / 2.

        Z has variance about 1 under a small location shift, so this is the sign-flip bound's
        interval on the standardised scale; it is exact only as n_pairs grows.
        """
        if self.n_cases == 0:
            return ConfidenceInterval(low=-float("inf"), high=float("inf"), level=level)
        x = float(optimize.brentq(lambda t: BD_CONSTANT * stats.norm.sf(t) - (1.0 - level) / 2.0, 0.0, 40.0))
        half = x / self.n_pairs ** 0.5
        return ConfidenceInterval(low=self.effect - half, high=self.effect + half, level=level)

    def summary(self) -> str:
        shown = ", ".join(f"{z:+.2f}" for z in self.case_statistics)
        return (f"{self.name}: Z={self.statistic:.4g}, p={_fmt_p(self.pvalue)} ({self.method}, {self.alternative}); "
                f"pooled over {self.n_cases} cases ({self.n_pairs} pairs), case z: {shown}")


@dataclass(frozen=True, slots=True, kw_only=True)
class SupportComparisonResult(_Test):
    """Rows with a token of probability 0 under the oracle, candidate against baseline (exact, one-sided).

    statistic: the candidate's count of such rows; pvalue: P(count >= observed) under H0 given
    each prompt's pooled count (stratified Fisher test). baseline_clean: the baseline has none,
    the only case in which a significant excess may be read as a hard failure of the candidate.
    """

    statistic: int
    pvalue: float
    baseline_rows: int
    candidate_rows: int
    baseline_flagged: int
    candidate_flagged: int

    @property
    def n(self) -> int:
        return self.baseline_rows + self.candidate_rows

    @property
    def baseline_clean(self) -> bool:
        return self.baseline_flagged == 0

    @property
    def baseline_rate(self) -> float:
        return self.baseline_flagged / self.baseline_rows if self.baseline_rows else 0.0

    @property
    def candidate_rate(self) -> float:
        return self.candidate_flagged / self.candidate_rows if self.candidate_rows else 0.0

    @property
    def effect(self) -> float:
        return self.candidate_rate - self.baseline_rate

    def confidence_interval(self, level: float = 0.95) -> ConfidenceInterval:
        """Newcombe's hybrid score interval for the difference of the two rates."""
        lo, hi = newcombe_interval(self.candidate_flagged, self.candidate_rows, self.baseline_flagged,
                                   self.baseline_rows, level)
        return ConfidenceInterval(low=lo, high=hi, level=level)

    def summary(self) -> str:
        return (f"support comparison: {self.candidate_flagged} of {self.candidate_rows} candidate rows vs "
                f"{self.baseline_flagged} of {self.baseline_rows} baseline rows hold a token of oracle probability 0, "
                f"p={_fmt_p(self.pvalue)} (exact, one-sided)")


@dataclass(frozen=True, slots=True, kw_only=True)
class IndependenceResult(_Test):
    """Do rows of one call (or batch) agree more often than rows of different calls? (exact, one-sided)

    statistic: agreeing within pairs at ``position``, the position with the smallest p-value (None:
    no pair to compare); pvalue: that position's stratified Fisher p-value times ``positions``
    (Bonferroni over every column), capped at 1. within_pairs / across_pairs: disjoint pairs of
    rows of one group / of two groups; within_agree / across_agree: how many of each agree at
    ``position``. The effect is the within minus the across agreement rate there, with Newcombe's
    interval at ``level`` (``low`` / ``high``; None when no position was tested).
    """

    name: str
    statistic: int
    pvalue: float
    position: int | None
    positions: int
    within_pairs: int
    across_pairs: int
    within_agree: int
    across_agree: int
    groups: int
    rows: int
    level: float
    low: float | None
    high: float | None

    @property
    def n(self) -> int:
        return self.rows

    @property
    def tested(self) -> bool:
        """Whether any pair was compared (at least one within and one across pair)."""
        return self.position is not None

    @property
    def within_rate(self) -> float:
        return self.within_agree / self.within_pairs if self.within_pairs else 0.0

    @property
    def across_rate(self) -> float:
        return self.across_agree / self.across_pairs if self.across_pairs else 0.0

    @property
    def effect(self) -> float:
        """Within minus across agreement rate at ``position`` (0 when nothing was tested)."""
        return self.within_rate - self.across_rate if self.tested else 0.0

    def confidence_interval(self, level: float | None = None) -> ConfidenceInterval:
        """Newcombe's interval of :attr:`effect` at the level the result was computed at (pairs are independent)."""
        if level is not None and level != self.level:
            raise ValueError(f"this result holds its interval at level {self.level:g}, not {level:g}")
        low = -1.0 if self.low is None else self.low
        high = 1.0 if self.high is None else self.high
        return ConfidenceInterval(low=low, high=high, level=self.level)

    def summary(self) -> str:
        if not self.tested:
            return (f"{self.name}: not tested ({self.rows} rows in {self.groups} call(s): no pair of rows of one call "
                    "to set against a pair of rows of two calls)")
        return (f"{self.name}: at position {self.position}, {self.within_agree} of {self.within_pairs} pairs of rows "
                f"of one call agree ({self.within_rate:.1%}) against {self.across_agree} of {self.across_pairs} pairs "
                f"of rows of two calls ({self.across_rate:.1%}), p={_fmt_p(self.pvalue)} (exact, one-sided, "
                f"Bonferroni over {self.positions} positions)")
