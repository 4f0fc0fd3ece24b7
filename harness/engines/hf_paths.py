"""transformers' other speculative paths as engines: self-speculation by early exit.

- :class:`HFEarlyExitEngine`: ``generate(assistant_early_exit=L, do_sample=True)``. transformers'
  ``EarlyExitCandidateGenerator`` drafts with the target itself, running only its first ``L``
  decoder layers (it sets ``config.num_hidden_layers = L`` on the base model while drafting, then
  applies the final norm and LM head to layer ``L``'s hidden state), and verifies the drafts with
  the whole model by speculative sampling. The bundled target was not trained for early exit, so
  the layer-``L`` drafts are poor (low acceptance) but the method stays lossless: the output law
  must equal the target's.

Like assisted generation, transformers runs this path at batch size 1 only, so rows run one by
one; parameter mapping, seeding, acceptance counting and output cutting are those of
:mod:`speceq.engines.hf`.
"""

from __future__ import annotations

from typing import Any

from speceq.engines._options import as_int
from speceq.engines.hf import _RowLoopEngine
from speceq.errors import ConfigError


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
