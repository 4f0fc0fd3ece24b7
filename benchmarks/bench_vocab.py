"""How speceq scales with the vocabulary: oracle scoring, analysis and the store at V = 259, 32k, 128k.

Three measurements (numbers and goals in docs/explanation/bpe-world.md):

- ``oracle``: :meth:`speceq.oracles.hf.TargetOracle.score` of generated tokens by a random-initialised
  Llama (hidden 64, 2 layers, built at run time; nothing this size is committed) at each V:
  tokens scored per second and the peak RSS increase over the loaded model, for two numbers
  of rows. Goal: memory grows with batch x V (the oracle's logits budget), never with rows x V.
  Each point runs in its own process so that ``ru_maxrss`` is that point's peak.
- ``analysis``: :func:`speceq.pipeline.analysis.analyse_run` (black-box: no oracle) of 10^6 generated
  tokens per engine (250 000 samples x 4 tokens, two prompts at batch 32) drawn from a Zipf(1.1)
  law over the whole vocabulary, ids shuffled, so most of V is seen once or never. Goal: <= 30 s
  at V = 128k on this machine.
- ``store``: bytes per sample of the sample store (``speceq.pipeline.runner.run`` with a numpy engine,
  20 000 samples x 4 tokens per engine) at each V. Goal: independent of V.
- ``exact``: :func:`speceq.power.exact.exact_laws` (exact laws of the first two generated
  tokens by enumeration) of a mutant on the bundled BPE pair (V = 32 000), with a bpe case's
  prompt: seconds and peak RSS increase over the loaded models (its own process).

    python benchmarks/bench_vocab.py all          # everything (~10-20 min on 2 busy cores)
    python benchmarks/bench_vocab.py oracle --vocab 131072 --rows 256
    python benchmarks/bench_vocab.py exact --case bpe-import-b4-ragged --mutant resample-from-target
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

VOCABS = (259, 32_000, 131_072)


def _rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize() / 2**20


def _peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # Linux: kB


def _zipf_sampler(vocab: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(token ids, probabilities) of a Zipf(1.1) law over ``vocab`` ids in a shuffled order; EOS excluded."""
    rng = np.random.default_rng(seed)
    p = 1.0 / np.arange(1, vocab) ** 1.1
    ids = rng.permutation(vocab - 1)  # id vocab-1 plays EOS, never drawn (ignore_eos cases)
    return ids, p / p.sum()


# ----- oracle ---------------------------------------------------------------------------------------
def oracle_point(vocab: int, rows: int, tokens: int = 4, prompt_len: int = 4) -> dict:
    """One oracle measurement in this process: throughput and peak RSS over the loaded model."""
    import torch

    from speceq.core.params import SamplingParams
    from speceq.engines.base import SampleBatch
    from speceq.models.hf_utils import tiny_random_llama
    from speceq.oracles.hf import TargetOracle

    torch.set_num_threads(1)
    model = tiny_random_llama(0, hidden_size=64, layers=2, heads=4, vocab_size=vocab, eos_token_id=vocab - 1,
                              pad_token_id=vocab - 2)
    model.config.bos_token_id = 0
    oracle = TargetOracle(model)
    rng = np.random.default_rng(1)
    prompts = [list(rng.integers(0, vocab - 1, prompt_len)) for _ in range(2)]
    batch = SampleBatch(tokens=rng.integers(0, vocab - 1, (rows, tokens)).astype(np.int64),
                        lengths=np.full(rows, tokens, dtype=np.int64),
                        prompt_index=np.tile(np.arange(2), rows // 2).astype(np.int64))
    params = SamplingParams(temperature=1.0, max_new_tokens=tokens)
    oracle.score(prompts, SampleBatch(tokens=batch.tokens[:2], lengths=batch.lengths[:2],
                                      prompt_index=batch.prompt_index[:2]), params)  # warm-up
    before = _rss_mb()
    t0 = time.perf_counter()
    scores = oracle.score(prompts, batch, params)
    seconds = time.perf_counter() - t0
    assert len(scores.token) == rows * tokens
    return {"vocab": vocab, "rows": rows, "tokens": rows * tokens, "seconds": round(seconds, 2),
            "tokens_per_s": round(rows * tokens / seconds, 1), "rss_before_mb": round(before, 1),
            "peak_increase_mb": round(_peak_mb() - before, 1)}


def _in_subprocess(kind: str, **kw: int | str) -> dict:
    args = [sys.executable, __file__, kind, "--json", *[f"--{k.replace('_', '-')}={v}" for k, v in kw.items()]]
    out = subprocess.run(args, check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


# ----- exact laws -----------------------------------------------------------------------------------
def exact_point(case_id: str, mutant: str) -> dict:
    """``exact_laws`` of ``mutant`` on the BPE pair for the bpe case ``case_id``, in this process."""
    import torch

    from speceq.engines.mutants import make_mutant
    from speceq.inputs.cases import bpe_cases
    from speceq.models.bpe import load_bpe_draft, load_bpe_target
    from speceq.power.exact import exact_laws

    torch.set_num_threads(1)
    case = next(c for c in bpe_cases() if c.case_id == case_id)
    engine = make_mutant(mutant, target=load_bpe_target(), draft=load_bpe_draft())
    before = _rss_mb()
    t0 = time.perf_counter()
    laws = exact_laws(engine, case)
    seconds = time.perf_counter() - t0
    return {"vocab": engine.vocab_size, "case": case_id, "mutant": mutant, "prompt_tokens": len(case.prompt_ids),
            "seconds": round(seconds, 1), "rss_before_mb": round(before, 1),
            "peak_increase_mb": round(_peak_mb() - before, 1), "tv": [round(t, 4) for t in laws.tv],
            "accept_rate": None if laws.accept_rate is None else round(laws.accept_rate, 4),
            "joint_kept": laws.joint_engine is not None}


# ----- analysis -------------------------------------------------------------------------------------
def analysis_point(vocab: int, tokens_per_engine: int = 1_000_000, tokens: int = 4) -> dict:
    """analyse_run (black-box) of ``tokens_per_engine`` generated tokens per engine at ``vocab``."""
    from speceq.core.params import SamplingParams
    from speceq.engines.base import SampleBatch
    from speceq.inputs.cases import Case
    from speceq.pipeline.analysis import analyse_run

    rows = tokens_per_engine // tokens
    rows -= rows % 2
    ids, p = _zipf_sampler(vocab, 0)

    def batch(seed: int) -> SampleBatch:
        rng = np.random.default_rng(seed)
        toks = ids[rng.choice(len(p), size=(rows, tokens), p=p)].astype(np.int64)
        return SampleBatch(tokens=toks, lengths=np.full(rows, tokens, dtype=np.int64),
                           prompt_index=np.tile(np.arange(2), rows // 2).astype(np.int64))

    case = Case(case_id=f"zipf-{vocab}", prompt_ids=(1, 2, 3), companions=((4, 5),), batch_size=32,
                params=SamplingParams(max_new_tokens=tokens, ignore_eos=True))
    base, cand = batch(1), batch(2)
    before = _rss_mb()
    t0 = time.perf_counter()
    result = analyse_run([case], {case.case_id: base}, {case.case_id: cand}, oracle=None, alpha=1e-3,
                         tolerance=0.15, seed=0, engines={"baseline": {}, "candidate": {}}, provenance={})
    seconds = time.perf_counter() - t0
    seen = len(np.unique(base.tokens))
    return {"vocab": vocab, "tokens_per_engine": rows * tokens, "distinct_tokens_seen": seen,
            "seconds": round(seconds, 2), "verdict": result.cases[0].verdict,
            "peak_increase_mb": round(_peak_mb() - before, 1)}


# ----- store ----------------------------------------------------------------------------------------
class ZipfEngine:
    """I.i.d. Zipf(1.1) tokens over ``vocab`` ids (ignore_eos cases): a model-free engine for the store."""

    def __init__(self, vocab: int) -> None:
        self.name = f"zipf-{vocab}"
        self.vocab_size = vocab
        self.eos_token_id = vocab - 1
        self._ids, self._p = _zipf_sampler(vocab, 0)

    def describe(self) -> dict:
        return {"engine": self.name}

    def sample(self, request):  # noqa: ANN001, ANN201 (engine protocol)
        from speceq.engines.base import SampleBatch

        rng = np.random.default_rng(request.seed)
        rows = request.n * len(request.prompts)
        toks = self._ids[rng.choice(len(self._p), size=(rows, request.params.max_new_tokens), p=self._p)]
        return SampleBatch(tokens=toks.astype(np.int64), lengths=np.full(rows, request.params.max_new_tokens),
                           prompt_index=request.rows(), wall_time_s=0.0)


def store_point(vocab: int, samples: int = 20_000, tokens: int = 4) -> dict:
    """Bytes per sample of the store after a black-box run of ``samples`` samples per engine."""
    from speceq.core.params import SamplingParams
    from speceq.inputs.cases import Case
    from speceq.pipeline.config import RunConfig
    from speceq.pipeline.runner import run

    out = Path(tempfile.mkdtemp(prefix="speceq-vocab-"))
    try:
        case = Case(case_id="store", prompt_ids=(1, 2), params=SamplingParams(max_new_tokens=tokens, ignore_eos=True))
        config = RunConfig(samples=samples, chunk_size=samples // 4, out_dir=out, oracle=False, progress=False)
        run(config, [case], engines={"baseline": ZipfEngine(vocab), "candidate": ZipfEngine(vocab)})
        size = sum(f.stat().st_size for f in out.rglob("slice-*.npz"))  # the chunk files (meta included)
        return {"vocab": vocab, "samples_stored": 2 * samples, "bytes": size,
                "bytes_per_sample": round(size / (2 * samples), 2)}
    finally:
        shutil.rmtree(out, ignore_errors=True)


# ----- command line ---------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("kind", choices=("oracle", "analysis", "store", "exact", "all"))
    ap.add_argument("--vocab", type=int, default=None, help="one vocabulary size (default: 259, 32000, 131072)")
    ap.add_argument("--rows", type=int, default=128, help="oracle: rows scored (4 tokens each)")
    ap.add_argument("--tokens-per-engine", type=int, default=1_000_000, help="analysis: generated tokens per engine")
    ap.add_argument("--case", default="bpe-import-b4-ragged", help="exact: the bpe case")
    ap.add_argument("--mutant", default="resample-from-target", help="exact: the gallery mutant")
    ap.add_argument("--json", action="store_true", help="print one JSON line per point")
    args = ap.parse_args(argv)
    vocabs = (args.vocab,) if args.vocab else VOCABS
    points: list[dict] = []
    if args.kind == "oracle" and args.vocab:
        points.append(oracle_point(args.vocab, args.rows))
    elif args.kind in ("oracle", "all"):
        for v in vocabs:
            for rows in (128, 512):
                points.append({"kind": "oracle", **_in_subprocess("oracle", vocab=v, rows=rows)})
                print(json.dumps(points[-1]), flush=True)
    if args.kind in ("analysis", "all"):
        for v in (args.vocab,) if args.vocab else (32_000, 131_072):
            points.append({"kind": "analysis", **analysis_point(v, args.tokens_per_engine)})
            print(json.dumps(points[-1]), flush=True)
    if args.kind == "exact" and args.json:
        print(json.dumps(exact_point(args.case, args.mutant)))
        return 0
    if args.kind in ("exact", "all"):
        points.append({"kind": "exact", **_in_subprocess("exact", case=args.case, mutant=args.mutant)})
        print(json.dumps(points[-1]), flush=True)
    if args.kind in ("store", "all"):
        for v in vocabs:
            points.append({"kind": "store", **store_point(v)})
            print(json.dumps(points[-1]), flush=True)
    if args.json and args.kind == "oracle" and args.vocab:
        print(json.dumps(points[-1]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
