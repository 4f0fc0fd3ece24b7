"""Minimal reproduction: transformers' universal assisted decoding (an assistant with another tokenizer,
``do_sample=True``) verifies each draft against the probability of another token.

Needs only torch, transformers, numpy and scipy. Tested against transformers 5.25.0.

Root cause (transformers/generation/candidate_generator.py, 5.25.0):
``AssistantToTargetTranslator.__init__`` prunes the assistant's head to the shared tokens in the order of
``assistant_tokenizer.get_vocab()`` (lines 741-747, order from the loop at line 803), but ``get_target_logits``
writes the pruned logits back in ascending assistant-id order (lines 845-850). Unless the two orders agree, the
``q`` that ``_speculative_sampling`` divides by belongs to another token than the one drafted. A fast
tokenizer's ``get_vocab()`` is built from a hash map, so its order is arbitrary (and differs between calls and
processes); this script pins one such order with a seeded shuffle so the run is reproducible.

Part 3 (a second defect of the same code) shows why greedy decoding with the same assistant then fails: the
translator installs the pruned head and an id-mapping input embedding on the caller's assistant model in place
(lines 746-754), and a later ``do_sample=False`` call, which routes to ``AssistedCandidateGeneratorDifferentTokenizers``
without the translator, runs the pruned model on unmapped ids and fails (an IndexError or a shape error).

Part 1 shows the mismatch deterministically: where each pruned logit lands in the target vocabulary.
Part 2 draws the first generated token N times through ``model.generate`` and compares its law with the exact
law softmax(target logits) by a chi-squared test and the total-variation distance, for transformers as shipped
and with the fix (``get_target_logits`` writing each pruned logit to the target id of the token that head row
belongs to). Run: ``python scripts/repro/hf_universal_vocab_order.py --draws 300``.
"""

from __future__ import annotations

import argparse
import random
import time

import numpy as np
import torch
from scipy import stats
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast
from transformers.generation import candidate_generator as cg

SHARED = [f"w{i}" for i in range(24)]  # strings both vocabularies hold
DRAFT_ONLY = [f"x{i}" for i in range(8)]  # strings only the assistant holds (this is what triggers pruning)
PROMPT = "w1 w2 w3"


def make_tokenizer(words: list[str], vocab_seed: int | None) -> PreTrainedTokenizerFast:
    """A whitespace word-level fast tokenizer over ``words`` (ids in list order, after [PAD] and [UNK]).

    ``get_vocab()`` is pinned: with ``vocab_seed`` in a seeded shuffled order, standing in for the arbitrary
    hash-map order of a real fast tokenizer; with None in id order (the order under which transformers is right).
    """
    vocab = {"[PAD]": 0, "[UNK]": 1, **{w: i + 2 for i, w in enumerate(words)}}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]")
    items = sorted(fast.get_vocab().items(), key=lambda kv: kv[1])
    if vocab_seed is not None:
        random.Random(vocab_seed).shuffle(items)
    fast.get_vocab = lambda: dict(items)  # type: ignore[method-assign]
    return fast


def make_model(vocab_size: int, seed: int) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=vocab_size, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=64,
                         pad_token_id=0, bos_token_id=None, eos_token_id=None)
    model = LlamaForCausalLM(config).eval()
    with torch.no_grad():
        model.lm_head.weight.mul_(8.0)  # sharp laws, so that a misplaced q matters
    return model


def fixed_get_target_logits(self, assistant_logits: torch.Tensor) -> torch.Tensor:
    """The fix: pruned head row j belongs to assistant id ``assistant_overlap_token_ids[j]``; write it there."""
    if not self.assistant_prune_lm_head:
        return ORIGINAL_GET_TARGET_LOGITS(self, assistant_logits)
    shape = (*assistant_logits.shape[:-1], self.target_vocab_size)
    out = torch.full(shape, self.FILTER_VALUE, device=assistant_logits.device)
    out[..., self._assistant_to_target_input_ids[self.assistant_overlap_token_ids]] = assistant_logits
    return out


ORIGINAL_GET_TARGET_LOGITS = cg.AssistantToTargetTranslator.get_target_logits


def build(vocab_seed: int | None):
    target_tok = make_tokenizer(SHARED, None)
    # the assistant lists the shared strings in another id order, with its own strings among them
    draft_words = SHARED[::-1][:12] + DRAFT_ONLY + SHARED[::-1][12:]
    draft_tok = make_tokenizer(draft_words, vocab_seed)
    target = make_model(len(target_tok.get_vocab()), seed=1)
    draft = make_model(len(draft_words) + 2, seed=2)
    return target, draft, target_tok, draft_tok


def part1(vocab_seed: int | None) -> int:
    """Where each pruned assistant logit lands; returns how many shared tokens get another token's logit."""
    target, draft, target_tok, draft_tok = build(vocab_seed)
    tr = cg.AssistantToTargetTranslator(target_tok, draft_tok, target.config.vocab_size,
                                        assistant_model=draft, assistant_prune_lm_head=True)
    rows = tr.assistant_overlap_token_ids.tolist()  # assistant id owning each pruned head row
    marker = torch.arange(len(rows), dtype=torch.float32)[None, None, :]  # logit j = j: identifies the row
    landed = tr.get_target_logits(marker)[0, 0]
    a2t = tr._assistant_to_target_input_ids
    wrong = 0
    for j, a_id in enumerate(rows):
        t_id = int(a2t[a_id])
        if int(landed[t_id]) != j:
            wrong += 1
    print(f"part 1: pruned head rows in get_vocab() order are sorted: {rows == sorted(rows)}; "
          f"{wrong} of {len(rows)} shared tokens receive another token's logit")
    return wrong


def part3(vocab_seed: int | None) -> str:
    """Greedy generation with an assistant that a sampled call already used: returns the error, or "" if none."""
    target, draft, target_tok, draft_tok = build(vocab_seed)
    ids = target_tok(PROMPT, return_tensors="pt", add_special_tokens=False)["input_ids"]
    common = dict(attention_mask=torch.ones_like(ids), assistant_model=draft, tokenizer=target_tok,
                  assistant_tokenizer=draft_tok, max_new_tokens=4, pad_token_id=0)
    target.generate(ids, do_sample=False, **common)  # greedy on a fresh assistant works
    target.generate(ids, do_sample=True, top_k=0, top_p=1.0, **common)  # prunes the assistant in place
    try:
        target.generate(ids, do_sample=False, **common)
    except (IndexError, RuntimeError) as err:
        error = f"{type(err).__name__}: {err}"
    else:
        error = ""
    print(f"part 3: greedy after a sampled call with the same assistant: {error or 'works'}; the assistant's head "
          f"is now {type(draft.get_output_embeddings()).__name__}")
    return error


def exact_law(target, target_tok) -> np.ndarray:
    ids = target_tok(PROMPT, return_tensors="pt", add_special_tokens=False)["input_ids"]
    with torch.no_grad():
        logits = target(ids).logits[0, -1].double()
    return torch.softmax(logits, -1).numpy()


def draw(n: int, vocab_seed: int, seed: int, fixed: bool) -> tuple[np.ndarray, np.ndarray]:
    cg.AssistantToTargetTranslator.get_target_logits = (
        fixed_get_target_logits if fixed else ORIGINAL_GET_TARGET_LOGITS)
    try:
        target, draft, target_tok, draft_tok = build(vocab_seed)
        law = exact_law(target, target_tok)
        ids = target_tok(PROMPT, return_tensors="pt", add_special_tokens=False)["input_ids"]
        counts = np.zeros(len(law), dtype=np.int64)
        torch.manual_seed(seed)
        for _ in range(n):
            out = target.generate(ids, attention_mask=torch.ones_like(ids), assistant_model=draft,
                                  tokenizer=target_tok, assistant_tokenizer=draft_tok, do_sample=True,
                                  temperature=1.0, top_k=0, top_p=1.0, max_new_tokens=2,
                                  num_assistant_tokens=1, num_assistant_tokens_schedule="constant",
                                  assistant_confidence_threshold=0.0, pad_token_id=0)
            counts[int(out[0, ids.shape[1]])] += 1
    finally:
        cg.AssistantToTargetTranslator.get_target_logits = ORIGINAL_GET_TARGET_LOGITS
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
    tv = 0.5 * np.abs(counts / n - law).sum()
    return float(p), float(tv)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--draws", type=int, default=300)
    parser.add_argument("--vocab-seed", type=int, default=0, help="seed of the pinned get_vocab() order")
    parser.add_argument("--seed", type=int, default=0, help="torch seed of the draws")
    args = parser.parse_args(argv)
    real = PreTrainedTokenizerFast(tokenizer_object=make_tokenizer(SHARED, None).backend_tokenizer).get_vocab()
    print(f"a real fast tokenizer's get_vocab() is in id order here: {list(real.values()) == sorted(real.values())}")
    part1(args.vocab_seed)
    for label, fixed in (("as shipped", False), ("fixed", True)):
        t0 = time.perf_counter()
        counts, law = draw(args.draws, args.vocab_seed, args.seed, fixed)
        p, tv = compare(counts, law)
        print(f"part 2 [{label}]: {args.draws} draws of the first token vs softmax(target logits): "
              f"chi2 p = {p:.3g}, TV = {tv:.3f} [{time.perf_counter() - t0:.1f} s]")
    part3(args.vocab_seed)


if __name__ == "__main__":
    main()
