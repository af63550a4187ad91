r"""Models without a graph: :func:`explain_tensor`, the relevance of a plain tensor input for any module called on
it (an MLP, a CNN, a transformer block), under the same mode and accounts as ``LRPExplainer``.

    >>> result = explain_tensor(model, images, target=labels, rule="epsilon")
    >>> float(result.relevance.sum()) + result.bias_relevance + result.relevance_residual  # = result.explained.sum()
"""
from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from lrp_lib.core.composites import Composite, get_composite
from lrp_lib.core.rules import Rule
from lrp_lib.core.validation import check_finite, check_model
from lrp_lib.explain.accounting import lost_relevance
from lrp_lib.explain.mode.forward import ForwardMode
from lrp_lib.explain.inputs import uncompiled
from lrp_lib.explain.relevance_pass import check_blocked

__all__ = ["explain_tensor", "TensorRelevance"]


class TensorRelevance(NamedTuple):
    """What :func:`explain_tensor` returns: ``relevance`` (shaped like the input), the model's ``output``, each row's
    ``explained`` value (the target's logit), and, over all rows, what biases, constant terms and stabilisers kept
    (``bias_relevance``) and what did not arrive (``relevance_residual``: explained - relevance - bias)."""
    relevance: Tensor
    output: Tensor
    explained: Tensor
    bias_relevance: float
    relevance_residual: float


def explain_tensor(model: nn.Module, x: Tensor, target: Tensor | int | None = None, *,
                   rule: Rule | str | None = None, composite: Composite | None = None) -> TensorRelevance:
    r"""The relevance of ``x`` for the output of ``model(x)``.

    Args:
        model: any module taking one tensor (put it in eval mode: dropout in training mode is refused).
        x: the input, a floating-point tensor whose first dimension holds the samples.
        target: for an output of shape ``(N, C)`` (one logit per class), the explained class of each row: an int
            for all rows or an integer tensor of ``N`` labels; ``None``: the predicted class (the argmax).  For
            any other output the output itself is explained (``target`` must be None).
        rule: the rule of every weight (default ``"epsilon"``, :math:`\epsilon = 10^{-6}`: on a bias-free ReLU
            network it is Gradient :math:`\times` Input), or ``composite``: rules per module
            (:class:`~lrp_lib.core.composites.Composite`).

    Raises :class:`~lrp_lib.explain.mode.function_mode.UnsupportedModelError` (its name and amount) where
    relevance reaches an operation without a rule, and ValueError where the relevance is NaN or Inf; relevance
    lost at a detach is reported by a :class:`~lrp_lib.explain.accounting.LostRelevanceWarning` with its amount."""
    check_model(model)
    model = uncompiled(model)  # torch.compile(model): its own module
    if not isinstance(x, Tensor) or not x.is_floating_point():
        got = x.dtype if isinstance(x, Tensor) else type(x).__name__
        raise TypeError(f"x must be a floating-point tensor, got {got}; convert it with x.float()")
    check_finite(x, "x")
    if rule is not None and composite is not None:
        raise ValueError("pass either rule or composite, not both (a composite holds the rules)")
    composite = composite if composite is not None else get_composite("epsilon" if rule is None else rule)
    mode = ForwardMode(composite, model)
    leaf = x.detach().clone().requires_grad_(True)
    with torch.enable_grad(), mode:
        mode.mark(leaf)
        out = model(leaf)
    if not isinstance(out, Tensor) or not mode.is_marked(out):
        raise ValueError("the model's output does not depend on x through autograd (a detach, torch.no_grad(), "
                         ".item() or numpy in its forward); relevance can only pass through autograd")
    start = _start(out.detach(), target)
    (relevance,) = mode.tally.backward(out, [leaf], start)
    check_blocked(mode.tally)
    relevance = torch.zeros_like(leaf) if relevance is None else relevance.detach()
    explained = start.reshape(start.shape[0], -1).sum(1) if start.dim() else start
    kept = mode.tally.total(mode.tally.absorbed)
    residual = lost_relevance(start, [relevance], kept, mode.detached)  # (warns where it exceeds rounding)
    return TensorRelevance(relevance, out.detach(), explained, kept, residual)


def _start(out: Tensor, target) -> Tensor:
    """The relevance the backward starts from: the target's logit in each row, 0 elsewhere (or the output)."""
    if out.dim() != 2:
        if target is not None:
            raise ValueError(f"target is for an output of shape (N, C), one logit per class; the model's output has "
                             f"shape {tuple(out.shape)}, which is explained as it is: pass target=None")
        return out
    n, classes = out.shape
    if target is None:
        target = out.argmax(1)
    elif isinstance(target, int) and not isinstance(target, bool):
        target = torch.full((n,), target, dtype=torch.long, device=out.device)
    elif not isinstance(target, Tensor) or target.is_floating_point() or target.dtype == torch.bool:
        raise TypeError(f"target must be an int or an integer tensor of class labels, got "
                        f"{target.dtype if isinstance(target, Tensor) else type(target).__name__}")
    target = target.reshape(-1).to(out.device)
    if target.numel() != n:
        raise ValueError(f"target must hold one label per row of the output ({n}), got {target.numel()}")
    if target.numel() and (int(target.min()) < 0 or int(target.max()) >= classes):
        raise ValueError(f"target holds labels outside [0, {classes - 1}] (the model has {classes} outputs per row): "
                         f"{target.tolist()}")
    return out * F.one_hot(target.long(), classes).to(out.dtype)
