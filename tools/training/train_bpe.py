"""Train the BPE world reproducibly: tokenizer, target, distilled draft, then measure them.

``python -m tools.training.train_bpe`` trains the 32 000-token byte-level BPE tokenizer on the
training files of :mod:`speceq.models.bpe`, the target on next-token cross-entropy, distils
the draft from it (per-token KL(p_target || q_draft)) with the same optimiser as the byte
models (:mod:`tools.training.train`), and as a last step refits the ``<eos>`` row of each
(:func:`refit_eos_row`: short training leaves ``<eos>``, one per file, with a nearly
context-free logit although the hidden states encode where a file ends). It writes
``bpe-target/`` and ``bpe-draft/`` (fp16 safetensors with tied embeddings, config,
generation config, tokenizer files) and ``bpe-metrics.json``, and prints the metrics table.
Fixed seeds and one thread make a rerun on the same machine reproduce the same weights.
``--measure-only`` recomputes the metrics; ``--eos-refit-only`` applies the last step to the
saved folders.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from speceq.errors import ConfigError
from speceq.models import load_model
from speceq.models.bpe import (
    BPE_BOS_ID,
    BPE_DRAFT_DIR,
    BPE_EOS_ID,
    BPE_METRICS_PATH,
    BPE_PAD_ID,
    BPE_TARGET_DIR,
    load_bpe_tokenizer,
)
from tools.training.bpe_corpus import (
    bpe_draft_config,
    bpe_target_config,
    encode_corpus,
    split_files,
    train_tokenizer,
    write_tokenizer_files,
)
from tools.training.train import TrainSettings, _versions, distil_draft, train_target

if TYPE_CHECKING:
    import tokenizers
    import torch
    import transformers

#: BPE training defaults: shorter windows (a token is ~3.5 bytes), fewer steps (V = 32k costs).
BPE_SETTINGS = TrainSettings(
    seed=0, target_steps=200, draft_steps=60, batch=8, seq_len=96, target_lr=5e-3, draft_lr=6e-3, warmup_steps=15
)
#: Evaluation slice: 32 windows of 128 tokens (32 x 128 x 32 000 float32 logits = 0.5 GB).
BPE_EVAL_WINDOWS = 32


#: The ``<eos>`` refit (:func:`refit_eos_row`): tokens of context before each training file's
#: ``<eos>`` (the training windows' 95), and random training windows standing for the rest of the stream.
EOS_REFIT_CONTEXT = 95
EOS_REFIT_WINDOWS = 200
#: The refit's random windows use seed ``settings.seed + 3`` (the target uses + 0, the drafts + 1 and + 2).
EOS_REFIT_SEED_OFFSET = 3
#: Ridge penalties tried by the refit's cross-validation (half-decades).
EOS_REFIT_RIDGES = (1e-11, 3e-11, 1e-10, 3e-10, 1e-9, 3e-9, 1e-8, 3e-8, 1e-7)


@dataclass(frozen=True, slots=True)
class EosFitData:
    """The positions the ``<eos>`` row is fitted on: prefixes of the training stream, with weights.

    ``ids[i]`` is a ``<bos>``-prefixed window; position j of it predicts ``labels[i, j]``;
    ``weights[i, j]`` is that prediction's weight (0: not used).
    """

    ids: torch.Tensor  # [n, context + 1] int64
    labels: torch.Tensor  # [n, context + 1] int64
    weights: torch.Tensor  # [n, context + 1] float64
    file_ends: int
    random_windows: int


def _file_ends(stream: torch.Tensor, context: int, eos_id: int) -> list[int]:
    """Indices of the stream's ``<eos>`` tokens that have at least ``context`` tokens before them."""
    return [e for e in (stream == eos_id).nonzero()[:, 0].tolist() if e >= context]


def eos_fit_data(stream: torch.Tensor, *, seed: int = 0, context: int = EOS_REFIT_CONTEXT,
                 random_windows: int = EOS_REFIT_WINDOWS, bos_id: int = BPE_BOS_ID,
                 eos_id: int = BPE_EOS_ID) -> EosFitData:
    """Where files end and ``random_windows`` random windows (seeded), weighted as the whole stream.

    A file-end window is ``<bos>`` + the ``context`` tokens before an ``<eos>``; only its last
    position (the ``<eos>`` event) counts, with weight 1: every file end of the stream is there.
    A random window's positions count where the next token is not ``<eos>`` (those are file ends,
    already counted), each weighted (stream tokens - file ends) / (such positions), so together
    they stand for every other position of the stream.
    """
    import torch

    n = stream.numel()
    ends = _file_ends(stream, context, eos_id)
    if not ends:
        raise ConfigError(f"no <eos> after >= {context} tokens in the training stream")
    generator = torch.Generator().manual_seed(seed)
    starts = torch.randint(0, n - context - 1, (random_windows,), generator=generator).tolist()
    bodies = [stream[e - context:e + 1] for e in ends] + [stream[a:a + context + 1] for a in starts]
    bos = torch.full((len(bodies), 1), bos_id, dtype=torch.int64)
    ids = torch.cat([bos, torch.stack([b[:-1] for b in bodies])], 1)
    labels = torch.stack(bodies)
    weights = torch.zeros(labels.shape, dtype=torch.float64)
    weights[:len(ends), -1] = 1.0
    other = labels[len(ends):] != eos_id
    weights[len(ends):] = torch.where(other, (n - len(ends)) / int(other.sum()), 0.0)
    return EosFitData(ids, labels, weights, len(ends), random_windows)


def _eos_split(model: transformers.PreTrainedModel, ids: torch.Tensor, eos_id: int, batch: int = 4
               ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(final hidden states [n, s, h] float64, logsumexp of the logits without ``<eos>`` [n, s], P(<eos>) [n, s])."""
    import torch

    W = model.get_output_embeddings().weight
    hs, zs, ps = [], [], []
    with torch.inference_mode():
        for i in range(0, ids.shape[0], batch):  # 4 windows of 96: ~100 MB of float64 logits
            hidden = model.model(input_ids=ids[i:i + batch]).last_hidden_state
            logits = (hidden @ W.T).double()
            ps.append(torch.softmax(logits, -1)[..., eos_id])
            logits[..., eos_id] = float("-inf")
            zs.append(torch.logsumexp(logits, -1))
            hs.append(hidden.double())
    return torch.cat(hs), torch.cat(zs), torch.cat(ps)


def _fit_row(H: torch.Tensor, Z: torch.Tensor, Y: torch.Tensor, w: torch.Tensor, start: torch.Tensor,
             ridge: float) -> torch.Tensor:
    """argmin_e  -sum w [Y log P + (1 - Y) log(1 - P)] / sum w + ridge |e|^2,  P = sigmoid(H e - Z) (L-BFGS, float64)."""
    import torch

    e = start.clone().requires_grad_(True)
    opt = torch.optim.LBFGS([e], max_iter=300, line_search_fn="strong_wolfe", tolerance_grad=1e-12,
                            tolerance_change=1e-15)

    def loss() -> torch.Tensor:
        opt.zero_grad()
        value = _nll_sum(H, Z, Y, w, e) / w.sum() + ridge * (e * e).sum()
        value.backward()
        return value

    for _ in range(5):
        opt.step(loss)
    return e.detach()


def _nll_sum(H: torch.Tensor, Z: torch.Tensor, Y: torch.Tensor, w: torch.Tensor, e: torch.Tensor) -> torch.Tensor:
    """-sum w [Y log P + (1 - Y) log(1 - P)] with P = sigmoid(H e - Z), as a tensor (differentiable in e)."""
    import torch

    le = H @ e
    return -(w * (Y * le + (1 - Y) * Z - torch.logaddexp(le, Z))).sum()


def _nll(H: torch.Tensor, Z: torch.Tensor, Y: torch.Tensor, w: torch.Tensor, e: torch.Tensor) -> float:
    return float(_nll_sum(H, Z, Y, w, e))


def refit_eos_row(model: transformers.PreTrainedModel, data: EosFitData, *,
                  teacher: transformers.PreTrainedModel | None = None, eos_id: int = BPE_EOS_ID,
                  ridges: Sequence[float] = EOS_REFIT_RIDGES, folds: int = 5) -> dict[str, Any]:
    """Refit the ``<eos>`` row of ``model``'s output embedding by penalised maximum likelihood, the rest frozen.

    With the final hidden states h and the other tokens' logits fixed, P(<eos> | h) =
    sigmoid(h . e - Z(h)), Z the log-sum-exp of the other logits, so the row e is a weighted
    logistic regression: L-BFGS (float64, from the current row) minimises the weighted mean
    of -[y log P + (1 - y) log(1 - P)] over ``data`` plus ridge |e|^2. y is 1 where the stream
    has ``<eos>`` (the target); with ``teacher`` it is the teacher's P(<eos>) at the same
    prefix (the draft, distilled from the target: KL(p_teacher || q) with only e free). The
    unpenalised fit diverges (the file ends are nearly separable: |e| grows without bound and
    P(<eos>) reaches 1 at positions that are not file ends), so the ridge is the one of
    ``ridges`` with the smallest ``folds``-fold cross-validated likelihood (windows split by
    index). The embeddings of the BPE models are tied, so the row is also ``<eos>``'s input
    embedding. Deterministic (``data`` is seeded; no other randomness). Changes ``model`` in
    place; returns the fit's record (P(<eos>) before and after at the file ends, elsewhere).
    """
    import torch

    started = time.perf_counter()
    H, Z, p_before = _eos_split(model, data.ids, eos_id)
    if teacher is None:
        Y = (data.labels == eos_id).double()
    else:
        Y = _eos_split(teacher, data.ids, eos_id)[2]
    W = model.get_output_embeddings().weight
    start = W[eos_id].detach().double().clone()
    fold = (torch.arange(data.ids.shape[0]) % folds)[:, None].expand_as(data.weights)
    use = data.weights > 0
    cv: dict[str, float] = {}
    for ridge in ridges:
        held = 0.0
        for k in range(folds):
            fit, test = use & (fold != k), use & (fold == k)
            e = _fit_row(H[fit], Z[fit], Y[fit], data.weights[fit], start, ridge)
            held += _nll(H[test], Z[test], Y[test], data.weights[test], e)
        cv[f"{ridge:g}"] = round(held / float(data.weights[use].sum()), 8)
    best = min(ridges, key=lambda r: cv[f"{r:g}"])
    e = _fit_row(H[use], Z[use], Y[use], data.weights[use], start, best)
    at_end = torch.zeros(data.weights.shape, dtype=torch.bool)
    at_end[:data.file_ends, -1] = True
    with torch.no_grad():
        p_after = torch.sigmoid(H @ e - Z)
        W[eos_id] = e.to(W.dtype)  # tied: the input embedding's row too
    other = use & ~at_end
    summary = lambda p: {"median": round(float(p.median()), 6), "max": round(float(p.max()), 6)}  # noqa: E731
    return {
        "labels": "the stream's <eos>" if teacher is None else "the teacher's P(<eos>) (distillation)",
        "file_ends": data.file_ends, "random_windows": data.random_windows, "context": data.ids.shape[1] - 1,
        "cv_nll_by_ridge": cv, "ridge": best,
        "nll": {"before": round(_nll(H[use], Z[use], Y[use], data.weights[use], start)
                                / float(data.weights[use].sum()), 8),
                "after": round(_nll(H[use], Z[use], Y[use], data.weights[use], e) / float(data.weights[use].sum()), 8)},
        "p_eos_at_training_file_ends": {"before": summary(p_before[at_end]), "after": summary(p_after[at_end])},
        "p_eos_elsewhere": {"before": {"mean": round(float(p_before[other].mean()), 8), **summary(p_before[other])},
                            "after": {"mean": round(float(p_after[other].mean()), 8), **summary(p_after[other])}},
        "row_norm": {"before": round(float(start.norm()), 4), "after": round(float(e.norm()), 4),
                     "median_other_rows": round(float(W.detach().norm(dim=1).median()), 4)},
        "seconds": round(time.perf_counter() - started, 1),
    }

def save_bpe_model(model: transformers.PreTrainedModel, tok: tokenizers.Tokenizer, folder: Path) -> None:
    """Write the folder: fp16 safetensors (tied embeddings stored once), configs, tokenizer."""
    import torch
    from transformers import GenerationConfig

    folder.mkdir(parents=True, exist_ok=True)
    model.generation_config = GenerationConfig(bos_token_id=BPE_BOS_ID, eos_token_id=BPE_EOS_ID, pad_token_id=BPE_PAD_ID)
    model.to(torch.float16).save_pretrained(folder)
    model.to(torch.float32)
    write_tokenizer_files(tok, folder)
    if not (folder / "model.safetensors").is_file():
        raise ConfigError("save_pretrained did not write model.safetensors", where=str(folder))


def measure_bpe(target_dir: Path, draft_dir: Path, seed: int) -> dict[str, Any]:
    """Load both saved folders and measure them (and the target's random initialisation)."""
    import torch
    from transformers import LlamaForCausalLM

    from tools.training.metrics import measure

    tok = load_bpe_tokenizer(target_dir)
    corpus = encode_corpus(tok)
    torch.manual_seed(seed)
    random_init = LlamaForCausalLM(bpe_target_config()).eval()
    target, draft = load_model(target_dir), load_model(draft_dir)
    result = measure(target, draft, corpus.heldout, random_init=random_init, n_windows=BPE_EVAL_WINDOWS,
                     bos_id=BPE_BOS_ID, eos_id=BPE_EOS_ID)
    heldout_bytes = sum(f.stat().st_size for f in split_files()[1])
    result["corpus"] = {"root": corpus.root, "train_files": corpus.n_train_files,
                        "heldout_files": corpus.n_heldout_files, "sha256": corpus.sha256,
                        "train_tokens": int(corpus.train.numel()), "heldout_tokens": int(corpus.heldout.numel()),
                        "heldout_bytes_per_token": round(heldout_bytes / corpus.heldout.numel(), 3)}
    result["params"] = {"target": sum(p.numel() for p in target.parameters()),
                        "draft": sum(p.numel() for p in draft.parameters())}
    result["vocab_size"] = tok.get_vocab_size()
    result["eos_mass"] = eos_mass(target, tok)
    result["eos_heldout"] = eos_heldout(target, draft, corpus.heldout)
    result["versions"] = _versions()
    return result


def _tail(xs: list[float]) -> float:
    return round(sum(xs[-20:]) / len(xs[-20:]), 4)


def _distil_saved(target_dir: Path, draft_dir: Path, tok: tokenizers.Tokenizer, corpus: Any,
                  settings: TrainSettings) -> dict[str, Any]:
    """Distil the draft from the SAVED (fp16-rounded) target, so --draft-only reproduces a full run."""
    started = time.perf_counter()
    target = load_model(target_dir)
    draft, losses = distil_draft(target, corpus.train, settings, config=bpe_draft_config(), bos_id=BPE_BOS_ID)
    seconds = time.perf_counter() - started
    save_bpe_model(draft, tok, draft_dir)
    return {"draft_method": "distilled from the saved target: per-token KL(p_target || q_draft)",
            "draft_seconds": round(seconds, 1), "draft_final_kl": _tail(losses)}


def _refit_saved(target_dir: Path, draft_dir: Path, tok: tokenizers.Tokenizer, corpus: Any, seed: int, *,
                 target_too: bool = True) -> dict[str, Any]:
    """Refit the ``<eos>`` row of the SAVED target on the stream, then the draft's on the saved target's P(<eos>)."""
    data = eos_fit_data(corpus.train, seed=seed + EOS_REFIT_SEED_OFFSET)
    record: dict[str, Any] = {"method": "the <eos> row (tied: output and input embedding) refit by maximum likelihood, "
                                        "the rest frozen (tools.training.train_bpe.refit_eos_row)",
                              "seed": seed + EOS_REFIT_SEED_OFFSET}
    if target_too:
        target = load_model(target_dir)
        record["target"] = refit_eos_row(target, data)
        save_bpe_model(target, tok, target_dir)
    teacher = load_model(target_dir)  # the saved (fp16-rounded) target
    draft = load_model(draft_dir)
    record["draft"] = refit_eos_row(draft, data, teacher=teacher)
    save_bpe_model(draft, tok, draft_dir)
    return record


def eos_heldout(target: transformers.PreTrainedModel, draft: transformers.PreTrainedModel, heldout: torch.Tensor,
                *, context: int = EOS_REFIT_CONTEXT) -> dict[str, Any]:
    """P(<eos>) of both models where each held-out file ends (``context`` tokens before) and elsewhere.

    Elsewhere: every position of the evaluation slice (:data:`BPE_EVAL_WINDOWS` windows of 128)
    whose next token is not ``<eos>``; also without the positions after an ``<eos>`` input (the
    refit row is ``<eos>``'s input embedding too), with the held-out loss of both subsets.
    """
    import torch

    from tools.training.data import fixed_windows
    from tools.training.metrics import EVAL_SEQ_LEN, next_token_logits

    ends = _file_ends(heldout, context, BPE_EOS_ID)
    at_ends = torch.cat([torch.full((len(ends), 1), BPE_BOS_ID), torch.stack([heldout[e - context:e] for e in ends])], 1)
    windows = fixed_windows(heldout, BPE_EVAL_WINDOWS, EVAL_SEQ_LEN, BPE_BOS_ID)
    after_eos = (windows == BPE_EOS_ID).cumsum(1)[:, :-1] > 0  # [n, seq - 1]: an <eos> among the inputs so far
    not_end = windows[:, 1:] != BPE_EOS_ID
    out: dict[str, Any] = {"heldout_file_ends": len(ends), "context": context,
                           "positions_after_an_eos_input": int(after_eos.sum())}
    for name, model in (("target", target), ("draft", draft)):
        p_end = _eos_split(model, at_ends, BPE_EOS_ID)[2][:, -1]
        logp = torch.log_softmax(next_token_logits(model, windows)[:, :-1].double(), -1)
        nll = -logp.gather(-1, windows[:, 1:, None]).squeeze(-1)
        p_eos = logp[..., BPE_EOS_ID].exp()
        clean = not_end & ~after_eos
        out[name] = {"p_eos_at_file_ends": [round(float(x), 6) for x in p_end],
                     "p_eos_elsewhere": {"mean": round(float(p_eos[not_end].mean()), 8),
                                         "max": round(float(p_eos[not_end].max()), 6), "positions": int(not_end.sum())},
                     "p_eos_elsewhere_before_any_eos_input": {"mean": round(float(p_eos[clean].mean()), 8),
                                                              "max": round(float(p_eos[clean].max()), 6),
                                                              "positions": int(clean.sum())},
                     "heldout_loss_before_any_eos_input": round(float(nll[~after_eos].mean()), 6),
                     "heldout_loss_after_an_eos_input": round(float(nll[after_eos].mean()), 6)}
    return out


def eos_mass(target: transformers.PreTrainedModel, tok: tokenizers.Tokenizer) -> dict[str, float]:
    """The target's probability of ``<eos>`` as the first generated token (T = 1) after each world prompt."""
    import torch

    from speceq.models.bpe import BPE_EOS_PROMPTS, BPE_PROMPTS

    out = {}
    with torch.no_grad():
        for prompt in (*BPE_PROMPTS, *BPE_EOS_PROMPTS):
            logits = target(input_ids=torch.tensor([tok.encode(prompt).ids])).logits[0, -1]
            out[prompt] = float(f"{float(torch.softmax(logits.double(), -1)[BPE_EOS_ID]):.5g}")
    return out


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    d = BPE_SETTINGS
    ap = argparse.ArgumentParser(prog="python -m tools.training.train_bpe", description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=None,
                    help="folder to write bpe-target/, bpe-draft/, bpe-metrics.json into. Default: harness/models/")
    ap.add_argument("--steps", type=int, default=d.target_steps, help="target training steps. Default: %(default)r")
    ap.add_argument("--draft-steps", type=int, default=d.draft_steps, help="draft distillation steps. Default: %(default)r")
    ap.add_argument("--seed", type=int, default=d.seed, help="seed of weights and data order. Default: %(default)r")
    ap.add_argument("--threads", type=int, default=d.threads, help="torch CPU threads. Default: %(default)r")
    ap.add_argument("--measure-only", action="store_true", help="only recompute bpe-metrics.json")
    ap.add_argument("--draft-only", action="store_true",
                    help="only distil the draft from the saved bpe-target/, then refit its <eos> row "
                         "(keeps the recorded target training)")
    ap.add_argument("--eos-refit-only", action="store_true",
                    help="only refit the <eos> rows of the saved bpe-target/ and bpe-draft/ (the last step of a "
                         "full run), without retraining the rest; apply it once, to unrefitted folders")
    args = ap.parse_args(argv)
    if sum((args.measure_only, args.draft_only, args.eos_refit_only)) > 1:
        ap.error("--measure-only, --draft-only and --eos-refit-only exclude each other")
    for name in ("steps", "draft_steps", "threads"):
        if getattr(args, name) < 1:
            ap.error(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point; returns the exit status."""
    import dataclasses

    import torch

    args = _parse(argv)
    torch.set_num_threads(args.threads)
    out = args.out
    target_dir = BPE_TARGET_DIR if out is None else out / "bpe-target"
    draft_dir = BPE_DRAFT_DIR if out is None else out / "bpe-draft"
    metrics_path = BPE_METRICS_PATH if out is None else out / "bpe-metrics.json"
    settings = dataclasses.replace(BPE_SETTINGS, seed=args.seed, target_steps=args.steps,
                                   draft_steps=args.draft_steps, threads=args.threads)
    training: dict[str, Any] | None = None
    if args.measure_only or args.draft_only or args.eos_refit_only:
        if metrics_path.is_file():
            training = json.loads(metrics_path.read_text(encoding="utf-8")).get("training")
    if args.draft_only or args.eos_refit_only:
        tok = load_bpe_tokenizer(target_dir)
        corpus = encode_corpus(tok)
        training = dict(training or {})
        seed = training.get("settings", {}).get("seed", settings.seed)
        if args.draft_only:
            training["settings"] = {**training.get("settings", asdict(settings)), "draft_steps": settings.draft_steps}
            training.update(_distil_saved(target_dir, draft_dir, tok, corpus, settings))
            refit = _refit_saved(target_dir, draft_dir, tok, corpus, seed, target_too=False)
            training["eos_refit"] = {**training.get("eos_refit", {}), "draft": refit["draft"]}
        else:
            training["eos_refit"] = _refit_saved(target_dir, draft_dir, tok, corpus, seed)
    elif not args.measure_only:
        started = time.perf_counter()
        tok = train_tokenizer(split_files()[0])
        tokenizer_s = time.perf_counter() - started
        print(f"  tokenizer: {tok.get_vocab_size()} tokens in {tokenizer_s:.1f} s", file=sys.stderr)
        corpus = encode_corpus(tok)
        started = time.perf_counter()
        target, target_losses = train_target(corpus.train, settings, config=bpe_target_config(), bos_id=BPE_BOS_ID)
        target_s = time.perf_counter() - started
        save_bpe_model(target, tok, target_dir)
        training = {
            "settings": asdict(settings),
            "weights_dtype": "float16 (loaded as float32)",
            "tokenizer_seconds": round(tokenizer_s, 1),
            "target_seconds": round(target_s, 1),
            "target_final_loss": _tail(target_losses),
        }
        training.update(_distil_saved(target_dir, draft_dir, tok, corpus, settings))
        training["eos_refit"] = _refit_saved(target_dir, draft_dir, tok, corpus, settings.seed)
    seed = training["settings"]["seed"] if training else args.seed
    metrics = measure_bpe(target_dir, draft_dir, seed)
    from tools.training.metrics import format_table

    metrics_path.parent.mkdir(parents=True, exist_ok=True)
    metrics_path.write_text(json.dumps({"training": training, **metrics}, indent=2) + "\n", encoding="utf-8")
    print(format_table(metrics))
    if training:
        print(f"training: tokenizer {training.get('tokenizer_seconds')} s, target {training.get('target_seconds')} s, "
              f"draft {training.get('draft_seconds')} s ({settings.threads} thread(s)); wrote {metrics_path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
