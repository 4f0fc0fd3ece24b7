"""The size computation of benchmarks/kernel_gof_size.py against a full enumeration of a small multinomial."""

from __future__ import annotations

import numpy as np
from benchmark_scripts import load_script
from scipy import stats

from speceq.kernels.gof import chain_gof


def _script():  # noqa: ANN202
    return load_script("kernel_gof_size")


def test_dynamic_programme_and_tilted_sampling_match_the_enumerated_size() -> None:
    size = _script()
    law, n = np.array([0.5, 0.3, 0.2]), 150  # 3 bins of expected count >= 20: two chained binomials
    levels = (1e-3, 1e-4, 1e-5)
    pv, wt, pmin = [], [], []
    for a in range(n + 1):
        for b in range(n + 1 - a):
            c = np.array([a, b, n - a - b])
            res = chain_gof(c, law)
            pv.append(res.pvalue)
            pmin.append(res.min_chain_p)
            wt.append(stats.multinomial.pmf(c, n, law))
    pv, wt, pmin = np.array(pv), np.array(wt), np.array(pmin)
    got = size.size_of(law, n, 20000, np.random.default_rng(0), levels=levels)
    assert got["bins"] == 3 and got["chain_gof_max_rel_diff"] < 1e-9
    for u in levels:
        row = got["levels"][f"{u:.3g}"]
        exact_min = float(wt[2 * 2 * pmin <= u].sum())
        assert abs(row["min_part_exact"] - exact_min) <= 1e-12 + 1e-9 * exact_min, u
        enumerated = float(wt[pv <= u].sum())
        assert enumerated <= u
        assert abs(row["size"] - enumerated) <= 4 * row["fisher_only_se"] + 1e-3 * enumerated, (u, row, enumerated)


def test_all_cases_select_every_planned_test_of_the_check_once() -> None:
    """``--cases all`` sizes exactly the check's planned tests (Holm's m), each once, at its expected n."""
    from speceq.kernels.kernel_check import planned_tests
    from speceq.kernels.reference_kernels import reference_kernel
    from speceq.kernels.scenarios import default_scenarios

    size = _script()
    spec = reference_kernel("ragged").spec
    small = [s for s in default_scenarios(spec, seed=0) if s.vocab_size <= 61]
    chosen = size.select_tests(small, spec, "all")
    assert len(chosen) == planned_tests(small, spec) == 157  # 122 before the min-p templates (2026-12-07)
    keys = {(scen, tpl.name, test.component, test.position) for scen, tpl, test, _ in chosen}
    assert len(keys) == len(chosen)
    assert all(n == int(round(test.expected_n)) for _, _, test, n in chosen)
    flagged = size.select_tests(small, spec, "flagged")
    assert len(flagged) == 37 and {(s, t.name, x.component, x.position) for s, t, x, _ in flagged} <= keys
    rest = size.select_tests(small, spec, "unflagged")
    assert len(rest) == 157 - 37 and not {(s, t.name, x.component, x.position) for s, t, x, _ in rest} & {
        (s, t.name, x.component, x.position) for s, t, x, _ in flagged}
