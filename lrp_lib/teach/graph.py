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
"""
from __future__ import annotations

import copy
import math
import numbers
from dataclasses import dataclass
from typing import Callable, NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from lrp_lib.teach import ops
from lrp_lib.teach import scatter as plain_scatter
from lrp_lib.teach.mode import is_relevance_mode, relevance
from lrp_lib.core.stabilizer import relevance_share
from lrp_lib.core.validation import check_batch, check_edge_index, check_finite, check_number

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
]

AGGREGATIONS = ("sum", "mean", "max")
ATTRIBUTES = {"x": "node", "edge_attr": "edge", "u": "global"}


# ------------------------------------------------------------ terms of a layer
class _Group(NamedTuple):
    """One input group of a layer: its features ``a`` (n_a x f), weight ``w`` (out x f), and how
    its rows reach the output rows: ``'self'`` (row i is output row i), ``'gather'`` (output row
    k reads ``a[index[k]]``) or ``'agg'`` (output row i aggregates the rows k with ``index[k] = i``)."""

    kind: str
    a: Tensor
    w: Tensor
    index: Tensor | None


class _GradientOps:
    """Ordinary differentiable operations: backward gives the true gradient."""

    @staticmethod
    def linear(x: Tensor, weight: Tensor, eps: float) -> Tensor:
        return F.linear(x, weight)

    @staticmethod
    def add(a: Tensor, b: Tensor) -> Tensor:
        return a + b

    @staticmethod
    def select(src: Tensor, index: Tensor) -> Tensor:
        return src.index_select(0, index)

    @staticmethod
    def aggregate(src: Tensor, index: Tensor, dim_size: int, aggregation: str) -> Tensor:
        if aggregation == "sum":
            return plain_scatter.scatter_add(src, index, 0, dim_size)
        if aggregation == "mean":
            return plain_scatter.scatter_mean(src, index, 0, dim_size)
        return plain_scatter.scatter_max(src, index, 0, dim_size)[0]


class _ComposedOps:
    """The same operations from :mod:`lrp_lib.teach.ops`: the layer as a composition of relevance ops
    (the teaching version of chapter 2, and the tests' reference for the fused rule)."""

    @staticmethod
    def linear(x: Tensor, weight: Tensor, eps: float) -> Tensor:
        return ops.linear_eps(x, weight, None, eps)

    @staticmethod
    def add(a: Tensor, b: Tensor) -> Tensor:
        return ops.add(a, b)

    @staticmethod
    def select(src: Tensor, index: Tensor) -> Tensor:
        return ops.index_select(src, 0, index)

    @staticmethod
    def aggregate(src: Tensor, index: Tensor, dim_size: int, aggregation: str) -> Tensor:
        if aggregation == "sum":
            return ops.scatter_add(src, index, 0, dim_size)
        if aggregation == "mean":
            return ops.scatter_mean(src, index, 0, dim_size)
        return ops.scatter_max(src, index, 0, dim_size)[0]


def _term(o, g: _Group, rows: int, aggregation: str | None, eps: float) -> Tensor:
    """The term ``W a`` of group ``g``, routed to the output rows, with the operations ``o``."""
    if g.kind == "self":
        return o.linear(g.a, g.w, eps)
    if g.kind == "gather":  # the map first (on the few source rows), then the copies
        return o.select(o.linear(g.a, g.w, eps), g.index)
    return o.linear(o.aggregate(g.a, g.index, rows, aggregation), g.w, eps)


def _sum_terms(o, groups, bias, rows, aggregation, eps) -> Tensor:
    """``term_1 + term_2 + ... + bias``, left to right (the same order in every mode)."""
    terms = [_term(o, g, rows, aggregation, eps) for g in groups]
    out = terms[0]
    for t in terms[1:]:
        out = o.add(out, t)
    return out if bias is None else o.add(out, bias)


# --------------------------------------------------------- the fused relevance rule
class _GraphLinearRelevance(torch.autograd.Function):
    r"""A whole graph layer, :math:`z = \sum_g W_g\, \mathrm{route}_g(a_g) + b`, as one function.

    Forward: the same values, in the same order, as the gradient mode.  Saved for backward:
    the inputs :math:`a_g` (alive anyway), the weights, the index tensors and the output
    :math:`z` itself, plus the argmax of a max aggregation; never an intermediate term.

    Backward: the epsilon rule of the layer seen as ONE linear map of all its inputs.  With
    :math:`s = R / (z + \epsilon\,\mathrm{sign}(z))` per output unit (0, and the relevance lost
    with a :class:`~lrp_lib.core.stabilizer.LostRelevanceWarning`, where :math:`z = 0`), every input
    feature receives its contribution times :math:`s`, summed over the outputs it reaches:

    * ``'self'`` (row i feeds output row i):  :math:`R_a = a \odot (s W)`;
    * ``'gather'`` (output row k reads :math:`a_{idx_k}`):
      :math:`R_{a_j} = a_j \odot \big(\sum_{k: idx_k = j} s_k\big) W`;
    * ``'agg'`` sum: :math:`R_{a_k} = a_k \odot (s W)_{idx_k}`; mean: the same divided by
      the size of the group :math:`idx_k`; max: the aggregated value :math:`m_{i,f}` receives
      :math:`m_{i,f} (s W)_{i,f}` and gives it all to its winner, row ``argmax[i, f]``;
    * the bias takes :math:`b \odot s` (summed over rows), which leaves the explanation.

    With :math:`\epsilon = 0` this equals the composition of :mod:`lrp_lib.teach.ops` (the proportional
    adds telescope: :math:`\frac{z_t}{z}\cdot\frac{a_j w_j}{z_t} = \frac{a_j w_j}{z}`).  With
    :math:`\epsilon > 0` the stabiliser acts once, on :math:`z`, not on every term.
    """

    @staticmethod
    def forward(ctx, spec, bias, *flat):
        name, eps, rows, aggregation, kinds = spec
        out, argmaxes = None, []
        for i, kind in enumerate(kinds):
            g = _Group(kind, *flat[3 * i:3 * i + 3])
            if kind == "agg" and aggregation == "max":
                aggregated, argmax = plain_scatter.scatter_max(g.a, g.index, 0, rows)
                argmaxes.append(argmax)
                t = F.linear(aggregated, g.w)
            else:
                t = _term(_GradientOps, g, rows, aggregation, eps)
            out = t if out is None else out.add_(t)  # every term is a fresh tensor
        if bias is not None:
            out.add_(bias)
        ctx.spec = spec
        ctx.save_for_backward(out, bias, *flat, *argmaxes)
        return out

    @staticmethod
    def backward(ctx, rel_out: Tensor):
        name, eps, rows, aggregation, kinds = ctx.spec
        out, bias, *rest = ctx.saved_tensors
        flat, argmaxes = rest[:3 * len(kinds)], iter(rest[3 * len(kinds):])
        # s = R / (z + eps sign z), sign(0) = +1 (the one stabiliser and share of core.stabilizer)
        s = relevance_share(name, rel_out, out, eps=eps)
        rel = []
        for i, kind in enumerate(kinds):
            g = _Group(kind, *flat[3 * i:3 * i + 3])
            argmax = next(argmaxes) if kind == "agg" and aggregation == "max" else None
            if not ctx.needs_input_grad[2 + 3 * i]:
                rel += [None, None, None]
                continue
            if kind == "self":
                r = s @ g.w
            elif kind == "gather":  # the copies of a row sum their s, then one product
                r = s.new_zeros(g.a.shape[0], s.shape[1]).index_add_(0, g.index, s) @ g.w
            else:
                r = s @ g.w  # rows x f: relevance per unit of the aggregated features
                if aggregation == "max":  # winner takes all; empty groups point past the end
                    r = r.new_zeros(g.a.shape[0] + 1, r.shape[1]).scatter_add_(0, argmax, r)[:-1]
                else:
                    if aggregation == "mean":
                        count = torch.bincount(g.index, minlength=rows).clamp_(min=1).to(r.dtype)
                        r.div_(count.unsqueeze(1))
                    r = r.index_select(0, g.index)
            rel += [r.mul_(g.a), None, None]
        rel_bias = s.sum(0).mul_(bias) if bias is not None and ctx.needs_input_grad[1] else None
        return (None, rel_bias, *rel)


class EdgeLinearRelevance(_GraphLinearRelevance):
    r"""Relevance of :class:`EdgeLinear`, with :math:`s = R / (z + \epsilon\,\mathrm{sign}\,z)`
    (E x out): :math:`R_e = e \odot s W_e`, :math:`R_x = x \odot \big(\mathrm{scatter}_{s(k)} s\big) W_s
    + x \odot \big(\mathrm{scatter}_{r(k)} s\big) W_r`, :math:`R_u = u \odot \big(\mathrm{scatter}_{g(s(k))} s\big) W_u`,
    bias :math:`\sum_k b \odot s_k`.  See :class:`_GraphLinearRelevance`."""


class NodeLinearRelevance(_GraphLinearRelevance):
    r"""Relevance of :class:`NodeLinear`, :math:`s` (N x out): :math:`R_x = x \odot s W_x`,
    incoming sum :math:`R_{e_k} = e_k \odot (s W_{in})_{r(k)}` (mean: divided by the in-degree;
    max: :math:`m \odot s W_{in}` to the winning edge), outgoing likewise by sender,
    :math:`R_u = u \odot \big(\mathrm{scatter}_{g(i)} s\big) W_u`.  See :class:`_GraphLinearRelevance`."""


class GlobalLinearRelevance(_GraphLinearRelevance):
    r"""Relevance of :class:`GlobalLinear`, :math:`s` (G x out): nodes
    :math:`R_{x_i} = x_i \odot (s W_x)_{g(i)}`, edges :math:`R_{e_k} = e_k \odot (s W_e)_{g(s(k))}`
    (mean: divided by the group size; max: winner takes all), :math:`R_u = u \odot s W_u`.
    See :class:`_GraphLinearRelevance`."""


# ------------------------------------------------------------- reading a graph
def _check_graph(data, layer: str) -> None:
    if not (hasattr(data, "get") and hasattr(data, "num_nodes") and hasattr(data, "__copy__")):
        raise TypeError(f"{layer} expects a torch_geometric Data or Batch, got {type(data).__name__}")


def _features(data, name: str, size: int, layer: str) -> Tensor:
    """``data.<name>`` checked to be a 2-D float tensor with ``size`` columns."""
    t = data.get(name)
    if t is None:
        raise ValueError(
            f"{layer} is configured to read {name} ({ATTRIBUTES[name]} features of size {size}) "
            f"but the graph has no {name}"
        )
    if not isinstance(t, Tensor) or not t.is_floating_point():
        got = t.dtype if isinstance(t, Tensor) else type(t).__name__
        raise TypeError(f"{layer}: {name} must be a floating point tensor, got {got}")
    if t.dim() != 2:
        raise ValueError(f"{layer}: {name} must be 2-D (rows x features), got shape {tuple(t.shape)}")
    if t.shape[1] != size:
        raise ValueError(
            f"{layer} expects {name} with {size} features, but {name} has {t.shape[1]} "
            f"(shape {tuple(t.shape)})"
        )
    try:
        check_finite(t, name)
    except ValueError as e:
        raise ValueError(f"{layer}: {e}") from None
    return t


def _edge_index(data, layer: str, num_nodes: int) -> Tensor:
    edge_index = data.get("edge_index")
    if edge_index is None:
        raise ValueError(f"{layer} needs edge_index (2 x E, senders then receivers) but the graph has none")
    try:
        return check_edge_index(edge_index, num_nodes)
    except (TypeError, ValueError, IndexError) as e:
        raise type(e)(f"{layer}: {e}") from None


def _node_count(data) -> int:
    x = data.get("x")
    if isinstance(x, Tensor) and x.dim() >= 1:
        return x.shape[0]
    n = data.num_nodes
    return 0 if n is None else int(n)


def _batch(data, layer: str, num_nodes: int, device) -> Tensor:
    """``data.batch``, or all zeros (one graph) when the graph has no ``batch``."""
    batch = data.get("batch")
    if batch is None:
        return torch.zeros(num_nodes, dtype=torch.long, device=device)
    if not isinstance(batch, Tensor) or batch.dtype != torch.long or batch.dim() != 1:
        raise TypeError(f"{layer}: batch must be a 1-D torch.long tensor")
    if batch.numel() != num_nodes:
        raise ValueError(f"{layer}: batch has {batch.numel()} entries but the graph has {num_nodes} nodes")
    edge_index = data.get("edge_index")
    if isinstance(edge_index, Tensor):  # the graphs must not share edges (relevance is read per graph)
        try:
            check_batch(batch, num_nodes, check_edge_index(edge_index, num_nodes))
        except (TypeError, ValueError, IndexError) as e:
            raise type(e)(f"{layer}: {e}") from None
    return batch


def num_graphs(data) -> int:
    """Number of graphs in ``data``: the rows of ``u`` if it has one, else ``data.num_graphs``
    (a Batch), else ``batch.max() + 1``, else 1."""
    u = data.get("u")
    if isinstance(u, Tensor) and u.dim() >= 1:
        return u.shape[0]
    if hasattr(type(data), "num_graphs"):  # Batch
        return int(data.num_graphs)
    batch = data.get("batch")
    if isinstance(batch, Tensor):
        return int(batch.max()) + 1 if batch.numel() else 0
    return 1


def _check_batch_vs_graphs(batch: Tensor, graphs: int, layer: str) -> None:
    if batch.numel() and int(batch.max()) >= graphs:
        raise ValueError(
            f"{layer}: batch refers to graph {int(batch.max())} but u has {graphs} rows (one per graph)"
        )


def _check_rows(t: Tensor, name: str, rows: int, what: str, layer: str) -> None:
    if t.shape[0] != rows:
        raise ValueError(f"{layer}: {name} has {t.shape[0]} rows but the graph has {rows} {what}")


def _replace(data, name: str, value: Tensor):
    out = copy.copy(data)  # shallow: the other attributes are the same tensors
    setattr(out, name, value)
    return out


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

    relevance_function = _GraphLinearRelevance  # each layer names its own

    def forward(self, data):
        if is_relevance_mode():
            return self._run(data, "fused")
        return self._run(data, _GradientOps)

    def _run(self, data, how):
        """Output graph of the layer: with the operations ``how`` (``_GradientOps`` or
        ``_ComposedOps``), or ``"fused"``: one :class:`_GraphLinearRelevance` for the layer."""
        _check_graph(data, type(self).__name__)
        attribute, rows, groups = self._groups(data)
        if how == "fused":
            spec = (type(self).__name__, self.eps, rows, self.aggregation, tuple(g.kind for g in groups))
            flat = [t for g in groups for t in (g.a, g.w, g.index)]
            out = self.relevance_function.apply(spec, self.bias, *flat)
        else:
            out = _sum_terms(how, groups, self.bias, rows, self.aggregation, self.eps)
        return _replace(data, attribute, out)

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
        n = _node_count(data)
        needs_edges = s["sender_features"] or s["receiver_features"] or s["global_features"] or not s["edge_features"]
        edge_index = _edge_index(data, name, n) if needs_edges or data.get("edge_index") is not None else None
        if s["edge_features"]:
            e = _features(data, "edge_attr", s["edge_features"], name)
            if edge_index is not None:
                _check_rows(e, "edge_attr", edge_index.shape[1], "edges (edge_index columns)", name)
            groups.append(_Group("self", e, self.W_edge, None))
        if s["sender_features"]:
            groups.append(_Group("gather", _features(data, "x", s["sender_features"], name), self.W_sender,
                                 edge_index[0]))
        if s["receiver_features"]:
            groups.append(_Group("gather", _features(data, "x", s["receiver_features"], name), self.W_receiver,
                                 edge_index[1]))
        if s["global_features"]:
            u = _features(data, "u", s["global_features"], name)
            batch = _batch(data, name, n, u.device)
            _check_batch_vs_graphs(batch, u.shape[0], name)
            groups.append(_Group("gather", u, self.W_global, batch[edge_index[0]]))
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
        n = _node_count(data)
        if s["node_features"]:
            groups.append(_Group("self", _features(data, "x", s["node_features"], name), self.W_node, None))
        for key, row, weight in (("incoming_features", 1, self.W_incoming), ("outgoing_features", 0, self.W_outgoing)):
            if s[key]:
                e = _features(data, "edge_attr", s[key], name)
                edge_index = _edge_index(data, name, n)
                _check_rows(e, "edge_attr", edge_index.shape[1], "edges (edge_index columns)", name)
                groups.append(_Group("agg", e, weight, edge_index[row]))
        if s["global_features"]:
            u = _features(data, "u", s["global_features"], name)
            batch = _batch(data, name, n, u.device)
            _check_batch_vs_graphs(batch, u.shape[0], name)
            groups.append(_Group("gather", u, self.W_global, batch))
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
        n, graphs = _node_count(data), num_graphs(data)
        if s["global_features"]:
            u = _features(data, "u", s["global_features"], name)
        if s["node_features"] or s["edge_features"]:
            batch = _batch(data, name, n, data.get("x").device if data.get("x") is not None else None)
            _check_batch_vs_graphs(batch, graphs, name)
        if s["node_features"]:
            groups.append(_Group("agg", _features(data, "x", s["node_features"], name), self.W_node, batch))
        if s["edge_features"]:
            e = _features(data, "edge_attr", s["edge_features"], name)
            edge_index = _edge_index(data, name, n)
            _check_rows(e, "edge_attr", edge_index.shape[1], "edges (edge_index columns)", name)
            groups.append(_Group("agg", e, self.W_edge, batch[edge_index[0]]))
        if s["global_features"]:
            groups.append(_Group("self", u, self.W_global, None))
        return "u", graphs, groups


def compose_with_ops(layer: _GraphLinear, data):
    """``layer(data)`` built from :mod:`lrp_lib.teach.ops` (one ``linear_eps`` per term, ``index_select``
    and scatters, a chain of ``ops.add``), whatever the mode: the teaching version, whose
    relevance equals the fused rule's at ``eps = 0``.  It keeps every term for backward."""
    if not isinstance(layer, _GraphLinear):
        raise TypeError(f"layer must be an EdgeLinear, NodeLinear or GlobalLinear, got {type(layer).__name__}")
    return layer._run(data, _ComposedOps)


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
        _check_graph(data, name)
        t = data.get(self.attribute)
        if t is None:
            raise ValueError(f"{name} applies to {self.attribute} but the graph has no {self.attribute}")
        if is_relevance_mode():
            if self.relevance_fn is None:
                raise RuntimeError(
                    f"{name}({self.attribute!r}, {getattr(self.fn, '__name__', self.fn)}) has no relevance_fn, "
                    f"so it cannot run inside lrp_lib.teach.relevance()"
                )
            return _replace(data, self.attribute, self.relevance_fn(t))
        return _replace(data, self.attribute, self.fn(t))

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


# ------------------------------------------------------------ reading relevance
def relevance_inputs(data, attributes=("x", "edge_attr", "u")):
    """Shallow copy of ``data`` whose float ``attributes`` are fresh leaves requiring grad.

    After ``out = model(relevance_inputs(data))`` and a backward pass, their ``.grad`` holds
    the relevance; :func:`read_relevance` sums it up.
    """
    _check_graph(data, "relevance_inputs")
    out = copy.copy(data)
    for name in attributes:
        if name not in ATTRIBUTES:
            raise ValueError(f"attributes may contain {tuple(ATTRIBUTES)}, got {name!r}")
        t = data.get(name)
        if isinstance(t, Tensor) and t.is_floating_point():
            setattr(out, name, t.detach().clone().requires_grad_(True))
    return out


@dataclass
class GraphRelevance:
    """Relevance of one (batch of) graph(s), each summed over the features.

    ``node`` (N,), ``edge`` (E,), ``graph`` (G,: the relevance of each graph's global features
    ``u``); ``None`` for an attribute the graph lacks or that does not require grad.
    ``node_graph`` and ``edge_graph`` give the graph of each node and edge.
    """

    node: Tensor | None
    edge: Tensor | None
    graph: Tensor | None
    node_graph: Tensor
    edge_graph: Tensor | None
    num_graphs: int

    def totals(self) -> dict[str, float]:
        """Total relevance per group: ``{'nodes', 'edges', 'globals', 'total'}`` (0 when absent)."""
        parts = {k: 0.0 if v is None else float(v.sum()) for k, v in
                 (("nodes", self.node), ("edges", self.edge), ("globals", self.graph))}
        parts["total"] = parts["nodes"] + parts["edges"] + parts["globals"]
        return parts

    def per_graph(self) -> Tensor:
        """Total relevance of each graph: its nodes, edges and globals together, shape (G,)."""
        dtype = next(t.dtype for t in (self.node, self.edge, self.graph) if t is not None)
        total = torch.zeros(self.num_graphs, dtype=dtype, device=self.node_graph.device)
        if self.node is not None:
            total = total.index_add(0, self.node_graph, self.node)
        if self.edge is not None:
            total = total.index_add(0, self.edge_graph, self.edge)
        if self.graph is not None:
            total = total + self.graph
        return total


def read_relevance(data) -> GraphRelevance:
    """Read the relevance left in ``x.grad``, ``edge_attr.grad`` and ``u.grad`` after backward.

    ``data`` is the *input* graph whose attributes are leaves requiring grad (see
    :func:`relevance_inputs`).  A leaf that relevance never reached counts 0.
    """
    _check_graph(data, "read_relevance")
    sums, found = {}, False
    for name in ATTRIBUTES:
        t = data.get(name)
        if not isinstance(t, Tensor) or not t.requires_grad:
            sums[name] = None
            continue
        if not t.is_leaf:
            raise ValueError(
                f"{name} is not a leaf tensor, so backward leaves no .grad on it; read the relevance "
                f"from the input graph (relevance_inputs(data)), not from a layer's output"
            )
        found = True
        g = t.grad if t.grad is not None else torch.zeros_like(t)
        sums[name] = g.flatten(1).sum(1) if g.dim() > 1 else (g if g.dim() == 1 else g.reshape(1))
    if not found:
        raise ValueError("none of x, edge_attr, u requires grad: pass relevance_inputs(data) to the model")
    n = _node_count(data)
    x = data.get("x")
    node_graph = _batch(data, "read_relevance", n, x.device if isinstance(x, Tensor) else None)
    edge_index = data.get("edge_index")
    edge_graph = node_graph[edge_index[0]] if isinstance(edge_index, Tensor) else None
    if sums["edge_attr"] is not None and edge_graph is None:
        raise ValueError("read_relevance: the graph has edge_attr but no edge_index to place its edges")
    return GraphRelevance(sums["x"], sums["edge_attr"], sums["u"], node_graph, edge_graph, num_graphs(data))


def relevance_pass(model: nn.Module, data):
    """The relevance entry point of a model of these layers: ``model`` runs forward on a copy of
    ``data`` whose ``x``, ``edge_attr`` and ``u`` are leaves (:func:`relevance_inputs`), in
    relevance mode and with gradients on.  Returns the output and a function that, after the
    caller's ``backward``, reads the relevance (:func:`read_relevance`: a :class:`GraphRelevance`
    with ``node``, ``edge`` and ``per_graph()``).

    Every layer of this module carries it as ``lrp_relevance_pass``, so a caller that must not
    import :mod:`lrp_lib.teach` (:func:`lrp_lib.explain.jobs.explain_dataset`) finds it on the model.
    """
    inputs = relevance_inputs(data, ("x", "edge_attr", "u"))
    with torch.enable_grad(), relevance():
        out = model(inputs)
    return out, lambda: read_relevance(inputs)


_GraphLinear.lrp_relevance_pass = ElementWise.lrp_relevance_pass = staticmethod(relevance_pass)
