"""The C binding that calls a given ATen operator on given arguments, found by watching it dispatch.

A compiled program (:mod:`lrp_lib.explain.compiled`) calls each operator as it was recorded: an
``OpOverload``'s boxed call, which converts every argument to an ``IValue`` on each call.  The C
bindings behind ``torch.mm``, ``Tensor.mul_`` or ``torch._C._nn.linear`` parse their arguments in
generated code and reach the same kernel about 0.5 to 2 microseconds sooner; over the couple of hundred
operations of a small graph's explanation that is a few percent of its cost.

Which operator a binding calls depends on the types of the arguments (``torch.div(t, 2)`` could call
``div.Tensor`` or ``div.Scalar``, ``torch.sum(t, [0])`` calls ``sum.dim_IntList``), and a binding may
call several operators (a composite one decomposes).  So :func:`binding` calls each candidate once on
the arguments, their tensors replaced by meta tensors of the same shapes and dtypes, under a dispatch
mode that stops the call at its first operator: a candidate is taken only where that operator is the
recorded one.  The same operator on the same arguments runs the same kernel, so the results are the
same to the bit; nothing runs on the data while the candidates are tried.  What a binding calls depends on
the arguments' kinds (a tensor, a number, a list, ``None``), not on their values: the answer is kept per
operator and kinds of arguments.
"""
from __future__ import annotations

import threading
from typing import Callable

import torch
from torch import Tensor
from torch.utils._python_dispatch import TorchDispatchMode

__all__ = ["binding", "NAMESPACES"]

#: Where the candidates are looked up, in order: functions (``torch.mm``), tensor methods (called as
#: ``TensorBase.mul_(t, other)``), ``torch.nn.functional``'s C functions.  Each is a C binding, not a Python
#: wrapper of one.
NAMESPACES = (torch._C._VariableFunctions, torch._C.TensorBase, torch._C._nn)

_found: dict = {}
_lock = threading.Lock()


class _Dispatched(Exception):
    def __init__(self, func):
        super().__init__(str(func))
        self.func = func


class _FirstOperator(TorchDispatchMode):
    """Stops each call at its first ATen operator, raising :class:`_Dispatched` with it."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        raise _Dispatched(func)


def _kind(a):
    """What decides which operator a binding calls: a tensor (and whether it is 0-dimensional, which
    some bindings accept as a number), a list's or tuple's kinds, or the type of anything else."""
    if isinstance(a, Tensor):
        return ("tensor", a.dim() == 0)
    if isinstance(a, (list, tuple)):
        return type(a), tuple(_kind(b) for b in a)
    return type(a)


def _meta(a):
    if isinstance(a, Tensor):
        return a.to("meta")
    if isinstance(a, (list, tuple)):
        return type(a)(_meta(b) for b in a)
    return a


def binding(op: torch._ops.OpOverload, args: tuple, kwargs: dict) -> Callable | None:
    """A C binding that, called as ``binding(*args, **kwargs)``, calls ``op`` and nothing before it on
    these arguments; None where no candidate of the same name does (then ``op`` is called itself)."""
    key = (op, _kind(args), tuple((k, _kind(v)) for k, v in kwargs.items()))
    if key in _found:
        return _found[key]
    found = None
    if op.namespace == "aten":
        name = op._schema.name.split("::", 1)[1]
        meta_args, meta_kwargs = _meta(args), {k: _meta(v) for k, v in kwargs.items()}
        for namespace in NAMESPACES:
            candidate = getattr(namespace, name, None)
            if candidate is None:
                continue
            try:
                with _FirstOperator():
                    candidate(*meta_args, **meta_kwargs)
            except _Dispatched as d:
                if d.func is op:
                    found = candidate
                    break
            except Exception:  # noqa: BLE001 - a candidate that does not take these arguments is not one
                continue
    with _lock:
        _found[key] = found
    return found
