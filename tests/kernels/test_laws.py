"""Exact laws: the reached-position property for every method, closed forms, block verification."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from speceq.kernels import laws


def _one_call_law_tokenwise(P: np.ndarray, Q: np.ndarray, method: str) -> dict[tuple[int, ...], float]:
    """Exact law of one call of a token-wise method, by enumeration (independent of laws.py's closed forms)."""
    k, v = Q.shape
    out: dict[tuple[int, ...], float] = {}

    def walk(i: int, prefix: tuple[int, ...], prob: float) -> None:
        if i == k:
            for y in range(v):
                out[(*prefix, y)] = out.get((*prefix, y), 0.0) + prob * P[k, y]
            return
        for d in range(v):
            if Q[i, d] == 0:
                continue
            acc = min(1.0, P[i, d] / Q[i, d]) if method == "standard" else P[i, d]
            walk(i + 1, (*prefix, d), prob * Q[i, d] * acc)
            if acc < 1:
                res = np.clip(P[i] - Q[i], 0, None) if method == "standard" else np.where(np.arange(v) == d, 0, P[i])
                res = res / res.sum()
                for y in range(v):
                    if res[y] > 0:
                        key = (*prefix, y)
                        out[key] = out.get(key, 0.0) + prob * Q[i, d] * (1 - acc) * res[y]

    walk(0, (), 1.0)
    return out


def _reached_property_error(law: dict[tuple[int, ...], float], P: np.ndarray) -> float:
    """max |P(prefix s, x at m) - R_m(s) p_m(x)| over every prefix."""
    k = P.shape[0] - 1
    v = P.shape[1]

    def starts(pre: tuple[int, ...]) -> float:
        return sum(pr for seq, pr in law.items() if seq[: len(pre)] == pre)

    worst = 0.0
    for m in range(k + 1):
        for s in itertools.product(range(v), repeat=m):
            reach = sum(starts((*s, x)) for x in range(v))
            for x in range(v):
                worst = max(worst, abs(starts((*s, x)) - reach * P[m, x]))
    return worst


@pytest.mark.parametrize("method", ["standard", "one-hot", "block"])
def test_every_method_emits_p_at_every_reached_position(method: str) -> None:
    rng = np.random.default_rng(3)
    P = rng.dirichlet(np.ones(3), size=3)
    Q = rng.dirichlet(np.ones(3), size=2)
    Q[1, 2] = 0.0
    Q[1] /= Q[1].sum()
    law = laws.block_one_call_law(P, Q) if method == "block" else _one_call_law_tokenwise(P, Q, method)
    assert sum(law.values()) == pytest.approx(1.0)
    assert _reached_property_error(law, P) < 1e-12


def test_a_wrong_method_breaks_the_property() -> None:
    """The property can fail: resampling from p after a rejection breaks it."""
    rng = np.random.default_rng(4)
    P = rng.dirichlet(np.ones(3), size=2)
    Q = rng.dirichlet(np.ones(3), size=1)
    law: dict[tuple[int, ...], float] = {}
    for d in range(3):
        acc = min(1.0, P[0, d] / Q[0, d])
        for y in range(3):
            law[(d, y)] = law.get((d, y), 0.0) + Q[0, d] * acc * P[1, y]
            law[(y,)] = law.get((y,), 0.0) + Q[0, d] * (1 - acc) * P[0, y]  # the bug: residual = p
    assert _reached_property_error(law, P) > 1e-3


@pytest.mark.parametrize("method", ["standard", "one-hot", "block"])
def test_length_laws_match_the_enumerated_call(method: str) -> None:
    rng = np.random.default_rng(5)
    P = rng.dirichlet(np.ones(4), size=4)
    Q = rng.dirichlet(np.ones(4), size=3)
    law = laws.block_one_call_law(P, Q) if method == "block" else _one_call_law_tokenwise(P, Q, method)
    lengths = np.zeros(4)
    for seq, pr in law.items():
        lengths[len(seq) - 1] += pr
    if method == "block":
        got = laws.block_length_law(P, Q)
    else:
        got = laws.tokenwise_length_law(np.array([laws.acceptance(P[i], Q[i], method) for i in range(3)]))
    np.testing.assert_allclose(got, lengths, atol=1e-12)


def test_block_accepts_more_than_standard() -> None:
    rng = np.random.default_rng(6)
    P = rng.dirichlet(np.ones(5), size=4)
    Q = rng.dirichlet(np.ones(5), size=3)
    standard = laws.tokenwise_length_law(np.array([laws.acceptance(P[i], Q[i], "standard") for i in range(3)]))
    block = laws.block_length_law(P, Q)
    assert (np.arange(4) * block).sum() > (np.arange(4) * standard).sum()


def test_component_laws() -> None:
    p = np.array([0.5, 0.3, 0.2, 0.0])
    q = np.array([0.2, 0.2, 0.2, 0.4])
    assert laws.acceptance(p, q, "standard") == pytest.approx(0.6)
    np.testing.assert_allclose(laws.accepted_law(p, q, "standard"), np.array([0.2, 0.2, 0.2, 0]) / 0.6)
    np.testing.assert_allclose(laws.recovered_law(p, q, "standard"), np.array([0.3, 0.1, 0, 0]) / 0.4)
    assert laws.acceptance(p, q, "one-hot") == pytest.approx(0.2)
    np.testing.assert_allclose(laws.recovered_law(p, q, "one-hot"), p * (1 - q) / 0.8)
    assert laws.recovered_law(p, p, "standard") is None  # no rejection possible
    assert laws.block_length_law(np.ones((3, 800)) / 800, np.ones((2, 800)) / 800) is None  # too many sequences


def test_residual_mass_matches_the_direct_sum() -> None:
    rng = np.random.default_rng(7)
    p = rng.dirichlet(np.ones(50))
    q = rng.dirichlet(np.ones(50))
    p[3] = 0.0
    p /= p.sum()
    w = rng.random(200)
    direct = np.clip(w[:, None] * p[None] - q[None], 0, None).sum(axis=1)
    np.testing.assert_allclose(laws.residual_mass(w, p, q), direct, atol=1e-12)
