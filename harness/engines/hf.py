"""Hugging Face transformers ``generate()`` as engines: plain sampling, assisted generation, prompt lookup.

Three engines wrap real third-party samplers:

- :class:`HFSampleEngine`: ``generate(do_sample=True)``, batched with left padding (the HF baseline);
- :class:`HFAssistedEngine`: ``generate(assistant_model=draft, do_sample=True)``, transformers'
  speculative sampling (Leviathan et al. Algorithm 1);
- :class:`HFPromptLookupEngine`: ``generate(prompt_lookup_num_tokens=k, do_sample=True)``, drafts
  copied from the prompt, kept while the target's own samples match them.

Parameter mapping (every field is passed explicitly; transformers 5.24 fills an *unset* ``top_k``
with 50 from ``GenerationConfig._get_default_generation_params``, so ``top_k=0`` is always sent):
temperature -> ``temperature`` (0 -> ``do_sample=False``, greedy), top_k -> ``top_k`` (0 = off),
top_p -> ``top_p``, max_new_tokens -> ``max_new_tokens``; ``ignore_eos`` -> ``suppress_tokens=[eos]``
plus ``min_new_tokens=max_new_tokens``. The request fields transformers has (:data:`GENERATE_FIELDS`):
min_p -> ``min_p``, repetition_penalty -> ``repetition_penalty`` (over prompt and generated tokens; the
left padding skipped), logit_bias -> single-token ``sequence_bias``, structured_outputs -> a grammar logits
processor (:mod:`speceq.engines.hf_grammar`, where transformers puts a user's processor), in the ``hf``
processing order only;
an engine declares them (``sampling_fields``) when its path applies them at every verified position, and
refuses the others with the reason (``refused_fields``). Typical-p, epsilon/eta cut-offs and the rest are
set to their neutral values.

Processing compared with :func:`speceq.core.processing.process_logits` (checked by
``tests/engines/test_hf.py``). transformers applies ``SuppressTokens`` (EOS -> -inf) before the
warpers, then ``Temperature -> TopK -> TopP``, the same order as ours, and its top-p removes tokens
whose ascending cumulative mass is <= 1 - top_p, the same rule. At the boundaries:

- top-k ties: both keep *every* token whose logit equals the k-th largest (so more than k may stay).
- top-p ties: both rank tied tokens as transformers' unstable ``torch.sort`` of the logits puts them
  (:func:`speceq.core.processing.top_p_keep`), the same on CPU with the same torch build.
- top-p rounding: transformers sums its float32 probabilities from the least likely end, ours in
  float64 from the most likely end against the row's total, so only a cut within float32 rounding
  (~1e-7) of ``1 - top_p`` can keep a different set.
- ``min_tokens_to_keep`` is 1 in both (the most likely token always survives top-p).
- greedy: both take the first maximal logit.

Batch size: transformers runs assisted generation and prompt lookup only at batch size 1
(``ValueError: assisted generate is only supported for batch_size = 1``), so those engines loop
over rows; ``describe()`` and ``SampleBatch.info`` say so. Acceptance counts: transformers does not
report them; these engines count them by wrapping the candidate generator of each call (drafted
tokens from ``get_candidates``, accepted tokens and verify steps from ``update_candidate_strategy``).

Seeds: transformers samples from torch's global generator. Each generate call runs inside
``torch.random.fork_rng`` (the caller's global state is restored) seeded by
``derive_seed(request.seed, first row of the call, ...)``, so a row's tokens depend only on the
request seed and its place in the layout.
"""

from __future__ import annotations

import abc
import contextlib
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from speceq.core.params import PROFILES, SamplingParams
from speceq.engines._batching import check_prompts
from speceq.engines._options import as_int
from speceq.engines._prefill import remember_prefills
from speceq.engines.base import SampleBatch, SampleRequest, batch_from_lists
from speceq.engines.row_progress import report_rows
from speceq.errors import ConfigError, EngineError
from speceq.models.hf_utils import load_causal_lm, model_eos_source, model_pad_id, model_vocab_size
from speceq.models.torch_utils import derive_seed

if TYPE_CHECKING:
    pass


def _owned(spec: Any) -> bool:
    """True when the engine loaded the model itself (a folder, a file or the bundled one), so it may
    wrap its forward; a model object the caller passed in is left as it is."""
    return spec is None or isinstance(spec, (str, Path))


def _model_label(spec: Any, model: Any) -> str:
    if isinstance(spec, (str, Path)):
        return str(spec)
    if spec is None:
        return f"bundled {type(model).__name__}"
    return f"in-memory {type(model).__name__}"


#: The request fields generate() applies through its own arguments, each with the argument it becomes.
#: transformers applies them in the ``hf`` processing order (SequenceBias, RepetitionPenalty, then the
#: Temperature, TopK, TopP and MinP warpers) only, so that is the order an engine declares them in.
GENERATE_FIELDS: Mapping[str, str] = {
    "min_p": "min_p",
    "repetition_penalty": "repetition_penalty",
    "logit_bias": "sequence_bias",
    # a logits processor masking by the case's grammar (speceq.engines.hf_grammar), after transformers' own
    # processors and before its warpers: the ``hf`` order
    "structured_outputs": "logits_processor",
}
#: What an ``hf-*`` engine whose path has been checked to apply generate()'s processors at every position it
#: verifies declares as its ``sampling_fields`` (:func:`speceq.engines.base.sampling_fields`): the fields of
#: :data:`GENERATE_FIELDS` in the ``hf`` order, and ``seed`` (a row depends only on its request seed, so the
#: rows of a case's own seed repeat) in every order.
HF_SAMPLING_FIELDS: Mapping[str, tuple[str, ...]] = {**{name: ("hf",) for name in GENERATE_FIELDS}, "seed": PROFILES}
#: Why the ``hf-*`` engines refuse the other request fields (quoted in the refusal,
#: :func:`speceq.engines.base.check_sampling_support`).
HF_REFUSED_FIELDS: Mapping[str, str] = {
    "presence_penalty": "transformers' generate() has no presence penalty",
    "frequency_penalty": "transformers' generate() has no frequency penalty",
    "stop": "transformers' stop_strings end a row when a stop string ends the prompt and row together (a stop "
            "string across the prompt's end stops it), speceq's stop only when the row's own text contains it, "
            "so the rows would end elsewhere",
    "include_stop_str_in_output": "it qualifies stop, which transformers cannot apply as speceq defines it",
}


def generation_kwargs(params: SamplingParams, *, eos_token_id: int | None, pad_token_id: int,
                      vocab_size: int | None = None, prompt_ids: Any = None) -> dict[str, Any]:
    """Keyword arguments of ``generate()`` that reproduce ``params`` exactly (every field explicit).

    The request fields of :data:`GENERATE_FIELDS` become their generate() arguments (``logit_bias``
    as single-token ``sequence_bias``; ``structured_outputs`` as a grammar logits processor,
    :class:`speceq.engines.hf_grammar.GrammarLogitsProcessor`, which needs the model's ``vocab_size``
    and the call's ``input_ids`` as ``prompt_ids``); any other field, or one of them outside the
    ``hf`` order, is a ConfigError naming it (transformers would sample without it).
    """
    if params.structured_outputs is not None and (vocab_size is None or prompt_ids is None):
        raise ConfigError("the grammar processor needs the model's vocab_size and the call's prompt_ids",
                          where="structured_outputs")
    for name in params.extra_fields:
        if name == "seed":  # not a generate() argument: the engine seeds each call from the request seed
            continue
        if name not in GENERATE_FIELDS or params.processing != "hf":
            why = ("transformers' generate() has no such argument" if name not in GENERATE_FIELDS
                   else f"transformers applies it in the 'hf' processing order only, not {params.processing!r}")
            raise ConfigError(f"generate() cannot apply {name}: {why}", where=name)
    kw: dict[str, Any] = {
        "max_new_tokens": params.max_new_tokens,
        "num_beams": 1,
        "num_return_sequences": 1,
        "repetition_penalty": float(params.repetition_penalty),
        "sequence_bias": {(int(t),): float(b) for t, b in params.logit_bias} or None,
        "no_repeat_ngram_size": 0,
        "bad_words_ids": None,
        # transformers adds MinP whenever min_p is not None (0.0 included); None keeps it out
        "min_p": float(params.min_p) if params.min_p > 0.0 else None,
        "top_h": None,
        "typical_p": 1.0,
        "epsilon_cutoff": 0.0,
        "eta_cutoff": 0.0,
        "renormalize_logits": False,
        "remove_invalid_values": False,
        "forced_bos_token_id": None,
        "forced_eos_token_id": None,
        "begin_suppress_tokens": None,
        "exponential_decay_length_penalty": None,
        "eos_token_id": eos_token_id,
        "pad_token_id": pad_token_id,
        "use_cache": True,
    }
    if params.greedy:
        # warpers are not applied without sampling; None (filled with transformers' defaults)
        # keeps generate() from warning that sampling flags are set
        kw.update(do_sample=False, temperature=None, top_k=None, top_p=None)
    else:
        kw.update(do_sample=True, temperature=float(params.temperature), top_k=int(params.top_k), top_p=float(params.top_p))
    if params.ignore_eos and eos_token_id is not None:
        kw.update(suppress_tokens=[eos_token_id], min_new_tokens=params.max_new_tokens)
    else:
        # min_length only without min_new_tokens: giving both makes transformers warn at every call
        kw.update(suppress_tokens=None, min_new_tokens=None, min_length=0)
    # Older transformers (e.g. 5.17 on the GPU machine) lack some neutral fields such as top_h:
    # an unknown key would be taken for a model input, so only known fields are sent.
    from transformers import GenerationConfig

    known = GenerationConfig()
    out = {k: v for k, v in kw.items() if hasattr(known, k)}
    if params.structured_outputs is not None:
        from transformers import LogitsProcessorList

        from speceq.engines.hf_grammar import grammar_processor

        assert vocab_size is not None and prompt_ids is not None  # checked above
        out["logits_processor"] = LogitsProcessorList([grammar_processor(
            params, vocab_size=vocab_size, eos_token_id=eos_token_id, prompt_ids=prompt_ids)])
    return out


class _HFEngine:
    """Shared loading, parameter mapping, seeding and output cutting of the HF engines."""

    name: str
    vocab_size: int
    eos_token_id: int | None
    #: Remember the target's forwards across rows (engines/_prefill.py); off for the paths whose
    #: rows have not been checked identical with it (tests/engines/test_hf_prefill.py).
    _remember_forwards = True
    #: The request fields this engine applies (:func:`speceq.engines.base.sampling_fields`): none unless
    #: its path has been checked to apply generate()'s processors at every position it verifies.
    sampling_fields: Mapping[str, tuple[str, ...]] = {}
    refused_fields: Mapping[str, str] = HF_REFUSED_FIELDS

    def __init__(self, target: Any, *, name: str, device: str, dtype: str, eos_token_id: Any) -> None:
        import torch

        self.name = str(name)
        self.device = str(device)
        self.dtype = str(dtype)
        self._torch = torch
        self.target = load_causal_lm(target, role="target", device=self.device, dtype=self.dtype)
        if _owned(target) and self._remember_forwards:
            remember_prefills(self.target)  # rows of one prompt prefill it once: _prefill.py
        self._target_label = _model_label(target, self.target)
        # vocabulary = the logits the model emits; EOS: option > generation_config > config > tokenizer
        self.vocab_size = model_vocab_size(self.target)
        self.vocab_source = "model"
        override = None if eos_token_id is None else as_int(eos_token_id, "eos_token_id")
        self.eos_token_id, self.eos_source = model_eos_source(self.target, override)
        self.pad_token_id = model_pad_id(self.target)

    def describe(self) -> dict[str, Any]:
        import transformers

        return {
            "engine": self.name,
            "class": f"{type(self).__module__}:{type(self).__qualname__}",
            "transformers": transformers.__version__,
            "torch": self._torch.__version__,
            "target": self._target_label,
            "target_parameters": int(sum(p.numel() for p in self.target.parameters())),
            "device": self.device,
            "dtype": self.dtype,
            "vocab_size": self.vocab_size,
            "eos_token_id": self.eos_token_id,
            "eos_source": self.eos_source,
        }

    def _kwargs(self, params: SamplingParams, prompt_ids: Any = None) -> dict[str, Any]:
        """generate()'s keywords for ``params`` on a call of ``input_ids=prompt_ids`` (needed by a grammar: a fresh
        processor per call); a request field this engine does not declare
        is a ConfigError naming the field and the engine (a run refuses it earlier, naming the case too)."""
        for name in params.extra_fields:
            if params.processing not in self.sampling_fields.get(name, ()):
                applies = ", ".join(f"{f} ({'/'.join(o)})" for f, o in self.sampling_fields.items())
                raise ConfigError(f"engine {self.name!r} cannot apply {name} in the {params.processing!r} processing "
                                  f"order; it applies {applies or 'no request field'}", where=name)
        return generation_kwargs(params, eos_token_id=self.eos_token_id, pad_token_id=self.pad_token_id,
                                 vocab_size=self.vocab_size, prompt_ids=prompt_ids)

    @contextlib.contextmanager
    def _seeded(self, seed: int) -> Iterator[None]:
        devices = [self._torch.cuda.current_device()] if self.device.startswith("cuda") else []
        with self._torch.random.fork_rng(devices=devices):
            self._torch.manual_seed(seed)
            yield

    def _cut(self, generated: list[int], params: SamplingParams, row: int) -> list[int]:
        """Generated ids up to and including the first EOS; check the length contract."""
        if not params.ignore_eos and self.eos_token_id is not None and self.eos_token_id in generated:
            return generated[: generated.index(self.eos_token_id) + 1]
        if len(generated) != params.max_new_tokens:
            raise EngineError(
                f"row {row}: generate() returned {len(generated)} new tokens without EOS, expected {params.max_new_tokens}",
                engine=self.name,
            )
        return generated


class HFSampleEngine(_HFEngine):
    """Plain ``generate(do_sample=True)`` of the target, ``request.batch_size`` rows per call (left padded).

    Applies min_p, repetition_penalty and logit_bias (:data:`GENERATE_FIELDS`) in the ``hf`` order;
    transformers' repetition penalty skips the left padding (``prompt_ignore_length``).
    """

    sampling_fields = HF_SAMPLING_FIELDS

    def __init__(
        self,
        target: Any = None,
        *,
        name: str = "hf-sample",
        device: str = "cpu",
        dtype: str = "float32",
        eos_token_id: Any = None,
    ) -> None:
        super().__init__(target, name=name, device=device, dtype=dtype, eos_token_id=eos_token_id)

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "method": "generate(do_sample=True), batched, left padding"}

    def sample(self, request: SampleRequest) -> SampleBatch:
        torch = self._torch
        check_prompts(request.prompts, self.vocab_size, self.name)
        params = request.params
        prompt_of_row = request.rows()
        kwargs = self._kwargs(params) if params.structured_outputs is None else {}
        rows: list[list[int]] = []
        started = time.perf_counter()
        bs = max(1, int(request.batch_size))
        for start in range(0, len(prompt_of_row), bs):
            prompts = [request.prompts[int(j)] for j in prompt_of_row[start : start + bs]]
            width = max(len(p) for p in prompts)
            ids = torch.full((len(prompts), width), self.pad_token_id, dtype=torch.long)
            mask = torch.zeros((len(prompts), width), dtype=torch.long)
            for i, p in enumerate(prompts):
                ids[i, width - len(p) :] = torch.tensor(p, dtype=torch.long)
                mask[i, width - len(p) :] = 1
            with self._seeded(derive_seed(request.seed, start, bs)), torch.inference_mode():
                call = kwargs or self._kwargs(params, prompt_ids=ids)  # a grammar: its processor per call
                out = self.target.generate(input_ids=ids.to(self.device), attention_mask=mask.to(self.device), **call)
            new = out[:, width:].cpu().tolist()
            rows.extend(self._cut(r, params, start + i) for i, r in enumerate(new))
            report_rows(len(rows))
        wall = time.perf_counter() - started
        info = {"engine": self.name, "batch_size": bs, "generate_calls": -(-len(prompt_of_row) // bs)}
        return batch_from_lists(rows, prompt_of_row, params.max_new_tokens, wall_time_s=wall, info=info)


class _Counts:
    """Draft/accept counters filled by wrapping one call's candidate generator."""

    def __init__(self) -> None:
        self.drafted = 0
        self.accepted = 0
        self.steps = 0


class _RowLoopEngine(_HFEngine, abc.ABC):
    """Engines that transformers runs at batch size 1 only: one generate call per row."""

    _limitation = "transformers runs assisted generation / prompt lookup at batch size 1 only; rows run one by one"

    @abc.abstractmethod
    def _extra_kwargs(self) -> dict[str, Any]:
        """The generate() keywords that select the speculative method (assistant model, lookup)."""

    def _start_row(self) -> None:  # noqa: B027 (an optional hook, not abstract)
        """Reset state transformers carries from one generate call to the next (before every row), so
        that a row's tokens depend only on its seed; nothing by default."""

    @contextlib.contextmanager
    def _counting(self) -> Iterator[_Counts | None]:
        """Count drafted/accepted tokens by wrapping the candidate generator that generate() builds.

        Uses the private ``_get_candidate_generator`` hook of transformers (5.x); when it is absent
        the counts are unavailable (None) rather than guessed.
        """
        original = getattr(self.target, "_get_candidate_generator", None)
        if original is None:
            yield None
            return
        counts = _Counts()

        def wrapped(*args: Any, **kwargs: Any) -> Any:
            gen = original(*args, **kwargs)
            get_candidates, update = gen.get_candidates, gen.update_candidate_strategy

            def counted_get(input_ids: Any, **kw: Any) -> Any:
                cand_ids, cand_logits = get_candidates(input_ids, **kw)
                counts.drafted += int(cand_ids.shape[-1] - input_ids.shape[-1])
                return cand_ids, cand_logits

            def counted_update(input_ids: Any, scores: Any, num_matches: Any) -> Any:
                counts.accepted += int(num_matches)
                counts.steps += 1
                return update(input_ids, scores, num_matches)

            gen.get_candidates, gen.update_candidate_strategy = counted_get, counted_update
            return gen

        self.target._get_candidate_generator = wrapped
        try:
            yield counts
        finally:
            del self.target._get_candidate_generator

    def sample(self, request: SampleRequest) -> SampleBatch:
        torch = self._torch
        check_prompts(request.prompts, self.vocab_size, self.name)
        params = request.params
        prompt_of_row = request.rows()
        grammar = params.structured_outputs is not None
        kwargs = {} if grammar else {**self._kwargs(params), **self._extra_kwargs()}
        rows: list[list[int]] = []
        drafted = accepted = steps = 0
        counted = True
        started = time.perf_counter()
        for i, j in enumerate(prompt_of_row):
            ids = torch.tensor([request.prompts[int(j)]], dtype=torch.long, device=self.device)
            self._start_row()
            call = {**self._kwargs(params, prompt_ids=ids), **self._extra_kwargs()} if grammar else kwargs
            with self._counting() as counts, self._seeded(derive_seed(request.seed, i)), torch.inference_mode():
                out = self.target.generate(input_ids=ids, attention_mask=torch.ones_like(ids), **call)
            rows.append(self._cut(out[0, ids.shape[1] :].cpu().tolist(), params, i))
            report_rows(len(rows))
            if counts is None:
                counted = False
            else:
                drafted, accepted, steps = drafted + counts.drafted, accepted + counts.accepted, steps + counts.steps
        wall = time.perf_counter() - started
        info: dict[str, Any] = {
            "engine": self.name,
            "batch_size": 1,
            "requested_batch_size": int(request.batch_size),
            "limitation": self._limitation,
            "generate_calls": len(prompt_of_row),
            "acceptance_counts": "counted by wrapping transformers' candidate generator" if counted else "unavailable",
        }
        return batch_from_lists(
            rows,
            prompt_of_row,
            params.max_new_tokens,
            drafted_tokens=drafted if counted else None,
            accepted_tokens=accepted if counted else None,
            verify_steps=steps if counted else None,
            wall_time_s=wall,
            info=info,
        )

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "batch_size_limit": 1, "limitation": self._limitation}


#: transformers' draft-length schedules (``GenerationConfig.num_assistant_tokens_schedule``).
DRAFT_SCHEDULES: tuple[str, ...] = ("constant", "heuristic", "heuristic_transient")


def check_draft_schedule(schedule: Any, threshold: Any) -> tuple[str, float]:
    """Validated (``num_assistant_tokens_schedule``, ``assistant_confidence_threshold``), or ConfigError naming the option.

    ``constant``: k drafts every step; ``heuristic``/``heuristic_transient``: k grows by 2 after a
    step that accepts every draft and shrinks by 1 (to >= 1) otherwise. The threshold (a probability
    in [0, 1]; 0 = off) stops a step's drafting once the draft's probability of its own token falls
    below it.
    """
    if schedule not in DRAFT_SCHEDULES:
        raise ConfigError(
            f"expected one of {', '.join(DRAFT_SCHEDULES)}, got {schedule!r}", where="num_assistant_tokens_schedule"
        )
    try:
        value = float(threshold)
    except (TypeError, ValueError):
        value = float("nan")
    if isinstance(threshold, bool) or not 0.0 <= value <= 1.0:
        raise ConfigError(
            f"expected a probability in [0, 1] (0 = no cut-off), got {threshold!r}",
            where="assistant_confidence_threshold",
        )
    return str(schedule), value


def _sklearn_available() -> bool:
    import importlib.util

    return importlib.util.find_spec("sklearn") is not None


class HFAssistedEngine(_RowLoopEngine):
    """``generate(assistant_model=draft, do_sample=True)``: transformers' speculative sampling, k drafts per step.

    ``num_assistant_tokens`` (k, default 4), ``num_assistant_tokens_schedule`` (default ``constant``)
    and ``assistant_confidence_threshold`` (default 0: off) are set on the draft's generation config,
    where transformers' candidate generator reads them. transformers keeps the ``heuristic``
    schedule's k from one generate call to the next; this engine restores k before every row, so a
    row depends only on its seed (within a row the schedule runs as transformers runs it). With
    scikit-learn installed, transformers also retunes the threshold within a call from an ROC curve
    of the draft's confidences; ``describe()`` says whether it can.
    """

    #: transformers hands the draft a copy of the call's generation config and processors (both sides
    #: process), and processes the target's logits at every verified position with that position's own
    #: prefix (``_assisted_decoding``), the draft's q being its processed scores.
    sampling_fields = HF_SAMPLING_FIELDS

    def __init__(
        self,
        target: Any = None,
        draft: Any = None,
        *,
        num_assistant_tokens: Any = 4,
        num_assistant_tokens_schedule: Any = "constant",
        assistant_confidence_threshold: Any = 0.0,
        name: str = "hf-assisted",
        device: str = "cpu",
        dtype: str = "float32",
        eos_token_id: Any = None,
    ) -> None:
        super().__init__(target, name=name, device=device, dtype=dtype, eos_token_id=eos_token_id)
        self.num_assistant_tokens = as_int(num_assistant_tokens, "num_assistant_tokens", minimum=1)
        self.draft = load_causal_lm(draft, role="draft", device=self.device, dtype=self.dtype)
        if _owned(draft):
            remember_prefills(self.draft)
        self._draft_label = _model_label(draft, self.draft)
        if model_vocab_size(self.draft) != self.vocab_size:
            raise ConfigError(
                f"draft vocabulary has {model_vocab_size(self.draft)} tokens, the target's {self.vocab_size}: "
                "the draft must share the target's tokenizer (give draft=DIR of a model with the same vocabulary)",
                where="draft",
            )
        self.schedule, self.confidence_threshold = check_draft_schedule(
            num_assistant_tokens_schedule, assistant_confidence_threshold
        )
        # The candidate generator reads these from the assistant's own generation config. The default
        # constant schedule and no confidence cut-off make every step draft exactly k tokens (fewer
        # only at the length limit or when the draft samples EOS).
        gc = self.draft.generation_config
        gc.num_assistant_tokens = self.num_assistant_tokens
        gc.num_assistant_tokens_schedule = self.schedule
        gc.assistant_confidence_threshold = self.confidence_threshold

    def _start_row(self) -> None:
        # the "heuristic" schedule writes its last k back into the draft's config after each call
        self.draft.generation_config.num_assistant_tokens = self.num_assistant_tokens

    def _extra_kwargs(self) -> dict[str, Any]:
        return {"assistant_model": self.draft}

    def describe(self) -> dict[str, Any]:
        return {
            **super().describe(),
            "method": "generate(assistant_model=draft): speculative sampling",
            "draft": self._draft_label,
            "draft_parameters": int(sum(p.numel() for p in self.draft.parameters())),
            "num_assistant_tokens": self.num_assistant_tokens,
            "num_assistant_tokens_schedule": self.schedule,
            "assistant_confidence_threshold": self.confidence_threshold,
            "confidence_threshold_retuned": bool(self.confidence_threshold) and _sklearn_available(),
        }


class HFPromptLookupEngine(_RowLoopEngine):
    """``generate(prompt_lookup_num_tokens=k, do_sample=True)``: n-gram drafts from the context."""

    #: Drafts carry no law; transformers samples each verified position from the target's processed law
    #: given that position's own prefix and keeps drafts while they match.
    sampling_fields = HF_SAMPLING_FIELDS

    def __init__(
        self,
        target: Any = None,
        *,
        prompt_lookup_num_tokens: Any = 3,
        max_matching_ngram_size: Any = 2,
        name: str = "hf-prompt-lookup",
        device: str = "cpu",
        dtype: str = "float32",
        eos_token_id: Any = None,
    ) -> None:
        super().__init__(target, name=name, device=device, dtype=dtype, eos_token_id=eos_token_id)
        self.prompt_lookup_num_tokens = as_int(prompt_lookup_num_tokens, "prompt_lookup_num_tokens", minimum=1)
        self.max_matching_ngram_size = as_int(max_matching_ngram_size, "max_matching_ngram_size", minimum=1)

    def _extra_kwargs(self) -> dict[str, Any]:
        return {
            "prompt_lookup_num_tokens": self.prompt_lookup_num_tokens,
            "max_matching_ngram_size": self.max_matching_ngram_size,
        }

    def describe(self) -> dict[str, Any]:
        return {
            **super().describe(),
            "method": "generate(prompt_lookup_num_tokens=k): prompt lookup decoding",
            "prompt_lookup_num_tokens": self.prompt_lookup_num_tokens,
            "max_matching_ngram_size": self.max_matching_ngram_size,
        }
