"""Refusing what relevance cannot pass through: :class:`UnsupportedModelError`, and :func:`node_name`, the
name of an autograd node that the refusals give."""
from __future__ import annotations

import re

__all__ = ["UnsupportedModelError", "node_name"]


class UnsupportedModelError(TypeError):
    """The model uses an operation that relevance cannot be propagated through."""


def node_name(node) -> str:
    """The name of an autograd node's type without its ``Backward<n>`` suffix (``MmBackward0``: ``Mm``)."""
    return re.sub(r"Backward[0-3]$", "", type(node).__name__)
