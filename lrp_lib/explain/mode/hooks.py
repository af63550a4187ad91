"""What the library's hooks read, and their registration.  The hooks on a model's modules stay registered; each
reads what the explanation running in its thread has bound (:func:`bound`), and does nothing where nothing is bound,
so that explanations in several threads and anyone's training leave each other alone.
"""
from __future__ import annotations

import threading
from contextlib import contextmanager
from contextvars import ContextVar

from torch import nn

__all__ = ["bound", "ensure_hook"]

_lock = threading.Lock()


@contextmanager
def bound(var: ContextVar, value):
    """Inside the block, ``var`` holds ``value`` in this thread (and context); yields ``value``."""
    token = var.set(value)
    try:
        yield value
    finally:
        var.reset(token)


def ensure_hook(model: nn.Module, kind: type, hooks: str, hook, **options) -> None:
    """Register ``hook`` in the hook dictionary ``hooks`` (``"_message_forward_hooks"``, ...) of every module of
    ``model`` that is a ``kind``, once: a module that holds it already (also a ``copy.deepcopy`` of a hooked one,
    which copies its hooks) gets no second."""
    with _lock:
        for m in model.modules():
            if isinstance(m, kind) and not any(h is hook for h in getattr(m, hooks).values()):
                getattr(m, f"register{hooks[:-1]}")(hook, **options)  # ("_x_hooks": register_x_hook)
