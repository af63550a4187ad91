r"""Guided backpropagation (Springenberg et al., 2015): the gradient, clamped at zero at every ReLU.

Through a ReLU :math:`y = \max(x, 0)` the gradient is :math:`\partial_x = [x > 0]\,\partial_y`.
Guided backprop also drops the negative part of what arrives from above:

.. math:: \partial^{\mathrm{guided}}_x = [x > 0]\,\max(\partial^{\mathrm{guided}}_y, 0)

so only signals that increase the output *and* pass through active units come back.  Every
other operation (linear maps, scatters, copies) backpropagates its ordinary gradient.

:func:`guided_relu` is the op.  :func:`guided_backprop` is a context manager that makes every
ReLU of a model use it while the block is active: the ReLU layers of :mod:`lrp_lib.teach.graph`
(``EdgeReLU``, ``NodeReLU``, ``GlobalReLU``, or any ``ElementWise`` whose ``fn`` is a ReLU) and
``torch.nn.ReLU`` modules.  As with :func:`lrp_lib.teach.relevance`, what counts is the forward pass:

    >>> inputs = relevance_inputs(data)
    >>> with guided_backprop(model):
    ...     out = model(inputs)
    >>> out.x[node].sum().backward()        # inputs.x.grad: the guided gradient
"""
from __future__ import annotations

import contextlib
from typing import Iterator

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from lrp_lib.teach.graph import ElementWise

__all__ = ["guided_relu", "guided_backprop", "GuidedReLU"]

_RELUS = (torch.relu, F.relu)


class GuidedReLU(torch.autograd.Function):
    r"""``max(x, 0)`` whose backward is :math:`[x > 0] \max(g, 0)` for the incoming gradient :math:`g`."""

    @staticmethod
    def forward(ctx, x: Tensor) -> Tensor:
        out = x.clamp(min=0)
        ctx.save_for_backward(out)
        return out

    @staticmethod
    def backward(ctx, grad_out: Tensor) -> Tensor:
        (out,) = ctx.saved_tensors
        return torch.where(out > 0, grad_out.clamp(min=0), torch.zeros_like(grad_out))


def guided_relu(x: Tensor) -> Tensor:
    r"""ReLU with the guided-backprop backward :math:`\partial_x = [x > 0] \max(\partial_y, 0)`."""
    if not isinstance(x, Tensor):
        raise TypeError(f"x must be a torch.Tensor, got {type(x).__name__}")
    if not x.is_floating_point():
        raise TypeError(f"x must be a floating point tensor, got {x.dtype}")
    return GuidedReLU.apply(x)


def _guided_forward(x: Tensor) -> Tensor:  # stands in for nn.ReLU.forward(input)
    return guided_relu(x)


@contextlib.contextmanager
def guided_backprop(model: nn.Module) -> Iterator[nn.Module]:
    """Within the block, every ReLU of ``model`` runs :func:`guided_relu`; restored on exit.

    Swapped: :class:`lrp_lib.teach.graph.ElementWise` layers whose ``fn`` is ``torch.relu`` or
    ``F.relu`` (so ``EdgeReLU``, ``NodeReLU``, ``GlobalReLU``) and ``nn.ReLU`` modules.  A model
    without any ReLU raises ``ValueError`` rather than silently return the plain gradient.
    Inside ``lrp_lib.teach.relevance()`` the graph layers use their relevance ops, not ``fn``, so
    the two modes do not mix: run guided backprop outside the relevance mode.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    swapped: list[tuple[nn.Module, str, object]] = []
    try:
        for module in model.modules():
            if isinstance(module, ElementWise) and module.fn in _RELUS:
                swapped.append((module, "fn", module.fn))
                module.fn = guided_relu
            elif isinstance(module, nn.ReLU):
                swapped.append((module, "forward", None))
                module.forward = _guided_forward  # instance attribute shadows nn.ReLU.forward
        if not swapped:
            raise ValueError(
                f"model ({type(model).__name__}) has no ReLU layer (lrp_lib.teach.graph ReLU layers or nn.ReLU), "
                f"so guided backprop would equal the gradient"
            )
        yield model
    finally:
        for module, attr, original in swapped:
            if attr == "fn":
                module.fn = original
            else:
                del module.forward
