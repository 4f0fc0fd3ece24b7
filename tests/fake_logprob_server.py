"""A tiny OpenAI-compatible completions server on loopback that answers vLLM's ``prompt_logprobs``.

It serves a transformers model's exact raw log-softmax (float32, like vLLM) in vLLM's reply
format: ``choices[i].prompt_logprobs`` is a list with ``None`` first, then per position a
dict ``"token_id" -> {"logprob", "rank", "decoded_token"}`` holding the top-K and the prompt
token (K = -1: the whole vocabulary). Requests asking for more than ``max_logprobs`` get
vLLM's HTTP 400. ``requests`` counts the completions calls. For tests only.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import numpy as np
import torch


def prompt_logprobs(model: Any, prompts: list[list[int]], k: int) -> list[list[dict[str, dict[str, Any]] | None]]:
    """vLLM-shaped prompt_logprobs of each prompt (k = -1: every token of the vocabulary).

    One right-padded forward for all prompts (causal attention: padding after a prompt does
    not change its positions' logits).
    """
    width = max(len(p) for p in prompts)
    ids = torch.zeros((len(prompts), width), dtype=torch.long)
    mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for i, p in enumerate(prompts):
        ids[i, : len(p)] = torch.as_tensor(p)
        mask[i, : len(p)] = 1
    with torch.inference_mode():
        logits = model(input_ids=ids, attention_mask=mask).logits.float()
    logp = torch.log_softmax(logits, dim=-1).numpy()  # [rows, width, V] float32, raw (no processing), as vLLM
    vocab = logp.shape[-1]
    k = vocab if k == -1 else min(k, vocab)
    out = []
    for i, prompt in enumerate(prompts):
        entries: list[dict[str, dict[str, Any]] | None] = [None]
        for j in range(1, len(prompt)):
            row = logp[i, j - 1]
            top = np.argsort(-row, kind="stable")[:k]
            tok = prompt[j]
            entry = {str(tok): {"logprob": float(row[tok]), "rank": int((row > row[tok]).sum()) + 1,
                                "decoded_token": ""}}
            for r, t in enumerate(top.tolist()):
                entry[str(t)] = {"logprob": float(row[t]), "rank": r + 1, "decoded_token": ""}
            entries.append(entry)
        out.append(entries)
    return out


@contextmanager
def serve_logprobs(model: Any, *, max_logprobs: int = 20, model_name: str = "fake-target") -> Iterator[Any]:
    """Run the server in a thread; yields an object with ``url`` and ``requests``."""

    class State:
        url = ""
        requests = 0

    state = State()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:  # quiet
            pass

        def _send(self, status: int, doc: Any) -> None:
            data = json.dumps(doc).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:  # noqa: N802
            if self.path.rstrip("/") == "/v1/models":
                self._send(200, {"data": [{"id": model_name}]})
            else:
                self._send(404, {"error": "not found"})

        def do_POST(self) -> None:  # noqa: N802
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            state.requests += 1
            k = int(body.get("prompt_logprobs", body.get("logprobs", 0)))
            vocab = model.get_output_embeddings().out_features
            asked = vocab if k == -1 else k
            limit = vocab if max_logprobs == -1 else max_logprobs
            if asked > limit:
                self._send(400, {"error": {"message": f"Requested prompt logprobs of {asked}, which is greater than "
                                                      f"max allowed: {limit}", "param": "prompt_logprobs"}})
                return
            prompts = body["prompt"]
            if prompts and isinstance(prompts[0], int):
                prompts = [prompts]
            if "prompt_logprobs" in body:
                logprobs = prompt_logprobs(model, [list(p) for p in prompts], k)
                choices = [{"index": i, "text": "", "prompt_logprobs": lp} for i, lp in enumerate(logprobs)]
            else:  # generation logprobs of one token: the law after each prompt, keys "token_id:N"
                laws = prompt_logprobs(model, [list(p) + [0] for p in prompts], k)
                choices = [{"index": i, "text": "", "logprobs": {
                    "tokens": ["token_id:0"], "token_logprobs": [0.0],
                    "top_logprobs": [{f"token_id:{t}": v["logprob"] for t, v in law[-1].items() if k == -1 or
                                      v["rank"] <= k}]}} for i, law in enumerate(laws)]
            self._send(200, {"object": "text_completion", "model": model_name, "choices": choices})

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    state.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
