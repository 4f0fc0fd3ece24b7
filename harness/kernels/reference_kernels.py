"""speceq's reference chain verification kernel (torch, any device), with one hook per step.

It implements the lossless methods of :mod:`speceq.kernels.laws` (standard, one-hot, exact-match,
block) in the ragged, padded and single layouts, with vLLM's per-request processing
(temperature, min-p, top-k, top-p in that order, min-p by :func:`speceq.core.processing.min_p_cut`;
temperature 0 = greedy, argmax of the raw logits) and the injected
uniforms of the request: ``uniforms`` for the acceptance tests (exact-match: for its own draw
at each position; block: for the stop coins), ``sample_uniforms`` for the one recovered or
bonus draw. Draws are inverse-CDF searches in float64 cumulative sums, with a fallback to the
last token of positive probability when u * total rounds onto the end.

Every step is a method, so a mutant (:mod:`speceq.kernels.kernel_mutants`) overrides exactly one:
``expand`` (per-request values to per-token ones), ``process_draft_rows`` / ``process_bonus_rows``,
``accept_probs``, ``accepted``, ``residual``, ``sample``, ``bonus_law``, ``recovered_uniforms``,
``draft_counts`` (padded layout).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from speceq.core.processing import min_p_cut
from speceq.kernels.contract import Kernel, KernelSpec, Outcome, PaddedRequest, RaggedRequest, SingleRequest


def inverse_cdf(probs: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """Rows ``[N, V]``, uniforms ``[N]`` -> the first token whose float64 cumulative mass exceeds u * total.

    When rounding puts u * total on the end of the sums, the last token of positive
    probability is returned (never a token of probability 0, never an id >= V).
    """
    c = probs.to(torch.float64).cumsum(dim=1)
    x = (u.to(torch.float64) * c[:, -1])[:, None]
    idx = torch.searchsorted(c, x, right=True).squeeze(1).clamp(max=probs.shape[1] - 1)
    bad = (probs.gather(1, idx[:, None]).squeeze(1) <= 0).nonzero().squeeze(1)
    if bad.numel():
        positive = probs[bad] > 0
        idx[bad] = probs.shape[1] - 1 - positive.flip(1).to(torch.int8).argmax(dim=1)
    return idx


@dataclass
class Dense:
    """A batch in the kernel's working form (all on one device).

    p: float32 ``[B, k + 1, V]`` processed target laws (row n[b] is request b's bonus row);
    q: float32 ``[B, k, V]`` or None; d: int64 ``[B, k]`` drafts (-1 after n[b]); n: int64 ``[B]``;
    u: float64 ``[B, k]``; su: float64 ``[B]``; greedy: bool ``[B]``; argmax: int64 ``[B, k + 1]``
    (the raw logits' argmax, for greedy rows).
    """

    p: torch.Tensor
    q: torch.Tensor | None
    d: torch.Tensor
    n: torch.Tensor
    u: torch.Tensor
    su: torch.Tensor
    greedy: torch.Tensor
    argmax: torch.Tensor


class ReferenceChainKernel:
    """The correct kernel; ``method`` is one of standard, one-hot, exact-match, block."""

    def __init__(self, method: str = "standard") -> None:
        if method not in ("standard", "one-hot", "exact-match", "block"):
            raise ValueError(f"unknown method {method!r}")
        self.method = method

    # ---- processing -------------------------------------------------------------------------
    def expand(self, values: torch.Tensor, request: RaggedRequest) -> torch.Tensor:
        """Request values ``[B]`` -> one per draft token ``[num_tokens]`` (request r repeated n_r times)."""
        counts = torch.tensor(request.num_draft_tokens, device=values.device)
        return torch.repeat_interleave(values, counts, output_size=request.num_tokens)

    @staticmethod
    def process(logits: torch.Tensor, temperature: torch.Tensor, top_k: torch.Tensor,
                top_p: torch.Tensor, min_p: torch.Tensor | None = None) -> torch.Tensor:
        """float32 processed laws of logits rows with per-row parameters (temperature 0 rows: T = 1).

        vLLM's order: temperature, min-p (None or 0 = off), top-k, top-p.
        """
        t = torch.where(temperature == 0, torch.ones_like(temperature), temperature)
        x = logits.to(torch.float32) / t[:, None]
        if min_p is not None and bool((min_p > 0).any()):
            x = min_p_cut(x, min_p.to(torch.float32)[:, None])
        need = (top_k > 0) | (top_p < 1.0)
        if bool(need.any()):
            idx = need.nonzero().squeeze(1)
            sub = x[idx]
            s, order = sub.sort(dim=1, descending=True)
            k = top_k[idx]
            kth = s.gather(1, (k.clamp(min=1, max=s.shape[1]) - 1)[:, None])
            cut_k = (k[:, None] > 0) & (s < kth)
            s = s.masked_fill(cut_k, float("-inf"))
            ps = torch.softmax(s, dim=1)
            before = torch.cumsum(ps, dim=1) - ps
            keep_sorted = ~cut_k & (before < top_p[idx][:, None])
            keep = torch.zeros_like(keep_sorted).scatter(1, order, keep_sorted)
            x[idx] = sub.masked_fill(~keep, float("-inf"))
        return torch.softmax(x, dim=1)

    def process_draft_rows(self, logits: torch.Tensor, temperature: torch.Tensor, top_k: torch.Tensor,
                           top_p: torch.Tensor, min_p: torch.Tensor | None = None) -> torch.Tensor:
        return self.process(logits, temperature, top_k, top_p, min_p)

    def process_bonus_rows(self, logits: torch.Tensor, temperature: torch.Tensor, top_k: torch.Tensor,
                           top_p: torch.Tensor, min_p: torch.Tensor | None = None) -> torch.Tensor:
        return self.process(logits, temperature, top_k, top_p, min_p)

    # ---- verification steps -------------------------------------------------------------------
    def accept_probs(self, p: torch.Tensor, q: torch.Tensor | None, d: torch.Tensor) -> torch.Tensor:
        """Acceptance probability of each draft ``[B, k]`` (standard: min(1, p(d)/q(d)); one-hot: p(d))."""
        dd = d.clamp(min=0)[..., None]
        pd = p[:, : d.shape[1]].gather(-1, dd).squeeze(-1).to(torch.float64)
        if q is None:
            return pd
        qd = q.gather(-1, dd).squeeze(-1).to(torch.float64)
        return torch.clamp(pd / qd, max=1.0)

    def accepted(self, u: torch.Tensor, ratio: torch.Tensor) -> torch.Tensor:
        return u < ratio

    def residual(self, p: torch.Tensor, q: torch.Tensor | None, d: torch.Tensor) -> torch.Tensor:
        """Law of the recovered token at a rejected position, rows ``[N, V]`` (p, q at it; d the rejected draft)."""
        if q is None:
            r = p.clone()
            r.scatter_(1, d[:, None], 0.0)
        else:
            r = torch.clamp(p - q, min=0.0)
        mass = r.sum(dim=1, keepdim=True)
        return torch.where(mass > 0, r / mass.clamp(min=torch.finfo(r.dtype).tiny), p)

    def bonus_law(self, dense: Dense, rows: torch.Tensor) -> torch.Tensor:
        """Law of the bonus token of requests ``rows`` (all drafts accepted): their bonus rows."""
        return dense.p[rows, dense.n[rows]]

    def recovered_uniforms(self, dense: Dense, rows: torch.Tensor, at: torch.Tensor) -> torch.Tensor:
        """Uniforms of the recovered draws of ``rows`` rejected at positions ``at``: the sample uniforms."""
        return dense.su[rows]

    def sample(self, probs: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
        """Inverse CDF: the first token whose cumulative mass exceeds u * total (float64 sums)."""
        return inverse_cdf(probs, u)

    # ---- the whole batch --------------------------------------------------------------------------
    def verify(self, dense: Dense) -> torch.Tensor:
        """Tokens ``[B, k + 1]`` (-1 padded) of a dense batch."""
        b, k = dense.d.shape
        dev = dense.d.device
        out = torch.full((b, k + 1), -1, dtype=torch.int64, device=dev)
        valid = torch.arange(k, device=dev)[None, :] < dense.n[:, None]
        if self.method == "block":
            lengths, corr = self._block(dense, valid)
        elif self.method == "exact-match":
            lengths, corr = self._exact_match(dense, valid)
        else:
            lengths, corr = self._tokenwise(dense, valid)
        greedy = dense.greedy
        if bool(greedy.any()):
            g_ok = (dense.d == dense.argmax[:, :k]) & valid
            g_len = torch.cumprod(g_ok.to(torch.int64), dim=1).sum(dim=1) if k else torch.zeros(b, dtype=torch.int64,
                                                                                                   device=dev)
            lengths = torch.where(greedy, g_len, lengths)
            corr = torch.where(greedy, dense.argmax.gather(1, g_len[:, None]).squeeze(1), corr)
        cols = torch.arange(k + 1, device=dev)[None, :]
        drafts = torch.cat([dense.d, torch.full((b, 1), -1, dtype=torch.int64, device=dev)], dim=1)
        out = torch.where(cols < lengths[:, None], drafts, out)
        out.scatter_(1, lengths[:, None], corr[:, None])
        return out

    def _tokenwise(self, dense: Dense, valid: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        b, k = dense.d.shape
        q = dense.q if self.method == "standard" else None
        ratio = self.accept_probs(dense.p, q, dense.d)
        acc = self.accepted(dense.u, ratio) & valid
        lengths = torch.cumprod(acc.to(torch.int64), dim=1).sum(dim=1) if k else torch.zeros(b, dtype=torch.int64,
                                                                                              device=dense.d.device)
        return lengths, self._corrections(dense, lengths, q)

    def _corrections(self, dense: Dense, lengths: torch.Tensor, q: torch.Tensor | None,
                     residual: torch.Tensor | None = None) -> torch.Tensor:
        b = lengths.shape[0]
        dev = lengths.device
        corr = torch.zeros(b, dtype=torch.int64, device=dev)
        rejected = (lengths < dense.n).nonzero().squeeze(1)
        bonus = (lengths >= dense.n).nonzero().squeeze(1)
        if rejected.numel():
            at = lengths[rejected]
            if residual is None:
                qa = None if q is None else q[rejected, at]
                residual = self.residual(dense.p[rejected, at], qa, dense.d[rejected, at])
            corr[rejected] = self.sample(residual, self.recovered_uniforms(dense, rejected, at))
        if bonus.numel():
            corr[bonus] = self.sample(self.bonus_law(dense, bonus), dense.su[bonus])
        return corr

    def _exact_match(self, dense: Dense, valid: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        b, k = dense.d.shape
        dev = dense.d.device
        if k == 0:
            lengths = torch.zeros(b, dtype=torch.int64, device=dev)
            return lengths, self._corrections(dense, lengths, None)
        x = self.sample(dense.p[:, :k].reshape(b * k, -1), dense.u.reshape(-1)).view(b, k)
        acc = (x == dense.d) & valid
        lengths = torch.cumprod(acc.to(torch.int64), dim=1).sum(dim=1)
        corr = torch.zeros(b, dtype=torch.int64, device=dev)
        rejected = lengths < dense.n
        corr[rejected] = x[rejected, lengths[rejected]]
        bonus = (~rejected).nonzero().squeeze(1)
        if bonus.numel():
            corr[bonus] = self.sample(self.bonus_law(dense, bonus), dense.su[bonus])
        return lengths, corr

    def _block(self, dense: Dense, valid: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        b, k = dense.d.shape
        dev = dense.d.device
        if k == 0 or dense.q is None:
            lengths = torch.zeros(b, dtype=torch.int64, device=dev)
            return lengths, self._corrections(dense, lengths, dense.q)
        p = dense.p.to(torch.float64)
        q = dense.q.to(torch.float64)
        dd = dense.d.clamp(min=0)[..., None]
        ratio = p[:, :k].gather(-1, dd).squeeze(-1) / q.gather(-1, dd).squeeze(-1)
        w = torch.ones(b, k + 1, dtype=torch.float64, device=dev)
        for j in range(1, k + 1):
            w[:, j] = torch.minimum(torch.ones_like(ratio[:, 0]), w[:, j - 1] * ratio[:, j - 1])
        h = torch.ones(b, k + 1, dtype=torch.float64, device=dev)
        for j in range(1, k):
            r = torch.clamp(w[:, j, None] * p[:, j] - q[:, j], min=0.0).sum(dim=1)
            denom = r + 1.0 - w[:, j]
            h[:, j] = torch.where(denom > 0, r / torch.where(denom > 0, denom, torch.ones_like(denom)),
                                  torch.ones_like(denom))
        # the last position of each request stops with its weight
        last = dense.n.clamp(min=1)
        h.scatter_(1, last[:, None], w.gather(1, last[:, None]))
        js = torch.arange(1, k + 1, device=dev)[None, :]
        stop = (dense.u < h[:, 1:]) & (js <= dense.n[:, None])
        lengths = torch.where(stop, js.expand(b, k), torch.zeros_like(js)).max(dim=1).values
        corr = torch.zeros(b, dtype=torch.int64, device=dev)
        rejected = (lengths < dense.n).nonzero().squeeze(1)
        if rejected.numel():
            at = lengths[rejected]
            wr = w[rejected, at][:, None]
            res = torch.clamp(wr * p[rejected, at] - q[rejected, at], min=0.0)
            mass = res.sum(dim=1, keepdim=True)
            res = torch.where(mass > 0, res / mass.clamp(min=1e-300), p[rejected, at])
            corr[rejected] = self.sample(res, self.recovered_uniforms(dense, rejected, at))
        bonus = (lengths >= dense.n).nonzero().squeeze(1)
        if bonus.numel():
            corr[bonus] = self.sample(self.bonus_law(dense, bonus), dense.su[bonus])
        return lengths, corr

    # ---- layouts ----------------------------------------------------------------------------------
    def ragged(self, req: RaggedRequest) -> Outcome:
        b = req.batch_size
        k = req.max_spec_len
        dev = req.target_logits.device
        n = torch.tensor(req.num_draft_tokens, dtype=torch.int64, device=dev)
        v = req.vocab_size
        p = torch.zeros(b, k + 1, v, dtype=torch.float32, device=dev)
        argmax = torch.zeros(b, k + 1, dtype=torch.int64, device=dev)
        req_of_tok = torch.repeat_interleave(torch.arange(b, device=dev), n, output_size=req.num_tokens)
        start = (req.cu_num_draft_tokens.to(torch.int64) - n)
        pos = torch.arange(req.num_tokens, device=dev) - start[req_of_tok]
        min_p = req.min_p if req.min_p is not None else torch.zeros_like(req.top_p)
        if req.num_tokens:
            rows = req.target_logits[req.target_logits_indices]
            p[req_of_tok, pos] = self.process_draft_rows(rows, self.expand(req.temperature, req),
                                                         self.expand(req.top_k, req), self.expand(req.top_p, req),
                                                         self.expand(min_p, req))
            argmax[req_of_tok, pos] = rows.argmax(dim=1)
        brows = req.target_logits[req.bonus_logits_indices]
        p[torch.arange(b, device=dev), n] = self.process_bonus_rows(brows, req.temperature, req.top_k, req.top_p,
                                                                    min_p)
        argmax[torch.arange(b, device=dev), n] = brows.argmax(dim=1)
        d = torch.full((b, k), -1, dtype=torch.int64, device=dev)
        u = torch.zeros(b, k, dtype=torch.float64, device=dev)
        q = None
        if req.num_tokens:
            d[req_of_tok, pos] = req.draft_token_ids.to(torch.int64)
            u[req_of_tok, pos] = req.uniforms.to(torch.float64)
            if req.draft_probs is not None:
                q = torch.zeros(b, k, v, dtype=torch.float32, device=dev)
                q[req_of_tok, pos] = req.draft_probs.to(torch.float32)
        greedy = self.greedy_rows(req)
        dense = Dense(p=p, q=q, d=d, n=n, u=u, su=req.sample_uniforms.to(torch.float64), greedy=greedy, argmax=argmax)
        return Outcome(tokens=self.verify(dense))

    def greedy_rows(self, req: RaggedRequest) -> torch.Tensor:
        return req.temperature == 0

    def draft_counts(self, req: PaddedRequest) -> torch.Tensor:
        return torch.tensor(req.num_draft_tokens, dtype=torch.int64, device=req.draft_token_ids.device)

    def padded_drafts(self, req: PaddedRequest, n: torch.Tensor) -> torch.Tensor:
        """Draft ids ``[B, k]`` with -1 after each request's ``n``."""
        k = req.draft_token_ids.shape[1]
        d = req.draft_token_ids.to(torch.int64).clone()
        d[torch.arange(k, device=d.device)[None, :] >= n[:, None]] = -1
        return d

    def padded(self, req: PaddedRequest) -> Outcome:
        b = req.draft_token_ids.shape[0]
        n = self.draft_counts(req)
        dev = req.draft_token_ids.device
        p = req.target_probs.to(torch.float32)
        dense = Dense(p=p, q=req.draft_probs, d=self.padded_drafts(req, n), n=n, u=req.uniforms.to(torch.float64),
                      su=req.sample_uniforms.to(torch.float64), greedy=torch.zeros(b, dtype=torch.bool, device=dev),
                      argmax=p.argmax(dim=-1))
        tokens = self.verify(dense)
        return Outcome(tokens=tokens, emitted_draft_counts=(tokens >= 0).sum(dim=1) - 1)

    def single(self, req: SingleRequest) -> Outcome:
        dev = req.target_probs.device
        k = req.num_draft_tokens
        p = req.target_probs.to(torch.float32)[None]
        q = None if req.draft_probs is None else req.draft_probs.to(torch.float32)[None]
        dense = Dense(p=p, q=q, d=req.draft_token_ids.to(torch.int64)[None], n=torch.tensor([k], device=dev),
                      u=req.uniforms.to(torch.float64)[None],
                      su=torch.tensor([req.sample_uniform], dtype=torch.float64, device=dev),
                      greedy=torch.zeros(1, dtype=torch.bool, device=dev), argmax=p.argmax(dim=-1))
        tokens = self.verify(dense)[0]
        return Outcome(tokens=tokens[tokens >= 0])


def reference_kernel(layout: str = "ragged", method: str = "standard", *, impl: ReferenceChainKernel | None = None,
                     name: str = "", **spec: object) -> Kernel:
    """The reference kernel (or ``impl``, a subclass instance) as a :class:`Kernel` of ``layout``.

    Ragged kernels apply per-request parameters (min-p included) and greedy rows; every layout takes the injected
    uniforms. ``spec`` overrides KernelSpec fields (e.g. ``max_draft``, ``padding``).
    """
    core = impl or ReferenceChainKernel(method)
    fields: dict[str, object] = dict(layout=layout, method=method, uniforms=True, nan_rows=True)
    if layout == "ragged":
        fields.update(params=True, min_p=True, greedy=True)
    if layout == "padded":
        fields.update(padding=True)
    fields.update(spec)
    made = KernelSpec(name=name or f"reference-{layout}-{method}", **fields)  # type: ignore[arg-type]
    fn = {"ragged": core.ragged, "padded": core.padded, "single": core.single}[layout]
    return Kernel(fn, made)
