"""The backward form of the rules: ``LinearMap`` (the map and its vector-Jacobian product against autograd's, the
scale of a map without weights, the product with the input written in place only where that is safe), and a
rule without a backward form refused.  Each rule's backward form against its forward form: tests/core/test_modify.py."""
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings, strategies as st

from lrp_lib.core.rules import Rule
from lrp_lib.teach.backward_rules import LinearMap, propagate


def _autograd_vjp(fn, v, x):
    leaf = x.detach().requires_grad_(True)
    (g,) = torch.autograd.grad(fn(leaf), leaf, v)
    return g


@settings(max_examples=25, deadline=None)
@given(n=st.integers(1, 6), d_in=st.integers(1, 5), d_out=st.integers(1, 5), seed=st.integers(0, 2**16))
def test_the_vjp_of_a_linear_map_is_the_transposed_jacobian(n, d_in, d_out, seed):
    g = torch.Generator().manual_seed(seed)
    x, w = torch.randn(n, d_in, generator=g, dtype=torch.float64), torch.randn(d_out, d_in, generator=g, dtype=torch.float64)
    b, v = torch.randn(d_out, generator=g, dtype=torch.float64), torch.randn(n, d_out, generator=g, dtype=torch.float64)
    for m in (LinearMap(F.linear), LinearMap(F.linear, lambda v, x, w: v @ w)):
        torch.testing.assert_close(m(x, w, b), x @ w.T + b, rtol=0, atol=1e-12)
        torch.testing.assert_close(m.vjp(v, x, w), v @ w, rtol=0, atol=1e-12)  # J^T v, the bias left out


def test_a_convolution_map_takes_autograds_vjp_where_none_is_given():
    g = torch.Generator().manual_seed(0)
    x, w, v = torch.randn(2, 3, 7, generator=g), torch.randn(4, 3, 3, generator=g), torch.randn(2, 4, 5, generator=g)
    m = LinearMap(F.conv1d)
    torch.testing.assert_close(m.vjp(v, x, w), _autograd_vjp(lambda t: F.conv1d(t, w), v, x))


def test_a_map_without_weights_is_scaled_by_its_weight():
    x, v = torch.arange(8.0).reshape(1, 1, 8), torch.ones(1, 1, 4)
    m = LinearMap(lambda t: F.avg_pool1d(t, 2), has_weight=False)
    torch.testing.assert_close(m(x, 1.0, None), F.avg_pool1d(x, 2))
    torch.testing.assert_close(m(x, 3.0, torch.tensor(1.0)), 3 * F.avg_pool1d(x, 2) + 1)
    torch.testing.assert_close(m.vjp(v, x, 3.0), 3 * torch.full((1, 1, 8), 0.5))


@pytest.mark.parametrize("fresh", [True, False])
def test_the_input_is_multiplied_into_the_vjp_in_place_only_for_a_fresh_vjp(fresh):
    x, g = torch.tensor([[1.0, -2.0]]), torch.tensor([[3.0, 4.0]])
    m = LinearMap(F.linear, lambda v, x, w: v @ w, fresh_vjp=fresh)
    out = m.times_input(x, g)
    assert out.tolist() == [[3.0, -8.0]]
    assert (out is g) == fresh and g.tolist() == ([[3.0, -8.0]] if fresh else [[3.0, 4.0]])
    # without a VJP of its own (autograd's), a map never writes in place; nor for another shape
    assert not LinearMap(F.linear, fresh_vjp=True).fresh_vjp
    wide = torch.ones(2, 2)
    assert m.times_input(x, wide) is not wide


def test_a_rule_without_a_backward_form_is_refused_with_its_name():
    class Halve(Rule):
        def modify(self, m, x, weight, bias, out, nonneg=False):
            return out

    x, w = torch.ones(1, 2), torch.ones(1, 2)
    with pytest.raises(NotImplementedError, match="Halve has no backward form"):
        propagate(Halve(), LinearMap(F.linear), x, w, None, F.linear(x, w), torch.ones(1, 1), "test")
