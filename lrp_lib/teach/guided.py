r"""Guided backpropagation (Springenberg et al., 2015) as a rule for the ReLU.

Through a ReLU :math:`y = \max(x, 0)` the gradient is :math:`\partial_x = [x > 0]\,\partial_y`.
Guided backprop's rule also drops the negative part of what arrives from above:

.. math:: \partial^{\mathrm{guided}}_x = [x > 0]\,\max(\partial^{\mathrm{guided}}_y, 0)

so only signals that increase the output *and* pass through active units come back; every other
operation keeps its ordinary gradient.  :class:`GuidedReLU` is the rule (an autograd function),
:func:`guided_relu` the checked op, and :func:`guided_relu_hooks` applies it to chosen modules of
a model through forward hooks (each hook replaces the module's output by the same values computed
with :class:`GuidedReLU`), removed when the block ends.  Nothing global is changed.
"""
from __future__ import annotations

import contextlib
from typing import Iterable, Iterator

import torch
from torch import Tensor, nn

__all__ = ["ReLUFunction", "GuidedReLU", "guided_relu", "guided_relu_hooks"]


class ReLUFunction(torch.autograd.Function):
    """``max(x, 0)``, its output saved: the forward of every ReLU rule (a subclass writes the
    backward: :class:`GuidedReLU`, the LRP op :class:`lrp_lib.teach.ops.ReLURelevance`)."""

    @staticmethod
    def forward(ctx, x: Tensor) -> Tensor:
        out = x.clamp(min=0)
        ctx.save_for_backward(out)
        return out


class GuidedReLU(ReLUFunction):
    r"""``max(x, 0)`` whose backward is :math:`[x > 0]\,\max(g, 0)` for the incoming gradient
    :math:`g`.  Saved: the output."""

    @staticmethod
    def backward(ctx, grad_out: Tensor) -> Tensor:
        (out,) = ctx.saved_tensors
        return torch.where(out > 0, grad_out.clamp(min=0), torch.zeros_like(grad_out))


def guided_relu(x: Tensor) -> Tensor:
    r"""ReLU with guided backprop's backward :math:`\partial_x = [x > 0] \max(\partial_y, 0)`."""
    if not isinstance(x, Tensor):
        raise TypeError(f"x must be a torch.Tensor, got {type(x).__name__}")
    if not x.is_floating_point():
        raise TypeError(f"x must be a floating point tensor, got {x.dtype}")
    return GuidedReLU.apply(x)


def _hook(attribute: str | None):
    def hook(module, args, output):
        if attribute is None:  # a tensor ReLU: its input is args[0]
            return guided_relu(args[0])
        output[attribute] = guided_relu(args[0][attribute])  # a graph layer: a fresh copy of its input
        return output
    return hook


@contextlib.contextmanager
def guided_relu_hooks(targets: Iterable[tuple[nn.Module, str | None]]) -> Iterator[None]:
    """Within the block, each ``(module, attribute)`` of ``targets`` gives :func:`guided_relu` of its
    input instead of its output: a module whose input and output are tensors (``attribute=None``,
    e.g. ``nn.ReLU``), or one that returns a copy of its input object (a graph) with one attribute
    replaced by the ReLU of that attribute.  The forward values are unchanged; the hooks are
    removed on exit, also when an exception leaves the block."""
    handles = []
    try:
        for module, attribute in targets:
            handles.append(module.register_forward_hook(_hook(attribute)))
        yield
    finally:
        for handle in handles:
            handle.remove()
