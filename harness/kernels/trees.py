"""Tree verification kernels (SGLang / EAGLE / SpecInfer): scenarios, reference kernels, the check.

A tree template is a fixed tree shape (first-child / next-sibling arrays over N nodes, node 0
the root), a target law p_n at every node (the law of the token after node n's path) and a
draft law q_n (the law node n's children are drawn from). Two lossless methods:

- ``target-only`` (SGLang's ``tree_speculative_sampling_target_only``): a node's children carry
  distinct tokens (here: the top tokens of q_n, fixed per template). One coin u per reached
  node walks the children in sibling order and accepts child j when u < p_n(t_1) + ... + p_n(t_j);
  when no child is accepted, the final token is drawn from p_n without the children's tokens.
  P(child c accepted | n reached) = p_n(t_c).
- ``multi-draft`` (SpecInfer's recursive rejection): the children's tokens are drawn
  independently from q_n for every request; child j is accepted with probability
  min(1, r_j(t_j) / q_n(t_j)) where r_1 = p_n and r_{j+1} = norm((r_j - q_n)+); the final token
  is drawn from the last residual. P(the j-th child accepted | n reached) =
  prod_{i<j} (1 - beta_i) beta_j with beta_i = sum_x min(r_i, q_n).

For both, given that node n is reached, the next emitted token (an accepted child's token or
the final token) is distributed as p_n: one test per node whose expected reach is at least 20.
The invariants: the accepted nodes form a root path through the tree, the emitted tokens are
those nodes' tokens then one final token, every id is in [0, V), the final token has positive
probability under p at the last accepted node.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np
import torch

from speceq.errors import EngineError
from speceq.kernels.contract import Kernel, KernelSpec, Outcome, TreeRequest
from speceq.kernels.evidence import MIN_PLANNED, KernelTest
from speceq.kernels.families import as_float32_law, draft_law, target_logits
from speceq.kernels.gof import chain_gof
from speceq.kernels.outcomes import Violation, merge
from speceq.kernels.processing import RequestParams, processed_law
from speceq.kernels.reference import inverse_cdf
from speceq.kernels.result import ScenarioSummary, decide
from speceq.kernels.scenarios import ONE_MINUS_ULP

#: Tree shapes: parent of every node (node 0 is the root, parent -1), in sibling order.
SHAPES: dict[str, tuple[int, ...]] = {
    "eagle8": (-1, 0, 0, 0, 1, 1, 2, 4),  # root: 3 children; node 1: 2; node 2: 1; node 4: 1
    "chain4": (-1, 0, 1, 2),
    "wide5": (-1, 0, 0, 0, 0),
}


def tree_arrays(parents: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(first_child, next_sibling, depth) of a tree given by its parents (children in index order)."""
    n = len(parents)
    first = np.full(n, -1, np.int64)
    nxt = np.full(n, -1, np.int64)
    depth = np.zeros(n, np.int64)
    last: dict[int, int] = {}
    for c in range(1, n):
        par = parents[c]
        depth[c] = depth[par] + 1
        if par in last:
            nxt[last[par]] = c
        else:
            first[par] = c
        last[par] = c
    return first, nxt, depth


def children(first: np.ndarray, nxt: np.ndarray, node: int) -> list[int]:
    out = []
    c = int(first[node])
    while c != -1:
        out.append(c)
        c = int(nxt[c])
    return out


@dataclass(frozen=True, eq=False)
class TreeTemplate:
    name: str
    parents: tuple[int, ...]
    law: np.ndarray  # float64 [N, V]
    draft: np.ndarray  # float64 [N, V]
    draft32: np.ndarray  # float32 [N, V]
    fixed_tokens: np.ndarray  # int64 [N]: target-only children's tokens (top tokens of the parent's q); -1 at root
    features: dict[str, str]
    boundary: str = ""

    @property
    def num_nodes(self) -> int:
        return len(self.parents)

    @property
    def vocab_size(self) -> int:
        return int(self.law.shape[1])


@dataclass(frozen=True)
class TreeScenario:
    name: str
    vocab_size: int
    templates: tuple[TreeTemplate, ...]
    replicates: int
    boundary_replicates: int = 64
    skipped: tuple[str, ...] = ()

    def copies(self, t: TreeTemplate) -> int:
        return self.boundary_replicates if t.boundary else self.replicates


def build_tree_template(shape: str, family: str, relation: str, vocab: int, rng: np.random.Generator,
                        boundary: str = "") -> TreeTemplate:
    parents = SHAPES[shape]
    n = len(parents)
    first, nxt, _ = tree_arrays(parents)
    law = np.stack([processed_law(target_logits(family, vocab, rng), RequestParams()) for _ in range(n)])
    drafts = [as_float32_law(draft_law(relation, law[i], rng)) for i in range(n)]
    draft32 = np.stack([a for a, _ in drafts])
    draft = np.stack([b for _, b in drafts])
    fixed = np.full(n, -1, np.int64)
    for node in range(n):
        kids = children(first, nxt, node)
        if kids:
            order = np.argsort(-draft[node] - 1e-12 * rng.random(vocab), kind="stable")
            fixed[kids] = order[: len(kids)]
    for arr in (law, draft, draft32, fixed):
        arr.setflags(write=False)
    features = {"vocab": str(vocab), "law": family, "draft": relation, "shape": shape}
    if boundary:
        features["boundary"] = boundary
    return TreeTemplate(name=f"{shape}/{family}/{relation}{'/' + boundary if boundary else ''}", parents=parents,
                        law=law, draft=draft, draft32=draft32, fixed_tokens=fixed, features=features,
                        boundary=boundary)


def default_tree_scenarios(spec: KernelSpec, *, scale: float = 1.0, seed: int = 0) -> list[TreeScenario]:
    rng = np.random.default_rng([seed, 7])
    reps = max(50, int(round(2000 * scale)))
    small = [("eagle8", "zipf", "overlap"), ("eagle8", "peaked", "sharp"), ("chain4", "flat", "flat"),
             ("wide5", "sparse", "overlap"), ("wide5", "zipf", "one-hot" if spec.method == "multi-draft" else "equal")]
    out = [TreeScenario("tree-v61", 61, tuple(build_tree_template(*s, 61, rng) for s in small), reps)]
    out.append(TreeScenario("tree-v2", 2, (build_tree_template("chain4", "zipf", "flat", 2, rng),), reps))
    mid = [build_tree_template("eagle8", "zipf", "overlap", 40_000, rng)]
    skipped: list[str] = []
    if spec.uniforms:
        mid += [build_tree_template("wide5", "sparse", "flat", 40_000, rng, boundary="u0"),
                build_tree_template("wide5", "sparse", "flat", 40_000, rng, boundary="u1")]
    else:
        skipped.append("boundary uniforms 0 and 1 - ulp (the kernel draws its own uniforms)")
    out.append(TreeScenario("tree-v40000", 40_000, tuple(mid), max(50, reps // 8), 32, tuple(skipped)))
    return out


# ---- exact reach laws (for planning) ----------------------------------------------------------
def child_acceptance(t: TreeTemplate, method: str) -> np.ndarray:
    """P(child c accepted | its parent reached), per node (1 at the root)."""
    first, nxt, _ = tree_arrays(t.parents)
    out = np.ones(t.num_nodes)
    for node in range(t.num_nodes):
        kids = children(first, nxt, node)
        if not kids:
            continue
        p, q = t.law[node], t.draft[node]
        if method == "target-only":
            for c in kids:
                out[c] = p[t.fixed_tokens[c]]
        else:
            r = p.copy()
            survive = 1.0
            for c in kids:
                beta = float(np.minimum(r, q).sum())
                out[c] = survive * beta
                survive *= 1.0 - beta
                res = np.clip(r - q, 0.0, None)
                r = res / res.sum() if res.sum() > 0 else r
    return out


def reach_probabilities(t: TreeTemplate, method: str) -> np.ndarray:
    acc = child_acceptance(t, method)
    reach = np.ones(t.num_nodes)
    for c in range(1, t.num_nodes):
        reach[c] = reach[t.parents[c]] * acc[c]
    return reach


# ---- reference kernels ----------------------------------------------------------------------------
class ReferenceTreeKernel:
    """Target-only or multi-draft tree verification, vectorised over the batch (see the module docstring)."""

    def __init__(self, method: str = "target-only") -> None:
        if method not in ("target-only", "multi-draft"):
            raise ValueError(f"unknown tree method {method!r}")
        self.method = method

    def accept_child(self, coin: torch.Tensor, cum: torch.Tensor) -> torch.Tensor:
        return coin < cum

    def final_law(self, p: torch.Tensor, removed: torch.Tensor) -> torch.Tensor:
        """Target-only: p at the last node without its children's tokens (``removed`` bool [B, V])."""
        r = p.masked_fill(removed, 0.0)
        mass = r.sum(dim=1, keepdim=True)
        return torch.where(mass > 0, r / mass.clamp(min=1e-30), p)

    @staticmethod
    def sample(probs: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
        return inverse_cdf(probs, u)

    def __call__(self, req: TreeRequest) -> Outcome:
        b, n = req.tokens.shape
        dev = req.tokens.device
        ar = torch.arange(b, device=dev)
        cur = torch.zeros(b, dtype=torch.int64, device=dev)
        alive = torch.ones(b, dtype=torch.bool, device=dev)
        path = torch.full((b, n), -1, dtype=torch.int64, device=dev)
        depth = torch.zeros(b, dtype=torch.int64, device=dev)
        p_all = req.target_probs.to(torch.float32)
        resid = p_all[ar, cur].clone()
        for _ in range(n):
            child = req.first_child[ar, cur].clone()
            child[~alive] = -1
            cum = torch.zeros(b, dtype=torch.float64, device=dev)
            coin = req.uniforms[ar, cur]
            moved = torch.zeros(b, dtype=torch.bool, device=dev)
            resid = torch.where(alive[:, None], p_all[ar, cur], resid)
            for _ in range(n):
                active = alive & ~moved & (child >= 0)
                if not bool(active.any()):
                    break
                c = child.clamp(min=0)
                tok = req.tokens[ar, c]
                if self.method == "target-only":
                    cum = cum + p_all[ar, cur, tok].to(torch.float64)
                    take = active & self.accept_child(coin, cum)
                else:
                    q = req.draft_probs[ar, cur].to(torch.float32)
                    ratio = (resid[ar, tok] / q[ar, tok]).to(torch.float64).clamp(max=1.0)
                    take = active & self.accept_child(req.uniforms[ar, c], ratio)
                    rej = active & ~take
                    if bool(rej.any()):
                        upd = torch.clamp(resid[rej] - q[rej], min=0.0)
                        mass = upd.sum(dim=1, keepdim=True)
                        resid[rej] = torch.where(mass > 0, upd / mass.clamp(min=1e-30), resid[rej])
                path[take, depth[take]] = c[take]
                depth = depth + take.to(torch.int64)
                moved |= take
                cur = torch.where(take, c, cur)
                child = torch.where(active & ~take, req.next_sibling[ar, c], child)
            alive &= moved
            if not bool(alive.any()):
                break
        if self.method == "target-only":
            removed = torch.zeros_like(p_all[:, 0], dtype=torch.bool)
            kid = req.first_child[ar, cur].clone()
            for _ in range(n):
                has = kid >= 0
                if not bool(has.any()):
                    break
                removed[ar[has], req.tokens[ar[has], kid[has]]] = True
                kid = torch.where(has, req.next_sibling[ar, kid.clamp(min=0)], kid)
            law = self.final_law(p_all[ar, cur], removed)
        else:
            law = resid
        final = self.sample(law, req.sample_uniforms.to(torch.float64))
        tokens = torch.full((b, n), -1, dtype=torch.int64, device=dev)
        cols = torch.arange(n, device=dev)[None, :]
        tokens = torch.where(cols < depth[:, None], req.tokens.gather(1, path.clamp(min=0)), tokens)
        tokens.scatter_(1, depth[:, None], final[:, None])
        return Outcome(tokens=tokens, accepted_nodes=path)


class InclusiveCoin(ReferenceTreeKernel):
    """Target-only with the inclusive test coin <= cumulative mass: u = 0 accepts a child of probability 0."""

    def accept_child(self, coin: torch.Tensor, cum: torch.Tensor) -> torch.Tensor:
        return coin <= cum


class SiblingsNotRemoved(ReferenceTreeKernel):
    """Target-only with the final token drawn from p at the last node, rejected children's tokens included."""

    def final_law(self, p: torch.Tensor, removed: torch.Tensor) -> torch.Tensor:
        return p


def reference_tree_kernel(method: str = "target-only", *, impl: ReferenceTreeKernel | None = None,
                          name: str = "") -> Kernel:
    core = impl or ReferenceTreeKernel(method)
    return Kernel(core, KernelSpec(layout="tree", method=method, uniforms=True, max_draft=7,
                                   name=name or f"reference-tree-{method}"))


# ---- collection and tests -------------------------------------------------------------------------
@dataclass
class _TreeRecord:
    template: TreeTemplate
    paths: list[np.ndarray] = field(default_factory=list)  # [n, N] accepted nodes (-1 padded)
    tokens: list[np.ndarray] = field(default_factory=list)  # [n, N] emitted tokens


def _tree_request(scn: TreeScenario, slots: np.ndarray, method: str, takes_q: bool, rng: np.random.Generator,
                  device: torch.device) -> tuple[TreeRequest, np.ndarray]:
    tpls = scn.templates
    b = slots.size
    n = max(t.num_nodes for t in tpls)
    v = scn.vocab_size
    tokens = np.zeros((b, n), np.int64)
    first = np.full((b, n), -1, np.int64)
    nxt = np.full((b, n), -1, np.int64)
    law = np.zeros((b, n, v), np.float32)
    q = np.zeros((b, n, v), np.float32)
    u = rng.random((b, n))
    su = rng.random(b)
    for t_index in np.unique(slots):
        t = tpls[t_index]
        rows = np.flatnonzero(slots == t_index)
        f, s, _ = tree_arrays(t.parents)
        m = t.num_nodes
        first[rows, :m] = f
        nxt[rows, :m] = s
        law[rows, :m] = t.law.astype(np.float32)
        q[rows, :m] = t.draft32
        if method == "target-only":
            tokens[rows, :m] = np.maximum(t.fixed_tokens, 0)
        else:
            cdf = np.cumsum(t.draft, axis=1)
            for c in range(1, m):
                par = t.parents[c]
                tokens[rows, c] = np.minimum(np.searchsorted(cdf[par] / cdf[par, -1], rng.random(rows.size),
                                                             side="right"), v - 1)
        if t.boundary:
            u[rows] = 0.0 if t.boundary == "u0" else ONE_MINUS_ULP
            su[rows] = 0.0 if t.boundary == "u0" else ONE_MINUS_ULP
    gen = torch.Generator(device=device)
    gen.manual_seed(int(rng.integers(0, 2**62)))
    req = TreeRequest(vocab_size=v, tokens=torch.from_numpy(tokens).to(device),
                      first_child=torch.from_numpy(first).to(device), next_sibling=torch.from_numpy(nxt).to(device),
                      target_probs=torch.from_numpy(law).to(device),
                      draft_probs=torch.from_numpy(q).to(device) if takes_q else None,
                      uniforms=torch.from_numpy(u).to(device), sample_uniforms=torch.from_numpy(su).to(device),
                      seeds=torch.from_numpy(rng.integers(0, 2**62, size=b)).to(device), generator=gen)
    return req, tokens


def _parse_tree(out: Outcome, tokens_in: np.ndarray, slots: np.ndarray, scn: TreeScenario,
                found: dict[tuple[str, str], list]) -> tuple[np.ndarray, np.ndarray]:
    """Per request: accepted path [B, N] and emitted tokens [B, N] (rows with a violation set to -2)."""
    b, n = tokens_in.shape
    tok = np.asarray(out.tokens.detach().cpu() if hasattr(out.tokens, "detach") else out.tokens).astype(np.int64)
    path = np.asarray(out.accepted_nodes.detach().cpu() if hasattr(out.accepted_nodes, "detach")
                      else out.accepted_nodes).astype(np.int64)
    v = scn.vocab_size
    if tok.shape[0] != b or path.shape[0] != b or tok.shape[1] < 1:
        raise EngineError(f"tree kernel returned tokens {tok.shape} and accepted_nodes {path.shape} for {b} requests")
    width = max(n, tok.shape[1], path.shape[1] + 1)
    tok = np.pad(tok, ((0, 0), (0, width - tok.shape[1])), constant_values=-1)
    path = np.pad(path, ((0, 0), (0, width - path.shape[1])), constant_values=-1)

    def flag(kind: str, r: int, text: str) -> None:
        key = (kind, f"{scn.name}/{scn.templates[slots[r]].name}")
        if key in found:
            found[key][0] += 1
        else:
            found[key] = [1, text]

    for r in range(b):
        t = scn.templates[slots[r]]
        f, s, _ = tree_arrays(t.parents)
        nodes = path[r][path[r] >= 0]
        depth = nodes.size
        text = f"request {r}: accepted nodes {nodes.tolist()}, tokens {tok[r, : depth + 2].tolist()}"
        ok = True
        prev = 0
        for c in nodes:
            if c >= t.num_nodes or c not in children(f, s, prev):
                flag("tree-path", r, text)
                ok = False
                break
            prev = int(c)
        if ok and ((path[r, depth:] != -1).any()):
            flag("tree-path", r, text)
            ok = False
        emitted = tok[r]
        if ok:
            if (emitted[depth + 1:] != -1).any() or emitted[depth] < 0:
                flag("padding", r, text)
                ok = False
            elif not (0 <= emitted[depth] < v) or ((emitted[:depth] < 0) | (emitted[:depth] >= v)).any():
                flag("id-range", r, text)
                ok = False
            elif (emitted[:depth] != tokens_in[r, nodes]).any():
                flag("draft-mismatch", r, text)
                ok = False
            elif t.law[prev, emitted[depth]] == 0 or any(
                    t.law[t.parents[c], tokens_in[r, c]] == 0 for c in nodes):
                flag("zero-probability", r, text)
                ok = False
        if not ok:
            path[r] = -2
            tok[r] = -2
    return path[:, :n], tok[:, :n]


def check_tree(kern: Kernel, *, scale: float = 1.0, seed: int = 0, device: str | torch.device = "cpu",
               alpha: float = 1e-3, tolerance: float | None = None, scenarios: list[TreeScenario] | None = None):
    """The tree check (see the module docstring); returns a :class:`~speceq.kernels.checks.KernelCheckResult`."""
    start = time.perf_counter()
    spec = kern.spec
    dev = torch.device(device)
    chosen = scenarios if scenarios is not None else default_tree_scenarios(spec, scale=scale, seed=seed)
    rng = np.random.default_rng([seed, 3])
    planned: list[tuple[TreeScenario, TreeTemplate, int, float]] = []
    for scn in chosen:
        for t in scn.templates:
            if t.boundary:
                continue
            reach = reach_probabilities(t, spec.method) * scn.copies(t)
            planned += [(scn, t, node, float(reach[node])) for node in range(t.num_nodes) if reach[node] >= MIN_PLANNED]
    tv_alpha = alpha / max(len(planned), 1)
    found: dict[tuple[str, str], list] = {}
    records: dict[tuple[str, str], _TreeRecord] = {}
    summaries = []
    for scn in chosen:
        want = np.array([scn.copies(t) for t in scn.templates])
        have = np.zeros_like(want)
        per_call = max(1, min(4096, (1 << 24) // (scn.vocab_size * 8)) // len(scn.templates))
        ks = hs = 0.0
        calls = reqs = 0
        while (have < want).any():
            t0 = time.perf_counter()
            slots = rng.permutation(np.repeat(np.arange(len(scn.templates)), np.minimum(want - have, per_call)))
            req, toks = _tree_request(scn, slots, spec.method, spec.takes_draft_probs, rng, dev)
            t1 = time.perf_counter()
            try:
                with torch.inference_mode():
                    out = kern(req)
            except Exception as exc:
                raise EngineError(f"the kernel raised {type(exc).__name__}: {exc}", engine=kern.name,
                                  case_id=scn.name) from exc
            t2 = time.perf_counter()
            path, tok = _parse_tree(out, toks, slots, scn, found)
            for t_index in np.unique(slots):
                rec = records.setdefault((scn.name, scn.templates[t_index].name), _TreeRecord(scn.templates[t_index]))
                rows = slots == t_index
                rec.paths.append(path[rows])
                rec.tokens.append(tok[rows])
            have += np.bincount(slots, minlength=len(scn.templates))
            calls += 1
            reqs += slots.size
            ks += t2 - t1
            hs += (t1 - t0) + (time.perf_counter() - t2)
        summaries.append(ScenarioSummary(scn.name, scn.vocab_size, len(scn.templates), reqs, calls, ks, hs,
                                         scn.skipped))
    tests: list[KernelTest] = []
    for scn, t, node, expected in planned:
        rec = records[(scn.name, t.name)]
        path = np.concatenate(rec.paths)
        tok = np.concatenate(rec.tokens)
        ok = path[:, 0] != -2
        if node == 0:
            reached = ok
            col = np.zeros(path.shape[0], np.int64)
        else:
            hit = path == node
            reached = ok & hit.any(axis=1)
            col = hit.argmax(axis=1) + 1
        labels = tok[reached, col[reached]]
        features = {**t.features, "position": f"node {node}"}
        common = dict(scenario=scn.name, template=t.name, component="node", position=node, expected_n=expected,
                      features=features)
        if labels.size == 0:
            tests.append(KernelTest(n=0, pvalue=1.0, statistic=0.0, tv=0.0, tv_upper=1.0, tv_lower=None,
                                    support_violations=0, **common))
            continue
        res = chain_gof(np.bincount(labels, minlength=t.vocab_size), t.law[node], tv_alpha=tv_alpha)
        tests.append(KernelTest(n=res.n, pvalue=res.pvalue, statistic=res.statistic, tv=res.tv,
                                tv_upper=res.tv_upper_bound, tv_lower=None, support_violations=res.support_violations,
                                **common))
    violations = merge([Violation(kind, tpl, count, example) for (kind, tpl), (count, example) in found.items()])
    features = {f"{s.name}/{t.name}": dict(t.features) for s in chosen for t in s.templates}
    return decide(kern, tests, violations, summaries, features, alpha=alpha, tolerance=tolerance, start=start,
                  device=str(dev), seed=seed)
