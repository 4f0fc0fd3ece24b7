"""Tiny numpy samplers for the plugin tests (no torch): plain functions and FunctionEngines.

Each row draws ``max_new_tokens`` tokens i.i.d. from a fixed law over 6 tokens (5 = EOS,
which ends the row unless ``ignore_eos``), sharpened or flattened by the temperature.
``correct`` samples that law; ``shifted`` moves ``SHIFT`` of the mass onto token 0 (a TV
shift of about ``SHIFT``, found at a few hundred samples); ``unseeded`` samples the correct
law from numpy's global generator, ignoring the seed. Deterministic given the seed (except
``unseeded``). Usable as engine specs ``toy_engines:correct_engine`` etc.
"""

from __future__ import annotations

import numpy as np

from speceq.core.params import SamplingParams
from speceq.engines.function import FunctionEngine

VOCAB = 6
EOS = 5
BASE_LOGITS = np.log(np.array([0.30, 0.25, 0.20, 0.15, 0.07, 0.03]))
SHIFT = 0.25


def law(params: SamplingParams, shift: float = 0.0) -> np.ndarray:
    """Next-token law of the toy model under ``params`` (temperature, ignore_eos), with ``shift``."""
    logits = BASE_LOGITS / max(params.temperature, 1e-6)
    if params.ignore_eos:
        logits = logits.copy()
        logits[EOS] = -np.inf
    p = np.exp(logits - logits.max())
    p /= p.sum()
    if shift:
        p = (1.0 - shift) * p
        p[0] += shift
    return p


def _draw(prompt_ids: list[int], n: int, params: SamplingParams, seed: int, shift: float) -> list[list[int]]:
    p = law(params, shift)
    rng = np.random.default_rng(seed)
    if params.greedy:
        tokens = np.full((n, params.max_new_tokens), int(p.argmax()))
    else:
        u = rng.random((n, params.max_new_tokens))
        tokens = np.minimum(np.searchsorted(np.cumsum(p), u, side="right"), VOCAB - 1)
    rows = []
    for row in tokens.tolist():
        if EOS in row and not params.ignore_eos:
            row = row[: row.index(EOS) + 1]
        rows.append(row)
    return rows


def correct(prompt_ids: list[int], n: int, params: SamplingParams, seed: int) -> list[list[int]]:
    return _draw(prompt_ids, n, params, seed, 0.0)


def shifted(prompt_ids: list[int], n: int, params: SamplingParams, seed: int) -> list[list[int]]:
    return _draw(prompt_ids, n, params, seed, SHIFT)


def unseeded(prompt_ids: list[int], n: int, params: SamplingParams, seed: int) -> list[list[int]]:
    return _draw(prompt_ids, n, params, int(np.random.randint(2**31)), 0.0)


correct_engine = FunctionEngine(correct, vocab_size=VOCAB, eos_token_id=EOS, name="toy-correct")
baseline_engine = FunctionEngine(correct, vocab_size=VOCAB, eos_token_id=EOS, name="toy-baseline")
shifted_engine = FunctionEngine(shifted, vocab_size=VOCAB, eos_token_id=EOS, name="toy-shifted")
unseeded_engine = FunctionEngine(unseeded, vocab_size=VOCAB, eos_token_id=EOS, name="toy-unseeded")
