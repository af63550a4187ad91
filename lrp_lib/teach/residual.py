r"""Skip connections: the residual block, with relevance conserved across the skip.

A residual block computes :math:`y = x + g(x)`.  Backpropagated with a plain ``+``, the
relevance :math:`R_y` is *copied* onto both terms (``+`` passes its gradient unchanged to
each), so the input receives :math:`R_y` through the identity path **and** the branch's share
again through :math:`g`: counted twice, the total at the input is about :math:`2 R_y`.
:func:`lrp_lib.teach.ops.add` instead *splits* it in proportion to each term's value,

.. math::  R_x^{skip} = \frac{x}{x + g(x)} R_y, \qquad R_{g}^{branch} = \frac{g(x)}{x + g(x)} R_y ,

and the two shares sum to :math:`R_y` (conservation).  The pattern for any network is
therefore: write the skip as ``ops.add(branch, skip)``, never as ``branch + skip``.

:class:`ResidualBlock` is that pattern for a convolutional block; ``block(x)`` is the
ordinary block (train it as usual), ``block(x, rule=...)`` the same computation built from
relevance ops, so one ``.backward()`` gives the relevance.
"""
from __future__ import annotations

import torch
from torch import Tensor, nn

from lrp_lib.teach import ops
from lrp_lib.core import rules
from lrp_lib.teach import linear_maps

__all__ = ["ResidualBlock", "skip_add"]


def skip_add(branch: Tensor, skip: Tensor) -> Tensor:
    r"""``branch + skip`` whose backward splits relevance between the two paths,
    :math:`R_{branch} = \frac{branch}{branch + skip} R`, :math:`R_{skip} = \frac{skip}{branch + skip} R`
    (:func:`lrp_lib.teach.ops.add`)."""
    return ops.add(branch, skip)


class ResidualBlock(nn.Module):
    r"""``relu(x + conv2(relu(conv1(x))))`` with two ``kernel_size`` convolutions that keep the
    shape (padding ``kernel_size // 2``, ``channels`` in and out).

    ``forward(x)`` runs the ordinary block (torch ops: train it, take plain gradients);
    ``forward(x, rule)`` runs the same weights through :func:`lrp_lib.teach.linear_maps.conv2d` with
    ``rule``, :func:`lrp_lib.teach.ops.relu` and :func:`skip_add`, so ``.backward(R)`` propagates
    relevance and conserves it across the skip (exactly for a bias-free block with a
    conserving rule).
    """

    def __init__(self, channels: int, kernel_size: int = 3, bias: bool = True):
        super().__init__()
        if not isinstance(kernel_size, int) or kernel_size < 1 or kernel_size % 2 == 0:
            raise ValueError(f"kernel_size must be a positive odd int (to keep the shape), got {kernel_size!r}")
        pad = kernel_size // 2
        self.conv1 = nn.Conv2d(channels, channels, kernel_size, padding=pad, bias=bias)
        self.conv2 = nn.Conv2d(channels, channels, kernel_size, padding=pad, bias=bias)

    def forward(self, x: Tensor, rule: rules.Rule | str | None = None) -> Tensor:
        if x.dim() != 4 or x.shape[1] != self.conv1.in_channels:
            raise ValueError(f"x must have shape (N, {self.conv1.in_channels}, H, W), got {tuple(x.shape)}")
        if rule is None:
            return torch.relu(x + self.conv2(torch.relu(self.conv1(x))))
        h = ops.relu(self._conv(self.conv1, x, rule))
        return ops.relu(skip_add(self._conv(self.conv2, h, rule), x))

    @staticmethod
    def _conv(conv: nn.Conv2d, x: Tensor, rule) -> Tensor:
        return linear_maps.conv2d(x, conv.weight, conv.bias, conv.stride, conv.padding, conv.dilation,
                            conv.groups, rule=rule)
