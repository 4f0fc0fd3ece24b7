"""The bundled tiny models: a trained byte-level Llama target and its draft.

Both read the byte vocabulary of :class:`ByteTokenizer` (ids 0..255 = bytes, ``<bos>`` = 256,
``<eos>`` = 257, ``<pad>`` = 258) and were trained on Python standard-library source by
``python -m tools.training.train`` (see ``metrics.json`` next to this file). Importing this
package is cheap: torch and transformers are imported inside the loaders.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from speceq.errors import ConfigError
from speceq.models.tokenizer import BOS_ID, EOS_ID, PAD_ID, VOCAB_SIZE, ByteTokenizer

if TYPE_CHECKING:
    import torch
    import transformers

__all__ = [
    "BOS_ID",
    "DRAFT_DIR",
    "DRAFT_HD32_DIR",
    "EOS_ID",
    "METRICS_PATH",
    "MODELS_DIR",
    "PAD_ID",
    "TARGET_DIR",
    "VOCAB_SIZE",
    "ByteTokenizer",
    "load_draft",
    "load_model",
    "load_target",
]

MODELS_DIR = Path(__file__).resolve().parent
TARGET_DIR = MODELS_DIR / "target"
DRAFT_DIR = MODELS_DIR / "draft"
#: The same draft distilled with 2 heads of 32 for vLLM's CPU build (``draft_model`` there).
DRAFT_HD32_DIR = MODELS_DIR / "draft-hd32"
METRICS_PATH = MODELS_DIR / "metrics.json"


def load_model(
    path: str | Path, *, dtype: torch.dtype | None = None, device: str | torch.device = "cpu"
) -> transformers.PreTrainedModel:
    """Load a causal LM from a local folder, offline, in eval mode with gradients off.

    ``dtype`` defaults to ``torch.float32``. Raises :class:`ConfigError` naming the path
    when the folder or its ``config.json`` is missing, or the folder is not a causal LM.
    """
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # "Loading weights" bars on every load would drown speceq's own progress
    folder = Path(path)
    where = str(folder)
    if not folder.is_dir():
        raise ConfigError("model folder does not exist", where=where)
    if not (folder / "config.json").is_file():
        raise ConfigError("no config.json: not a Hugging Face model folder", where=where)
    try:
        config = AutoConfig.from_pretrained(folder, local_files_only=True)
    except (OSError, ValueError, KeyError) as exc:
        raise ConfigError(f"unreadable config.json: {exc}", where=where) from exc
    try:
        model: Any = AutoModelForCausalLM.from_pretrained(
            folder, config=config, dtype=dtype or torch.float32, local_files_only=True, use_safetensors=True
        )
    except ValueError as exc:
        raise ConfigError(
            f"not a causal language model (model_type {getattr(config, 'model_type', None)!r}): {exc}", where=where
        ) from exc
    except OSError as exc:
        raise ConfigError(f"cannot load the weights (model.safetensors expected): {exc}", where=where) from exc
    model.to(device)
    model.eval()
    model.requires_grad_(False)
    return model


def load_target(*, dtype: torch.dtype | None = None, device: str | torch.device = "cpu") -> transformers.PreTrainedModel:
    """The bundled target (4-layer Llama, ~1.1 M parameters)."""
    return load_model(TARGET_DIR, dtype=dtype, device=device)


def load_draft(*, dtype: torch.dtype | None = None, device: str | torch.device = "cpu") -> transformers.PreTrainedModel:
    """The bundled draft (1-layer Llama, ~74 k parameters), distilled from the target."""
    return load_model(DRAFT_DIR, dtype=dtype, device=device)
