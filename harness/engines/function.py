"""Wrap a plain sampling function as an engine.

The simplest third-party engine is a function
``fn(prompt_ids: list[int], n: int, params: SamplingParams, seed: int) -> rows``
returning ``n`` generated continuations (token ids, EOS included when generated, prompt
excluded). ``rows`` may be a list of lists, a list of numpy arrays or torch tensors, or one
2-D numpy array / torch tensor (``n`` rows; a row padded with -1 after its end is cut
there). ``params`` reads both as attributes and as a mapping (``params.temperature``,
``params["temperature"]``, ``dict(params)``). :class:`FunctionEngine` calls the function
once per prompt and lays the rows out as the engine contract requires. No torch is
imported here.

Vocabulary: the function declares its model's vocabulary size and EOS id, either as
attributes (``fn.vocab_size = 32000``, ``fn.eos_token_id = 2``; ``None`` = no EOS) or as
engine options (``--candidate-option vocab_size=32000``), the options winning. Undeclared,
they default to the bundled byte model's (259 and 257), and errors then say so.
"""

from __future__ import annotations

import dataclasses
import operator
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

from speceq.core.params import SamplingParams
from speceq.engines.base import PAD_OUT, SampleBatch, SampleRequest, batch_from_lists
from speceq.engines.row_progress import report_rows
from speceq.errors import ConfigError, EngineError
from speceq.models.vocab import DEFAULT_SOURCE

SampleFunction = Callable[[list[int], int, SamplingParams, int], Sequence[Sequence[int]]]

#: Defaults match the bundled byte models (speceq.models: VOCAB_SIZE, EOS_ID).
DEFAULT_VOCAB_SIZE = 259
DEFAULT_EOS_TOKEN_ID = 257
#: Marks an option that was not given (``None`` is a valid EOS: "no EOS").
_UNSET: Any = object()


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class FunctionParams(SamplingParams):
    """The SamplingParams a plain function receives: attributes, and read-only mapping access too."""

    def __getitem__(self, key: str) -> Any:
        if key not in self.keys():
            raise KeyError(f"{key!r} is not a sampling parameter; known: {', '.join(self.keys())}")
        return getattr(self, key)

    def keys(self) -> tuple[str, ...]:
        return tuple(f.name for f in dataclasses.fields(SamplingParams))

    def get(self, key: str, default: Any = None) -> Any:
        return getattr(self, key) if key in self.keys() else default

    def items(self) -> list[tuple[str, Any]]:
        return [(k, getattr(self, k)) for k in self.keys()]

    def values(self) -> list[Any]:
        return [getattr(self, k) for k in self.keys()]

    def __iter__(self) -> Iterator[str]:
        return iter(self.keys())

    def __len__(self) -> int:
        return len(self.keys())

    def __contains__(self, key: object) -> bool:
        return key in self.keys()

    @classmethod
    def of(cls, params: SamplingParams) -> FunctionParams:
        return params if isinstance(params, cls) else cls(**params.to_dict())


def _as_rows(rows: Any) -> Any:
    """numpy arrays and torch tensors (or lists of them) as lists of int lists; -1 padding cut off."""
    if hasattr(rows, "tolist") and hasattr(rows, "ndim"):  # numpy array or torch tensor
        if rows.ndim == 1 and len(rows) == 0:
            return []
        if rows.ndim != 2:
            return rows  # reported by _check_rows with its shape
        rows = rows.tolist()
        return [_cut_padding(r) for r in rows]
    if isinstance(rows, (list, tuple)):
        return [_cut_padding(r.tolist()) if hasattr(r, "tolist") and hasattr(r, "ndim") else r for r in rows]
    return rows


def _cut_padding(row: list[Any]) -> list[Any]:
    end = len(row)
    while end and row[end - 1] == PAD_OUT:
        end -= 1
    return row[:end]


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
    which: ``"option"``, ``"function attribute"`` or ``"default"``). ``sampling_fields``: the
    function's attribute of that name (the request fields it applies, see
    :func:`speceq.engines.base.sampling_fields`), else none.
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
        self.sampling_fields = dict(getattr(fn, "sampling_fields", None) or {})

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
        params = FunctionParams.of(request.params)
        for i, prompt in enumerate(request.prompts):
            rows = _as_rows(self.fn(list(prompt), request.n, params, prompt_seed(request.seed, i)))
            per_prompt.append(self._check_rows(rows, i, request.n, request.params.max_new_tokens))
            report_rows((i + 1) * request.n)
        layout = request.rows()
        ordered = [per_prompt[int(p)][j // len(request.prompts)] for j, p in enumerate(layout)]
        return batch_from_lists(
            ordered, layout, request.params.max_new_tokens, wall_time_s=time.perf_counter() - start
        )

    def _check_rows(self, rows: Any, prompt_index: int, n: int, max_new_tokens: int) -> list[list[int]]:
        where = f"prompt {prompt_index}"
        wrong_shape = hasattr(rows, "ndim") and hasattr(rows, "shape") and rows.ndim != 2
        if wrong_shape or isinstance(rows, (str, bytes)) or not isinstance(rows, (Sequence, np.ndarray)):
            shape = f" of shape {tuple(rows.shape)}" if hasattr(rows, "shape") else ""
            raise EngineError(
                f"{where}: the function returned {type(rows).__name__}{shape}, expected {n} token lists "
                "(a list of lists, arrays or tensors, or one 2-D array/tensor)",
                engine=self.name,
            )
        if len(rows) != n:
            raise EngineError(f"{where}: the function returned {len(rows)} rows, expected n={n}", engine=self.name)
        out: list[list[int]] = []
        for j, row in enumerate(rows):
            try:
                ids = [operator.index(t) for t in (row.tolist() if hasattr(row, "tolist") else row)]
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
