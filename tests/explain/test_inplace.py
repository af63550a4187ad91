"""The calls the relevance mode does not send to a rule (:class:`lrp_lib.explain.mode.function_mode.RelevanceMode`): in-place
operations give the relevance of their out-of-place versions; dropout in training mode is refused, in eval mode it passes relevance through; a
``.data`` read stops relevance and is reported."""
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings, strategies as st
from torch import nn

from lrp_lib.explain.mode.forward import ForwardMode
from lrp_lib.explain.mode.function_mode import UnsupportedModelError


class Net(nn.Module):
    """Linear -> ReLU -> (+ skip) -> Linear, the ReLU and the skip written out of place or in place."""

    def __init__(self, style: str, width: int = 5, seed: int = 0, dropout: float = 0.0):
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.a, self.b = nn.Linear(width, width), nn.Linear(width, 2)
        for p in self.parameters():
            p.data = torch.randn(p.shape, generator=g, dtype=torch.float64)
        self.style, self.p = style, dropout

    def forward(self, x):
        z = self.a(x)
        if self.style == "outofplace":
            h = F.relu(z) + x
        else:  # in place on a copy of the linear map's output
            h = z.relu_()
            h += x
            h.mul_(1.0)
        h = F.dropout(h, self.p, self.training)
        return self.b(h)


def relevance(model, x, composite="z"):
    leaf = x.detach().clone().requires_grad_(True)
    with ForwardMode(composite, model) as mode:
        mode.mark(leaf)
        out = model(leaf)
    (rel,) = mode.tally.backward(out, [leaf], out.detach())
    return out, rel, mode


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 2**16), rows=st.integers(1, 6), composite=st.sampled_from(["z", "epsilon", "gamma"]))
def test_in_place_operations_give_the_relevance_of_their_out_of_place_versions(seed, rows, composite):
    x = torch.randn(rows, 5, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    out_a, rel_a, _ = relevance(Net("outofplace", seed=seed).eval(), x, composite)
    out_b, rel_b, _ = relevance(Net("inplace", seed=seed).eval(), x, composite)
    torch.testing.assert_close(out_b, out_a, rtol=0, atol=1e-12)
    torch.testing.assert_close(rel_b, rel_a, rtol=0, atol=1e-12)
    # and not the gradient: the skip splits relevance in proportion (x * grad would count x twice)
    leaf = x.clone().requires_grad_(True)
    model = Net("outofplace", seed=seed).eval()
    out = model(leaf)
    (grad,) = torch.autograd.grad(out, leaf, out.detach())
    assert not torch.allclose(leaf.detach() * grad, rel_a)


def test_dropout_in_training_mode_is_refused_and_in_eval_mode_passes_relevance():
    x = torch.randn(3, 5, dtype=torch.float64)
    with pytest.raises(UnsupportedModelError, match=r"dropout in training mode .*model.eval\(\)"):
        relevance(Net("outofplace", dropout=0.5).train(), x)
    out_a, rel_a, _ = relevance(Net("outofplace", dropout=0.5).eval(), x)
    out_b, rel_b, _ = relevance(Net("outofplace").eval(), x)
    assert torch.equal(rel_a, rel_b) and torch.equal(out_a, out_b)


def test_an_in_place_operation_without_a_rule_is_refused_naming_it():
    class Sorts(nn.Module):
        def forward(self, x):
            h = x * 2
            h.frac_()  # no relevance rule for the fractional part, written in place
            return h

    with pytest.raises(UnsupportedModelError, match="frac_"):
        relevance(Sorts(), torch.randn(2, 3))


def test_a_data_read_stops_relevance_and_is_reported():
    class Data(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(3, 2)

        def forward(self, x):
            h = self.lin(x)
            return h.data * 2 + h  # half of each output behind .data

    torch.manual_seed(0)
    _, _, mode = relevance(Data(), torch.rand(4, 3))
    assert any(".data" in d for d in mode.detached)
