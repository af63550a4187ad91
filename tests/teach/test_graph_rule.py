"""lrp_lib.teach.graph_rule: the terms of a Graph Network layer and its fused epsilon rule, by hand."""
import pytest
import torch

from lrp_lib.teach.graph_rule import ComposedOps, GradientOps, GraphLinearRelevance, Group, sum_terms, term

D = torch.float64


def test_terms_route_rows_by_hand():
    a = torch.tensor([[1.0], [2.0], [4.0]], dtype=D)
    w = torch.tensor([[3.0]], dtype=D)
    index = torch.tensor([2, 0])
    assert term(GradientOps, Group("self", a, w, None), 3, None, 0.0).view(-1).tolist() == [3.0, 6.0, 12.0]
    assert term(GradientOps, Group("gather", a, w, index), 2, None, 0.0).view(-1).tolist() == [12.0, 3.0]
    agg = Group("agg", a, w, torch.tensor([1, 1, 0]))
    assert term(GradientOps, agg, 2, "sum", 0.0).view(-1).tolist() == [12.0, 9.0]
    assert term(GradientOps, agg, 2, "mean", 0.0).view(-1).tolist() == [12.0, 4.5]
    assert term(GradientOps, agg, 2, "max", 0.0).view(-1).tolist() == [12.0, 6.0]
    total = sum_terms(GradientOps, [Group("self", a[:2], w, None), Group("gather", a, w, index)],
                      torch.tensor([1.0], dtype=D), 2, None, 0.0)
    assert total.view(-1).tolist() == [3 + 12 + 1.0, 6 + 3 + 1.0]


@pytest.mark.parametrize("aggregation", ["sum", "mean", "max"])
def test_fused_rule_by_hand(aggregation):
    # one output row aggregating three edges (values 1, 2, 4) plus the node itself (value 1), weights 1
    e = torch.tensor([[1.0], [2.0], [4.0]], dtype=D, requires_grad=True)
    x = torch.tensor([[1.0]], dtype=D, requires_grad=True)
    w = torch.ones(1, 1, dtype=D)
    spec = ("L", 0.0, 1, aggregation, ("self", "agg"))
    z = GraphLinearRelevance.apply(spec, None, x, w, None, e, w, torch.zeros(3, dtype=torch.long))
    agg = {"sum": 7.0, "mean": 7.0 / 3, "max": 4.0}[aggregation]
    assert float(z) == pytest.approx(1.0 + agg)
    z.backward(torch.tensor([[10.0]], dtype=D))
    s = 10.0 / (1.0 + agg)  # R / z: each contribution gets its share
    assert float(x.grad) == pytest.approx(1.0 * s)
    expected = {"sum": [1 * s, 2 * s, 4 * s], "mean": [s / 3, 2 * s / 3, 4 * s / 3], "max": [0, 0, 4 * s]}
    assert e.grad.view(-1).tolist() == pytest.approx(expected[aggregation])
    assert float(x.grad) + float(e.grad.sum()) == pytest.approx(10.0)  # conserved without a bias


def test_fused_equals_composed_ops_on_a_random_layer():
    torch.manual_seed(0)
    a, b = torch.rand(5, 3, dtype=D), torch.rand(4, 2, dtype=D)
    w1, w2 = torch.randn(2, 3, dtype=D), torch.randn(2, 2, dtype=D)
    index = torch.tensor([0, 1, 1, 3])
    rel = torch.randn(5, 2, dtype=D)
    grads = []
    for how in ("fused", ComposedOps):
        a_, b_ = a.clone().requires_grad_(), b.clone().requires_grad_()
        groups = [Group("self", a_, w1, None), Group("agg", b_, w2, index)]
        if how == "fused":
            flat = [t for g in groups for t in (g.a, g.w, g.index)]
            out = GraphLinearRelevance.apply(("L", 0.0, 5, "sum", ("self", "agg")), None, *flat)
        else:
            out = sum_terms(how, groups, None, 5, "sum", 0.0)
        out.backward(rel)
        grads.append((a_.grad, b_.grad))
    torch.testing.assert_close(grads[0][0], grads[1][0])
    torch.testing.assert_close(grads[0][1], grads[1][1])
