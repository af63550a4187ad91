r"""GCN's degrees at a subgraph's border, from one weighted edge per node: :func:`counted_border`.

A target's k-hop subgraph needs the edges into its outermost nodes only for their in-degrees: GCN normalises the
message :math:`j \to i` by :math:`1/\sqrt{\deg(i)\deg(j)}`, and a sender :math:`j` on the border has its in-edges
outside the subgraph.  A union graph built with ``border="counted"``
(:func:`lrp_lib.explain.subgraphs.unions.union_graph`) holds, per outermost node, one edge standing for all its
in-edges, with their number as its ``multiplicity``.

Inside a :func:`counted_border` block, a forward pre-hook of each ``GCNConv`` (registered once per module, inert
outside the block's thread) hands the multiplicities to the layer as its ``edge_weight`` when the layer is called
with the union's ``edge_index`` itself and no weights.  ``gcn_norm`` then sums them into exactly the degrees that
the full border gives (whole numbers, so the sums are exact in any order), and the messages along the kept edges,
each of weight 1, are the same to the bit.  The self-loops that ``add_remaining_self_loops`` replaces get the
weight 1 it would give them.

A call that could not be weighed makes :attr:`CountedBorder.complete` False: a ``GCNConv`` given other edges or
weights of the model's own, or one that caches its normalisation, normalises with ``improved=True`` (PyG fills
the self-loops with 2 only where weights are given) or flows ``target_to_source``.  The caller then builds the
subgraphs with the whole border instead.
"""
from __future__ import annotations

from contextlib import contextmanager
from contextvars import ContextVar

import torch
from torch import Tensor, nn
from torch_geometric.nn import GCNConv

from lrp_lib.explain.mode.hooks import bound, ensure_hook

__all__ = ["CountedBorder", "counted_border"]

_state: ContextVar = ContextVar("counted_border", default=None)  # the CountedBorder of the forward in this thread
_ARGS = ("x", "edge_index", "edge_weight")  # GCNConv.forward's parameters


class CountedBorder:
    """The union's ``edge_index`` and each edge's ``multiplicity``; :attr:`calls` counts the normalising
    ``GCNConv`` calls of the forward, :attr:`weighed` those given the weights.  Raises ValueError where
    ``multiplicity`` is not one count per edge."""

    def __init__(self, edge_index: Tensor, multiplicity: Tensor):
        if multiplicity.shape != (edge_index.shape[1],):
            raise ValueError(f"multiplicity must hold one count per edge ({edge_index.shape[1]}), "
                             f"got shape {tuple(multiplicity.shape)}")
        self.edge_index, self.multiplicity = edge_index, multiplicity
        self.calls = self.weighed = 0
        self._weights: dict = {}

    @property
    def complete(self) -> bool:
        """Whether every normalising ``GCNConv`` call of the forward got the weights."""
        return self.calls == self.weighed

    def weights(self, module: GCNConv, dtype: torch.dtype) -> Tensor:
        """The ``edge_weight`` for ``module``: each edge's multiplicity; a self-loop's 1 where the layer adds
        self-loops (it replaces them by one of weight 1)."""
        key = (dtype, bool(module.add_self_loops))
        if key not in self._weights:
            w = self.multiplicity.to(dtype)
            if module.add_self_loops:
                w = w.masked_fill(self.edge_index[0] == self.edge_index[1], 1.0)
            self._weights[key] = w
        return self._weights[key]

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
        if len(args) > 2:
            return args[:2] + (weight,) + args[3:], kwargs
        return args, {**kwargs, "edge_weight": weight}


def _weigh_hook(module, args, kwargs):
    state = _state.get()
    return None if state is None else state.weigh(module, args, kwargs)


@contextmanager
def counted_border(model: nn.Module, edge_index: Tensor, multiplicity: Tensor):
    """Inside the block, each ``GCNConv`` of ``model`` called in this thread with ``edge_index`` and no weights
    gets ``multiplicity`` as its weights (see the module docstring); yields the :class:`CountedBorder`, whose
    :attr:`~CountedBorder.complete` says whether every call did.  The hook is registered on every ``GCNConv`` of
    ``model`` once (also on a ``copy.deepcopy`` of a hooked one)."""
    ensure_hook(model, GCNConv, "_forward_pre_hooks", _weigh_hook, with_kwargs=True)
    with bound(_state, CountedBorder(edge_index, multiplicity)) as state:
        yield state
