"""Guided backprop's ReLU rule, against its definition [x > 0] max(g, 0)."""
import pytest
import torch
from torch import nn

from lrp_lib.teach.guided import guided_relu, guided_relu_hooks


def test_guided_relu_passes_only_positive_gradient_through_active_units():
    x = torch.tensor([-1.0, 0.0, 2.0, 3.0], dtype=torch.float64, requires_grad=True)
    g = torch.tensor([5.0, 5.0, -4.0, 7.0], dtype=torch.float64)
    y = guided_relu(x)
    torch.testing.assert_close(y, x.detach().clamp(min=0))
    (dx,) = torch.autograd.grad(y, x, g)
    assert dx.tolist() == [0.0, 0.0, 0.0, 7.0]


@pytest.mark.parametrize("inplace", [False, True])
def test_hooks_apply_the_rule_keep_the_values_and_go_away(inplace):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 6), nn.ReLU(inplace=inplace), nn.Linear(6, 2)).double()
    x = torch.randn(3, 4, dtype=torch.float64)
    plain = model(x)
    leaf = x.clone().requires_grad_(True)
    with guided_relu_hooks([(model[1], None)]):
        out = model(leaf)
    torch.testing.assert_close(out, plain)
    out[:, 0].sum().backward()
    z = x @ model[0].weight.T + model[0].bias
    ref = ((z > 0) * model[2].weight[0].expand(3, 6).clamp(min=0)) @ model[0].weight
    torch.testing.assert_close(leaf.grad, ref.detach())
    assert not model[1]._forward_hooks
