r"""Graph Network layers (Battaglia et al., 2018) on PyTorch Geometric data, with relevance.

A graph is a PyG :class:`~torch_geometric.data.Data` or :class:`~torch_geometric.data.Batch`
with MetaLayer's names: node features ``x`` (N x F_x), edge features ``edge_attr`` (E x F_e),
global features ``u`` (one row per graph, G x F_u), ``edge_index`` (2 x E, row 0 the sender,
row 1 the receiver) and ``batch`` (the graph of each node; absent for a single graph).

Each layer updates one of the three feature sets with a sum of linear maps of the inputs
it is configured to read, plus a bias:

.. math::
    e'_k &= W_e e_k + W_s x_{s(k)} + W_r x_{r(k)} + W_u u_{g(k)} + b
        &&\text{(EdgeLinear)}\\
    x'_i &= W_x x_i + W_{in} \mathop{\mathrm{agg}}_{k: r(k)=i} e_k
          + W_{out} \mathop{\mathrm{agg}}_{k: s(k)=i} e_k + W_u u_{g(i)} + b
        &&\text{(NodeLinear)}\\
    u'_g &= W_x \mathop{\mathrm{agg}}_{i \in g} x_i + W_e \mathop{\mathrm{agg}}_{k \in g} e_k
          + W_u u_g + b &&\text{(GlobalLinear)}

with ``agg`` a sum, mean or max.  A layer returns a shallow copy of its input graph with
its one attribute replaced.

Every layer reads :func:`lrp_lib.teach.mode.is_relevance_mode` in its forward.  Outside
``with lrp_lib.teach.relevance():`` it is built from ordinary torch operations (true gradients).
Inside, the whole layer is ONE autograd function (:class:`EdgeLinearRelevance`,
:class:`NodeLinearRelevance`, :class:`GlobalLinearRelevance`) whose backward is the epsilon
rule of the layer seen as one linear map of all its inputs: with
:math:`s = R / (z + \epsilon\,\mathrm{sign}(z))`, each input feature receives its contribution
times :math:`s`, copies (``x_{s(k)}``, ``u_{g(k)}``) sum over their uses, a sum or mean
aggregation passes :math:`s` back to each aggregated row, a max to the winner only, and the
bias keeps :math:`b\,s`.  It saves only the inputs, the index tensors and the output (plus the
argmax of a max), no intermediate term.  With :math:`\epsilon = 0` this is exactly the
composition of :mod:`lrp_lib.teach.ops` (a proportional split of the sum, then LRP-0 for each
:math:`W`, the copy and the scatter rules), which :func:`compose_with_ops` builds: the teaching
version of chapter 2 and the reference of the tests.  The forward values are the same in
every mode.

The layers are here; the fused rule is in :mod:`lrp_lib.teach.graph_rule`, the checks that read
a graph in :mod:`lrp_lib.teach.graph_data`, and reading the relevance after a backward pass in
:mod:`lrp_lib.teach.graph_relevance` (its names are importable from here too).
"""
from __future__ import annotations

import math
import numbers
from typing import Callable

import torch
from torch import Tensor, nn

from lrp_lib.core.validation import check_number
from lrp_lib.teach import ops
from lrp_lib.teach.graph_data import (ATTRIBUTES, batch_of, check_batch_vs_graphs, check_graph, check_rows,
                                      edge_index_of, features, node_count, num_graphs, replace_attribute)
from lrp_lib.teach.graph_relevance import GraphRelevance, read_relevance, relevance_inputs, relevance_pass
from lrp_lib.teach.graph_rule import (ComposedOps, EdgeLinearRelevance, GlobalLinearRelevance, GradientOps,
                                      GraphLinearRelevance, Group, NodeLinearRelevance, sum_terms)
from lrp_lib.teach.mode import is_relevance_mode

__all__ = [
    "EdgeLinear",
    "NodeLinear",
    "GlobalLinear",
    "compose_with_ops",
    "ElementWise",
    "EdgeReLU",
    "NodeReLU",
    "GlobalReLU",
    "GraphRelevance",
    "relevance_inputs",
    "read_relevance",
    "relevance_pass",
    "num_graphs",
    "EdgeLinearRelevance",
    "NodeLinearRelevance",
    "GlobalLinearRelevance",
]

AGGREGATIONS = ("sum", "mean", "max")


# --------------------------------------------------------------------- layers
def _check_size(value, name: str) -> int | None:
    if value is None:
        return None
    if not isinstance(value, numbers.Integral) or isinstance(value, bool) or value <= 0:
        raise ValueError(f"{name} must be a positive int or None, got {value!r}")
    return int(value)


class _GraphLinear(nn.Module):
    """Shared machinery: one weight per configured input, one optional bias."""

    def __init__(self, out_features, inputs: dict, bias: bool, eps: float, aggregation: str | None = None):
        super().__init__()
        name = type(self).__name__
        out_features = _check_size(out_features, "out_features")
        if out_features is None:
            raise ValueError("out_features must be a positive int, got None")
        sizes = {k: _check_size(v, k) for k, v in inputs.items()}
        if all(v is None for v in sizes.values()):
            raise ValueError(f"{name} needs at least one input: set one of {', '.join(sizes)}")
        if aggregation is not None and aggregation not in AGGREGATIONS:
            raise ValueError(f"aggregation must be one of {AGGREGATIONS}, got {aggregation!r}")
        eps = check_number(eps, "eps")
        self.out_features, self.sizes, self.aggregation, self.eps = out_features, sizes, aggregation, eps
        fan_in = sum(v for v in sizes.values() if v is not None)
        bound = 1 / math.sqrt(fan_in)  # as nn.Linear, over all inputs together
        for key, size in sizes.items():
            weight = None
            if size is not None:
                weight = nn.Parameter(torch.empty(out_features, size).uniform_(-bound, bound))
            self.register_parameter("W_" + key.replace("_features", ""), weight)
        self.bias = nn.Parameter(torch.empty(out_features).uniform_(-bound, bound)) if bias else None

    relevance_function = GraphLinearRelevance  # each layer names its own

    def forward(self, data):
        if is_relevance_mode():
            return self._run(data, "fused")
        return self._run(data, GradientOps)

    def _run(self, data, how):
        """Output graph of the layer: with the operations ``how`` (``GradientOps`` or
        ``ComposedOps``), or ``"fused"``: one :class:`GraphLinearRelevance` for the layer."""
        check_graph(data, type(self).__name__)
        attribute, rows, groups = self._groups(data)
        if how == "fused":
            spec = (type(self).__name__, self.eps, rows, self.aggregation, tuple(g.kind for g in groups))
            flat = [t for g in groups for t in (g.a, g.w, g.index)]
            out = self.relevance_function.apply(spec, self.bias, *flat)
        else:
            out = sum_terms(how, groups, self.bias, rows, self.aggregation, self.eps)
        return replace_attribute(data, attribute, out)

    def extra_repr(self) -> str:
        parts = [f"out_features={self.out_features}"]
        parts += [f"{k}={v}" for k, v in self.sizes.items() if v is not None]
        if self.aggregation is not None:
            parts.append(f"aggregation={self.aggregation!r}")
        parts.append(f"bias={self.bias is not None}")
        return ", ".join(parts)


class EdgeLinear(_GraphLinear):
    r"""New edge features from the edge, its sender, its receiver and its graph's globals.

    :math:`e'_k = W_e e_k + W_s x_{s(k)} + W_r x_{r(k)} + W_u u_{g(k)} + b`, with
    :math:`s(k), r(k)` = ``edge_index[0, k], edge_index[1, k]`` and :math:`g(k)` the graph of the
    sender.  Each argument is the feature size of that input, or ``None`` to leave it out.
    Relevance (:class:`EdgeLinearRelevance`): the epsilon rule (``eps``) of the whole layer as
    one linear map; a node (global) receives the relevance of all its copies on edges.
    """

    def __init__(self, out_features, edge_features=None, sender_features=None, receiver_features=None,
                 global_features=None, bias=True, eps=1e-6):
        super().__init__(out_features, dict(edge_features=edge_features, sender_features=sender_features,
                                            receiver_features=receiver_features, global_features=global_features),
                         bias, eps)

    relevance_function = EdgeLinearRelevance

    def _groups(self, data):
        name, s, groups = type(self).__name__, self.sizes, []
        n = node_count(data)
        needs_edges = s["sender_features"] or s["receiver_features"] or s["global_features"] or not s["edge_features"]
        edge_index = edge_index_of(data, name, n) if needs_edges or data.get("edge_index") is not None else None
        if s["edge_features"]:
            e = features(data, "edge_attr", s["edge_features"], name)
            if edge_index is not None:
                check_rows(e, "edge_attr", edge_index.shape[1], "edges (edge_index columns)", name)
            groups.append(Group("self", e, self.W_edge, None))
        if s["sender_features"]:
            groups.append(Group("gather", features(data, "x", s["sender_features"], name), self.W_sender,
                                 edge_index[0]))
        if s["receiver_features"]:
            groups.append(Group("gather", features(data, "x", s["receiver_features"], name), self.W_receiver,
                                 edge_index[1]))
        if s["global_features"]:
            u = features(data, "u", s["global_features"], name)
            batch = batch_of(data, name, n, u.device)
            check_batch_vs_graphs(batch, u.shape[0], name)
            groups.append(Group("gather", u, self.W_global, batch[edge_index[0]]))
        rows = edge_index.shape[1] if edge_index is not None else groups[0].a.shape[0]
        return "edge_attr", rows, groups


class NodeLinear(_GraphLinear):
    r"""New node features from the node, its incoming and outgoing edges and its graph's globals.

    :math:`x'_i = W_x x_i + W_{in} \mathrm{agg}_{k: r(k)=i}\, e_k + W_{out} \mathrm{agg}_{k: s(k)=i}\, e_k
    + W_u u_{g(i)} + b`, ``aggregation`` 'sum', 'mean' or 'max' (a node without such edges gets 0).
    Relevance (:class:`NodeLinearRelevance`): the epsilon rule of the whole layer as one linear
    map; through the aggregation in proportion for sum and mean, winner takes all for max.
    """

    def __init__(self, out_features, node_features=None, incoming_features=None, outgoing_features=None,
                 global_features=None, aggregation="sum", bias=True, eps=1e-6):
        super().__init__(out_features, dict(node_features=node_features, incoming_features=incoming_features,
                                            outgoing_features=outgoing_features, global_features=global_features),
                         bias, eps, aggregation)

    relevance_function = NodeLinearRelevance

    def _groups(self, data):
        name, s, groups = type(self).__name__, self.sizes, []
        n = node_count(data)
        if s["node_features"]:
            groups.append(Group("self", features(data, "x", s["node_features"], name), self.W_node, None))
        for key, row, weight in (("incoming_features", 1, self.W_incoming), ("outgoing_features", 0, self.W_outgoing)):
            if s[key]:
                e = features(data, "edge_attr", s[key], name)
                edge_index = edge_index_of(data, name, n)
                check_rows(e, "edge_attr", edge_index.shape[1], "edges (edge_index columns)", name)
                groups.append(Group("agg", e, weight, edge_index[row]))
        if s["global_features"]:
            u = features(data, "u", s["global_features"], name)
            batch = batch_of(data, name, n, u.device)
            check_batch_vs_graphs(batch, u.shape[0], name)
            groups.append(Group("gather", u, self.W_global, batch))
        return "x", n, groups


class GlobalLinear(_GraphLinear):
    r"""New global features from the nodes and edges of each graph and its old globals.

    :math:`u'_g = W_x \mathrm{agg}_{i \in g}\, x_i + W_e \mathrm{agg}_{k \in g}\, e_k + W_u u_g + b`,
    nodes grouped by ``batch`` and edges by the graph of their sender.  An edgeless graph
    aggregates its edges to 0.  Relevance as for :class:`NodeLinear` (:class:`GlobalLinearRelevance`).
    """

    def __init__(self, out_features, node_features=None, edge_features=None, global_features=None,
                 aggregation="sum", bias=True, eps=1e-6):
        super().__init__(out_features, dict(node_features=node_features, edge_features=edge_features,
                                            global_features=global_features), bias, eps, aggregation)

    relevance_function = GlobalLinearRelevance

    def _groups(self, data):
        name, s, groups = type(self).__name__, self.sizes, []
        n, graphs = node_count(data), num_graphs(data)
        if s["global_features"]:
            u = features(data, "u", s["global_features"], name)
        if s["node_features"] or s["edge_features"]:
            batch = batch_of(data, name, n, data.get("x").device if data.get("x") is not None else None)
            check_batch_vs_graphs(batch, graphs, name)
        if s["node_features"]:
            groups.append(Group("agg", features(data, "x", s["node_features"], name), self.W_node, batch))
        if s["edge_features"]:
            e = features(data, "edge_attr", s["edge_features"], name)
            edge_index = edge_index_of(data, name, n)
            check_rows(e, "edge_attr", edge_index.shape[1], "edges (edge_index columns)", name)
            groups.append(Group("agg", e, self.W_edge, batch[edge_index[0]]))
        if s["global_features"]:
            groups.append(Group("self", u, self.W_global, None))
        return "u", graphs, groups


def compose_with_ops(layer: _GraphLinear, data):
    """``layer(data)`` built from :mod:`lrp_lib.teach.ops` (one ``linear_eps`` per term, ``index_select``
    and scatters, a chain of ``ops.add``), whatever the mode: the teaching version, whose
    relevance equals the fused rule's at ``eps = 0``.  It keeps every term for backward."""
    if not isinstance(layer, _GraphLinear):
        raise TypeError(f"layer must be an EdgeLinear, NodeLinear or GlobalLinear, got {type(layer).__name__}")
    return layer._run(data, ComposedOps)


# ------------------------------------------------------------- element-wise
class ElementWise(nn.Module):
    """Apply an element-wise function to one attribute: ``'x'``, ``'edge_attr'`` or ``'u'``.

    ``fn`` runs outside the relevance mode (true gradients), ``relevance_fn`` inside it (an
    op whose backward is the relevance rule, e.g. :func:`lrp_lib.teach.ops.relu`).  Both must give
    the same values.  Without ``relevance_fn`` the layer refuses to run in relevance mode
    rather than pass a gradient off as relevance.
    """

    def __init__(self, attribute: str, fn: Callable[[Tensor], Tensor],
                 relevance_fn: Callable[[Tensor], Tensor] | None = None):
        super().__init__()
        if attribute not in ATTRIBUTES:
            raise ValueError(f"attribute must be one of {tuple(ATTRIBUTES)}, got {attribute!r}")
        if not callable(fn):
            raise TypeError(f"fn must be callable, got {type(fn).__name__}")
        if relevance_fn is not None and not callable(relevance_fn):
            raise TypeError(f"relevance_fn must be callable or None, got {type(relevance_fn).__name__}")
        self.attribute, self.fn, self.relevance_fn = attribute, fn, relevance_fn

    def forward(self, data):
        name = type(self).__name__
        check_graph(data, name)
        t = data.get(self.attribute)
        if t is None:
            raise ValueError(f"{name} applies to {self.attribute} but the graph has no {self.attribute}")
        if is_relevance_mode():
            if self.relevance_fn is None:
                raise RuntimeError(
                    f"{name}({self.attribute!r}, {getattr(self.fn, '__name__', self.fn)}) has no relevance_fn, "
                    f"so it cannot run inside lrp_lib.teach.relevance()"
                )
            return replace_attribute(data, self.attribute, self.relevance_fn(t))
        return replace_attribute(data, self.attribute, self.fn(t))

    def extra_repr(self) -> str:
        return f"{self.attribute!r}, {getattr(self.fn, '__name__', self.fn)}"


class EdgeReLU(ElementWise):
    """ReLU on ``edge_attr``; relevance passes through active units (:func:`lrp_lib.teach.ops.relu`)."""

    def __init__(self):
        super().__init__("edge_attr", torch.relu, ops.relu)


class NodeReLU(ElementWise):
    """ReLU on ``x``; relevance passes through active units (:func:`lrp_lib.teach.ops.relu`)."""

    def __init__(self):
        super().__init__("x", torch.relu, ops.relu)


class GlobalReLU(ElementWise):
    """ReLU on ``u``; relevance passes through active units (:func:`lrp_lib.teach.ops.relu`)."""

    def __init__(self):
        super().__init__("u", torch.relu, ops.relu)


_GraphLinear.lrp_relevance_pass = ElementWise.lrp_relevance_pass = staticmethod(relevance_pass)
