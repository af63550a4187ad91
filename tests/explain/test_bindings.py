"""lrp_lib.explain.bindings: a C binding is taken for an operator only where it calls that operator."""
from __future__ import annotations

import torch
from hypothesis import given, settings, strategies as st
from torch.utils._python_dispatch import TorchDispatchMode

from lrp_lib.explain import bindings
from lrp_lib.explain.bindings import binding

A = torch.ops.aten


class _Calls(TorchDispatchMode):
    """Writes down each operator called (and runs it)."""

    def __init__(self):
        super().__init__()
        self.ops = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.append(func)
        return func(*args, **(kwargs or {}))


def _cases():
    g = torch.Generator().manual_seed(0)
    x, w = torch.randn(6, 4, generator=g), torch.randn(4, 3, generator=g)
    i = torch.tensor([0, 2, 2, 5])
    cpu = torch.device("cpu")
    return [
        (A.mm.default, (x, w), {}),
        (A.addmm.default, (torch.randn(3, generator=g), x, w), {}),
        (A.div.Tensor, (x, 3), {}),
        (A.div.out, (x, x + 1), {"out": torch.empty(6, 4)}),
        (A.sum.default, (x,), {}),
        (A.sum.dim_IntList, (x, [-2], True), {}),
        (A.aminmax.default, (x,), {}),
        (A.stack.default, ([x[0, 0], x[1, 1], x[2, 2]],), {}),
        (A.new_zeros.default, (x, [3, 4]), {"pin_memory": False}),
        (A.mul_.Tensor, (x.clone(), x), {}),
        (A.index_add_.default, (torch.zeros(6, 4), -2, i, x[:4]), {}),
        (A.scatter_add.default, (torch.zeros(6, 4), 0, i.view(-1, 1).expand(4, 4), x[:4]), {}),
        (A.gather.default, (x, 0, i.view(-1, 1).expand(4, 4)), {}),
        (A.index_select.default, (x, -2, i), {}),
        (A.arange.start, (0, 7), {"device": cpu, "pin_memory": False}),
        (A.ones.default, ([5],), {"dtype": torch.float32, "device": cpu, "pin_memory": False}),
        (A.view.default, (x, [-1]), {}),
        (A.repeat.default, (x, [2, 1]), {}),
        (A.copysign.Tensor, (x, -x), {}),
        (A.eq.Scalar, (x, float("inf")), {}),
        (A.where.self, (x > 0, x, -x), {}),
        (A.masked_fill_.Scalar, (x.clone(), x > 0, 0), {}),
        (A.pow_.Scalar, (x.abs(), -0.5), {}),
        (A.relu.default, (x,), {}),
        (A.equal.default, (x, x.clone()), {}),
    ]


def _same(a, b):
    if isinstance(a, torch.Tensor):
        return a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)
    if isinstance(a, (tuple, list)):
        return len(a) == len(b) and all(_same(p, q) for p, q in zip(a, b))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


def _copy(a):
    if isinstance(a, torch.Tensor):
        return a.clone()
    if isinstance(a, (list, tuple)):
        return type(a)(_copy(b) for b in a)
    return a


def test_each_binding_calls_the_operator_alone_and_gives_its_result():
    for op, args, kwargs in _cases():
        b = binding(op, args, kwargs)
        assert b is not None, op
        a1, k1 = _copy(args), {k: _copy(v) for k, v in kwargs.items()}
        a2, k2 = _copy(args), {k: _copy(v) for k, v in kwargs.items()}
        with _Calls() as calls:
            got = b(*a1, **k1)
        assert calls.ops == [op], (op, calls.ops)
        want = op(*a2, **k2)
        assert _same(got, want), op
        assert _same(a1, a2) and _same(k1, k2), op  # in-place operations wrote the same


def test_a_binding_that_calls_another_overload_is_refused():
    x = torch.randn(3, 2)
    assert binding(A.div.Tensor, (x, 2), {}) is not None
    assert binding(A.div.Scalar, (x, 2), {}) is None  # torch.div(x, 2) calls div.Tensor
    assert binding(A.sum.dim_IntList, (x, [0]), {}) is not None
    # an operator without a binding of its name (indexing goes through Tensor.__getitem__)
    assert binding(A.index.Tensor, (x, [torch.tensor([0, 2])]), {}) is None


def test_finding_a_binding_runs_nothing_on_the_data(monkeypatch):
    monkeypatch.setattr(bindings, "_found", {})  # (asked afresh)
    x = torch.randn(4, 3)
    before, version = x.clone(), x._version
    with _Calls() as calls:
        assert binding(A.mul_.Tensor, (x, torch.full((4, 3), 2.0)), {}) is not None
        assert binding(A.masked_fill_.Scalar, (x, x > 0, 0.0), {}) is not None
    assert torch.equal(x, before) and x._version == version
    # what reached the dispatcher: the arguments made here, and their meta copies; not the operators tried
    assert set(calls.ops) == {A.gt.Scalar, A.full.default, A._to_copy.default}, calls.ops


def test_the_answer_is_kept_per_kinds_of_arguments(monkeypatch):
    found = {}
    monkeypatch.setattr(bindings, "_found", found)
    x = torch.randn(3, 3)
    assert binding(A.mm.default, (x, x), {}) is not None
    assert binding(A.mm.default, (torch.randn(5, 2), torch.randn(2, 7)), {}) is not None
    assert len(found) == 1  # the same kinds of arguments: asked once
    binding(A.div.Tensor, (x, 2), {})
    binding(A.div.Tensor, (x, x), {})
    assert len(found) == 3  # a number and a tensor are different kinds


@settings(max_examples=40, deadline=None)
@given(rows=st.integers(1, 9), cols=st.integers(1, 9), which=st.integers(0, 24), seed=st.integers(0, 2 ** 16))
def test_bindings_give_the_operators_results_on_any_shape(rows, cols, which, seed):
    g = torch.Generator().manual_seed(seed)
    x, y = torch.randn(rows, cols, generator=g), torch.randn(rows, cols, generator=g)
    ops = [(A.add.Tensor, (x, y)), (A.mul.Tensor, (x, y)), (A.div.Tensor, (x, y)), (A.sub.Tensor, (x, y)),
           (A.copysign.Tensor, (x, y)), (A.maximum.default, (x, y)), (A.clamp_min.default, (x, 0.0)),
           (A.sum.dim_IntList, (x, [0], True)), (A.sum.dim_IntList, (x, [-1])), (A.abs.default, (x,)),
           (A.sign.default, (x,)), (A.relu.default, (x,)), (A.exp.default, (x,)), (A.mm.default, (x, y.t())),
           (A.t.default, (x,)), (A.clone.default, (x,)), (A.neg.default, (x,)), (A.amax.default, (x, [0])),
           (A.aminmax.default, (x,)), (A.cat.default, ([x, y], 1)), (A.stack.default, ([x, y],)),
           (A.eq.Tensor, (x, y)), (A.ne.Scalar, (x, 0)), (A.where.self, (x > y, x, y)), (A.zeros_like.default, (x,))]
    op, args = ops[which]
    b = binding(op, args, {})
    assert b is not None, op
    assert _same(b(*args), op(*args))
