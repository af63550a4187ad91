r"""``per_index=True``: each target node explained over its own k-hop subgraph, many targets per
forward and backward (:func:`explain_per_index`, on the disjoint union of their subgraphs built
by :func:`k_hop_union`), in chunks whose size follows a memory budget (:func:`chunk_bytes`).

Pruning: the edges into the nodes exactly ``num_hops`` hops from a target carry messages that
reach the target only after more than ``num_hops`` message-passing steps, so its output does not
depend on them, unless a layer reads the *sender's* in-degree: GCN's normalisation
:math:`1/\sqrt{\deg(i)\deg(j)}` does.  The subgraph of a model whose message-passing layers are
all of the types in :data:`PRUNABLE` (their message into :math:`i` reads the features of :math:`i`
and :math:`j`, the edge and :math:`i`'s own in-edges, never :math:`j`'s in-degree) leaves those
edges out; any other model keeps them, their senders outside the subgraph replaced by one
zero-feature stand-in node per subgraph, so that every node keeps its in-degree.  Either way the
targets' outputs on the subgraphs are compared with the model's output on the full graph; a pruned
chunk whose outputs differ is explained again with the edges kept.
"""
from __future__ import annotations

import builtins
import threading
from contextlib import contextmanager
from typing import Callable

import torch
from torch import Tensor, nn
from torch_geometric.explain.config import MaskType
from torch_geometric.nn import MessagePassing
from torch_geometric.nn import conv as pyg_conv

from lrp_lib.explain.inputs import check_inputs

__all__ = ["explain_per_index", "k_hop_union", "PRUNABLE", "prunable", "chunk_bytes", "memory_budget",
           "predicted", "PROBE_TARGETS"]

#: How many targets' subgraphs the memory estimate is measured on when the full graph's output is known.
PROBE_TARGETS = 4

_prediction = threading.local()  # the prediction pass of the explainer running in this thread


@contextmanager
def predicted():
    """Inside the block, the last model output that :func:`remember` recorded in this thread is
    kept, so that :func:`explain_per_index` takes the full graph's output from it instead of running the
    model again (:class:`~lrp_lib.explain.explainer.Explainer`: PyG's prediction pass)."""
    previous = getattr(_prediction, "value", None)
    _prediction.value = ()  # in the block, nothing recorded yet
    try:
        yield remember
    finally:
        _prediction.value = previous


def remember(model: nn.Module, args: tuple, kwargs: dict, out) -> None:
    """Record ``out = model(*args, **kwargs)``, computed without autograd in eval mode (inside a
    :func:`predicted` block of this thread; elsewhere nothing is kept)."""
    if getattr(_prediction, "value", None) is not None:
        _prediction.value = (model, args, kwargs, out)


def _known_output(model: nn.Module, x: Tensor, edge_index: Tensor, kwargs: dict) -> Tensor | None:
    """The recorded output of ``model`` on these very inputs (the same tensors), or None."""
    value = getattr(_prediction, "value", None)
    if not value:
        return None
    m, args, kw, out = value
    given = {k: v for k, v in kwargs.items() if v is not None}
    same = (m is model and len(args) == 2 and args[0] is x and args[1] is edge_index and isinstance(out, Tensor)
            and {k: v for k, v in kw.items() if v is not None}.keys() == given.keys()
            and all(kw[k] is v for k, v in given.items()))
    return out if same else None

#: Message-passing layers whose message into node i depends on i's and the sender j's features,
#: the edge's attributes and i's own in-edges (attention softmax, mean, sum), never on j's
#: in-degree.  Exact types: a subclass may override ``message``.
PRUNABLE = tuple(getattr(pyg_conv, name) for name in (
    "GINConv", "GINEConv", "SAGEConv", "GATConv", "GATv2Conv", "GraphConv", "TransformerConv", "EdgeConv",
    "ResGatedGraphConv") if hasattr(pyg_conv, name))


def prunable(model: nn.Module) -> bool:
    """Whether the edges into the outermost hop can be left out of ``model``'s subgraphs: every
    message-passing layer is of a type in :data:`PRUNABLE` (``GCNConv(normalize=False)`` too)."""
    layers = [m for m in model.modules() if isinstance(m, MessagePassing)]
    return bool(layers) and all(type(m) in PRUNABLE or (type(m) is pyg_conv.GCNConv and not m.normalize)
                                for m in layers)


def memory_budget(device: torch.device, fraction: float = 0.25) -> int:
    """``fraction`` of the memory available now: free GPU memory on CUDA, ``MemAvailable`` of
    ``/proc/meminfo`` on the CPU (1 GiB where neither can be read)."""
    if device.type == "cuda":
        return int(torch.cuda.mem_get_info(device)[0] * fraction)
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(int(line.split()[1]) * 1024 * fraction)
    except OSError:
        pass
    return 2**30


def chunk_bytes(model: nn.Module, n: int, forward: Callable[[], Tensor]) -> tuple[Tensor, float, float]:
    """``(forward(), bytes per subgraph node, bytes per subgraph edge)``: the estimated memory of
    one relevance pass (forward and backward) of ``model`` per node and per edge of the graph it
    runs on, from the widths of what ``forward()`` (a forward without autograd on a graph of ``n``
    nodes) computes, seen by module forward hooks and PyG's message hooks.

    Per node: the sum of the widths of every module's node-shaped output (first dimension ``n``);
    per edge: the sum of the message widths of every message-passing layer; both in bytes of the
    output's dtype, times four (the value kept for backward, its relevance, and a temporary of
    each), plus 16 bytes of index per edge."""
    per_node, per_edge, handles = [], [], []

    def on_module(module, args, out):
        if isinstance(out, Tensor) and out.dim() >= 1 and out.shape[0] == n and out.is_floating_point():
            per_node.append(out[0].numel() * out.element_size())

    def on_message(module, args, out):
        if isinstance(out, Tensor) and out.dim() >= 1 and out.shape[0]:
            per_edge.append(out[0].numel() * out.element_size())

    try:
        for m in model.modules():
            handles.append(m.register_forward_hook(on_module))
            if isinstance(m, MessagePassing):
                handles.append(m.register_message_forward_hook(on_message))
        with torch.no_grad():
            out = forward()
    finally:
        for h in handles:
            h.remove()
    return out, 4.0 * builtins.sum(per_node), 4.0 * builtins.sum(per_edge) + 16.0


def explain_per_index(relevance: Callable, model: nn.Module, x: Tensor, edge_index: Tensor, *, target, index,
                      num_hops: int | None, chunk_size: int | None, node_mask_type, edge_mask_type,
                      max_memory: int | None = None, prune: bool | None = None, **kwargs):
    """``per_index=True``: each node of ``index`` explained on its own, over its k-hop subgraph.

    ``relevance(x, edge_index, target, rows, **kwargs)`` explains the rows ``rows`` of a graph in
    one forward and one backward and returns ``(node relevance, edge relevance, output, extras)``
    (:class:`~lrp_lib.explain.explainer.LRPExplainer` gives its own).  Returns ``(node relevance,
    edge relevance, extras)``: the sums over the targets, and in the extras the sparse
    ``node_relevance_per_index`` (and ``edge_relevance_per_index``) and ``bias_relevance`` and
    ``relevance_residual`` for each target, in the order of ``index``.

    The targets of a chunk are explained together on the disjoint union of their subgraphs (one
    forward and one backward per chunk); a subgraph holds every node within ``num_hops`` hops
    upstream and every edge into a node closer than that, which is all that the target's output
    depends on, and, unless the model is :func:`prunable` (``prune=None``; ``prune=False`` never
    prunes), the edges into the outermost nodes (GCN's normalisation takes the degrees of the full
    graph).  A chunk holds as many targets as keep the estimated memory of its pass
    (:func:`chunk_bytes`, measured on the model's forward over the subgraphs of the first
    :data:`PROBE_TARGETS` targets where the full graph's output is known from the explainer's
    prediction pass (:func:`predicted`), else over the full graph, which gives that output) within
    ``max_memory`` bytes (default: :func:`memory_budget`, a quarter of the memory available), at
    most ``chunk_size`` (None: no limit), at least one.  The subgraphs' outputs at the targets are
    compared with the model's output on the full graph: a model that looks further than
    ``num_hops`` gives an error instead of a wrong explanation.
    """
    check_inputs(model, x, edge_index, **kwargs)
    for name, value in kwargs.items():
        if value is not None and name not in ("edge_weight", "edge_attr"):
            raise ValueError(f"per_index=True takes edge_weight and edge_attr besides x and edge_index, "
                             f"got {name}; explain with per_index=False")
    if max_memory is not None and (isinstance(max_memory, bool) or not isinstance(max_memory, int) or max_memory < 1):
        raise ValueError(f"max_memory must be a number of bytes >= 1 or None, got {max_memory!r}")
    if prune not in (None, True, False):
        raise TypeError(f"prune must be None, True or False, got {prune!r}")
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
    if target is not None and target.numel() not in (n, index.numel()):
        raise ValueError(f"target has {target.numel()} entries: pass one per node ({n}) or one per index "
                         f"({index.numel()})")
    expected = _known_output(model, x, edge_index, kwargs) if edge_index.dtype == torch.long else None
    edge_index = edge_index.long()
    src, dst = edge_index
    perm = torch.argsort(dst, stable=True)
    counts = torch.bincount(dst, minlength=n)
    rowptr = torch.cumsum(counts, 0) - counts
    probe = None
    if expected is not None and index.numel():  # the widths measured on a few targets' subgraphs
        keys, edge_b, edge_e = k_hop_union(index[:PROBE_TARGETS], hops, src, perm, rowptr, counts, n)[:3]
        sub_edges = torch.stack([torch.searchsorted(keys, edge_b * n + src[edge_e]),
                                 torch.searchsorted(keys, edge_b * n + dst[edge_e])])
        sub_kwargs = {k: v[edge_e] for k, v in kwargs.items() if v is not None}
        if 0 < edge_e.numel() != keys.numel():  # else a node-shaped output could be an edge-shaped one
            probe = chunk_bytes(model, keys.numel(), lambda: model(x[keys % n], sub_edges, **sub_kwargs))
    if probe is None:  # the full graph's output, and the widths measured on it
        expected, per_node, per_edge = chunk_bytes(model, n, lambda: model(x, edge_index, **kwargs))
    else:
        per_node, per_edge = probe[1:]
    budget = max_memory if max_memory is not None else memory_budget(x.device)
    pruning = prunable(model) if prune is None else prune
    nodes, edges, accounts, offset = [], [], [], 0
    k, per_target = index.numel(), None
    while offset < k:
        size = k - offset if chunk_size is None else min(chunk_size, k - offset)
        if per_target:
            size = max(1, min(size, int(budget // per_target)))
        while True:  # halve the chunk until its estimated memory fits the budget
            chunk = index[offset:offset + size]
            union = k_hop_union(chunk, hops, src, perm, rowptr, counts, n)
            keys, edge_b, _, border_b, _ = union
            estimate = per_node * (keys.numel() + chunk.numel()) + per_edge * (edge_b.numel() + border_b.numel())
            if estimate <= budget or size == 1:
                break
            size = max(1, size // 2)
        per_target = estimate / size
        for keep in ((False, True) if pruning else (True,)):
            graph = union_graph(x, kwargs, target, chunk, offset, union, src, dst, n, keep)
            sub_x, sub_edges, sub_target, rows, sub_kwargs, real, edge_b, edge_e = graph
            node_rel, edge_rel, out, extra = relevance(sub_x, sub_edges, sub_target, rows, **sub_kwargs)
            want, got = expected[chunk].to(out.dtype), out[rows]
            tol = 1e-4 if out.dtype in (torch.float32, torch.float16, torch.bfloat16) else 1e-9
            scale = max(1.0, float(want.abs().max()) if want.numel() else 1.0)
            if torch.allclose(got, want, rtol=tol, atol=tol * scale):
                break
            pruning = False  # the model reads more than the pruned subgraphs hold: keep the edges from now on
        else:
            raise ValueError(
                f"per_index=True: the targets' {hops}-hop subgraphs do not reproduce the model's output "
                f"(largest difference {float((got - want).abs().max()):.3g}): the model looks further than "
                f"{hops} hops; pass num_hops= the number of message-passing steps of the model")
        keys = union[0]
        node_rel = node_rel[:keys.numel()]
        if edge_rel is not None:
            edge_rel = edge_rel[real]
        edge_b, edge_e = edge_b[real], edge_e[real]
        accounts.append((extra["bias_relevance"].reshape(-1), extra["relevance_residual"].reshape(-1)))
        nodes.append((keys // n + offset, keys % n, node_rel))
        edges.append((edge_b + offset, edge_e, edge_rel))
        offset += chunk.numel()
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


def union_graph(x: Tensor, kwargs: dict, target, chunk: Tensor, offset: int, union: tuple, src: Tensor,
                dst: Tensor, n: int, keep_border: bool):
    """The inputs of one chunk's pass on the disjoint union ``union`` (:func:`k_hop_union`):
    ``(x, edge_index, target, rows, kwargs, real, edge_graph, edge_id)`` of the union graph, with
    ``rows`` the targets' rows and ``real`` the union's edges that are edges of the full graph
    (``edge_graph``, ``edge_id``: for each union edge, its subgraph and its id in the full graph).

    With ``keep_border`` the edges into the outermost nodes are kept: from inside the subgraph as
    they are; from outside, their sender becomes one zero-feature stand-in node per subgraph (rows
    after the union's nodes), so that every node keeps its in-degree (GCN normalises messages by
    the sender's degree); what the stand-ins send reaches only the outermost nodes' later layers,
    which the targets do not depend on.  Without it they are left out, and so are the stand-ins."""
    keys, edge_b, edge_e, border_b, border_e = union
    node_ids = keys % n
    m = keys.numel()
    senders = torch.searchsorted(keys, edge_b * n + src[edge_e])
    real = torch.ones(edge_b.numel(), dtype=torch.bool, device=x.device)
    stand_ins = 0
    if keep_border:
        wanted = border_b * n + src[border_e]
        inner = torch.searchsorted(keys, wanted).clamp(max=max(m - 1, 0))
        inside = keys[inner] == wanted if m else torch.zeros_like(border_b, dtype=torch.bool)
        senders = torch.cat([senders, torch.where(inside, inner, m + border_b)])
        edge_b, edge_e = torch.cat([edge_b, border_b]), torch.cat([edge_e, border_e])
        real = torch.cat([real, inside])
        stand_ins = chunk.numel()
    sub_edges = torch.stack([senders, torch.searchsorted(keys, edge_b * n + dst[edge_e])])
    rows = torch.searchsorted(keys, torch.arange(chunk.numel(), device=x.device) * n + chunk)
    sub_target = None
    if target is not None:
        if target.numel() == n:
            sub_target = target.view(n, *target.shape[1:])[node_ids]
        else:
            sub_target = target.new_zeros(m, *target.shape[1:])
            sub_target[rows] = target[offset:offset + chunk.numel()]
        sub_target = torch.cat([sub_target, sub_target.new_zeros(stand_ins, *sub_target.shape[1:])])
    sub_kwargs = {k: v[edge_e] for k, v in kwargs.items() if v is not None}
    sub_x = torch.cat([x[node_ids], x.new_zeros(stand_ins, *x.shape[1:])])
    return sub_x, sub_edges, sub_target, rows, sub_kwargs, real, edge_b, edge_e


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
