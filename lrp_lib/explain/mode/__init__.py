"""The interception and its rules: how a model's own forward becomes its explanation.

``RelevanceMode`` (:mod:`~lrp_lib.explain.mode.function_mode`) sends every torch function the model calls on
input-dependent tensors to its rule family (:mod:`~lrp_lib.explain.mode.dispatch`, from the tables of
:mod:`~lrp_lib.explain.mode.op_tables`); :mod:`~lrp_lib.explain.mode.handlers` and
:mod:`~lrp_lib.explain.mode.recurrent` hold the functions with a rule of their own; ``ForwardMode``
(:mod:`~lrp_lib.explain.mode.forward`) writes each family as a forward modification, with the probes of
:mod:`~lrp_lib.explain.mode.tally`; :mod:`~lrp_lib.explain.mode.edges`: edge relevance;
:mod:`~lrp_lib.explain.mode.hooks`: the hooks on a model's modules.  Imports :mod:`lrp_lib.core` only.  Here:
:class:`UnsupportedModelError`, for what relevance cannot pass through, and :func:`node_name`.
"""
import re

__all__ = ["UnsupportedModelError", "node_name"]


class UnsupportedModelError(TypeError):
    """The model uses an operation that relevance cannot be propagated through."""


def node_name(node) -> str:
    """The name of an autograd node's type without its ``Backward<n>`` suffix (``MmBackward0``: ``Mm``)."""
    return re.sub(r"Backward[0-3]$", "", type(node).__name__)
