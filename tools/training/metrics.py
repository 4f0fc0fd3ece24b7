"""Quality measurements of the bundled models on held-out text.

Every number is measured on a deterministic slice of the held-out corpus (evenly spaced
``<bos>``-prefixed windows), over every next-token position of every window:

- ``heldout_loss``: mean cross-entropy of the true next token (nats/token);
- ``entropy``: mean entropy of the next-token distribution (nats); uniform over 259 is 5.56;
- ``top1_prob``: mean probability of the most likely token;
- ``acceptance``: mean over prefixes of sum_x min(p(x), q(x)) = 1 - TV(p, q), the expected
  per-token acceptance rate of speculative sampling, with target p and draft q both
  processed by :func:`speceq.core.processing.process_logits` at the given temperature.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from speceq.models.tokenizer import EOS_ID

if TYPE_CHECKING:
    import torch
    import transformers

EVAL_WINDOWS = 64
EVAL_SEQ_LEN = 128
ACCEPTANCE_TEMPERATURES = (1.0, 0.7)


@dataclass(frozen=True, slots=True)
class ModelMetrics:
    """Next-token quality of one model on the evaluation slice."""

    heldout_loss: float  # nats/token
    entropy: float  # nats
    top1_prob: float
    n_tokens: int


def next_token_logits(
    model: transformers.PreTrainedModel,
    windows: torch.Tensor,  # [n, seq] int64
    batch: int = 16,
) -> torch.Tensor:  # [n, seq, vocab] float32
    """Teacher-forced logits of ``model`` on ``windows``, computed ``batch`` rows at a time."""
    import torch

    chunks = []
    with torch.no_grad():
        for i in range(0, windows.shape[0], batch):
            chunks.append(model(input_ids=windows[i : i + batch]).logits.float())
    return torch.cat(chunks, dim=0)


def model_metrics(
    logits: torch.Tensor,  # [n, seq, vocab]
    windows: torch.Tensor,  # [n, seq]
) -> ModelMetrics:
    """Held-out loss, entropy and top-1 probability from teacher-forced logits."""
    import torch

    logp = torch.log_softmax(logits[:, :-1].double(), dim=-1)  # predicts windows[:, 1:]
    targets = windows[:, 1:]
    nll = -logp.gather(-1, targets[..., None]).squeeze(-1)
    probs = logp.exp()
    entropy = -(probs * logp).sum(-1)
    top1 = probs.max(-1).values
    return ModelMetrics(
        heldout_loss=float(nll.mean()),
        entropy=float(entropy.mean()),
        top1_prob=float(top1.mean()),
        n_tokens=int(targets.numel()),
    )


def acceptance_rate(
    target_logits: torch.Tensor,  # [..., vocab]
    draft_logits: torch.Tensor,  # [..., vocab]
    temperature: float,
    eos_token_id: int = EOS_ID,
) -> float:
    """Mean of sum_x min(p, q) over prefixes, p and q processed at ``temperature``."""
    import torch

    from speceq.core.params import SamplingParams
    from speceq.core.processing import process_logits

    params = SamplingParams(temperature=temperature)
    target_probs = process_logits(target_logits, params, eos_token_id=eos_token_id)
    draft_probs = process_logits(draft_logits, params, eos_token_id=eos_token_id)
    return float(torch.minimum(target_probs, draft_probs).sum(-1).double().mean())


def measure(
    target: transformers.PreTrainedModel,
    draft: transformers.PreTrainedModel,
    heldout: torch.Tensor,  # [n] int64 token stream
    *,
    random_init: transformers.PreTrainedModel | None = None,
    n_windows: int = EVAL_WINDOWS,
    seq_len: int = EVAL_SEQ_LEN,
    bos_id: int | None = None,
    eos_id: int = EOS_ID,
) -> dict[str, Any]:
    """All metrics as a JSON-able dict: per model, and acceptance per temperature.

    ``bos_id``/``eos_id`` default to the byte vocabulary's; the BPE world passes its own.
    """
    from speceq.models.tokenizer import BOS_ID
    from tools.training.data import fixed_windows

    windows = fixed_windows(heldout, n_windows, seq_len, BOS_ID if bos_id is None else bos_id)
    target_logits = next_token_logits(target, windows)
    draft_logits = next_token_logits(draft, windows)
    models = {"target": asdict(model_metrics(target_logits, windows)), "draft": asdict(model_metrics(draft_logits, windows))}
    if random_init is not None:
        models["random_init_target"] = asdict(model_metrics(next_token_logits(random_init, windows), windows))
    # the last position predicts past the window end: every position still is a valid prefix
    acceptance = {f"T={t:g}": acceptance_rate(target_logits, draft_logits, t, eos_id) for t in ACCEPTANCE_TEMPERATURES}
    greedy_agreement = float((target_logits.argmax(-1) == draft_logits.argmax(-1)).double().mean())
    return {
        "eval": {"windows": n_windows, "seq_len": seq_len, "prefixes": int(windows.numel())},
        "models": models,
        "acceptance": acceptance,
        "greedy_agreement": greedy_agreement,
    }


def format_table(metrics: dict[str, Any]) -> str:
    """A plain-text table of :func:`measure`'s result, one model per row."""
    models, acceptance = metrics["models"], metrics["acceptance"]
    lines = [f"{'model':<20} {'held-out loss':>14} {'entropy':>8} {'top-1 p':>8}", "-" * 53]
    for name, m in models.items():
        lines.append(f"{name:<20} {m['heldout_loss']:>14.3f} {m['entropy']:>8.3f} {m['top1_prob']:>8.3f}")
    lines.append("(loss and entropy in nats/token)")
    accept = "  ".join(f"{k}: {v:.3f}" for k, v in acceptance.items())
    lines.append(f"draft/target acceptance sum_x min(p, q): {accept}; greedy agreement {metrics['greedy_agreement']:.3f}")
    return "\n".join(lines)
