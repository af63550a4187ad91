"""The handlers of :mod:`lrp_lib.explain.mode.handlers`, one branch at a time, through
:func:`~lrp_lib.explain.tensors.explain_tensor` on a one-operation model: each result against the rule's value
written out for that operation (a share of a sum, the identity, the winner of a max), or against the same map in
its usual form; and each operation without a rule refused by its name and the relevance that reached it."""
import re

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from lrp_lib.explain.accounting import LostRelevanceWarning
from lrp_lib.explain.mode.function_mode import UnsupportedModelError
from lrp_lib.explain.tensors import explain_tensor

N, FEATURES, CLASSES = 5, 4, 3


class Op(nn.Module):
    """A model computing ``fn(self, x)``, with the given tensors as its parameters (the weights the rules see)."""

    def __init__(self, fn, **tensors):
        super().__init__()
        for name, t in tensors.items():
            self.register_parameter(name, nn.Parameter(t))
        self.fn = fn

    def forward(self, x):
        return self.fn(self, x)


@pytest.fixture
def data():
    g = torch.Generator().manual_seed(0)
    return lambda *shape, low=-1.0: torch.rand(*shape, generator=g, dtype=torch.float64) * (1.0 - low) + low


@pytest.mark.parametrize("rule", ["z", "zplus", "epsilon"])
def test_a_weight_on_the_left_of_a_matmul_gets_the_rule_of_a_linear_layer(rule, data):
    """``W @ x`` with the input on the right: the same relevance as ``F.linear(x, W)``, which a wrong orientation
    (the input taken for the weight) would not give."""
    w, x = data(CLASSES, FEATURES), data(N, FEATURES, low=0.0)
    left = explain_tensor(Op(lambda m, t: (m.w @ t.T).T, w=w), x, target=1, rule=rule)
    linear = explain_tensor(Op(lambda m, t: F.linear(t, m.w), w=w), x, target=1, rule=rule)
    torch.testing.assert_close(left.relevance, linear.relevance, rtol=1e-12, atol=1e-14)
    assert float(left.relevance.abs().sum()) > 0


def _columns(x: torch.Tensor, c: int) -> torch.Tensor:
    """``x`` in column ``c``, 0 elsewhere: the relevance of a marked term of a sum under LRP-0 when column ``c``'s
    output is explained (its share of the sum times the sum)."""
    out = torch.zeros_like(x)
    out[:, c] = x[:, c]
    return out


def test_addmm_of_two_constants_is_a_bias_of_the_input(data):
    """``addmm(x, A, B)`` with constant matrices: ``x`` plus a constant, so under LRP-0 ``x`` keeps its own value
    and the constant ``A @ B`` keeps its share, reported as bias relevance."""
    x, a, b = data(N, CLASSES), data(N, 2), data(2, CLASSES)
    r = explain_tensor(Op(lambda m, t: torch.addmm(t, m.a, m.b), a=a, b=b), x, target=2, rule="z")
    torch.testing.assert_close(r.relevance, _columns(x, 2), rtol=1e-12, atol=1e-14)
    assert r.bias_relevance == pytest.approx(float((a @ b)[:, 2].sum()), rel=1e-12)
    assert abs(r.relevance_residual) < 1e-12


def test_index_add_of_a_constant_into_the_input_is_a_bias(data):
    """``x.index_add(0, index, C)``: ``x`` plus a constant added at ``index``."""
    x, c = data(N, CLASSES), data(2, CLASSES)
    index = torch.tensor([3, 0])
    r = explain_tensor(Op(lambda m, t: t.index_add(0, index, m.c), c=c), x, target=0, rule="z")
    torch.testing.assert_close(r.relevance, _columns(x, 0), rtol=1e-12, atol=1e-14)
    assert r.bias_relevance == pytest.approx(float(c[:, 0].sum()), rel=1e-12)


@pytest.mark.parametrize("reduce", ["sum", "mean"])
def test_scatter_reduce_of_the_input_into_a_constant(reduce, data):
    """``base.scatter_reduce(0, index, x, reduce, include_self=True)``: a sum (or mean) of the rows of ``x`` sent to
    each output row and the constant ``base``; under LRP-0 each row of ``x`` gets its part, divided by the mean's
    count, and ``base`` keeps the rest."""
    x, base = data(N, CLASSES), data(N, CLASSES)
    rows = torch.tensor([1, 1, 4, 0, 1])
    index = rows.view(-1, 1).expand(N, CLASSES)
    r = explain_tensor(Op(lambda m, t: m.base.scatter_reduce(0, index, t, reduce, include_self=True), base=base),
                       x, target=1, rule="z")
    count = 1.0 + torch.bincount(rows, minlength=N).to(x.dtype)  # (the base's own entry counted)
    share = 1.0 if reduce == "sum" else 1.0 / count[rows].view(-1, 1)
    torch.testing.assert_close(r.relevance, _columns(x * share, 1), rtol=1e-12, atol=1e-14)
    out = r.output[:, 1]
    assert r.bias_relevance == pytest.approx(float(out.sum() - (x[:, 1:2] * share).sum()), rel=1e-10)


@pytest.mark.parametrize("fn", [lambda m, t: 1.0 / t, lambda m, t: m.c / t, lambda m, t: torch.div(m.c, t),
                                lambda m, t: torch.true_divide(m.c, t), lambda m, t: t / m.c],
                         ids=["number / x", "c / x", "div(c, x)", "true_divide(c, x)", "x / c"])
def test_a_quotient_with_one_input_dependent_side_passes_its_relevance_on(fn, data):
    """A constant divided by ``x`` (``1 / x`` calls ``Tensor.__rtruediv__``, whose name is ``__rdiv__``) or ``x``
    divided by a constant: an elementwise function of ``x``, the identity rule, each entry keeping its output's
    relevance.  (Input times the plain gradient would give ``c / x`` the opposite sign.)"""
    x, c = data(N, CLASSES, low=0.5), data(N, CLASSES, low=0.5)
    model = Op(fn, c=c)
    r = explain_tensor(model, x, target=2, rule="z")
    with torch.no_grad():
        y = model(x)
    torch.testing.assert_close(r.relevance, _columns(y, 2), rtol=1e-12, atol=1e-14)
    assert abs(r.relevance_residual) < 1e-12


def test_log_sigmoid_gets_the_identity_rule(data):
    """``F.logsigmoid`` (``nn.LogSigmoid``), whose function is named ``log_sigmoid``: each entry keeps its output's
    relevance."""
    x = data(N, CLASSES)
    r = explain_tensor(nn.LogSigmoid(), x, target=1, rule="z")
    torch.testing.assert_close(r.relevance, _columns(F.logsigmoid(x), 1), rtol=1e-12, atol=1e-14)


def test_max_of_the_input_and_a_constant_goes_to_the_winner(data):
    """``torch.max(x, y)`` elementwise with a constant ``y``: the winner takes all, so ``x`` gets its value where it
    wins and the entries ``y`` wins are lost (the residual, reported by a LostRelevanceWarning with its amount)."""
    x, y = data(N, CLASSES), data(N, CLASSES)
    lost = float(torch.where(x > y, 0.0, y)[:, 0].sum())
    with pytest.warns(LostRelevanceWarning, match=rf"relevance {lost:.4g} "):
        r = explain_tensor(Op(lambda m, t: torch.max(t, m.y), y=y), x, target=0, rule="z")
    torch.testing.assert_close(r.relevance, _columns(torch.where(x > y, x, 0.0), 0), rtol=1e-12, atol=1e-14)
    assert r.relevance_residual == pytest.approx(lost, rel=1e-12)


def test_max_over_every_entry_goes_to_the_largest(data):
    """``torch.max(x)`` (no dim): the output is the largest entry, whose relevance is all of it."""
    x = data(N, CLASSES)
    r = explain_tensor(Op(lambda m, t: torch.max(t)), x, rule="z")
    want = torch.zeros_like(x).flatten()
    want[x.argmax()] = x.max()
    torch.testing.assert_close(r.relevance, want.view_as(x), rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("fn,label", [
    (lambda m, t: F.linear(t, t[:CLASSES]), "linear with an input-dependent weight"),
    (lambda m, t: torch.addmm(m.b, t, t.T), "addmm of two input-dependent matrices"),
    (lambda m, t: torch.einsum("ij,kj->ik", t, t), "einsum of several input-dependent operands"),
    (lambda m, t: torch.div(t, 0.3, rounding_mode="floor"), "div with rounding_mode"),
    (lambda m, t: torch.prod(t, 1, dtype=torch.float64).unsqueeze(1) * t, "prod with dtype"),
    (lambda m, t: t.scatter_reduce(0, torch.zeros_like(t, dtype=torch.long), t, "sum"), "scatter_reduce (sum)"),
    (lambda m, t: torch.batch_norm(t, None, None, None, None, True, 0.1, 1e-5, False), "torch.batch_norm"),
    (lambda m, t: F.softmax(t, dim=None), "softmax without dim"),
], ids=["linear", "addmm", "einsum", "div", "prod", "scatter_reduce", "batch_norm", "softmax"])
@pytest.mark.filterwarnings("ignore:Implicit dimension choice for softmax")
def test_an_operation_without_a_rule_is_refused_by_name_with_its_amount(fn, label, data):
    """What a handler blocks is refused where relevance reaches it, named, with the amount that reached it."""
    model = Op(fn, b=data(N, N))
    with pytest.raises(UnsupportedModelError, match=re.escape(label) + r".*relevance of magnitude \d"):
        explain_tensor(model, data(N, N, low=0.2), target=0, rule="z")
