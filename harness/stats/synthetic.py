"""Exact synthetic sampler and scorer: A/A calibration level 1 and power checks of the tests.

Draws random next-token distributions, samples tokens from them (or from a deliberately
shifted law) and computes the :class:`TokenScores` an oracle would produce, so the oracle
tests can be checked against their own p without any model. Pure numpy; memory is
O(tokens x vocab) float64, so build large sets in chunks.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from speceq.stats._validate import check_int, check_positive, check_rng
from speceq.stats.scores import DRAFT_RATIO_CAP, TokenScores
from speceq.stats.support_margin import exclusion_margins


def _random_target_probs_iv(rng: object, n: object, vocab: object, top_k: object) -> tuple[np.random.Generator, int, int, int]:
    rng = check_rng(rng)
    n = check_int(n, "n", minimum=1)
    vocab = check_int(vocab, "vocab", minimum=2)
    top_k = check_int(top_k, "top_k", minimum=0)
    if top_k > vocab:
        raise ValueError(f"`top_k` ({top_k}) exceeds `vocab` ({vocab})")
    return rng, n, vocab, top_k


def random_target_probs(rng: np.random.Generator, n: int, vocab: int, *, top_k: int = 0) -> np.ndarray:
    """``[n, vocab]`` distributions: softmax of N(0, s^2) logits with s ~ U(0.5, 3) per row.

    ``top_k > 0`` keeps the k most probable tokens (ties by id) and renormalises, so the
    support check has zeros to find.
    """
    rng, n, vocab, top_k = _random_target_probs_iv(rng, n, vocab, top_k)
    logits = rng.standard_normal((n, vocab)) * rng.uniform(0.5, 3.0, size=(n, 1))
    probs = np.exp(logits - logits.max(axis=1, keepdims=True))
    if top_k:
        order = np.argsort(-probs, axis=1, kind="stable")
        np.put_along_axis(probs, order[:, top_k:], 0.0, axis=1)
    return probs / probs.sum(axis=1, keepdims=True)


def _sample_categorical_iv(probs: object, rng: object) -> tuple[np.ndarray, np.random.Generator]:
    p = np.asarray(probs, dtype=np.float64)
    if p.ndim != 2 or p.shape[1] < 1:
        raise ValueError(f"`probs` must be 2-D [n, vocab], got shape {p.shape}")
    return p, check_rng(rng)


def sample_categorical(probs: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """One token per row of ``probs`` by inversion of the CDF (int64 ``[n]``)."""
    p, rng = _sample_categorical_iv(probs, rng)
    cdf = np.cumsum(p, axis=1)
    u = rng.random(p.shape[0]) * cdf[:, -1]
    tokens = (cdf <= u[:, None]).sum(axis=1)
    return np.minimum(tokens, p.shape[1] - 1).astype(np.int64)


def _tempered_iv(probs: object, temperature: object) -> tuple[np.ndarray, float]:
    t = check_positive(temperature, "temperature", upper=1e6)
    p, _ = _sample_categorical_iv(probs, np.random.default_rng(0))
    return p, t


def tempered(probs: np.ndarray, temperature: float) -> np.ndarray:
    """Rows of ``probs`` raised to 1/temperature and renormalised (same support)."""
    p, t = _tempered_iv(probs, temperature)
    with np.errstate(divide="ignore"):
        logp = np.where(p > 0, np.log(np.where(p > 0, p, 1.0)) / t, -np.inf)
    out = np.exp(logp - logp.max(axis=1, keepdims=True))
    return out / out.sum(axis=1, keepdims=True)


def _scores_from_probs_iv(
    probs: object, tokens: object, draft_probs: object
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    p = np.asarray(probs, dtype=np.float64)
    if p.ndim != 2:
        raise ValueError(f"`probs` must be 2-D [n, vocab], got shape {p.shape}")
    x = np.asarray(tokens)
    if x.shape != (p.shape[0],) or not np.issubdtype(x.dtype, np.integer):
        raise ValueError(f"`tokens` must be an integer array of shape ({p.shape[0]},), got {x.dtype} {x.shape}")
    if x.size and (x.min() < 0 or x.max() >= p.shape[1]):
        raise ValueError(f"`tokens` must lie in [0, {p.shape[1]})")
    q = None
    if draft_probs is not None:
        q = np.asarray(draft_probs, dtype=np.float64)
        if q.shape != p.shape:
            raise ValueError(f"`draft_probs` must have shape {p.shape}, got {q.shape}")
    return p, x.astype(np.int64), q


def scores_from_probs(probs: np.ndarray, tokens: np.ndarray, *, draft_probs: np.ndarray | None = None) -> TokenScores:
    """The TokenScores of ``tokens`` under target ``probs`` ``[n, vocab]`` (one row per token).

    Follows the TokenScores contract: vocabulary ranked by descending p, ties by ascending id;
    log-moments over the support; draft fields when ``draft_probs`` is given (floored at 1e-30).
    Rows are independent contexts: ``row`` = 0..n-1 and ``position`` = 0.
    """
    p, x, q = _scores_from_probs_iv(probs, tokens, draft_probs)
    n, vocab = p.shape
    idx = np.arange(n)
    px = p[idx, x]
    ids = np.arange(vocab)[None, :]
    before = (p > px[:, None]) | ((p == px[:, None]) & (ids < x[:, None]))
    cdf_before = (p * before).sum(axis=1)
    top = np.argmax(p, axis=1)
    with np.errstate(divide="ignore"):
        logp_all = np.where(p > 0, np.log(np.where(p > 0, p, 1.0)), 0.0)
        logp = np.log(px)
    logp_mean = (p * logp_all).sum(axis=1)
    logp_var = np.maximum((p * logp_all**2).sum(axis=1) - logp_mean**2, 0.0)
    logp_m4 = (p * (logp_all - logp_mean[:, None]) ** 4).sum(axis=1)
    top2 = np.sort(p, axis=1)[:, -2:]
    with np.errstate(divide="ignore"):
        margin = np.log(top2[:, 1]) - np.log(top2[:, 0])
    draft = {}
    if q is not None:
        llr_all = np.log(np.maximum(q, 1e-30)) - logp_all
        mean = (p * llr_all).sum(axis=1)
        draft = dict(
            draft_llr=np.log(np.maximum(q[idx, x], 1e-30)) - logp,
            draft_llr_mean=mean,
            draft_llr_var=np.maximum((p * llr_all**2).sum(axis=1) - mean**2, 0.0),
            draft_tv=np.clip(0.5 * np.abs(p - q).sum(axis=1), 0.0, 1.0),
            **draft_ratio_fields(p, q, x),
        )
    return TokenScores(
        row=idx.astype(np.int64), position=np.zeros(n, dtype=np.int64), token=x, prob=px, cdf_before=cdf_before,
        argmax_prob=p[idx, top], is_argmax=(x == top), logp=logp, logp_mean=logp_mean, logp_var=logp_var,
        raw_top2_margin=margin, logp_m4=logp_m4, **draft,
    )


def draft_ratio_fields(p: np.ndarray, q: np.ndarray, tokens: np.ndarray) -> dict[str, np.ndarray]:
    """The bounded draft score f = min(q / p, DRAFT_RATIO_CAP) of ``tokens`` and its moments under p.

    p, q: ``[n, vocab]`` target and draft laws; tokens: ``[n]``. Where p(x) = 0 the score is
    the cap. Returns the TokenScores fields draft_ratio, draft_ratio_mean, draft_ratio_var,
    draft_ratio_m4.
    """
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(p > 0, np.minimum(q / np.where(p > 0, p, 1.0), DRAFT_RATIO_CAP), DRAFT_RATIO_CAP)
    mean = (p * ratio).sum(axis=1)
    dev = ratio - mean[:, None]
    return dict(draft_ratio=ratio[np.arange(p.shape[0]), tokens], draft_ratio_mean=mean,
                draft_ratio_var=np.maximum((p * dev**2).sum(axis=1), 0.0), draft_ratio_m4=(p * dev**4).sum(axis=1))


# --- worlds with a slightly wrong oracle ------------------------------------------------------

@dataclass(frozen=True, slots=True, kw_only=True)
class MismatchWorld:
    """A first-order Markov language with an oracle whose law is slightly off the engines' law.

    initial: ``[prompts, V]`` laws of the first generated token after each prompt; transition:
    ``[V, V]`` law of the next token given the previous one (row ``eos`` is never used: a row
    ends at its EOS). ``engine_*`` are the laws both correct engines sample; ``initial`` /
    ``transition`` the oracle's (the reference the oracle scores against). ``draft_*``: a
    draft model's laws (for the draft scores). ``eos``: the end-of-sequence id or None.
    ``raw_*``: the oracle's laws before its top-p (``top_p``) truncation, from which the scores'
    exclusion margins are computed (None: the oracle's laws are unprocessed, margins 0).
    ``description``: what differs between the oracle and the engines, in words.
    """

    name: str
    description: str
    initial: np.ndarray
    transition: np.ndarray
    engine_initial: np.ndarray
    engine_transition: np.ndarray
    draft_initial: np.ndarray
    draft_transition: np.ndarray
    eos: int | None = None
    raw_initial: np.ndarray | None = None
    raw_transition: np.ndarray | None = None
    top_p: float = 1.0

    @property
    def vocab_size(self) -> int:
        return int(self.transition.shape[1])

    def sample(self, rng: np.random.Generator, n: int, max_new_tokens: int, *, prompt: int = 0,
               law: str = "engine") -> tuple[np.ndarray, np.ndarray]:
        """``n`` rows of up to ``max_new_tokens`` tokens after ``prompt``: (tokens ``[n, L]``, lengths ``[n]``).

        law: ``"engine"`` (the correct engines), ``"oracle"`` (an exact engine for this oracle)
        or ``"draft"``. Positions after a row's EOS hold -1; the EOS itself is kept.
        """
        rng = check_rng(rng)
        n = check_int(n, "n", minimum=1)
        steps = check_int(max_new_tokens, "max_new_tokens", minimum=1)
        init, trans = self._laws(law)
        tokens = np.full((n, steps), -1, dtype=np.int64)
        alive = np.ones(n, dtype=bool)
        lengths = np.zeros(n, dtype=np.int64)
        prev = None
        for t in range(steps):
            laws = np.broadcast_to(init[prompt], (n, init.shape[1])) if prev is None else trans[np.maximum(prev, 0)]
            x = sample_categorical(laws, rng)
            tokens[alive, t] = x[alive]
            lengths += alive
            if self.eos is not None:
                alive &= x != self.eos
            prev = x
        return tokens, lengths

    def _laws(self, law: str) -> tuple[np.ndarray, np.ndarray]:
        if law == "engine":
            return self.engine_initial, self.engine_transition
        if law == "oracle":
            return self.initial, self.transition
        if law == "draft":
            return self.draft_initial, self.draft_transition
        raise ValueError(f"`law` must be 'engine', 'oracle' or 'draft', got {law!r}")

    def score(self, tokens: np.ndarray, lengths: np.ndarray, prompts: np.ndarray | None = None) -> TokenScores:
        """The oracle's TokenScores of every generated token (row-major; draft fields included).

        prompts: the prompt index of every row (default 0). The oracle's law at position 0 is
        ``initial[prompt]``, later ``transition[previous token]``.
        """
        tok = np.asarray(tokens, dtype=np.int64)
        lens = np.asarray(lengths, dtype=np.int64)
        if tok.ndim != 2 or lens.shape != (tok.shape[0],):
            raise ValueError(f"`tokens` must be [rows, L] and `lengths` [rows], got {tok.shape} and {lens.shape}")
        pr = np.zeros(tok.shape[0], dtype=np.int64) if prompts is None else np.asarray(prompts, dtype=np.int64)
        rows, pos = np.nonzero(np.arange(tok.shape[1])[None, :] < lens[:, None])
        x = tok[rows, pos]
        prev = np.where(pos > 0, tok[rows, np.maximum(pos - 1, 0)], 0)
        # contexts: prompt j (position 0) then the previous token; score every (context, token) once, look up
        n_prompts, vocab = self.initial.shape[0], self.vocab_size
        context = np.where(pos == 0, pr[rows], n_prompts + prev)
        laws = np.concatenate([self.initial, self.transition])
        drafts = np.concatenate([self.draft_initial, self.draft_transition])
        table = scores_from_probs(np.repeat(laws, vocab, axis=0), np.tile(np.arange(vocab), laws.shape[0]),
                                  draft_probs=np.repeat(drafts, vocab, axis=0))
        margins = np.zeros(len(table), dtype=np.float64)
        if self.raw_initial is not None and self.raw_transition is not None:
            raw = np.repeat(np.concatenate([self.raw_initial, self.raw_transition]), vocab, axis=0)
            zero = np.flatnonzero(table.prob <= 0)
            with np.errstate(divide="ignore"):
                margins[zero] = exclusion_margins(np.log(raw[zero]), table.token[zero], temperature=1.0,
                                                  top_p=self.top_p)
        table = dataclasses.replace(table, exclusion_margin=margins)
        s = table.select(context * vocab + x)
        return dataclasses.replace(s, row=rows.astype(np.int64), position=pos.astype(np.int64))

    def tv_per_token(self) -> float:
        """Largest TV between the oracle's and the engines' law over every context."""
        return float(max(0.5 * np.abs(self.initial - self.engine_initial).sum(axis=1).max(),
                         0.5 * np.abs(self.transition - self.engine_transition).sum(axis=1).max()))


def _zipf_laws(rng: np.random.Generator, rows: int, vocab: int, spread: float) -> np.ndarray:
    """``[rows, vocab]`` random laws with Zipf-like ranks: logits -spread log(rank) + N(0, 0.5^2)."""
    logits = -spread * np.log(np.arange(1, vocab + 1))[None, :] + 0.5 * rng.standard_normal((rows, vocab))
    logits = np.take_along_axis(logits, np.argsort(rng.random((rows, vocab)), axis=1), axis=1)
    p = np.exp(logits - logits.max(axis=1, keepdims=True))
    return p / p.sum(axis=1, keepdims=True)


def _with_eos(laws: np.ndarray, eos: int, eos_prob: float) -> np.ndarray:
    out = laws * (1.0 - eos_prob)
    out[:, eos] += eos_prob
    return out / out.sum(axis=1, keepdims=True)


def _nucleus(laws: np.ndarray, top_p: float) -> tuple[np.ndarray, np.ndarray]:
    """Top-p truncation of every row and the first token left out (the boundary token) per row."""
    order = np.argsort(-laws, axis=1, kind="stable")
    sorted_p = np.take_along_axis(laws, order, axis=1)
    before = np.cumsum(sorted_p, axis=1) - sorted_p
    keep_sorted = before < top_p
    keep = np.zeros_like(keep_sorted)
    np.put_along_axis(keep, order, keep_sorted, axis=1)
    boundary = order[np.arange(laws.shape[0]), keep_sorted.sum(axis=1)]
    out = np.where(keep, laws, 0.0)
    return out / out.sum(axis=1, keepdims=True), boundary


#: The three worlds of issue #22's table, by name.
MISMATCH_WORLDS = ("boundary token", "temperature 1.03", "temperature 1.04")


def mismatch_world(name: str, *, seed: int = 0, vocab: int = 48, prompts: int = 3, eos_prob: float = 0.02,
                   boundary_mass: float = 1.2e-4, top_p: float = 0.9) -> MismatchWorld:
    """One of :data:`MISMATCH_WORLDS`: a Markov language where the oracle is slightly wrong.

    ``"boundary token"``: the oracle's processed law is a top-p (``top_p``) nucleus; both
    engines also emit the first token outside it with probability ``boundary_mass`` at every
    step (a bf16 nucleus edge; per-token TV = boundary_mass), which the oracle calls impossible.
    ``"temperature 1.03"`` / ``"temperature 1.04"``: both engines sample at that temperature,
    the oracle scores at T = 1. The draft is the engines' law mixed 30 % with another Zipf
    law, truncated like the target in the boundary world. Token ``vocab - 1`` is the EOS
    (``eos_prob`` per step); pure numpy, seeded, deterministic.
    """
    if name not in MISMATCH_WORLDS:
        raise ValueError(f"`name` must be one of {MISMATCH_WORLDS}, got {name!r}")
    rng = np.random.default_rng(check_int(seed, "seed", minimum=0))
    vocab = check_int(vocab, "vocab", minimum=4)
    prompts = check_int(prompts, "prompts", minimum=1)
    eos = vocab - 1
    init = _with_eos(_zipf_laws(rng, prompts, vocab, 1.6), eos, eos_prob)
    trans = _with_eos(_zipf_laws(rng, vocab, vocab, 1.6), eos, eos_prob)
    other_i, other_t = _zipf_laws(rng, prompts, vocab, 1.2), _zipf_laws(rng, vocab, vocab, 1.2)
    if name == "boundary token":
        check_positive(boundary_mass, "boundary_mass", upper=0.5)
        o_init, b_init = _nucleus(init, top_p)
        o_trans, b_trans = _nucleus(trans, top_p)

        def leak(law: np.ndarray, boundary: np.ndarray) -> np.ndarray:
            out = law * (1.0 - boundary_mass)
            out[np.arange(law.shape[0]), boundary] += boundary_mass
            return out

        e_init, e_trans = leak(o_init, b_init), leak(o_trans, b_trans)
        d_init, _ = _nucleus(0.7 * init + 0.3 * other_i, top_p)
        d_trans, _ = _nucleus(0.7 * trans + 0.3 * other_t, top_p)
        what = (f"the oracle's law is the top-p {top_p:g} nucleus; both engines also emit its first excluded "
                f"token with probability {boundary_mass:g} per step (per-token TV {boundary_mass:g})")
    else:
        temperature = float(name.split()[-1])
        o_init, o_trans = init, trans
        e_init, e_trans = tempered(init, temperature), tempered(trans, temperature)
        d_init, d_trans = 0.7 * e_init + 0.3 * other_i, 0.7 * e_trans + 0.3 * other_t
        what = f"both engines sample at temperature {temperature:g}, the oracle scores at T = 1"
    raw = dict(raw_initial=init, raw_transition=trans, top_p=top_p) if name == "boundary token" else {}
    return MismatchWorld(name=name, description=what, initial=o_init, transition=o_trans, engine_initial=e_init,
                         engine_transition=e_trans, draft_initial=d_init, draft_transition=d_trans, eos=eos, **raw)
