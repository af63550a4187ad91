"""The routes of :class:`~lrp_lib.explain.mode.function_mode.RelevanceMode`, the interception (decided once per
function, :mod:`lrp_lib.explain.mode.dispatch`): for every function name, the decision of the tables' chain
written out here (:func:`_reference_kind`), with its flags and handler."""
import torch
import torch.nn.functional as F
import pytest

from lrp_lib.explain.mode import dispatch
from lrp_lib.explain.mode.dispatch import HANDLERS, classify, route_of
from lrp_lib.explain.mode.op_tables import (AUGMENTED, COPY_INPLACE, DETACH, DROPOUT, GATES, HEADS, IDENTITY, PASS,
                                            PLAIN, SIGN_FLIPS)


class _Named:
    """A stand-in function with a given name (routes depend on the name only)."""

    def __init__(self, name):
        self.__name__ = name

    def __call__(self, *args, **kwargs):
        return None


def _reference_kind(name: str) -> int:
    """The kind ``name`` gets from the chain of table tests, written out."""
    if name in PLAIN:
        return dispatch.PLAIN_ROUTE
    if name in DETACH:
        return dispatch.DETACH_ROUTE
    if name in DROPOUT:
        return dispatch.DROPOUT_ROUTE
    if name in PASS:
        return dispatch.PASS_ROUTE
    if name in COPY_INPLACE:
        return dispatch.COPY_ROUTE
    if (name.endswith("_") and not name.startswith("__")) or name in AUGMENTED:
        return dispatch.INPLACE_ROUTE
    if name in HANDLERS:
        return dispatch.HANDLER_ROUTE
    return dispatch.IDENTITY_ROUTE if name in IDENTITY else dispatch.BLOCKED_ROUTE


NAMES = sorted(PLAIN | DETACH | DROPOUT | PASS | COPY_INPLACE | IDENTITY | set(HANDLERS) | set(AUGMENTED)
               | {n + "_" for n in IDENTITY} | {"erfinv", "frobenius_norm", "__iadd__", "foo_"})


@pytest.mark.parametrize("name", NAMES)
def test_route_of_each_name_is_the_reference_decision(name):
    route = classify(_Named(name))
    assert route.kind == _reference_kind(name)
    assert route.name == name
    assert route.gate == (name in GATES) and route.sign_flip == (name in SIGN_FLIPS) and route.head == (name in HEADS)
    if route.kind == dispatch.HANDLER_ROUTE:
        assert route.handler is HANDLERS[name]
    if route.kind == dispatch.COPY_ROUTE:  # with reduce= or accumulate=: what the name is otherwise
        rest = dispatch.INPLACE_ROUTE if name.endswith("_") and not name.startswith("__") else (
            dispatch.HANDLER_ROUTE if name in HANDLERS else
            dispatch.IDENTITY_ROUTE if name in IDENTITY else dispatch.BLOCKED_ROUTE)
        assert route.fallback == rest


def test_metadata_getters_are_plain_and_tensor_getters_are_not():
    for attr in ("layout", "device", "dtype", "shape", "grad_fn", "requires_grad", "is_sparse", "ndim"):
        assert route_of(getattr(torch.Tensor, attr).__get__).kind == dispatch.PLAIN_ROUTE, attr
    for attr in ("data", "grad", "T", "mT", "real"):
        assert route_of(getattr(torch.Tensor, attr).__get__).kind == dispatch.GET_ROUTE, attr


def test_routes_are_kept_per_function_and_unhashable_functions_still_route():
    assert route_of(F.linear) is route_of(F.linear)
    assert route_of(F.linear).handler is HANDLERS["linear"]

    class Unhashable(_Named):
        __hash__ = None
    assert route_of(Unhashable("relu")).kind == dispatch.IDENTITY_ROUTE


def _function_names() -> set:
    """The ``__name__`` of every function of torch, ``torch.Tensor``, ``torch.nn.functional`` and the submodules that
    hold tensor functions: the names a torch function mode sees."""
    import torch.fft
    import torch.linalg
    import torch.special
    names = set()
    for space in (torch, torch.Tensor, F, torch.special, torch.linalg, torch.fft, torch.sparse):
        for attr in dir(space):
            name = getattr(getattr(space, attr, None), "__name__", None)
            if isinstance(name, str):
                names.add(name)
    return names


def test_every_name_in_the_tables_is_a_function_name():
    """A table entry routes a function by its ``__name__``, which is not always the attribute it is reached by
    (``Tensor.__rtruediv__`` is named ``__rdiv__``, ``F.logsigmoid`` ``log_sigmoid``, ``Tensor.__neg__`` ``neg``):
    an entry that no function has as its name routes nothing, and the function it was meant for is refused."""
    from lrp_lib.core.modify import HOMOGENEOUS
    from lrp_lib.explain.mode.forward import NONNEGATIVE
    tables = {"PLAIN": PLAIN, "DETACH": DETACH, "PASS": PASS, "IDENTITY": IDENTITY, "DROPOUT": DROPOUT,
              "COPY_INPLACE": COPY_INPLACE, "GATES": GATES, "SIGN_FLIPS": SIGN_FLIPS, "HEADS": HEADS,
              "AUGMENTED": set(AUGMENTED), "HANDLERS": set(HANDLERS), "HOMOGENEOUS": HOMOGENEOUS,
              "NONNEGATIVE": NONNEGATIVE}
    names = _function_names()
    unknown = {table: sorted(set(entries) - names) for table, entries in tables.items() if set(entries) - names}
    assert not unknown
