r"""A linear map as the LRP rules see it: :math:`x \mapsto f(x, w) + b` with its vector-Jacobian product
(VJP).  Every rule of :mod:`lrp_lib.core.rules` is a formula over such a map, so one rule serves ``F.linear``,
``x @ W``, convolutions and weight-free maps (pooling) alike."""
from __future__ import annotations

from typing import Callable, Union

import torch
from torch import Tensor

__all__ = ["LinearMap", "Weight"]

#: A weight tensor, or a scale for maps without weights.
Weight = Union[Tensor, float]


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
