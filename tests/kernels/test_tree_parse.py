"""The vectorised tree build and parse agree with the per-request versions they replaced.

``parse_tree_outcome`` reads a whole call at once (and ``parse_tree_calls`` several: the
collection's way); ``per_request_parse`` below is the former loop over requests, kept as the
oracle. Both read the same random, partly corrupted kernel outputs (paths off the tree,
interleaved -1, ids out of range, tokens after the final one, tokens of probability 0), exactly
[B, N] or wider with -1 padding, and must give the same accepted paths, tokens and violation
counts and examples, in the same order. Rows that break only draft-mismatch or zero-probability
keep their path and tokens (they are readable); the others are set to -2.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from speceq.kernels.contract import Outcome
from speceq.kernels.trees import (
    TreeTables,
    build_tree_request,
    children,
    default_tree_scenarios,
    parse_tree_calls,
    parse_tree_outcome,
    read_tree_outcome,
    reference_tree_kernel,
    tree_arrays,
)


def per_request_parse(tok: np.ndarray, path: np.ndarray, tokens_in: np.ndarray, slots: np.ndarray, scn,  # noqa: ANN001
                      found: dict) -> tuple[np.ndarray, np.ndarray]:
    b, n = tokens_in.shape
    v = scn.vocab_size
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
                flag("draft-mismatch", r, text)  # flagged, but the row stays readable (not dropped)
            elif t.law[prev, emitted[depth]] == 0 or any(t.law[t.parents[c], tokens_in[r, c]] == 0 for c in nodes):
                flag("zero-probability", r, text)  # flagged, but the row stays readable (not dropped)
        if not ok:
            path[r] = -2
            tok[r] = -2
    return path[:, :n], tok[:, :n]


def corrupt(tok: np.ndarray, path: np.ndarray, v: int, n: int, rng: np.random.Generator) -> None:
    b = tok.shape[0]
    for _ in range(b // 3):
        r = int(rng.integers(b))
        kind = int(rng.integers(7))
        j = int(rng.integers(tok.shape[1]))
        if kind == 0:
            path[r, int(rng.integers(path.shape[1]))] = int(rng.integers(-3, n + 2))
        elif kind == 1:
            tok[r, j] = int(rng.integers(-3, v + 2))
        elif kind == 2:
            tok[r, j] = int(rng.integers(v))
        elif kind == 3:
            path[r, :] = -1
        elif kind == 4:
            tok[r, j] = -1
        elif kind == 5:
            path[r, j % path.shape[1]] = -1
        else:  # the final token set to the vocabulary size (the first id out of range)
            final = int((path[r] >= 0).sum())
            tok[r, final] = v


def _outputs(tok: np.ndarray, path: np.ndarray, shape: str) -> tuple[np.ndarray, np.ndarray]:
    """The kernel's outputs as a kernel may return them: exactly [B, N], or wider, -1 padded."""
    if shape == "exact":
        return tok.copy(), path.copy()
    if shape == "wide":  # tokens wider than N
        return np.pad(tok, ((0, 0), (0, 2)), constant_values=-1), path.copy()
    # both wider than N, and the path one column narrower than the tokens
    return np.pad(tok, ((0, 0), (0, 3)), constant_values=-1), np.pad(path, ((0, 0), (0, 2)), constant_values=-1)


@pytest.mark.parametrize("shape", ["exact", "wide", "both-wide"])
@pytest.mark.parametrize("method", ["target-only", "multi-draft"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_vectorised_parse_equals_per_request(method: str, seed: int, shape: str) -> None:
    kern = reference_tree_kernel(method)
    rng = np.random.default_rng(seed)
    checked = clean = 0
    for scn in default_tree_scenarios(kern.spec, scale=0.05, seed=seed):
        if scn.vocab_size > 100:
            continue
        tables = TreeTables(scn, torch.device("cpu"))
        slots = rng.permutation(np.repeat(np.arange(len(scn.templates)), 40))
        req, toks = build_tree_request(scn, tables, slots, method, True, rng, torch.device("cpu"))
        out = kern(req)
        tok, path = _outputs(out.tokens.numpy(), out.accepted_nodes.numpy(), shape)
        corrupt(tok, path, scn.vocab_size, tables.nodes, rng)
        expected_found: dict = {}
        got_found: dict = {}
        want = per_request_parse(tok.copy(), path.copy(), toks, slots, scn, expected_found)
        got = parse_tree_outcome(Outcome(tokens=tok, accepted_nodes=path), toks, slots, scn, tables, got_found)
        np.testing.assert_array_equal(got[0], want[0])
        np.testing.assert_array_equal(got[1], want[1])
        assert got[0].shape == got[1].shape == toks.shape
        assert got_found == expected_found  # the same counts and examples
        kinds = ["tree-path", "padding", "id-range", "draft-mismatch", "zero-probability"]
        names = [f"{scn.name}/{t.name}" for t in scn.templates]
        order = [(kinds.index(kind), names.index(tpl)) for kind, tpl in got_found]
        assert order == sorted(order)  # by invariant, then by template, as the collection has always listed them
        checked += sum(count for count, _ in expected_found.values())
        clean += int((want[0][:, 0] != -2).sum())
    assert checked > 20 and clean > 100  # the corruptions reached the invariants; most rows are clean


@pytest.mark.parametrize("method", ["target-only", "multi-draft"])
def test_parse_of_several_calls_equals_call_by_call(method: str) -> None:
    """The collection parses calls together: the same rows, values and findings (in order) as one by one."""
    kern = reference_tree_kernel(method)
    rng = np.random.default_rng(11)
    scn = default_tree_scenarios(kern.spec, scale=0.05, seed=4)[0]
    tables = TreeTables(scn, torch.device("cpu"))
    calls, outs = [], []
    for i, (copies, shape) in enumerate([(30, "exact"), (7, "wide"), (30, "exact"), (1, "both-wide")]):
        slots = rng.permutation(np.repeat(np.arange(len(scn.templates)), copies))[: 3 if i == 3 else None]
        req, toks = build_tree_request(scn, tables, slots, method, True, rng, torch.device("cpu"))
        o = kern(req)
        tok, path = _outputs(o.tokens.numpy(), o.accepted_nodes.numpy(), shape)
        corrupt(tok, path, scn.vocab_size, tables.nodes, rng)
        outs.append((Outcome(tokens=tok, accepted_nodes=path), toks, slots))
        calls.append(read_tree_outcome(*outs[-1]))
    one_by_one: dict = {}
    want = [parse_tree_outcome(o, toks, slots, scn, tables, one_by_one) for o, toks, slots in outs]
    together: dict = {}
    path, tok, slots = parse_tree_calls(calls, scn, tables, together)
    np.testing.assert_array_equal(path, np.concatenate([w[0] for w in want]))
    np.testing.assert_array_equal(tok, np.concatenate([w[1] for w in want]))
    np.testing.assert_array_equal(slots, np.concatenate([s for _, _, s in outs]))
    assert list(together.items()) == list(one_by_one.items()) and sum(c for c, _ in together.values()) > 5


def test_build_matches_per_template_tables() -> None:
    """Each request's tree arrays and laws are its template's (padded nodes: -1 and zero rows)."""
    kern = reference_tree_kernel("multi-draft")
    scn = default_tree_scenarios(kern.spec, scale=0.05)[0]
    tables = TreeTables(scn, torch.device("cpu"))
    rng = np.random.default_rng(5)
    slots = rng.permutation(np.repeat(np.arange(len(scn.templates)), 3))
    req, toks = build_tree_request(scn, tables, slots, "multi-draft", True, rng, torch.device("cpu"))
    for r, s in enumerate(slots):
        t = scn.templates[s]
        m = t.num_nodes
        f, nx, _ = tree_arrays(t.parents)
        assert req.first_child[r, :m].tolist() == f.tolist() and (req.first_child[r, m:] == -1).all()
        assert req.next_sibling[r, :m].tolist() == nx.tolist()
        np.testing.assert_array_equal(req.target_probs[r, :m].numpy(), t.law.astype(np.float32))
        np.testing.assert_array_equal(req.draft_probs[r, :m].numpy(), t.draft32)
        assert (req.target_probs[r, m:] == 0).all()
        for c in range(1, m):  # drawn from the parent's draft law: positive probability there
            assert t.draft[t.parents[c], toks[r, c]] > 0
