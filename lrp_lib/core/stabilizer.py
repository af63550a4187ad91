r"""The arithmetic every proportional LRP rule shares: one stabiliser and one share.

A proportional rule gives each input the part of an output's relevance that its contribution
:math:`z_{ij}` makes of the output :math:`z_j`:

.. math::  R_i = \sum_j \frac{z_{ij}}{z_j} R_j .

:func:`stabilize` adds :math:`\epsilon\,\mathrm{sign}(z_j)` to the denominator (the epsilon
rule); :func:`relevance_share` computes :math:`R_j / z_j`.  Every rule of :mod:`lrp_lib.core.rules`
and every op of :mod:`lrp_lib.teach` divides through these two functions.
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
    """Raise the ValueError of operation ``op`` whose relevance is NaN or Inf."""
    raise ValueError(
        f"{op}: the relevance is NaN or Inf: an input (x, src, a or b), a weight or the relevance sent "
        f"into the backward contains NaN or Inf values; check them with torch.isfinite(x).all()")


def warn_lost(op: str, zero: Tensor, rel_out: Tensor) -> None:
    """Warn with a :class:`LostRelevanceWarning` if relevance was sent into outputs flagged by the boolean
    mask ``zero``; raise if that relevance is NaN or Inf (``NaN != 0`` is true, but it is no amount that
    was lost)."""
    lost = torch.where(zero, rel_out, rel_out.new_zeros(()))
    low, high = torch.stack(torch.aminmax(lost)).tolist() if lost.numel() else (0.0, 0.0)
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
    :math:`-\epsilon`), so that for :math:`\epsilon > 0` no denominator is zero.  A new tensor;
    ``eps = 0`` returns ``z`` itself.  (The constant is expanded to ``z``'s shape: ATen's CPU
    ``copysign`` vectorises only so.)"""
    if not eps:
        return z
    return torch.copysign(_constant(float(eps), z).expand_as(z), z).add_(z)


#: :func:`stabilize`'s scalar tensors by (value, dtype, device), made once (no host copy per call).
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
    proportional rule multiplies by a contribution, as a new tensor; ``denom`` is
    :math:`\mathrm{stab}(z)` if the caller has it, else :func:`stabilize` ``(out, eps)``.  Where the
    denominator is 0 the share is 0: that relevance is lost.

    ``check=True``: a :class:`LostRelevanceWarning` with the amount lost (named by ``op``), and a
    ``ValueError`` where the relevance is NaN or Inf.  ``check=False``, for callers that account once,
    at the end: neither, and no zero count where a denominator is given or ``eps > 0``; ``zero``
    (``out == 0``, for ``eps = 0``) may be given by a caller that has it.
    """
    d = stabilize(out, eps) if denom is None else denom
    if zero is None and (check or d is out) and has_zero(d):
        zero = d == 0
        if not bool(zero.any()):
            zero = None
    if zero is None:
        share = rel_out / d
    else:
        if check:
            warn_lost(op, zero, rel_out)
        share = (rel_out / d.masked_fill(zero, 1)).masked_fill_(zero, 0)  # (zero broadcasts to the share's shape)
    # the output is checked too: an infinite z with the share 0 would turn into 0 * inf = NaN on the input
    if check and not all_finite(share, out):
        raise_not_finite(op)
    return share


def has_zero(t: Tensor) -> bool:
    """Whether ``t`` may hold a zero: ``False`` when its smallest entry is positive or its largest
    negative (one read-only ``torch.aminmax``; NaN answers ``True``).  Empty tensors hold none."""
    if not t.numel():
        return False
    low, high = torch.stack(torch.aminmax(t)).sign().tolist()
    return not (low > 0 or high < 0)


def all_finite(*tensors: Tensor) -> bool:
    """Whether no tensor among ``tensors`` contains NaN or Inf (one ``torch.aminmax`` per tensor, whose
    ends NaN and infinities reach, and a single synchronisation).  Empty tensors are finite."""
    ends = [end for t in tensors if t.numel() for end in torch.aminmax(t)]
    # bool() of a tensor, not .tolist(): batched tensors (is_grads_batched) have no storage to list
    return not ends or bool(torch.isfinite(torch.stack(ends)).all())
