"""Every walk, the most relevant walks, node and edge scores from them, and sGNN-LRP's greedy subgraph search, on a
:class:`~lrp_lib.explain.walks.model.WalkModel` ``wm`` (:mod:`lrp_lib.explain.walks` runs them on a model)."""
from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor
from torch_geometric.utils.sparse import index2ptr

__all__ = ["GreedySubgraph", "all_walks", "bounded_walks", "enumerated_walks", "fan_out", "greedy",
           "top_of", "scores_of", "to_edges", "check_alpha"]

#: Walks whose relevance differs by less than this (relative to the largest) are tied: chosen and ordered by the
#: walks themselves (smallest node ids first), not by float rounding, which differs between CPUs.
TIE = 1e-9


def fan_out(ptr: Tensor, k: Tensor) -> tuple[Tensor, Tensor]:
    """Every step into the nodes ``k`` (``ptr``: ``index2ptr`` of the sorted steps' targets): row in ``k``, step id."""
    counts = ptr[k + 1] - ptr[k]
    parent = torch.repeat_interleave(counts)  # (0, ..., 0, 1, ..., 1, ...): each row in k, counts times
    return parent, (ptr[k] - counts.cumsum(0) + counts)[parent] + torch.arange(parent.numel(), device=k.device)


def all_walks(wm, end: Tensor | None = None) -> Tensor:
    """Every walk (W, L+1) ending at ``end`` (node ids; default: the explained node, or every node for a
    graph-level output).  Exponential in depth: for small graphs."""
    n = wm.num_nodes
    if end is None:
        end = torch.tensor([wm.index]) if wm.index is not None else torch.arange(n)
    walks = end.to(wm.x.device).long().view(-1, 1)
    for pairs in reversed(wm.steps):
        parent, pair = fan_out(index2ptr(pairs[1], n), walks[:, 0])
        walks = torch.cat([pairs[0][pair].unsqueeze(1), walks[parent]], dim=1)
    return walks


def enumerated_walks(wm, k: int, signed: bool = False, chunk: int = 1024) -> tuple[Tensor, Tensor]:
    """The exact top k by scoring every walk in batches of ``chunk``, keeping the running top k (the
    reference of :func:`bounded_walks`)."""
    walks, key = all_walks(wm), _key(signed)
    best_w, best_r = walks[:0], wm.x.new_zeros(0)
    for part in walks.split(chunk):
        cand_w, cand_r = torch.cat([best_w, part]), torch.cat([best_r, wm.walk_relevance(part)])
        keep = _near_top(key(cand_r), k)
        best_w, best_r = cand_w[keep], cand_r[keep]
    return select(best_w, best_r, k, key)


def _key(signed: bool):
    """What the search ranks by: R (``signed``) or |R|."""
    return (lambda r: r) if signed else torch.abs


def _near_top(v: Tensor, k: int) -> Tensor:
    """The positions of the values within :data:`TIE` of the k largest or above (all if at most k)."""
    if v.numel() <= k:
        return torch.arange(v.numel(), device=v.device)
    kth = v.topk(k).values[-1]
    return (v >= kth - TIE * v.abs().max()).nonzero().view(-1)


def select(walks: Tensor, rel: Tensor, k: int, key) -> tuple[Tensor, Tensor]:
    """The k walks of largest ``key(rel)``, by decreasing key; keys within :data:`TIE` of each other
    (relative to the largest) are tied and ordered by the walk, column by column."""
    if rel.numel() == 0:
        return walks, rel
    v = key(rel)
    q = torch.round(v / (TIE * float(v.abs().max()) or 1.0))
    # lexicographic by the walk (the rank of its row among the sorted unique rows), then by the tied key
    order = torch.unique(walks, dim=0, return_inverse=True)[1].argsort(stable=True)
    order = order[(-q[order]).argsort(stable=True)][:k]
    return walks[order], rel[order]


def _expand(wm, t: int, walks: Tensor, a: Tensor) -> tuple[Tensor, Tensor]:
    """Children at time t-1 of suffixes whose first node (column t) has state a at time t."""
    alg = wm.algebra
    src, _, ptr, _ = alg.pairs[t]
    v, s = alg.back(t, walks[:, t], a)
    parent, pair = fan_out(ptr, walks[:, t])
    child = walks[parent]  # (a copy: advanced indexing)
    child[:, t - 1] = src[pair]
    return child, alg.child(t, pair, v[parent], None if s is None else s[parent])


def _finish(wm, walks: Tensor, a: Tensor, k: int, key) -> tuple[Tensor, Tensor]:
    """The k best complete walks (by decreasing ``key`` of their relevance) from suffixes at time 1 (states a):
    per end node u of step 1, one product of the suffixes' states with the prefix vectors of the steps into u."""
    alg = wm.algebra
    src, _, ptr, _ = alg.pairs[1]
    order = walks[:, 1].argsort(stable=True)
    walks, a = walks[order], a[order]
    k_ = walks[:, 1]
    uniq, counts = torch.unique_consecutive(k_, return_counts=True)
    at = ptr.tolist()
    rel = [aa @ alg.first_step[at[u]:at[u + 1]].t() for u, aa in zip(uniq.tolist(), a.split(counts.tolist()))]
    rel = torch.cat([r.reshape(-1) for r in rel]) if rel else a.new_zeros(0)
    parent, pair = fan_out(ptr, k_)
    best = _near_top(key(rel), k)
    child = walks[parent[best]]
    child[:, 0] = src[pair[best]]
    return select(child, rel[best], k, key)


def _ub(bounds, t: int, walks: Tensor, a: Tensor, signed: bool) -> Tensor:
    """Upper bound of |R| (R if ``signed``) over every completion of the suffixes (exact at t = 0)."""
    lo, hi = (b[walks[:, t]] for b in bounds[t])
    top = torch.maximum(lo * a, hi * a).sum(-1)
    return top if signed else torch.maximum(top, -torch.minimum(lo * a, hi * a).sum(-1))


def bounded_walks(wm, k: int, signed: bool = False, beam: int | None = None) -> tuple[Tensor, Tensor]:
    """The exact top k by branch and bound from the output side (see :func:`~lrp_lib.explain.walks.top_walks`)."""
    bounds, key, beam = wm.algebra.bounds(), _key(signed), beam or max(8 * k, 64)
    ends = (torch.tensor([wm.index]) if wm.index is not None else torch.arange(wm.num_nodes)).to(wm.x.device)

    def search(keep):
        """Expand the suffixes that ``keep`` picks by their bounds down to time 1, which _finish scores exactly;
        from the suffixes (j_L) of length one, as walks padded with -1, and their states at time L."""
        walks, a = torch.nn.functional.pad(ends.view(-1, 1), (wm.depth, 0), value=-1), wm.algebra.a_out[ends]
        for t in range(wm.depth, 1, -1):
            pick = keep(_ub(bounds, t, walks, a, signed))
            walks, a = _expand(wm, t, walks[pick], a[pick])
        return _finish(wm, walks, a, k, key)
    _, rel = search(lambda ub: ub.topk(beam).indices if ub.numel() > beam else slice(None))  # 1. a beam pass
    tau = rel.new_tensor(float("-inf"))
    if rel.numel() >= k:
        tau = key(rel).topk(k).values[-1]
        scale = tau.abs() + key(rel).abs().max()  # rounding's margin, and the walks tied with the k-th
        tau = tau - max(1e3 * torch.finfo(rel.dtype).eps, TIE) * scale
    walks, rel = search(lambda ub: ub >= tau)     # 2. branch and bound with the beam's threshold
    return walks, rel.detach()


def top_of(wm, k: int, beam: int | None = None, signed: bool = False) -> tuple[Tensor, Tensor]:
    """:func:`~lrp_lib.explain.walks.top_walks` on a recorded model: :func:`bounded_walks` where the
    model decomposes (:mod:`lrp_lib.explain.walks.algebra`), else :func:`enumerated_walks`."""
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"k must be an int >= 1 (the number of walks to return), got {k!r}")
    if beam is not None and (isinstance(beam, bool) or not isinstance(beam, int) or beam < 1):
        raise ValueError(f"beam must be an int >= 1 (the width of the first pass, which only sets the "
                         f"search's threshold: the result is exact for every width), got {beam!r}")
    if not isinstance(signed, bool):
        raise TypeError(f"signed must be True or False, got {signed!r}")
    return bounded_walks(wm, k, signed, beam) if wm.algebra is not None else enumerated_walks(wm, k, signed)


def scores_of(wm, k: int, signed: bool = True, beam: int | None = None) -> tuple[Tensor, Tensor]:
    """:func:`~lrp_lib.explain.walks.walk_scores` on a recorded model, in global node ids (per type: by
    :meth:`~lrp_lib.explain.walks.hetero.HeteroWalkModel.walk_scores`)."""
    walks, rel = top_of(wm, k, beam, signed)
    value, n, length = rel if signed else rel.abs(), wm.num_nodes, walks.shape[1]
    node = value.new_zeros(n).index_add_(0, walks.reshape(-1), value.repeat_interleave(length))
    edge_key = wm.edge_index[0] * n + wm.edge_index[1]
    step_key = (walks[:, :-1] * n + walks[:, 1:]).reshape(-1)
    return node, to_edges(edge_key, step_key, value.repeat_interleave(length - 1))


def to_edges(edge_key: Tensor, step_key: Tensor, value: Tensor) -> Tensor:
    """Per edge (its key in ``edge_key``), the sum of ``value`` over the steps with that key
    (``step_key``), split evenly between the parallel copies of the edge."""
    uniq, inverse, copies = torch.unique(edge_key, sorted=True, return_inverse=True, return_counts=True)
    if uniq.numel() == 0:
        return value.new_zeros(0)
    pos = torch.searchsorted(uniq, step_key).clamp(max=uniq.numel() - 1)
    found = uniq[pos] == step_key
    per_key = value.new_zeros(uniq.numel()).index_add_(0, pos[found], value[found])
    return (per_key / copies.to(value.dtype))[inverse]


class GreedySubgraph(NamedTuple):
    """What :func:`~lrp_lib.explain.walks.greedy_subgraph` returns."""
    order: Tensor       #: (size,) LongTensor: the nodes in the order the search adds them
    scores: Tensor      #: (N,) node scores for AUROC: N - i for the i-th added node (i from 0), 0 if never added
    relevance: Tensor   #: (size,) the (alpha-)subgraph relevance of the first i + 1 nodes of ``order``


def greedy(wm, size: int | None = None, alpha: float = 0.0) -> GreedySubgraph:
    """:func:`~lrp_lib.explain.walks.greedy_subgraph` on a recorded model."""
    n, device = wm.num_nodes, wm.x.device
    wm.algebra  # built once here: the search makes one weighted query per step
    size = n if size is None else size
    if isinstance(size, bool) or not isinstance(size, int) or not 1 <= size <= n:
        raise ValueError(f"size must be an int in 1..{n} (how many of the graph's {n} nodes the search adds) "
                         f"or None (all), got {size!r}")
    chosen, order, rels = torch.zeros(n, dtype=torch.bool, device=device), [], []
    for _ in range(size):
        cand = (~chosen).nonzero().view(-1)
        rel = wm.subgraph_relevance(chosen | torch.nn.functional.one_hot(cand, n).bool(), alpha)
        tol = 16 * torch.finfo(rel.dtype).eps * float(rel.abs().max())
        best = int((rel >= rel.max() - tol).nonzero()[0, 0])
        chosen[cand[best]] = True
        order.append(cand[best])
        rels.append(rel[best])
    order_t = torch.stack(order)
    scores = torch.zeros(n, dtype=wm.x.dtype, device=device)
    scores[order_t] = (n - torch.arange(size, device=device)).to(wm.x.dtype)
    return GreedySubgraph(order_t, scores, torch.stack(rels).detach())


def check_alpha(alpha) -> float:
    if isinstance(alpha, Tensor) and alpha.numel() == 1:
        alpha = float(alpha)
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not 0 <= float(alpha) <= 1:
        raise ValueError(f"alpha must be a number in [0, 1] (the weight of each position of a walk outside the "
                         f"subgraph), got {alpha!r}")
    return float(alpha)
