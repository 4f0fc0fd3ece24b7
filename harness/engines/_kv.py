"""A batch KV cache with per-slot validity: ragged rows in one rectangular cache.

Every row of a batch shares the cache's columns (slots). A slot is *valid* for a row when
it holds one of that row's real tokens; left padding, dummy slots and rolled-back
(rejected) draft tokens are invalid and are masked out of attention through the 2-D
attention mask. Position ids are explicit per row: a row's next position is the number of
its valid slots, so each row sees exactly the positions of its own unpadded sequence.
Trailing columns that no row uses any more are cropped from the cache.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from speceq.models.torch_utils import accepts_kwarg, cache_kwarg


class SlotCache:
    """KV cache of one model for a batch of rows.

    valid: bool ``[rows, columns]``, which cached slots each row attends to.
    left_pad: int64 ``[rows]``, invalid slots before the row's first token after prefill
        (kept for position-id hooks and diagnostics).
    """

    def __init__(self, model: Any, rows: int, device: str | torch.device) -> None:
        from transformers import DynamicCache

        self.model = model
        self.device = torch.device(device)
        self.cache = DynamicCache(config=model.config)
        self._cache_kw = cache_kwarg(model)
        self._keeps_logits = accepts_kwarg(model, "logits_to_keep")
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
        new_valid = torch.cat([self.valid, valid], dim=1)
        extra: dict[str, Any] = {self._cache_kw: self.cache}
        if last_only and self._keeps_logits:
            extra["logits_to_keep"] = 1
        # an all-valid cache needs no padding mask: the model's own causal mask is the same
        mask = None if bool(new_valid.all()) else new_valid.long()
        out = self.model(
            input_ids=tokens,
            attention_mask=mask,
            position_ids=position_ids,
            use_cache=True,
            **extra,
        )
        self.valid = new_valid
        return out.logits

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
        self.cache.batch_select_indices(index)
        self.valid = self.valid[index]
        self.left_pad = self.left_pad[index]
        self._crop_unused_tail()
