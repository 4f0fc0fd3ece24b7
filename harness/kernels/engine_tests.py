"""The engines' own distribution tests, re-implemented against speceq's kernel contract (for comparison).

Each function runs one engine's test on any chain kernel (any layout: the requests go through
:func:`speceq.kernels.kernel_calls.collect`) and returns whether that test would flag the kernel.
They are re-implementations from the engines' public test code, with the same sizes and pass
criteria; where the engine's test does not draw the drafts from the draft law (FlashInfer's
chain test draws them with ``randint``, so it checks shapes only) the frequency criterion is
applied to drafts that are drawn fairly, which is the most these criteria can do.

- :func:`vllm_l2_ratio`: vLLM ``test_rejection_sampling_approximates_target_distribution``:
  vocab 10, k = 2, one draft row ``softmax(rand(10))`` and one target row ``softmax(rand(10))``
  for every position, T = 1, the bonus column dropped, the other emitted tokens pooled; sample
  sizes 10 .. 100 000; passes when the L2 distance to the target shrinks over 20 times more
  (first / last) than the distance to 100 random reference laws.
- :func:`flashinfer_cosine`: the frequency criterion of FlashInfer's sampling tests:
  cosine(empirical law, target law) > 0.99, here of the first emitted token, vocab 111, k = 3,
  ``rand`` rows normalised (FlashInfer uses 5e6 draws; the cosine converges to
  cos(law of the kernel, p), so the limit is reported too).
- :func:`trtllm_kl`: TensorRT-LLM's criterion: |KL(p || empirical of the kernel) -
  KL(p || empirical of plain sampling)| < 0.01 at 50 000 draws, one draft token, no bonus
  (vocab 100 here; the limit KL(p || law of the kernel) is reported too).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import torch

from speceq.kernels.contract import Kernel
from speceq.kernels.kernel_calls import collect
from speceq.kernels.scenarios import Scenario, template_from_arrays

VLLM_SAMPLE_SIZES = (10, 100, 1_000, 10_000, 100_000)


@dataclass(frozen=True, slots=True)
class EngineTestResult:
    """One engine test on one kernel: detected = the engine's test fails; statistic and its threshold."""

    test: str
    detected: bool
    statistic: float
    threshold: float
    draws: int
    limit: float | None = None  # the statistic with infinitely many draws (estimated from the draws made)

    def summary(self) -> str:
        lim = f", limit {self.limit:.4g}" if self.limit is not None else ""
        return (f"{self.test}: {'detects' if self.detected else 'passes'} (statistic {self.statistic:.4g} vs "
                f"{self.threshold:g}{lim}; {self.draws} draws)")


def _softmax_rand(rng: torch.Generator, v: int) -> np.ndarray:
    return torch.softmax(torch.rand(v, generator=rng, dtype=torch.float32), dim=-1).numpy()


def _run(kern: Kernel, logits: np.ndarray, draft: np.ndarray, replicates: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Emitted tokens ``[n, k + 1]`` (-1 padded) and lengths of ``replicates`` requests of one template."""
    tpl = template_from_arrays("engine-test", logits, draft)
    scn = Scenario(name=f"engine-test-v{logits.shape[1]}", vocab_size=logits.shape[1], templates=(tpl,),
                   replicates=replicates)
    # the engines' tests give every request the same k drafts: no -1 padding in a padded layout
    uniform_k = Kernel(kern.fn, replace(kern.spec, max_draft=max(1, tpl.n_draft), padding=False))
    rec = collect(uniform_k, [scn], seed=seed)[0]
    _, tokens, lengths = rec.records[0].arrays()
    return tokens, lengths


def vllm_l2_ratio(kern: Kernel, seed: int = 0, multiplier: float = 20.0) -> EngineTestResult:
    """vLLM's L2 convergence-ratio test (see the module docstring)."""
    g = torch.Generator().manual_seed(seed)
    v, k = 10, 2
    draft = _softmax_rand(g, v)
    target_logits = torch.rand(v, generator=g, dtype=torch.float32).numpy()
    target = torch.softmax(torch.from_numpy(target_logits), dim=-1).numpy().astype(np.float64)
    reference = torch.softmax(torch.rand(100, v, generator=g, dtype=torch.float32), dim=-1).numpy().astype(np.float64)
    to_target, to_reference = [], []
    for i, n in enumerate(VLLM_SAMPLE_SIZES):
        tokens, _ = _run(kern, np.tile(target_logits, (k + 1, 1)), np.tile(draft, (k, 1)), n, seed * 100 + i)
        pooled = tokens[:, :k].ravel()
        pooled = pooled[(pooled >= 0) & (pooled < v)]
        hist = np.bincount(pooled, minlength=v)[:v] / max(pooled.size, 1)
        to_target.append(float(np.linalg.norm(target - hist)))
        to_reference.append(float(np.linalg.norm(reference - hist[None, :])) / reference.shape[0])
    ratio_target = to_target[0] / max(to_target[-1], 1e-300)
    ratio_reference = to_reference[0] / max(to_reference[-1], 1e-300)
    statistic = ratio_target / (ratio_reference * multiplier)
    return EngineTestResult("vLLM L2 ratio", detected=not statistic > 1.0, statistic=statistic, threshold=1.0,
                            draws=int(sum(VLLM_SAMPLE_SIZES)))


def _first_token_law(kern: Kernel, v: int, k: int, draws: int, seed: int, power: float = 1.0
                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    g = torch.Generator().manual_seed(seed)
    draft = torch.rand(k, v, generator=g, dtype=torch.float64).numpy() ** power
    target = torch.rand(k + 1, v, generator=g, dtype=torch.float64).numpy() ** power
    target /= target.sum(axis=1, keepdims=True)
    tokens, _ = _run(kern, np.log(target).astype(np.float32), draft, draws, seed)
    first = tokens[:, 0]
    emp = np.bincount(first[(first >= 0) & (first < v)], minlength=v)[:v] / max(first.size, 1)
    return emp, target[0], first


def flashinfer_cosine(kern: Kernel, seed: int = 0, draws: int = 200_000) -> EngineTestResult:
    """FlashInfer's frequency criterion cosine > 0.99 on the first emitted token (module docstring)."""
    emp, p, _ = _first_token_law(kern, 111, 3, draws, seed)
    cos = float(emp @ p / (np.linalg.norm(emp) * np.linalg.norm(p)))
    return EngineTestResult("FlashInfer cosine", detected=cos <= 0.99, statistic=cos, threshold=0.99, draws=draws,
                            limit=cos)


def trtllm_kl(kern: Kernel, seed: int = 0, draws: int = 50_000) -> EngineTestResult:
    """TensorRT-LLM's |KL(p || spec) - KL(p || plain)| < 0.01 criterion (module docstring)."""
    emp, p, _ = _first_token_law(kern, 100, 1, draws, seed)
    rng = np.random.default_rng(seed)
    plain = rng.multinomial(draws, p) / draws

    def kl(a: np.ndarray, b: np.ndarray) -> float:
        return float(np.sum(a * (np.log(a) - np.log(np.clip(b, 1e-10, None)))))

    diff = abs(kl(p, emp) - kl(p, plain))
    return EngineTestResult("TensorRT-LLM KL", detected=diff >= 0.01, statistic=diff, threshold=0.01, draws=draws,
                            limit=kl(p, emp))


ENGINE_TESTS = {"vllm-l2": vllm_l2_ratio, "flashinfer-cosine": flashinfer_cosine, "trtllm-kl": trtllm_kl}
