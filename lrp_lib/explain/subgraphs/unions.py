r"""The k-hop subgraphs of many targets as one disjoint union: :func:`k_hop_union` finds them (one breadth-first
search over the graph's edges sorted by receiver, for all targets at once), :func:`with_border` adds the edges
into their outermost nodes, and :func:`union_graph` builds the inputs of a model's pass over their union.
"""
from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

__all__ = ["KHopUnion", "UnionGraph", "k_hop_union", "with_border", "union_graph", "BORDERS"]

#: What a union graph holds of the edges into its outermost nodes (:func:`union_graph`).
BORDERS = ("none", "all", "counted")


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


def _in_edges(frontier: Tensor, n: int, perm: Tensor, rowptr: Tensor, counts: Tensor) -> tuple[Tensor, Tensor]:
    """(position in ``frontier``, edge id) of every in-edge of the keys ``frontier``."""
    node = frontier % n
    c = counts[node]
    total = int(c.sum())
    which = torch.repeat_interleave(torch.arange(frontier.numel(), device=frontier.device), c, output_size=total)
    start = rowptr[node] - (torch.cumsum(c, 0) - c)  # each key's first in-edge, less its first place in the output
    return which, perm[torch.arange(total, device=frontier.device) + start[which]]


def k_hop_union(targets: Tensor, hops: int, src: Tensor, perm: Tensor, rowptr: Tensor, counts: Tensor,
                n: int, border: bool = True) -> KHopUnion:
    """The k-hop subgraphs (upstream) of ``targets`` as one disjoint union: subgraph ``b`` holds every node within
    ``hops`` hops of ``targets[b]``, every edge into a node closer, and apart the border, the edges into the nodes
    ``hops`` hops away (``border=False``: left for :func:`with_border`).  ``perm``/``rowptr``/``counts``: the edges
    sorted by receiver, each receiver's start, how many."""
    empty = torch.zeros(0, dtype=torch.long, device=targets.device)
    frontier = torch.arange(targets.numel(), device=targets.device) * n + targets
    layers, found = [frontier], [(empty, empty)]  # the keys at each depth; found: (place in the layers, edge id)
    for _ in range(hops):
        which, e = _in_edges(frontier, n, perm, rowptr, counts)
        found.append((which + sum(map(len, layers[:-1])), e))
        new = torch.unique((frontier // n)[which] * n + src[e])
        frontier = new[~torch.isin(new, torch.cat(layers))]
        layers.append(frontier)
    keys, order = torch.sort(torch.cat(layers))
    in_keys = torch.empty_like(order).scatter_(0, order, torch.arange(order.numel(), device=order.device))
    depth = torch.cat([torch.full_like(f, d) for d, f in enumerate(layers)])[order]
    receiver = in_keys[torch.cat([which for which, _ in found])]
    union = KHopUnion(keys, depth, keys[receiver] // n, torch.cat([e for _, e in found]), receiver, depth[receiver],
                      empty, empty, empty)
    return with_border(union, hops, perm, rowptr, counts, n) if border else union


def with_border(union: KHopUnion, hops: int, perm: Tensor, rowptr: Tensor, counts: Tensor, n: int) -> KHopUnion:
    """``union`` with its border: the edges into its nodes exactly ``hops`` hops from their target, in the order
    of those nodes' keys."""
    outer = (union.depth == hops).nonzero().view(-1)
    which, e = _in_edges(union.keys[outer], n, perm, rowptr, counts)
    receiver = outer[which]
    return union._replace(border_graph=union.keys[receiver] // n, border_id=e, border_receiver=receiver)


class UnionGraph(NamedTuple):
    """The inputs of one chunk's pass over a union of subgraphs (:func:`union_graph`)."""
    x: Tensor                   #: the union's node features (the stand-ins' zero)
    edge_index: Tensor          #: its edges, as positions in ``x``
    target: Tensor | None       #: the target of each row (None if none was given)
    rows: Tensor                #: the targets' rows
    kwargs: dict                #: the edge-level arguments, of the union's edges
    real: Tensor                #: the union's edges whose relevance is reported (not the border's)
    edge_graph: Tensor          #: each union edge's subgraph
    edge_id: Tensor             #: and its id in the full graph (0 for a counted border edge)
    depth: Tensor               #: each row's distance from its target (the stand-ins: the largest long)
    groups: Tensor              #: each row's subgraph
    multiplicity: Tensor | None  #: ``border="counted"``: how many full-graph edges each union edge stands for


def union_graph(x: Tensor, kwargs: dict, target, chunk: Tensor, offset: int, union: KHopUnion, src: Tensor,
                dst: Tensor, n: int, border: str = "all", hops: int | None = None,
                loops: Tensor | None = None, counts: Tensor | None = None) -> UnionGraph:
    """The inputs (a :class:`UnionGraph`) of one chunk's pass on ``union`` (:func:`k_hop_union`), the subgraphs
    of the targets ``chunk`` (theirs: ``target[offset:]`` where ``target`` has one entry per target).  ``border``:
    what it holds of the edges into its outermost nodes (``hops`` hops out; never ``real``, no target reads them):

    * ``"none"``: nothing.
    * ``"all"``: each (``union`` must hold them: :func:`with_border`), sent from its subgraph's zero-feature
      stand-in node (rows after the union's nodes, at the largest depth), a self-loop from its node: every node
      keeps its in-degree.
    * ``"counted"``: per outermost node, one edge from the stand-in for its other in-edges and one self-loop for
      its self-loops, each with its ``multiplicity`` (:mod:`.border_degrees`).  Needs ``hops``, ``loops`` and
      ``counts`` (each node's self-loops and in-edges); takes no edge-level ``kwargs``.

    Raises ValueError for another ``border``, or a ``"counted"`` one without ``hops``, ``loops`` and ``counts`` or
    with edge-level ``kwargs``."""
    if border not in BORDERS:
        raise ValueError(f"border must be one of {BORDERS}, got {border!r}")
    keys, depth, edge_b, edge_e = union.keys, union.depth, union.edge_graph, union.edge_id
    m = keys.numel()
    senders, receivers = torch.searchsorted(keys, edge_b * n + src[edge_e]), union.edge_receiver
    stand_ins, multiplicity = 0, None
    if border == "all":
        border_e, border_r = union.border_id, union.border_receiver
        loop = src[border_e] == dst[border_e]  # a self-loop stays one (GCN counts it once, with its own)
        more = (torch.where(loop, border_r, m + union.border_graph), border_r, union.border_graph, border_e)
    elif border == "counted":
        if hops is None or loops is None or counts is None:
            raise ValueError('border="counted" needs hops, loops and counts')
        if any(v is not None for v in kwargs.values()):
            raise ValueError('border="counted" takes no edge-level kwargs (a counted edge has no attributes)')
        outer = (depth == hops).nonzero().view(-1)
        node, graph = keys[outer] % n, keys[outer] // n
        own, plain = loops[node], counts[node] - loops[node]
        sent, looped = plain > 0, own > 0
        more = (torch.cat([m + graph[sent], outer[looped]]), torch.cat([outer[sent], outer[looped]]),
                torch.cat([graph[sent], graph[looped]]), edge_e.new_zeros(int(sent.sum()) + int(looped.sum())))
        multiplicity = torch.cat([torch.ones_like(edge_e), plain[sent], own[looped]])
    if border != "none":
        senders, receivers, edge_b, edge_e = (torch.cat(ab) for ab in zip((senders, receivers, edge_b, edge_e), more))
        stand_ins = chunk.numel()
    real = torch.arange(edge_e.numel(), device=x.device) < union.edge_id.numel()
    rows = torch.searchsorted(keys, torch.arange(chunk.numel(), device=x.device) * n + chunk)
    pad = (lambda t, fill=0: torch.cat([t, t.new_full((stand_ins, *t.shape[1:]), fill)]))  # the stand-ins' rows
    sub_target = None
    if target is not None and target.numel() == n:
        sub_target = pad(target.view(n, *target.shape[1:])[keys % n])
    elif target is not None:
        sub_target = target.new_zeros(m + stand_ins, *target.shape[1:])
        sub_target[rows] = target[offset:offset + chunk.numel()]
    sub_kwargs = {k: v[edge_e] for k, v in kwargs.items() if v is not None}
    groups = torch.cat([keys // n, torch.arange(stand_ins, device=x.device)])
    return UnionGraph(pad(x[keys % n]), torch.stack([senders, receivers]), sub_target, rows, sub_kwargs, real,
                      edge_b, edge_e, pad(depth, torch.iinfo(torch.long).max), groups, multiplicity)
