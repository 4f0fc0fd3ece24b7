"""transformers' other speculative paths as engines: early exit, another tokenizer, MTP, DFlash, multi-token.

- :class:`HFEarlyExitEngine`: ``generate(assistant_early_exit=L, do_sample=True)``. transformers'
  ``EarlyExitCandidateGenerator`` drafts with the target itself, running only its first ``L``
  decoder layers (it sets ``config.num_hidden_layers = L`` on the base model while drafting, then
  applies the final norm and LM head to layer ``L``'s hidden state), and verifies the drafts with
  the whole model by speculative sampling. The bundled target was not trained for early exit, so
  the layer-``L`` drafts are poor (low acceptance) but the method stays lossless: the output law
  must equal the target's.

- :class:`HFUniversalEngine`: ``generate(assistant_model=draft, tokenizer=..., assistant_tokenizer=...,
  do_sample=True)``: Universal Speculative Decoding (``UniversalSpeculativeDecodingGenerator`` with an
  ``AssistantToTargetTranslator``). The draft has its own tokenizer; transformers maps the token
  strings both vocabularies share, prunes the draft's head to them, drafts there and verifies the
  translated drafts with the target by speculative sampling (lossless by design).

- :class:`HFMTPEngine`: ``generate(use_mtp=True, do_sample=True)``: the model's own multi-token-
  prediction layers draft (``MTPCandidateGenerator``), the model verifies. Its world is ``mtp``:
  a tiny DeepSeek-V3 with one MTP layer built from config (:mod:`speceq.models.mtp`).

- :class:`HFDFlashEngine`: ``generate(assistant_model=drafter, speculation_type="dflash", do_sample=True)``:
  a DFlash drafter reads the target's hidden states at a few layers and drafts a block of tokens
  in one forward pass (``DFlashTokenCandidateGenerator``); a tiny seeded drafter is built for the
  world's target (:mod:`speceq.models.dflash`).

- :class:`HFMultiTokenEngine`: ``generate(assistant_model=gemma4_assistant, do_sample=True)``: the
  single-position multi-token assistant of Gemma 4 (``SinglePositionMultiTokenCandidateGenerator``)
  drafts from the target's last hidden state and shared key/value states. Its world is ``gemma4``:
  a tiny Gemma-4 target and assistant built from config (:mod:`speceq.models.multi_token`).

- :class:`HFEnsembleEngine`: ``generate(assistant_model=draft, assistant_ensemble_weight=w, do_sample=True)``:
  DIVERSE's ensemble verification; transformers verifies each draft against the mixture
  ``(1 - w) p + w q`` of the target's and the assistant's laws instead of ``p``. Lossy by design
  (``describe()["lossless"]`` is False): a run measures its distance to the target's law and calls
  it ``lossy``, never ``shifted`` or ``equivalent``.

Like assisted generation, transformers runs these paths at batch size 1 only, so rows run one by
one; parameter mapping, seeding, acceptance counting and output cutting are those of
:mod:`speceq.engines.hf`.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from speceq.engines._options import as_int
from speceq.engines.base import SampleBatch, SampleRequest
from speceq.engines.hf import HF_REFUSED_FIELDS, HF_SAMPLING_FIELDS, HFAssistedEngine, _model_label, _RowLoopEngine
from speceq.errors import ConfigError
from speceq.models.hf_utils import load_causal_lm


def decoder_layers(model: Any) -> int:
    """Number of decoder layers of a causal LM (``num_hidden_layers`` of its text config)."""
    config = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    return int(config.num_hidden_layers)


class HFEarlyExitEngine(_RowLoopEngine):
    """``generate(assistant_early_exit=L)``: the target's first ``L`` layers draft, the whole target verifies.

    ``exit_layer``: the layer whose hidden state drafts (1 <= L < the target's layers; default half
    of them, rounded down, at least 1: 2 of the bundled target's 4). ``num_assistant_tokens``: drafts
    per step (constant schedule, no confidence cut-off), default 4.
    """

    _limitation = "transformers runs early-exit self-speculation at batch size 1 only; rows run one by one"

    #: An assisted-generation path (``EarlyExitCandidateGenerator`` is an ``AssistedCandidateGenerator``): the draft
    #: and every verified position processed, each with its own prefix.
    sampling_fields = HF_SAMPLING_FIELDS

    def __init__(
        self,
        target: Any = None,
        *,
        exit_layer: Any = None,
        num_assistant_tokens: Any = 4,
        name: str = "hf-early-exit",
        device: str = "cpu",
        dtype: str = "float32",
        eos_token_id: Any = None,
    ) -> None:
        super().__init__(target, name=name, device=device, dtype=dtype, eos_token_id=eos_token_id)
        layers = decoder_layers(self.target)
        if layers < 2:  # noqa: PLR2004 (one layer leaves nothing to skip)
            raise ConfigError(
                f"the target has {layers} decoder layer: early exit needs at least 2 (draft with the first L, "
                "verify with all)",
                where="target",
            )
        self.exit_layer = max(1, layers // 2) if exit_layer is None else as_int(exit_layer, "exit_layer", minimum=1)
        if self.exit_layer >= layers:
            raise ConfigError(
                f"exit_layer {self.exit_layer} must be below the target's {layers} decoder layers "
                f"(1..{layers - 1}; at {layers} the draft would be the target itself)",
                where="exit_layer",
            )
        self.num_assistant_tokens = as_int(num_assistant_tokens, "num_assistant_tokens", minimum=1)
        # The early-exit drafter copies the *model's* generation config (the model is its own
        # assistant): a constant schedule and no confidence cut-off make every step draft k tokens.
        gc = self.target.generation_config
        gc.num_assistant_tokens = self.num_assistant_tokens
        gc.num_assistant_tokens_schedule = "constant"
        gc.assistant_confidence_threshold = 0.0

    def _extra_kwargs(self) -> dict[str, Any]:
        return {"assistant_early_exit": self.exit_layer}

    def describe(self) -> dict[str, Any]:
        return {
            **super().describe(),
            "method": "generate(assistant_early_exit=L): self-speculation, the first L layers draft",
            "exit_layer": self.exit_layer,
            "decoder_layers": decoder_layers(self.target),
            "num_assistant_tokens": self.num_assistant_tokens,
            "num_assistant_tokens_schedule": "constant",
            "assistant_confidence_threshold": 0.0,
        }


#: Why ``hf-universal`` refuses ``structured_outputs`` (transformers 5.25.0; tested in
#: tests/engines/test_hf_structured_outputs.py).
UNIVERSAL_GRAMMAR_REFUSAL = (
    "transformers hands the call's logits processors to the draft's own generate() "
    "(generation/candidate_generator.py:323 in 5.25.0, kept by UniversalSpeculativeDecodingGenerator.get_candidates "
    "unless its translator has its own, :964-965), which runs on the draft tokenizer's ids and the pruned "
    "draft head's indices: a grammar processor built for the target's tokens would mask the wrong tokens there, "
    "and transformers has no place for a target-only processor")

#: ``vocab_order`` values of :class:`HFUniversalEngine`.
VOCAB_ORDERS: tuple[str, ...] = ("tokenizer", "id")


def load_tokenizer(spec: Any, model_spec: Any, *, default: Path, option: str) -> Any:
    """A Hugging Face tokenizer: ``spec`` (a folder, or a loaded tokenizer), else the tokenizer in the
    model's folder ``model_spec``, else (``model_spec`` None: a bundled model) the one in ``default``."""
    from transformers import AutoTokenizer

    if spec is not None and not isinstance(spec, (str, Path)):
        if not hasattr(spec, "get_vocab"):
            raise ConfigError(f"expected a tokenizer folder or a transformers tokenizer, got {type(spec).__name__}",
                              where=option)
        return spec
    folder = spec if spec is not None else model_spec if isinstance(model_spec, (str, Path)) else None
    if folder is None:
        if model_spec is not None:
            raise ConfigError("an in-memory model needs its tokenizer: give the tokenizer's folder", where=option)
        folder = default
    try:
        return AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
    except (OSError, ValueError) as exc:
        raise ConfigError(f"no Hugging Face tokenizer loads from {str(folder)!r}: {exc}", where=option) from None


class HFUniversalEngine(_RowLoopEngine):
    """An assistant with a *different tokenizer* and ``do_sample=True``: transformers' Universal Speculative Decoding.

    ``target`` (default the bundled byte target) and ``draft`` (default the BPE world's draft,
    ``bpe-draft``: 32 000 tokens, which contain the byte target's 259 strings) are model folders or
    loaded models; ``tokenizer`` / ``draft_tokenizer`` default to the tokenizer in each model's
    folder. ``num_assistant_tokens``: drafts per step (constant schedule), default 4.
    transformers prunes the draft's head in place, so a loaded draft is copied first.

    ``vocab_order``: ``tokenizer`` (default: as transformers runs it) or ``id``. transformers
    (5.25) keeps the draft's shared tokens, its pruned head, in the order of the draft tokenizer's
    ``get_vocab()`` (``AssistantToTargetTranslator.__init__``), but scatters the pruned logits back
    into the target's vocabulary in ascending draft-id order (``get_target_logits``). Unless the two
    orders agree, the verifier's q belongs to other tokens than the drafts were sampled with, and
    the output law shifts. A fast tokenizer's ``get_vocab()`` is in hash-map order, which changes
    from one process to the next (so do the rows a seed gives); ``id`` hands transformers
    tokenizers whose ``get_vocab()`` is in id order, the workaround under which the orders agree.
    ``describe()["draft_head_in_id_order"]`` says which case a run was in.
    """

    _remember_forwards = False  # not checked with remembered forwards (engines/_prefill.py)

    _limitation = "transformers runs universal speculative decoding at batch size 1 only; rows run one by one"

    refused_fields = {**HF_REFUSED_FIELDS, "structured_outputs": UNIVERSAL_GRAMMAR_REFUSAL}

    def __init__(
        self,
        target: Any = None,
        draft: Any = None,
        *,
        tokenizer: Any = None,
        draft_tokenizer: Any = None,
        num_assistant_tokens: Any = 4,
        vocab_order: Any = "tokenizer",
        name: str = "hf-universal",
        device: str = "cpu",
        dtype: str = "float32",
        eos_token_id: Any = None,
    ) -> None:
        from speceq.models import TARGET_DIR
        from speceq.models.bpe import BPE_DRAFT_DIR

        super().__init__(target, name=name, device=device, dtype=dtype, eos_token_id=eos_token_id)
        self.num_assistant_tokens = as_int(num_assistant_tokens, "num_assistant_tokens", minimum=1)
        draft_spec = BPE_DRAFT_DIR if draft is None else draft
        if vocab_order not in VOCAB_ORDERS:
            raise ConfigError(f"expected one of {', '.join(VOCAB_ORDERS)}, got {vocab_order!r}", where="vocab_order")
        self.vocab_order = str(vocab_order)
        self.target_tokenizer = load_tokenizer(tokenizer, target, default=TARGET_DIR, option="tokenizer")
        self.draft_tokenizer = load_tokenizer(draft_tokenizer, draft_spec, default=BPE_DRAFT_DIR,
                                              option="draft_tokenizer")
        if self.vocab_order == "id":
            self.target_tokenizer, self.draft_tokenizer = map(in_id_order, (self.target_tokenizer, self.draft_tokenizer))
        shared, draft_only = shared_strings(self.target_tokenizer, self.draft_tokenizer)
        if shared == 0:
            raise ConfigError("the draft's tokenizer shares no token string with the target's: nothing to draft",
                              where="draft_tokenizer")
        if draft_only == 0:
            import transformers

            raise ConfigError(
                f"every token string of the draft's tokenizer is in the target's; transformers "
                f"{transformers.__version__}'s universal speculative decoding then fails in "
                "AssistantToTargetTranslator.get_target_ids (AttributeError: no assistant_overlap_token_ids; seen on "
                "5.25). Give a draft whose tokenizer has strings the target lacks, or use hf-assisted for a draft that "
                "shares the target's tokenizer",
                where="draft",
            )
        self.shared_strings, self.draft_only_strings = shared, draft_only
        # In ``tokenizer`` order a seed's rows change from one process to the next, so a case's seed is not honoured
        self.sampling_fields = {name: orders for name, orders in HF_SAMPLING_FIELDS.items()
                                if (name != "seed" or self.vocab_order == "id") and name != "structured_outputs"}
        loaded = draft_spec if isinstance(draft_spec, (str, Path)) else copy.deepcopy(draft_spec)
        # not ``.draft``: the oracle scores an engine's ``.draft`` in the target's vocabulary, this one has its own
        self.assistant = load_causal_lm(loaded, role="draft", device=self.device, dtype=self.dtype)
        self._draft_label = _model_label(draft_spec, self.assistant)
        gc = self.assistant.generation_config
        gc.num_assistant_tokens = self.num_assistant_tokens
        gc.num_assistant_tokens_schedule = "constant"
        gc.assistant_confidence_threshold = 0.0
        # transformers installs the pruned draft head on the assistant itself at a sampled call
        # (generation/candidate_generator.py:746-754 in 5.25.0), and its greedy path then runs that pruned
        # model on unmapped ids and crashes: greedy requests get a copy of the untouched assistant
        self._unpruned_assistant = copy.deepcopy(self.assistant)
        self._build_translator()

    def sample(self, request: SampleRequest) -> SampleBatch:
        """Sampled requests use the assistant transformers prunes; greedy ones a fresh unpruned copy."""
        if request.params.temperature != 0:
            return super().sample(request)
        pruned, self.assistant = self.assistant, copy.deepcopy(self._unpruned_assistant)
        try:
            return super().sample(request)
        finally:
            self.assistant = pruned

    def _build_translator(self) -> None:
        """Run one short generate call so that transformers builds its vocabulary translator now.

        Building it prunes the draft's head with ``prune_linear_layer``, whose new ``nn.Linear``
        draws its (overwritten) initial weights from torch's global generator: inside the first
        sampled row that shifted the row's random stream, so the first row of an engine's life
        differed from the same row later. Here it runs under a forked generator, before any row.
        """
        from speceq.core.params import SamplingParams

        torch = self._torch
        params = SamplingParams(max_new_tokens=2)
        # a prompt of ordinary text: special tokens are dropped when transformers re-encodes it for the draft
        text_ids = self.target_tokenizer("def f", add_special_tokens=False)["input_ids"]
        ids = torch.tensor([text_ids], dtype=torch.long, device=self.device)
        with self._seeded(0), torch.inference_mode():
            self.target.generate(input_ids=ids, attention_mask=torch.ones_like(ids), **self._kwargs(params),
                                 **self._extra_kwargs())
        from transformers.generation.candidate_generator import AssistantVocabTranslatorCache

        translator = AssistantVocabTranslatorCache.get_translator(self.target_tokenizer, self.draft_tokenizer,
                                                                  self.vocab_size)
        kept = getattr(translator, "assistant_overlap_token_ids", None)
        self.draft_head_in_id_order = None if kept is None else bool(torch.all(kept[1:] > kept[:-1]))

    def _extra_kwargs(self) -> dict[str, Any]:
        return {"assistant_model": self.assistant, "tokenizer": self.target_tokenizer,
                "assistant_tokenizer": self.draft_tokenizer}

    def describe(self) -> dict[str, Any]:
        return {
            **super().describe(),
            "method": "generate(assistant_model=draft, tokenizer, assistant_tokenizer, do_sample=True): "
                      "universal speculative decoding",
            "draft": self._draft_label,
            "draft_parameters": int(sum(p.numel() for p in self.assistant.parameters())),
            "draft_vocab_strings": self.shared_strings + self.draft_only_strings,
            "shared_token_strings": self.shared_strings,
            "vocab_order": self.vocab_order,
            "draft_head_in_id_order": self.draft_head_in_id_order,
            "num_assistant_tokens": self.num_assistant_tokens,
            "num_assistant_tokens_schedule": "constant",
            "assistant_confidence_threshold": 0.0,
        }


def in_id_order(tokenizer: Any) -> Any:
    """``tokenizer`` with ``get_vocab()`` ordered by token id (the instance's method replaced).

    A fast tokenizer's ``get_vocab()`` comes from a Rust hash map whose order changes from one
    process to the next; transformers' translator keeps the shared tokens (the draft's pruned head)
    in that order but scatters their logits in id order (see :class:`HFUniversalEngine`). In id
    order the two agree and the rows depend only on the seed.
    """
    unordered = tokenizer.get_vocab

    def get_vocab() -> dict[str, int]:
        return dict(sorted(unordered().items(), key=lambda item: item[1]))

    tokenizer.get_vocab = get_vocab
    return tokenizer


def shared_strings(target_tokenizer: Any, draft_tokenizer: Any) -> tuple[int, int]:
    """(draft token strings the target's vocabulary has, draft strings it lacks), compared as transformers'
    translator compares them (the draft's leading space sign replaced by the target's)."""
    target_vocab = set(target_tokenizer.get_vocab())
    draft_vocab = list(draft_tokenizer.get_vocab())

    def space_sign(tok: Any) -> str | None:
        ids = tok(" ", add_special_tokens=False)["input_ids"]
        return tok.convert_ids_to_tokens(ids)[0][0] if ids else None

    t_sign, d_sign = space_sign(target_tokenizer), space_sign(draft_tokenizer)
    if t_sign is not None and d_sign is not None and t_sign != d_sign:
        draft_vocab = [t.replace(d_sign, t_sign, 1) if t.startswith(d_sign) else t for t in draft_vocab]
    shared = sum(1 for t in draft_vocab if t in target_vocab)
    return shared, len(draft_vocab) - shared


class HFMTPEngine(_RowLoopEngine):
    """``generate(use_mtp=True)``: the target's multi-token-prediction layers draft, the target verifies.

    ``target``: a model folder of an MTP-capable class with ``num_mtp_layers`` in its config and the
    MTP weights in its checkpoint under ``model.layers.<num_hidden_layers>.``; default the ``mtp``
    world's tiny DeepSeek-V3 (:func:`speceq.models.mtp.mtp_model_folder`, built into the cache on
    first use). transformers drafts ``num_mtp_layers`` tokens a step and loads the MTP layers from
    the target's folder at every call, so an in-memory target is refused.
    """

    _remember_forwards = False  # not checked with remembered forwards (engines/_prefill.py)

    _limitation = "transformers runs MTP speculation at batch size 1 only; rows run one by one"

    #: ``MTPCandidateGenerator`` hands the call's processors to the MTP layers' drafting; the verifier processes
    #: every position with its own prefix.
    sampling_fields = HF_SAMPLING_FIELDS

    def __init__(
        self,
        target: Any = None,
        *,
        name: str = "hf-mtp",
        device: str = "cpu",
        dtype: str = "float32",
        eos_token_id: Any = None,
    ) -> None:
        from speceq.models.mtp import mtp_model_folder, point_mtp_weights

        if target is not None and not isinstance(target, (str, Path)):
            raise ConfigError("transformers loads the MTP layers from the model's folder: give target=DIR",
                              where="target")
        folder = mtp_model_folder() if target is None else target
        super().__init__(str(folder), name=name, device=device, dtype=dtype, eos_token_id=eos_token_id)
        text_config = self.target.config.get_text_config()
        self.num_mtp_layers = getattr(text_config, "num_mtp_layers", None)
        if not self.num_mtp_layers:
            raise ConfigError(
                f"{type(self.target).__name__} at {str(folder)!r} has no num_mtp_layers in its config: "
                "it has no MTP layers to draft with",
                where="target",
            )
        point_mtp_weights(self.target)

    def _extra_kwargs(self) -> dict[str, Any]:
        return {"use_mtp": True}

    def describe(self) -> dict[str, Any]:
        return {
            **super().describe(),
            "method": "generate(use_mtp=True): the model's MTP layers draft",
            "num_mtp_layers": int(self.num_mtp_layers),
        }


class HFDFlashEngine(_RowLoopEngine):
    """``generate(speculation_type="dflash")``: a DFlash drafter drafts ``block_size`` tokens per step from the
    target's hidden states, the target verifies.

    ``target``: default the bundled byte target (the world's target in other worlds). The drafter is
    built for it from config with seeded random weights (:func:`speceq.models.dflash.tiny_dflash_assistant`):
    ``block_size`` (default 4; it drafts ``block_size - 1`` tokens after the target's own token),
    ``target_layer_ids`` (0-based layers whose hidden states it reads; default the second and the
    last), ``mask_token_id`` (the noise token; default the target's pad id, else its last id),
    ``seed`` (default 0).
    """

    _remember_forwards = False  # not checked with remembered forwards (engines/_prefill.py)

    _limitation = "transformers runs DFlash speculation at batch size 1 only; rows run one by one"

    #: ``DFlashTokenCandidateGenerator`` processes each drafted position with the drafts before it and returns the
    #: processed logits as q; the verifier processes every position with its own prefix.
    sampling_fields = HF_SAMPLING_FIELDS

    def __init__(
        self,
        target: Any = None,
        *,
        block_size: Any = 4,
        target_layer_ids: Any = None,
        mask_token_id: Any = None,
        seed: Any = 0,
        name: str = "hf-dflash",
        device: str = "cpu",
        dtype: str = "float32",
        eos_token_id: Any = None,
    ) -> None:
        from speceq.models.dflash import default_layer_ids, tiny_dflash_assistant

        super().__init__(target, name=name, device=device, dtype=dtype, eos_token_id=eos_token_id)
        self.block_size = as_int(block_size, "block_size", minimum=2)
        layers = decoder_layers(self.target)
        if target_layer_ids is None:
            self.target_layer_ids = default_layer_ids(layers)
        else:
            ids = target_layer_ids if isinstance(target_layer_ids, (list, tuple)) else [target_layer_ids]
            self.target_layer_ids = [as_int(i, "target_layer_ids") for i in ids]
            bad = [i for i in self.target_layer_ids if i >= layers]
            if bad or not self.target_layer_ids:
                raise ConfigError(f"expected a non-empty list of layer ids in 0..{layers - 1} (the target has {layers} "
                                  f"decoder layers), got {target_layer_ids!r}", where="target_layer_ids")
        default_mask = self.pad_token_id if self.pad_token_id is not None else self.vocab_size - 1
        self.mask_token_id = as_int(default_mask if mask_token_id is None else mask_token_id, "mask_token_id")
        if self.mask_token_id >= self.vocab_size:
            raise ConfigError(f"expected a token id below the target's vocabulary of {self.vocab_size}, "
                              f"got {self.mask_token_id}", where="mask_token_id")
        self.seed = as_int(seed, "seed")
        # not ``.draft``: the oracle scores an engine's ``.draft`` as a causal LM, this drafter is not one
        self.assistant = tiny_dflash_assistant(self.target, block_size=self.block_size,
                                               target_layer_ids=self.target_layer_ids,
                                               mask_token_id=self.mask_token_id, seed=self.seed)
        self.assistant.to(device=self.device, dtype=self.target.dtype)

    def _extra_kwargs(self) -> dict[str, Any]:
        return {"assistant_model": self.assistant, "speculation_type": "dflash"}

    def describe(self) -> dict[str, Any]:
        return {
            **super().describe(),
            "method": 'generate(assistant_model=drafter, speculation_type="dflash"): block drafts from hidden states',
            "drafter": f"tiny MuseGlimmerAssistantModel, random weights, seed {self.seed}",
            "drafter_parameters": int(sum(p.numel() for p in self.assistant.parameters())),
            "block_size": self.block_size,
            "target_layer_ids": self.target_layer_ids,
            "mask_token_id": self.mask_token_id,
        }


class HFMultiTokenEngine(_RowLoopEngine):
    """A Gemma-4 multi-token assistant: ``generate(assistant_model=Gemma4AssistantForCausalLM)``.

    ``target`` / ``draft``: folders of a Gemma 4 (or 3n) causal LM and a ``Gemma4AssistantForCausalLM``;
    default the ``gemma4`` world's tiny pair (:func:`speceq.models.multi_token.gemma4_folders`,
    built into the cache on first use). ``num_assistant_tokens``: drafts per step, default 3.

    ``draft_law``: ``logits`` (default: as transformers runs it) or ``argmax``. transformers 5.25's
    ``SinglePositionMultiTokenCandidateGenerator.get_candidates`` drafts the assistant's *argmax*
    tokens but returns the assistant's logits as the candidates' law, and with ``do_sample=True``
    the verifier (``_speculative_sampling``) accepts a draft with probability min(1, p/q) and
    resamples from (p - q)+ with that q, although the draft was deterministic: it over-accepts the
    assistant's argmax tokens, and the output law shifts. ``argmax`` hands the verifier the law the
    drafts really came from (a point mass at each drafted token): the workaround.
    """

    _remember_forwards = False  # not checked with remembered forwards (engines/_prefill.py)

    _limitation = "transformers runs multi-token assisted generation at batch size 1 only; rows run one by one"

    #: transformers builds ``SinglePositionMultiTokenCandidateGenerator`` without the call's processors
    #: (generation/utils.py:1356 in 5.25.0): its drafts are the raw argmax and its q the raw assistant logits; the
    #: verifier processes every position with its own prefix. With ``draft_law=argmax`` (q the drafts' own law)
    #: the fields are applied exactly; as transformers runs it the path is shifted with or without them.
    sampling_fields = HF_SAMPLING_FIELDS

    def __init__(
        self,
        target: Any = None,
        draft: Any = None,
        *,
        num_assistant_tokens: Any = 3,
        draft_law: Any = "logits",
        name: str = "hf-multi-token",
        device: str = "cpu",
        dtype: str = "float32",
        eos_token_id: Any = None,
    ) -> None:
        from speceq.models.multi_token import gemma4_folders

        if target is None or draft is None:
            default_target, default_draft = gemma4_folders()
            target = default_target if target is None else target
            draft = default_draft if draft is None else draft
        super().__init__(target, name=name, device=device, dtype=dtype, eos_token_id=eos_token_id)
        if not type(self.target).__name__.startswith(("Gemma4", "Gemma3n")):
            raise ConfigError(f"the multi-token assistant needs a Gemma 4 or Gemma 3n target (it reads their shared "
                              f"key/value states), got {type(self.target).__name__}", where="target")
        self.num_assistant_tokens = as_int(num_assistant_tokens, "num_assistant_tokens", minimum=1)
        # not ``.draft``: the oracle scores an engine's ``.draft`` as a causal LM, this one needs the target's states
        self.assistant = load_causal_lm(draft, role="draft", device=self.device, dtype=self.dtype)
        if not type(self.assistant).__name__.startswith(("Gemma4Assistant", "Gemma4UnifiedAssistant")):
            raise ConfigError(f"expected a Gemma4AssistantForCausalLM draft, got {type(self.assistant).__name__}",
                              where="draft")
        self._draft_label = _model_label(draft, self.assistant)
        self.assistant.generation_config.num_assistant_tokens = self.num_assistant_tokens
        if draft_law not in DRAFT_LAWS:
            raise ConfigError(f"expected one of {', '.join(DRAFT_LAWS)}, got {draft_law!r}", where="draft_law")
        self.draft_law = str(draft_law)

    def _start_row(self) -> None:
        self.assistant.generation_config.num_assistant_tokens = self.num_assistant_tokens

    @contextlib.contextmanager
    def _counting(self) -> Iterator[Any]:
        with super()._counting() as counts:
            if self.draft_law == "argmax" and counts is not None:
                inner = self.target._get_candidate_generator

                def wrapped(*args: Any, **kwargs: Any) -> Any:
                    gen = inner(*args, **kwargs)
                    gen.get_candidates = _point_mass_candidates(gen.get_candidates)
                    return gen

                self.target._get_candidate_generator = wrapped
            yield counts

    def _extra_kwargs(self) -> dict[str, Any]:
        return {"assistant_model": self.assistant}

    def describe(self) -> dict[str, Any]:
        return {
            **super().describe(),
            "method": "generate(assistant_model=Gemma4Assistant): single-position multi-token drafts",
            "draft": self._draft_label,
            "draft_parameters": int(sum(p.numel() for p in self.assistant.parameters())),
            "num_assistant_tokens": self.num_assistant_tokens,
            "draft_law": self.draft_law,
        }


#: ``draft_law`` values of :class:`HFMultiTokenEngine`.
DRAFT_LAWS: tuple[str, ...] = ("logits", "argmax")


def _point_mass_candidates(get_candidates: Any) -> Any:
    """``get_candidates`` returning, as the candidates' law, a point mass at each drafted token (logit 0 there,
    -inf elsewhere): the law of an argmax draft."""
    import torch

    def fixed(input_ids: Any, **kwargs: Any) -> Any:
        ids, logits = get_candidates(input_ids, **kwargs)
        if logits is None:
            return ids, logits
        drafted = ids[:, -logits.shape[1]:]
        law = torch.full_like(logits, float("-inf"))
        law.scatter_(-1, drafted.unsqueeze(-1), 0.0)
        return ids, law

    return fixed


class HFEnsembleEngine(HFAssistedEngine):
    """``generate(assistant_model=draft, assistant_ensemble_weight=w)``: assisted generation verifying against the
    mixture of the target's and the draft's laws (lossy by design; see the module docstring).

    ``assistant_ensemble_weight``: w in (0, 1), the draft's weight in the mixture (default 0.5); the other
    options are :class:`~speceq.engines.hf.HFAssistedEngine`'s.
    """

    def __init__(self, target: Any = None, draft: Any = None, *, assistant_ensemble_weight: Any = 0.5,
                 name: str = "hf-ensemble", **options: Any) -> None:
        try:
            weight = float(assistant_ensemble_weight)
        except (TypeError, ValueError):
            weight = float("nan")
        if not 0.0 < weight < 1.0:
            raise ConfigError(f"expected a number in the open interval (0, 1), got {assistant_ensemble_weight!r} "
                              "(hf-assisted is the lossless path, weight 0)", where="assistant_ensemble_weight")
        super().__init__(target, draft, name=name, **options)
        self.assistant_ensemble_weight = weight

    def _extra_kwargs(self) -> dict[str, Any]:
        return {**super()._extra_kwargs(), "assistant_ensemble_weight": self.assistant_ensemble_weight}

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "lossless": False, "assistant_ensemble_weight": self.assistant_ensemble_weight,
                "method": "generate(assistant_model=draft, assistant_ensemble_weight=w): ensemble verification "
                          "against (1 - w) p + w q (lossy by design)"}
