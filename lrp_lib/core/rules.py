r"""The LRP rules of :mod:`lrp_lib`, each declared once with its formula: how a linear map splits relevance.

A linear layer computes :math:`z_k = \sum_j x_j w_{jk} + b_k`; the term :math:`x_j w_{jk}` is input :math:`j`'s
*contribution* to output :math:`k`.  Every rule redistributes the relevance :math:`R_k` of each output over (a
modified version of) those contributions,

.. math::  R_j = \sum_k \frac{c_{jk}}{\sum_{j'} c_{j'k}} R_k ,

without forming the contribution tensor: for :math:`f(x) = J x`, :math:`R = x \odot J^\top (R_{out} / z)` costs
one vector-Jacobian product (VJP) of :math:`f`.  A :class:`Rule`'s ``modify`` applies it as a forward that keeps
the map's value and changes its gradient (:mod:`lrp_lib.core.modify`); chapter 3 applies the same formulas in
backward form (:mod:`lrp_lib.teach.backward_rules`).

Here :math:`t^+ = \max(t, 0)` and :math:`t^- = \min(t, 0)`.  A denominator equal to zero cannot be split: that
output's relevance is lost and a :class:`~lrp_lib.core.stabilizer.LostRelevanceWarning` says so.  The bias keeps
its own share (it is not an input), so only bias-free maps conserve relevance exactly (and the epsilon rule with
:math:`\epsilon > 0` absorbs a little).
"""
from __future__ import annotations

import math
import re
from typing import Callable, Union

import torch
from torch import Tensor

from lrp_lib.core.modify import epsilon, share_of, split_by
from lrp_lib.core.validation import check_number

__all__ = ["Rule", "Epsilon", "Gamma", "AlphaBeta", "ZPlus", "ZBox", "get_rule", "positive_part", "negative_part",
           "Weight"]

#: A weight tensor, or a scale for maps without weights.
Weight = Union[Tensor, float]
#: A linear map ``m(x, weight, bias)``, linear in ``x`` and in ``weight``.
Map = Callable[[Tensor, Weight, Union[Tensor, None]], Tensor]


def positive_part(w: Weight) -> Weight:
    """:math:`w^+`, of a tensor or a number."""
    return max(w, 0.0) if isinstance(w, float) else w.clamp(min=0)


def negative_part(w: Weight) -> Weight:
    """:math:`w^-`, of a tensor or a number."""
    return min(w, 0.0) if isinstance(w, float) else w.clamp(max=0)


class Rule:
    r"""Base class: a rule for one linear map ``m(x, weight, bias)``.

    ``modify`` returns the map's output ``out`` (computed with its graph from ``x``), its value kept and its
    gradient changed so that :math:`x \odot \partial f/\partial x` is the rule's relevance when the output's is
    :math:`\mathrm{out} \odot \partial f/\partial \mathrm{out}` (the forward form, :mod:`lrp_lib.core.modify`)."""

    def modify(self, m: Map, x: Tensor, weight: Weight, bias: Tensor | None, out: Tensor,
               nonneg: bool = False) -> Tensor:
        """``nonneg``: ``x`` is known to hold no negative entry (a ReLU's output), so rules that split it by
        sign need not compute the negative part."""
        raise NotImplementedError

    def __eq__(self, other):
        return type(self) is type(other) and vars(self) == vars(other)

    def __hash__(self):
        return hash((type(self).__name__, tuple(sorted(vars(self).items()))))

    def __repr__(self):
        return f"{type(self).__name__}({', '.join(f'{k}={v!r}' for k, v in vars(self).items())})"


class Epsilon(Rule):
    r"""Epsilon rule (:math:`\epsilon = 0`: the z-rule).

    .. math::  R_j = \sum_k \frac{x_j w_{jk}}{z_k + \epsilon\,\mathrm{sign}(z_k)} R_k
               = x_j \big[J^\top \tfrac{R}{z + \epsilon\,\mathrm{sign}(z)}\big]_j

    :math:`z` is the ordinary output (bias included), so the backward is one VJP.
    :math:`\mathrm{sign}(0) = +1`; with :math:`\epsilon = 0` an output exactly 0 loses its relevance.
    """

    def __init__(self, eps: float = 1e-6):
        self.eps = check_number(eps, "eps")

    def modify(self, m, x, weight, bias, out, nonneg=False):
        return epsilon(out, self.eps)


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
        self.gamma, self.eps = check_number(gamma, "gamma"), check_number(eps, "eps")

    def modified(self, m, x, weight, bias) -> tuple:
        r"""The weight :math:`w + \gamma w^+` and the map's output with it (and the bias :math:`b + \gamma b^+`)."""
        w = weight + self.gamma * positive_part(weight)
        return w, m(x, w, None if bias is None else bias + self.gamma * bias.clamp(min=0))

    def modify(self, m, x, weight, bias, out, nonneg=False):
        return split_by(out, self.modified(m, x, weight, bias)[1], self.eps)


class AlphaBeta(Rule):
    r"""Alpha-beta rule: positive and negative contributions split separately.

    .. math::  R_j = \sum_k \Big(\alpha \frac{(x_j w_{jk})^+}{z_k^+}
               - \beta \frac{(x_j w_{jk})^-}{z_k^-}\Big) R_k, \qquad
               z_k^\pm = \sum_j (x_j w_{jk})^\pm + b_k^\pm, \qquad \alpha - \beta = 1 .

    The bias counts as the contribution of a constant input 1.  With :math:`(xw)^+ = x^+ w^+ + x^- w^-` and
    :math:`(xw)^- = x^+ w^- + x^- w^+` each part is the map applied to clamped inputs and weights: a VJP each
    (one when ``x >= 0``, as after a ReLU).  The sum over :math:`j` is :math:`(\alpha - \beta) R_k = R_k` where
    both parts exist; a part whose denominator is 0 (no contribution of that sign) drops its term and warns, the
    other still carrying :math:`\alpha R_k` (or :math:`-\beta R_k`), as in Zennit.  Pooling (positive
    coefficients) after a ReLU has no negative part: give it the epsilon or z-rule.
    """

    def __init__(self, alpha: float = 2.0, beta: float = 1.0):
        alpha, beta = check_number(alpha, "alpha", 1.0), check_number(beta, "beta")
        if abs(alpha - beta - 1.0) > 1e-9:
            raise ValueError(f"alpha - beta must be 1 (conservation), got alpha={alpha:g}, beta={beta:g}")
        self.alpha, self.beta = alpha, beta

    @staticmethod
    def _signed(m: Map, x: Tensor, weight: Weight, bias: Tensor | None, positive: bool = True,
                nonneg: bool = False) -> Tensor:
        r""":math:`z^+` (``positive``) or :math:`z^-`, computed with its graph from the clamped input (the
        gradient of ``x.clamp(min=0)`` is 1 where :math:`x > 0`, so :math:`x \odot \mathrm{grad}` picks
        each contribution's own part)."""
        same, other = (positive_part, negative_part) if positive else (negative_part, positive_part)
        b = None if bias is None else same(bias)
        if nonneg:  # x = x+ (its gradient is 1 everywhere, as clamp's where x > 0)
            return m(x, same(weight), b)
        return m(x.clamp(min=0), same(weight), b) + m(x.clamp(max=0), other(weight), None)

    def modify(self, m, x, weight, bias, out, nonneg=False):
        od = y = out.detach()
        for coefficient, positive in ((self.alpha, True), (-self.beta, False)):
            if coefficient:  # out's value; the gradient into each part scaled by coefficient * out / part
                z = self._signed(m, x, weight, bias, positive=positive, nonneg=nonneg)
                zd = z.detach()
                y = torch.addcmul(y, z - zd, share_of(od, zd) * coefficient)
        return y


class ZPlus(AlphaBeta):
    r"""z+ rule: positive contributions only (alpha-beta with :math:`\alpha = 1, \beta = 0`).

    .. math::  R_j = \sum_k \frac{(x_j w_{jk})^+}{\sum_{j'} (x_{j'} w_{j'k})^+ + b_k^+} R_k

    For :math:`x \ge 0` this is :math:`x_j w_{jk}^+ / \sum_{j'} x_{j'} w_{j'k}^+`: one VJP of the map with
    weights :math:`w^+`.  A unit :math:`k` that receives relevance but has no positive contribution (every
    :math:`x_j w_{jk} \le 0` and :math:`b_k \le 0`, as a negative message that a signed split upstream hands
    relevance to) falls back to LRP-0, :math:`R_j = x_j w_{jk} / z_k \cdot R_k`; only a unit whose output is 0
    as well loses its relevance (with a warning).
    """

    def __init__(self):
        super().__init__(1.0, 0.0)

    def modify(self, m, x, weight, bias, out, nonneg=False):
        z_pos = self._signed(m, x, weight, bias, nonneg=nonneg)
        od, zd = out.detach(), z_pos.detach()
        none = zd == 0  # units without a positive contribution: LRP-0 (the gradient of out itself)
        return torch.addcmul(torch.where(none, out, od), z_pos - zd, share_of(od, zd, none))

    def __repr__(self):
        return "ZPlus()"


class ZBox(Rule):
    r"""z\ :sup:`B` rule (Montavon et al., 2017): for inputs known to lie in a box :math:`[l, h]`.

    .. math::  R_j = \sum_k \frac{x_j w_{jk} - l_j w_{jk}^+ - h_j w_{jk}^-}
               {\sum_{j'} \big(x_{j'} w_{j'k} - l_{j'} w_{j'k}^+ - h_{j'} w_{j'k}^-\big)
               + \epsilon} R_k

    Each term :math:`(x_j - l_j) w^+_{jk} + (x_j - h_j) w^-_{jk}` is non-negative, so the denominator is too and
    relevance keeps its sign.  The bias takes no share (it cancels, as in Zennit's ``ZBox``).  Meant for the first
    layer, whose inputs are the data (Kohlbrenner et al., 2020, use it on pixels).

    Args:
        low, high: the bounds (numbers or tensors broadcasting against the input).  ``None`` (default): the
            range each input feature takes over the explained input's first dimension (its nodes), widened to
            include 0 -- one-hot and constant features get :math:`[0, 1]` and :math:`[0, c]`, never a point.
        eps: the stabiliser of the (non-negative) denominator.
    """

    def __init__(self, low: float | Tensor | None = None, high: float | Tensor | None = None, eps: float = 1e-6):
        for name, bound in (("low", low), ("high", high)):
            if bound is not None and not isinstance(bound, Tensor):
                check_number(bound, name, -math.inf)
        if isinstance(low, (int, float)) and isinstance(high, (int, float)) and low > high:
            raise ValueError(f"low must not exceed high, got low={low:g}, high={high:g}")
        self.low, self.high, self.eps = low, high, check_number(eps, "eps")

    def bounds(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """The box :math:`(l, h)` for input ``x``, each shaped like ``x``; a ``ValueError`` where ``x`` leaves the
        user's bounds (the default box holds ``x`` by construction: nothing is read)."""
        zero = torch.zeros((), dtype=x.dtype, device=x.device)
        low = torch.minimum(x.amin(0, keepdim=True), zero) if self.low is None else \
            torch.as_tensor(self.low, dtype=x.dtype, device=x.device)
        high = torch.maximum(x.amax(0, keepdim=True), zero) if self.high is None else \
            torch.as_tensor(self.high, dtype=x.dtype, device=x.device)
        if (self.low is not None or self.high is not None) and (bool((low > x).any()) or bool((high < x).any())):
            raise ValueError(f"ZBox: the input lies outside the box [low, high] ({float((low - x).max()):.3g} below "
                             f"low or {float((x - high).max()):.3g} above high); widen the bounds")
        return low.expand_as(x), high.expand_as(x)

    def modify(self, m, x, weight, bias, out, nonneg=False, low: Tensor | None = None, high: Tensor | None = None):
        r"""The forward form.  The relevance is not :math:`x \odot \mathrm{grad}` alone: the bound terms
        :math:`-l \odot J_{w^+}^\top s - h \odot J_{w^-}^\top s`, the bounds' relevance, are read as
        :math:`l \odot \mathrm{grad}_l + h \odot \mathrm{grad}_h` when ``low`` and ``high`` are given as tensors
        shaped like ``x`` that require grad (from :meth:`bounds`); the input's relevance is the sum of the three."""
        if low is None or high is None:
            low, high = self.bounds(x.detach())
        w_pos, w_neg = positive_part(weight), negative_part(weight)
        return split_by(out, m(x, weight, None) - m(low, w_pos, None) - m(high, w_neg, None), self.eps)

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
        if m := _ALPHA_BETA.match(name):
            return AlphaBeta(float(m.group(1)), float(m.group(2)))
        raise ValueError(f"rule {rule!r} is not known; use a Rule object or one of 'epsilon', 'z', 'gamma', "
                         f"'zplus', 'zbox', 'alpha_beta', 'alpha<a>beta<b>' (e.g. 'alpha2beta1')")
    raise TypeError(f"rule must be a lrp_lib.core.rules.Rule or a string, got {type(rule).__name__}")
