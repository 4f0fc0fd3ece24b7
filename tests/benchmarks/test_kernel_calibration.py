"""The calibration benchmark gives every variant its own seed stream (independent false-alarm counts)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import torch
from benchmark_scripts import load_script
from scipy import stats

from speceq.kernels.contract import SingleRequest


def _script():  # noqa: ANN202
    return load_script("kernel_calibration")


def test_collection_seeds_are_distinct_per_variant_seed_and_block() -> None:
    cal = _script()
    variants = ("reference", "exponential-race", "block", "one-hot-path", "exact-match", "padded-reference",
                "single-reference")
    seeds = {(v, s, b): cal.collection_seed(v, s, b) for v in variants for s in (0, 1) for b in range(40)}
    assert len(set(seeds.values())) == len(seeds)  # no two (variant, --seed, block) share a stream
    assert all(0 <= x < 2**63 for x in seeds.values())
    assert cal.collection_seed("block", 0, 3) == cal.collection_seed("block", 0, 3)  # reproducible


class _Fixed:
    """A stand-in generator whose uniforms are all one value (the two ends of the randomization)."""

    def __init__(self, value: float) -> None:
        self.value = value

    def random(self, size: int) -> np.ndarray:
        return np.full(size, self.value)


def test_single_reference_variant_is_the_single_request_contract_on_its_own_stream() -> None:
    """``--variant single-reference`` calls the reference one request at a time (transformers' shape)."""
    cal = _script()
    single, ragged = cal.make_kernel("single-reference"), cal.make_kernel("reference")
    assert single.spec.layout == "single" and ragged.spec.layout == "ragged"
    assert single.spec.method == ragged.spec.method == "standard" and single.spec.uniforms
    req = SingleRequest(vocab_size=2, draft_token_ids=torch.tensor([1]), draft_probs=torch.tensor([[0.0, 1.0]]),
                        target_probs=torch.tensor([[0.5, 0.5], [0.25, 0.75]]), uniforms=torch.tensor([0.9]),
                        sample_uniform=0.1, seed=0, generator=torch.Generator())
    assert single(req).tokens.tolist() == [0]  # u = 0.9 > p/q = 0.5 rejects 1; the residual is all on 0
    accepted = replace(req, uniforms=torch.tensor([0.4]))
    assert single(accepted).tokens.tolist() == [1, 0]  # accepted; the bonus ~ [0.25, 0.75] at 0.1 is 0
    own = {cal.collection_seed("single-reference", 0, b) for b in range(100)}
    assert not own & {cal.collection_seed(v, 0, b) for v in ("reference", "padded-reference") for b in range(100)}


def test_chain_randomized_p_values_are_exactly_uniform_by_enumeration() -> None:
    """P(p <= u) = u exactly over all n + 1 outcomes of a 2-bin law (mean 70 integer: mirrored atoms)."""
    cal = _script()
    law, n = np.array([0.3, 0.7]), 100
    for u in (0.5, 0.05, 1e-3, 1e-5, 1e-7):
        total = 0.0
        for x in range(n + 1):
            labels = np.array([0] * x + [1] * (n - x))
            low = cal.chain_randomized(labels, law, _Fixed(0.0))[0]
            high = cal.chain_randomized(labels, law, _Fixed(1.0))[0]
            share = 1.0 if high <= u else (0.0 if low > u else (u - low) / (high - low))
            total += stats.binom.pmf(x, n, 0.3) * share
        assert abs(total - u) <= 1e-9 * u + 1e-15, (u, total)


def test_tree_variants_split_one_collection_into_independent_checks(monkeypatch, tmp_path, capsys) -> None:  # noqa: ANN001
    """``--variant tree-target-only``: B checks from one collection, each with its own requests and all planned tests."""
    import json
    import sys

    from speceq.kernels.trees import collect_tree, default_tree_scenarios, planned_tree_tests, tree_tests

    cal = _script()
    kern = cal.make_kernel("tree-multi-draft")
    assert kern.spec.layout == "tree" and kern.spec.method == "multi-draft"
    base = [s for s in default_tree_scenarios(kern.spec, scale=0.05) if s.vocab_size <= 61]
    big = [replace(s, replicates=3 * s.replicates) for s in base]
    rec = collect_tree(kern, big, seed=1)
    planned = planned_tree_tests(base, kern.spec.method)
    runs = [[cal._tree_slice(r, s, run) for r, s in zip(rec, base)] for run in range(3)]
    for run, chunk in enumerate(runs):
        for r, s in zip(chunk, base):
            for t in s.templates:
                mine = r.records[t.name]
                assert mine.paths[0].shape[0] == s.copies(t)  # one check's requests
                whole = rec[base.index(s)].records[t.name].paths[0]
                assert np.array_equal(mine.paths[0], whole[run * s.copies(t):(run + 1) * s.copies(t)])
        assert len(tree_tests(chunk, planned, tv_alpha=1e-4)) == len(planned)
    out = tmp_path / "cal.json"
    monkeypatch.setattr(sys, "argv", ["kernel_calibration", "--variant", "tree-target-only", "--runs", "4",
                                      "--block", "2", "--json", str(out)])
    assert cal.main() == 0
    capsys.readouterr()
    d = json.loads(out.read_text())
    assert d["runs"] == 4 and d["scenarios"] == ["tree-v61", "tree-v2"] and d["violations"] == 0
    target_only = cal.make_kernel("tree-target-only").spec
    assert d["planned_tests"] == len(planned_tree_tests(
        [s for s in default_tree_scenarios(target_only) if s.vocab_size <= 61], "target-only"))
    assert d["per_test_size"]["0.01"]["tests"] == 4 * d["planned_tests"]
