"""One forward instead of two: the prediction of ``explanation_type="model"`` taken from the explanation's own pass.

PyG's ``Explainer`` (``explanation_type="model"``) first runs the model without autograd to get its
prediction, and the target (the predicted class) from it; then the algorithm runs the model again.
:class:`~lrp_lib.explain.explainer.LRPExplainer` computes the model's output in its own forward (the
relevance primitives compute the same functions as the model), so with
``Explainer(..., one_pass=True)`` the prediction is that output and the target is taken from it
(:func:`explain_in_one_pass`), and the first pass is saved.

What may differ: the prediction is the output computed through the relevance primitives, in the
same operations as the model's own except where a primitive reorders one (a mean computed as a sum
divided by the count): equal to the model's prediction up to rounding, and bitwise equal where no
such operation is on the way (``tests/explain/test_one_pass.py``).  The target, an ``argmax`` or a
sign of it, is then the same unless two classes tie to the last bit.  So the switch is off by
default.  Used for a homogeneous graph, without ``per_index`` (whose subgraphs are chosen from the
targets first); otherwise the explainer runs its two passes as PyG's does.
"""
from __future__ import annotations

import threading
import warnings
from contextlib import contextmanager
from typing import Callable

import torch
from torch import Tensor

__all__ = ["OnePass", "one_pass", "pending_target", "explain_in_one_pass"]

_current = threading.local()  # the one-pass explanation running in this thread (its OnePass)


class OnePass:
    """The target of an explanation, taken from the model's output of its own forward: called with
    that output (``target_of(prediction)``), it keeps both and returns the target."""

    def __init__(self, target_of: Callable[[Tensor], Tensor]):
        self.target_of = target_of
        self.prediction: Tensor | None = None
        self.target: Tensor | None = None

    def __call__(self, prediction: Tensor) -> Tensor:
        self.prediction = prediction.detach()
        self.target = self.target_of(self.prediction)
        return self.target


@contextmanager
def one_pass(target_of: Callable[[Tensor], Tensor]):
    """Inside the block, an explainer called with ``target=None`` in this thread takes its target
    from its own forward (:func:`pending_target`)."""
    previous = getattr(_current, "record", None)
    _current.record = OnePass(target_of)
    try:
        yield _current.record
    finally:
        _current.record = previous


def pending_target() -> OnePass | None:
    """The :class:`OnePass` of the explanation running in this thread, if it runs in one pass."""
    return getattr(_current, "record", None)


def explain_in_one_pass(explainer, x: Tensor, edge_index: Tensor, target, index, **kwargs):
    """What PyG's ``Explainer.__call__`` does for ``explanation_type="model"``, without its
    prediction pass: the algorithm runs once, with the target taken from its own forward; the
    explanation gets the same attributes (prediction, target, index, the inputs, the threshold)."""
    if target is not None:
        warnings.warn(f"The 'target' should not be provided for the explanation type "
                      f"'{explainer.explanation_type.value}'", stacklevel=3)
    if isinstance(index, int):
        index = torch.tensor([index])
    training = explainer.model.training
    explainer.model.eval()
    try:
        with one_pass(explainer.get_target) as record:
            explanation = explainer.algorithm(explainer.model, x, edge_index, target=None, index=index, **kwargs)
    finally:
        explainer.model.train(training)
    explanation._model_config = explainer.model_config
    explanation.prediction, explanation.target, explanation.index = record.prediction, record.target, index
    explanation._model_args = list(kwargs.keys())
    explanation.x, explanation.edge_index = x, edge_index
    for key, arg in kwargs.items():
        explanation[key] = arg
    explanation.validate_masks()
    return explanation.threshold(explainer.threshold_config)
