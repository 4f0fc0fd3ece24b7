"""Write a tiny Llama as a GGUF file the way llama.cpp's converter does, for the loader's tests.

The tokenizer is byte-level BPE (GPT-2 style): the 256 byte symbols, one merge ("Ġ t" -> "Ġt"),
then three control tokens; a ChatML chat template like SmolLM2's. Q and K projection rows are
permuted as llama.cpp's ``convert_hf_to_gguf.py`` permutes them (its ``LlamaModel.permute``), so a
loader that forgets to undo the permutation gives different logits.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

#: Ids of the tiny vocabulary: 256 bytes, the merged "Ġt", then the control tokens.
MERGED_ID, BOS_ID, EOS_ID, PAD_ID = 256, 257, 258, 259
VOCAB_SIZE = 260
SPECIALS = {BOS_ID: "<|im_start|>", EOS_ID: "<|im_end|>", PAD_ID: "<|endoftext|>"}
#: A ChatML template with a generation prompt (SmolLM2's, without its default system prompt).
CHAT_TEMPLATE = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte -> printable character table."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, (chr(c) for c in cs), strict=True))


def tiny_tokens() -> list[str]:
    table = bytes_to_unicode()
    return [table[b] for b in range(256)] + ["Ġt"] + [SPECIALS[i] for i in (BOS_ID, EOS_ID, PAD_ID)]


def _permute(weights: np.ndarray, n_head: int, n_head_kv: int | None) -> np.ndarray:
    # llama.cpp convert_hf_to_gguf.py, LlamaModel.permute
    if n_head_kv is not None and n_head != n_head_kv:
        n_head = n_head_kv
    return (weights.reshape(n_head, 2, weights.shape[0] // n_head // 2, *weights.shape[1:])
            .swapaxes(1, 2).reshape(weights.shape))


def write_tiny_gguf(model: Any, path: Path) -> Path:
    """Write ``model`` (a float32 ``LlamaForCausalLM`` with the tiny vocabulary) to ``path`` as GGUF."""
    import gguf

    cfg = model.config
    assert cfg.vocab_size == VOCAB_SIZE
    heads, kv_heads = cfg.num_attention_heads, cfg.num_key_value_heads
    path.parent.mkdir(parents=True, exist_ok=True)
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name("tiny-test-llama")
    w.add_context_length(cfg.max_position_embeddings)
    w.add_embedding_length(cfg.hidden_size)
    w.add_block_count(cfg.num_hidden_layers)
    w.add_feed_forward_length(cfg.intermediate_size)
    w.add_head_count(heads)
    w.add_head_count_kv(kv_heads)
    w.add_rope_dimension_count(cfg.hidden_size // heads)
    w.add_rope_freq_base(float(cfg.rope_parameters["rope_theta"]))
    w.add_layer_norm_rms_eps(float(cfg.rms_norm_eps))
    w.add_vocab_size(cfg.vocab_size)
    w.add_file_type(0)  # all F32
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    w.add_token_list(tiny_tokens())
    w.add_token_types([1] * (BOS_ID) + [3, 3, 3])
    w.add_token_merges(["Ġ t"])
    w.add_bos_token_id(BOS_ID)
    w.add_eos_token_id(EOS_ID)
    w.add_pad_token_id(PAD_ID)
    w.add_add_bos_token(False)
    w.add_chat_template(CHAT_TEMPLATE)
    sd = {k: v.detach().float().numpy() for k, v in model.state_dict().items()}
    w.add_tensor("token_embd.weight", sd["model.embed_tokens.weight"])
    for i in range(cfg.num_hidden_layers):
        p = f"model.layers.{i}."
        w.add_tensor(f"blk.{i}.attn_norm.weight", sd[p + "input_layernorm.weight"])
        w.add_tensor(f"blk.{i}.attn_q.weight", _permute(sd[p + "self_attn.q_proj.weight"], heads, heads))
        w.add_tensor(f"blk.{i}.attn_k.weight", _permute(sd[p + "self_attn.k_proj.weight"], heads, kv_heads))
        w.add_tensor(f"blk.{i}.attn_v.weight", sd[p + "self_attn.v_proj.weight"])
        w.add_tensor(f"blk.{i}.attn_output.weight", sd[p + "self_attn.o_proj.weight"])
        w.add_tensor(f"blk.{i}.ffn_norm.weight", sd[p + "post_attention_layernorm.weight"])
        w.add_tensor(f"blk.{i}.ffn_gate.weight", sd[p + "mlp.gate_proj.weight"])
        w.add_tensor(f"blk.{i}.ffn_up.weight", sd[p + "mlp.up_proj.weight"])
        w.add_tensor(f"blk.{i}.ffn_down.weight", sd[p + "mlp.down_proj.weight"])
    w.add_tensor("output_norm.weight", sd["model.norm.weight"])
    if not cfg.tie_word_embeddings:
        w.add_tensor("output.weight", sd["lm_head.weight"])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path
