"""A sampler under test, plugged into speceq as a plain function.

It stands in for your engine: ``sample(prompt_ids, n, params, seed)`` returns ``n``
continuations of one prompt as token-id lists (EOS included when sampled, prompt excluded).
It samples speceq's bundled byte-level target model, the model speceq's ``baseline`` engine
samples, with its own temperature / top-k / top-p code and no KV cache.

``sample_too_hot`` is the same sampler with a deliberate bug (the temperature is multiplied
by 1.5); the tests use it as a negative control: a gate that cannot catch it is not a gate.
"""

from __future__ import annotations

import dataclasses
import functools

import torch

EOS_ID = 257  # the bundled models' <eos>


@functools.cache
def _model():
    from speceq.models import load_target

    return load_target()


def _next_token(logits: torch.Tensor, params, generator: torch.Generator) -> torch.Tensor:
    """One token per row from ``logits`` (rows x vocab) with temperature, top-k and top-p."""
    if params.temperature == 0:
        return logits.argmax(dim=-1)
    logits = logits / params.temperature
    if params.top_k > 0:
        kth = torch.topk(logits, params.top_k, dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    probs = torch.softmax(logits, dim=-1)
    if params.top_p < 1.0:
        sorted_probs, order = probs.sort(dim=-1, descending=True)
        mass_before = sorted_probs.cumsum(dim=-1) - sorted_probs
        sorted_probs = sorted_probs.masked_fill(mass_before >= params.top_p, 0.0)
        probs = torch.zeros_like(probs).scatter(-1, order, sorted_probs)
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)


def sample(prompt_ids: list[int], n: int, params, seed: int) -> list[list[int]]:
    """``n`` continuations of ``prompt_ids`` (at most ``params.max_new_tokens`` tokens each)."""
    return _sample(prompt_ids, n, params, seed, temperature_factor=1.0)


def sample_too_hot(prompt_ids: list[int], n: int, params, seed: int) -> list[list[int]]:
    """The same sampler with a bug: it samples at 1.5 x the requested temperature."""
    return _sample(prompt_ids, n, params, seed, temperature_factor=1.5)


@torch.no_grad()
def _sample(prompt_ids: list[int], n: int, params, seed: int, *, temperature_factor: float) -> list[list[int]]:
    params = dataclasses.replace(params, temperature=params.temperature * temperature_factor)
    generator = torch.Generator().manual_seed(seed)
    rows = torch.tensor([prompt_ids] * n)
    done = torch.zeros(n, dtype=torch.bool)
    out: list[list[int]] = [[] for _ in range(n)]
    for _ in range(params.max_new_tokens):
        logits = _model()(rows).logits[:, -1, :].float()
        if params.ignore_eos:
            logits[:, EOS_ID] = float("-inf")
        token = _next_token(logits, params, generator)
        for i in torch.nonzero(~done).flatten().tolist():
            out[i].append(int(token[i]))
        done |= token == EOS_ID
        if bool(done.all()):
            break
        rows = torch.cat([rows, token[:, None]], dim=1)
    return out

