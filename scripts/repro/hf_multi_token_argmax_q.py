"""Minimal reproduction: transformers' single-position multi-token assistant (Gemma 4) over-accepts its drafts
under ``do_sample=True``.

Needs only torch, transformers, numpy and scipy. Tested against transformers 5.25.0.

Root cause (transformers 5.25.0): ``SinglePositionMultiTokenCandidateGenerator.get_candidates``
(generation/candidate_generator.py, line 1372) drafts the assistant's *argmax* token and returns the assistant's
logits as the candidates' law (line 1375). With ``do_sample=True``, ``_assisted_decoding`` hands those logits to
``_speculative_sampling`` (generation/utils.py, lines 4122-4123), which takes q = softmax(logits) (line 4477) and
accepts with min(1, p/q). The draft was deterministic, so its law is a point mass at the argmax; with the softmax
q the argmax token is accepted too often and the output law is no longer the target's.

The script builds a tiny Gemma-4 target and assistant from config (seeded random weights; the assistant's are
small, so its softmax is flat and the over-acceptance large), draws the second generated token N times through
``model.generate`` (the first comes from the target's prefill, the second is the first verified draft) and
compares its law with the exact law from the target's logits (sum over a of p(a) p(. | a)) by a chi-squared test and the total-variation distance: as shipped, and with the fix (the candidates' law is the
point mass at each drafted token). Run: ``python scripts/repro/hf_multi_token_argmax_q.py --draws 300``.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch
from scipy import stats
from transformers import Gemma4AssistantConfig, Gemma4AssistantForCausalLM, Gemma4ForCausalLM, Gemma4TextConfig
from transformers.generation import candidate_generator as cg

VOCAB = 32
PROMPT = [1, 5, 9, 13, 17]


def text_config(layers: int) -> Gemma4TextConfig:
    return Gemma4TextConfig(
        vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_attention_heads=2, num_key_value_heads=1,
        head_dim=32, num_hidden_layers=layers, layer_types=["sliding_attention"] * (layers - 1) + ["full_attention"],
        max_position_embeddings=128, bos_token_id=1, eos_token_id=2, pad_token_id=0,
        hidden_size_per_layer_input=0, vocab_size_per_layer_input=0, enable_moe_block=False,
        use_double_wide_mlp=False,
    )


def seeded(model: torch.nn.Module, seed: int, std: float) -> torch.nn.Module:
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name and name.endswith("weight"):
                p.fill_(1.0)
            elif name.endswith("bias"):
                p.zero_()
            else:
                p.copy_(torch.randn(p.shape, generator=gen) * std)
    return model.eval()


def build() -> tuple[Gemma4ForCausalLM, Gemma4AssistantForCausalLM]:
    torch.manual_seed(0)
    target = seeded(Gemma4ForCausalLM(text_config(2)), seed=0, std=0.2)
    assistant = seeded(Gemma4AssistantForCausalLM(
        Gemma4AssistantConfig(text_config=text_config(1), backbone_hidden_size=64)), seed=1, std=0.05)
    target.generation_config.eos_token_id = None
    target.generation_config.pad_token_id = 0
    assistant.generation_config.num_assistant_tokens = 1
    return target, assistant


ORIGINAL_GET_CANDIDATES = cg.SinglePositionMultiTokenCandidateGenerator.get_candidates


def fixed_get_candidates(self, input_ids, *args, **kwargs):
    """The fix: the candidates' law is the point mass at each drafted (argmax) token."""
    candidate_ids, logits = ORIGINAL_GET_CANDIDATES(self, input_ids, *args, **kwargs)
    if logits is None:
        return candidate_ids, logits
    drafted = candidate_ids[:, -logits.shape[1]:]
    point = torch.full_like(logits, float("-inf"))
    point.scatter_(-1, drafted.unsqueeze(-1), 0.0)
    return candidate_ids, point


def draw(n: int, seed: int, fixed: bool) -> tuple[np.ndarray, np.ndarray]:
    """Counts of the second generated token over ``n`` draws, and its exact law."""
    target, assistant = build()
    ids = torch.tensor([PROMPT])
    with torch.no_grad():
        first = torch.softmax(target(ids).logits[0, -1].double(), -1)
        nexts = torch.cat([ids.repeat(VOCAB, 1), torch.arange(VOCAB)[:, None]], dim=1)
        second = torch.softmax(target(nexts).logits[:, -1].double(), -1)
    law = (first @ second).numpy()  # exact law of the second token
    cg.SinglePositionMultiTokenCandidateGenerator.get_candidates = (
        fixed_get_candidates if fixed else ORIGINAL_GET_CANDIDATES)
    counts = np.zeros(VOCAB, dtype=np.int64)
    try:
        torch.manual_seed(seed)
        for _ in range(n):
            out = target.generate(ids, attention_mask=torch.ones_like(ids), assistant_model=assistant,
                                  do_sample=True, temperature=1.0, top_k=0, top_p=1.0, max_new_tokens=3)
            counts[int(out[0, len(PROMPT) + 1])] += 1
    finally:
        cg.SinglePositionMultiTokenCandidateGenerator.get_candidates = ORIGINAL_GET_CANDIDATES
    return counts, law


def compare(counts: np.ndarray, law: np.ndarray) -> tuple[float, float]:
    """Chi-squared p-value of ``counts`` against ``law`` (cells of expected count < 5 pooled) and the TV."""
    n = counts.sum()
    expected = law * n
    big = expected >= 5
    obs = np.append(counts[big], counts[~big].sum())
    exp = np.append(expected[big], expected[~big].sum())
    if exp[-1] == 0:
        obs, exp = obs[:-1], exp[:-1]
    p = stats.chisquare(obs, exp * obs.sum() / exp.sum()).pvalue
    return float(p), float(0.5 * np.abs(counts / n - law).sum())


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--draws", type=int, default=300)
    parser.add_argument("--seed", type=int, default=0, help="torch seed of the draws")
    args = parser.parse_args(argv)
    for label, fixed in (("as shipped", False), ("fixed", True)):
        t0 = time.perf_counter()
        counts, law = draw(args.draws, args.seed, fixed)
        p, tv = compare(counts, law)
        print(f"[{label}] {args.draws} draws of the second token vs the exact law: "
              f"chi2 p = {p:.3g}, TV = {tv:.3f} [{time.perf_counter() - t0:.1f} s]")


if __name__ == "__main__":
    main()
