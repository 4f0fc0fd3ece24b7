"""Drafts derived from a target: layer skipping (a plain smaller checkpoint) and rounded weights."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from speceq.errors import ConfigError
from speceq.models import load_model
from speceq.models.derive import layer_skip_model, round_tensor, rounded_weights_model
from speceq.models.hf_utils import tiny_random_llama
from speceq.models.torch_utils import cache_kwarg

IDS = torch.tensor([[5, 17, 99, 3, 250, 42, 42, 7], [1, 2, 3, 4, 5, 6, 7, 8]])


@pytest.fixture(scope="module")
def target() -> torch.nn.Module:
    return tiny_random_llama(3, hidden_size=32, layers=5, heads=4, kv_heads=2, init_std=0.3, tie_word_embeddings=True)


def _with_layers(model: torch.nn.Module, keep: list[int]) -> torch.Tensor:
    """Logits of ``model`` run with only the layers ``keep`` (its layer list swapped in place)."""
    inner = model.model
    saved, n = inner.layers, model.config.num_hidden_layers
    inner.layers = torch.nn.ModuleList([saved[i] for i in keep])
    model.config.num_hidden_layers = len(keep)
    try:
        with torch.inference_mode():
            return model(IDS, use_cache=False).logits
    finally:
        inner.layers, model.config.num_hidden_layers = saved, n


def test_keeping_every_layer_gives_the_target(target) -> None:
    draft = layer_skip_model(target, range(5))
    with torch.inference_mode():
        assert torch.equal(draft(IDS).logits, target(IDS).logits)


def test_a_layer_skipped_checkpoint_runs_the_kept_layers_and_saves(target, tmp_path: Path) -> None:
    keep = [0, 2, 4]
    before = {k: v.clone() for k, v in target.state_dict().items()}
    draft = layer_skip_model(target, keep)
    assert draft.config.num_hidden_layers == 3 and target.config.num_hidden_layers == 5
    assert draft.lm_head.weight is draft.model.embed_tokens.weight  # still tied
    assert sum(p.numel() for p in draft.parameters()) < sum(p.numel() for p in target.parameters())
    with torch.inference_mode():
        logits = draft(IDS).logits
        assert torch.equal(logits, _with_layers(target, keep))
        assert not torch.equal(logits, target(IDS).logits)
    assert all(torch.equal(v, target.state_dict()[k]) for k, v in before.items())  # the target is untouched
    draft.save_pretrained(tmp_path / "draft")
    reloaded = load_model(tmp_path / "draft")
    with torch.inference_mode():
        assert torch.equal(reloaded(IDS).logits, logits)


def test_the_draft_decodes_with_a_kv_cache(target) -> None:
    """Layer indices are renumbered, so the KV cache of the smaller model lines up."""
    draft = layer_skip_model(target, [1, 3])
    kw = cache_kwarg(draft)
    with torch.inference_mode():
        full = draft(IDS, use_cache=False).logits
        out = draft(IDS[:, :5], use_cache=True)
        cache, steps = out.past_key_values, [out.logits]
        for t in range(5, IDS.shape[1]):
            out = draft(IDS[:, t : t + 1], use_cache=True, **{kw: cache})
            cache = out.past_key_values
            steps.append(out.logits)
    torch.testing.assert_close(torch.cat(steps, dim=1), full, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("keep, message", [([], "at least one"), ([2, 1], "increasing"), ([0, 0], "distinct"),
                                           ([0, 5], r"0\.\.4")])
def test_bad_layer_lists_are_config_errors(target, keep: list[int], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        layer_skip_model(target, keep)


def test_rounded_weights(target) -> None:
    w = torch.randn(16, 64, generator=torch.Generator().manual_seed(0))
    assert torch.equal(round_tensor(w, "bfloat16"), w.to(torch.bfloat16).float())
    for fmt, levels in (("int8", 127), ("int4", 7)):
        r = round_tensor(w, fmt)
        step = w.abs().amax(-1, keepdim=True) / levels
        assert bool(((r - w).abs() <= step / 2 + 1e-6).all())
        assert all(len(torch.unique(row)) <= 2 * levels + 1 for row in r)
    rounded = rounded_weights_model(target, "int4")
    assert torch.equal(rounded.model.norm.weight, target.model.norm.weight)  # norms stay exact
    assert not torch.equal(rounded.model.layers[0].mlp.up_proj.weight, target.model.layers[0].mlp.up_proj.weight)
    with pytest.raises(ConfigError, match="unknown rounding"):
        rounded_weights_model(target, "int3")
