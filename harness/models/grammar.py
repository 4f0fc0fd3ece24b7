"""Structured output: a case's ``structured_outputs`` as per-row token masks, through llguidance.

llguidance (Microsoft's grammar engine, MIT, the structured-output backend of vLLM, SGLang and
llama.cpp) compiles a regex, a JSON schema, a choice list or an EBNF grammar against a tokenizer
and says, after any token prefix, which tokens may come next. It is an optional dependency
(``pip install "speceq[structured]"``), imported only when a case sets ``structured_outputs``.

The tokenizer bridge takes the case's tokenizer: ``bytes`` (the bundled byte tokenizer), ``bpe``,
``smollm2`` or the path of any Hugging Face ``tokenizer.json`` (or its folder): llguidance reads the
tokenizer.json itself, so a user's vocabulary works as ours do. The grammar's end token is the
engine's EOS id, so a complete grammar allows exactly the token that ends the row.

:class:`RowGrammar` is one row's grammar state: :meth:`RowGrammar.mask` (the allowed tokens now,
``[vocab]`` bool), :meth:`RowGrammar.advance` (consume tokens, as many as the grammar accepts) and
:meth:`RowGrammar.rollback`. A row whose token the grammar does not accept has *left the grammar*:
:func:`grammar_violation` finds the first such position.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from typing import Any

import numpy as np
import torch

from speceq.core.params import SamplingParams
from speceq.errors import ConfigError, EngineError
from speceq.models.text_decoding import tokenizer_json

#: The install command of the optional dependency.
EXTRA_INSTALL = 'pip install "speceq[structured]"'


def _llguidance(where: str) -> Any:
    try:
        import llguidance
    except ImportError:
        raise ConfigError(f"structured_outputs needs the llguidance package, which is not installed: {EXTRA_INSTALL}",
                          where=where) from None
    return llguidance


@lru_cache(maxsize=8)
def _ll_tokenizer(tokenizer: str, eos_token_id: int | None) -> Any:
    """llguidance's tokenizer for ``tokenizer`` with ``eos_token_id`` as the grammar's end (cached: ~1 s for 49k tokens)."""
    llg = _llguidance("structured_outputs")
    path = tokenizer_json(tokenizer)
    try:
        text = path.read_text(encoding="utf-8")
        return llg.LLTokenizer(text) if eos_token_id is None else llg.LLTokenizer(text, eos_token=int(eos_token_id))
    except (OSError, ValueError, RuntimeError) as e:
        raise ConfigError(f"llguidance cannot read tokenizer {path}: {e}", where="tokenizer") from None


@lru_cache(maxsize=64)
def _grammar_text(kind: str, text: str) -> str:
    llg = _llguidance("structured_outputs")
    try:
        grammar = llg.grammar_from(kind, text)
    except (ValueError, RuntimeError) as e:
        raise ConfigError(f"cannot parse the {kind}: {_one_line(str(e))}", where="structured_outputs") from None
    error = llg.LLMatcher.validate_grammar(grammar)
    if error:
        raise ConfigError(f"cannot parse the {kind}: {_one_line(error)}", where="structured_outputs")
    return grammar


def _one_line(message: str, limit: int = 240) -> str:
    """A library's multi-line parse error as one line (at most ``limit`` characters)."""
    line = " ".join(part.strip() for part in message.splitlines() if part.strip())
    return line if len(line) <= limit else line[: limit - 3] + "..."


class Grammar:
    """A case's grammar compiled for one vocabulary: makes one :class:`RowGrammar` per row.

    ``vocab_size``: the engine's vocabulary (the mask's length; ids past the tokenizer's are never
    allowed; None: the tokenizer's); ``eos_token_id``: the engine's EOS, the only token a complete grammar allows.
    """

    def __init__(self, params: SamplingParams, vocab_size: int | None, eos_token_id: int | None) -> None:
        if params.structured_outputs is None or params.tokenizer is None:
            raise ConfigError("the case sets no structured_outputs (or no tokenizer)", where="structured_outputs")
        kind, text = params.structured_outputs
        self.grammar = _grammar_text(kind, text)
        self.tokenizer = _ll_tokenizer(params.tokenizer, eos_token_id)
        self.vocab_size = int(self.tokenizer.vocab_size if vocab_size is None else vocab_size)
        if self.tokenizer.vocab_size > self.vocab_size:
            raise ConfigError(f"tokenizer {params.tokenizer!r} has {self.tokenizer.vocab_size} tokens, more than the "
                              f"engine's vocabulary ({self.vocab_size}): set 'tokenizer' to the model's",
                              where="tokenizer")

    def row(self) -> RowGrammar:
        """A fresh grammar state (no token consumed)."""
        llg = _llguidance("structured_outputs")
        return RowGrammar(llg.LLMatcher(self.tokenizer, self.grammar, log_level=0), self.vocab_size,
                          self.tokenizer.vocab_size, int(self.tokenizer.eos_token))


class RowGrammar:
    """One row's grammar state. ``left``: a token the grammar does not accept was offered (the state stays
    where it was, as xgrammar's and vLLM's ``accept_tokens`` leave it)."""

    def __init__(self, matcher: Any, vocab_size: int, tokenizer_vocab: int, eos_token_id: int) -> None:
        self.matcher = matcher
        self.vocab_size = vocab_size
        self.tokenizer_vocab = min(vocab_size, tokenizer_vocab)
        self.eos_token_id = eos_token_id
        self.left = False
        self.ended = False  # the row's EOS was consumed (kept here: llguidance's stopped state does not count it)
        self._mask: torch.Tensor | None = None  # the mask of the current state, until it moves

    def mask(self) -> torch.Tensor:  # [vocab] bool
        """The tokens the grammar allows next (EOS once it is complete)."""
        if self._mask is None:
            self._mask = self._compute_mask()
        return self._mask

    def _compute_mask(self) -> torch.Tensor:
        if self.ended:  # nothing follows EOS: unconstrained (a look-ahead past a drafted EOS is cut at it)
            return torch.ones(self.vocab_size, dtype=torch.bool)
        bits = np.unpackbits(np.frombuffer(self.matcher.compute_bitmask(), dtype=np.uint8), bitorder="little")
        out = np.zeros(self.vocab_size, dtype=bool)
        n = self.tokenizer_vocab
        out[:n] = bits[:n].astype(bool)
        if not out.any():  # an error state allows nothing: unconstrained rather than NaN laws
            out[:] = True
        return torch.from_numpy(out)

    def advance(self, tokens: Sequence[int]) -> int:
        """Consume ``tokens`` as far as the grammar accepts them; returns how many were consumed."""
        n = 0
        for t in tokens:
            if not self.push(t):
                self.left = True
                break
            n += 1
        return n

    def push(self, token: int) -> bool:
        """Consume ``token`` when the grammar allows it (for a speculative look-ahead undone by :meth:`rollback`);
        returns whether it did. Never marks the row as having left the grammar. (The mask decides: llguidance's
        ``try_consume_tokens`` refuses EOS even where the grammar is complete.)"""
        token = int(token)
        if self.ended or not 0 <= token < self.vocab_size or not bool(self.mask()[token]):
            return False
        if token == self.eos_token_id:
            self.ended = True
        elif not self.matcher.consume_token(token):
            return False
        self._mask = None
        return True

    def rollback(self, n: int) -> None:
        """Forget the last ``n`` consumed tokens."""
        if n > 0 and self.ended:
            self.ended, n, self._mask = False, n - 1, None
        if n > 0:
            if not self.matcher.rollback(n):
                raise EngineError(f"llguidance could not roll back {n} grammar tokens: {self.matcher.get_error()}")
            self._mask = None

    def block_masks(self, tokens: Sequence[int]) -> torch.Tensor:  # [len(tokens) + 1, vocab] bool
        """The masks after 0, 1, .., len(tokens) of ``tokens`` (the state is left as it was). Positions after a
        token the grammar rejects get an all-true mask (a verifier never reaches them: that token has probability 0)."""
        masks = [self.mask()]
        consumed = 0
        for t in tokens:
            if not self.push(t):
                break
            consumed += 1
            masks.append(self.mask())
        self.rollback(consumed)
        while len(masks) < len(tokens) + 1:
            masks.append(torch.ones(self.vocab_size, dtype=torch.bool))
        return torch.stack(masks)


def row_masks(rows: Sequence[RowGrammar]) -> torch.Tensor:  # [rows, vocab] bool
    """The current masks of several rows."""
    return torch.stack([r.mask() for r in rows])


def grammar_violation(grammar: Grammar, tokens: Sequence[int]) -> int | None:
    """The first position of ``tokens`` the grammar does not allow after the tokens before it; None if none."""
    state = grammar.row()
    n = state.advance(tokens)
    return None if n == len(tokens) else n


def check_grammar(params: SamplingParams, case_id: str) -> None:
    """ConfigError naming the case when its ``structured_outputs`` cannot be parsed (or llguidance is missing).
    Called before any sampling."""
    if params.structured_outputs is None:
        return
    kind, text = params.structured_outputs
    try:
        _llguidance("structured_outputs")
        _grammar_text(kind, text)
    except ConfigError as e:
        msg = str(e)[len(e.where) + 2 :] if e.where else str(e)
        raise ConfigError(msg, where=f"case {case_id!r}.structured_outputs") from None


__all__ = ["EXTRA_INSTALL", "Grammar", "RowGrammar", "check_grammar", "grammar_violation", "row_masks",
]
