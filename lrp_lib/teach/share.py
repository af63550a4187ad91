r"""The division of chapters 1 to 4's backward rules: relevance per unit of output, :math:`R_k / \mathrm{stab}(z_k)`,
with the relevance that reaches a zero output reported as lost.

The product's rules divide in their forward form (:func:`lrp_lib.core.modify.share_of`) and account for what
was lost once, at the end; the teaching ops, each its own ``autograd.Function``, check every division here.
"""
from __future__ import annotations

import math
import warnings

import torch
from torch import Tensor

from lrp_lib.core.stabilizer import LostRelevanceWarning, all_finite, stabilize

__all__ = ["relevance_share", "warn_lost", "raise_not_finite", "has_zero"]


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
