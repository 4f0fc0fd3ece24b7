"""A/A calibration level 1: every primary test on synthetic data where H0 holds exactly.

R = 200 replicates per test at alpha = 0.05: the rejection rate must lie in
alpha +- 2 sqrt(alpha (1 - alpha) / R) = [0.019, 0.081], and the collected p-values must
look uniform (KS at a loose fixed threshold). Tests on heavily tied data (sequence lengths)
have discrete exact p-values, which are uniform only at their attainable levels
(P(p <= x) <= x); for them only the anti-conservative side is checked. Seeded: deterministic.
The band lets a test up to 1.6x liberal at 0.05 pass (a chi-square homogeneity p-value on one
degree of freedom too few did), so the homogeneity test's size is also computed exactly on
small tables (every table of the conditional null enumerated). Power sanity: a known shift is
detected by each family.
"""

from __future__ import annotations

import itertools
import math
from types import SimpleNamespace

import numpy as np
import pytest
from scipy import stats

from speceq.stats import chisquare_homogeneity, required_n_two_sample
from speceq.stats.calibration import collect_pvalues, oracle_replicate, rejection_band, two_sample_replicate

REPS = 200
ALPHA = 0.05
UNIFORMITY_THRESHOLD = 1e-3
DISCRETE = {"KS lengths", "CvM lengths"}
ORACLE_TESTS = [
    "PIT Kolmogorov-Smirnov", "PIT Cramér-von Mises", "PIT Anderson-Darling", "PIT histogram chi2",
    "z argmax leak", "z temperature drift", "z drift toward draft", "chi2 goodness of fit",
]
TWO_SAMPLE_TESTS = [
    "chi2 position 0", "chi2 position 2", "chi2 joint first 2", "chi2 sparse (Monte Carlo)", "KS lengths", "CvM lengths",
]


@pytest.fixture(scope="module")
def oracle_pvalues() -> dict[str, np.ndarray]:
    return collect_pvalues(oracle_replicate, REPS, seed=20240601)


@pytest.fixture(scope="module")
def two_sample_pvalues() -> dict[str, np.ndarray]:
    return collect_pvalues(two_sample_replicate, REPS, seed=20240602)


def _check(name: str, pvalues: np.ndarray) -> None:
    assert pvalues.size == REPS
    low, high = rejection_band(ALPHA, REPS)
    rate = float(np.mean(pvalues <= ALPHA))
    side = "greater" if name in DISCRETE else "two-sided"
    uniform_p = float(stats.kstest(pvalues, "uniform", alternative=side).pvalue)
    print(f"A/A {name}: R={REPS}, rejection rate {rate:.3f} at alpha={ALPHA} (band [{low:.3f}, {high:.3f}]), "
          f"KS({side}) p of p-values {uniform_p:.3g}")
    assert low <= rate <= high, f"{name}: rejection rate {rate:.3f} outside [{low:.3f}, {high:.3f}]"
    assert uniform_p > UNIFORMITY_THRESHOLD, f"{name}: p-values not uniform (KS p = {uniform_p:.3g})"


@pytest.mark.parametrize("name", ORACLE_TESTS)
def test_oracle_tests_are_calibrated(name: str, oracle_pvalues: dict[str, np.ndarray]) -> None:
    _check(name, oracle_pvalues[name])


@pytest.mark.parametrize("name", TWO_SAMPLE_TESTS)
def test_two_sample_tests_are_calibrated(name: str, two_sample_pvalues: dict[str, np.ndarray]) -> None:
    _check(name, two_sample_pvalues[name])


def conditional_size(margins: tuple[int, ...], n_a: int, alpha: float) -> float:
    """P(chisquare_homogeneity p <= alpha | both margins), exactly: a sum over every table.

    Under H0, given the column sums ``margins`` and group a's size ``n_a``, group a's row is
    multivariate hypergeometric; every such row is enumerated with its probability.
    """
    m = np.array(margins)
    log_total = math.lgamma(m.sum() + 1) - math.lgamma(n_a + 1) - math.lgamma(m.sum() - n_a + 1)
    size = 0.0
    for head in itertools.product(*(range(x + 1) for x in m[:-1])):
        row = np.array([*head, n_a - sum(head)])
        if not 0 <= row[-1] <= m[-1]:
            continue
        log_w = sum(math.lgamma(x + 1) - math.lgamma(r + 1) - math.lgamma(x - r + 1) for x, r in zip(m, row))
        if chisquare_homogeneity(row, m - row).pvalue <= alpha:
            size += math.exp(log_w - log_total)
    return size


#: (margins, n_a, alpha): equal groups, every label its own bin. Exact sizes 0.043-0.056 at 0.05 and 0.0084 at 0.01;
#: with the chi-square law at one degree of freedom too few, 0.13-0.20 and 0.034.
SMALL_TABLES = [((20, 20, 20), 30, 0.05), ((30, 20, 10), 30, 0.05), ((25, 15, 12), 26, 0.05), ((20, 20, 20), 30, 0.01)]
#: Tolerated factor of the exact conditional size over alpha (the chi-square law is asymptotic).
SMALL_TABLE_FACTOR = 1.2


@pytest.mark.parametrize(("margins", "n_a", "alpha"), SMALL_TABLES)
def test_chi_square_homogeneity_size_is_exact_on_small_tables(margins: tuple[int, ...], n_a: int, alpha: float) -> None:
    """The chi-square rows above (R = 200) cannot see a p-value 1.5x too liberal; the exact conditional
    size can: it must stay within SMALL_TABLE_FACTOR x alpha (no sampling noise)."""
    assert conditional_size(margins, n_a, alpha) <= SMALL_TABLE_FACTOR * alpha


def test_the_exact_size_check_fails_a_chi_square_with_one_dof_too_few(monkeypatch: pytest.MonkeyPatch) -> None:
    """Planted bug: the homogeneity p-value from chi2(K - 2) instead of chi2(K - 1) (anti-conservative)."""
    import speceq.stats.twosample as twosample

    chi2 = stats.chi2
    monkeypatch.setattr(twosample, "stats", SimpleNamespace(chi2=SimpleNamespace(sf=lambda x, df: chi2.sf(x, df - 1))))
    margins, n_a, alpha = SMALL_TABLES[0]
    assert conditional_size(margins, n_a, alpha) > 2 * alpha


def test_every_replicate_test_is_checked(oracle_pvalues: dict, two_sample_pvalues: dict) -> None:
    assert set(oracle_pvalues) == set(ORACLE_TESTS) and set(two_sample_pvalues) == set(TWO_SAMPLE_TESTS)


def test_two_sample_power_at_the_design_size() -> None:
    """Power sanity: at required_n_two_sample the homogeneity test detects the worst-case
    TV shift 0.1 on 4 labels (|q - p| proportional to p, so w^2 = 4 delta^2) in about 90%
    of R = 200 replicates."""
    k, delta = 4, 0.1
    n = required_n_two_sample(delta, k, ALPHA)
    p = np.full(k, 1 / k)
    q = p + (delta / 2) * np.array([1, 1, -1, -1])
    assert 0.5 * np.abs(q - p).sum() == pytest.approx(delta)
    assert ((q - p) ** 2 / p).sum() == pytest.approx(4 * delta**2)
    rng = np.random.default_rng(99)
    rejected = [
        chisquare_homogeneity(rng.multinomial(n, p), rng.multinomial(n, q), method="asymptotic").pvalue <= ALPHA
        for _ in range(REPS)
    ]
    rate = float(np.mean(rejected))
    print(f"power at n={n} per group: {rate:.3f} over R={REPS}")
    assert abs(rate - 0.9) <= 2 * np.sqrt(0.9 * 0.1 / REPS) + 0.02
