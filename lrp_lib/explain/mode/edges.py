r"""Edge relevance: which message of each layer is which input edge.

A hook on each ``MessagePassing`` module puts a tensor hook on its messages, which in the backward adds their
relevance (messages times their gradient, summed over features) to their input edge :math:`j \to i`, summed over
layers.  Self-loops that a layer adds (GCN, GAT) are not input edges: their share stays with the node.  A layer
given a sparse adjacency (PyG's ``adj_t``) forms one message per stored entry while edges are recorded.  The hooks
do nothing outside a :func:`recording` block of the same thread.
"""
from __future__ import annotations

import math
from collections import Counter
from contextvars import ContextVar

import torch
from torch import Tensor, nn
from torch_geometric.nn import MessagePassing
from torch_geometric.utils import to_edge_index

from lrp_lib.core.validation import is_adjacency
from lrp_lib.explain.mode.function_mode import RelevanceMode, UnsupportedModelError
from lrp_lib.explain.mode.hooks import bound, ensure_hook

__all__ = ["EdgeRecorder", "HeteroEdgeRecorder", "adjacency_edges", "ensure_hooks", "recording", "current_recorder",
           "message_hook", "is_edge_index", "usual_layout"]


_recorder: ContextVar = ContextVar("recorder", default=None)  # the EdgeRecorder of the explanation in this thread


def _message_hook(module, inputs, out):
    if (recorder := _recorder.get()) is None:
        return None
    with torch._C.DisableTorchFunction():  # (the explanation's own operations, not the model's: no rules)
        return recorder.messages(module, out)


def _propagate_hook(module, inputs):
    if (recorder := _recorder.get()) is None:
        return None
    recorder.propagated[id(module)] += 1
    unfolded = _unfold_adjacency(module, inputs) if is_adjacency(inputs[0]) else None
    recorder.edges_of[id(module)] = inputs[0] if unfolded is None else unfolded[0]  # the edges of its messages
    return unfolded


def adjacency_edges(adj: Tensor) -> Tensor:
    """The ``(2, E)`` edge_index (senders, receivers) of a sparse adjacency ``adj_t`` (row = receiver), one
    edge per stored entry, in the order of PyG's ``to_edge_index(adj_t)``: the order of its edge masks."""
    return to_edge_index(adj)[0].flip(0)


def _unfold_adjacency(module: MessagePassing, inputs: tuple) -> tuple:
    """A layer's ``propagate`` inputs ``(adj_t, size, kwargs)`` with the sparse adjacency given as its ``(2, E)``
    edges (senders, receivers; one message per stored entry, in the order of ``to_edge_index(adj_t)``), the size PyG
    reads from it, and its values where PyG passes them to the messages (``edge_weight``, ``edge_attr``,
    ``edge_type``).  Refused: a layer whose messages take none of them while the values are not all one."""
    adj, size, kwargs = inputs
    with torch._C.DisableTorchFunction():  # (the graph's structure, not the explained values)
        indices, values = to_edge_index(adj)
        weighted = not bool((values == 1).all())
    if weighted and not {"edge_weight", "edge_attr", "edge_type"} & set(module._user_args):
        raise UnsupportedModelError(
            f"edge relevance along a sparse adjacency reads each layer's messages, but the messages of "
            f"{type(module).__name__} take no edge weight while the adjacency's values are not all one (its sparse "
            f"product weighs them); pass the edges as a (2, E) edge_index with the weights where the layer takes "
            f"them, or explain with edge_mask_type=None")
    kwargs = dict(kwargs)
    for name, value in (("edge_weight", values), ("edge_attr", values if values.dim() > 1 else None),
                        ("edge_type", values)):
        if kwargs.get(name) is None:
            kwargs[name] = value
    return indices.flip(0), (adj.shape[1], adj.shape[0]) if size is None else size, kwargs


def ensure_hooks(model: nn.Module) -> None:
    """Register the message hooks on every MessagePassing module of ``model``, once per module
    (:func:`~lrp_lib.explain.mode.hooks.ensure_hook`)."""
    ensure_hook(model, MessagePassing, "_message_forward_hooks", _message_hook)
    ensure_hook(model, MessagePassing, "_propagate_forward_pre_hooks", _propagate_hook)


_BLOCK = 1 << 20  # the entries of each block of a message hook's products (4 MiB in float32)


def message_hook(record: Tensor, messages: Tensor, ids: Tensor, dim: int):
    """A hook on a layer's messages: their relevance (messages times their gradient, summed over all but the edge
    dimension ``dim``) added to ``record`` at each message's input edge (``ids``; -1: a self-loop the layer added,
    whose relevance stays with its node)."""
    keep = ids >= 0
    ids = ids[keep]
    values = messages.detach()  # (outside the mode: the explanation's own read, not a detach in the model)

    def hook(grad):
        v, g = values.movedim(dim, 0), grad.movedim(dim, 0)
        e, k = v.shape[0], math.prod(v.shape[1:])  # (also without any message)
        v, g = v.reshape(e, k), g.reshape(e, k)
        # (v * g).sum(1), on the CPU by blocks of rows: the same sums, without allocating the whole (E, F) product,
        # whose fresh pages cost more than the product itself on large graphs (a GPU's caching allocator reuses)
        rows = max(1, _BLOCK // max(k, 1)) if v.device.type == "cpu" else e
        rel = torch.cat([(v[i:i + rows] * g[i:i + rows]).sum(1) for i in range(0, e, rows)]) if e > rows else \
            (v * g).sum(1)
        record.index_add_(0, ids, rel[keep].to(record.dtype))
    return hook


def is_edge_index(t) -> bool:
    """Whether ``t`` is a dense integer ``(2, E)`` tensor."""
    return isinstance(t, Tensor) and t.dim() == 2 and t.shape[0] == 2 and not t.is_sparse and not t.is_floating_point()


def usual_layout(ref: Tensor, edges: Tensor) -> tuple[Tensor, Tensor]:
    """The input edge of each edge of ``edges`` (a layer's, int64) where they are laid out as PyG's
    ``add_self_loops`` and ``add_remaining_self_loops`` lay them out: the edges of ``ref`` (the input's) that are
    not loops, in order, then a loop at each node ``j = 0 .. k-1`` (the id of the input's loop at ``j``, the last
    of several; else -1); and whether they are so laid out (a boolean tensor; without input edges, true: no edge
    is one).  Tensor operations only, reading no value into Python: the same in a graph captured for any graph."""
    n, m = ref.shape[1], edges.shape[1]
    if not n:
        return edges.new_full((m,), -1), torch.ones((), dtype=torch.bool, device=edges.device)
    ids, at = torch.arange(n, device=ref.device), torch.arange(m, device=ref.device)
    src, dst = ref
    loop = src == dst
    kept = (~loop).sum()
    k = m - kept  # the loops the layer added
    # the input's non-loop edge of rank p at slot p, its loops parked past every rank
    slot = torch.where(loop, m + n + ids, torch.cumsum(~loop, 0) - 1)
    first = ids.new_full((m + 2 * n,), -1).index_put_((slot,), ids)[:m]
    node = (at - kept).clamp(min=0)  # the node of an added loop
    loop_id = ids.new_full((m + 1,), -1).scatter_reduce_(0, torch.where(loop & (src < k), src, m), ids, "amax")
    added = at >= kept
    found = torch.where(added, loop_id.index_select(0, node), first)
    expected = torch.where(added, node, ref.index_select(1, first.clamp(min=0)))
    usual = (k >= 0) & ~(loop & (src >= k)).any() & (edges == expected).all()
    return found, usual


class EdgeRecorder:
    """The edge relevance of one explanation: which message of each layer is which input edge, and a hook
    on every layer's messages that adds their relevance to their input edges in :attr:`record`."""

    #: How :meth:`check` says that a layer's messages are not the input edges, and its refusal.
    _ALONG = "for the {} input edges"
    _REFUSAL = ("edge relevance needs each message of a layer to belong to an input edge, but {}. "
                "Pass edge_index as a plain (2, E) tensor, or explain with edge_mask_type=None")

    def __init__(self, mode: RelevanceMode, model: nn.Module, edge_index: Tensor, dtype):
        self.mode, self.edge_index = mode, edge_index
        mode.recorder = self
        self.names = {id(m): (n or type(m).__name__) for n, m in model.named_modules() if isinstance(m, MessagePassing)}
        self.propagated, self.messaged = Counter(), Counter()
        self.unaligned: dict[str, int] = {}
        self.edges_of: dict[int, Tensor] = {}
        self._ids: dict[int, tuple] = {}
        if edge_index is not None:
            self.record = torch.zeros(edge_index.shape[1], dtype=dtype, device=edge_index.device)

    def edge_ids(self, edges) -> Tensor | None:
        """The input edge of each edge of ``edges`` (the edge_index a layer propagates along): the
        same edge (source, target), its k-th copy for the k-th copy; -1 for an edge that is not in
        the input (a self-loop that the layer added); None where ``edges`` is no edge index."""
        if edges is self.edge_index and edges is not None:
            return torch.arange(edges.shape[1], device=edges.device)
        if not is_edge_index(edges):
            return None
        key = id(edges)
        if key not in self._ids:
            same = next((ids for seen, ids in self._ids.values()  # (each GCN layer adds the same self-loops)
                         if seen.shape == edges.shape and seen.dtype == edges.dtype and torch.equal(seen, edges)), None)
            self._ids[key] = (edges, self._match(edges.long()) if same is None else same)
        return self._ids[key][1]

    def _match(self, edges: Tensor) -> Tensor:
        ref = self.edge_index
        ids, usual = usual_layout(ref, edges)  # first the usual layout, then any order
        if bool(usual):
            return ids
        n = max(int(ref.max()), int(edges.max()) if edges.numel() else 0) + 1
        m = max(ref.shape[1], edges.shape[1]) + 1

        def ranked(ei):  # key (source, target) and the rank of each copy of a repeated edge
            k = ei[0] * n + ei[1]
            order = torch.argsort(k, stable=True)
            sk = k[order]
            rank = torch.arange(k.numel(), device=k.device) - torch.searchsorted(sk, sk)
            return torch.empty_like(k).index_copy_(0, order, sk * m + rank)  # (in the order of ei)
        ref_keys, keys = ranked(ref), ranked(edges)
        order = torch.argsort(ref_keys)
        sorted_keys = ref_keys[order]
        pos = torch.searchsorted(sorted_keys, keys).clamp(max=sorted_keys.numel() - 1)
        return torch.where(sorted_keys[pos] == keys, order[pos], -1)

    def narrow(self, module, edges: Tensor, kept_edges: Tensor, kept: Tensor) -> None:
        """``module`` passes its messages along ``kept_edges``, the columns ``kept`` of ``edges``
        (:mod:`lrp_lib.explain.subgraphs.layer_pruning`): their input edges are those of these columns."""
        self.edges_of[id(module)] = kept_edges
        if (ids := self.edge_ids(edges)) is not None:
            self._ids[id(kept_edges)] = (kept_edges, ids.index_select(0, kept))

    def mine(self, module, out) -> bool:
        """Whether ``out`` are messages of a layer of this explanation's model that depend on the input."""
        return id(module) in self.names and isinstance(out, Tensor) and self.mode.is_marked(out)

    def locate(self, module, out):
        """``(ids, dim)`` for a layer's messages ``out``: the input edge of each (:meth:`edge_ids`) and the edge
        dimension; None where they are not this explanation's to record (a module of another model, constant
        messages) or belong to no input edge (then noted for :meth:`check`)."""
        if not self.mine(module, out):
            return None
        self.messaged[id(module)] += 1
        dim = module.node_dim if module.node_dim >= 0 else out.dim() + module.node_dim
        ids = self.edge_ids(self.edges_of.get(id(module)))
        if ids is None or ids.numel() != out.shape[dim]:
            self.unaligned[self.names[id(module)]] = out.shape[dim]
            return None
        return ids, dim

    def messages(self, module, out):
        """The message hook: a tensor hook on ``out`` that adds its relevance to :attr:`record`."""
        if (found := self.locate(module, out)) is not None:
            out.register_hook(message_hook(self.record, out, *found))

    def check(self) -> None:
        """Raise :class:`UnsupportedModelError` where a layer's messages belong to no input edge, or a layer
        aggregates without computing messages."""
        silent = [self.names[k] for k in self.propagated if k in self.names and not self.messaged[k]]
        problems = [f"'{n}' passes {c} messages {self._ALONG.format(self.record.numel())}"
                    for n, c in self.unaligned.items()]
        problems += [f"'{n}' aggregates without computing messages (a fused sparse adjacency)" for n in silent]
        if problems:
            raise UnsupportedModelError(self._REFUSAL.format("; ".join(problems)))


class HeteroEdgeRecorder(EdgeRecorder):
    """Edge relevance of a heterogeneous graph.  ``record`` holds every edge type's edges, one after another in
    the order of the input dict (``parts[type].record``: each type's stretch).  A layer's messages belong to the
    edge type whose ``edge_index`` (the very tensor) it propagates along; to one type's edges, each once, with
    self-loops added (``GCNConv`` in ``HeteroConv``); or to all types' edges joined in the order of the input dict,
    each shifted by constant node offsets (``HGTConv``'s one index over all types)."""

    _ALONG = "along edges that are not the input's"
    _REFUSAL = ("edge relevance of a heterogeneous graph needs each message of a layer to belong to an input edge "
                "(along one of the input's edge_index tensors, with self-loops added, or along all of them joined), "
                "but {}. Explain with edge_mask_type=None")

    def __init__(self, mode: RelevanceMode, model: nn.Module, edge_index_dict: dict, dtype):
        self.parts = {k: EdgeRecorder(mode, model, v, dtype) for k, v in edge_index_dict.items()}
        super().__init__(mode, model, None, dtype)
        sizes = [v.shape[1] for v in edge_index_dict.values()]
        device = next(iter(edge_index_dict.values())).device if edge_index_dict else None
        self.record = torch.zeros(sum(sizes), dtype=dtype, device=device)
        self.offsets, start = {}, 0
        for (key, part), size in zip(self.parts.items(), sizes):
            part.record, self.offsets[key] = self.record.narrow(0, start, size), start
            start += size

    def _match(self, edges: Tensor) -> Tensor | None:
        """The position in :attr:`record` of each edge of ``edges`` (-1: an added self-loop), or None."""
        found = []
        for key, part in self.parts.items():  # one type's edge_index (the very tensor), or its edges and self-loops
            ids = part.edge_ids(edges)
            if edges is part.edge_index:
                return ids + self.offsets[key]
            if ids is None or ids.numel() != edges.shape[1]:
                continue
            counts = torch.bincount(ids[ids >= 0], minlength=part.edge_index.shape[1])
            if bool(((ids >= 0) | (edges[0] == edges[1])).all()) and bool((counts <= 1).all()) \
                    and bool((counts[part.edge_index[0] != part.edge_index[1]] == 1).all()):
                found.append(torch.where(ids >= 0, ids + self.offsets[key], ids))
        if len(found) == 1:
            return found[0]
        if len(found) > 1 or edges.shape[1] != self.record.numel():
            return None  # (several types would fit: which one is not known)
        for key, part in self.parts.items():  # all types joined, each shifted by its node offsets
            block = edges[:, self.offsets[key]:self.offsets[key] + part.edge_index.shape[1]]
            if block.numel():
                shift = block - part.edge_index.to(block.dtype)
                if not torch.equal(shift, shift[:, :1].expand_as(shift)):
                    return None
        return torch.arange(edges.shape[1], device=edges.device)


def current_recorder():
    """The recorder of the :func:`recording` block running in this thread (None: none)."""
    return _recorder.get()


def recording(recorder):
    """Inside the block, the message hooks of this thread record into ``recorder`` (None: nothing)."""
    return bound(_recorder, recorder)
