r"""Chapter 3's linear maps with an LRP rule in backward: dense layers, convolutions, average pooling.

Each wrapper checks its arguments as torch does, builds a :class:`~lrp_lib.teach.backward_rules.LinearMap`
(the map and its vector-Jacobian product) and applies :class:`LinearMapRelevance`, whose backward is the
rule's backward form (:func:`~lrp_lib.teach.backward_rules.propagate`):

.. math::  R = x \odot J^\top \!\left(\frac{R_{out}}{z}\right)

for the epsilon rule (the other rules modify the weights or split the contributions by sign;
their formulas are in :mod:`lrp_lib.core.rules`).  For a convolution :math:`J^\top` is the kernel
of the convolution's input gradient, so no contribution tensor is formed and memory stays
O(size of input + output).  ``rule=`` takes a :class:`~lrp_lib.core.rules.Rule` or its name;
epsilon (:math:`\epsilon = 10^{-6}`) by default.
"""
from __future__ import annotations

import numbers
from typing import Callable

import torch
import torch.nn.functional as F
from torch import Tensor

from lrp_lib.core.rules import Rule, get_rule
from lrp_lib.teach.backward_rules import LinearMap, propagate
from lrp_lib.teach.scatter import check_linear, check_tensor

__all__ = ["LinearMapRelevance", "linear_map", "linear", "conv1d", "conv2d", "conv3d", "avg_pool2d"]


class LinearMapRelevance(torch.autograd.Function):
    r"""The relevance function of a linear map: forward ``m(x, weight, bias)`` (``weight=None``: a map
    without weights, scale 1); backward the rule's backward form, the input's relevance (the weight and the bias
    get none).  ``op`` names the map in the rule's warnings."""

    @staticmethod
    def forward(ctx, x, weight, bias, m, rule, op):
        out = m(x, 1.0 if weight is None else weight, bias)
        ctx.m, ctx.rule, ctx.op = m, rule, op
        ctx.save_for_backward(x, weight, bias)
        ctx.out = out.detach()
        return out

    @staticmethod
    def backward(ctx, rel_out):
        x, weight, bias = ctx.saved_tensors
        w = 1.0 if weight is None else weight
        return propagate(ctx.rule, ctx.m, x, w, bias, ctx.out, rel_out, ctx.op), None, None, None, None, None


def linear_map(x: Tensor, fn: Callable, weight: Tensor | None = None, bias: Tensor | None = None,
               rule: Rule | str = "epsilon", vjp: Callable | None = None) -> Tensor:
    r"""Any linear map with an LRP rule in backward.

    With a ``weight``, ``fn(x, weight, bias)`` must be linear in ``x`` and in ``weight`` with
    contributions :math:`x_j w_{jk}` (a dense layer, a convolution); without, ``fn(x)`` is a
    fixed linear map whose coefficients must be non-negative for the rules other than
    epsilon (pooling, sums).  ``vjp(v, x, weight)`` (``vjp(v, x)`` without weight) returns
    :math:`J^\top v` of the bias-free map; by default autograd computes it, rerunning ``fn``.
    """
    check_tensor(x, "x")
    if weight is not None:
        check_tensor(weight, "weight")
    if bias is not None:
        check_tensor(bias, "bias")
    if not callable(fn):
        raise TypeError(f"fn must be callable, got {type(fn).__name__}")
    m = LinearMap(fn, vjp, has_weight=weight is not None)
    return LinearMapRelevance.apply(x, weight, bias, m, get_rule(rule), getattr(fn, "__name__", "linear_map"))


# ---------------------------------------------------------------- dense layer
def _linear_vjp(v, x, weight):
    return v @ weight


def linear(x: Tensor, weight: Tensor, bias: Tensor | None = None, rule: Rule | str = "epsilon") -> Tensor:
    r"""``F.linear(x, weight, bias)`` (``x @ weight.T + bias``) with an LRP rule in backward.

    Contributions :math:`x_j w_{kj}`; the VJP is :math:`R/z \mapsto (R/z) W`.  ``x`` may have
    any leading batch dimensions.  Epsilon (:math:`\epsilon = 10^{-6}`) by default.
    """
    check_linear(x, weight, bias)
    m = LinearMap(F.linear, _linear_vjp)
    return LinearMapRelevance.apply(x, weight, bias, m, get_rule(rule), "linear")


def _check_bias(bias, n: int, what: str) -> None:
    if bias is not None:
        check_tensor(bias, "bias")
        if bias.shape != (n,):
            raise ValueError(f"bias must have shape ({n},) to match weight's {what}, got {tuple(bias.shape)}")


# ---------------------------------------------------------------- convolution
_CONV = {1: (F.conv1d, torch.nn.grad.conv1d_input), 2: (F.conv2d, torch.nn.grad.conv2d_input),
         3: (F.conv3d, torch.nn.grad.conv3d_input)}


def _tuple(value, d: int, name: str, minimum: int) -> tuple[int, ...]:
    values = (value,) * d if isinstance(value, numbers.Integral) and not isinstance(value, bool) else value
    if (not isinstance(values, (tuple, list)) or len(values) != d
            or any(isinstance(v, bool) or not isinstance(v, numbers.Integral) or v < minimum for v in values)):
        raise ValueError(f"{name} must be an int >= {minimum} or a tuple of {d} such ints, got {value!r}")
    return tuple(int(v) for v in values)


def _conv(d: int, x, weight, bias, stride, padding, dilation, groups, rule) -> Tensor:
    name = f"conv{d}d"
    check_tensor(x, "x")
    check_tensor(weight, "weight")
    if weight.dim() != d + 2:
        raise ValueError(f"weight must be {d + 2}-D (out_channels, in_channels/groups, *kernel), "
                         f"got shape {tuple(weight.shape)}")
    if x.dim() not in (d + 1, d + 2):
        raise ValueError(f"x must be {d + 2}-D (N, C_in, *spatial) or {d + 1}-D unbatched, got shape {tuple(x.shape)}")
    if isinstance(groups, bool) or not isinstance(groups, numbers.Integral) or groups < 1:
        raise ValueError(f"groups must be a positive int, got {groups!r}")
    channels = x.shape[-d - 1]
    if channels != weight.shape[1] * groups:
        raise ValueError(f"x has {channels} input channels but weight expects in_channels/groups="
                         f"{weight.shape[1]} with groups={groups} (x {tuple(x.shape)}, weight {tuple(weight.shape)})")
    if weight.shape[0] % groups:
        raise ValueError(f"weight's out_channels ({weight.shape[0]}) must be divisible by groups={groups}")
    _check_bias(bias, weight.shape[0], "out_channels")
    stride = _tuple(stride, d, "stride", 1)
    dilation = _tuple(dilation, d, "dilation", 1)
    forward, input_grad = _CONV[d]
    if isinstance(padding, str):
        if padding not in ("valid", "same"):
            raise ValueError(f"padding must be 'valid', 'same', an int or a tuple of {d} ints, got {padding!r}")
        vjp = None  # torch's input-gradient helper takes numbers only: let autograd do it
    else:
        padding = _tuple(padding, d, "padding", 0)

        def vjp(v, inp, w):
            return input_grad(inp.shape, w, v, stride, padding, dilation, groups)

    def fn(inp, w, b):
        return forward(inp, w, b, stride, padding, dilation, groups)

    fn.__name__ = name
    unbatched = x.dim() == d + 1
    if unbatched:
        x = x.unsqueeze(0)
    out = LinearMapRelevance.apply(x, weight, bias, LinearMap(fn, vjp), get_rule(rule), name)
    return out.squeeze(0) if unbatched else out


def conv1d(x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1, rule: Rule | str = "epsilon"):
    r"""``F.conv1d`` with an LRP rule in backward (arguments as in torch; epsilon by default).
    Contributions :math:`x_{c, i + \ldots} w_{o, c, \ldots}`; the VJP is the convolution's input gradient."""
    return _conv(1, x, weight, bias, stride, padding, dilation, groups, rule)


def conv2d(x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1, rule: Rule | str = "epsilon"):
    r"""``F.conv2d`` with an LRP rule in backward (arguments as in torch; epsilon by default).

    Output :math:`z_{o,p} = \sum_{c,q} x_{c,\,s p + d q - \mathrm{pad}}\, w_{o,c,q} + b_o`; each
    term is one contribution, and :math:`J^\top v` is ``torch.nn.grad.conv2d_input`` (the
    kernel behind the convolution's input gradient), so no contribution tensor is built.
    """
    return _conv(2, x, weight, bias, stride, padding, dilation, groups, rule)


def conv3d(x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1, rule: Rule | str = "epsilon"):
    r"""``F.conv3d`` with an LRP rule in backward (arguments as in torch; epsilon by default)."""
    return _conv(3, x, weight, bias, stride, padding, dilation, groups, rule)


# -------------------------------------------------------------------- pooling
def avg_pool2d(x: Tensor, kernel_size, stride=None, padding=0, rule: Rule | str = "epsilon") -> Tensor:
    r"""``F.avg_pool2d`` (``count_include_pad=True``) with an LRP rule in backward.

    Each output is :math:`\frac{1}{k_h k_w}\sum x`: contributions :math:`x_j / (k_h k_w)`, so
    with the epsilon rule a window's relevance is split in proportion to its inputs.  All
    coefficients are positive: z+ and gamma reduce to the z-rule on :math:`x^+`, resp. to
    epsilon.  The VJP is the pooling's own input gradient.
    """
    check_tensor(x, "x")
    if x.dim() not in (3, 4):
        raise ValueError(f"x must be 4-D (N, C, H, W) or 3-D unbatched, got shape {tuple(x.shape)}")
    kernel_size = _tuple(kernel_size, 2, "kernel_size", 1)
    stride = kernel_size if stride is None else _tuple(stride, 2, "stride", 1)
    padding = _tuple(padding, 2, "padding", 0)
    if any(2 * p > k for p, k in zip(padding, kernel_size)):
        raise ValueError(f"padding {padding} must be at most half of kernel_size {kernel_size}")

    def avg_pool2d(inp):
        return F.avg_pool2d(inp, kernel_size, stride, padding)

    def vjp(v, inp):
        return torch.ops.aten.avg_pool2d_backward(v, inp, kernel_size, stride, padding, False, True, None)

    return LinearMapRelevance.apply(x, None, None, LinearMap(avg_pool2d, vjp, has_weight=False),
                                    get_rule(rule), "avg_pool2d")
