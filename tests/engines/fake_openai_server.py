"""A fault-injecting OpenAI-compatible completions server on 127.0.0.1, for the engine's tests.

It samples i.i.d. tokens from a fixed numpy distribution over a small vocabulary (rolled by the
prompt's last token, so rows can be traced to their prompt), seeds the i-th of ``n`` choices with
``seed + i`` as vLLM does, answers like vLLM (``"token_id:N"`` strings in ``logprobs.tokens``, and
``token_ids``), and exposes ``/v1/models`` and a Prometheus ``/metrics`` with fake
``vllm:spec_decode_*`` counters.

Faults (``fault=``), applied to ``/v1/completions`` requests, the first ``fault_count`` of them
(transient) or all (``fault_count=None``, persistent): ``http_500``, ``timeout`` (answer after
``sleep_s``), ``drop`` (close the connection without an answer), ``bad_json``, ``wrong_choices``,
``oov`` (a token outside the vocabulary), ``truncated`` (half the tokens, finish_reason "length").

Bounded: it serves at most ``max_requests`` completions, and shuts itself down after
``lifetime_s`` seconds; use it as a context manager.
"""

from __future__ import annotations

import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import numpy as np

FAULTS = ("http_500", "timeout", "drop", "bad_json", "wrong_choices", "oov", "truncated")


class FakeOpenAIServer:
    """See the module docstring. ``base_url`` is ``http://127.0.0.1:<port>``."""

    def __init__(
        self,
        *,
        probs: Any = (0.4, 0.2, 0.15, 0.1, 0.08, 0.05, 0.02),
        eos_token_id: int = 6,
        fault: str | None = None,
        fault_count: int | None = 1,
        sleep_s: float = 2.0,
        max_requests: int = 500,
        lifetime_s: float = 60.0,
        model: str = "fake-model",
    ) -> None:
        if fault is not None and fault not in FAULTS:
            raise ValueError(f"`fault` must be one of {FAULTS}, got {fault!r}")
        self.probs = np.asarray(probs, dtype=np.float64) / np.sum(probs)
        self.vocab_size = len(self.probs)
        self.eos_token_id = eos_token_id
        self.fault, self.fault_count, self.sleep_s = fault, fault_count, sleep_s
        self.max_requests, self.lifetime_s, self.model = max_requests, lifetime_s, model
        self.lock = threading.Lock()
        self.completions = 0  # /v1/completions requests received
        self.bodies: list[dict[str, Any]] = []
        self.auth_headers: list[str | None] = []
        self.counters = {"drafts": 0, "draft_tokens": 0, "accepted_tokens": 0}
        self._stopping = threading.Event()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._httpd.daemon_threads = True
        self.port = int(self._httpd.server_address[1])
        self.base_url = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._timer = threading.Timer(lifetime_s, self.stop)
        self._timer.daemon = True

    def __enter__(self) -> FakeOpenAIServer:
        self._thread.start()
        self._timer.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        if self._stopping.is_set():
            return
        self._stopping.set()
        self._timer.cancel()
        self._httpd.shutdown()
        self._httpd.server_close()

    # -- sampling ---------------------------------------------------------------------------
    def law(self, prompt: list[int], ignore_eos: bool, body: dict[str, Any] | None = None) -> np.ndarray:
        """The law of every token of a choice: probs rolled by the prompt's last token, then the body's
        ``logit_bias`` (added to the log-probabilities) and ``min_p`` (as vLLM applies them)."""
        p = np.roll(self.probs, prompt[-1] % self.vocab_size).copy()
        body = body or {}
        for t, b in (body.get("logit_bias") or {}).items():
            p[int(t)] *= float(np.exp(b))
        if ignore_eos:
            p[self.eos_token_id] = 0.0
        p /= p.sum()
        min_p = float(body.get("min_p") or 0.0)
        if min_p > 0:
            p = np.where(p < min_p * p.max(), 0.0, p)
            p /= p.sum()
        return p

    def sample_choice(self, prompt: list[int], seed: int, max_tokens: int, ignore_eos: bool,
                      body: dict[str, Any] | None = None) -> list[int]:
        """Tokens of one choice: i.i.d. from :meth:`law`; stop at EOS, or at a ``stop`` string of the
        body (the text being the tokens as bytes: token t is chr(t))."""
        p = self.law(prompt, ignore_eos, body)
        stops = list((body or {}).get("stop") or [])
        rng = np.random.default_rng(seed)
        out: list[int] = []
        for _ in range(max_tokens):
            t = int(rng.choice(self.vocab_size, p=p))
            out.append(t)
            if t == self.eos_token_id and not ignore_eos:
                break
            if any(s in "".join(map(chr, out)) for s in stops):
                break
        return out

    def _reply(self, body: dict[str, Any], fault: str | None) -> dict[str, Any]:
        n, max_tokens = int(body.get("n", 1)), int(body.get("max_tokens", 16))
        seed = body.get("seed")
        seed = int(seed) if seed is not None else int(np.random.default_rng().integers(2**31))
        choices = []
        for i in range(n + (1 if fault == "wrong_choices" else 0)):
            ids = self.sample_choice(body["prompt"], seed + i, max_tokens, bool(body.get("ignore_eos")), body)
            if fault == "oov" and i == 0:
                ids[0] = self.vocab_size + 5
            finish = "stop" if ids and (ids[-1] == self.eos_token_id or len(ids) < max_tokens) else "length"
            if fault == "truncated" and i == 0:  # fewer tokens than asked, no EOS, yet "length"
                kept = [t for t in ids if t != self.eos_token_id][: max(1, max_tokens // 2)]
                ids, finish = kept or [(self.eos_token_id + 1) % self.vocab_size], "length"
            choices.append(
                {
                    "index": i,
                    "text": "",
                    "logprobs": {"tokens": [f"token_id:{t}" for t in ids], "token_logprobs": [-1.0] * len(ids)},
                    "token_ids": ids,
                    "finish_reason": finish,
                }
            )
            with self.lock:
                self.counters["drafts"] += 1
                self.counters["draft_tokens"] += 3 * len(ids)
                self.counters["accepted_tokens"] += len(ids)
        return {"id": "cmpl-fake", "object": "text_completion", "model": self.model, "choices": choices}

    def metrics_text(self) -> str:
        c = self.counters
        return (
            "# TYPE vllm:spec_decode_num_drafts_total counter\n"
            f'vllm:spec_decode_num_drafts_total{{engine="0",model_name="{self.model}"}} {float(c["drafts"])}\n'
            f'vllm:spec_decode_num_draft_tokens_total{{engine="0",model_name="{self.model}"}} {float(c["draft_tokens"])}\n'
            f'vllm:spec_decode_num_accepted_tokens_total{{engine="0",model_name="{self.model}"}} {float(c["accepted_tokens"])}\n'
        )

    # -- HTTP -------------------------------------------------------------------------------
    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (stdlib signature)
                return

            def _send(self, status: int, payload: bytes, ctype: str = "application/json") -> None:
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(payload)))
                self.send_header("Connection", "close")
                self.end_headers()
                self.wfile.write(payload)
                self.close_connection = True

            def do_GET(self) -> None:  # noqa: N802 (stdlib name)
                if self.path == "/v1/models":
                    self._send(200, json.dumps({"object": "list", "data": [{"id": server.model}]}).encode())
                elif self.path == "/metrics":
                    self._send(200, server.metrics_text().encode(), "text/plain")
                else:
                    self._send(404, b'{"error": "not found"}')

            def do_POST(self) -> None:  # noqa: N802
                length = int(self.headers.get("Content-Length", 0))
                raw = self.rfile.read(length)
                if self.path != "/v1/completions":
                    self._send(404, b'{"error": "not found"}')
                    return
                with server.lock:
                    server.completions += 1
                    number = server.completions
                    server.auth_headers.append(self.headers.get("Authorization"))
                if number > server.max_requests:
                    self._send(503, b'{"error": "request budget of the fake server spent"}')
                    return
                try:
                    body = json.loads(raw)
                except json.JSONDecodeError:
                    self._send(400, b'{"error": "bad request"}')
                    return
                with server.lock:
                    server.bodies.append(body)
                active = server.fault is not None and (server.fault_count is None or number <= server.fault_count)
                fault = server.fault if active else None
                if fault == "http_500":
                    self._send(500, b'{"error": "injected internal error"}')
                elif fault == "drop":
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
                elif fault == "bad_json":
                    self._send(200, b'{"choices": [ {"index": 0, "text": ')
                else:
                    if fault == "timeout":
                        server._stopping.wait(server.sleep_s)
                    try:
                        self._send(200, json.dumps(server._reply(body, fault)).encode())
                    except (BrokenPipeError, ConnectionResetError):
                        return  # the client gave up (timeout) before the answer

        return Handler
