"""One forward inside a :class:`~lrp_lib.explain.mode.function_mode.RelevanceMode` and one backward:
:func:`propagate`."""
from __future__ import annotations

from typing import Callable

import torch
from torch import Tensor, nn
from torch_geometric.explain.config import ModelConfig

from lrp_lib.explain.mode.edges import ensure_hooks, recording
from lrp_lib.explain.mode.function_mode import RelevanceMode, UnsupportedModelError
from lrp_lib.explain.targets import explained_of, start_of

__all__ = ["propagate", "check_blocked"]


def propagate(model: nn.Module, mode: RelevanceMode, recorder, inputs: list, call: Callable, target, index,
              model_config: ModelConfig, explained: str = "logit", retain_graph: bool = False):
    """The forward ``call()`` (inside ``mode`` with ``inputs`` marked, message hooks recording into ``recorder``)
    and the backward from the explained output: (output, start relevance, relevance of each of ``inputs``, the
    explained output).  Refuses what relevance cannot pass through.  ``retain_graph``: for more backward passes;
    ``target``: class labels, or a function of the output giving them (:class:`~lrp_lib.explain.one_pass.OnePass`)."""
    if recorder is not None:
        ensure_hooks(model)
    with recording(recorder), torch.enable_grad(), mode:
        for t in inputs:
            mode.mark(t)
        out = call()
    if not isinstance(out, Tensor) or not mode.is_marked(out):
        raise ValueError(
            "the model's output does not depend on x through autograd: model.forward detaches it "
            "(.detach(), torch.no_grad(), .item(), numpy) or does not use x; relevance can only be "
            "propagated through the model's autograd graph, so remove the detach")
    name, logits = mode.head_of(out) or (None, None)
    head = explained_of(name, out, logits, model_config)
    mode.explained_head = name if head is not out else None
    if recorder is not None:
        recorder.check()
    start = start_of(out, head, target, index, model_config, explained)
    grads = mode.tally.backward(head, inputs, start, retain_graph)
    check_blocked(mode.tally)
    return out, start, grads, head


def check_blocked(tally) -> None:
    """:class:`UnsupportedModelError` where relevance reached operations without a rule (``tally.blocked``)."""
    if blocked := {k: v for k, v in tally.blocked.items() if v != 0}:
        raise UnsupportedModelError(
            "relevance reached operations that LRP has no rule for: " + "; ".join(
                f"{k} (relevance of magnitude {v:.4g})" for k, v in blocked.items()) +
            ". Replace them with supported torch operations, or explain with another method")
