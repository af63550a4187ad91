r"""``per_index=True``: each target explained over its own k-hop subgraph, many targets per pass
(:func:`explain_per_index`) on the disjoint union of their subgraphs (:mod:`.unions`), in chunks sized by memory.

Pruning, per layer (:mod:`.layer_pruning`) and at the border: the edges into the nodes ``num_hops`` hops out
matter only through the *sender's* in-degree (GCN's :math:`1/\sqrt{\deg(i)\deg(j)}`), so a :func:`prunable`
model's subgraphs leave them out, a :func:`countable` one's count them (:mod:`.border_degrees`).  A chunk whose
outputs differ from the full graph's is explained again less pruned; later chunks skip what failed.
"""
from __future__ import annotations

import math
from contextlib import ExitStack, nullcontext, suppress
from contextvars import ContextVar
from typing import Callable

import torch
from torch import Tensor, nn
from torch_geometric.explain.config import MaskType
from torch_geometric.nn import MessagePassing
from torch_geometric.nn import conv as pyg_conv

from lrp_lib.explain.subgraphs.border_degrees import counted_border
from lrp_lib.explain.mode.hooks import bound
from lrp_lib.explain.subgraphs.layer_pruning import pruned_layers
from lrp_lib.explain.subgraphs.unions import KHopUnion, k_hop_union, union_graph, with_border

__all__ = ["explain_per_index", "k_hop_union", "PRUNABLE", "prunable", "countable", "chunk_bytes", "pass_bytes",
           "largest_tensor", "CPU_TENSOR_BYTES", "memory_budget", "predicted", "PROBE_TARGETS", "EDGE_BYTES"]

#: How many targets' subgraphs the memory estimate is measured on when the full graph's output is known.
PROBE_TARGETS = 4

_prediction: ContextVar = ContextVar("prediction", default=None)  # the prediction pass of the explainer in this thread


def predicted():
    """Inside the block, :func:`explain_per_index` takes the full graph's output from what :func:`remember`
    recorded in this thread (PyG's prediction pass) instead of running the model again."""
    return bound(_prediction, [])  # in the block, nothing recorded yet


def remember(model: nn.Module, args: tuple, kwargs: dict, out) -> None:
    """Record ``out = model(*args, **kwargs)`` (no autograd, eval mode) inside a :func:`predicted` block."""
    if (kept := _prediction.get()) is not None:
        kept[:] = [(model, args, kwargs, out)]


def _known_output(model: nn.Module, x: Tensor, edge_index: Tensor, kwargs: dict) -> Tensor | None:
    """The recorded output of ``model`` on these very inputs (the same tensors), or None."""
    if not (value := _prediction.get()):
        return None
    m, args, kw, out = value[0]
    given = (lambda d: {k: id(v) for k, v in d.items() if v is not None})  # the same tensors, by identity
    same = (m is model and len(args) == 2 and args[0] is x and args[1] is edge_index and isinstance(out, Tensor)
            and given(kw) == given(kwargs))
    return out if same else None


#: Message-passing layers whose message into i never depends on the sender j's in-degree (only on i's and j's
#: features, the edge's attributes, i's own in-edges).  Exact types: a subclass may override ``message``.
PRUNABLE = tuple(getattr(pyg_conv, name) for name in (
    "GINConv", "GINEConv", "SAGEConv", "GATConv", "GATv2Conv", "GraphConv", "TransformerConv", "EdgeConv",
    "ResGatedGraphConv") if hasattr(pyg_conv, name))


def _layers_of(model: nn.Module, gcn: Callable) -> bool:
    """Whether ``model`` has message-passing layers, each in :data:`PRUNABLE` or a ``GCNConv`` that ``gcn`` takes."""
    layers = [m for m in model.modules() if isinstance(m, MessagePassing)]
    return bool(layers) and all(type(m) in PRUNABLE or (type(m) is pyg_conv.GCNConv and gcn(m)) for m in layers)


def prunable(model: nn.Module) -> bool:
    """Whether the border can be left out: :data:`PRUNABLE` layers and ``GCNConv(normalize=False)`` only."""
    return _layers_of(model, lambda m: not m.normalize)


def countable(model: nn.Module) -> bool:
    """Whether the border can be counted (:mod:`.border_degrees`): :data:`PRUNABLE` layers and ``GCNConv`` only."""
    return _layers_of(model, lambda m: True)


def memory_budget(device: torch.device, fraction: float = 0.25) -> int:
    """``fraction`` of the memory available now: free GPU memory on CUDA, ``MemAvailable`` of ``/proc/meminfo``
    on the CPU (1 GiB where neither can be read)."""
    if device.type == "cuda":
        return int(torch.cuda.mem_get_info(device)[0] * fraction)
    with suppress(OSError), open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(int(line.split()[1]) * 1024 * fraction)
    return 2**30


#: Bytes per edge of a union graph besides its messages: the edge index and the edge-level temporaries
#: of a layer (self-loops added, normalisation coefficients, the per-layer pruning's selection).
EDGE_BYTES = 64.0


def chunk_bytes(model: nn.Module, n: int, forward: Callable[[], Tensor]) -> tuple[Tensor, float, list, float]:
    """``(forward(), bytes per node, bytes per message of each message-passing step, bytes of the widest row)`` of
    one relevance pass of ``model``, from what ``forward()`` (no autograd, ``n`` nodes) computes: per node, the row
    bytes of every module's node-shaped output, summed; per message, its row bytes; both times four (value, its
    relevance, a temporary of each).  The widest row: the largest such row or message."""
    per_node, per_message = [], []

    def on_module(module, args, out):
        if isinstance(out, Tensor) and out.dim() >= 1 and out.shape[0] == n and out.is_floating_point():
            per_node.append(out[0].numel() * out.element_size())

    def on_message(module, args, out):
        if isinstance(out, Tensor) and out.dim() >= 1 and out.shape[0]:
            per_message.append(4.0 * out[0].numel() * out.element_size())

    with ExitStack() as hooks, torch.no_grad():  # the hooks removed on leaving
        for m in model.modules():
            hooks.enter_context(m.register_forward_hook(on_module))
            if isinstance(m, MessagePassing):
                hooks.enter_context(m.register_message_forward_hook(on_message))
        out = forward()
    widest = max(per_node + [m / 4.0 for m in per_message], default=0.0)
    return out, 4.0 * sum(per_node), per_message, float(widest)


#: On the CPU, the most bytes one tensor of a chunk's pass may take (:func:`largest_tensor`): glibc serves larger
#: blocks (above its ``mmap`` threshold) as fresh pages from the kernel, a page fault per 4 KiB.
CPU_TENSOR_BYTES = 16 * 2**20


def largest_tensor(widest: float, union: KHopUnion, targets: int, *, border_edges: int | None, layered: bool) -> float:
    """The bytes of the largest tensor of one pass over ``union``: ``widest`` (:func:`chunk_bytes`) times the
    larger of its rows (with stand-ins where ``border_edges`` is not None) and its first step's edges (the
    ``border_edges`` too unless ``layered``)."""
    rows = union.keys.numel() + (targets if border_edges is not None else 0)
    edges = union.edge_id.numel() + ((border_edges or 0) if not layered else 0)
    return widest * max(rows, edges)


def pass_bytes(per_node: float, per_message: list, union: KHopUnion, targets: int, hops: int, *,
               border_edges: int | None, layered: bool) -> float:
    """The memory of one relevance pass over ``union`` of ``targets`` subgraphs (``per_node``, ``per_message``:
    :func:`chunk_bytes`): ``per_node`` per node (with ``border_edges`` not None, the stand-ins too),
    :data:`EDGE_BYTES` per edge (``border_edges`` too), and each step's message bytes per edge it passes
    (``layered``: the ``l``-th step only along the edges into nodes within ``hops - 1 - l`` hops)."""
    edges = union.edge_id.numel() + (border_edges or 0)
    total = per_node * (union.keys.numel() + (targets if border_edges is not None else 0)) + EDGE_BYTES * edges
    within = torch.bincount(union.edge_depth, minlength=hops).cumsum(0).tolist() if layered else []
    for step, width in enumerate(per_message):
        limit = hops - 1 - step
        total += width * (within[limit] if layered and limit >= 0 else edges)
    return total


def _gathered(parts: list, empty: Tensor) -> tuple[Tensor, Tensor]:
    """The (2, total) indices and the values of ``parts``, a list of ``(indices, values)``; ``empty``: no values."""
    if not parts:
        return torch.zeros(2, 0, dtype=torch.long, device=empty.device), empty
    return torch.cat([i for i, _ in parts], 1), torch.cat([v for _, v in parts]).detach()


def explain_per_index(relevance: Callable, model: nn.Module, x: Tensor, edge_index: Tensor, *, target, index,
                      num_hops: int | None, chunk_size: int | None, node_mask_type, edge_mask_type,
                      max_memory: int | None = None, prune: bool | None = None, **kwargs):
    """``per_index=True``: each node of ``index`` explained over its own ``num_hops``-hop subgraph (None: the
    number of message-passing layers), in chunks of targets on the disjoint union of their subgraphs.

    ``relevance(x, edge_index, target, rows, groups, **kwargs)`` explains ``rows`` (the subgraph of ``rows[i]``:
    the nodes of ``groups == i``) in one pass, returning ``(node relevance, edge relevance, output, extras)``.
    Returns ``(node relevance, edge relevance, extras)``: sums over the targets; per target, in the order of
    ``index``, the sparse ``node_relevance_per_index`` (and ``edge_relevance_per_index``), ``bias_relevance`` and
    ``relevance_residual``.  ``prune``: None leaves the border out where the model is :func:`prunable`; False
    keeps it, unpruned per layer.  A chunk holds at least one target, at most ``chunk_size`` (None: no limit),
    and as many as keep :func:`pass_bytes` within ``max_memory`` (None: :func:`memory_budget`) and, on the CPU,
    :func:`largest_tensor` within :data:`CPU_TENSOR_BYTES`, measured (:func:`chunk_bytes`) on the first
    :data:`PROBE_TARGETS` targets' subgraphs where the full output is :func:`predicted`, else on the full graph.

    Raises ValueError for keyword arguments other than ``edge_weight`` and ``edge_attr``, node indices out of
    range, a ``target`` with neither one entry per node nor one per index, and where even the unpruned subgraphs
    do not reproduce the model's output; TypeError for a non-integer ``index``."""
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
    hops = num_hops if num_hops is not None else sum(isinstance(m, MessagePassing) for m in model.modules())
    if target is not None and target.numel() not in (n, index.numel()):
        raise ValueError(f"target has {target.numel()} entries: pass one per node ({n}) or one per index "
                         f"({index.numel()})")
    expected = _known_output(model, x, edge_index, kwargs) if edge_index.dtype == torch.long else None
    edge_index = edge_index.long()
    src, dst = edge_index
    counts = torch.bincount(dst, minlength=n)
    perm, rowptr = torch.argsort(dst, stable=True), torch.cumsum(counts, 0) - counts
    probe = None
    if expected is not None and index.numel():  # the widths measured on a few targets' subgraphs
        probe_union = k_hop_union(index[:PROBE_TARGETS], hops, src, perm, rowptr, counts, n, border=False)
        keys, edge_b, edge_e = probe_union.keys, probe_union.edge_graph, probe_union.edge_id
        sub_edges = torch.stack([torch.searchsorted(keys, edge_b * n + src[edge_e]), probe_union.edge_receiver])
        sub_kwargs = {k: v[edge_e] for k, v in kwargs.items() if v is not None}
        if 0 < edge_e.numel() != keys.numel():  # else a node-shaped output could be an edge-shaped one
            probe = chunk_bytes(model, keys.numel(), lambda: model(x[keys % n], sub_edges, **sub_kwargs))[1:]
    if probe is None:  # the full graph's output, and the widths measured on it
        expected, *probe = chunk_bytes(model, n, lambda: model(x, edge_index, **kwargs))
    per_node, per_message, widest = probe
    widest = max(widest, x[:1].numel() * x.element_size())  # the input's rows too
    cap = CPU_TENSOR_BYTES if x.device.type == "cpu" else math.inf
    budget = max_memory if max_memory is not None else memory_budget(x.device)
    pruning = prunable(model) if prune is None else prune  # the border edges left out
    layered = prune is not False  # per-layer pruning
    counting = layered and countable(model) and all(v is None for v in kwargs.values())
    loops = torch.bincount(dst[src == dst], minlength=n) if counting else None
    nodes, edges, accounts, offset = [], [], [], 0
    k, per_target, largest_per_target = index.numel(), None, None
    while offset < k:
        size = k - offset if chunk_size is None else min(chunk_size, k - offset)
        if per_target:
            size = max(1, min(size, int(budget // per_target)))
            if math.isfinite(cap):  # (inf // a number is NaN)
                size = max(1, min(size, int(cap // largest_per_target)))
        while True:  # halve the chunk until its estimated memory fits the budget
            chunk = index[offset:offset + size]
            union = k_hop_union(chunk, hops, src, perm, rowptr, counts, n, border=False)
            border_edges = None if pruning else int((union.depth == hops).sum()) if counting else \
                int(counts[union.keys[union.depth == hops] % n].sum())
            estimate = pass_bytes(per_node, per_message, union, size, hops, border_edges=border_edges, layered=layered)
            largest = largest_tensor(widest, union, size, border_edges=border_edges, layered=layered)
            if estimate <= budget and largest <= cap or size == 1:
                break
            size = max(1, size // 2)
        per_target, largest_per_target = estimate / size, largest / size
        while True:  # the most pruned pass that reproduces the targets' outputs
            border = "none" if pruning else "counted" if counting and layered else "all"
            if border == "all" and not union.border_id.numel():
                union = with_border(union, hops, perm, rowptr, counts, n)
            graph = union_graph(x, kwargs, target, chunk, offset, union, src, dst, n, border, hops=hops,
                                loops=loops, counts=counts)
            with pruned_layers(model, graph.depth, hops, graph.groups) if layered else nullcontext() as plan, \
                    counted_border(model, graph.edge_index, graph.multiplicity) if border == "counted" else \
                    nullcontext() as weighed:
                node_rel, edge_rel, out, extra = relevance(graph.x, graph.edge_index, graph.target, graph.rows,
                                                           graph.groups, **graph.kwargs)
            want, got = expected[chunk].to(out.dtype), out[graph.rows]
            tol = 1e-4 if out.dtype in (torch.float32, torch.float16, torch.bfloat16) else 1e-9
            scale = max(1.0, float(want.abs().max()) if want.numel() else 1.0)
            if (plan is None or plan.exact) and (weighed is None or weighed.complete) and \
                    torch.allclose(got, want, rtol=tol, atol=tol * scale):
                break
            if border == "all" and not layered:
                raise ValueError(
                    f"per_index=True: the targets' {hops}-hop subgraphs do not reproduce the model's output "
                    f"(largest difference {float((got - want).abs().max()):.3g}): the model looks further than "
                    f"{hops} hops; pass num_hops= the number of message-passing steps of the model")
            # the model reads more than the pruned subgraphs hold: from now on, not pruned that way (an inexact
            # plan: more steps than hops, no schedule per layer holds)
            pruning, counting = False, counting and border != "counted"
            layered = layered and border != "all" and (plan is None or plan.exact)
        keys, real = union.keys, graph.real
        accounts.append((extra["bias_relevance"].reshape(-1), extra["relevance_residual"].reshape(-1)))
        nodes.append((torch.stack([keys // n + offset, keys % n]), node_rel[:keys.numel()]))
        edges.append((torch.stack([graph.edge_graph[real] + offset, graph.edge_id[real]]),
                      edge_rel[real] if edge_rel is not None else None))
        offset += chunk.numel()
    node_index, node_values = _gathered(nodes, x.new_zeros(0, x.shape[1]))
    if node_mask_type not in (MaskType.attributes, MaskType.common_attributes):
        node_values = node_values.sum(-1, keepdim=True)
    node_rel = node_values.new_zeros(n, node_values.shape[1]).index_add_(0, node_index[1], node_values)
    if node_mask_type == MaskType.common_attributes:
        node_rel = node_rel.sum(0, keepdim=True)
    extra = {"node_relevance_per_index": torch.sparse_coo_tensor(
        node_index, node_values, (k, n, node_values.shape[1]), is_coalesced=True, check_invariants=False)}
    edge_rel = None
    if edge_mask_type is not None:
        edge_index_k, edge_values = _gathered(edges, x.new_zeros(0))
        edge_rel = edge_values.new_zeros(edge_index.shape[1]).index_add_(0, edge_index_k[1], edge_values)
        extra["edge_relevance_per_index"] = torch.sparse_coo_tensor(
            edge_index_k, edge_values, (k, edge_index.shape[1]), check_invariants=False).coalesce()
    if accounts:
        extra["bias_relevance"], extra["relevance_residual"] = map(torch.cat, zip(*accounts))
    return node_rel, edge_rel, extra
