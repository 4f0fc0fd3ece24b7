"""The training corpus of the bundled models: the Python standard library's top-level sources.

The ``*.py`` files directly under ``sysconfig.get_paths()["stdlib"]`` (no packages, no
site-packages; ~4.7 MB on CPython 3.11), sorted by name, each followed by ``<eos>``, form
one byte stream. The last :data:`HELDOUT_BYTES` bytes are held out for evaluation.
Training windows are ``<bos>`` + ``seq_len - 1`` bytes from a random offset, the same
shape as a prompt (``<bos>`` + text that starts anywhere in a file).
"""

from __future__ import annotations

import hashlib
import sysconfig
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from speceq.errors import ConfigError
from speceq.models.tokenizer import BOS_ID, EOS_ID

if TYPE_CHECKING:
    import torch

HELDOUT_BYTES = 200_000


@dataclass(frozen=True, slots=True)
class Corpus:
    """The token stream split into train and held-out parts, with its provenance."""

    train: torch.Tensor  # [n_train] int64 token ids
    heldout: torch.Tensor  # [n_heldout] int64 token ids
    n_files: int
    sha256: str  # of the whole stream, to tell corpora of different Pythons apart
    root: str


def stdlib_files(root: str | Path | None = None) -> list[Path]:
    """The sorted top-level ``*.py`` files of the standard library (or of ``root``)."""
    folder = Path(root) if root is not None else Path(sysconfig.get_paths()["stdlib"])
    files = sorted(folder.glob("*.py"))
    if not files:
        raise ConfigError("no *.py files found for the training corpus", where=str(folder))
    return files


def load_corpus(root: str | Path | None = None, heldout_bytes: int = HELDOUT_BYTES) -> Corpus:
    """Read the corpus and split off the last ``heldout_bytes`` tokens."""
    import torch

    files = stdlib_files(root)
    stream = bytearray()
    eos_positions = []
    for f in files:
        stream += f.read_bytes()
        eos_positions.append(len(stream))
        stream.append(0)  # placeholder: <eos> does not fit in a byte, patched below
    ids = torch.frombuffer(stream, dtype=torch.uint8).to(torch.int64)  # copies
    ids[torch.tensor(eos_positions)] = EOS_ID
    if not 0 < heldout_bytes < ids.numel() // 2:
        raise ConfigError(f"held-out size {heldout_bytes} must be positive and under half the corpus ({ids.numel()})")
    digest = hashlib.sha256(ids.numpy().tobytes()).hexdigest()
    root_str = str(files[0].parent)
    return Corpus(ids[:-heldout_bytes], ids[-heldout_bytes:], len(files), digest, root_str)


def random_windows(
    stream: torch.Tensor,  # [n] int64
    batch: int,
    seq_len: int,
    generator: torch.Generator,
    bos_id: int = BOS_ID,
) -> torch.Tensor:  # [batch, seq_len] int64, column 0 is <bos>
    """``batch`` windows of ``<bos>`` (``bos_id``) + ``seq_len - 1`` consecutive tokens at random offsets."""
    import torch

    starts = torch.randint(0, stream.numel() - seq_len, (batch,), generator=generator)
    offsets = torch.arange(seq_len - 1)
    body = stream[starts[:, None] + offsets[None, :]]
    bos = torch.full((batch, 1), bos_id, dtype=torch.int64)
    return torch.cat([bos, body], dim=1)


def fixed_windows(
    stream: torch.Tensor, n_windows: int, seq_len: int, bos_id: int = BOS_ID
) -> torch.Tensor:  # [n_windows, seq_len]
    """``n_windows`` evenly spaced ``<bos>``-prefixed windows: a deterministic evaluation slice."""
    import torch

    span = stream.numel() - seq_len
    if n_windows < 1 or span < n_windows:
        raise ConfigError(f"cannot cut {n_windows} windows of {seq_len} tokens from {stream.numel()} tokens")
    starts = torch.linspace(0, span, n_windows).long()
    body = stream[starts[:, None] + torch.arange(seq_len - 1)[None, :]]
    bos = torch.full((n_windows, 1), bos_id, dtype=torch.int64)
    return torch.cat([bos, body], dim=1)
