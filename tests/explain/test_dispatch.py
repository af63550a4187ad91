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
