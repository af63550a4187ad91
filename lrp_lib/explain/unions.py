r"""The k-hop subgraphs of many targets as one disjoint union: :func:`k_hop_union` finds them (one
breadth-first search over the graph's edges sorted by receiver, for all targets at once), and
:func:`union_graph` builds the inputs of a model's pass over their union.
"""
from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

__all__ = ["KHopUnion", "k_hop_union", "union_graph"]


class KHopUnion(NamedTuple):
    """The k-hop subgraphs of targets ``0 .. B-1`` (see :func:`k_hop_union`)."""
    keys: Tensor             #: sorted keys ``b * n + node`` of the nodes of subgraph ``b``
    depth: Tensor            #: each key's distance from its target, in hops (0 .. hops)
    edge_graph: Tensor       #: for each edge into a node closer than ``hops``: its subgraph,
    edge_id: Tensor          #: its id in the full graph,
    edge_receiver: Tensor    #: the position of its receiver in ``keys``
    edge_depth: Tensor       #: and its receiver's depth
    border_graph: Tensor     #: for each edge into a node exactly ``hops`` away: its subgraph,
    border_id: Tensor        #: its id in the full graph
    border_receiver: Tensor  #: and the position of its receiver in ``keys``


def _in_edges(frontier: Tensor, n: int, perm: Tensor, rowptr: Tensor, counts: Tensor):
    """(position in ``frontier``, edge id) of every in-edge of the keys ``frontier``; None if none."""
    node = frontier % n
    c = counts[node]
    total = int(c.sum())
    if total == 0:
        return None
    which = torch.repeat_interleave(torch.arange(frontier.numel(), device=frontier.device), c, output_size=total)
    within = torch.arange(total, device=frontier.device) - \
        torch.repeat_interleave(torch.cumsum(c, 0) - c, c, output_size=total)
    return which, perm[rowptr[node][which] + within]


def k_hop_union(targets: Tensor, hops: int, src: Tensor, perm: Tensor, rowptr: Tensor, counts: Tensor,
                n: int) -> KHopUnion:
    """The k-hop subgraphs (upstream, as messages flow) of ``targets``, as one disjoint union
    (:class:`KHopUnion`), found by one breadth-first search for all of them: subgraph ``b`` (of
    ``targets[b]``) holds every node within ``hops`` hops of it, every edge into a node fewer than
    ``hops`` hops away, and apart, the edges into the nodes exactly ``hops`` hops away (the
    border).  ``perm``/``rowptr``/``counts``: the edges sorted by receiver, where each receiver's
    start, how many."""
    empty = torch.zeros(0, dtype=torch.long, device=targets.device)
    frontier = torch.arange(targets.numel(), device=targets.device) * n + targets
    layers, found = [frontier], []  # found: (step, position in the frontier, edge id)
    visited = frontier
    for step in range(hops):
        edges = _in_edges(frontier, n, perm, rowptr, counts)
        if edges is None:
            frontier = empty
            break
        which, e = edges
        found.append((step, which, e))
        new = torch.unique((frontier // n)[which] * n + src[e])
        frontier = new[~torch.isin(new, visited)]
        visited = torch.cat([visited, frontier])
        layers.append(frontier)
    keys, order = torch.sort(visited)
    place = torch.empty_like(order)
    place[order] = torch.arange(order.numel(), device=order.device)  # the position in keys of each visited
    starts = [0]
    for layer in layers:
        starts.append(starts[-1] + layer.numel())
    depth = torch.cat([torch.full_like(f, d) for d, f in enumerate(layers)])[order]

    def located(step, which, e):  # (subgraph, edge id, receiver's position in keys)
        receiver = place[starts[step] + which]
        return keys[receiver] // n, e, receiver

    parts = [located(step, which, e) + (torch.full_like(e, step),) for step, which, e in found]
    cat = (lambda i: torch.cat([p[i] for p in parts]) if parts else empty)
    border = (empty, empty, empty)
    if frontier.numel() and len(layers) == hops + 1:
        edges = _in_edges(frontier, n, perm, rowptr, counts)
        if edges is not None:
            border = located(hops, *edges)
    return KHopUnion(keys, depth, cat(0), cat(1), cat(2), cat(3), *border)


def union_graph(x: Tensor, kwargs: dict, target, chunk: Tensor, offset: int, union: KHopUnion, src: Tensor,
                dst: Tensor, n: int, keep_border: bool):
    """The inputs of one chunk's pass on the disjoint union ``union`` (:func:`k_hop_union`):
    ``(x, edge_index, target, rows, kwargs, real, edge_graph, edge_id, depth, groups)`` of the union
    graph, with ``rows`` the targets' rows, ``real`` the union's edges whose relevance is reported
    (``edge_graph``, ``edge_id``: for each union edge, its subgraph and its id in the full graph), ``depth`` each union node's distance from its target and ``groups`` its subgraph.

    With ``keep_border`` the edges into the outermost nodes are kept, each sent from the one
    zero-feature stand-in node of its subgraph (rows after the union's nodes, at the largest
    depth), a self-loop from its node, so that every node keeps its in-degree (GCN normalises
    messages by the sender's degree, which it counts at the receivers, a self-loop once); what they carry reaches only the outermost nodes'
    later layers, which the targets do not depend on, so their relevance is zero and they are not
    among the ``real`` edges.  Without it they are left
    out, and so are the stand-ins."""
    keys, depth, edge_b, edge_e = union.keys, union.depth, union.edge_graph, union.edge_id
    m = keys.numel()
    senders = torch.searchsorted(keys, edge_b * n + src[edge_e])
    receivers = union.edge_receiver
    real = torch.ones(edge_b.numel(), dtype=torch.bool, device=x.device)
    stand_ins = 0
    if keep_border:
        border_b, border_e, border_r = union.border_graph, union.border_id, union.border_receiver
        loop = src[border_e] == dst[border_e]  # a self-loop stays one (GCN counts it once, with its own)
        senders = torch.cat([senders, torch.where(loop, border_r, m + border_b)])
        receivers = torch.cat([receivers, border_r])
        edge_b, edge_e = torch.cat([edge_b, border_b]), torch.cat([edge_e, border_e])
        real = torch.cat([real, torch.zeros_like(border_b, dtype=torch.bool)])
        stand_ins = chunk.numel()
    sub_edges = torch.stack([senders, receivers])
    rows = torch.searchsorted(keys, torch.arange(chunk.numel(), device=x.device) * n + chunk)
    sub_target = None
    if target is not None:
        if target.numel() == n:
            sub_target = target.view(n, *target.shape[1:])[keys % n]
        else:
            sub_target = target.new_zeros(m, *target.shape[1:])
            sub_target[rows] = target[offset:offset + chunk.numel()]
        sub_target = torch.cat([sub_target, sub_target.new_zeros(stand_ins, *sub_target.shape[1:])])
    sub_kwargs = {k: v[edge_e] for k, v in kwargs.items() if v is not None}
    sub_x = torch.cat([x[keys % n], x.new_zeros(stand_ins, *x.shape[1:])])
    sub_depth = torch.cat([depth, depth.new_full((stand_ins,), torch.iinfo(torch.long).max)])
    groups = torch.cat([keys // n, torch.arange(stand_ins, device=x.device)])
    return sub_x, sub_edges, sub_target, rows, sub_kwargs, real, edge_b, edge_e, sub_depth, groups
