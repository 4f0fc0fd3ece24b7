"""Seeded subset of the tail calibration (benchmarks/tail_calibration.py has the full sweep).

Every primary test's size at the level it is compared at, on laws that need no model (a
peaked law, a sparse law, the length law of an EOS-prone case, random conditional laws),
with a one-sided 3-sigma band; and a pipeline-level A/A of the whole analysis + decision.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import tail_calibration as tc  # noqa: E402

from speceq.stats import chisquare_homogeneity  # noqa: E402

LEVEL = 1e-3


def _band(level: float, reps: int) -> float:
    return level + 3.0 * math.sqrt(level * (1 - level) / reps)


def _laws() -> list[tc.Law]:
    rng = np.random.default_rng(3)
    _, peaked, eos = tc.synthetic_laws()
    moderate = rng.dirichlet(np.full(259, 0.08))  # a T ~ 1 first-token-like law
    return [peaked, eos, tc.Law("dirichlet(0.08) over 259", moderate)]


@pytest.mark.parametrize(("law", "groups"), [
    (_laws()[0], ((3000, 3000),)),
    (_laws()[1], ((3000, 3000), (3000, 600))),
    (_laws()[2], ((3000, 3000),)),
], ids=lambda x: x.name if isinstance(x, tc.Law) else str(x))
def test_chi2_tests_hold_their_size_at_1e_3(law: tc.Law, groups: tuple[tuple[int, int], ...]) -> None:
    reps = 10_000
    rng = np.random.default_rng(10)
    for n_a, n_b in groups:
        pv = tc.homogeneity_null_pvalues(law.probs, n_a, n_b, reps, rng, check=20)
        assert (pv <= LEVEL).mean() <= _band(LEVEL, reps), (law.name, n_a, n_b)
    if law.kind == "token":
        pv = tc.gof_null_pvalues(law.probs, 3000, reps, rng)
        assert (pv <= LEVEL).mean() <= _band(LEVEL, pv.size), law.name


def test_vectorised_homogeneity_matches_the_real_function() -> None:
    """The sweep's per-replicate binning equals chisquare_homogeneity's (its own check raises)."""
    law = tc.synthetic_laws()[1].probs  # peaked: the merged bin is often folded
    pv = tc.homogeneity_null_pvalues(law, 3000, 600, 100, np.random.default_rng(1), check=100)
    assert pv.shape == (100,) and np.all((pv >= 0) & (pv <= 1))


def test_lumped_32k_law_gives_the_real_functions_p_values() -> None:
    """A 32 000-label law is drawn over its keepable labels plus one lump; the p-values are the
    function's on the unlumped counts (the sweep's own check compares every replicate here)."""
    rng = np.random.default_rng(4)
    law = rng.dirichlet(np.full(32_000, 0.05))
    p, inside = tc.lump_unkeepable(law, 6000, 10.0)
    assert inside is not None and p.size < 4000 and p.sum() == pytest.approx(1.0)
    pv = tc.homogeneity_null_pvalues(law, 3000, 3000, 60, np.random.default_rng(2), check=60)
    assert pv.shape == (60,) and np.all((pv > 0) & (pv <= 1))


def test_vectorised_martingale_p_values_are_the_functions() -> None:
    """The sweep's vectorised z-test p-value (skewness-corrected) equals martingale_z's; it raises if not."""
    rng = np.random.default_rng(12)
    contexts = rng.dirichlet(np.full(259, 0.05), size=16)
    out = tc.martingale_null_pvalues(contexts, 300, 50, rng, contexts[::-1])
    assert set(out) == {"z argmax leak", "z temperature drift", "z draft drift", "z draft ratio"}


@pytest.mark.slow
def test_bpe_laws_two_sample_tests_hold_their_size_at_1e_3() -> None:
    """The 32k BPE world's first-token laws, equal and unequal groups, R = 10^4 (loads the BPE target)."""
    reps = 10_000
    rng = np.random.default_rng(21)
    for law in tc.bpe_laws(((0, 1.0), (6, 0.7))):
        for n_a, n_b in ((3000, 3000), (3000, 600)):
            pv = tc.homogeneity_null_pvalues(law.probs, n_a, n_b, reps, rng, check=20)
            assert (pv <= LEVEL).mean() <= _band(LEVEL, reps), (law.name, n_a, n_b)


def test_martingale_and_pit_tests_hold_their_size_at_1e_3() -> None:
    rng = np.random.default_rng(11)
    contexts = rng.dirichlet(np.full(259, 0.05), size=64)  # peaked conditional laws
    reps = 5_000
    for name, pv in tc.martingale_null_pvalues(contexts, 300, reps, rng, contexts[::-1]).items():
        assert (pv <= LEVEL).mean() <= _band(LEVEL, reps), name
    pv = tc.pit_ad_null_pvalues(300, reps, rng)
    assert (pv <= LEVEL).mean() <= _band(LEVEL, reps)


def test_monte_carlo_fallback_p_is_valid_in_the_tail() -> None:
    """Tiny tables (no label meets the rule) use the sized Monte Carlo: P(p <= 0.01) <= 0.01."""
    rng = np.random.default_rng(12)
    p = np.array([0.5, 0.3, 0.2])
    pv = np.array([chisquare_homogeneity(rng.multinomial(8, p), rng.multinomial(6, p), rng=rng, mc_level=0.01).pvalue
                   for _ in range(600)])
    assert (pv <= 0.01).mean() <= _band(0.01, pv.size)


def test_pipeline_false_shifted_rate_is_at_most_alpha() -> None:
    """The whole analysis + decision on A/A runs (Markov models with EOS, exact oracle)."""

    def models(boost: float) -> tuple[np.ndarray, np.ndarray]:
        r = np.random.default_rng(5)
        init = r.dirichlet(np.full(259, 0.1))
        trans = r.dirichlet(np.full(259, 0.1), size=259)
        if boost:
            trans = trans * (1 - boost)
            trans[:, 257] += boost
        return init, trans

    alpha, runs = 0.1, 20
    ((shifted, total),) = tc.pipeline_aa(runs, 300, (alpha,), seed=3, models=models).values()
    assert shifted / total <= _band(alpha, total)


def test_pipeline_aa_names_the_test_behind_each_false_shift() -> None:
    """At a large alpha some A/A runs are shifted; each is reported with the test whose Holm p decided it."""
    def models(boost: float) -> tuple[np.ndarray, np.ndarray]:
        r = np.random.default_rng(5)
        return r.dirichlet(np.full(259, 0.1)), r.dirichlet(np.full(259, 0.1), size=259)

    fired: list[tuple[int, float, str, str, float, float]] = []
    ((shifted, _),) = tc.pipeline_aa(30, 200, (0.5,), seed=4, models=models, fired=fired).values()
    assert shifted >= 1 and len(fired) == shifted
    for _run, alpha, case, test, raw, adjusted in fired:
        assert alpha == 0.5 and case.startswith("markov-") and test
        assert raw <= adjusted <= 0.5


def test_aa_table_flags_an_excess_of_false_shifts() -> None:
    table = tc.format_aa_table({0.01: (14, 1000), 0.001: (9, 1000)})
    rows = [line.split("|") for line in table.splitlines() if line.startswith("| 0.0")]
    assert rows[0][-2].strip() == "yes" and rows[1][-2].strip() == "NO"
    assert float(rows[1][7]) < 1e-3  # 9 where 1 is expected
