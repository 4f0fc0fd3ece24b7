"""A token-tree verification kernel (target-only, as SGLang / EAGLE), wrapped for speceq's kernel check."""

import torch

from speceq.kernels import Outcome, kernel


def verify_tree(candidates, first_child, next_sibling, target_probs, coins, final_coins, keep_rejected=False):
    """Your kernel: candidates [B, N] (node 0 the root), first child / next sibling [B, N] (-1: none), target
    probs [B, N, V] (the law after each node), one coin per node [B, N], final coins [B].

    Returns the accepted nodes [B, N] (-1 padded) and the tokens [B, N]: the accepted path's tokens, then one
    token drawn from the target law at the last accepted node without its children's tokens, then -1.
    """
    b, n = candidates.shape
    rows = torch.arange(b, device=candidates.device)
    node = torch.zeros(b, dtype=torch.long, device=rows.device)
    depth = torch.zeros_like(node)
    path = torch.full((b, n), -1, dtype=torch.long, device=rows.device)
    walking = torch.ones(b, dtype=torch.bool, device=rows.device)
    for _ in range(n - 1):  # one tree level per step
        child, chosen = first_child[rows, node], torch.full_like(node, -1)
        mass = torch.zeros(b, dtype=torch.float64, device=rows.device)
        for _ in range(n - 1):  # the children in order: take the first whose cumulative target mass passes the coin
            live = walking & (child >= 0) & (chosen < 0)
            c = child.clamp(min=0)
            mass = mass + torch.where(live, target_probs[rows, node, candidates[rows, c]].double(), 0.0)
            hit = live & (coins[rows, node] < mass)
            chosen = torch.where(hit, c, chosen)
            child = torch.where(live & ~hit, next_sibling[rows, c], -1)
        walking &= chosen >= 0
        path[rows[walking], depth[walking]] = chosen[walking]
        depth, node = depth + walking.long(), torch.where(walking, chosen, node)
    law = target_probs[rows, node].clone()
    child = first_child[rows, node]
    while not keep_rejected and bool((child >= 0).any()):  # the children tried at the last node were rejected
        has = (child >= 0).nonzero()[:, 0]
        law[has, candidates[has, child[has]]] = 0.0
        child[has] = next_sibling[has, child[has]]
    law = torch.where(law.sum(1, keepdim=True) > 0, law, target_probs[rows, node])
    cdf = law.double().cumsum(1)
    final = torch.searchsorted(cdf, (final_coins * cdf[:, -1])[:, None], right=True)[:, 0]  # inverse CDF
    tokens = torch.where(path >= 0, candidates.gather(1, path.clamp(min=0)), -1)
    tokens[rows, depth] = final.clamp(max=law.shape[1] - 1)
    return path, tokens


@kernel(layout="tree", method="target-only", uniforms=True, max_draft=7)
def my_kernel(req):
    path, tokens = verify_tree(req.tokens, req.first_child, req.next_sibling, req.target_probs, req.uniforms,
                               req.sample_uniforms)
    return Outcome(tokens=tokens, accepted_nodes=path)


@kernel(layout="tree", method="target-only", uniforms=True, max_draft=7)
def my_buggy_kernel(req):  # the final token drawn from the full target law: a rejected child's token can come back
    path, tokens = verify_tree(req.tokens, req.first_child, req.next_sibling, req.target_probs, req.uniforms,
                               req.sample_uniforms, keep_rejected=True)
    return Outcome(tokens=tokens, accepted_nodes=path)
