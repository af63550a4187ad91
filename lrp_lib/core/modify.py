r"""LRP rules as forward modifications: each keeps its operation's value and changes its gradient.

Every rule gives an input :math:`x` the relevance :math:`R_x = x \odot v` for some :math:`v` computed from the
output's relevance.  Reading the relevance of every tensor :math:`t` as :math:`R_t = t \odot \partial f/\partial t`,
a rule is a statement about its operation's *gradient*: one plain ``.backward()`` through the modified forward
leaves :math:`t \odot t.\mathrm{grad}` on every tensor (LXT's efficient mode, Achtibat et al., 2024).  Nothing
here reads tensor data into Python, so ``torch.compile`` traces a modified forward as any other.  The linear-map
rules (:mod:`lrp_lib.core.rules`) build on :func:`keep_value`, the value of one tensor with the gradient of
another.  Two limits: relevance that reaches a zero entry stays there, and an infinite value has no finite
relevance (:math:`\infty - \infty`); the explainer reports both as relevance that did not arrive.
"""
from __future__ import annotations

import torch
from torch import Tensor

from lrp_lib.core.stabilizer import stabilize

__all__ = ["keep_value", "scale_gradient", "share_of", "epsilon", "identity", "HOMOGENEOUS", "uniform",
           "held_constant", "blocked", "split_by"]


def keep_value(value: Tensor, t: Tensor, c: Tensor | None = None) -> Tensor:
    r"""A tensor with ``value``'s value and the gradient of ``t`` (of ``t * c``, ``c`` taken as a constant):
    ``value.detach() + (t - t.detach()) * c``, one ``addcmul``.  ``t - t.detach()`` is exactly zero (for finite
    ``t``), so the value is ``value``'s to the bit (``-0.0`` becomes ``+0.0``); the gradient flows into ``t`` only."""
    if c is None:
        return held_constant(value) + (t - t.detach())
    return torch.addcmul(held_constant(value), t - t.detach(), held_constant(c))


def scale_gradient(y: Tensor, c: Tensor, constant: Tensor | None = None) -> Tensor:
    r"""``y``'s value, with the gradient arriving at it multiplied by ``c`` (taken as a constant):
    :math:`\partial / \partial y \mapsto c \odot g`.  One ``lerp`` from ``y`` to itself with weight ``c``:
    :math:`y + c\,(y - y) = y` exactly, and its gradient with respect to the end is ``c``.  ``constant``:
    ``y.detach()``, where the caller has it."""
    return torch.lerp(y.detach() if constant is None else constant, y, held_constant(c))


def share_of(z: Tensor, d: Tensor, zero: Tensor | None = None) -> Tensor:
    r""":math:`z / d` where :math:`d \ne 0`, and :math:`0` where :math:`d = 0`, as a constant.  Multiplied onto a
    gradient :math:`g` at :math:`z`, it gives :math:`R / d` with :math:`R = z \odot g`: the relevance per unit of a
    proportional rule's denominator (lost where :math:`d = 0`).  ``zero``: ``d == 0``, where the caller has it."""
    z, d = held_constant(z), held_constant(d)
    return torch.where(d == 0 if zero is None else zero, 0.0, z / d)


def epsilon(z: Tensor, eps: float) -> Tensor:
    r"""The epsilon rule on an operation linear in its marked inputs, output ``z`` (computed with its graph):
    :math:`R_x = x \odot J^\top \big(R / (z + \epsilon\,\mathrm{sign}(z))\big)`; the gradient at ``z`` becomes
    :math:`g \odot z / \mathrm{stab}(z)`.  For weighted maps (:class:`~lrp_lib.core.rules.Epsilon`) and maps
    without a weight alike: sums, means, scatters, aggregations of messages (a constant term keeps its share)."""
    zd = z.detach()
    return scale_gradient(z, share_of(zd, stabilize(zd, eps)), zd)


def split_by(out: Tensor, z: Tensor, eps: float = 0.0) -> Tensor:
    r"""A proportional rule whose contributions sum to ``z`` (computed with its graph), on the output ``out``:
    ``out``'s value, the gradient :math:`g` arriving at it passed on to ``z`` as
    :math:`g \odot \mathrm{out} / (z + \epsilon\,\mathrm{sign}(z))` (0 where that denominator is 0), so that
    :math:`R_x = x \odot J_z^\top\big(R / \mathrm{stab}(z)\big)` (the gamma and z\ :sup:`B` rules)."""
    od, zd = out.detach(), z.detach()
    return torch.addcmul(od, z - zd, share_of(od, stabilize(zd, eps)))


#: Elementwise functions whose derivative is :math:`f(x)/x` wherever :math:`x \ne 0` (positively homogeneous of
#: degree one on each side of 0; products and quotients by constants): their identity rule is the plain gradient.
HOMOGENEOUS = frozenset("""relu leaky_relu prelu neg negative positive abs absolute
mul __mul__ __rmul__ multiply div __truediv__ divide true_divide""".split())


def identity(x: Tensor, y: Tensor) -> Tensor:
    r"""The identity rule for an elementwise ``y = f(x)`` (activations, :math:`x` times a constant):
    :math:`R_x = R_y`.  The gradient at ``x`` is :math:`g \odot y / x`, so :math:`x \odot \mathrm{grad} = y \odot g`.
    ``x`` may broadcast against ``y`` (:math:`R_x` is then summed over the broadcast dimensions, as the gradient).
    Where :math:`x = 0` and :math:`f(0) \ne 0` the relevance stays on the zero entry."""
    return keep_value(y, x, share_of(y, x))


def uniform(y: Tensor, n: int) -> Tensor:
    r"""The uniform rule for ``y``, a product of ``n`` input-dependent factors computed with its graph (AttnLRP):
    :math:`R_i = R / n` for each factor.  The gradient of a product with respect to factor :math:`i` is
    :math:`y / x_i`, so scaling it by :math:`1/n` gives :math:`x_i \odot \mathrm{grad} = R / n`."""
    return scale_gradient(y, torch.full((), 1.0 / n, dtype=y.dtype, device=y.device))


def held_constant(t: Tensor) -> Tensor:
    r"""``t`` as a constant, into which no relevance flows (CP-LRP's attention weight, the denominator of a
    normalisation :math:`a / b`, for which :math:`R_a = R`, every rule's scale); returned as it is if it requires
    no grad (no ``detach`` in a captured graph)."""
    return t.detach() if t.requires_grad else t


def blocked(y: Tensor) -> tuple[Tensor, Tensor]:
    r"""An operation without a rule: ``y``'s value, no gradient into its inputs, and a probe.

    Returns ``(out, probe)``: ``probe``, a zero tensor that requires grad added to ``out``, so that after the
    backward :math:`\sum_k y_k \, \mathrm{probe.grad}_k` is the relevance that reached the operation and went no
    further (the explainer refuses the model when it is not zero)."""
    probe = torch.zeros_like(y, requires_grad=True)
    return y.detach() + probe, probe
