"""One model, two modes: ordinary gradients, or relevance in backward.

The layers of :mod:`lrp_lib.teach.graph` ask :func:`is_relevance_mode` in their forward.  Outside
``with relevance():`` they build the graph from ordinary torch operations, so ``backward``
gives the true gradient and the model trains as usual.  Inside, they build it from the ops
of :mod:`lrp_lib.teach.ops`, whose backward is an LRP rule, so the same ``backward`` leaves
relevance in ``.grad``.  The forward values are the same in both modes.

    >>> with relevance():
    ...     out = model(data)            # relevance ops recorded
    >>> out.x.backward(out.x)            # relevance flows back (the mode is read in forward)

The mode is kept per thread, restored on exit (also when an exception leaves the block),
and the blocks nest: ``relevance(False)`` inside a relevance block switches back to
gradients until it ends.
"""
from __future__ import annotations

import contextlib
import threading
from typing import Iterator

__all__ = ["relevance", "is_relevance_mode"]

_state = threading.local()


def is_relevance_mode() -> bool:
    """``True`` inside ``with relevance():`` (in this thread), else ``False``."""
    return getattr(_state, "enabled", False)


@contextlib.contextmanager
def relevance(enabled: bool = True) -> Iterator[None]:
    """Context manager: layers run forward with relevance ops while it is active.

    ``enabled=False`` switches relevance off inside an outer block.  On exit the previous
    mode comes back, whether the block ends normally or by an exception.  What matters is
    the mode during the *forward* pass; ``backward`` may be called after the block.
    """
    if not isinstance(enabled, bool):
        raise TypeError(f"enabled must be a bool, got {type(enabled).__name__}")
    previous = is_relevance_mode()
    _state.enabled = enabled
    try:
        yield
    finally:
        _state.enabled = previous
