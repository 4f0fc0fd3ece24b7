"""A batch KV cache with per-slot validity: ragged rows in one rectangular cache.

Every row of a batch shares the cache's columns (slots). A slot is *valid* for a row when
it holds one of that row's real tokens; left padding, dummy slots and rolled-back
(rejected) draft tokens are invalid and are masked out of attention through the 2-D
attention mask. Position ids are explicit per row: a row's next position is the number of
its valid slots, so each row sees exactly the positions of its own unpadded sequence.
Trailing columns that no row uses any more are cropped from the cache.

Models that :func:`speceq.models.fast_forward.fast_model` supports (the bundled Llama
models) run through its lean forward, which gives bit-identical logits to transformers'
forward; every other model runs through its own forward with a ``DynamicCache``.

On that fast path (CPU only) the first :data:`MEMO_DEPTH` forward calls of a SlotCache are
memoised per model: the batches of a case replay the same prefill (and, with one new token,
the same first step) over and over, and a CPU forward with a fixed thread count is a
deterministic function of its inputs, so a stored result IS the result a new forward would
give, bit for bit. The key is everything the result depends on: the cache's whole history
(every forward's tokens, valid slots and position ids, every row selection and rollback),
the call's ``last_only`` and torch's thread count. The memo of a model holds at most
:data:`MEMO_ENTRIES` results and :data:`MEMO_BYTES` bytes (storage the results reference).
"""

from __future__ import annotations

import weakref
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from speceq.models.fast_forward import fast_model
from speceq.models.torch_utils import accepts_kwarg, cache_kwarg

#: Forward calls per SlotCache (from its first) whose results are memoised on the fast path.
MEMO_DEPTH = 2
#: Memoised results kept per model (least recently used dropped first).
MEMO_ENTRIES = 32
#: Bytes of logits and KV tensors the memo of one model may hold; larger results are not stored.
MEMO_BYTES = 64 * 2**20

_memos: weakref.WeakKeyDictionary[Any, OrderedDict[tuple, _MemoEntry]] = weakref.WeakKeyDictionary()


@dataclass(frozen=True, slots=True)
class _MemoEntry:
    logits: torch.Tensor
    keys: tuple[torch.Tensor | None, ...]
    values: tuple[torch.Tensor | None, ...]
    valid: torch.Tensor
    left_pad: torch.Tensor

    @property
    def nbytes(self) -> int:
        tensors = (self.logits, *self.keys, *self.values)
        return sum(t.untyped_storage().nbytes() for t in tensors if t is not None)


def _tensor_key(t: torch.Tensor | None) -> tuple | None:
    if t is None:
        return None
    t = t.detach()
    return (str(t.dtype), tuple(t.shape), t.cpu().contiguous().numpy().tobytes())


class SlotCache:
    """KV cache of one model for a batch of rows.

    valid: bool ``[rows, columns]``, which cached slots each row attends to.
    left_pad: int64 ``[rows]``, invalid slots before the row's first token after prefill
        (kept for position-id hooks and diagnostics).
    """

    def __init__(self, model: Any, rows: int, device: str | torch.device) -> None:
        self.model = model
        self.device = torch.device(device)
        self.fast = fast_model(model)
        self.cache: Any
        # memo key of the cache's history so far; None = not memoised (past MEMO_DEPTH, slow path, GPU)
        self._history: tuple | None = None
        if self.fast is not None:
            self.cache = self.fast.new_cache()
            if self.device.type == "cpu":
                self._history = ()
        else:
            from transformers import DynamicCache

            self.cache = DynamicCache(config=model.config)
        self.valid = torch.zeros((rows, 0), dtype=torch.bool, device=self.device)
        self.left_pad = torch.zeros(rows, dtype=torch.long, device=self.device)

    @property
    def rows(self) -> int:
        return int(self.valid.shape[0])

    @property
    def columns(self) -> int:
        return int(self.valid.shape[1])

    @property
    def next_positions(self) -> torch.Tensor:  # [rows] int64
        """Position id the next valid token of each row gets (its count of valid slots)."""
        return self.valid.sum(dim=1)

    def positions_for(self, valid: torch.Tensor) -> torch.Tensor:  # [rows, width] int64
        """Correct position ids for new slots ``valid`` ``[rows, width]`` appended to the cache.

        Valid slots continue each row's own count; invalid slots get the position of the
        row's next valid token (they are masked, so any value works, but it must be in range).
        """
        return self.next_positions[:, None] + torch.cumsum(valid.long(), dim=1) - valid.long()

    def forward(
        self,
        tokens: torch.Tensor,  # [rows, width] int64
        valid: torch.Tensor,  # [rows, width] bool
        position_ids: torch.Tensor | None = None,  # [rows, width] int64; None = positions_for(valid)
        *,
        last_only: bool = False,
    ) -> torch.Tensor:  # [rows, width, vocab] logits ([rows, 1, vocab] with last_only)
        """Append ``width`` slots to every row, run the model on them, return their logits.

        ``last_only``: compute the logits of the last slot only (``logits_to_keep=1``).
        """
        if position_ids is None:
            position_ids = self.positions_for(valid)
        if self.columns == 0:
            self.left_pad = (~valid).long().cumprod(dim=1).sum(dim=1)
        memo_key = None
        if self._history is not None:
            memo_key = (*self._history, ("forward", _tensor_key(tokens), _tensor_key(valid), _tensor_key(position_ids),
                                         _tensor_key(self.valid), bool(last_only), torch.get_num_threads()))
            memo = _memos.setdefault(self.model, OrderedDict())
            hit = memo.get(memo_key)
            if hit is not None:
                memo.move_to_end(memo_key)
                self.cache.keys, self.cache.values = list(hit.keys), list(hit.values)
                self.valid, self.left_pad = hit.valid, hit.left_pad
                self._advance_history(memo_key)
                return hit.logits.clone()
        new_valid = torch.cat([self.valid, valid], dim=1)
        # an all-valid cache needs no padding mask: the model's own causal mask is the same
        mask = None if bool(new_valid.all()) else new_valid.long()
        if self.fast is not None:
            logits = self.fast(tokens, mask, position_ids, self.cache, logits_to_keep=1 if last_only else 0)
        else:
            extra: dict[str, Any] = {cache_kwarg(self.model): self.cache}
            if last_only and accepts_kwarg(self.model, "logits_to_keep"):
                extra["logits_to_keep"] = 1
            logits = self.model(
                input_ids=tokens,
                attention_mask=mask,
                position_ids=position_ids,
                use_cache=True,
                **extra,
            ).logits
        self.valid = new_valid
        if memo_key is not None:
            entry = _MemoEntry(logits.clone(), tuple(self.cache.keys), tuple(self.cache.values),
                               self.valid, self.left_pad)
            if entry.nbytes <= MEMO_BYTES // 4:  # big models' results are not worth holding
                memo = _memos.setdefault(self.model, OrderedDict())
                memo[memo_key] = entry
                while len(memo) > MEMO_ENTRIES or sum(e.nbytes for e in memo.values()) > MEMO_BYTES:
                    memo.popitem(last=False)
            self._advance_history(memo_key)
        return logits

    def _advance_history(self, key: tuple) -> None:
        forwards = sum(1 for step in key if step[0] == "forward")
        self._history = key if forwards < MEMO_DEPTH else None

    def _note(self, op: str, arg: torch.Tensor) -> None:
        """Add a state change other than a forward to the memo history."""
        if self._history is not None:
            self._history = (*self._history, (op, _tensor_key(arg)))

    def prefill(
        self,
        tokens: torch.Tensor,  # [unique, width] int64, left-padded distinct prompts
        valid: torch.Tensor,  # [unique, width] bool
        row_source: torch.Tensor,  # [rows] int64: which distinct prompt each row starts from
        position_fn: Callable[[SlotCache, torch.Tensor], torch.Tensor] | None = None,
        *,
        last_only: bool = False,
    ) -> torch.Tensor:  # [rows, width, vocab] logits ([rows, 1, vocab] with last_only)
        """Run each distinct prompt once, then copy its cache to every row that starts from it.

        Rows of a batch often share prompts (n samples of each); computing a prompt once
        and gathering its KV rows gives every row exactly the cache of its own pass.
        ``position_fn(slots, valid)`` gives the prompts' position ids (default
        :meth:`positions_for`), called while the cache holds the distinct prompts' rows.
        """
        if self.columns != 0:
            raise ValueError("prefill() must be the first call on a SlotCache")
        unique = int(tokens.shape[0])
        self.valid = torch.zeros((unique, 0), dtype=torch.bool, device=self.device)
        self.left_pad = torch.zeros(unique, dtype=torch.long, device=self.device)
        positions = position_fn(self, valid) if position_fn is not None else None
        logits = self.forward(tokens, valid, positions, last_only=last_only)
        self._note("prefill-rows", row_source)
        self.cache.batch_select_indices(row_source)
        self.valid = self.valid[row_source]
        self.left_pad = self.left_pad[row_source]
        return logits[row_source]

    def keep_last(self, keep: torch.Tensor) -> None:  # keep: [rows, width] bool
        """Roll back: the last ``width`` slots of each row stay valid only where ``keep`` is true.

        Rejected draft tokens become invisible to every later query of their row; trailing
        columns no row uses are cropped from the cache.
        """
        width = int(keep.shape[1])
        if width == 0:
            return
        self._note("keep-last", keep)
        self.valid = torch.cat([self.valid[:, :-width], self.valid[:, -width:] & keep.to(torch.bool)], dim=1)
        self._crop_unused_tail()

    def _crop_unused_tail(self) -> None:
        used = self.valid.any(dim=0)  # [columns]
        if bool(used.all()):
            return
        last_used = int(torch.nonzero(used).max()) + 1 if bool(used.any()) else 0
        drop = self.columns - last_used
        if drop > 0:
            self.cache.crop(-drop)
            self.valid = self.valid[:, :last_used]

    def select_rows(self, index: torch.Tensor) -> None:  # index: [kept_rows] int64
        """Keep only the rows ``index`` (finished rows leave the batch)."""
        self._note("select-rows", index)
        self.cache.batch_select_indices(index)
        self.valid = self.valid[index]
        self.left_pad = self.left_pad[index]
        self._crop_unused_tail()
