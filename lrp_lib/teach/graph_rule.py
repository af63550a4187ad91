r"""The relevance rule of a Graph Network layer (:mod:`lrp_lib.teach.graph`), fused into one function.

A layer computes :math:`z = \sum_g W_g\, \mathrm{route}_g(a_g) + b` over its input groups
(:class:`Group`): the same terms with ordinary operations (:class:`GradientOps`, the gradient
mode), with the relevance ops of :mod:`lrp_lib.teach.ops` (:class:`ComposedOps`, the teaching
composition), or as ONE autograd function whose backward is the epsilon rule of the whole layer
(:class:`GraphLinearRelevance` and its three named subclasses).
"""
from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor

from lrp_lib.teach.share import relevance_share
from lrp_lib.teach import ops
from lrp_lib.teach import scatter as plain_scatter

__all__ = ["Group", "GradientOps", "ComposedOps", "term", "sum_terms", "GraphLinearRelevance",
           "EdgeLinearRelevance", "NodeLinearRelevance", "GlobalLinearRelevance"]


class Group(NamedTuple):
    """One input group of a layer: its features ``a`` (n_a x f), weight ``w`` (out x f), and how
    its rows reach the output rows: ``'self'`` (row i is output row i), ``'gather'`` (output row
    k reads ``a[index[k]]``) or ``'agg'`` (output row i aggregates the rows k with ``index[k] = i``)."""

    kind: str
    a: Tensor
    w: Tensor
    index: Tensor | None


class GradientOps:
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


class ComposedOps:
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


def term(o, g: Group, rows: int, aggregation: str | None, eps: float) -> Tensor:
    """The term ``W a`` of group ``g``, routed to the output rows, with the operations ``o``."""
    if g.kind == "self":
        return o.linear(g.a, g.w, eps)
    if g.kind == "gather":  # the map first (on the few source rows), then the copies
        return o.select(o.linear(g.a, g.w, eps), g.index)
    return o.linear(o.aggregate(g.a, g.index, rows, aggregation), g.w, eps)


def sum_terms(o, groups, bias, rows, aggregation, eps) -> Tensor:
    """``term_1 + term_2 + ... + bias``, left to right (the same order in every mode)."""
    terms = [term(o, g, rows, aggregation, eps) for g in groups]
    out = terms[0]
    for t in terms[1:]:
        out = o.add(out, t)
    return out if bias is None else o.add(out, bias)


# --------------------------------------------------------- the fused relevance rule
class GraphLinearRelevance(torch.autograd.Function):
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
            g = Group(kind, *flat[3 * i:3 * i + 3])
            if kind == "agg" and aggregation == "max":
                aggregated, argmax = plain_scatter.scatter_max(g.a, g.index, 0, rows)
                argmaxes.append(argmax)
                t = F.linear(aggregated, g.w)
            else:
                t = term(GradientOps, g, rows, aggregation, eps)
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
            g = Group(kind, *flat[3 * i:3 * i + 3])
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


class EdgeLinearRelevance(GraphLinearRelevance):
    r"""Relevance of :class:`~lrp_lib.teach.graph.EdgeLinear`, with :math:`s = R / (z + \epsilon\,\mathrm{sign}\,z)`
    (E x out): :math:`R_e = e \odot s W_e`, :math:`R_x = x \odot \big(\mathrm{scatter}_{s(k)} s\big) W_s
    + x \odot \big(\mathrm{scatter}_{r(k)} s\big) W_r`, :math:`R_u = u \odot \big(\mathrm{scatter}_{g(s(k))} s\big) W_u`,
    bias :math:`\sum_k b \odot s_k`.  See :class:`GraphLinearRelevance`."""


class NodeLinearRelevance(GraphLinearRelevance):
    r"""Relevance of :class:`~lrp_lib.teach.graph.NodeLinear`, :math:`s` (N x out): :math:`R_x = x \odot s W_x`,
    incoming sum :math:`R_{e_k} = e_k \odot (s W_{in})_{r(k)}` (mean: divided by the in-degree;
    max: :math:`m \odot s W_{in}` to the winning edge), outgoing likewise by sender,
    :math:`R_u = u \odot \big(\mathrm{scatter}_{g(i)} s\big) W_u`.  See :class:`GraphLinearRelevance`."""


class GlobalLinearRelevance(GraphLinearRelevance):
    r"""Relevance of :class:`~lrp_lib.teach.graph.GlobalLinear`, :math:`s` (G x out): nodes
    :math:`R_{x_i} = x_i \odot (s W_x)_{g(i)}`, edges :math:`R_{e_k} = e_k \odot (s W_e)_{g(s(k))}`
    (mean: divided by the group size; max: winner takes all), :math:`R_u = u \odot s W_u`.
    See :class:`GraphLinearRelevance`."""
