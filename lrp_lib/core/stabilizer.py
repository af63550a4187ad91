r"""The arithmetic every proportional LRP rule shares: one stabiliser and one share.

A proportional rule gives each input the part of an output's relevance that its contribution
:math:`z_{ij}` makes of the output :math:`z_j`:

.. math::  R_i = \sum_j \frac{z_{ij}}{z_j} R_j .

:func:`stabilize` adds :math:`\epsilon\,\mathrm{sign}(z_j)` to the denominator (the epsilon
rule); :func:`relevance_share` computes :math:`R_j / z_j` (stabilised with ``eps``), warns with
:class:`LostRelevanceWarning` and the amount where a zero denominator drops relevance, and
raises where the relevance is NaN or Inf (``check=False``: neither, for callers that account
once at the end).  Every rule of :mod:`lrp_lib.core.rules` in its backward form and every op of
:mod:`lrp_lib.teach` that uses this convention divides through these two functions.
"""
from __future__ import annotations

import math
import warnings

import torch
from torch import Tensor

__all__ = ["LostRelevanceWarning", "stabilize", "relevance_share", "warn_lost", "raise_not_finite", "all_finite",
           "has_zero"]


class LostRelevanceWarning(UserWarning):
    """Relevance reached an output equal to zero and could not be redistributed."""


def raise_not_finite(op: str) -> None:
    raise ValueError(
        f"{op}: the relevance is NaN or Inf: an input (x, src, a or b), a weight or the relevance sent "
        f"into the backward contains NaN or Inf values; check them with torch.isfinite(x).all()")


def warn_lost(op: str, zero: Tensor, rel_out: Tensor) -> None:
    """Warn if relevance was sent into outputs flagged by the boolean mask ``zero``; raise if
    that relevance is NaN or Inf (``NaN != 0`` is true, but it is no amount that was lost)."""
    lost = torch.where(zero, rel_out, rel_out.new_zeros(()))  # what reached the zero outputs
    ends = torch.aminmax(lost) if lost.numel() else (lost.new_zeros(()), lost.new_zeros(()))
    low, high = float(ends[0]), float(ends[1])
    if not (math.isfinite(low) and math.isfinite(high)):
        raise_not_finite(op)
    if low != 0 or high != 0:
        amount = float(lost.abs().sum())
        warnings.warn(
            f"{op}: relevance of total magnitude {amount:.4g} reached outputs equal to zero "
            f"and was lost (a zero output cannot be split in proportion to its inputs)",
            LostRelevanceWarning,
            stacklevel=3,
        )


def stabilize(z: Tensor, eps: float) -> Tensor:
    r"""The one stabiliser of :mod:`lrp_lib`: :math:`z + \epsilon\,\mathrm{sign}(z)` with
    :math:`\mathrm{sign}(0) = +1` (Zennit's convention; a negative zero, ``-0.0``, gets
    :math:`-\epsilon`), so that for :math:`\epsilon > 0` no denominator is zero.  A new tensor
    (one ``copysign`` and one add); ``eps = 0`` returns ``z`` itself.  The constant is expanded to
    ``z``'s shape (a view, no copy): ATen's CPU ``copysign`` vectorises only when neither operand is a
    0-dimensional tensor, and runs about three times faster so."""
    if not eps:
        return z
    return torch.copysign(_constant(float(eps), z).expand_as(z), z).add_(z)


#: Scalar tensors of :func:`stabilize`'s epsilon by (value, dtype, device), made once: a new one per
#: call would be one more operation, and on a GPU a copy from the host, per rule application.
_CONSTANTS: dict = {}


def _constant(value: float, like: Tensor) -> Tensor:
    key = (value, like.dtype, like.device)
    found = _CONSTANTS.get(key)
    if found is None:
        with torch.inference_mode(False):  # an ordinary tensor, usable where autograd records
            found = torch.tensor(value, dtype=like.dtype, device=like.device)
        if type(found) is Tensor:  # (not a fake tensor made while a graph is traced: it would outlive the trace)
            _CONSTANTS[key] = found
    return found


def relevance_share(op: str, rel_out: Tensor, out: Tensor, denom: Tensor | None = None, *,
                    eps: float = 0.0, check: bool = True, zero: Tensor | None = None) -> Tensor:
    r"""Relevance per unit of output, :math:`R_k / \mathrm{stab}(z_k)`, the factor that every
    proportional rule multiplies by a contribution; :math:`\mathrm{stab}(z) = z` for
    ``eps = 0``, else :func:`stabilize` ``(z, eps)``.  ``denom`` (default: ``stabilize(out, eps)``)
    is a scratch tensor of the caller's and is overwritten with the result.

    Where the denominator is 0 the share is 0: that relevance is lost (with a stabilised
    denominator, :math:`\epsilon > 0`, this never happens).

    ``check=True`` (the teaching ops, the chapters' rules): a :class:`LostRelevanceWarning` with
    the amount lost, and a ``ValueError`` where the relevance is NaN or Inf.  Cost: one division
    and one count of the zeros of the denominator; the masking and the warning only run when a
    zero exists.  ``check=False`` (callers that account once, at the end, for what did not arrive and
    check that the relevance is finite): no check and no
    synchronisation; the share is written into the denominator where shapes and dtypes allow, and
    ``zero`` (``out == 0``, for ``eps = 0``) may be given by a caller that has it already.  The
    result is always a new tensor of the caller's, which it may overwrite.
    """
    if denom is None and eps:
        denom = stabilize(out, eps)
    if not check:
        if denom is not None:
            if denom.dtype == rel_out.dtype and rel_out.shape == denom.shape and not _differentiable(rel_out, denom):
                return torch.div(rel_out, denom, out=denom)
            return rel_out / denom
        if zero is None:
            if not has_zero(out):
                return rel_out / out
            zero = out == 0
        share = rel_out / out.masked_fill(zero, 1)  # 1 where out = 0: no division by zero
        return share.masked_fill_(zero, 0)  # (zero has out's shape, which broadcasts to the share's)
    d = out if denom is None else denom
    zero = d == 0 if has_zero(d) else None
    if zero is not None and not bool(zero.any()):  # (a yes or no, not a count: the same read for the same choice)
        zero = None
    share = rel_out / out if denom is None or _differentiable(rel_out, denom) else torch.div(rel_out, denom, out=denom)
    if zero is not None:
        warn_lost(op, zero, rel_out)
        share = share.masked_fill_(zero, 0)
    # NaN or Inf in the inputs, the weights or rel_out. The output is checked too: an infinite
    # input whose share is 0 (R = 0 on an infinite z) would otherwise turn into 0 * inf = NaN
    # when the share is multiplied back onto the input.
    if not all_finite(share, out):
        raise_not_finite(op)
    return share


def _differentiable(*tensors: Tensor) -> bool:
    """Whether autograd records an operation on ``tensors`` (then no ``out=``: chapter 4's relprop
    divides tensors that require grad, to differentiate its rule again)."""
    return torch.is_grad_enabled() and any(t.requires_grad for t in tensors)


def has_zero(t: Tensor) -> bool:
    """Whether ``t`` may hold a zero: ``False`` when its smallest entry is positive or its largest
    negative (one read-only pass, ``torch.aminmax``, cheaper on the CPU than a boolean mask; NaN
    answers ``True``).  Empty tensors hold none."""
    if not t.numel():
        return False
    low, high = torch.stack(torch.aminmax(t)).sign().tolist()  # one synchronisation; the signs decide
    return not (low > 0 or high < 0)


def all_finite(*tensors: Tensor) -> bool:
    """Whether no tensor among ``tensors`` contains NaN or Inf.

    One read-only pass per tensor (``torch.aminmax``: NaN propagates to both ends, an infinity
    is the minimum or the maximum) and a single synchronisation, instead of ``torch.isfinite``,
    which allocates and fills a boolean tensor after a separate ``abs``.  Empty tensors are finite.
    """
    ends = [end for t in tensors if t.numel() for end in torch.aminmax(t)]
    # bool() of a tensor, not .tolist(): the walks' batched backward (is_grads_batched) runs this
    # on batched tensors, which have no storage to list
    return not ends or bool(torch.isfinite(torch.stack(ends)).all())
