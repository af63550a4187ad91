"""One forward instead of two: the prediction of ``explanation_type="model"`` taken from the explanation's own pass
(:class:`~lrp_lib.explain.pyg_explainer.Explainer`'s ``one_pass``).  That prediction equals the model's up to
rounding; where rounding could change the target (:func:`clear_of_rounding`), the model's own prediction decides.
"""
from __future__ import annotations

import warnings
from contextvars import ContextVar
from typing import Callable

import torch
from torch import Tensor

from lrp_lib.explain.mode.hooks import bound

__all__ = ["OnePass", "one_pass", "pending_target", "explain_in_one_pass", "clear_of_rounding"]

_current: ContextVar = ContextVar("one_pass", default=None)  # the one-pass explanation in this thread (its OnePass)


def clear_of_rounding(prediction: Tensor, model_config) -> bool:
    r"""Whether PyG's target (``Explainer.get_target``) of every row of ``prediction`` stays the same for any value
    within rounding of it: the two largest classes more than :math:`\sqrt{\epsilon}\,(1 + |a| + |b|)` apart
    (multiclass), a binary output more than :math:`\sqrt{\epsilon}` from its threshold (0 for raw outputs, 0.5 for
    probabilities), every value finite; :math:`\epsilon` is the dtype's machine precision (its root is
    :math:`3.5 \cdot 10^{-4}` in float32).  A regression has no decision: always ``True``."""
    mode = getattr(model_config.mode, "value", model_config.mode)
    if not prediction.is_floating_point() or prediction.numel() == 0 or mode == "regression":
        return True
    tol = torch.finfo(prediction.dtype).eps ** 0.5
    if mode == "binary_classification":
        threshold = 0.5 if getattr(model_config.return_type, "value", model_config.return_type) == "probs" else 0.0
        return bool(((prediction - threshold).abs() > tol).all())  # NaN: not clear
    if prediction.shape[-1] < 2:
        return bool(torch.isfinite(prediction).all())
    top = prediction.topk(2, dim=-1).values
    return bool((top[..., 0] - top[..., 1] > tol * (1 + top.abs().sum(-1))).all())  # inf - inf, NaN: not clear


class OnePass:
    """Called with the output of an explanation's own forward, keeps it as the prediction and returns its target,
    ``target_of(prediction)``; where ``clear(prediction)`` is false, the prediction is ``settle()``, the model's."""

    def __init__(self, target_of: Callable[[Tensor], Tensor], settle: Callable[[], Tensor] | None = None,
                 clear: Callable[[Tensor], bool] | None = None):
        self.target_of, self.settle, self.clear = target_of, settle, clear
        self.prediction = self.target = None  # (tensors, once called)

    def __call__(self, prediction: Tensor) -> Tensor:
        self.prediction = prediction.detach()
        if self.settle is not None and self.clear is not None and not self.clear(self.prediction):
            with torch.no_grad():  # a near tie: the model's own prediction decides, as in PyG's two passes
                self.prediction = self.settle()
        self.target = self.target_of(self.prediction)
        return self.target


def one_pass(target_of: Callable[[Tensor], Tensor], settle: Callable[[], Tensor] | None = None,
             clear: Callable[[Tensor], bool] | None = None):
    """Inside the block, an explainer called with ``target=None`` in this thread takes its target from its own
    forward (:func:`pending_target`); ``settle`` and ``clear``: see :class:`OnePass`."""
    return bound(_current, OnePass(target_of, settle, clear))


def pending_target() -> OnePass | None:
    """The :class:`OnePass` of the explanation running in this thread, if it runs in one pass."""
    return _current.get()


def explain_in_one_pass(explainer, x: Tensor, edge_index: Tensor, target, index, **kwargs):
    """PyG's ``Explainer.__call__`` for ``explanation_type="model"``, the prediction and target taken from the
    algorithm's own forward; the explanation gets the same attributes.  The model is left in eval mode."""
    if target is not None:
        warnings.warn(f"The 'target' should not be provided for the explanation type "
                      f"'{explainer.explanation_type.value}'", stacklevel=3)
    if isinstance(index, int):
        index = torch.tensor([index])
    explainer.model.eval()
    with one_pass(explainer.get_target, lambda: explainer.get_prediction(x, edge_index, **kwargs),
                  lambda prediction: clear_of_rounding(prediction, explainer.model_config)) as record:
        explanation = explainer.algorithm(explainer.model, x, edge_index, target=None, index=index, **kwargs)
    explanation._model_config, explanation._model_args = explainer.model_config, list(kwargs.keys())
    explanation.prediction, explanation.target, explanation.index = record.prediction, record.target, index
    explanation.x, explanation.edge_index = x, edge_index
    for key, arg in kwargs.items():
        explanation[key] = arg
    explanation.validate_masks()
    return explanation.threshold(explainer.threshold_config)
