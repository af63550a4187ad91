r"""LRP rules for any linear map: dense layers, convolutions, average pooling.

A linear layer computes :math:`z_k = \sum_j x_j w_{jk} + b_k`; the term :math:`x_j w_{jk}`
is input :math:`j`'s *contribution* to output :math:`k`.  Every rule here redistributes the
relevance :math:`R_k` of each output over (a modified version of) those contributions,

.. math::  R_j = \sum_k \frac{c_{jk}}{\sum_{j'} c_{j'k}} R_k ,

and every rule is computed without ever forming the contribution tensor: for a map
:math:`f(x) = J x` the sum over :math:`k` of :math:`w_{jk} s_k` is the vector-Jacobian
product :math:`(J^\top s)_j`, so

.. math::  R = x \odot J^\top \!\left(\frac{R_{out}}{z}\right)

costs one vector-Jacobian product (VJP) of :math:`f` -- for a convolution, the kernel that
computes a convolution's input gradient.  Memory stays O(size of input + output).

The rules (each a small object; ``rule=`` also takes its name as a string):

* :class:`Epsilon` (``"epsilon"``; ``"z"`` is ``Epsilon(0)``):
  :math:`R_j = \sum_k \frac{x_j w_{jk}}{z_k + \epsilon\,\mathrm{sign}(z_k)} R_k`, with the
  ordinary output :math:`z` (bias included), saved by the forward pass.
* :class:`Gamma` (``"gamma"``): the epsilon rule with weights :math:`w + \gamma w^+` and bias
  :math:`b + \gamma b^+`; favours positive contributions.  Needs one forward and one VJP of
  the map with the modified weights.
* :class:`AlphaBeta` (``"alpha2beta1"``, ...): positive and negative contributions
  :math:`(x_j w_{jk})^\pm` split separately,
  :math:`R_j = \sum_k \big(\alpha \frac{(x_j w_{jk})^+}{z_k^+} - \beta \frac{(x_j w_{jk})^-}{z_k^-}\big) R_k`
  with :math:`\alpha - \beta = 1`.
* :class:`ZPlus` (``"zplus"``): :math:`\alpha = 1, \beta = 0`, positive contributions only.

Here :math:`t^+ = \max(t, 0)`, :math:`t^- = \min(t, 0)`, and the bias counts as the
contribution of a constant input 1, so :math:`z_k^\pm = \sum_j (x_j w_{jk})^\pm + b_k^\pm`.
Because :math:`(x w)^+ = x^+ w^+ + x^- w^-` and :math:`(x w)^- = x^+ w^- + x^- w^+`, each part
is a sum of the same linear map applied to clamped inputs and weights: a VJP each (one when
``x >= 0``, as after a ReLU).

A denominator equal to zero cannot be split: that output's relevance is lost (zero) and a
:class:`~lrp_lib.core.stabilizer.LostRelevanceWarning` says so, as in every rule.  The bias keeps
its own share (it is not an input), so only bias-free maps conserve relevance exactly
(and the epsilon rule with :math:`\epsilon > 0` absorbs a little).
"""
from __future__ import annotations

import math
import numbers
import re
from typing import Callable, Union

import torch
import torch.nn.functional as F
from torch import Tensor

from lrp_lib.core.stabilizer import LostRelevanceWarning, relevance_share, stabilize
from lrp_lib.core.validation import check_linear, check_number, check_tensor

__all__ = [
    "Rule",
    "Epsilon",
    "Gamma",
    "AlphaBeta",
    "ZPlus",
    "ZBox",
    "get_rule",
    "linear_map",
    "linear",
    "conv1d",
    "conv2d",
    "conv3d",
    "avg_pool2d",
]

Weight = Union[Tensor, float]  # a weight tensor, or a scale for maps without weights


# ----------------------------------------------------------------- linear maps
class LinearMap:
    r"""A map :math:`x \mapsto f(x, w) + b`, linear in :math:`x` and in :math:`w`.

    ``fn(x, weight, bias)`` is the map itself; ``vjp(v, x, weight)`` returns
    :math:`J^\top v` for the bias-free map (``x`` is only used for its shape).  A map without
    weights (pooling) gets ``weight=1.0``, a scale, so the rules' weight modifications
    (:math:`w^+`, :math:`w + \gamma w^+`) still apply: its fixed coefficients must then be
    non-negative.  With ``vjp=None`` the VJP is taken by autograd, which reruns ``fn``.
    """

    def __init__(self, fn: Callable, vjp: Callable | None = None, has_weight: bool = True):
        self.fn, self._vjp, self.has_weight = fn, vjp, has_weight

    def __call__(self, x: Tensor, weight: Weight, bias: Tensor | None) -> Tensor:
        if self.has_weight:
            return self.fn(x, weight, bias)
        out = self.fn(x)
        if weight != 1.0:
            out = out * weight
        return out if bias is None else out + bias

    def vjp(self, v: Tensor, x: Tensor, weight: Weight) -> Tensor:
        if not self.has_weight:
            g = self._vjp(v, x) if self._vjp is not None else self._autograd_vjp(v, x, None)
            return g if weight == 1.0 else g * weight
        if self._vjp is not None:
            return self._vjp(v, x, weight)
        return self._autograd_vjp(v, x, weight)

    def _autograd_vjp(self, v: Tensor, x: Tensor, weight: Tensor | None) -> Tensor:
        with torch.enable_grad():
            leaf = x.detach().requires_grad_(True)
            out = self.fn(leaf) if weight is None else self.fn(leaf, weight.detach(), None)
            (g,) = torch.autograd.grad(out, leaf, v)
        return g


def _positive(w: Weight) -> Weight:
    return max(w, 0.0) if isinstance(w, float) else w.clamp(min=0)


def _negative(w: Weight) -> Weight:
    return min(w, 0.0) if isinstance(w, float) else w.clamp(max=0)


def _is_zero(t: Weight | None) -> bool:
    if t is None:
        return True
    return t == 0.0 if isinstance(t, float) else not bool(t.any())


def _share(op: str, rel_out: Tensor, z: Tensor, eps: float = 0.0) -> Tensor:
    """``rel_out / (z + eps * sign(z))``; where ``z == 0`` the share is 0: that relevance is
    lost, with a :class:`~lrp_lib.core.stabilizer.LostRelevanceWarning` (the helper of :mod:`lrp_lib.core.stabilizer`)."""
    return relevance_share(op, rel_out, z, stabilize(z, eps) if eps else None)


# ----------------------------------------------------------------------- rules
class Rule:
    """Base class: ``propagate`` returns the input relevance of one linear map."""

    def propagate(self, m: LinearMap, x: Tensor, weight: Weight, bias: Tensor | None,
                  out: Tensor, rel_out: Tensor, op: str) -> Tensor:
        raise NotImplementedError

    def __eq__(self, other):
        return type(self) is type(other) and vars(self) == vars(other)

    def __hash__(self):
        return hash((type(self).__name__, tuple(sorted(vars(self).items()))))

    def __repr__(self):
        args = ", ".join(f"{k}={v!r}" for k, v in vars(self).items())
        return f"{type(self).__name__}({args})"





class Epsilon(Rule):
    r"""Epsilon rule (:math:`\epsilon = 0`: the z-rule).

    .. math::  R_j = \sum_k \frac{x_j w_{jk}}{z_k + \epsilon\,\mathrm{sign}(z_k)} R_k
               = x_j \big[J^\top \tfrac{R}{z + \epsilon\,\mathrm{sign}(z)}\big]_j

    :math:`z` is the ordinary output (bias included) saved by the forward pass, so the
    backward is one VJP.  :math:`\mathrm{sign}(0) = +1`; an output exactly 0 loses its relevance.
    """

    def __init__(self, eps: float = 1e-6):
        self.eps = check_number(eps, "eps")

    def propagate(self, m, x, weight, bias, out, rel_out, op):
        return x * m.vjp(_share(op, rel_out, out, self.eps), x, weight)


class Gamma(Rule):
    r"""Gamma rule: the epsilon rule on the weights :math:`w + \gamma w^+` (bias :math:`b + \gamma b^+`).

    .. math::  R_j = \sum_k \frac{x_j (w_{jk} + \gamma w_{jk}^+)}
               {z'_k + \epsilon\,\mathrm{sign}(z'_k)} R_k, \qquad
               z'_k = \sum_j x_j (w_{jk} + \gamma w_{jk}^+) + b_k + \gamma b_k^+

    Meant for non-negative inputs (after a ReLU), where it favours positive contributions;
    :math:`\gamma = 0` is the epsilon rule, :math:`\gamma \to \infty` tends to z+.  Costs one
    forward and one VJP of the map with the modified weights.
    """

    def __init__(self, gamma: float = 0.25, eps: float = 1e-6):
        self.gamma = check_number(gamma, "gamma")
        self.eps = check_number(eps, "eps")

    def propagate(self, m, x, weight, bias, out, rel_out, op):
        w = weight + self.gamma * _positive(weight)
        b = None if bias is None else bias + self.gamma * bias.clamp(min=0)
        z = m(x, w, b)
        return x * m.vjp(_share(op, rel_out, z, self.eps), x, w)


class AlphaBeta(Rule):
    r"""Alpha-beta rule: positive and negative contributions split separately.

    .. math::  R_j = \sum_k \Big(\alpha \frac{(x_j w_{jk})^+}{z_k^+}
               - \beta \frac{(x_j w_{jk})^-}{z_k^-}\Big) R_k, \qquad
               z_k^\pm = \sum_j (x_j w_{jk})^\pm + b_k^\pm, \qquad \alpha - \beta = 1 .

    With :math:`(xw)^+ = x^+ w^+ + x^- w^-` and :math:`(xw)^- = x^+ w^- + x^- w^+` each part
    is the map applied to clamped inputs and weights.  The sum over :math:`j` is
    :math:`(\alpha - \beta) R_k = R_k` where both parts exist.  A part whose denominator is 0
    (no contribution of that sign) drops its term and warns; the other part then still carries
    :math:`\alpha R_k` (or :math:`-\beta R_k`), as in the usual definition (e.g. Zennit's).
    Apply it to layers with weights of both signs; pooling (positive coefficients) after a
    ReLU has no negative part, so give it the epsilon or z-rule.
    """

    def __init__(self, alpha: float = 2.0, beta: float = 1.0):
        alpha, beta = check_number(alpha, "alpha", 1.0), check_number(beta, "beta")
        if abs(alpha - beta - 1.0) > 1e-9:
            raise ValueError(f"alpha - beta must be 1 (conservation), got alpha={alpha:g}, beta={beta:g}")
        self.alpha, self.beta = alpha, beta

    def propagate(self, m, x, weight, bias, out, rel_out, op):
        x_neg = x.clamp(max=0)
        x_pos = x if _is_zero(x_neg) else x.clamp(min=0)  # after a ReLU x >= 0: no copy, no negative pairs
        w_pos, w_neg = _positive(weight), _negative(weight)
        rel = torch.zeros_like(x)
        parts = [(self.alpha, [(x_pos, w_pos), (x_neg, w_neg)], None if bias is None else bias.clamp(min=0)),
                 (-self.beta, [(x_pos, w_neg), (x_neg, w_pos)], None if bias is None else bias.clamp(max=0))]
        for coefficient, pairs, b in parts:
            if coefficient == 0:
                continue
            pairs = [(xp, wp) for xp, wp in pairs if not _is_zero(xp) and not _is_zero(wp)]
            # z = the map summed over the pairs, plus this part of the bias
            if not pairs:
                z = m(torch.zeros_like(x), weight, b) if b is not None else torch.zeros_like(out)
            for i, (xp, wp) in enumerate(pairs):
                z_i = m(xp, wp, b if i == 0 else None)
                z = z_i if i == 0 else z + z_i
            part = f"{op} ({'positive' if coefficient > 0 else 'negative'} part of {self!r})"
            s = _share(part, rel_out, z) * coefficient
            for xp, wp in pairs:
                rel = rel + xp * m.vjp(s, x, wp)
        return rel


class ZPlus(AlphaBeta):
    r"""z+ rule: positive contributions only (alpha-beta with :math:`\alpha = 1, \beta = 0`).

    .. math::  R_j = \sum_k \frac{(x_j w_{jk})^+}{\sum_{j'} (x_{j'} w_{j'k})^+ + b_k^+} R_k

    For :math:`x \ge 0` this is :math:`x_j w_{jk}^+ / \sum_{j'} x_{j'} w_{j'k}^+`: one VJP of the
    map with weights :math:`w^+`.

    A unit :math:`k` that receives relevance but has no positive contribution (its denominator is
    0: every :math:`x_j w_{jk} \le 0` and :math:`b_k \le 0`; in a graph network this happens when a
    signed split upstream, an aggregation or a sum, hands relevance to a negative message) falls
    back to LRP-0 for that unit, :math:`R_j = x_j w_{jk} / z_k \cdot R_k`, instead of losing its
    relevance; only a unit whose output is 0 as well loses it (with a warning).
    """

    def __init__(self):
        super().__init__(1.0, 0.0)

    def propagate(self, m, x, weight, bias, out, rel_out, op):
        x_neg = x.clamp(max=0)
        x_pos = x if _is_zero(x_neg) else x.clamp(min=0)
        pairs = [(xp, wp) for xp, wp in ((x_pos, _positive(weight)), (x_neg, _negative(weight)))
                 if not _is_zero(xp) and not _is_zero(wp)]
        b = None if bias is None else bias.clamp(min=0)
        if pairs:
            z = m(pairs[0][0], pairs[0][1], b)
            for xp, wp in pairs[1:]:
                z = z + m(xp, wp, None)
        else:
            z = m(torch.zeros_like(x), weight, b) if b is not None else torch.zeros_like(out)
        none = (z == 0) & (rel_out != 0)
        s = torch.where(z == 0, torch.zeros_like(rel_out), rel_out / torch.where(z == 0, torch.ones_like(z), z))
        rel = torch.zeros_like(x)
        for xp, wp in pairs:
            rel = rel + xp * m.vjp(s, x, wp)
        if bool(none.any()):  # no positive contribution: LRP-0 for these units
            fallback = _share(f"{op} (units of {self!r} without a positive contribution, by LRP-0)",
                              torch.where(none, rel_out, torch.zeros_like(rel_out)), out)
            rel = rel + x * m.vjp(fallback, x, weight)
        return rel

    def __repr__(self):
        return "ZPlus()"


class ZBox(Rule):
    r"""z\ :sup:`B` rule (Montavon et al., 2017): for inputs known to lie in a box :math:`[l, h]`.

    .. math::  R_j = \sum_k \frac{x_j w_{jk} - l_j w_{jk}^+ - h_j w_{jk}^-}
               {\sum_{j'} \big(x_{j'} w_{j'k} - l_{j'} w_{j'k}^+ - h_{j'} w_{j'k}^-\big)
               + \epsilon} R_k

    Each term :math:`(x_j - l_j) w^+_{jk} + (x_j - h_j) w^-_{jk}` is non-negative, so the
    denominator is too and relevance keeps its sign.  The bias takes no share (it cancels, as in
    Zennit's ``ZBox``).  It is meant for the first layer, whose inputs are the data
    (Kohlbrenner et al., 2020, use it on pixels).

    Args:
        low, high: the bounds (numbers or tensors broadcasting against the input).  ``None``
            (default): the range each input feature takes over the explained input's first
            dimension (its nodes), widened to include 0 -- one-hot and constant features get
            :math:`[0, 1]` and :math:`[0, c]`, so the box never collapses to a point.
        eps: the stabiliser of the (non-negative) denominator.
    """

    def __init__(self, low: float | Tensor | None = None, high: float | Tensor | None = None, eps: float = 1e-6):
        for name, bound in (("low", low), ("high", high)):
            if bound is not None and not isinstance(bound, Tensor):
                check_number(bound, name, -math.inf)
        if isinstance(low, (int, float)) and isinstance(high, (int, float)) and low > high:
            raise ValueError(f"low must not exceed high, got low={low:g}, high={high:g}")
        self.low, self.high = low, high
        self.eps = check_number(eps, "eps")

    def bounds(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """The box :math:`(l, h)` for input ``x``, each shaped like ``x``."""
        zero = torch.zeros((), dtype=x.dtype, device=x.device)
        low = torch.minimum(x.amin(0, keepdim=True), zero) if self.low is None else \
            torch.as_tensor(self.low, dtype=x.dtype, device=x.device)
        high = torch.maximum(x.amax(0, keepdim=True), zero) if self.high is None else \
            torch.as_tensor(self.high, dtype=x.dtype, device=x.device)
        if bool((low > x).any()) or bool((high < x).any()):
            raise ValueError(f"ZBox: the input lies outside the box [low, high] ({float((low - x).max()):.3g} below "
                             f"low or {float((x - high).max()):.3g} above high); widen the bounds")
        return low.expand_as(x), high.expand_as(x)

    def propagate(self, m, x, weight, bias, out, rel_out, op):
        low, high = self.bounds(x)
        w_pos, w_neg = _positive(weight), _negative(weight)
        z = m(x, weight, None) - m(low, w_pos, None) - m(high, w_neg, None)
        s = _share(op, rel_out, z, self.eps)
        return x * m.vjp(s, x, weight) - low * m.vjp(s, x, w_pos) - high * m.vjp(s, x, w_neg)

    def __repr__(self):
        return f"ZBox(low={self.low!r}, high={self.high!r})"


_NAMED = {"epsilon": Epsilon, "z": lambda: Epsilon(0.0), "gamma": Gamma, "zplus": ZPlus, "alphabeta": AlphaBeta,
          "zbox": ZBox}
_ALPHA_BETA = re.compile(r"^alpha(\d+(?:\.\d+)?)beta(\d+(?:\.\d+)?)$")


def get_rule(rule: Rule | str) -> Rule:
    """A :class:`Rule` from a rule or its name: ``"epsilon"``, ``"z"``, ``"gamma"``, ``"zplus"``, ``"zbox"``,
    ``"alpha_beta"`` (:math:`\\alpha = 2, \\beta = 1`), ``"alpha2beta1"`` (any ``alpha<a>beta<b>``
    with ``a - b = 1``); case, ``_``, ``-`` and ``+`` (``"z+"``) do not matter."""
    if isinstance(rule, Rule):
        return rule
    if isinstance(rule, str):
        name = rule.lower().replace("_", "").replace("-", "").replace("+", "plus")
        if name in _NAMED:
            return _NAMED[name]()
        m = _ALPHA_BETA.match(name)
        if m:
            return AlphaBeta(float(m.group(1)), float(m.group(2)))
        raise ValueError(
            f"rule {rule!r} is not known; use a Rule object or one of 'epsilon', 'z', 'gamma', "
            f"'zplus', 'alpha<a>beta<b>' (e.g. 'alpha2beta1')"
        )
    raise TypeError(f"rule must be a lrp_lib.core.rules.Rule or a string, got {type(rule).__name__}")


# ------------------------------------------------------------- the generic op
class LinearMapRelevance(torch.autograd.Function):
    """Forward: ``m(x, weight, bias)``.  Backward: ``rule.propagate`` (the input relevance);
    the weight and bias get none.  Saved: input, weight, bias, output."""

    @staticmethod
    def forward(ctx, x, weight, bias, m, rule, op):
        out = m(x, 1.0 if weight is None else weight, bias)
        ctx.m, ctx.rule, ctx.op = m, rule, op
        ctx.save_for_backward(x, weight, bias, out)
        return out

    @staticmethod
    def backward(ctx, rel_out):
        x, weight, bias, out = ctx.saved_tensors
        w = 1.0 if weight is None else weight
        rel_in = ctx.rule.propagate(ctx.m, x, w, bias, out, rel_out, ctx.op)
        return rel_in, None, None, None, None, None


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
