r"""LRP rules as forward modifications: each keeps its operation's value and changes its gradient.

Every rule gives an input :math:`x` of an operation the relevance :math:`R_x = x \odot v`, for some
vector :math:`v` computed from the output's relevance.  If the relevance of every tensor :math:`t` is
read as :math:`R_t = t \odot \partial f / \partial t` (the gradient of the explained output :math:`f`),
a rule is a statement about the *gradient* of its operation, and can be written as a forward pass that
computes the ordinary value but whose gradient is the rule's.  One plain ``.backward()`` through the
modified forward then leaves relevance :math:`t \odot t.\mathrm{grad}` on every tensor (the form of LXT's
efficient mode, Achtibat et al., 2024).  Nothing here reads tensor data into Python, so
``torch.compile`` traces a modified forward as any other.

The building block is :func:`keep_value`: the value of one tensor with the gradient of another.  The
linear-map rules are declared with their formulas in :mod:`lrp_lib.core.rules`, whose ``modify`` methods
build on these pieces.  Two limits of the form: relevance that reaches an entry equal to zero stays there
(no gradient can carry it onto a zero), and an infinite value has no finite relevance (:func:`keep_value`
would read :math:`\infty - \infty`); the explainer reports both as relevance that did not arrive.
"""
from __future__ import annotations

import torch
from torch import Tensor

from lrp_lib.core.stabilizer import stabilize

__all__ = ["keep_value", "scale_gradient", "share_of", "epsilon", "identity", "HOMOGENEOUS", "uniform",
           "held_constant", "blocked", "split_by"]


def keep_value(value: Tensor, t: Tensor, c: Tensor | None = None) -> Tensor:
    r"""A tensor with ``value``'s value and the gradient of ``t`` (of ``t * c``, ``c`` taken as a constant):
    ``value.detach() + (t - t.detach()) * c``, one ``addcmul``.

    ``t - t.detach()`` is exactly zero (for finite ``t``), so the value is ``value``'s to the bit
    (a ``-0.0`` becomes ``+0.0``); the gradient flows into ``t``'s graph only."""
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
    r""":math:`z / d` where :math:`d \ne 0`, and :math:`0` where :math:`d = 0`, as a constant.

    Multiplied onto a gradient :math:`g` at :math:`z`, it gives :math:`R / d` with
    :math:`R = z \odot g`: the relevance per unit of a proportional rule's denominator (lost where
    :math:`d = 0`).  ``zero``: ``d == 0``, where
    the caller has it."""
    z, d = held_constant(z), held_constant(d)
    return torch.where(d == 0 if zero is None else zero, 0.0, z / d)


def epsilon(z: Tensor, eps: float) -> Tensor:
    r"""The epsilon rule on an operation linear in its marked inputs, output ``z`` (computed with
    its graph): :math:`R_x = x \odot J^\top \big(R / (z + \epsilon\,\mathrm{sign}(z))\big)`.

    The gradient at ``z`` becomes :math:`g \odot z / \mathrm{stab}(z)`.  It serves weighted maps
    (through :class:`~lrp_lib.core.rules.Epsilon`) and maps without a weight alike: a sum of marked
    tensors, a mean, a scatter or an aggregation of messages (a constant term keeps its share)."""
    zd = z.detach()
    return scale_gradient(z, share_of(zd, stabilize(zd, eps)), zd)


def split_by(out: Tensor, z: Tensor, eps: float = 0.0) -> Tensor:
    r"""A proportional rule whose contributions sum to ``z`` (computed with its graph), on the output ``out``:
    ``out``'s value, the gradient :math:`g` arriving at it passed on to ``z`` as
    :math:`g \odot \mathrm{out} / (z + \epsilon\,\mathrm{sign}(z))` (0 where that denominator is 0), so that
    :math:`R_x = x \odot J_z^\top\big(R / \mathrm{stab}(z)\big)` (the gamma and z\ :sup:`B` rules)."""
    od, zd = out.detach(), z.detach()
    return torch.addcmul(od, z - zd, share_of(od, stabilize(zd, eps)))


#: Elementwise functions whose derivative is :math:`f(x)/x` wherever :math:`x \ne 0` (positively homogeneous
#: of degree one on each side of 0, and the products and quotients by constants): for them the identity rule
#: is the ordinary gradient, and :func:`identity` is not needed.
HOMOGENEOUS = frozenset("""relu leaky_relu prelu neg __neg__ negative positive __pos__ abs __abs__ absolute
mul __mul__ __rmul__ multiply div __truediv__ divide true_divide""".split())


def identity(x: Tensor, y: Tensor) -> Tensor:
    r"""The identity rule for an elementwise ``y = f(x)`` (activations, :math:`x` times a constant):
    :math:`R_x = R_y`.  The gradient at ``x`` is :math:`g \odot y / x`, so
    :math:`x \odot \mathrm{grad} = y \odot g`.  ``x`` may broadcast against ``y`` (then
    :math:`R_x` is summed over the broadcast dimensions, as autograd sums the gradient).  Where
    :math:`x = 0` and :math:`f(0) \ne 0` the relevance stays on the zero entry."""
    return keep_value(y, x, share_of(y, x))


def uniform(y: Tensor, n: int) -> Tensor:
    r"""The uniform rule for ``y``, a product of ``n`` input-dependent factors computed with its
    graph (AttnLRP): :math:`R_i = R / n` for each factor.  The gradient of a product with respect
    to factor :math:`i` is :math:`y / x_i`, so scaling it by :math:`1/n` gives
    :math:`x_i \odot \mathrm{grad} = R / n`."""
    return scale_gradient(y, torch.full((), 1.0 / n, dtype=y.dtype, device=y.device))


def held_constant(t: Tensor) -> Tensor:
    r"""``t`` as a constant: no relevance flows into it (CP-LRP's attention weight, the denominator
    of a normalisation :math:`a / b`, for which :math:`R_a = R`, every rule's scale).  A tensor that
    requires no grad is already one and is returned as it is (no ``detach`` in a captured graph)."""
    return t.detach() if t.requires_grad else t


def blocked(y: Tensor) -> tuple[Tensor, Tensor]:
    r"""An operation without a rule: ``y``'s value, no gradient into its inputs, and a probe.

    Returns ``(out, probe)``: ``probe`` is a zero tensor that requires grad, added to ``out``, so
    that after the backward :math:`\sum_k y_k \, \mathrm{probe.grad}_k` is the relevance that
    reached the operation and went no further (the explainer refuses the model when it is not
    zero)."""
    probe = torch.zeros_like(y, requires_grad=True)
    return y.detach() + probe, probe
