"""A tiny Gemma-4 target and single-position multi-token assistant for transformers' multi-token path.

transformers drafts with a ``Gemma4AssistantForCausalLM`` from one position
(``SinglePositionMultiTokenCandidateGenerator``): the assistant reads the target's last hidden
state and shared key/value states and drafts several tokens autoregressively at a constant
position. Only a Gemma 4 / Gemma 3n target provides those states. No small pair ships, so the
``gemma4`` world builds one from config into the model cache: a 2-layer ``Gemma4ForCausalLM`` and a
1-layer assistant on the byte vocabulary of the bundled models (259 ids, ``<bos>`` 256, ``<eos>``
257, ``<pad>`` 258; the byte tokenizer is copied, so the byte world's cases apply), every weight
drawn from a seeded generator. Untrained: acceptance is low, the output law must still be the
target's.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

#: Cache keys (folder names under ``<cache>/models``); bump the suffix when the recipe changes.
GEMMA4_TARGET_KEY = "gemma4-tiny-target-v1"
GEMMA4_ASSISTANT_KEY = "gemma4-tiny-assistant-v1"
GEMMA4_SEED = 0
#: std of the random weights (norms are 1, biases 0); the head is tied to the embedding
GEMMA4_INIT_STD = 0.2


def _text_config(layers: int) -> Any:
    from transformers import Gemma4TextConfig

    return Gemma4TextConfig(
        vocab_size=259, hidden_size=64, intermediate_size=128, num_attention_heads=2, num_key_value_heads=1,
        head_dim=32, num_hidden_layers=layers, layer_types=["sliding_attention"] * (layers - 1) + ["full_attention"],
        max_position_embeddings=512, bos_token_id=256, eos_token_id=257, pad_token_id=258,
        hidden_size_per_layer_input=0, vocab_size_per_layer_input=0, enable_moe_block=False,
        use_double_wide_mlp=False,
    )


def _seeded_weights(model: Any, seed: int) -> None:
    import torch

    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name and name.endswith("weight"):
                p.fill_(1.0)
            elif name.endswith("bias"):
                p.zero_()
            else:
                p.copy_(torch.randn(p.shape, generator=gen) * GEMMA4_INIT_STD)


def _save(model: Any, folder: Path) -> None:
    from speceq.models import TARGET_DIR

    model.generation_config.eos_token_id = 257
    model.generation_config.pad_token_id = 258
    model.save_pretrained(folder)
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        if (TARGET_DIR / name).is_file():
            shutil.copyfile(TARGET_DIR / name, folder / name)


def build_target(folder: Path) -> dict[str, Any]:
    """Write the 2-layer Gemma-4 target into ``folder``."""
    import torch
    from transformers import Gemma4ForCausalLM

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(GEMMA4_SEED)
        model = Gemma4ForCausalLM(_text_config(2)).eval()
    _seeded_weights(model, GEMMA4_SEED)
    _save(model, folder)
    return {"recipe": "tiny Gemma4ForCausalLM, random init", "seed": GEMMA4_SEED}


def build_assistant(folder: Path) -> dict[str, Any]:
    """Write the 1-layer Gemma-4 assistant (3 drafts a step) into ``folder``."""
    import torch
    from transformers import Gemma4AssistantConfig, Gemma4AssistantForCausalLM

    config = Gemma4AssistantConfig(text_config=_text_config(1), backbone_hidden_size=64)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(GEMMA4_SEED + 1)
        model = Gemma4AssistantForCausalLM(config).eval()
    _seeded_weights(model, GEMMA4_SEED + 1)
    model.generation_config.num_assistant_tokens = 3
    _save(model, folder)
    return {"recipe": "tiny Gemma4AssistantForCausalLM, random init", "seed": GEMMA4_SEED + 1}


def gemma4_folders(cache: str | Path | None = None) -> tuple[Path, Path]:
    """(target folder, assistant folder) of the gemma4 world, built into the model cache on first use."""
    from speceq.models.model_cache import cached_folder

    return (cached_folder(GEMMA4_TARGET_KEY, build_target, cache=cache).path,
            cached_folder(GEMMA4_ASSISTANT_KEY, build_assistant, cache=cache).path)
