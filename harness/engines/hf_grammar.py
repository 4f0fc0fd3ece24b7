"""A case's ``structured_outputs`` as a transformers logits processor: how users constrain ``generate()``.

transformers has no grammar argument; users pass a logits processor (``generate(logits_processor=[...])``)
that sets the logits of the tokens the grammar does not allow to -inf. transformers puts a user's
processors after its own logit processors (SequenceBias, RepetitionPenalty, MinNewTokens, SuppressTokens)
and before the sampling warpers (Temperature, TopK, TopP, MinP): ``GenerationMixin._get_logits_processor``,
``generation/utils.py:1604`` (``_merge_criteria_processor_list``) then ``:1607-1638`` in transformers 5.25.0.
Setting a logit to -inf commutes with the bias, the penalty and the suppression before it (each leaves -inf
at -inf), so the law is :func:`speceq.core.processing.process_logits` in the ``hf`` order, which applies the
grammar right after them.

:class:`GrammarLogitsProcessor` is *stateless in the prefix*: the mask for ``input_ids[row]`` depends only on
the row's generated tokens ``input_ids[row, prompt_length:]``. transformers calls processors on prefixes
that go back and forth: the assistant's drafts, then each verified position with
``candidate_input_ids[:, :cur_len + i]`` (``generation/utils.py:4114-4116``), then a shorter prefix after a
rejection. The processor keeps, per row, one grammar state and the tokens it consumed; a call rolls the
state back to the longest common prefix of those tokens and the row's, then consumes the rest (so a call
costs the tokens that changed, not the whole row). A prefix that has left the grammar (a prompt-lookup
draft the grammar does not allow, the padding after a finished row) gets no mask: transformers never keeps
a token there (the token before it has probability 0), and the scores stay finite.
"""

from __future__ import annotations

from typing import Any

from speceq.core.params import SamplingParams
from speceq.errors import ConfigError, EngineError
from speceq.models.grammar import Grammar, RowGrammar


class GrammarLogitsProcessor:
    """``__call__(input_ids [rows, length], scores [rows, vocab]) -> scores`` with the tokens the grammar does not
    allow after each row's own generated tokens (``input_ids[row, prompt_length:]``) set to -inf.

    ``grammar``: the case's grammar compiled for the engine's vocabulary; ``prompt_ids``: the call's prompt
    ``[rows, prompt_length]`` (left padding included), which every ``input_ids`` it masks must start with. A call
    on another sequence (another row count, a prompt that is not the call's, scores of another width: a draft
    with its own vocabulary, as transformers' universal speculative decoding hands the call's processors to
    the draft) is an EngineError rather than a mask of the wrong tokens.
    """

    def __init__(self, grammar: Grammar, prompt_ids: Any) -> None:
        self.grammar = grammar
        self.prompt_ids = prompt_ids.detach().cpu()
        self.prompt_length = int(prompt_ids.shape[1])
        self._rows: dict[int, tuple[RowGrammar, list[int]]] = {}
        self.calls = 0

    def state(self, row: int, generated: list[int]) -> RowGrammar | None:
        """Row ``row``'s grammar state after ``generated``; None when ``generated`` leaves the grammar."""
        state, consumed = self._rows.get(row) or (self.grammar.row(), [])
        common = 0
        for a, b in zip(consumed, generated, strict=False):
            if a != b:
                break
            common += 1
        if common < len(consumed):
            state.rollback(len(consumed) - common)
            del consumed[common:]
        inside = True
        for t in generated[common:]:
            if not state.push(t):
                inside = False
                break
            consumed.append(int(t))
        self._rows[row] = (state, consumed)
        return state if inside else None

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        import torch

        self.calls += 1
        head = input_ids[:, : self.prompt_length].cpu()
        if (scores.shape[-1] != self.grammar.vocab_size or head.shape != self.prompt_ids.shape
                or not torch.equal(head, self.prompt_ids)):
            raise EngineError(
                f"the grammar processor was called on another sequence than the call's: input_ids "
                f"{tuple(input_ids.shape)} not starting with the call's prompt {tuple(self.prompt_ids.shape)}, or "
                f"scores over {scores.shape[-1]} tokens, not {self.grammar.vocab_size}: transformers applied it to "
                "another model's vocabulary (a draft's)")
        ids = input_ids[:, self.prompt_length :].tolist()
        masks = []
        for row, generated in enumerate(ids):
            state = self.state(row, generated)
            masks.append(torch.ones(self.grammar.vocab_size, dtype=torch.bool) if state is None else state.mask())
        allowed = torch.stack(masks).to(scores.device)
        return scores.masked_fill(~allowed, float("-inf"))


def grammar_processor(params: SamplingParams, *, vocab_size: int, eos_token_id: int | None,
                      prompt_ids: Any) -> GrammarLogitsProcessor:
    """The processor of ``params.structured_outputs`` for an engine of ``vocab_size`` logits ending rows with
    ``eos_token_id`` (the grammar's end), on a generate() call whose ``input_ids`` are ``prompt_ids``."""
    if params.structured_outputs is None:
        raise ConfigError("the case sets no structured_outputs", where="structured_outputs")
    return GrammarLogitsProcessor(Grammar(params, vocab_size, eos_token_id), prompt_ids)


__all__ = ["GrammarLogitsProcessor", "grammar_processor"]
