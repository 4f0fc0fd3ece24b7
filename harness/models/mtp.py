"""A tiny multi-token-prediction (MTP) model for transformers' ``use_mtp`` path, built from config.

No small checkpoint with MTP weights ships, so the ``mtp`` world builds one: a 2-layer
DeepSeek-V3 (an MTP-capable class of transformers) on the byte vocabulary of the bundled models
(259 ids, ``<bos>`` 256, ``<eos>`` 257, ``<pad>`` 258; the byte tokenizer files are copied, so the
byte world's cases apply), with one MTP layer, every weight drawn from fixed seeds. It is
untrained: its next-token laws are those of a random network (its head scaled up so that the laws
are peaked and a few hundred samples can see a shift), and its MTP drafts are poor, which keeps acceptance low but
leaves the path's output law equal to the main model's if the path is lossless.

transformers finds the MTP weights in the checkpoint by the class's
``_keys_to_ignore_on_load_unexpected`` patterns (DeepSeek-V3's says ``model.layers.61``, the
layer after its 61 decoder layers); the MTP layer of this 2-layer model is saved as
``model.layers.2.*``, and :func:`point_mtp_weights` points a loaded model's pattern there.

The folder is built once into the speceq model cache (:mod:`speceq.models.model_cache`).
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

#: Cache key (folder name under ``<cache>/models``); bump the suffix when the recipe changes.
MTP_CACHE_KEY = "mtp-deepseek-v3-tiny-v4"
MTP_DECODER_LAYERS = 2
MTP_SEED = 0
#: factor on the random LM head: next-token laws peaked enough for a few hundred samples to see a shift
HEAD_SCALE = 2.0


def _config() -> Any:
    from transformers import DeepseekV3Config

    return DeepseekV3Config(
        vocab_size=259, hidden_size=64, intermediate_size=128, moe_intermediate_size=32,
        num_hidden_layers=MTP_DECODER_LAYERS, num_attention_heads=2, num_key_value_heads=2,
        n_routed_experts=4, num_experts_per_tok=2, n_shared_experts=1, first_k_dense_replace=MTP_DECODER_LAYERS,
        q_lora_rank=None, kv_lora_rank=16, qk_rope_head_dim=8, qk_nope_head_dim=16, v_head_dim=16,
        n_group=1, topk_group=1, max_position_embeddings=512, initializer_range=0.2,
        bos_token_id=256, eos_token_id=257, pad_token_id=258, num_mtp_layers=1, tie_word_embeddings=False,
    )


def point_mtp_weights(model: Any) -> Any:
    """Make transformers look for ``model``'s MTP weights under ``model.layers.<num_hidden_layers>.`` (an
    instance attribute; the class keeps DeepSeek-V3's own ``model.layers.61``)."""
    layers = int(model.config.get_text_config().num_hidden_layers)
    model._keys_to_ignore_on_load_unexpected = [rf"model\.layers\.{layers}\..*"]
    return model


def build_mtp_folder(folder: Path) -> dict[str, Any]:
    """Write the tiny MTP model (weights, config, generation config, byte tokenizer) into ``folder``."""
    import torch
    from safetensors.torch import load_file, save_file
    from transformers import DeepseekV3ForCausalLM
    from transformers.modeling_layers import MtpModel

    from speceq.models import TARGET_DIR

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(MTP_SEED)
        model = DeepseekV3ForCausalLM(_config()).eval()
        with torch.no_grad():  # sharper next-token laws (random init is near uniform over 259 tokens)
            model.lm_head.weight.mul_(HEAD_SCALE)
        model.generation_config.eos_token_id = 257
        model.generation_config.pad_token_id = 258
        model.save_pretrained(folder)
        mtp = MtpModel(model, 1)  # only for the names and shapes of the MTP layer's tensors
    weights = load_file(str(folder / "model.safetensors"))
    prefix = f"model.layers.{MTP_DECODER_LAYERS}."
    # Every MTP tensor drawn here from one seeded generator: MtpModel leaves some (the fused expert
    # weights) uninitialised, which made two builds differ.
    gen = torch.Generator().manual_seed(MTP_SEED + 1)
    std = float(model.config.initializer_range)
    for key, value in mtp.state_dict().items():
        if not key.startswith("layers.0."):  # the MTP layer; shared embedding/head/rotary are the main model's
            continue
        if key.endswith("norm.weight"):
            tensor = torch.ones(value.shape, dtype=value.dtype)
        elif key.endswith("bias"):
            tensor = torch.zeros(value.shape, dtype=value.dtype)
        else:
            tensor = (torch.randn(value.shape, generator=gen) * std).to(value.dtype)
        weights[prefix + key[len("layers.0."):].removeprefix("mtp_block.")] = tensor.contiguous()
    save_file(weights, str(folder / "model.safetensors"), metadata={"format": "pt"})
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        if (TARGET_DIR / name).is_file():
            shutil.copyfile(TARGET_DIR / name, folder / name)
    return {"recipe": "tiny DeepSeek-V3 + 1 MTP layer, random init", "seed": MTP_SEED, "key": MTP_CACHE_KEY}


def mtp_model_folder(cache: str | Path | None = None) -> Path:
    """The cached folder of the tiny MTP model (built on first use, about a second)."""
    from speceq.models.model_cache import cached_folder

    return cached_folder(MTP_CACHE_KEY, build_mtp_folder, cache=cache).path
