"""Wrap a plain sampling function as an engine.

The simplest third-party engine is a function
``fn(prompt_ids: list[int], n: int, params: SamplingParams, seed: int) -> list[list[int]]``
returning ``n`` generated continuations (token ids, EOS included when generated, prompt
excluded). :class:`FunctionEngine` calls it once per prompt and lays the rows out as the
engine contract requires. No torch is imported here.

Vocabulary: the function declares its model's vocabulary size and EOS id, either as
attributes (``fn.vocab_size = 32000``, ``fn.eos_token_id = 2``; ``None`` = no EOS) or as
engine options (``--candidate-option vocab_size=32000``), the options winning. Undeclared,
they default to the bundled byte model's (259 and 257), and errors then say so.
"""

from __future__ import annotations

import operator
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from speceq.engines.base import SampleBatch, SampleRequest, batch_from_lists
from speceq.errors import ConfigError, EngineError
from speceq.models.vocab import DEFAULT_SOURCE
from speceq.params import SamplingParams

SampleFunction = Callable[[list[int], int, SamplingParams, int], Sequence[Sequence[int]]]

#: Defaults match the bundled byte models (speceq.models: VOCAB_SIZE, EOS_ID).
DEFAULT_VOCAB_SIZE = 259
DEFAULT_EOS_TOKEN_ID = 257
#: Marks an option that was not given (``None`` is a valid EOS: "no EOS").
_UNSET: Any = object()


def prompt_seed(seed: int, prompt_index: int) -> int:
    """The seed passed to the function for one prompt: independent streams per prompt."""
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ConfigError(f"expected a non-negative integer, got {seed!r}", where="seed")
    return int(np.random.SeedSequence([int(seed), int(prompt_index)]).generate_state(1, dtype=np.uint32)[0])


class FunctionEngine:
    """An engine around ``fn(prompt_ids, n, params, seed) -> list of n token lists``.

    ``seed`` passed to ``fn`` is :func:`prompt_seed` of (request seed, prompt index), so
    prompts get independent streams and a request seed reproduces the whole batch when
    ``fn`` is deterministic given its seed. ``request.batch_size`` is not used: the function
    decides how it batches.

    ``vocab_size`` / ``eos_token_id``: the option when given, else the function's attribute of
    that name, else the bundled byte model's 259 / 257 (``vocab_source`` / ``eos_source`` say
    which: ``"option"``, ``"function attribute"`` or ``"default"``).
    """

    def __init__(
        self,
        fn: SampleFunction,
        *,
        vocab_size: int = _UNSET,
        eos_token_id: int | None = _UNSET,
        name: str | None = None,
    ) -> None:
        if not callable(fn):
            raise ConfigError(f"expected a callable, got {type(fn).__name__}", where="function engine")
        vocab_size, self.vocab_source = _declared(fn, "vocab_size", vocab_size, DEFAULT_VOCAB_SIZE)
        eos_token_id, self.eos_source = _declared(fn, "eos_token_id", eos_token_id, DEFAULT_EOS_TOKEN_ID)
        if isinstance(vocab_size, bool) or not isinstance(vocab_size, int) or vocab_size < 1:
            raise ConfigError(f"expected an integer >= 1, got {vocab_size!r}", where="function engine.vocab_size")
        if eos_token_id is not None and (
            isinstance(eos_token_id, bool) or not isinstance(eos_token_id, int) or not 0 <= eos_token_id < vocab_size
        ):
            note = (" (the bundled byte model's default: declare fn.eos_token_id or set the eos_token_id option,"
                    " None for no EOS)" if self.eos_source == DEFAULT_SOURCE else "")
            raise ConfigError(
                f"expected None or an id in [0, {vocab_size}), got {eos_token_id!r}{note}",
                where="function engine.eos_token_id",
            )
        self.fn = fn
        self.vocab_size = vocab_size
        self.eos_token_id = eos_token_id
        self.name = name or getattr(fn, "__name__", type(fn).__name__)

    def describe(self) -> dict[str, Any]:
        return {
            "engine": "function",
            "name": self.name,
            "function": f"{getattr(self.fn, '__module__', '?')}:{getattr(self.fn, '__qualname__', repr(self.fn))}",
            "vocab_size": self.vocab_size,
            "eos_token_id": self.eos_token_id,
            "vocab_source": self.vocab_source,
            "eos_source": self.eos_source,
        }

    def sample(self, request: SampleRequest) -> SampleBatch:
        """Call the function once per prompt and interleave its rows (n rounds of every prompt)."""
        start = time.perf_counter()
        per_prompt: list[list[list[int]]] = []
        for i, prompt in enumerate(request.prompts):
            rows = self.fn(list(prompt), request.n, request.params, prompt_seed(request.seed, i))
            per_prompt.append(self._check_rows(rows, i, request.n, request.params.max_new_tokens))
        layout = request.rows()
        ordered = [per_prompt[int(p)][j // len(request.prompts)] for j, p in enumerate(layout)]
        return batch_from_lists(
            ordered, layout, request.params.max_new_tokens, wall_time_s=time.perf_counter() - start
        )

    def _check_rows(self, rows: Any, prompt_index: int, n: int, max_new_tokens: int) -> list[list[int]]:
        where = f"prompt {prompt_index}"
        if isinstance(rows, (str, bytes)) or not isinstance(rows, (Sequence, np.ndarray)):
            raise EngineError(
                f"{where}: the function returned {type(rows).__name__}, expected a list of {n} token lists",
                engine=self.name,
            )
        if len(rows) != n:
            raise EngineError(f"{where}: the function returned {len(rows)} rows, expected n={n}", engine=self.name)
        out: list[list[int]] = []
        for j, row in enumerate(rows):
            try:
                ids = [operator.index(t) for t in row]
            except TypeError as exc:
                raise EngineError(
                    f"{where} row {j}: not a list of integer token ids ({exc})", engine=self.name
                ) from None
            if len(ids) > max_new_tokens:
                raise EngineError(
                    f"{where} row {j}: {len(ids)} tokens, more than max_new_tokens={max_new_tokens}", engine=self.name
                )
            out.append(ids)
        return out


def _declared(fn: Any, attr: str, option: Any, default: Any) -> tuple[Any, str]:
    """(value, source) of ``vocab_size`` / ``eos_token_id``: option, else ``fn.<attr>``, else default."""
    if option is not _UNSET:
        return option, "option"
    if hasattr(fn, attr):
        return getattr(fn, attr), "function attribute"
    return default, DEFAULT_SOURCE
