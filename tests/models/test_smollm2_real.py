"""The prepared SmolLM2-135M-Instruct itself (slow; skipped unless ``speceq smollm2 prepare`` ran).

    python -m pytest tests/models/test_smollm2_real.py -m slow
"""

from __future__ import annotations

import pytest
import torch

from speceq.errors import ConfigError
from speceq.models.fast_forward import fast_model
from speceq.models.hf_utils import load_causal_lm, model_eos_id, model_vocab_size

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def world():
    from speceq.models.smollm2 import prepared

    try:
        return prepared()
    except ConfigError as exc:
        pytest.skip(str(exc))


def test_target_and_draft_are_what_the_docs_say(world) -> None:
    torch.set_num_threads(1)
    target = load_causal_lm(world.target, role="target")
    draft = load_causal_lm(world.draft, role="draft")
    assert type(target).__name__ == "LlamaForCausalLM"
    assert sum(p.numel() for p in target.parameters()) == 134_515_008
    assert (target.config.num_hidden_layers, draft.config.num_hidden_layers) == (30, 26)
    assert model_vocab_size(target) == model_vocab_size(draft) == 49_152
    assert model_eos_id(target, None) == 2 and target.config.tie_word_embeddings
    assert (world.target / "chat_template.jinja").is_file()
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(world.target, local_files_only=True)
    ids = tok("def fibonacci(n):", return_tensors="pt").input_ids
    with torch.inference_mode():
        out = target.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=24,
                              pad_token_id=2)
        text = tok.decode(out[0, ids.shape[1]:])
        assert "return" in text or "fibonacci" in text or "if n" in text, text
        fast = fast_model(target)
        assert fast is not None  # GQA (9 heads, 3 KV heads) and tied embeddings are served
        assert torch.equal(fast(ids), target(ids).logits)
