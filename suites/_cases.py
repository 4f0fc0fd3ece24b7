"""Case builders shared by the suites: byte-encoded prompts of the bundled models."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from speceq.core.params import SamplingParams
from speceq.inputs.cases import Case
from speceq.models.prompts import DEFAULT_PROMPTS
from speceq.models.tokenizer import ByteTokenizer

#: Rows per engine batch in suites that do not study batching: copies of one prompt share a
#: batch (no padding), which keeps sampling fast; test_batch_invariance covers batch size 1
#: and ragged batches.
FAST_BATCH = 64
PROMPTS: tuple[str, ...] = DEFAULT_PROMPTS
_TOKENIZER = ByteTokenizer()


def encode(text: str) -> tuple[int, ...]:
    return tuple(_TOKENIZER.encode(text))


def byte_case(case_id: str, prompt: str, *, batch_size: int = FAST_BATCH, companions: Sequence[str] = (),
              **params: Any) -> Case:
    """A case of ``prompt`` (text, byte-encoded) with ``params`` (SamplingParams fields)."""
    return Case(case_id=case_id, prompt_ids=encode(prompt), params=SamplingParams(**params), batch_size=batch_size,
                companions=tuple(encode(c) for c in companions), text=prompt)
