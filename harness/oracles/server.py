"""The deployment's server as oracle: scoring with an OpenAI-compatible server's log-probabilities.

With the whole vocabulary (the default), every distinct prefix of a scored token is sent to the
completions API with ``logprobs=-1`` and ``max_tokens=1`` at temperature 1: the raw law after it.
With the top-K, every sample row's prompt and generated ids are sent with vLLM's
``prompt_logprobs`` extension; position j of the reply holds the top-K raw log-probabilities of
the law after the first j tokens and the j-th token's own (needed for a token outside the top-K).
Those are turned into the processed per-token numbers of
:class:`~speceq.stats.scores.TokenScores` by :mod:`speceq.oracles.server_laws`: exact when the server
gives the whole vocabulary (or when top-k/top-p keep only known tokens), a coarsened PIT and no
log-likelihood moments when it gives only the top-K of a plain sampler's law, and a
:class:`~speceq.errors.ConfigError` where processing cannot be reproduced exactly. Same
interface as :class:`speceq.oracles.hf.TargetOracle` (``score``, ``next_token_probs``,
``raw_top2_margin``, ``describe``, ``vocab_size``), no draft (the draft ratio comparison is not run).
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from speceq.core.credentials import redact_text, redact_url
from speceq.core.http_json import TransportFault, request_json
from speceq.core.params import SamplingParams
from speceq.core.processing import process_logits
from speceq.engines.base import SampleBatch, checked_prefixes, checked_rows
from speceq.errors import ConfigError, EngineError
from speceq.oracles.server_laws import (
    ALL_LOGPROBS,
    RawTop,
    dense_logits,
    dense_token_fields,
    law_kind,
    processing_params,
    raw_top2_margins,
    top_token_fields,
)
from speceq.stats.scores import TokenScores

#: Most logits (floats) of dense laws held at once: 2**25 floats = 128 MiB.
DENSE_BUDGET = 2**25
#: Token appended to a prefix so that the law after the whole prefix comes back (any valid id).
_PROBE_TOKEN = 0


def check_server_cases(cases: Sequence[Any], top_logprobs: int | None, vocab_size: int) -> None:
    """Refuse, before any sampling, the cases whose processed law ``top_logprobs`` raw values cannot give."""
    k = ALL_LOGPROBS if top_logprobs is None else top_logprobs
    for case in cases:
        law_kind(case.params, k, vocab_size, where=f"case {case.case_id!r} (server oracle)")


class ServerOracle:
    """Processed next-token laws of the target from an OpenAI-compatible server (vLLM ``prompt_logprobs``).

    Parameters
    ----------
    base_url : the server (``http://HOST:PORT``, with or without the ``/v1`` suffix).
    vocab_size, eos_token_id : the target's logit width and the EOS id ``ignore_eos`` masks
        (the run passes the baseline engine's).
    top_logprobs : raw log-probabilities asked per position; None (default) asks for the whole
        vocabulary (``prompt_logprobs=-1``: vLLM must run with ``--max-logprobs -1`` or >= V).
    model : the served model name (default: the first of ``/v1/models``).
    api_key_env : environment variable holding the API key (never recorded).
    timeout_s, max_retries : per request; retriable failures are retried with backoff.
    rows_per_request, max_concurrency : sequences per completions request, requests in flight.
    """

    def __init__(self, base_url: str, *, vocab_size: int, eos_token_id: int | None, top_logprobs: int | None = None,
                 model: str | None = None, api_key_env: str = "OPENAI_API_KEY", timeout_s: float = 300.0,
                 max_retries: int = 3, rows_per_request: int = 32, max_concurrency: int = 2) -> None:
        if not isinstance(base_url, str) or not base_url.startswith(("http://", "https://")):
            shown = redact_text(base_url) if isinstance(base_url, str) else base_url
            raise ConfigError(f"expected an http(s) URL, got {shown!r}", where="oracle.server")
        if top_logprobs is not None and (not isinstance(top_logprobs, int) or top_logprobs < 2):
            raise ConfigError(f"expected an integer >= 2 or None (all), got {top_logprobs!r}",
                              where="oracle.top_logprobs")
        root = base_url.rstrip("/")
        self.api_root = root if root.endswith("/v1") else root + "/v1"
        self.vocab_size = int(vocab_size)
        self.eos_token_id = eos_token_id
        full = top_logprobs is None or top_logprobs >= self.vocab_size
        self.top_logprobs = ALL_LOGPROBS if full else int(top_logprobs)
        self.model = model
        self.api_key_env = api_key_env
        self.timeout_s = float(timeout_s)
        self.max_retries = int(max_retries)
        self.rows_per_request = max(1, int(rows_per_request))
        self.max_concurrency = max(1, int(max_concurrency))

    # ---- description ----------------------------------------------------------------------
    def describe(self) -> dict[str, Any]:
        return {
            "oracle": "server",
            "api_root": redact_url(self.api_root),
            "model": self.model,
            "prompt_logprobs": "all" if self.top_logprobs == ALL_LOGPROBS else self.top_logprobs,
            "vocab_size": self.vocab_size,
            "eos_token_id": self.eos_token_id,
            "log_probabilities": "raw (vLLM prompt_logprobs), processed here with speceq.core.processing",
            "draft": None,
        }

    @property
    def has_draft(self) -> bool:
        """Never: a server scores the target only (no draft ratio comparison)."""
        return False

    def law_kind(self, params: SamplingParams, *, where: str = "oracle") -> str:
        """"full" or "top" (see :func:`speceq.oracles.server_laws.law_kind`); ConfigError when impossible."""
        return law_kind(params, self.top_logprobs, self.vocab_size, where=where)

    def knows_full_law(self, params: SamplingParams) -> bool:
        """Whether the whole processed law is known (else the top-K only: coarsened PIT, no moments)."""
        return self.law_kind(params) == "full"

    # ---- HTTP -----------------------------------------------------------------------------
    def _headers(self) -> dict[str, str]:
        key = os.environ.get(self.api_key_env)
        return {"Authorization": f"Bearer {key}"} if key else {}

    def _error(self, message: str) -> EngineError:
        key = os.environ.get(self.api_key_env)
        return EngineError(redact_text(message.replace(key, "***") if key else message), engine="server oracle")

    def _model_name(self) -> str:
        if self.model is None:
            try:
                listing = request_json(self.api_root + "/models", body=None, headers=self._headers(),
                                       timeout_s=self.timeout_s)
                self.model = str(listing["data"][0]["id"])
            except TransportFault as exc:
                raise self._error(f"cannot list models at {self.api_root}/models: {exc}") from None
            except (KeyError, IndexError, TypeError):
                raise self._error(f"{self.api_root}/models lists no model") from None
        return self.model

    def _post(self, body: dict[str, Any]) -> Any:
        for attempt in range(self.max_retries + 1):
            try:
                return request_json(self.api_root + "/completions", body=body, headers=self._headers(),
                                    timeout_s=self.timeout_s)
            except TransportFault as exc:
                if exc.status == 400 and "logprobs" in exc.detail:
                    raise ConfigError(
                        f"the server refuses {len(body['prompt'])} x {'prompt_logprobs' if 'prompt_logprobs' in body else 'logprobs'}"
                        f"={body.get('prompt_logprobs', body.get('logprobs'))}: {exc.detail}; start vLLM with "
                        f"--max-logprobs -1 (or >= {self.vocab_size}) for the whole vocabulary, or pass a smaller "
                        "--oracle-top-logprobs", where="oracle.server") from None
                if not exc.retriable or attempt == self.max_retries:
                    raise self._error(f"{self.api_root}/completions failed: {exc}") from None
                time.sleep(0.5 * 2**attempt)
        raise AssertionError("unreachable")

    def _fetch(self, seqs: list[list[int]]) -> list[list[Any]]:
        """``prompt_logprobs`` of every sequence (entry j: the law after seq[:j], dict id -> logprob)."""
        model = self._model_name()
        groups = [seqs[i : i + self.rows_per_request] for i in range(0, len(seqs), self.rows_per_request)]

        def one(group: list[list[int]]) -> list[list[Any]]:
            body = {"model": model, "prompt": group, "max_tokens": 1, "temperature": 0.0, "n": 1,
                    "prompt_logprobs": self.top_logprobs, "stream": False}
            reply = self._post(body)
            try:
                choices = sorted(reply["choices"], key=lambda c: int(c.get("index", 0)))
                out = [c["prompt_logprobs"] for c in choices]
            except (KeyError, TypeError, ValueError):
                raise ConfigError(
                    f"{self.api_root}/completions returned no prompt_logprobs: the server oracle needs vLLM's "
                    "prompt_logprobs extension of the completions API", where="oracle.server") from None
            if len(out) != len(group) or any(p is None or len(p) != len(s) for p, s in zip(out, group, strict=False)):
                raise self._error(f"{self.api_root}/completions returned prompt_logprobs that do not match the "
                                  f"{len(group)} prompts sent (one entry per prompt token expected)")
            return out

        with ThreadPoolExecutor(max_workers=self.max_concurrency) as pool:
            return [entry for part in pool.map(one, groups) for entry in part]

    def _fetch_next(self, prefixes: list[list[int]]) -> list[dict[int, float]]:
        """The whole next-token law after each prefix: generation ``logprobs=-1`` of one token.

        Sent at temperature 1 without truncation, so the values are the raw log-softmax whatever
        the server's ``--logprobs-mode`` (raw or processed; logits modes differ by one constant
        per position, removed by :meth:`_tops`). One value per token, instead of one per token
        and *prompt position* with ``prompt_logprobs``.
        """
        model = self._model_name()
        groups = [prefixes[i : i + self.rows_per_request] for i in range(0, len(prefixes), self.rows_per_request)]

        def one(group: list[list[int]]) -> list[dict[int, float]]:
            body = {"model": model, "prompt": group, "max_tokens": 1, "temperature": 1.0, "top_p": 1.0, "top_k": 0,
                    "min_p": 0.0, "seed": 0, "n": 1, "logprobs": ALL_LOGPROBS, "return_tokens_as_token_ids": True,
                    "stream": False}
            reply = self._post(body)
            try:
                choices = sorted(reply["choices"], key=lambda c: int(c.get("index", 0)))
                laws = [{int(str(k).rsplit(":", 1)[-1]): float(v) for k, v in c["logprobs"]["top_logprobs"][0].items()}
                        for c in choices]
            except (KeyError, TypeError, ValueError, IndexError, AttributeError):
                raise self._error(f"{self.api_root}/completions returned no readable logprobs (expected vLLM's "
                                  "top_logprobs with return_tokens_as_token_ids)") from None
            if len(laws) != len(group):
                raise self._error(f"{self.api_root}/completions returned {len(laws)} choices for {len(group)} prompts")
            return laws

        with ThreadPoolExecutor(max_workers=self.max_concurrency) as pool:
            return [law for part in pool.map(one, groups) for law in part]

    def _whole_law(self, law: dict[int, float], token: int, where: str) -> RawTop:
        if len(law) != self.vocab_size or min(law) < 0 or max(law) >= self.vocab_size:
            raise self._error(f"{where}: expected {self.vocab_size} log-probabilities (the vocabulary), got "
                              f"{len(law)}: is the server serving the baseline's model?")
        pairs = sorted(law.items(), key=lambda t: (-t[1], t[0]))
        logp = np.array([lp for _, lp in pairs], dtype=np.float64)
        logp = logp - np.logaddexp.reduce(np.maximum(logp, -1e4))  # exact log-softmax (no-op for logprobs)
        ids = np.array([i for i, _ in pairs], dtype=np.int64)
        return RawTop(ids=ids, logp=logp, token=int(token), token_logp=float(logp[np.flatnonzero(ids == token)[0]]))

    def _parse(self, entry: Any, token: int, where: str) -> RawTop:
        try:
            pairs = [(int(k), float(v["logprob"])) for k, v in entry.items()]
        except (AttributeError, KeyError, TypeError, ValueError):
            raise self._error(f"{where}: unreadable prompt_logprobs entry {str(entry)[:120]!r}") from None
        found = {i: lp for i, lp in pairs}
        if token not in found:
            raise self._error(f"{where}: the server returned no log-probability for token {token}")
        top = pairs
        want = self.vocab_size if self.top_logprobs == ALL_LOGPROBS else self.top_logprobs
        if len(pairs) == want + 1:  # the teacher-forced token outside the top list
            top = [(i, lp) for i, lp in pairs if i != token]
        if len(top) != want:
            raise self._error(f"{where}: expected {want} log-probabilities (vocabulary {self.vocab_size}), got "
                              f"{len(top)}: is the server serving the baseline's model?")
        top.sort(key=lambda t: (-t[1], t[0]))
        ids = np.array([i for i, _ in top], dtype=np.int64)
        if ids.min() < 0 or ids.max() >= self.vocab_size:
            raise self._error(f"{where}: token id outside the vocabulary [0, {self.vocab_size})")
        return RawTop(ids=ids, logp=np.array([lp for _, lp in top], dtype=np.float64), token=int(token),
                      token_logp=found[token])

    def _tops(self, seqs: list[list[int]], wanted: list[np.ndarray], what: str) -> list[RawTop]:
        """RawTop of ``seqs[i]``'s entries ``wanted[i]`` in order (identical sequences fetched once).

        Entry j is the law after ``seqs[i][:j]`` with the emitted token ``seqs[i][j]``. With the
        whole vocabulary each distinct prefix's law is fetched once (generation log-probabilities);
        with the top-K, each distinct sequence's ``prompt_logprobs`` (they carry the emitted
        token's own value, whatever its rank).
        """
        if self.top_logprobs == ALL_LOGPROBS:
            prefixes = {tuple(s[:j]): None for s, w in zip(seqs, wanted, strict=True) for j in w}
            keys = list(prefixes)
            laws = dict(zip(keys, self._fetch_next([list(k) for k in keys]), strict=True))
            return [self._whole_law(laws[tuple(s[:j])], s[j], f"oracle {what} {i} position {j}")
                    for i, (s, w) in enumerate(zip(seqs, wanted, strict=True)) for j in w]
        unique = {tuple(s): None for s in seqs}
        keys = list(unique)
        replies = dict(zip(keys, self._fetch([list(k) for k in keys]), strict=True))
        out = []
        for i, (s, w) in enumerate(zip(seqs, wanted, strict=True)):
            entries = replies[tuple(s)]
            out.extend(self._parse(entries[j], s[j], f"oracle {what} {i} position {j}") for j in w)
        return out

    # ---- checks ---------------------------------------------------------------------------
    def _check(self, seqs: Sequence[Sequence[int]], what: str) -> list[list[int]]:
        return checked_prefixes(seqs, self.vocab_size, what=what, scorer="the server")

    # ---- public ---------------------------------------------------------------------------
    def next_token_probs(self, prefixes: Sequence[Sequence[int]], params: SamplingParams) -> np.ndarray:
        """Processed law [rows, vocab] after each prefix; ConfigError when only the top-K is known."""
        if self.law_kind(params, where="oracle.next_token_probs") != "full":
            raise ConfigError("the whole law is unknown: the server oracle has only the top "
                              f"{self.top_logprobs} log-probabilities of a temperature-1 law; pass "
                              "--oracle-top-logprobs all", where="oracle.next_token_probs")
        seqs = [s + [_PROBE_TOKEN] for s in self._check(prefixes, "prefix")]
        tops = self._tops(seqs, [np.array([len(s) - 1]) for s in seqs], "prefix")
        wheres = [f"oracle prefix {i}" for i in range(len(tops))]
        logits = dense_logits(tops, params, self.vocab_size, self.eos_token_id, wheres)
        return process_logits(logits, processing_params(params, tops, self.vocab_size),
                              eos_token_id=self.eos_token_id).numpy()

    def raw_top2_margin(self, prefixes: Sequence[Sequence[int]]) -> np.ndarray:
        """Raw (T=1, unprocessed) log-prob of the top-1 minus the top-2 next token, nats, per prefix."""
        seqs = [s + [_PROBE_TOKEN] for s in self._check(prefixes, "prefix")]
        return raw_top2_margins(self._tops(seqs, [np.array([len(s) - 1]) for s in seqs], "prefix"))

    def score(self, prompts: Sequence[Sequence[int]], batch: SampleBatch, params: SamplingParams) -> TokenScores:
        """Score every generated token of ``batch`` (rows continue ``prompts[batch.prompt_index]``)."""
        kind = self.law_kind(params)
        prompt_lists = self._check(prompts, "prompt")
        lengths = np.asarray(batch.lengths, dtype=np.int64)
        seqs: list[list[int]] = []
        wanted: list[np.ndarray] = []
        for prompt, gen in checked_rows(prompt_lists, batch, self.vocab_size):
            P = len(prompt)
            seqs.append(prompt + gen)
            wanted.append(np.arange(P, P + len(gen)))
        tops = self._tops(seqs, wanted, "row")
        wheres = [f"oracle row {r} position {m}" for r in range(batch.rows) for m in range(int(lengths[r]))]
        tokens = np.array([t.token for t in tops], dtype=np.int64)
        fields: dict[str, np.ndarray] = {}
        if kind == "top":
            fields = top_token_fields(tops, params, self.eos_token_id, wheres)
        else:
            step = max(1, DENSE_BUDGET // self.vocab_size)
            proc = processing_params(params, tops, self.vocab_size)
            parts = []
            for a in range(0, len(tops), step):
                logits = dense_logits(tops[a : a + step], params, self.vocab_size, self.eos_token_id, wheres[a : a + step])
                parts.append(dense_token_fields(process_logits(logits, proc, eos_token_id=self.eos_token_id),
                                                tokens[a : a + step]))
            names = ("prob", "cdf_before", "argmax_prob", "is_argmax", "logp", "logp_mean", "logp_var", "logp_m4")
            fields = {n: np.concatenate([p[n] for p in parts]) if parts else
                      np.zeros(0, dtype=bool if n == "is_argmax" else np.float64) for n in names}
        if kind == "top" and not tops:
            fields = {n: np.zeros(0, dtype=bool if n == "is_argmax" else np.float64)
                      for n in ("prob", "cdf_before", "pit_mass", "argmax_prob", "is_argmax", "logp")}
        return TokenScores(
            row=np.repeat(np.arange(batch.rows, dtype=np.int64), lengths),
            position=np.concatenate([np.zeros(0, np.int64), *(np.arange(n, dtype=np.int64) for n in lengths)]),
            token=tokens,
            raw_top2_margin=raw_top2_margins(tops),
            **fields,
        )
