"""The exclusion margin of a token (speceq.stats.support_margin): exact against the processing itself."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from speceq.core.params import SamplingParams
from speceq.core.processing import process_logits
from speceq.stats.scores import TokenScores
from speceq.stats.support_margin import exclusion_margins, outside_margin


def _admitted(logits: np.ndarray, x: int, params: SamplingParams) -> bool:
    return bool(process_logits(torch.tensor(logits[None], dtype=torch.float64), params)[0, x] > 0)


def _favourable(logits: np.ndarray, x: int, delta: float) -> np.ndarray:
    """The perturbation of spread delta most favourable to x: x up, forced tokens down, the rest up to x."""
    h = delta / 2
    out = logits.copy()
    for j in range(logits.size):
        if j == x:
            out[j] = logits[j] + h
        elif logits[j] - logits[x] > delta:
            out[j] = logits[j] - h
        else:  # just below x's new level (float32 processing: a visible gap), no two at the same level
            out[j] = min(logits[j] + h, logits[x] + h - 1e-4 * (1 + j / 64))
    return out


def test_margin_is_exact_against_the_processing() -> None:
    """Below Delta* no perturbation of spread Delta admits x (random and extreme corners); just above, one does."""
    rng = np.random.default_rng(7)
    checked = 0
    for _ in range(150):
        vocab = int(rng.integers(3, 10))
        params = SamplingParams(temperature=float(rng.choice([0.5, 1.0, 1.3])), top_k=int(rng.choice([0, 2, 3, 5])),
                                top_p=float(rng.choice([1.0, 0.5, 0.8, 0.95])), max_new_tokens=1)
        if params.top_k == 0 and params.top_p == 1.0:
            continue
        logits, x = rng.normal(0.0, 2.0, vocab), int(rng.integers(vocab))
        d = float(exclusion_margins(logits[None], np.array([x]), temperature=params.temperature, top_k=params.top_k,
                                    top_p=params.top_p, tail_nats=float("inf"))[0])
        if d == 0:
            assert _admitted(_favourable(logits, x, 1e-3), x, params)
            continue
        checked += 1
        assert _admitted(_favourable(logits, x, d * 1.01 + 1e-3), x, params)
        assert not _admitted(_favourable(logits, x, d * 0.99), x, params)
        for _ in range(40):
            e = rng.uniform(-1, 1, vocab) * d * 0.99 / 2
            e = np.where(rng.random(vocab) < 0.5, np.sign(e) * d * 0.99 / 2, e)
            assert not _admitted(logits + e, x, params)
    assert checked > 60


def test_a_tie_at_the_top_k_cut_admits_x_below_the_margin_when_top_p_is_on() -> None:
    """The known limit of Delta*: it is exact over perturbations that leave no exact tie at the top-k cut.

    vLLM and transformers keep every token tied with the k-th logit, so a perturbation that ties two
    tokens there keeps k + 1 of them; with top-p on, the larger normaliser can admit x at a delta
    below Delta* (here at 0.99 Delta*). Pinned so that the docstring's claim stays true.
    """
    logits = np.array([1.1295, -2.4515, -1.2054, -3.7352, 2.8725])
    params = SamplingParams(temperature=1.0, top_k=3, top_p=0.5, max_new_tokens=1)
    d = float(exclusion_margins(logits[None], np.array([1]), temperature=1.0, top_k=3, top_p=0.5,
                                tail_nats=float("inf"))[0])
    h = d * 0.99 / 2
    tied = logits.copy()
    tied[1] += h  # x up
    tied[4] -= h  # the forced token down
    tied[0] = tied[2] = tied[1] - 1e-4  # both just below x, tied with each other at the k-th place
    tied[3] += h
    assert np.abs(tied - logits).max() <= h + 1e-9
    assert _admitted(tied, 1, params)
    tied[2] -= 1e-3  # the tie broken: exactly k kept, x excluded again
    assert not _admitted(tied, 1, params)


def test_top_k_margin_is_the_gap_to_the_kth_other_logit() -> None:
    logits = np.array([[3.0, 1.0, 0.0, -1.0]])
    assert exclusion_margins(logits, np.array([3]), temperature=1.0, top_k=2)[0] == pytest.approx(2.0)
    # temperature scales the processed logits, not the raw error: the same raw margin
    assert exclusion_margins(logits, np.array([3]), temperature=0.5, top_k=2)[0] == pytest.approx(2.0)
    assert exclusion_margins(logits, np.array([1]), temperature=1.0, top_k=2)[0] == 0.0  # in the support


def test_tail_tokens_may_rise_to_the_cut() -> None:
    """A token far below the top is treated as if at log-probability -C: its margin is that of the cut."""
    logits = np.array([[0.0, -1.0, -2.0, -40.0, -60.0]])
    deep = exclusion_margins(logits, np.array([4]), temperature=1.0, top_k=2, tail_nats=10.0)[0]
    cut = exclusion_margins(logits, np.array([3]), temperature=1.0, top_k=2, tail_nats=10.0)[0]
    lse = float(np.log(np.exp(logits).sum()))
    assert deep == pytest.approx(cut) == pytest.approx(-1.0 - (lse - 10.0))
    plain = exclusion_margins(logits, np.array([4]), temperature=1.0, top_k=2, tail_nats=float("inf"))[0]
    assert plain == pytest.approx(59.0)


def test_masked_tokens_are_outside_at_any_margin_and_no_truncation_has_no_outside() -> None:
    logits = np.array([[0.0, -np.inf, -1.0]])
    assert exclusion_margins(logits, np.array([1]), temperature=1.0, top_p=0.9)[0] == np.inf
    assert exclusion_margins(np.array([[0.0, -30.0]]), np.array([1]), temperature=1.0)[0] == 0.0


def _scores(prob: list[float], margin: list[float] | None) -> TokenScores:
    n = len(prob)
    z = np.zeros(n)
    return TokenScores(row=np.arange(n), position=np.zeros(n, dtype=np.int64), token=np.zeros(n, dtype=np.int64),
                       prob=np.array(prob), cdf_before=z, argmax_prob=z + 1, is_argmax=np.zeros(n, dtype=bool),
                       logp=np.log(np.maximum(prob, 1e-300)), raw_top2_margin=z,
                       exclusion_margin=None if margin is None else np.array(margin))


def test_outside_margin_rules() -> None:
    s = _scores([0.5, 0.0, 0.0], [0.0, 0.3, 2.0])
    assert outside_margin(s, 0.5).tolist() == [False, False, True]
    assert outside_margin(s, 0).tolist() == [False, True, True]  # 0: the exact-oracle rule
    assert outside_margin(_scores([0.0], None), 0.5) is None
    with pytest.raises(ValueError, match="margin_nats"):
        outside_margin(s, -1.0)


def test_outside_margin_at_inf_keeps_only_tokens_no_finite_error_admits() -> None:
    s = _scores([0.5, 0.0, 0.0], [0.0, 3.0, np.inf])
    assert outside_margin(s, np.inf).tolist() == [False, False, True]


def test_boundary_tokens_are_probability_zero_inside_the_margin() -> None:
    from speceq.stats.support_margin import boundary_tokens

    s = _scores([0.5, 0.0, 0.0, 0.0], [0.0, 0.3, 2.0, np.inf])
    assert boundary_tokens(s, 0.5).tolist() == [False, True, False, False]
    assert boundary_tokens(s, 0).tolist() == [False, False, False, False]  # the exact rule: none
    assert boundary_tokens(s, np.inf).tolist() == [False, True, True, False]
    assert not boundary_tokens(_scores([0.0], None), 0.5).any()  # no exclusion margins: nothing bounded
