r"""The rules of :mod:`lrp_lib.core.rules` in their backward form, over a :class:`LinearMap` (chapter 3).

The product applies each rule as a forward that keeps the map's value and changes its gradient (the rule's
``modify``).  Chapter 3 teaches the older form, which :class:`lrp_lib.teach.linear_maps.LinearMapRelevance`
runs as the backward of an ``autograd.Function``: from the output's relevance :math:`R_{out}`, the input's

.. math::  R = x \odot J^\top \!\left(\frac{R_{out}}{z}\right)

for the epsilon rule, one vector-Jacobian product (VJP) of the map, the contribution tensor never formed; the
other rules modify the weights or split the contributions by sign first.  Their formulas are in the rules'
docstrings; :func:`propagate` applies each, dividing through :func:`lrp_lib.teach.share.relevance_share`.  The
tests check both forms against each other.
"""
from __future__ import annotations

from typing import Callable

import torch
from torch import Tensor

from lrp_lib.core.rules import (AlphaBeta, Epsilon, Gamma, Rule, Weight, ZBox, ZPlus, negative_part,
                                positive_part)
from lrp_lib.teach.share import has_zero, relevance_share

__all__ = ["LinearMap", "propagate"]


class LinearMap:
    r"""A map :math:`x \mapsto f(x, w) + b`, linear in :math:`x` and in :math:`w`.

    ``fn(x, weight, bias)`` is the map itself; ``vjp(v, x, weight)`` returns
    :math:`J^\top v` for the bias-free map (``x`` is only used for its shape).  A map without
    weights (pooling) gets ``weight=1.0``, a scale, so the rules' weight modifications
    (:math:`w^+`, :math:`w + \gamma w^+`) still apply: its fixed coefficients must then be
    non-negative.  With ``vjp=None`` the VJP is taken by autograd, which reruns ``fn``.
    ``fresh_vjp=True`` says that ``vjp`` returns a new tensor each call (not a view of ``v``, nor a
    tensor kept elsewhere), so that a rule may multiply the input into it in place.
    """

    def __init__(self, fn: Callable, vjp: Callable | None = None, has_weight: bool = True, fresh_vjp: bool = False):
        self.fn, self._vjp, self.has_weight = fn, vjp, has_weight
        self.fresh_vjp = fresh_vjp and vjp is not None

    def __call__(self, x: Tensor, weight: Weight, bias: Tensor | None) -> Tensor:
        if self.has_weight:
            return self.fn(x, weight, bias)
        out = self.fn(x)
        if weight != 1.0:
            out = out * weight
        return out if bias is None else out + bias

    def vjp(self, v: Tensor, x: Tensor, weight: Weight) -> Tensor:
        r""":math:`J^\top v` of the bias-free map at ``weight`` (for a map without weights: scaled by it)."""
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

    def times_input(self, x: Tensor, g: Tensor) -> Tensor:
        """``x * g`` for ``g`` a VJP of this map, written into ``g`` where that is safe (``fresh_vjp``, and
        ``x * g`` would have ``g``'s shape, dtype and contiguous layout)."""
        if self.fresh_vjp and g.shape == x.shape and g.dtype == x.dtype and g.is_contiguous() and x.is_contiguous():
            return g.mul_(x)
        return x * g


def propagate(rule: Rule, m: LinearMap, x: Tensor, weight: Weight, bias: Tensor | None, out: Tensor,
              rel_out: Tensor, op: str) -> Tensor:
    """The input relevance of the map ``m`` (input ``x``, output ``out``) under ``rule``, from the output's
    relevance ``rel_out``: the rule's backward form.  ``op`` names the map in warnings and errors."""
    for cls in type(rule).__mro__:
        if cls in _FORMS:
            return _FORMS[cls](rule, m, x, weight, bias, out, rel_out, op)
    raise NotImplementedError(f"{type(rule).__name__} has no backward form (chapter 3's maps take the rules of "
                              f"lrp_lib.core.rules); the explainer applies its modify")


def _epsilon(rule: Epsilon, m, x, weight, bias, out, rel_out, op):
    return m.times_input(x, m.vjp(relevance_share(op, rel_out, out, eps=rule.eps), x, weight))


def _gamma(rule: Gamma, m, x, weight, bias, out, rel_out, op):
    w, z = rule.modified(m, x, weight, bias)
    return m.times_input(x, m.vjp(relevance_share(op, rel_out, z, eps=rule.eps), x, w))


def _alpha_beta(rule: AlphaBeta, m, x, weight, bias, out, rel_out, op):
    x_pos, x_neg, w_pos, w_neg = _parts(x, weight)
    parts = [(rule.alpha, [(x_pos, w_pos), (x_neg, w_neg)], None if bias is None else bias.clamp(min=0)),
             (-rule.beta, [(x_pos, w_neg), (x_neg, w_pos)], None if bias is None else bias.clamp(max=0))]
    rel = None
    for coefficient, pairs, b in parts:
        if coefficient == 0:
            continue
        pairs = [(xp, wp) for xp, wp in pairs if xp is not None and wp is not None]
        z = _z(m, x, weight, pairs, b, out)
        part = f"{op} ({'positive' if coefficient > 0 else 'negative'} part of {rule!r})"
        s = relevance_share(part, rel_out, z).mul_(coefficient)
        rel = _sum_of(m, x, pairs, s, rel) if pairs else rel
    return torch.zeros_like(x) if rel is None else rel


def _zplus(rule: ZPlus, m, x, weight, bias, out, rel_out, op):
    x_pos, x_neg, w_pos, w_neg = _parts(x, weight, crossed=False)
    pairs = [(xp, wp) for xp, wp in ((x_pos, w_pos), (x_neg, w_neg)) if xp is not None and wp is not None]
    z = _z(m, x, weight, pairs, None if bias is None else bias.clamp(min=0), out)
    zero = z == 0 if has_zero(z) else None  # None: no unit without a positive contribution
    none = None if zero is None else zero & (rel_out != 0)
    # the share, 0 where z = 0 (those units: the fallback below)
    s = rel_out / z if zero is None else relevance_share(op, rel_out, z, check=False, zero=zero)
    rel = _sum_of(m, x, pairs, s)
    if none is not None and bool(none.any()):  # no positive contribution: LRP-0 for these units
        fallback = relevance_share(f"{op} (units of {rule!r} without a positive contribution, by LRP-0)",
                                   torch.where(none, rel_out, torch.zeros_like(rel_out)), out)
        rel = rel.add_(m.times_input(x, m.vjp(fallback, x, weight)))
    return rel


def _zbox(rule: ZBox, m, x, weight, bias, out, rel_out, op):
    low, high = rule.bounds(x)
    w_pos, w_neg = positive_part(weight), negative_part(weight)
    z = m(x, weight, None) - m(low, w_pos, None) - m(high, w_neg, None)
    s = relevance_share(op, rel_out, z, eps=rule.eps)
    return x * m.vjp(s, x, weight) - low * m.vjp(s, x, w_pos) - high * m.vjp(s, x, w_neg)


#: The backward form of each rule class (a subclass takes its nearest ancestor's: z+ before alpha-beta).
_FORMS = {Epsilon: _epsilon, Gamma: _gamma, ZPlus: _zplus, AlphaBeta: _alpha_beta, ZBox: _zbox}


def _signs(*parts: Weight) -> list[tuple[bool, bool]]:
    """For each of ``parts`` (a tensor or a number): whether ``clamp(min=0)`` and ``clamp(max=0)`` of it
    have a non-zero entry (a NaN end reads as neither), from one ``aminmax`` per tensor and one read."""
    ends = [end for t in parts if isinstance(t, Tensor) and t.numel() for end in torch.aminmax(t)]
    read = iter(torch.stack(ends).sign().tolist() if ends else [])
    signs = []
    for t in parts:
        if isinstance(t, Tensor):
            low, high = (next(read), next(read)) if t.numel() else (0.0, 0.0)
        else:
            low = high = float(t)
        signs.append((not high <= 0, not low >= 0))  # (a number's NaN: both true)
    return signs


def _parts(x: Tensor, weight: Weight, crossed: bool = True) -> tuple:
    """``(x+, x-, w+, w-)`` with ``None`` for a part without a non-zero entry (``x+`` is ``x`` itself where
    ``x >= 0``).  ``crossed=False`` (z+, which pairs ``x+`` with ``w+`` and ``x-`` with ``w-`` only): a
    weight part is made only where the input part of its sign exists."""
    (has_pos, has_neg), (w_has_pos, w_has_neg) = _signs(x, weight)
    x_pos = (x if not has_neg else x.clamp(min=0)) if has_pos else None
    x_neg = x.clamp(max=0) if has_neg else None
    any_x = has_pos or has_neg
    w_pos = positive_part(weight) if w_has_pos and (has_pos if not crossed else any_x) else None
    w_neg = negative_part(weight) if w_has_neg and (has_neg if not crossed else any_x) else None
    return x_pos, x_neg, w_pos, w_neg


def _sum_of(m: LinearMap, x: Tensor, pairs: list, s: Tensor, relevance: Tensor | None = None) -> Tensor:
    r"""``relevance`` (None: nothing yet) plus :math:`\sum_p x_p \odot J_{w_p}^\top s` over ``pairs`` of
    ``(x_p, w_p)``; zeros where both are empty."""
    for xp, wp in pairs:
        part = m.times_input(xp, m.vjp(s, x, wp))
        relevance = part if relevance is None else relevance.add_(part)
    return torch.zeros_like(x) if relevance is None else relevance


def _z(m: LinearMap, x: Tensor, weight: Weight, pairs: list, b: Tensor | None, out: Tensor) -> Tensor:
    """The map summed over ``pairs`` of ``(x_p, w_p)``, plus the bias part ``b``."""
    if not pairs:
        return m(torch.zeros_like(x), weight, b) if b is not None else torch.zeros_like(out)
    z = m(pairs[0][0], pairs[0][1], b)
    for xp, wp in pairs[1:]:
        z = z + m(xp, wp, None)
    return z
