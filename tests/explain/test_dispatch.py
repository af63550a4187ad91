"""The fast dispatch of :class:`~lrp_lib.explain.mode.function_mode.RelevanceMode`, the interception (routes decided once per
function, :mod:`lrp_lib.explain.mode.dispatch`) against its reference dispatch (``fast=False``: the
function's name tested against each table on every call): the same decisions for every function
name, and bitwise the same relevance for every model of the coverage zoo
(``benchmarks/bench_coverage.py``) that LRPExplainer explains, the same error for every model it
refuses.  Bitwise (``torch.equal``): both dispatches call the same rules on the same tensors
in the same order, so nothing may differ, not even rounding."""
import sys
import warnings
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from lrp_lib.core.rules import Epsilon
from lrp_lib.explain.mode import dispatch
from lrp_lib.explain.mode.dispatch import HANDLERS, classify, route_of
from lrp_lib.explain.explainer import Explainer, LRPExplainer
from lrp_lib.explain.mode.forward import ForwardMode
from lrp_lib.explain.mode.op_tables import (AUGMENTED, COPY_INPLACE, DETACH, DROPOUT, GATES, HEADS, IDENTITY, PASS,
                                       PLAIN, SIGN_FLIPS)

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import bench_coverage as bc  # noqa: E402


class _Named:
    """A stand-in function with a given name (routes depend on the name only)."""

    def __init__(self, name):
        self.__name__ = name

    def __call__(self, *args, **kwargs):
        return None


def _reference_kind(name: str) -> int:
    """The kind the reference dispatch gives ``name``: its chain of table tests, written out."""
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


def test_fast_must_be_a_bool():
    with pytest.raises(TypeError, match="fast"):
        ForwardMode("epsilon", None, fast="yes")
    with pytest.raises(TypeError, match="fast"):
        LRPExplainer(fast=1)


# ------------------------------------------------------------------ the zoo, both dispatches
ZOO = [(spec, level, ea) for spec in bc.ALL if not spec.skip for level, ea in bc.cases(spec)]


def _explain(model, inputs, level, fast, rule):
    explainer = Explainer(model, algorithm=LRPExplainer(rule=rule, mask="relevance", fast=fast),
                          explanation_type="model", node_mask_type="attributes", edge_mask_type="object",
                          model_config=dict(mode="regression", task_level=level, return_type="raw"))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            out = explainer(inputs["x"], inputs["edge_index"], index=None if level == "graph" else bc.NODE,
                            **bc._kwargs(inputs))
        except Exception as e:  # noqa: BLE001 - both dispatches must fail alike
            out = e
    return out, sorted(str(w.message) for w in caught)


def _tensors(explanation) -> dict:
    stores = explanation.node_stores + explanation.edge_stores if hasattr(explanation, "node_stores") else []
    found = {}
    for i, store in enumerate([explanation] + list(stores)):
        for key in store.keys():
            value = store[key]
            if isinstance(value, torch.Tensor):
                found[(i, key)] = value
    return found


@pytest.mark.parametrize("spec,level,edge_attr", ZOO, ids=[f"{s.name}|{lv}|{ea}" for s, lv, ea in ZOO])
def test_fast_dispatch_gives_the_reference_relevance_on_the_zoo(spec, level, edge_attr):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            model, inputs = bc.build_case(spec, level, edge_attr)
            bc.reference(model, inputs, level)
        except Exception:  # noqa: BLE001 - the unmodified model fails: the zoo skips it too
            pytest.skip("the unmodified model fails on the generic inputs")
    for rule in (Epsilon(0.0), "zplus"):
        fast, fast_warnings = _explain(model, inputs, level, True, rule)
        ref, ref_warnings = _explain(model, inputs, level, False, rule)
        assert fast_warnings == ref_warnings
        if isinstance(ref, Exception):
            assert type(fast) is type(ref) and str(fast) == str(ref)
            continue
        assert not isinstance(fast, Exception), fast
        a, b = _tensors(fast), _tensors(ref)
        assert a.keys() == b.keys()
        for key in a:
            assert torch.equal(a[key], b[key]), (rule, key)
        assert getattr(fast, "explained_output", None) == getattr(ref, "explained_output", None)
