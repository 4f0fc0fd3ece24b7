"""A tiny DFlash drafter for transformers' ``speculation_type="dflash"`` path, built from config.

No small DFlash checkpoint ships, so :func:`tiny_dflash_assistant` builds one for a given target:
a 1-layer ``MuseGlimmerAssistantModel`` (transformers' DFlash assistant class) whose hidden size
is the target's and whose context is the target's hidden states at ``target_layer_ids``. It
reuses the target's embeddings (noise tokens) and head (draft logits), as transformers' DFlash
generator does, and drafts ``block_size`` tokens per step in one forward pass. Its weights are
random from a fixed seed: the drafts are poor (low acceptance) but the path must stay lossless.
It is about 0.2 M parameters for the byte target and builds in well under a second, so it is built
in memory at every engine start rather than cached.
"""

from __future__ import annotations

from typing import Any

DFLASH_SEED = 0
#: std of the drafter's random weights (norms are 1)
DFLASH_INIT_STD = 0.1


def default_layer_ids(layers: int) -> list[int]:
    """The target layers whose hidden states feed the drafter: the second and the last (0-based)."""
    return sorted({min(1, layers - 1), layers - 1})


def tiny_dflash_assistant(target: Any, *, block_size: int = 4, target_layer_ids: list[int] | None = None,
                          mask_token_id: int, seed: int = DFLASH_SEED) -> Any:
    """A seeded, eval-mode DFlash drafter sized for ``target`` (float32, CPU)."""
    import torch
    from transformers import MuseGlimmerAssistantConfig, MuseGlimmerAssistantModel

    text = target.config.get_text_config()
    hidden, layers = int(text.hidden_size), int(text.num_hidden_layers)
    heads = max(1, hidden // 32)
    config = MuseGlimmerAssistantConfig(
        hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=1, num_attention_heads=heads,
        num_key_value_heads=heads, head_dim=hidden // heads, max_position_embeddings=4096, sliding_window=4096,
        block_size=int(block_size), mask_token_id=int(mask_token_id),
        target_layer_ids=list(target_layer_ids) if target_layer_ids is not None else default_layer_ids(layers),
        bos_token_id=None, eos_token_id=None, pad_token_id=None,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = MuseGlimmerAssistantModel(config)
        gen = torch.Generator().manual_seed(seed)
        with torch.no_grad():  # every tensor from the seeded generator (none left as allocated)
            for name, p in model.named_parameters():
                if name.endswith("norm.weight"):
                    p.fill_(1.0)
                else:
                    p.copy_(torch.randn(p.shape, generator=gen) * DFLASH_INIT_STD)
    model.eval()
    model.requires_grad_(False)
    return model
