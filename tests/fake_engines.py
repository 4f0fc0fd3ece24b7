"""Fake numpy engines for the store, run and CLI tests (no torch): conform to speceq.engines.base.

``FakeEngine`` samples each token from a fixed distribution over 8 tokens (7 = EOS) that
depends on the position and on the previous token, seeded only by ``request.seed``, so
a seed reproduces a request exactly. ``shift`` moves probability mass onto token 0 (a
distribution bug of known size); the other options make it misbehave on purpose.
Usable as ``"fake_engines:FakeEngine"`` engine specs when this folder is on ``sys.path``.
"""

from __future__ import annotations

import os
import signal
import time
from typing import Any

import numpy as np

from speceq.engines.base import SampleBatch, SampleRequest

VOCAB = 8
EOS = 7


def step_probs(position: int, previous: int, shift: float) -> np.ndarray:
    """The fake model's next-token distribution (length VOCAB, sums to 1)."""
    logits = np.cos(np.arange(VOCAB) * (1.0 + 0.37 * position) + 0.5 * previous)
    logits[EOS] = -1.0 + 0.4 * position
    p = np.exp(logits)
    p /= p.sum()
    if shift:
        p = (1 - shift) * p
        p[0] += shift
    return p


class FakeEngine:
    """Seeded numpy sampler (see the module docstring).

    Options: ``shift`` (mass moved to token 0), ``name``, ``fail_on_call`` (raise
    RuntimeError on that call, 1-based), ``bad_output_on_call`` (return a batch with a
    token outside the vocabulary), ``sigint_on_calls`` (send SIGINT to this process during
    those calls), ``sigterm_on_call`` (send SIGTERM to this process during that call), ``calls_dir``
    (a folder: each call first writes an empty file ``<pid>-<call>`` there, so a test sees which process is
    inside a call), ``kill_on_call`` (SIGKILL this process during that call), ``kill_once_marker`` (a file path:
    SIGKILL this process on its first call unless the file exists, creating it first, so only
    the first process that tries dies), ``sigint_parent_on_call`` (send SIGINT to the parent
    process during that call: a worker's driver), ``sigterm_parent_on_call`` (the same with SIGTERM: a
CI runner cancelling the job), ``delay_s``.
    """

    vocab_size = VOCAB
    eos_token_id = EOS

    def __init__(self, *, shift: float = 0.0, name: str = "fake", fail_on_call: int | None = None,
                 bad_output_on_call: int | None = None, sigint_on_calls: tuple[int, ...] = (),
                 kill_on_call: int | None = None, delay_s: float = 0.0, kill_once_marker: str | None = None,
                 sigint_parent_on_call: int | None = None, sigterm_parent_on_call: int | None = None,
                 sigterm_on_call: int | None = None, calls_dir: str | None = None) -> None:
        self.shift = float(shift)
        self.name = name
        self.fail_on_call = fail_on_call
        self.bad_output_on_call = bad_output_on_call
        self.sigint_on_calls = tuple(sigint_on_calls)
        self.kill_on_call = kill_on_call
        self.delay_s = delay_s
        self.kill_once_marker = kill_once_marker
        self.sigint_parent_on_call = sigint_parent_on_call
        self.sigterm_parent_on_call = sigterm_parent_on_call
        self.sigterm_on_call = sigterm_on_call
        self.calls_dir = calls_dir
        self.calls = 0

    def describe(self) -> dict[str, Any]:
        return {"engine": "fake", "shift": self.shift, "vocab": VOCAB}

    def sample(self, request: SampleRequest) -> SampleBatch:
        self.calls += 1
        if self.calls_dir is not None:
            open(os.path.join(self.calls_dir, f"{os.getpid()}-{self.calls}"), "w").close()
        if self.kill_on_call == self.calls:
            os.kill(os.getpid(), signal.SIGKILL)
        if self.kill_once_marker is not None and not os.path.exists(self.kill_once_marker):
            open(self.kill_once_marker, "w").close()  # the next process that gets here samples
            os.kill(os.getpid(), signal.SIGKILL)
        for i in range(self.sigint_on_calls.count(self.calls)):
            if i:  # two presses, apart: signals sent back to back from a sampling thread arrive as one
                time.sleep(0.5)
            os.kill(os.getpid(), signal.SIGINT)
        if self.sigint_parent_on_call == self.calls:  # Ctrl-C reaching the driver of a worker process
            os.kill(os.getppid(), signal.SIGINT)
        if self.sigterm_on_call == self.calls:
            os.kill(os.getpid(), signal.SIGTERM)
        if self.sigterm_parent_on_call == self.calls:
            os.kill(os.getppid(), signal.SIGTERM)
        if self.fail_on_call == self.calls:
            raise RuntimeError("simulated engine crash")
        if self.delay_s:
            time.sleep(self.delay_s)
        rng = np.random.default_rng(request.seed)
        params = request.params
        prompt_index = request.rows()
        rows, L = len(prompt_index), params.max_new_tokens
        tokens = np.full((rows, L), -1, dtype=np.int64)
        lengths = np.full(rows, L, dtype=np.int64)
        prev = np.array([len(p) % VOCAB for p in request.prompts], dtype=np.int64)[prompt_index]
        alive = np.ones(rows, dtype=bool)
        for t in range(L):
            table = np.stack([step_probs(t, v, self.shift) for v in range(VOCAB)])  # [prev, VOCAB]
            if params.ignore_eos:
                table[:, EOS] = 0.0
                table /= table.sum(axis=1, keepdims=True)
            probs = table[prev]
            if params.greedy:
                tok = probs.argmax(axis=1)
            else:
                u = rng.random(rows)
                top = EOS - 1 if params.ignore_eos else VOCAB - 1  # EOS is the last id
                tok = np.minimum((u[:, None] >= np.cumsum(probs, axis=1)).sum(axis=1), top)
            tokens[alive, t] = tok[alive]
            ended = alive & (tok == EOS) & (not params.ignore_eos)
            lengths[ended] = t + 1
            alive &= ~ended
            prev = tok
        if self.bad_output_on_call == self.calls:
            tokens[0, 0] = VOCAB + 5
        return SampleBatch(tokens=tokens, lengths=lengths, prompt_index=prompt_index, wall_time_s=0.001 * rows)

