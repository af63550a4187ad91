r"""Guided backpropagation (Springenberg et al., 2015) on a model: the rule of
:mod:`lrp_lib.teach.guided` at every ReLU.

Through a ReLU :math:`y = \max(x, 0)` the gradient is :math:`\partial_x = [x > 0]\,\partial_y`.
Guided backprop also drops the negative part of what arrives from above:

.. math:: \partial^{\mathrm{guided}}_x = [x > 0]\,\max(\partial^{\mathrm{guided}}_y, 0)

so only signals that increase the output *and* pass through active units come back.  Every
other operation (linear maps, scatters, copies) backpropagates its ordinary gradient.

:func:`guided_relu` is the op (:class:`lrp_lib.teach.guided.GuidedReLU`).  :func:`guided_backprop`
is a context manager that applies it, through forward hooks, to every ReLU of a model while the
block is active: the ReLU layers of :mod:`lrp_lib.teach.graph` (``EdgeReLU``, ``NodeReLU``,
``GlobalReLU``, or any ``ElementWise`` whose ``fn`` is a ReLU) and ``torch.nn.ReLU`` modules.
As with :func:`lrp_lib.teach.relevance`, what counts is the forward pass:

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
from torch import nn

from lrp_lib.teach.guided import GuidedReLU, guided_relu, guided_relu_hooks
from lrp_lib.teach.graph import ElementWise

__all__ = ["guided_relu", "guided_backprop", "GuidedReLU"]

_RELUS = (torch.relu, F.relu)


@contextlib.contextmanager
def guided_backprop(model: nn.Module) -> Iterator[nn.Module]:
    """Within the block, every ReLU of ``model`` applies :func:`guided_relu` (forward hooks,
    removed on exit; the model's attributes are left alone).

    Hooked: :class:`lrp_lib.teach.graph.ElementWise` layers whose ``fn`` is ``torch.relu`` or
    ``F.relu`` (so ``EdgeReLU``, ``NodeReLU``, ``GlobalReLU``) and ``nn.ReLU`` modules.  A model
    without any ReLU raises ``ValueError`` rather than silently return the plain gradient.
    Inside ``lrp_lib.teach.relevance()`` the graph layers use their relevance ops, not ``fn``, so
    the two modes do not mix: run guided backprop outside the relevance mode.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    targets = [(m, m.attribute if isinstance(m, ElementWise) else None) for m in model.modules()
               if (isinstance(m, ElementWise) and m.fn in _RELUS) or isinstance(m, nn.ReLU)]
    if not targets:
        raise ValueError(
            f"model ({type(model).__name__}) has no ReLU layer (lrp_lib.teach.graph ReLU layers or nn.ReLU), "
            f"so guided backprop would equal the gradient"
        )
    with guided_relu_hooks(targets):
        yield model
