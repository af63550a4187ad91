r"""Per-layer pruning of message passing on k-hop subgraphs: :func:`pruned_layers`.

A target's output after :math:`L` message-passing steps reads the output of step :math:`l` (counted from 0) only
at nodes within :math:`L - 1 - l` hops of the target: the last step only at the target, the first at every node
closer than the subgraph's border.  Inside a :func:`pruned_layers` block, a propagate pre-hook (PyG's
``register_propagate_forward_pre_hook``, registered once per module and inert outside the block's thread) keeps,
at the ``l``-th ``propagate`` call of the forward, only the edges whose *receiver* is within that distance, with
the edge-level arguments of the message (``edge_weight``, ``edge_attr``, attention weights ``alpha``, ...)
selected alike.  Every in-edge of a kept receiver is kept, so what a layer computes per receiver (sum, mean, max,
an attention softmax over its in-edges, its in-degree) is unchanged there; what a layer computes from the edges
*before* ``propagate`` (GCN's ``gcn_norm``, GAT's attention logits) still sees every edge of the subgraph.  No
target depends on the other receivers' outputs: their relevance, and that of the removed edges, is zero, as on
the unpruned subgraph.

The schedule counts ``propagate`` calls in the order they run, which is exact when the model makes at most
``hops`` of them on the way to its output.  A forward with more calls is marked inexact (:attr:`LayerPlan.exact`)
and its further calls are not pruned; nor is a call whose edges are not a plain ``(2, E)`` tensor or whose node
tensors are not the subgraph's nodes.  :func:`lrp_lib.explain.subgraphs.explain_per_index` also compares the
targets' outputs with the full graph's and explains again without pruning where they differ.
"""
from __future__ import annotations

from contextlib import contextmanager
from contextvars import ContextVar

import torch
from torch import Tensor, nn
from torch_geometric.nn import MessagePassing

from lrp_lib.explain.mode.edges import current_recorder
from lrp_lib.explain.mode.hooks import bound, ensure_hook

__all__ = ["LayerPlan", "pruned_layers", "current_plan"]

_plan: ContextVar = ContextVar("layer_plan", default=None)  # the LayerPlan of the forward running in this thread


class LayerPlan:
    """Which receivers each ``propagate`` call of one forward keeps: those with ``depth <= hops - 1 - l`` at the
    ``l``-th call (``depth``: each node's distance from its target, in hops).  After the forward, :attr:`calls` is
    the number of calls, :attr:`kept` the edges each kept (None: not pruned), and :attr:`exact` False if there
    were more calls than ``hops``.

    With ``groups`` (each node's group: its subgraph), :attr:`row_groups` holds the group of each row of the node
    tensors and of each call's edge tensors (the receiver's), by row count, for
    :meth:`lrp_lib.explain.mode.tally.Tally.split` (a row count met twice with other groups: None).  Raises
    TypeError for a ``depth`` that is not a 1-D long tensor and ValueError for ``groups`` of another shape."""

    def __init__(self, depth: Tensor, hops: int, groups: Tensor | None = None):
        if depth.dim() != 1 or depth.dtype != torch.long:
            raise TypeError(f"depth must be a 1-D long tensor, got {depth.dtype} with shape {tuple(depth.shape)}")
        if groups is not None and groups.shape != depth.shape:
            raise ValueError(f"groups must have depth's shape {tuple(depth.shape)}, got {tuple(groups.shape)}")
        self.depth, self.hops, self.groups = depth, hops, groups
        self.calls, self.exact, self.kept = 0, True, []
        self.row_groups: dict[int, Tensor | None] = {}
        if groups is not None:
            self._rows(groups)

    def _rows(self, groups: Tensor) -> None:
        n = groups.numel()
        if n in self.row_groups and (self.row_groups[n] is None or not torch.equal(self.row_groups[n], groups)):
            groups = None
        self.row_groups[n] = groups

    def _edge_rows(self, receivers: Tensor) -> None:
        if self.groups is not None:
            self._rows(self.groups.index_select(0, receivers))

    def prune(self, module: MessagePassing, edge_index, size, kwargs: dict):
        """The inputs of the next ``propagate`` call with the edges it needs only, or None (all)."""
        step, self.calls = self.calls, self.calls + 1
        limit = self.hops - 1 - step
        if limit < 0:
            self.exact = False  # more message-passing steps than hops: the schedule does not hold
        if not (_plain_edges(edge_index) and _on_nodes(module, kwargs, size, self.depth.numel())):
            self.kept.append(None)
            return None
        receivers = edge_index[1] if module.flow == "source_to_target" else edge_index[0]
        keep = (self.depth.index_select(0, receivers) <= limit).nonzero().view(-1) if limit >= 0 else None
        self.kept.append(None if keep is None else keep.numel())
        if keep is None or keep.numel() == edge_index.shape[1]:
            self._edge_rows(receivers)
            return None
        self._edge_rows(receivers.index_select(0, keep))
        pruned = edge_index.index_select(1, keep)
        count = edge_index.shape[1]
        edge_args = {a for a in module.inspector.get_flat_param_names(["message", "aggregate"],
                                                                      exclude=module.special_args)
                     if not a.endswith(("_i", "_j"))}
        kwargs = {k: v.index_select(0, keep) if k in edge_args and isinstance(v, Tensor) and v.dim() >= 1
                  and v.shape[0] == count else v for k, v in kwargs.items()}
        recorder = current_recorder()
        if recorder is not None:  # the edge relevance of the kept edges goes to their input edges
            recorder.narrow(module, edge_index, pruned, keep)
        return pruned, size, kwargs


def _plain_edges(edge_index) -> bool:
    return type(edge_index) is Tensor and edge_index.layout == torch.strided and edge_index.dim() == 2 \
        and edge_index.shape[0] == 2 and not edge_index.is_floating_point()


def _on_nodes(module: MessagePassing, kwargs: dict, size, n: int) -> bool:
    """Whether the node tensors of the call (the message's arguments read as ``x_i``/``x_j``) are the subgraph's
    ``n`` nodes, and ``size`` (if given) is ``(n, n)``."""
    if size is not None and tuple(int(s) if s is not None else n for s in size) != (n, n):
        return False
    names = {a[:-2] for a in module.inspector.get_param_names("message") if a.endswith(("_i", "_j"))}
    found = False
    for name in names:
        value = kwargs.get(name)
        for t in (value if isinstance(value, (tuple, list)) else (value,)):
            if t is None:
                continue
            if not isinstance(t, Tensor) or t.dim() == 0:
                return False
            dim = module.node_dim if module.node_dim >= 0 else t.dim() + module.node_dim
            if not 0 <= dim < t.dim() or t.shape[dim] != n:
                return False
            found = True
    return found


def _prune_hook(module, inputs):
    plan = _plan.get()
    return None if plan is None else plan.prune(module, *inputs)


def current_plan() -> LayerPlan | None:
    """The :class:`LayerPlan` of the :func:`pruned_layers` block running in this thread (None: none)."""
    return _plan.get()


@contextmanager
def pruned_layers(model: nn.Module, depth: Tensor, hops: int, groups: Tensor | None = None):
    """Inside the block, the forward of ``model`` in this thread passes at its ``l``-th ``propagate`` call only the
    edges into nodes with ``depth <= hops - 1 - l``; yields the :class:`LayerPlan` (``groups``: see there).  The
    hook is registered on every MessagePassing module of ``model`` once (also on a ``copy.deepcopy`` of a hooked
    one).  Raises ValueError for ``hops`` that is not an int >= 0."""
    if isinstance(hops, bool) or not isinstance(hops, int) or hops < 0:
        raise ValueError(f"hops must be an int >= 0, got {hops!r}")
    ensure_hook(model, MessagePassing, "_propagate_forward_pre_hooks", _prune_hook)
    with bound(_plan, LayerPlan(depth, hops, groups)) as plan:
        yield plan
