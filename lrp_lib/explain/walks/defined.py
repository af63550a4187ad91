r"""Where GNN-LRP's walks are defined, checked on the recorded relevance graph.

A walk moves between nodes only along the messages of ``propagate`` calls; everything else (linear maps,
activations, root weights, residuals, norms with fixed statistics such as ``BatchNorm`` in eval or
``LayerNorm(mode='node')``) must keep each node's relevance on its row.  :class:`WalksUndefinedError` (raised by
:class:`~lrp_lib.explain.walks.model.WalkModel`, naming the layer) refuses a model where

* a piece between two cuts moves relevance between rows: a norm over a graph's nodes (``GraphNorm``, PyG's
  ``LayerNorm`` in its default ``mode='graph'``), attention over all nodes (``GPSConv``), a virtual node;
* a ``propagate`` (messages, aggregation, ``update``) sends relevance from a receiver :math:`k` to a row other than
  its senders along the call's ``edge_index`` and :math:`k` itself;
* for a node-level output, relevance leaves the explained node's row after the last ``propagate``;
* a ``propagate`` runs over another node set than the input graph's (``GraphUNet``'s pooling, ``AttentiveFP``'s
  readout; raised while recording, :mod:`~lrp_lib.explain.walks.graph`).

Checked by probes, not module types: per piece, the backward of a random relevance :math:`G` and of :math:`D_w G`
(rows scaled by random :math:`w`) must differ by :math:`D_w`, up to :math:`\sqrt{\varepsilon}` relative.  A
``propagate`` is probed by 8 random colour classes of its receivers (one batched backward): relevance may land only
on their senders and themselves (a move between two nodes whose receivers share a class is missed: probability
about 1/8 per pair).  A graph-level output may spread its relevance over the nodes freely (the walks' last factor).
"""
from __future__ import annotations

import torch
from torch import Tensor
from torch_geometric.utils import add_self_loops

__all__ = ["WalksUndefinedError", "check_walks_defined"]


class WalksUndefinedError(ValueError):
    """GNN-LRP's walks are not defined for this model (the message names the layer and why)."""


def _rows(g: Tensor, dim: int, batched: bool) -> Tensor:
    """g as ([B,] N, rest): the node dimension moved after the batch dimension, the rest flattened."""
    b = int(batched)
    g = g.movedim(dim + b, b)
    return g.reshape(*g.shape[:b + 1], -1)


def global_rows(r: Tensor, c, n: int, dim: int = 0) -> Tensor:
    """Per-row values ``r`` of cut ``c`` (rows along ``dim``) at their global node ids (``n`` along ``dim``): a
    heterogeneous cut holds one node type's rows (its offset and count)."""
    if c.count is None:
        return r
    out = r.new_zeros(*r.shape[:dim], n, *r.shape[dim + 1:])
    return out.index_copy_(dim, torch.arange(c.offset, c.offset + c.count, device=r.device), r)


def _reached(graph, dims: list, source: Tensor, i: int, grad: Tensor, batched: bool) -> list:
    """(m, gradient) of each cut m < i with rows that the backward of ``grad`` from ``source`` reaches."""
    got = graph.grad(source, [c.leaf for c in graph.cuts[:i]], grad, batched)
    return [(m, gr.detach()) for m, gr in enumerate(got) if gr is not None and dims[m] is not None]


def _label(graph, c) -> str:
    layer = graph.names[c.layer - 1] if 0 < c.layer <= len(graph.names) else "the input"
    return {"input": f"the input of '{layer}''s messages", "output": f"the output of '{layer}''s propagate",
            "module": f"the input of '{layer}'"}.get(c.kind, "x")


def check_walks_defined(graph, start: Tensor, index: int | None) -> None:
    """Raise :class:`WalksUndefinedError` where relevance moves between nodes outside message
    passing (module docstring).  ``graph``: the recorded :class:`~lrp_lib.explain.walks.graph.WalkGraph`;
    ``start``: the output's relevance; ``index``: the explained node (node level) or None."""
    cuts, n = graph.cuts, graph.num_nodes
    dims = [None if c.kind == "attr" or c.leaf.dim() == 0 else c.node_dim for c in cuts]
    tol = float(torch.finfo(start.dtype).eps) ** 0.5 if start.is_floating_point() else 1e-6
    gen = torch.Generator().manual_seed(0)
    # the head: for a node-level output the relevance must stay on the explained node's row
    if index is not None:
        for m, gr in _reached(graph, dims, graph.output, len(cuts), graph.seed(start), False):
            rows = global_rows(_rows(gr, dims[m], False).abs().sum(1), cuts[m], n)
            off = float(rows.sum() - rows[index])
            if off > tol * max(float(rows.sum()), float(rows.max()), 1e-300):
                raise WalksUndefinedError(
                    f"walks are not defined for this model: its head (after the last message-passing layer) "
                    f"moves the explained node {index}'s relevance to other nodes' rows of {_label(graph, cuts[m])} "
                    f"(a global operation: attention over all nodes, a graph-wise norm, a virtual node), not along "
                    f"a message; a walk ends at the explained node, so that relevance belongs to no walk")
    # every piece between cuts: rows stay rows, a propagate's relevance goes along its edges
    for i, c in enumerate(cuts):
        if c.source is None or dims[i] is None:
            continue
        src = c.source
        if c.kind == "output":
            _check_propagate(graph, i, dims, n, tol, gen)
            continue
        G = torch.rand(src.shape, generator=gen, dtype=src.dtype).to(src.device) + 0.5
        w = torch.rand(n, generator=gen, dtype=src.dtype).to(src.device) + 0.5
        own = (w if c.count is None else w[c.offset:c.offset + c.count]).view(-1, *[1] * (src.dim() - 1 - dims[i]))
        for m, gr in _reached(graph, dims, src, i, torch.stack([G, G * own]), True):
            r = _rows(gr, dims[m], True)        # (2, rows, rest)
            cm = cuts[m]
            wm = w if cm.count is None else w[cm.offset:cm.offset + cm.count]
            a, b = r[0] * wm.view(-1, 1), r[1]      # how much of b is not a, relative to the larger
            scale = max(float(a.abs().max()) if a.numel() else 0.0, float(b.abs().max()) if b.numel() else 0.0)
            moved = float((a - b).abs().max()) / scale if scale > 0 else 0.0
            if moved > tol:
                raise WalksUndefinedError(
                    f"walks are not defined for this model: between message-passing steps, the relevance of "
                    f"{_label(graph, c)} reaches {_label(graph, cuts[m])} on other nodes' rows (relative "
                    f"{moved:.2g}): a global operation moves relevance between nodes without a message (a norm "
                    f"over the nodes of a graph such as GraphNorm or LayerNorm(mode='graph'), attention over all "
                    f"nodes, a virtual node); that relevance belongs to no walk")


def _check_propagate(graph, i: int, dims: list, n: int, tol: float, gen: torch.Generator) -> None:
    """Cut ``i`` is a propagate's output: probe its backward by colour classes of the receivers."""
    cuts, c = graph.cuts, graph.cuts[i]
    src, dim = c.source, dims[i]
    classes = min(8, n)
    colour = (torch.randperm(n, generator=gen) % classes).to(src.device)
    senders, receivers = add_self_loops(graph.steps[c.layer - 1].to(src.device), num_nodes=n)[0]
    allowed = torch.zeros(classes, n, dtype=torch.bool, device=src.device)
    allowed[colour[receivers], senders] = True
    own = (colour if c.count is None else colour[c.offset:c.offset + c.count]).view(-1, *[1] * (src.dim() - 1 - dim))
    pick = (own == torch.arange(classes, device=src.device).view(-1, *[1] * src.dim())).to(src.dtype)  # per class
    G = (torch.rand(src.shape, generator=gen, dtype=src.dtype).to(src.device) + 0.5).unsqueeze(0) * pick
    for m, gr in _reached(graph, dims, src, i, G, True):
        mag = global_rows(_rows(gr, dims[m], True).abs().sum(-1), cuts[m], n, 1)   # (classes, N)
        scale = float(mag.max())
        bad = (mag > tol * scale) & ~allowed
        if scale > 0 and bool(bad.any()):
            cls, j = (int(v) for v in bad.nonzero()[0])
            ks = (colour == cls).nonzero().view(-1).tolist()
            raise WalksUndefinedError(
                f"walks are not defined for this model: '{graph.names[c.layer - 1]}''s propagate (messages, "
                f"aggregation and update) sends relevance from its receivers {ks[:6]}{'...' if len(ks) > 6 else ''} "
                f"to node {j} of {_label(graph, cuts[m])}, which is not a sender of theirs along its edge_index "
                f"(an update or a message that reads all nodes); that relevance belongs to no walk")
