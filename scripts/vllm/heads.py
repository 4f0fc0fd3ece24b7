"""Tiny speculative heads for vLLM, built from config to match the bundled target (no checkpoint ships).

vLLM's ``eagle``, ``eagle3``, ``medusa`` and ``mtp`` methods need a draft folder of a specific
layout (or, for ``mtp``, a target whose checkpoint carries MTP layers). None ships for the
bundled byte-level target (``harness/models/target``: Llama, hidden 128, 4 layers, 4 heads of 32,
259 tokens), so this module writes one of each, every weight drawn from a fixed seed:

- ``eagle``: an EAGLE-1 head as vLLM's ``EagleLlamaForCausalLM`` loads it (``LlamaForCausalLM`` in
  ``architectures``; vLLM prefixes ``Eagle``): ``fc`` (2 x hidden -> hidden) and one decoder layer
  ``layers.0.*`` without an input norm (EAGLE-1 skips it); the token embedding and the LM head are
  the target's (vLLM shares them when the folder has none).
- ``eagle3``: an EAGLE-3 head (``Eagle3LlamaForCausalLM``): ``fc`` over three of the target's
  hidden states (3 x hidden -> hidden), one decoder layer ``midlayer.*`` whose attention reads
  2 x hidden (token embedding and hidden state), ``hidden_norm``, ``norm`` and its own ``lm_head``
  over the full vocabulary (``draft_vocab_size`` = 259, so no ``d2t`` map); the three target layers
  are named in ``eagle_aux_hidden_state_layer_ids`` (1, 2, 3).
- ``medusa``: ``MedusaModel`` (``model_type: medusa``), 3 heads of one residual block each
  (``blocks.{h}.layers.0``) and their own LM heads (``lm_heads.{h}``).
- ``mtp``: vLLM runs MTP only on targets whose architecture has MTP layers. This folder is a
  ``MiMoForCausalLM`` (MiMo: a Qwen2 decoder with ``model.mtp_layers``), whose main model is the
  bundled target itself: the same weights, with zero q/k/v biases (Qwen2 = Llama + those biases),
  so its next-token law is the target's and a plain server of the bundled target is its baseline;
  plus one seeded MTP layer (``model.mtp_layers.0.*``: token and hidden norms, ``input_proj``,
  a Qwen2 decoder block, a final norm).

Random heads draft badly (low acceptance); that leaves the output law of a lossless method equal
to the target's, which is what the conformance matrix checks. Each folder is built once into the
speceq model cache (``${SPECEQ_CACHE:-~/.cache/speceq}/models/<key>``, checksummed) or into a
folder given on the command line; the byte tokenizer files are copied in.

Usage: python scripts/vllm/heads.py [--out DIR] [METHOD ...]   (prints METHOD<TAB>FOLDER lines)
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
TARGET_DIR = REPO / "harness" / "models" / "target"
#: The methods with a head built here, and their cache keys (bump the suffix when a recipe changes).
HEAD_KEYS: dict[str, str] = {"eagle": "vllm-eagle-head-v2", "eagle3": "vllm-eagle3-head-v2",
                             "medusa": "vllm-medusa-head-v1", "mtp": "vllm-mimo-mtp-v1"}
#: Tokenizer files copied from the target into every folder.
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.json", "merges.txt")
SEED = 0
#: Standard deviation of the seeded weights (matrices); norms start at 1.
INIT_STD = 0.05
MEDUSA_HEADS = 3


def target_config() -> dict[str, Any]:
    """The bundled target's config.json."""
    return json.loads((TARGET_DIR / "config.json").read_text(encoding="utf-8"))


def _llama_head_config(target: dict[str, Any], architecture: str, **extra: Any) -> dict[str, Any]:
    """A one-layer Llama config with the target's widths, vocabulary and special ids."""
    keys = ("hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads", "head_dim",
            "vocab_size", "rms_norm_eps", "max_position_embeddings", "bos_token_id", "eos_token_id", "pad_token_id",
            "hidden_act", "attention_bias", "mlp_bias", "tie_word_embeddings")
    cfg = {k: target[k] for k in keys if k in target}
    cfg.update(architectures=[architecture], model_type="llama", num_hidden_layers=1, torch_dtype="float32",
               rope_theta=_rope_theta(target), **extra)
    return cfg


def _rope_theta(target: dict[str, Any]) -> float:
    return float(target.get("rope_theta") or target.get("rope_parameters", {}).get("rope_theta", 10000.0))


def head_config(method: str, target: dict[str, Any] | None = None) -> dict[str, Any]:
    """The config.json of ``method``'s head for the target ``target`` (default: the bundled one)."""
    t = target if target is not None else target_config()
    h, vocab = int(t["hidden_size"]), int(t["vocab_size"])
    if method == "eagle":
        return _llama_head_config(t, "LlamaForCausalLM")
    if method == "eagle3":
        # three distinct target layers (vLLM's default for a 4-layer target, (2, 2, 1), names one twice and
        # then hands fc two hidden states instead of three)
        layers = int(t["num_hidden_layers"])
        return _llama_head_config(t, "LlamaForCausalLM", draft_vocab_size=vocab, target_hidden_size=h,
                                  eagle_aux_hidden_state_layer_ids=[1, layers // 2, layers - 1])
    if method == "medusa":
        return {"architectures": ["MedusaModel"], "model_type": "medusa", "hidden_size": h, "vocab_size": vocab,
                "num_heads": MEDUSA_HEADS, "num_hidden_layers": 1, "torch_dtype": "float32"}
    if method == "mtp":
        keys = ("hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads", "num_hidden_layers",
                "vocab_size", "rms_norm_eps", "max_position_embeddings", "bos_token_id", "eos_token_id",
                "pad_token_id", "hidden_act", "tie_word_embeddings")
        cfg = {k: t[k] for k in keys if k in t}
        cfg.update(architectures=["MiMoForCausalLM"], model_type="qwen2", num_nextn_predict_layers=1,
                   rope_theta=_rope_theta(t), use_sliding_window=False, sliding_window=None, max_window_layers=0,
                   torch_dtype="float32")
        return cfg
    raise ValueError(f"no head for method {method!r}; expected one of {', '.join(HEAD_KEYS)}")


def _decoder_layer(prefix: str, cfg: dict[str, Any], draw: Callable[..., Any], *, qkv_in: int | None = None,
                   qkv_bias: bool = False) -> dict[str, Any]:
    """Seeded weights of one Llama/Qwen2 decoder layer under ``prefix``."""
    import torch

    h, inter = int(cfg["hidden_size"]), int(cfg["intermediate_size"])
    hd = int(cfg.get("head_dim") or h // int(cfg["num_attention_heads"]))
    q_out, kv_out = int(cfg["num_attention_heads"]) * hd, int(cfg["num_key_value_heads"]) * hd
    qkv_in = qkv_in or h
    w = {f"{prefix}self_attn.q_proj.weight": draw(q_out, qkv_in), f"{prefix}self_attn.k_proj.weight": draw(kv_out, qkv_in),
         f"{prefix}self_attn.v_proj.weight": draw(kv_out, qkv_in), f"{prefix}self_attn.o_proj.weight": draw(h, q_out),
         f"{prefix}mlp.gate_proj.weight": draw(inter, h), f"{prefix}mlp.up_proj.weight": draw(inter, h),
         f"{prefix}mlp.down_proj.weight": draw(h, inter),
         f"{prefix}input_layernorm.weight": torch.ones(h), f"{prefix}post_attention_layernorm.weight": torch.ones(h)}
    if qkv_bias:
        w.update({f"{prefix}self_attn.q_proj.bias": draw(q_out), f"{prefix}self_attn.k_proj.bias": draw(kv_out),
                  f"{prefix}self_attn.v_proj.bias": draw(kv_out)})
    return w


def head_weights(method: str, cfg: dict[str, Any], seed: int = SEED) -> dict[str, Any]:
    """The head's tensors (name -> float32 tensor), drawn from ``seed``; for ``mtp`` the target's own
    weights plus zero q/k/v biases and the MTP layer."""
    import torch

    gen = torch.Generator().manual_seed(seed)

    def draw(*shape: int) -> Any:
        return torch.randn(*shape, generator=gen, dtype=torch.float32) * INIT_STD

    h, vocab = int(cfg["hidden_size"]), int(cfg["vocab_size"])
    if method == "eagle":  # EAGLE-1's first layer has no input norm (vLLM replaces it by the identity)
        layer = _decoder_layer("layers.0.", cfg, draw)
        del layer["layers.0.input_layernorm.weight"]
        return {"fc.weight": draw(h, 2 * h), **layer}
    if method == "eagle3":
        return {"fc.weight": draw(h, 3 * h), **_decoder_layer("midlayer.", cfg, draw, qkv_in=2 * h),
                "midlayer.hidden_norm.weight": torch.ones(h), "norm.weight": torch.ones(h),
                "lm_head.weight": draw(vocab, h)}
    if method == "medusa":
        w = {}
        for i in range(int(cfg["num_heads"])):
            w[f"blocks.{i}.layers.0.weight"] = draw(h, h)
            w[f"lm_heads.{i}.weight"] = draw(vocab, h)
        return w
    if method == "mtp":
        from safetensors.torch import load_file

        w = dict(load_file(str(TARGET_DIR / "model.safetensors")))
        for i in range(int(cfg["num_hidden_layers"])):
            for proj in ("q_proj", "k_proj", "v_proj"):
                rows = w[f"model.layers.{i}.self_attn.{proj}.weight"].shape[0]
                w[f"model.layers.{i}.self_attn.{proj}.bias"] = torch.zeros(rows)
        p = "model.mtp_layers.0."
        w.update({f"{p}token_layernorm.weight": torch.ones(h), f"{p}hidden_layernorm.weight": torch.ones(h),
                  f"{p}input_proj.weight": draw(h, 2 * h), f"{p}final_layernorm.weight": torch.ones(h),
                  **_decoder_layer(p, cfg, draw, qkv_bias=True)})
        return w
    raise ValueError(f"no head for method {method!r}; expected one of {', '.join(HEAD_KEYS)}")


def write_head(method: str, folder: Path) -> dict[str, Any]:
    """Write ``method``'s head (config.json, model.safetensors, the byte tokenizer) into ``folder``;
    returns manifest fields saying what it is."""
    from safetensors.torch import save_file

    cfg = head_config(method)
    folder.mkdir(parents=True, exist_ok=True)
    weights = {k: v.contiguous() for k, v in head_weights(method, cfg).items()}
    save_file(weights, str(folder / "model.safetensors"), metadata={"format": "pt"})
    (folder / "config.json").write_text(json.dumps(cfg, indent=2) + "\n", encoding="utf-8")
    for name in (*TOKENIZER_FILES, "generation_config.json"):
        if (TARGET_DIR / name).is_file():
            shutil.copyfile(TARGET_DIR / name, folder / name)
    return {"method": method, "seed": SEED, "built_for": "harness/models/target", "recipe": "scripts/vllm/heads.py"}


def head_folder(method: str, out: Path | None = None) -> Path:
    """The folder of ``method``'s head: ``out/<method>`` (rewritten) when ``out`` is given, else the
    checksummed speceq model cache (built once)."""
    if method not in HEAD_KEYS:
        raise ValueError(f"no head for method {method!r}; expected one of {', '.join(HEAD_KEYS)}")
    if out is not None:
        folder = Path(out) / method
        shutil.rmtree(folder, ignore_errors=True)
        write_head(method, folder)
        return folder
    from speceq.models.model_cache import cached_folder

    return cached_folder(HEAD_KEYS[method], lambda tmp: write_head(method, tmp),
                         log=lambda line: print(line, file=sys.stderr)).path


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("methods", nargs="*", metavar="METHOD", help=f"heads to build (default all: {', '.join(HEAD_KEYS)})")
    p.add_argument("--out", type=Path, default=None, help="write <out>/<method>/ instead of the speceq model cache")
    args = p.parse_args(argv)
    unknown = [m for m in args.methods if m not in HEAD_KEYS]
    if unknown:
        p.error(f"no head for {', '.join(unknown)}; expected some of {', '.join(HEAD_KEYS)}")
    for method in args.methods or list(HEAD_KEYS):
        print(f"{method}\t{head_folder(method, args.out)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
