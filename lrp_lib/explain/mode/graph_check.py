"""Refusing what relevance cannot pass through: :class:`UnsupportedModelError`, and :func:`node_name`, the
name of an autograd node that the refusals give."""
from __future__ import annotations

__all__ = ["UnsupportedModelError", "node_name"]


class UnsupportedModelError(TypeError):
    """The model uses an operation that relevance cannot be propagated through."""


def node_name(node) -> str:
    name = type(node).__name__
    for suffix in ("Backward0", "Backward1", "Backward2", "Backward3"):
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name
