"""Per-token oracle scores: the interface between the oracle (torch) and the pure tests.

The oracle scores every generated token of a sample set by teacher forcing with the
target model and the same logit processing as the engines, and reduces each position's
processed distribution ``p_t`` to the few numbers the oracle tests need. Everything here
is numpy; 1 M tokens take ~100 MB.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np

#: Cap of the bounded draft score min(q / p, cap): a token the draft proposes 10x more often than
#: the target scores 10, whatever the ratio (log q - log p with a floored q was unbounded).
DRAFT_RATIO_CAP = 10.0


@dataclass(frozen=True, slots=True, kw_only=True)
class TokenScores:
    """Flattened per-token arrays, all of length N (generated tokens, EOS included).

    row, position: which sample row and which generated position (0-based) the token is.
    token: the emitted token id x_t.
    prob: p_t(x_t) under the processed target (0 means a hard failure).
    cdf_before: F_t(x_t-), the processed mass of tokens ranked before x_t when the
        vocabulary is sorted by descending p_t (ties by ascending token id).
    argmax_prob: max p_t; is_argmax: x_t is the argmax (ties to the lowest id).
    logp: log p_t(x_t) (natural log; -inf when prob == 0).
    logp_mean, logp_var: E_{p_t}[log p] (= -entropy, nats) and Var_{p_t}[log p] over the support.
        ``None`` when the oracle does not know the whole law (a server's top-K log-probabilities:
        :class:`speceq.oracles.server.ServerOracle`); the log-likelihood tests then do not run.
    logp_m4: E_{p_t}[(log p - E log p)^4] (nats^4), the fourth central moment the one-sample
        z-test's validity condition uses (:func:`speceq.stats.martingale.effective_jumps`);
        ``None``: not computed (the condition then uses the observed fourth powers).
    raw_top2_margin: log-prob of the raw (unprocessed, T=1) top-1 minus top-2 token (nats),
        used to classify greedy divergences as numerical near-ties.
    draft_llr, draft_llr_mean, draft_llr_var: f = log q_t(x) - log p_t(x) with q_t the
        processed draft distribution (q floored at 1e-30), and its mean and variance under
        p_t. ``None`` when no draft model is given to the oracle.
    draft_ratio, draft_ratio_mean, draft_ratio_var, draft_ratio_m4: the bounded draft score
        f = min(q_t(x) / p_t(x), DRAFT_RATIO_CAP) (q_t unfloored; p_t(x) = 0 gives the cap) and
        its mean, variance and fourth central moment under p_t. ``None`` without a draft, or
        from an oracle that does not compute them.
    draft_tv: TV(p_t, q_t), the total variation between the processed target and draft laws
        at the token's prefix (1 - draft_tv is the expected acceptance of a draft there).
        ``None`` when no draft model is given to the oracle.
    exclusion_margin: Delta*(x_t), raw-logit nats (:func:`speceq.stats.support_margin.exclusion_margins`):
        the largest logit error (spread, with the tail rule there) at which every law that close
        to the oracle's still excludes x_t under the case's processing; 0 for tokens in the
        support (and for greedy cases), +inf for a token no finite error admits (EOS under
        ``ignore_eos``). ``None``: the oracle cannot compute it (a server's top-K log-probabilities).
    pit_mass: the mass of the token's PIT cell when the ranking is coarsened (top-K tokens plus
        one tail cell, :mod:`speceq.stats.coarse_pit`): the token's probability inside the
        top-K, the tail mass outside it, whose ``cdf_before`` is then the top-K mass. ``None``:
        exact ranking, the cell is [cdf_before, cdf_before + prob].
    """

    row: np.ndarray
    position: np.ndarray
    token: np.ndarray
    prob: np.ndarray
    cdf_before: np.ndarray
    argmax_prob: np.ndarray
    is_argmax: np.ndarray
    logp: np.ndarray
    logp_mean: np.ndarray | None = None
    logp_var: np.ndarray | None = None
    raw_top2_margin: np.ndarray
    draft_llr: np.ndarray | None = None
    draft_llr_mean: np.ndarray | None = None
    draft_llr_var: np.ndarray | None = None
    draft_tv: np.ndarray | None = None
    logp_m4: np.ndarray | None = None
    draft_ratio: np.ndarray | None = None
    draft_ratio_mean: np.ndarray | None = None
    draft_ratio_var: np.ndarray | None = None
    draft_ratio_m4: np.ndarray | None = None
    pit_mass: np.ndarray | None = None
    exclusion_margin: np.ndarray | None = None

    def __post_init__(self) -> None:
        n = len(self.token)
        for f in fields(self):
            v = getattr(self, f.name)
            if v is not None and len(v) != n:
                raise ValueError(f"`{f.name}` has length {len(v)}, expected {n} (length of `token`)")

    def __len__(self) -> int:
        return len(self.token)

    @property
    def has_draft(self) -> bool:
        return self.draft_llr is not None

    @property
    def has_draft_ratio(self) -> bool:
        """The bounded draft score and its moments under p are present."""
        return self.draft_ratio is not None and self.draft_ratio_mean is not None and self.draft_ratio_var is not None

    @property
    def has_full_law(self) -> bool:
        """The oracle knew each whole law: log-likelihood moments present, ranking not coarsened."""
        return self.logp_mean is not None and self.logp_var is not None and self.pit_mass is None

    def select(self, mask: np.ndarray) -> TokenScores:
        """Subset of tokens (boolean mask or index array)."""
        return TokenScores(**{f.name: (None if getattr(self, f.name) is None else getattr(self, f.name)[mask]) for f in fields(self)})

    @staticmethod
    def concatenate(parts: list[TokenScores]) -> TokenScores:
        if not parts:
            raise ValueError("`parts` is empty")
        out = {}
        for f in fields(TokenScores):
            vals = [getattr(p, f.name) for p in parts]
            out[f.name] = None if any(v is None for v in vals) else np.concatenate(vals)
        return TokenScores(**out)
