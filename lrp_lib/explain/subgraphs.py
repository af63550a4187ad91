"""``per_index=True``: each target node explained over its own k-hop subgraph, many targets per
forward and backward (:func:`explain_per_index`, on the disjoint union of their subgraphs built
by :func:`k_hop_union`)."""
from __future__ import annotations

import builtins
from typing import Callable

import torch
from torch import Tensor, nn
from torch_geometric.explain.config import MaskType
from torch_geometric.nn import MessagePassing

from lrp_lib.explain.inputs import check_inputs

__all__ = ["explain_per_index", "k_hop_union"]


def explain_per_index(relevance: Callable, model: nn.Module, x: Tensor, edge_index: Tensor, *, target, index,
                      num_hops: int | None, chunk_size: int, node_mask_type, edge_mask_type, **kwargs):
    """``per_index=True``: each node of ``index`` explained on its own, over its k-hop subgraph.

    ``relevance(x, edge_index, target, rows, **kwargs)`` explains the rows ``rows`` of a graph in
    one forward and one backward and returns ``(node relevance, edge relevance, output, extras)``
    (:class:`~lrp_lib.explain.explainer.LRPExplainer` gives its own).  Returns ``(node relevance,
    edge relevance, extras)``: the sums over the targets, and in the extras the sparse
    ``node_relevance_per_index`` (and ``edge_relevance_per_index``) and ``bias_relevance`` and
    ``relevance_residual`` for each target, in the order of ``index``.

    The targets of a chunk (``chunk_size``) are explained together on the disjoint union of
    their subgraphs (one forward and one backward per chunk); a subgraph holds every node within
    ``num_hops`` hops upstream and every edge into a node closer than that, which is all that the
    target's output depends on (GCN's normalisation takes the degrees of the full graph).  The
    subgraphs' outputs at the targets are compared with the model's output on the full graph:
    a model that looks further than ``num_hops`` gives an error instead of a wrong explanation.
    """
    check_inputs(model, x, edge_index, **kwargs)
    for name, value in kwargs.items():
        if value is not None and name not in ("edge_weight", "edge_attr"):
            raise ValueError(f"per_index=True takes edge_weight and edge_attr besides x and edge_index, "
                             f"got {name}; explain with per_index=False")
    n = x.shape[0]
    index = torch.as_tensor(index, device=x.device)
    if index.is_floating_point() or index.dtype == torch.bool or index.dim() > 1:
        raise TypeError(f"index must be an int or a 1-D integer tensor of node indices, got "
                        f"{index.dtype} with shape {tuple(index.shape)}")
    index = index.long().view(-1)
    if index.numel() and (int(index.min()) < 0 or int(index.max()) >= n):
        raise ValueError(f"index must contain node indices 0..{n - 1}, got {int(index.min())}..{int(index.max())}")
    hops = num_hops if num_hops is not None else \
        builtins.sum(isinstance(m, MessagePassing) for m in model.modules())
    edge_index = edge_index.long()
    with torch.no_grad():
        expected = model(x, edge_index, **kwargs)
    if target is not None and target.numel() not in (n, index.numel()):
        raise ValueError(f"target has {target.numel()} entries: pass one per node ({n}) or one per index "
                         f"({index.numel()})")
    src, dst = edge_index
    perm = torch.argsort(dst, stable=True)
    counts = torch.bincount(dst, minlength=n)
    rowptr = torch.cumsum(counts, 0) - counts
    nodes, edges, accounts, offset = [], [], [], 0
    for chunk in index.split(chunk_size):
        keys, edge_b, edge_e, border_b, border_e = k_hop_union(chunk, hops, src, perm, rowptr, counts, n)
        node_ids, graph = keys % n, keys // n
        # the edges into the outermost nodes: from inside the subgraph they are kept; from outside,
        # their sender becomes one zero-feature stand-in node per subgraph, so that every node keeps
        # its in-degree (GCN normalises messages by the sender's degree); what the stand-ins send
        # reaches only the outermost nodes' later layers, which the targets do not depend on
        inner = torch.searchsorted(keys, border_b * n + src[border_e]).clamp(max=max(keys.numel() - 1, 0))
        inside = keys[inner] == border_b * n + src[border_e] if keys.numel() else torch.zeros_like(border_b, dtype=torch.bool)
        stand_in = keys.numel() + border_b
        edge_b = torch.cat([edge_b, border_b])
        edge_e = torch.cat([edge_e, border_e])
        senders = torch.cat([torch.searchsorted(keys, edge_b[:edge_b.numel() - border_b.numel()] * n +
                                                src[edge_e[:edge_e.numel() - border_e.numel()]]),
                             torch.where(inside, inner, stand_in)])
        sub_edges = torch.stack([senders, torch.searchsorted(keys, edge_b * n + dst[edge_e])])
        real = torch.cat([torch.ones(edge_b.numel() - border_b.numel(), dtype=torch.bool, device=x.device), inside])
        rows = torch.searchsorted(keys, torch.arange(chunk.numel(), device=x.device) * n + chunk)
        sub_target = None
        if target is not None:
            if target.numel() == n:
                sub_target = target.view(n, *target.shape[1:])[node_ids]
            else:
                sub_target = target.new_zeros(keys.numel(), *target.shape[1:])
                sub_target[rows] = target[offset:offset + chunk.numel()]
        sub_kwargs = {k: v[edge_e] for k, v in kwargs.items() if v is not None}
        sub_x = torch.cat([x[node_ids], x.new_zeros(chunk.numel(), *x.shape[1:])])
        if sub_target is not None:
            sub_target = torch.cat([sub_target, sub_target.new_zeros(chunk.numel(), *sub_target.shape[1:])])
        node_rel, edge_rel, out, extra = relevance(sub_x, sub_edges, sub_target, rows, **sub_kwargs)
        node_rel = node_rel[:keys.numel()]
        if edge_rel is not None:
            edge_rel = edge_rel[real]
        edge_b, edge_e = edge_b[real], edge_e[real]
        want, got = expected[chunk].to(out.dtype), out[rows]
        tol = 1e-4 if out.dtype in (torch.float32, torch.float16, torch.bfloat16) else 1e-9
        if not torch.allclose(got, want, rtol=tol, atol=tol * max(1.0, float(want.abs().max()) if want.numel() else 1.0)):
            raise ValueError(
                f"per_index=True: the targets' {hops}-hop subgraphs do not reproduce the model's output "
                f"(largest difference {float((got - want).abs().max()):.3g}): the model looks further than "
                f"{hops} hops; pass num_hops= the number of message-passing steps of the model")
        accounts.append((extra["bias_relevance"].reshape(-1), extra["relevance_residual"].reshape(-1)))
        nodes.append((graph + offset, node_ids, node_rel))
        edges.append((edge_b + offset, edge_e, edge_rel))
        offset += chunk.numel()
    k = index.numel()
    node_index = torch.cat([torch.stack([g, i]) for g, i, _ in nodes], 1) if nodes else \
        torch.zeros(2, 0, dtype=torch.long, device=x.device)
    node_values = torch.cat([r for _, _, r in nodes]) if nodes else x.new_zeros(0, x.shape[1])
    if node_mask_type not in (MaskType.attributes, MaskType.common_attributes):
        node_values = node_values.sum(-1, keepdim=True)
    node_values = node_values.detach()
    node_rel = node_values.new_zeros(n, node_values.shape[1]).index_add_(0, node_index[1], node_values)
    if node_mask_type == MaskType.common_attributes:
        node_rel = node_rel.sum(0, keepdim=True)
    extra = {"node_relevance_per_index": torch.sparse_coo_tensor(
        node_index, node_values, (k, n, node_values.shape[1]), is_coalesced=True, check_invariants=False)}
    edge_rel = None
    if edge_mask_type is not None:
        edge_index_k = torch.cat([torch.stack([g, e]) for g, e, _ in edges], 1) if edges else \
            torch.zeros(2, 0, dtype=torch.long, device=x.device)
        edge_values = (torch.cat([r for _, _, r in edges]) if edges else x.new_zeros(0)).detach()
        edge_rel = edge_values.new_zeros(edge_index.shape[1]).index_add_(0, edge_index_k[1], edge_values)
        extra["edge_relevance_per_index"] = torch.sparse_coo_tensor(
            edge_index_k, edge_values, (k, edge_index.shape[1])).coalesce()
    if accounts:
        extra["bias_relevance"] = torch.cat([b for b, _ in accounts])
        extra["relevance_residual"] = torch.cat([r for _, r in accounts])
    return node_rel, edge_rel, extra


def k_hop_union(targets: Tensor, hops: int, src: Tensor, perm: Tensor, rowptr: Tensor, counts: Tensor, n: int):
    """The k-hop subgraphs (upstream, as messages flow) of ``targets``, as one disjoint union.

    Returns ``(keys, edge_graph, edge_id, border_graph, border_id)``: the sorted keys ``b * n + node``
    of the nodes of subgraph ``b`` (the subgraph of ``targets[b]``), for each edge of the union its
    subgraph and its id in the full graph (every edge into a node fewer than ``hops`` hops from the
    target), and the same for the edges into the nodes exactly ``hops`` hops away (the border).
    ``perm``/``rowptr``/``counts``: the edges sorted by receiver, where each receiver's start, how many.
    """
    frontier = torch.arange(targets.numel(), device=targets.device) * n + targets
    visited = frontier
    edge_graph, edge_id = [], []
    for _ in range(hops):
        node, graph = frontier % n, frontier // n
        c = counts[node]
        total = int(c.sum())
        if total == 0:
            break
        which = torch.repeat_interleave(torch.arange(frontier.numel(), device=targets.device), c)
        within = torch.arange(total, device=targets.device) - torch.repeat_interleave(torch.cumsum(c, 0) - c, c)
        e = perm[rowptr[node][which] + within]
        g = graph[which]
        edge_graph.append(g)
        edge_id.append(e)
        new = torch.unique(g * n + src[e])
        frontier = new[~torch.isin(new, visited)]
        visited = torch.cat([visited, frontier])
    empty = torch.zeros(0, dtype=torch.long, device=targets.device)
    border_graph, border_id = empty, empty
    if frontier.numel():
        node, graph = frontier % n, frontier // n
        c = counts[node]
        total = int(c.sum())
        if total:
            which = torch.repeat_interleave(torch.arange(frontier.numel(), device=targets.device), c)
            within = torch.arange(total, device=targets.device) - torch.repeat_interleave(torch.cumsum(c, 0) - c, c)
            border_id = perm[rowptr[node][which] + within]
            border_graph = graph[which]
    return (torch.sort(visited).values, torch.cat(edge_graph) if edge_graph else empty,
            torch.cat(edge_id) if edge_id else empty, border_graph, border_id)
