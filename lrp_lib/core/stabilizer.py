r"""The one stabiliser every proportional LRP rule shares (:func:`stabilize`, the epsilon rule's denominator), and the
warning for relevance that is lost.  Every rule of :mod:`lrp_lib.core.rules` (whose docstring gives the proportional
split) and every op of :mod:`lrp_lib.teach` (through :func:`lrp_lib.teach.share.relevance_share`) stabilises through it.
"""
from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["LostRelevanceWarning", "stabilize", "all_finite"]


class LostRelevanceWarning(UserWarning):
    """Relevance reached an output equal to zero and could not be redistributed."""


def stabilize(z: Tensor, eps: float) -> Tensor:
    r""":math:`z + \epsilon\,\mathrm{sign}(z)` with :math:`\mathrm{sign}(0) = +1` (Zennit's convention; ``-0.0``
    gets :math:`-\epsilon`), so that for :math:`\epsilon > 0` no denominator is zero.  A new tensor; ``eps = 0``
    returns ``z`` itself.  (The constant is expanded to ``z``'s shape: ATen's CPU ``copysign`` vectorises only so.)"""
    if not eps:
        return z
    return torch.copysign(_constant(float(eps), z).expand_as(z), z).add_(z)


#: :func:`stabilize`'s scalar tensors by (value, dtype, device), made once (no host copy per call).
_CONSTANTS: dict = {}


def _constant(value: float, like: Tensor) -> Tensor:
    key = (value, like.dtype, like.device)
    if (found := _CONSTANTS.get(key)) is None:
        with torch.inference_mode(False):  # an ordinary tensor, usable where autograd records
            found = torch.tensor(value, dtype=like.dtype, device=like.device)
        if type(found) is Tensor:  # (not a fake tensor made while a graph is traced: it would outlive the trace)
            _CONSTANTS[key] = found
    return found


def all_finite(*tensors: Tensor) -> bool:
    """Whether no tensor among ``tensors`` holds NaN or Inf (empty ones are finite): one ``torch.aminmax`` per
    tensor, whose ends NaN and infinities reach, and a single synchronisation."""
    ends = [end for t in tensors if t.numel() for end in torch.aminmax(t)]
    # bool() of a tensor, not .tolist(): batched tensors (is_grads_batched) have no storage to list
    return not ends or bool(torch.isfinite(torch.stack(ends)).all())
