"""Batch inputs of the project's own torch engines: prompt checks, distinct prompts, left padding."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from speceq.errors import ConfigError


def check_prompts(prompts: Sequence[Sequence[int]], vocab_size: int, engine: str) -> None:
    """Raise ConfigError naming the prompt when it is empty or holds ids outside the vocabulary."""
    for i, p in enumerate(prompts):
        if len(p) == 0:
            raise ConfigError("empty prompt: the model needs at least one token", where=f"{engine} prompt {i}")
        bad = [t for t in p if not (0 <= int(t) < vocab_size)]
        if bad:
            raise ConfigError(
                f"token {bad[0]} is outside the model's vocabulary [0, {vocab_size})", where=f"{engine} prompt {i}"
            )


def distinct_prompts(
    prompts: Sequence[Sequence[int]], device: str | torch.device
) -> tuple[list[tuple[int, ...]], torch.Tensor]:
    """Distinct prompts in order of first appearance, and the index of each row's prompt ``[rows]``."""
    first: dict[tuple[int, ...], int] = {}
    source = [first.setdefault(tuple(int(t) for t in p), len(first)) for p in prompts]
    return list(first), torch.tensor(source, dtype=torch.long, device=device)


def left_padded(
    seqs: Sequence[Sequence[int]], pad_id: int, device: str | torch.device
) -> tuple[torch.Tensor, torch.Tensor]:
    """Left-pad token lists: ids ``[rows, width]`` int64 and valid ``[rows, width]`` bool."""
    width = max((len(s) for s in seqs), default=0)
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    valid = torch.zeros((len(seqs), width), dtype=torch.bool)
    for r, s in enumerate(seqs):
        if len(s):
            ids[r, width - len(s) :] = torch.as_tensor(list(s), dtype=torch.long)
            valid[r, width - len(s) :] = True
    return ids.to(device), valid.to(device)
