r"""GCN's degrees at a subgraph's border, from one weighted edge per node: :func:`counted_border`.

GCN normalises :math:`j \to i` by :math:`1/\sqrt{\deg(i)\deg(j)}`, so a k-hop subgraph needs the edges into its
outermost nodes for their in-degrees only.  A ``border="counted"`` union graph (:func:`.unions.union_graph`)
holds one edge per outermost node for them, their number its ``multiplicity``, which each ``GCNConv`` called in a
:func:`counted_border` block gets as ``edge_weight`` (1 on self-loops): ``gcn_norm`` sums them into exactly the
full border's degrees.  A call that cannot be weighed (other edges, its own weights, ``cached``, ``improved``,
``flow="target_to_source"``) makes :attr:`CountedBorder.complete` False, and the caller keeps the whole border.
"""
from __future__ import annotations

from contextvars import ContextVar

import torch
from torch import Tensor, nn
from torch_geometric.nn import GCNConv

from lrp_lib.explain.mode.hooks import bound, ensure_hook

__all__ = ["CountedBorder", "counted_border"]

_state: ContextVar = ContextVar("counted_border", default=None)  # the CountedBorder of the forward in this thread
_ARGS = ("x", "edge_index", "edge_weight")  # GCNConv.forward's parameters


class CountedBorder:
    """The union's ``edge_index`` and each edge's ``multiplicity``; :attr:`calls` counts the forward's normalising
    ``GCNConv`` calls, :attr:`weighed` those given the weights.  Raises ValueError for a ``multiplicity`` that is
    not one count per edge."""

    def __init__(self, edge_index: Tensor, multiplicity: Tensor):
        if multiplicity.shape != (edge_index.shape[1],):
            raise ValueError(f"multiplicity must hold one count per edge ({edge_index.shape[1]}), "
                             f"got shape {tuple(multiplicity.shape)}")
        self.edge_index, self.multiplicity = edge_index, multiplicity
        self.calls = self.weighed = 0

    @property
    def complete(self) -> bool:
        """Whether every normalising ``GCNConv`` call of the forward got the weights."""
        return self.calls == self.weighed

    def weights(self, module: GCNConv, dtype: torch.dtype) -> Tensor:
        """``module``'s ``edge_weight``: the multiplicities, 1 on self-loops where the layer adds self-loops."""
        w = self.multiplicity.to(dtype)
        return w.masked_fill(self.edge_index[0] == self.edge_index[1], 1.0) if module.add_self_loops else w

    def weigh(self, module: GCNConv, args: tuple, kwargs: dict):
        """The hook's work: ``(args, kwargs)`` with the weights, or None (the call left as it is)."""
        if not module.normalize:
            return None
        self.calls += 1
        given = {**dict(zip(_ARGS, args)), **kwargs}
        x = given.get("x")
        if (given.get("edge_index") is not self.edge_index or given.get("edge_weight") is not None
                or not isinstance(x, Tensor) or not x.is_floating_point() or module.cached or module.improved
                or module.flow != "source_to_target"):
            return None
        weight = self.weights(module, x.dtype)
        self.weighed += 1
        return (args[:2] + (weight,) + args[3:], kwargs) if len(args) > 2 else (args, {**kwargs, "edge_weight": weight})


def _weigh_hook(module, args, kwargs):
    return None if (state := _state.get()) is None else state.weigh(module, args, kwargs)


def counted_border(model: nn.Module, edge_index: Tensor, multiplicity: Tensor):
    """A block in which each ``GCNConv`` of ``model`` called in this thread with ``edge_index`` and no weights
    gets ``multiplicity`` as its weights; it gives the :class:`CountedBorder`.  The hook is registered once per
    ``GCNConv`` (inert outside the block)."""
    ensure_hook(model, GCNConv, "_forward_pre_hooks", _weigh_hook, with_kwargs=True)
    return bound(_state, CountedBorder(edge_index, multiplicity))
