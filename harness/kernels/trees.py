"""Tree verification kernels (SGLang / EAGLE / SpecInfer): scenarios, reference kernels, the tree layout (TREE).

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
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import numpy as np
import torch

from speceq.errors import EngineError
from speceq.kernels.check_layout import Layout
from speceq.kernels.check_result import ScenarioSummary
from speceq.kernels.contract import Kernel, KernelSpec, Outcome, TreeRequest
from speceq.kernels.families import as_float32_law, draft_law, target_logits
from speceq.kernels.gof import chain_gof
from speceq.kernels.kernel_calls import RowBuffers, fixed_layout_plan, redone, scenario_loop
from speceq.kernels.law_tests import MIN_PLANNED, KernelTest
from speceq.kernels.outcomes import Violation, merge
from speceq.kernels.reference_kernels import inverse_cdf
from speceq.kernels.scenarios import ONE_MINUS_ULP, requests_per_call
from speceq.kernels.target_processing import RequestParams, processed_law

#: Requests whose outputs the collection reads and parses together (at most, and as many calls as fit).
PARSE_ROWS = 1 << 14
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
class TreeRecord:
    template: TreeTemplate
    paths: list[np.ndarray] = field(default_factory=list)  # [n, N] accepted nodes (-1 padded)
    tokens: list[np.ndarray] = field(default_factory=list)  # [n, N] emitted tokens


@dataclass(frozen=True)
class PathTables:
    """Lookup rows for reading tree outputs: row ``t * N + c`` describes node c of template t.

    root_path int64 ``[T * N, N]``: the nodes from the root's child to c, then -1 (node 0: all
    -1; a padded node: all -3, which no accepted path equals); columns: the same, -1 read as 0
    (for gathers); depth: the length of that path; on_path bool ``[T * N, N]``: its columns;
    parent_cells int64 ``[T * N, N]``: for each node on the path, the flat index (into law_flat)
    of the start of the law its token is verified against (its parent's), 0 beyond the path;
    law_flat: the float64 laws ``[T, N, V]`` flattened.
    """

    root_path: np.ndarray
    columns: np.ndarray
    depth: np.ndarray
    on_path: np.ndarray
    parent_cells: np.ndarray
    law_flat: np.ndarray


class TreeTables:
    """A scenario's templates as padded arrays (N = most nodes), for building and reading whole calls.

    Per template: first-child / next-sibling / parent arrays and the target-only tokens (padded
    nodes: -1 / -1 / -2 / 0), the node count, the boundary; the float32 target and draft laws as
    device tables ``[T * N, V]`` (zero rows at padded nodes) gathered into reused buffers; the
    float64 laws ``[T, N, V]`` for the zero-probability invariant.
    """

    def __init__(self, scn: TreeScenario, device: torch.device, buffers: RowBuffers | None = None, *,
                 reuse: bool = False) -> None:
        tpls = scn.templates
        n = max(t.num_nodes for t in tpls)
        v = scn.vocab_size
        self.nodes = n
        self.m = np.array([t.num_nodes for t in tpls], np.int64)
        self.first = np.full((len(tpls), n), -1, np.int64)
        self.nxt = np.full((len(tpls), n), -1, np.int64)
        self.parents = np.full((len(tpls), n), -2, np.int64)
        self.fixed = np.zeros((len(tpls), n), np.int64)
        self.law = np.zeros((len(tpls), n, v))
        law32 = np.zeros((len(tpls) * n, v), np.float32)
        q32 = np.zeros((len(tpls) * n, v), np.float32)
        for i, t in enumerate(tpls):
            f, s, _ = tree_arrays(t.parents)
            m = t.num_nodes
            self.first[i, :m], self.nxt[i, :m], self.parents[i, :m] = f, s, t.parents
            self.fixed[i, :m] = np.maximum(t.fixed_tokens, 0)
            self.law[i, :m] = t.law
            law32[i * n:i * n + m] = t.law.astype(np.float32)
            q32[i * n:i * n + m] = t.draft32
        self.law32 = torch.from_numpy(law32).to(device)
        self.q32 = torch.from_numpy(q32).to(device)
        self.boundary_templates = np.array([i for i, t in enumerate(tpls) if t.boundary], np.int64)  # fixed uniforms
        self.buffers = buffers if buffers is not None else RowBuffers()
        self.reuse = reuse  # hand out the rows of a repeated call layout without copying them again
        self._templates = tpls
        self._draft_cdf: dict[int, np.ndarray] = {}
        self._paths: PathTables | None = None
        self._node_rows: tuple[np.ndarray, np.ndarray] | None = None

    def node_rows(self, slots: np.ndarray) -> np.ndarray:
        """The table rows of every node of every request, ``[B * N]`` (kept while a call layout's slots are kept)."""
        if self._node_rows is None or self._node_rows[0] is not slots:
            n = self.nodes
            self._node_rows = (slots, (slots[:, None] * n + np.arange(n)[None, :]).ravel())
        return self._node_rows[1]

    def path_tables(self) -> PathTables:
        """The root path of every (template, node) as lookup rows (:class:`PathTables`; built once per scenario)."""
        if self._paths is None:
            t_count, n = self.first.shape
            v = self.law.shape[2]
            root_path = np.full((t_count * n, n), -3, np.int64)
            parent_cells = np.zeros((t_count * n, n), np.int64)
            depth = np.zeros(t_count * n, np.int64)
            for t in range(t_count):
                for c in range(int(self.m[t])):
                    nodes = []
                    at = c
                    while at > 0:
                        nodes.append(at)
                        at = int(self.parents[t, at])
                    nodes.reverse()
                    row = t * n + c
                    root_path[row] = -1
                    root_path[row, : len(nodes)] = nodes
                    parent_cells[row, : len(nodes)] = (t * n + np.array([0, *nodes[:-1]], np.int64)) * v
                    depth[row] = len(nodes)
            on_path = np.arange(n)[None, :] < depth[:, None]
            self._paths = PathTables(root_path, np.maximum(root_path, 0), depth, on_path, parent_cells,
                                     self.law.reshape(-1))
        return self._paths

    def draft_cdf(self, t_index: int) -> np.ndarray:
        """Template ``t_index``'s draft laws as normalised CDFs [nodes, V] (float64; computed once per scenario)."""
        cdf = self._draft_cdf.get(t_index)
        if cdf is None:
            c = np.cumsum(self._templates[t_index].draft, axis=1)
            cdf = self._draft_cdf[t_index] = c / c[:, -1:]
        return cdf


def build_tree_request(scn: TreeScenario, tables: TreeTables, slots: np.ndarray, method: str, takes_q: bool,
                  rng: np.random.Generator, device: torch.device) -> tuple[TreeRequest, np.ndarray]:
    tpls = scn.templates
    b = slots.size
    n = tables.nodes
    v = scn.vocab_size
    rows_all = tables.node_rows(slots)
    first = tables.first[slots]
    nxt = tables.nxt[slots]
    law = tables.buffers.gather("target", tables.law32, rows_all, reuse=tables.reuse).view(b, n, v)
    q = tables.buffers.gather("draft", tables.q32, rows_all, reuse=tables.reuse).view(b, n, v) if takes_q else None
    u = rng.random((b, n))
    su = rng.random(b)
    tokens = tables.fixed[slots] if method == "target-only" else np.zeros((b, n), np.int64)
    # per template in index order (the random stream of the per-request build); a target-only tree
    # draws nothing here, so only its templates with fixed uniforms are visited
    todo = np.unique(slots) if method != "target-only" else tables.boundary_templates
    for t_index in todo:
        t = tpls[t_index]
        rows = np.flatnonzero(slots == t_index)
        if rows.size == 0:
            continue
        if method != "target-only":
            cdf = tables.draft_cdf(int(t_index))
            for c in range(1, t.num_nodes):
                tokens[rows, c] = np.minimum(np.searchsorted(cdf[t.parents[c]], rng.random(rows.size), side="right"),
                                             v - 1)
        if t.boundary:
            u[rows] = 0.0 if t.boundary == "u0" else ONE_MINUS_ULP
            su[rows] = 0.0 if t.boundary == "u0" else ONE_MINUS_ULP
    gen = torch.Generator(device=device)
    gen.manual_seed(int(rng.integers(0, 2**62)))
    req = TreeRequest(vocab_size=v, tokens=torch.from_numpy(tokens).to(device),
                      first_child=torch.from_numpy(first).to(device), next_sibling=torch.from_numpy(nxt).to(device),
                      target_probs=law, draft_probs=q,
                      uniforms=torch.from_numpy(u).to(device), sample_uniforms=torch.from_numpy(su).to(device),
                      seeds=torch.from_numpy(rng.integers(0, 2**62, size=b)).to(device), generator=gen)
    return req, tokens


def _pad_columns(a: np.ndarray, width: int) -> np.ndarray:
    """``a`` [B, w] padded with -1 to [B, width] (np.pad's result, at a tenth of its cost per call)."""
    if a.shape[1] >= width:
        return a
    out = np.full((a.shape[0], width), -1, dtype=a.dtype)
    out[:, : a.shape[1]] = a
    return out


@dataclass(frozen=True)
class TreeCall:
    """One call's outputs, read (:func:`read_tree_outcome`) and not yet parsed, with its inputs' tokens and slots."""

    tokens: np.ndarray  # int64 [B, >= 1]
    accepted_nodes: np.ndarray  # int64 [B, *]
    tokens_in: np.ndarray  # int64 [B, N]
    slots: np.ndarray  # int64 [B]: each request's template


def _as_int64(a) -> np.ndarray:  # noqa: ANN001 - a tensor or an array
    """A fresh int64 copy of a kernel output (the kernel may reuse its output buffers)."""
    return np.asarray(a.detach().cpu() if hasattr(a, "detach") else a).astype(np.int64)


def parse_tree_outcome(out: Outcome, tokens_in: np.ndarray, slots: np.ndarray, scn: TreeScenario, tables: TreeTables,
                found: dict[tuple[str, str], list]) -> tuple[np.ndarray, np.ndarray]:
    """Per request: accepted path [B, N] and emitted tokens [B, N] (unreadable rows set to -2).

    A row's first broken invariant, in this order, is flagged: tree-path (the accepted nodes
    are not a -1-terminated root path of its tree), padding, id-range, draft-mismatch,
    zero-probability. One call's outputs; the collection reads several calls at once
    (:func:`read_tree_outcome`, then :func:`parse_tree_calls`), with the same results.
    """
    path, tok, _ = parse_tree_calls([read_tree_outcome(out, tokens_in, slots)], scn, tables, found)
    return path, tok


def read_tree_outcome(out: Outcome, tokens_in: np.ndarray, slots: np.ndarray) -> TreeCall:
    """A call's outputs as fresh int64 arrays (the kernel may reuse its buffers), their shapes checked."""
    b = tokens_in.shape[0]
    tok, path = _as_int64(out.tokens), _as_int64(out.accepted_nodes)
    if tok.ndim != 2 or path.ndim != 2 or tok.shape[0] != b or path.shape[0] != b or tok.shape[1] < 1:
        raise EngineError(f"tree kernel returned tokens {tok.shape} and accepted_nodes {path.shape} for {b} requests")
    return TreeCall(tok, path, tokens_in, slots)


def parse_tree_calls(calls: list[TreeCall], scn: TreeScenario, tables: TreeTables,
                     found: dict[tuple[str, str], list]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`parse_tree_outcome` on several calls of a scenario at once: their rows' paths, tokens and slots.

    The rows come in call order, each call's in its order, with the same values as call by
    call, and ``found`` gets the same counts and examples in the same order (the examples name
    a request by its row in its call). Two passes: every row is compared with what a valid row
    of its template must be (:func:`_clean_rows`), over all the calls together; only the rows
    that differ are read invariant by invariant (:func:`_flag_rows`), call by call.
    """
    n = tables.nodes
    v = scn.vocab_size
    toks = [_pad_columns(c.tokens, n) for c in calls]
    paths = [_pad_columns(c.accepted_nodes, n) for c in calls]
    if len(calls) == 1:
        tok, path, tokens_in, slots = toks[0], paths[0], calls[0].tokens_in, calls[0].slots
    else:
        tw, pw = max(t.shape[1] for t in toks), max(q.shape[1] for q in paths)
        tok = np.concatenate([_pad_columns(t, tw) for t in toks])
        path = np.concatenate([_pad_columns(q, pw) for q in paths])
        tokens_in = (np.concatenate([c.tokens_in for c in calls])
                     if len({c.tokens_in.shape[1] for c in calls}) == 1 else np.zeros((0, 0), np.int64))
        slots = np.concatenate([c.slots for c in calls])
    b = slots.size
    clean = (_clean_rows(tok, path, tokens_in, slots, tables, v) if b and tokens_in.shape == (b, n)
             else np.zeros(b, bool))
    start = 0
    for c in calls:
        rows = c.slots.size
        suspect = np.flatnonzero(~clean[start:start + rows])
        if suspect.size:
            width = max(n, c.tokens.shape[1], c.accepted_nodes.shape[1] + 1)  # as the invariants read them
            failed = _flag_rows(_pad_columns(c.tokens[suspect], width), _pad_columns(c.accepted_nodes[suspect], width),
                                c.tokens_in[suspect], c.slots[suspect], suspect, scn, tables, found)
            path[start + suspect[failed]] = -2
            tok[start + suspect[failed]] = -2
        start += rows
    return path[:, :n], tok[:, :n], slots


def _clean_rows(tok: np.ndarray, path: np.ndarray, tokens_in: np.ndarray, slots: np.ndarray, tables: TreeTables,
                v: int) -> np.ndarray:
    """The rows that break no invariant, for sure (``tok`` and ``path`` at least N wide).

    A row is clean when its accepted nodes are exactly the root path of its largest accepted
    node x in its template (then -1; the nodes of a root path are increasing, so x is its last
    node), its tokens exactly that path's drafted tokens, one final token in [0, V) and -1 after,
    and neither a drafted token on the path nor the final token has probability 0 under the law
    it is verified against. Such a row passes every check of :func:`_flag_rows`; any other row
    (a root path in another node order included) is read there.
    """
    b, n = tokens_in.shape
    if tokens_in.size and not (0 <= int(tokens_in.min()) and int(tokens_in.max()) < v):
        return np.zeros(b, bool)  # input ids out of range: every row is read invariant by invariant
    lk = tables.path_tables()
    key = slots * n + np.clip(path.max(axis=1), 0, n - 1)
    clean = (path[:, :n] == lk.root_path[key]).all(axis=1)
    if path.shape[1] > n:
        clean &= (path[:, n:] == -1).all(axis=1)
    on_path = lk.on_path[key]
    at = lk.depth[key]
    ar = np.arange(b)
    drafted = np.take_along_axis(tokens_in, lk.columns[key], axis=1)
    final = tok[ar, at]
    emitted = np.where(on_path, drafted, -1)
    emitted[ar, at] = final
    clean &= (tok[:, :n] == emitted).all(axis=1) & (final >= 0) & (final < v)
    if tok.shape[1] > n:
        clean &= (tok[:, n:] == -1).all(axis=1)
    zero = lk.law_flat[key * v + np.where(clean, final, 0)] == 0
    zero |= ((lk.law_flat[lk.parent_cells[key] + drafted] == 0) & on_path).any(axis=1)
    return clean & ~zero


def _flag_rows(tok: np.ndarray, path: np.ndarray, tokens_in: np.ndarray, slots: np.ndarray, index: np.ndarray,
               scn: TreeScenario, tables: TreeTables, found: dict[tuple[str, str], list]) -> np.ndarray:
    """The invariants of :func:`parse_tree_outcome`, one after the other, on some of a call's rows.

    tok, path: those rows, -1 padded to the call's width; index: their rows in the call (for the
    examples). Adds the broken invariants to ``found``; returns the rows that cannot be read (a broken
    path, padding or an id out of range), which are left out of the tests.
    """
    b = tok.shape[0]
    n = tokens_in.shape[1]
    width = tok.shape[1]
    v = scn.vocab_size
    ar = np.arange(b)
    cols = np.arange(width)[None, :]
    nonneg = path >= 0
    depth = nonneg.sum(axis=1)
    in_path = cols < depth[:, None]
    # a root path: nonnegative nodes, then -1 only; each node of its tree and a child of the one before
    structured = ~(in_path & ~nonneg).any(axis=1) & ~(~in_path & (path != -1)).any(axis=1)
    prev = np.concatenate([np.zeros((b, 1), np.int64), path[:, :-1]], axis=1)
    node = np.clip(path, 0, n - 1)
    walk_bad = in_path & ((path >= tables.m[slots][:, None]) | (tables.parents[slots[:, None], node] != prev))
    bad_path = ~structured | walk_bad.any(axis=1)
    ok = ~bad_path
    last = np.where(depth > 0, path[ar, np.maximum(depth - 1, 0)], 0)
    last = np.where(ok, last, 0)
    at = np.minimum(depth, width - 1)
    final = tok[ar, at]
    padding = ok & (((cols > depth[:, None]) & (tok != -1)).any(axis=1) | (final < 0))
    rest = ok & ~padding
    id_bad = rest & ((final >= v) | (in_path & ((tok < 0) | (tok >= v))).any(axis=1))
    rest &= ~id_bad
    in_n = in_path[:, :n]
    node_n = np.where(rest[:, None], node[:, :n], 0)
    drafted = np.take_along_axis(tokens_in, node_n, axis=1)
    mismatch = rest & (in_n & (tok[:, :n] != drafted)).any(axis=1)
    rest &= ~mismatch
    slot_col = slots[:, None]
    par = np.where(in_n & rest[:, None], tables.parents[slot_col, node_n], 0)
    final_ok = np.where(rest, np.clip(final, 0, v - 1), 0)
    drafted_ok = np.clip(drafted, 0, v - 1)
    zero = rest & ((tables.law[slots, last, final_ok] == 0)
                   | (in_n & (tables.law[slot_col, par, drafted_ok] == 0)).any(axis=1))

    def text(r: int) -> str:
        nodes = path[r][path[r] >= 0]
        return f"request {int(index[r])}: accepted nodes {nodes.tolist()}, tokens {tok[r, : nodes.size + 2].tolist()}"

    for kind, mask in (("tree-path", bad_path), ("padding", padding), ("id-range", id_bad),
                       ("draft-mismatch", mismatch), ("zero-probability", zero)):
        rows = np.flatnonzero(mask)
        if rows.size == 0:
            continue
        kinds, first_at, counts = np.unique(slots[rows], return_index=True, return_counts=True)
        for t_index, i, count in zip(kinds, first_at, counts):
            key = (kind, f"{scn.name}/{scn.templates[t_index].name}")
            if key in found:
                found[key][0] += int(count)
            else:
                found[key] = [int(count), text(int(rows[i]))]
    # draft-mismatch and zero-probability rows stay readable (their path and tokens are what the kernel emitted):
    # dropping them would condition the node tests on the kernel's own output (see speceq.kernels.outcomes)
    return bad_path | padding | id_bad


@dataclass
class TreeScenarioRecord:
    """One scenario's collection: per template its accepted paths and tokens, the broken invariants, the times.

    found: (kind, "scenario/template") -> [requests, example]. inputs_written: the kernel wrote into
    its reused inputs, so the first collection was discarded and this one copied every call's
    inputs (the times include the discarded collection's).
    """

    scenario: TreeScenario
    records: dict[str, TreeRecord]
    found: dict[tuple[str, str], list]
    summary: ScenarioSummary

    @property
    def inputs_written(self) -> bool:
        return self.summary.inputs_written


def collect_tree(kern: Kernel, scenarios: list[TreeScenario], *, seed: int = 0,
                 device: str | torch.device = "cpu") -> list[TreeScenarioRecord]:
    """Run a tree kernel over the scenarios with speceq's seeds (no statistics).

    Within a scenario the calls keep one layout (the order of the templates' requests) while
    their composition is unchanged: a permutation drawn once per composition, independently of
    every outcome, so the calls repeat the same table rows and the buffers hand them out
    without copying them again; the tokens (multi-draft), uniforms, seeds and generators are
    drawn for every call. When the buffers find that the kernel wrote into those inputs
    (compared bit for bit with the tables once per composition), the scenario's collection is
    discarded, every later call of the check copies its inputs, and the scenario is collected
    again with the next draws: valid, since whether it happens depends on what the kernel does
    to its inputs and the draws after the point where the first attempt stopped are again
    independent (see :func:`speceq.kernels.kernel_calls.run_scenario`).
    """
    dev = torch.device(device)
    rng = np.random.default_rng([seed, 3])

    def one(scn: TreeScenario, gen: np.random.Generator, buffers: RowBuffers) -> TreeScenarioRecord:
        return _collect_tree_scenario(kern, scn, gen, dev, buffers)

    def redo(again: TreeScenarioRecord, first: TreeScenarioRecord) -> TreeScenarioRecord:
        return replace(again, summary=redone(again.summary, first.summary))

    return scenario_loop(scenarios, one, lambda _: rng, redo=redo)


def _record_calls(pending: list[TreeCall], scn: TreeScenario, tables: TreeTables, found: dict[tuple[str, str], list],
                  records: dict[str, TreeRecord]) -> None:
    """Parse the pending calls together and add their rows to the templates' records, in call order.

    A template's record is created when a call first holds it (by template index within a
    call), as call by call.
    """
    path, tok, slots = parse_tree_calls(pending, scn, tables, found)
    seen: list[int] = []
    for c in pending:
        seen += [t for t in np.unique(c.slots).tolist() if t not in seen]
    for t_index in seen:
        rows = np.flatnonzero(slots == t_index)
        rec = records.setdefault(scn.templates[t_index].name, TreeRecord(scn.templates[t_index]))
        rec.paths.append(path[rows])
        rec.tokens.append(tok[rows])


def _collect_tree_scenario(kern: Kernel, scn: TreeScenario, rng: np.random.Generator, dev: torch.device,
                           buffers: RowBuffers) -> TreeScenarioRecord:
    """One collection of ``scn`` (see :func:`collect_tree`); stops early when ``buffers.written`` is set."""
    spec = kern.spec
    found: dict[tuple[str, str], list] = {}
    records: dict[str, TreeRecord] = {}
    want = np.array([scn.copies(t) for t in scn.templates])
    have = np.zeros_like(want)
    tables = TreeTables(scn, dev, buffers, reuse=True)
    # every row of V values a request sends: N target rows, and N draft rows when the kernel takes the draft law
    rows = tables.nodes * (2 if spec.takes_draft_probs else 1)
    per_call = requests_per_call(scn.vocab_size, rows, len(scn.templates))
    ks = hs = kc = hc = 0.0
    calls = reqs = 0
    layout_take: np.ndarray | None = None
    slots = np.zeros(0, np.int64)
    plan = fixed_layout_plan(want, per_call)
    pending: list[TreeCall] = []  # calls read and not yet parsed (parsed together: fewer, larger array operations)
    while (have < want).any():
        t0, c0 = time.perf_counter(), time.process_time()
        take = np.minimum(want - have, plan.pop(0) if plan else per_call)
        if layout_take is None or not np.array_equal(take, layout_take):
            slots = rng.permutation(np.repeat(np.arange(len(scn.templates)), take))
            layout_take = take
        req, toks = build_tree_request(scn, tables, slots, spec.method, spec.takes_draft_probs, rng, dev)
        t1, c1 = time.perf_counter(), time.process_time()
        try:
            with torch.inference_mode():
                out = kern(req)
        except Exception as exc:
            raise EngineError(f"the kernel raised {type(exc).__name__}: {exc}", engine=kern.name,
                              case_id=scn.name) from exc
        t2, c2 = time.perf_counter(), time.process_time()
        pending.append(read_tree_outcome(out, toks, slots))
        have += np.bincount(slots, minlength=len(scn.templates))
        calls += 1
        reqs += slots.size
        ks += t2 - t1
        kc += c2 - c1
        held = sum(c.slots.size for c in pending)
        if buffers.written or held >= PARSE_ROWS or not (have < want).any():
            _record_calls(pending, scn, tables, found, records)
            pending = []
        if buffers.written:
            hs += (t1 - t0) + (time.perf_counter() - t2)
            hc += (c1 - c0) + (time.process_time() - c2)
            break
        if not (have < want).any():
            buffers.verify()  # the end of the scenario: the last composition's reused inputs, compared once
        hs += (t1 - t0) + (time.perf_counter() - t2)
        hc += (c1 - c0) + (time.process_time() - c2)
    summary = ScenarioSummary(scn.name, scn.vocab_size, len(scn.templates), reqs, calls, ks, hs, scn.skipped, kc, hc)
    return TreeScenarioRecord(scn, records, found, summary)


def planned_tree_tests(scenarios: list[TreeScenario], method: str) -> list[tuple[TreeScenario, TreeTemplate, int, float]]:
    """The check's tests, known before any call: (scenario, template, node, expected reach) with reach >= MIN_PLANNED."""
    planned: list[tuple[TreeScenario, TreeTemplate, int, float]] = []
    for scn in scenarios:
        for t in scn.templates:
            if t.boundary:
                continue
            reach = reach_probabilities(t, method) * scn.copies(t)
            planned += [(scn, t, node, float(reach[node])) for node in range(t.num_nodes) if reach[node] >= MIN_PLANNED]
    return planned


def tree_tests(records: list[TreeScenarioRecord], planned: list[tuple[TreeScenario, TreeTemplate, int, float]], *,
               tv_alpha: float) -> list[KernelTest]:
    """The planned node tests on collected records (records may hold a slice of a larger collection)."""
    by_name = {(r.scenario.name, name): rec for r in records for name, rec in r.records.items()}
    tests: list[KernelTest] = []
    for scn, t, node, expected in planned:
        rec = by_name[(scn.name, t.name)]
        path = np.concatenate(rec.paths)
        tok = np.concatenate(rec.tokens)
        ok = path[:, 0] != -2
        copies = scn.copies(t)
        unread = max(0, copies - int(np.count_nonzero(ok)))  # unreadable rows, and requests of raised calls
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
                      features=features, requests=copies, unread=unread)
        if labels.size == 0:
            tests.append(KernelTest(n=0, pvalue=1.0, statistic=0.0, tv=0.0, tv_upper=1.0, tv_lower=None,
                                    support_violations=0, **common))
            continue
        res = chain_gof(np.bincount(labels, minlength=t.vocab_size), t.law[node], tv_alpha=tv_alpha)
        tests.append(KernelTest(n=res.n, pvalue=res.pvalue, statistic=res.statistic, tv=res.tv,
                                tv_upper=res.tv_upper_bound, tv_lower=None, support_violations=res.support_violations,
                                **common))
    return tests


class TreeLayout(Layout):
    """The tree layout's part of the check skeleton (:class:`~speceq.kernels.check_layout.Layout`): node tests."""

    scenario_type = TreeScenario

    def default_scenarios(self, spec: KernelSpec, *, scale: float, seed: int) -> list[TreeScenario]:
        return default_tree_scenarios(spec, scale=scale, seed=seed)

    def planned(self, scenarios: Sequence[TreeScenario], spec: KernelSpec, *, seed: int) -> int:
        return len(planned_tree_tests(list(scenarios), spec.method))

    def collect(self, kern: Kernel, scenarios: Sequence[TreeScenario], *, seed: int,
                device: str | torch.device) -> list[TreeScenarioRecord]:
        return collect_tree(kern, list(scenarios), seed=seed, device=device)

    def tests(self, records: Sequence[TreeScenarioRecord], spec: KernelSpec, *, seed: int,
              tv_alpha: float) -> list[KernelTest]:
        planned = planned_tree_tests([r.scenario for r in records], spec.method)
        return tree_tests(list(records), planned, tv_alpha=tv_alpha)

    def violations(self, records: Sequence[TreeScenarioRecord]) -> tuple[Violation, ...]:
        found = {key: value for r in records for key, value in r.found.items()}
        return merge([Violation(kind, tpl, count, example) for (kind, tpl), (count, example) in found.items()])

    def summaries(self, records: Sequence[TreeScenarioRecord]) -> list[ScenarioSummary]:
        return [r.summary for r in records]


#: The tree layout's strategy (stateless; one instance serves every check).
TREE = TreeLayout()
