r"""Per-layer pruning of message passing on k-hop subgraphs: :func:`pruned_layers`.

After :math:`L` message-passing steps, a target reads the output of step :math:`l` (from 0) only at nodes within
:math:`L - 1 - l` hops, so the ``l``-th ``propagate`` call keeps only the edges whose *receiver* is that close,
and the message's edge-level arguments alike.  A kept receiver keeps every in-edge: what a layer computes per
receiver is unchanged, and what it computes before ``propagate`` (``gcn_norm``, GAT's logits) sees every edge.
A forward with more calls than ``hops`` is inexact (:attr:`LayerPlan.exact`), its further calls unpruned, as is a
call whose edges are not a plain ``(2, E)`` tensor or whose node tensors are not the subgraph's nodes.
"""
from __future__ import annotations

from contextvars import ContextVar

import torch
from torch import Tensor, nn
from torch_geometric.nn import MessagePassing

from lrp_lib.explain.mode.edges import current_recorder
from lrp_lib.explain.mode.hooks import bound, ensure_hook

__all__ = ["LayerPlan", "pruned_layers", "current_plan"]

_plan: ContextVar = ContextVar("layer_plan", default=None)  # the LayerPlan of the forward running in this thread


class LayerPlan:
    """Which receivers each ``propagate`` call of one forward keeps: ``depth <= hops - 1 - l`` at the ``l``-th
    (``depth``: each node's hops from its target).  After the forward: :attr:`calls`, :attr:`kept` (the edges each
    call kept; None: not pruned), :attr:`exact` (False after more calls than ``hops``), and with ``groups`` (each
    node's subgraph) :attr:`row_groups`: per row count, the group of each row of the node tensors and of each
    call's edge tensors (None where two differ), for :meth:`~lrp_lib.explain.mode.tally.Tally.split`.  Raises
    TypeError for a ``depth`` that is not a 1-D long tensor, ValueError for ``groups`` of another shape."""

    def __init__(self, depth: Tensor, hops: int, groups: Tensor | None = None):
        if depth.dim() != 1 or depth.dtype != torch.long:
            raise TypeError(f"depth must be a 1-D long tensor, got {depth.dtype} with shape {tuple(depth.shape)}")
        if groups is not None and groups.shape != depth.shape:
            raise ValueError(f"groups must have depth's shape {tuple(depth.shape)}, got {tuple(groups.shape)}")
        self.depth, self.hops, self.groups = depth, hops, groups
        self.calls, self.exact, self.kept = 0, True, []
        self.row_groups: dict[int, Tensor | None] = {} if groups is None else {groups.numel(): groups}

    def prune(self, module: MessagePassing, edge_index, size, kwargs: dict):
        """The inputs of the next ``propagate`` call with the edges it needs only, or None (all)."""
        limit, self.calls = self.hops - 1 - self.calls, self.calls + 1  # the l-th call keeps depth <= hops - 1 - l
        self.exact = self.exact and limit >= 0  # more message-passing steps than hops: the schedule does not hold
        plain = type(edge_index) is Tensor and edge_index.layout == torch.strided and edge_index.dim() == 2 \
            and edge_index.shape[0] == 2 and not edge_index.is_floating_point()
        if not (plain and _on_nodes(module, kwargs, size, self.depth.numel())):
            self.kept.append(None)
            return None
        receivers = edge_index[1] if module.flow == "source_to_target" else edge_index[0]
        keep = (self.depth.index_select(0, receivers) <= limit).nonzero().view(-1) if limit >= 0 else None
        self.kept.append(None if keep is None else keep.numel())
        if keep is not None and keep.numel() == edge_index.shape[1]:
            keep = None  # every edge kept
        if self.groups is not None:  # the group of each row of this call's edge tensors (None: two calls' differ)
            groups = self.groups.index_select(0, receivers if keep is None else receivers.index_select(0, keep))
            known = self.row_groups.get(groups.numel(), groups)
            self.row_groups[groups.numel()] = groups if known is not None and torch.equal(known, groups) else None
        if keep is None:
            return None
        pruned = edge_index.index_select(1, keep)
        names = module.inspector.get_flat_param_names(["message", "aggregate"], exclude=module.special_args)
        edge_args = {a for a in names if not a.endswith(("_i", "_j"))}
        kwargs = {k: v.index_select(0, keep) if k in edge_args and isinstance(v, Tensor) and v.dim() >= 1
                  and v.shape[0] == edge_index.shape[1] else v for k, v in kwargs.items()}
        if (recorder := current_recorder()) is not None:  # the kept edges' relevance goes to their input edges
            recorder.narrow(module, edge_index, pruned, keep)
        return pruned, size, kwargs


def _on_nodes(module: MessagePassing, kwargs: dict, size, n: int) -> bool:
    """Whether the message's node tensors (``x_i``/``x_j``) hold the ``n`` nodes, ``size`` (if any) is ``(n, n)``."""
    if size is not None and tuple(int(s) if s is not None else n for s in size) != (n, n):
        return False
    values = [kwargs.get(a[:-2]) for a in module.inspector.get_param_names("message") if a.endswith(("_i", "_j"))]
    tensors = [t for v in values for t in (v if isinstance(v, (tuple, list)) else (v,)) if t is not None]
    return bool(tensors) and all(isinstance(t, Tensor) and -t.dim() <= module.node_dim < t.dim()
                                 and t.shape[module.node_dim] == n for t in tensors)  # n along the node_dim


def _prune_hook(module, inputs):
    return None if (plan := _plan.get()) is None else plan.prune(module, *inputs)


def current_plan() -> LayerPlan | None:
    """The :class:`LayerPlan` of the :func:`pruned_layers` block running in this thread (None: none)."""
    return _plan.get()


def pruned_layers(model: nn.Module, depth: Tensor, hops: int, groups: Tensor | None = None):
    """A block in which ``model``'s forward in this thread passes at its ``l``-th ``propagate`` call only the edges
    into nodes with ``depth <= hops - 1 - l``; it gives the :class:`LayerPlan`.  The hook is registered once per
    MessagePassing module (inert outside the block).  Raises ValueError for ``hops`` that is not an int >= 0."""
    if isinstance(hops, bool) or not isinstance(hops, int) or hops < 0:
        raise ValueError(f"hops must be an int >= 0, got {hops!r}")
    ensure_hook(model, MessagePassing, "_propagate_forward_pre_hooks", _prune_hook)
    return bound(_plan, LayerPlan(depth, hops, groups))
