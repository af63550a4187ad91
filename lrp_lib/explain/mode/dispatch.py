"""What :class:`~lrp_lib.explain.mode.function_mode.RelevanceMode` does with each torch function: :func:`route_of`,
a :class:`Route` decided from the function's name alone (the tables of :mod:`lrp_lib.explain.mode.op_tables`, the
handlers) the first time it is seen, and kept per function.
"""
from __future__ import annotations

import functools
from typing import Callable, NamedTuple

from lrp_lib.explain.mode import handlers, recurrent
from lrp_lib.explain.mode.op_tables import (AUGMENTED, COPY_INPLACE, DETACH, DROPOUT, GATES, HEADS, IDENTITY, PASS,
                                            PLAIN, SIGN_FLIPS)

__all__ = ["Route", "route_of", "classify", "HANDLERS", "METADATA", "PLAIN_ROUTE", "DETACH_ROUTE", "GET_ROUTE",
           "DROPOUT_ROUTE", "PASS_ROUTE", "COPY_ROUTE", "INPLACE_ROUTE", "HANDLER_ROUTE", "IDENTITY_ROUTE",
           "BLOCKED_ROUTE"]

#: The handler of each torch function with a rule of its own (handlers and recurrent).
HANDLERS = {**handlers.HANDLERS, **recurrent.HANDLERS}

#: Tensor attributes whose value is not a tensor (read through ``__get__``): run as they are.
METADATA = frozenset("""
layout device dtype shape ndim is_sparse is_sparse_csr is_cuda is_cpu is_mps is_xpu is_meta is_quantized
is_mkldnn is_nested is_leaf requires_grad grad_fn names output_nr _version itemsize nbytes is_inference
""".split())

(PLAIN_ROUTE, DETACH_ROUTE, GET_ROUTE, DROPOUT_ROUTE, PASS_ROUTE, COPY_ROUTE, INPLACE_ROUTE, HANDLER_ROUTE,
 IDENTITY_ROUTE, BLOCKED_ROUTE) = range(10)


class Route(NamedTuple):
    """What the mode does with one torch function on input-dependent tensors: ``kind``, one of the ``*_ROUTE``
    codes; ``handler`` (``HANDLER_ROUTE``); ``fallback``: the kind of an in-place copy with ``reduce`` or
    ``accumulate``; ``gate``: the result is a gate (``sigmoid``); ``sign_flip``: a gate's negation is one; ``head``:
    it makes probabilities of logits; ``view``: an in-place view, whose result is its (marked) input."""
    kind: int
    name: str
    handler: Callable | None = None
    fallback: int = BLOCKED_ROUTE
    gate: bool = False
    sign_flip: bool = False
    head: bool = False
    view: bool = False


def classify(func) -> Route:
    """The route of ``func``, decided from its name: the first table of :mod:`~lrp_lib.explain.mode.op_tables`
    that holds it, in the order below; then an in-place operation, a handler, the identity or blocked."""
    name = getattr(func, "__name__", None) or repr(func)
    flags = dict(gate=name in GATES, sign_flip=name in SIGN_FLIPS, head=name in HEADS)
    if name == "__get__":
        attr = getattr(getattr(func, "__self__", None), "__name__", "")
        return Route(PLAIN_ROUTE if attr in METADATA else GET_ROUTE, name)
    for table, kind in ((PLAIN, PLAIN_ROUTE), (DETACH, DETACH_ROUTE), (DROPOUT, DROPOUT_ROUTE)):
        if name in table:
            return Route(kind, name)
    inplace = (name.endswith("_") and not name.startswith("__")) or name in AUGMENTED
    if name in PASS:  # (an in-place one, x.unsqueeze_(0), is a view: its result is its marked input)
        return Route(PASS_ROUTE, name, view=inplace)
    handler = None if inplace else HANDLERS.get(name)
    kind = (INPLACE_ROUTE if inplace else HANDLER_ROUTE if handler is not None else
            IDENTITY_ROUTE if name in IDENTITY else BLOCKED_ROUTE)
    return (Route(COPY_ROUTE, name, handler, kind, **flags) if name in COPY_INPLACE
            else Route(kind, name, handler, **flags))


_classified = functools.cache(classify)


def route_of(func) -> Route:
    """:func:`classify` ``(func)``, kept per function (an unhashable one is classified on every call)."""
    try:
        return _classified(func)
    except TypeError:  # unhashable
        return classify(func)
