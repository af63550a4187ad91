"""RelevanceMode: the generic mechanism gives the relevance of the rules' definitions on any model
built from torch operations, never patches anything, and is safe across threads."""
import threading

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given
from hypothesis import strategies as st
from torch import nn
from torch_geometric.data import Batch, Data
from torch_geometric.nn import GCNConv, global_add_pool

from lrp_lib import graph as G
from lrp_lib import ops
from lrp_lib.composites import Composite
from lrp_lib.function_mode import RelevanceMode, UnsupportedModelError
from lrp_lib.mode import relevance
from lrp_lib.rules import Epsilon, Gamma


def relevance_of(model, *inputs, composite="z", start=None):
    leaves = [t.detach().clone().requires_grad_(True) for t in inputs]
    with RelevanceMode(composite, model if isinstance(model, nn.Module) else None) as mode:
        for t in leaves:
            mode.mark(t)
        out = model(*leaves)
    grads = torch.autograd.grad(out, leaves, out.detach() if start is None else start, allow_unused=True)
    return out, grads, mode


def x_times_grad(model, *inputs):
    leaves = [t.detach().clone().requires_grad_(True) for t in inputs]
    out = model(*leaves)
    grads = torch.autograd.grad(out, leaves, torch.ones_like(out))
    return [t.detach() * g for t, g in zip(leaves, grads)]


class Residual(nn.Module):
    """x -> Linear -> ReLU -> (+ x) -> Linear -> ReLU -> sum; the residual written as ``h + x``, in
    place as ``h += x`` and with ``torch.add``."""

    def __init__(self, width=5, style="plus", seed=0):
        super().__init__()
        torch.manual_seed(seed)
        self.a = nn.Linear(width, width, bias=False)
        self.b = nn.Linear(width, 3, bias=False)
        self.style = style

    def forward(self, x):
        h = F.relu(self.a(x))
        if self.style == "plus":
            h = h + x
        elif self.style == "inplace":
            h = h.clone()  # (plain autograd needs ReLU's output unchanged)
            h += x
        else:
            h = torch.add(x, h)
        return self.b(h).relu().sum(-1)


@pytest.mark.parametrize("style", ["plus", "inplace", "torch.add"])
def test_lrp0_on_a_bias_free_residual_net_is_input_times_gradient(style):
    model = Residual(style=style).double()
    x = torch.rand(4, 5, dtype=torch.float64)
    out, (rx,), mode = relevance_of(model, x)
    torch.testing.assert_close(rx, x_times_grad(model, x)[0])
    torch.testing.assert_close(rx.sum(-1), out.detach())  # conservation per row
    assert mode.tally.total(mode.tally.absorbed) == pytest.approx(0.0, abs=1e-12)


@given(width=st.integers(1, 6), depth=st.integers(1, 3), seed=st.integers(0, 10**6), rows=st.integers(1, 4))
def test_property_lrp0_equals_input_times_gradient_on_piecewise_linear_nets(width, depth, seed, rows):
    torch.manual_seed(seed)
    layers = []
    for _ in range(depth):
        layers += [nn.Linear(width, width, bias=False), nn.ReLU()]
    model = nn.Sequential(*layers, nn.Linear(width, 1, bias=False)).double()
    x = torch.randn(rows, width, dtype=torch.float64)
    with torch.no_grad():
        if bool((model(x) == 0).any()):
            return
    out, (rx,), _ = relevance_of(model, x)
    torch.testing.assert_close(rx, x_times_grad(model, x)[0], rtol=1e-7, atol=1e-9)
    torch.testing.assert_close(rx.sum(-1), out.detach().view(-1), rtol=1e-7, atol=1e-9)


def test_a_bias_keeps_its_share_and_the_tally_says_how_much():
    torch.manual_seed(1)
    model = nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 1)).double()
    x = torch.rand(2, 4, dtype=torch.float64)
    out, (rx,), mode = relevance_of(model, x)
    absorbed = mode.tally.total(mode.tally.absorbed)
    assert abs(absorbed) > 1e-3
    assert float(rx.sum()) + absorbed == pytest.approx(float(out.sum()), rel=1e-10)
    assert any("module '0' (Linear)" in k for k in mode.tally.absorbed)


def test_the_same_relevance_as_the_ops_written_by_hand():
    """Linear -> ReLU -> Linear with Gamma on the first layer (a composite by name) equals the same
    net written with lrp_lib's relevance ops."""
    torch.manual_seed(2)
    model = nn.Sequential(nn.Linear(4, 6), nn.ReLU(), nn.Linear(6, 2)).double()
    x = torch.rand(3, 4, dtype=torch.float64)
    composite = Composite(linear=Epsilon(1e-3), rules={"0": Gamma(0.25, eps=1e-3)}, epsilon=1e-3)
    out, (rx,), _ = relevance_of(model, x, composite=composite)
    from lrp_lib import rules
    leaf = x.clone().requires_grad_(True)
    h = rules.linear(leaf, model[0].weight.detach(), model[0].bias.detach(), rule=Gamma(0.25, eps=1e-3))
    y = rules.linear(ops.relu(h), model[2].weight.detach(), model[2].bias.detach(), rule=Epsilon(1e-3))
    y.backward(y.detach())
    torch.testing.assert_close(rx, leaf.grad)


def test_the_lrp_lib_graph_layers_give_the_same_relevance_in_gradient_mode():
    """The teaching layers of lrp_lib.graph run on plain torch ops outside ``relevance()``; the generic
    mechanism explains that plain run and gets what their own relevance mode gets."""
    torch.manual_seed(3)
    model = nn.Sequential(G.EdgeLinear(4, edge_features=2, sender_features=3, bias=False, eps=0.0), G.EdgeReLU(),
                          G.NodeLinear(5, node_features=3, incoming_features=4, bias=False, eps=0.0), G.NodeReLU(),
                          G.GlobalLinear(2, node_features=5, bias=False, eps=0.0)).double()
    graphs = []
    for k in range(2):
        n = 4 + k
        ei = torch.stack([torch.arange(n), (torch.arange(n) + 1) % n])
        graphs.append(Data(x=torch.rand(n, 3, dtype=torch.float64), edge_index=ei,
                           edge_attr=torch.rand(n, 2, dtype=torch.float64)))
    batch = Batch.from_data_list(graphs)

    data = G.relevance_inputs(Data(x=batch.x, edge_index=batch.edge_index, edge_attr=batch.edge_attr, batch=batch.batch))
    with relevance():
        out = model(data)
    out.u.backward(out.u.detach())
    want_x, want_e = data.x.grad, data.edge_attr.grad

    def plain(x, edge_attr):
        return model(Data(x=x, edge_index=batch.edge_index, edge_attr=edge_attr, batch=batch.batch,
                          num_graphs=2)).u
    _, (rx, re), _ = relevance_of(plain, batch.x, batch.edge_attr)
    torch.testing.assert_close(rx, want_x)
    torch.testing.assert_close(re, want_e)


class MessageTimesTwo(GCNConv):
    """A subclass that overrides ``message``: it must be explained through its own code."""

    def message(self, x_j, edge_weight):
        return 2.0 * super().message(x_j, edge_weight)


class OneConv(nn.Module):
    def __init__(self, conv):
        super().__init__()
        self.conv = conv
        self.lin = nn.Linear(3, 1, bias=False)

    def forward(self, x, edge_index):
        return self.lin(global_add_pool(F.relu(self.conv(x, edge_index)), None))


def test_a_subclass_is_explained_through_its_own_code():
    torch.manual_seed(4)
    model = OneConv(MessageTimesTwo(4, 3, bias=False)).double()
    x = torch.rand(5, 4, dtype=torch.float64)
    ei = torch.tensor([[0, 1, 2, 3, 4, 1], [1, 2, 3, 4, 0, 0]])
    out, (rx,), _ = relevance_of(lambda t: model(t, ei), x)
    torch.testing.assert_close(rx.sum(), out.detach().sum())
    torch.testing.assert_close(rx, x_times_grad(lambda t: model(t, ei), x)[0])


def test_relevance_reaching_an_operation_without_a_rule_is_reported():
    model = lambda x: torch.special.i0(x).sum()  # noqa: E731
    x = torch.rand(3, dtype=torch.float64)
    _, (rx,), mode = relevance_of(model, x)
    assert float(rx.abs().sum()) == 0.0
    assert mode.tally.total(mode.tally.blocked) > 0
    assert "special_i0" in next(iter(mode.tally.blocked))


def test_dropout_in_training_mode_is_refused():
    model = nn.Sequential(nn.Linear(3, 2), nn.Dropout(0.5)).double().train()
    with pytest.raises(UnsupportedModelError, match="dropout in training mode"):
        relevance_of(model, torch.rand(2, 3, dtype=torch.float64))


def test_nothing_is_patched_and_other_threads_are_untouched():
    """While one thread explains inside the mode, another thread trains a model: its gradients equal
    those of the same training run alone, and explanations from four threads at once equal the
    sequential ones."""
    def train(seed, steps=20):
        torch.manual_seed(seed)
        net = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1)).double()
        opt = torch.optim.SGD(net.parameters(), lr=0.1)
        g = torch.Generator().manual_seed(seed)
        for _ in range(steps):
            x = torch.rand(16, 4, generator=g, dtype=torch.float64)
            loss = (net(x) - x.sum(-1, keepdim=True)).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
        return [p.detach().clone() for p in net.parameters()]

    alone = train(7)
    torch.manual_seed(5)
    model = Residual(seed=5).double()
    inputs = [torch.rand(6, 5, dtype=torch.float64, generator=torch.Generator().manual_seed(k)) for k in range(4)]
    sequential = [relevance_of(model, x)[1][0] for x in inputs]

    results, trained, errors = [None] * 4, [], []
    barrier = threading.Barrier(5)

    def explain(k):
        try:
            barrier.wait()
            for _ in range(5):
                results[k] = relevance_of(model, inputs[k])[1][0]
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    def trainer():
        barrier.wait()
        trained.append(train(7))

    threads = [threading.Thread(target=explain, args=(k,)) for k in range(4)] + [threading.Thread(target=trainer)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    for got, want in zip(results, sequential):
        torch.testing.assert_close(got, want, rtol=0, atol=0)
    for got, want in zip(trained[0], alone):
        torch.testing.assert_close(got, want, rtol=0, atol=0)
    # and afterwards plain autograd is plain autograd
    x = torch.rand(2, 5, dtype=torch.float64, requires_grad=True)
    assert "Relevance" not in type(model(x).grad_fn).__name__


def test_gates_pass_relevance_to_the_signal():
    """GRU-style gating, (1 - sigmoid(W x)) * x + sigmoid(W x) * x: the gates are held constant
    (signal-take-all), so the input relevance is x * (1 - s) + x * s = x, summed: the output."""
    torch.manual_seed(6)
    lin = nn.Linear(4, 4, bias=False).double()

    def gated(x):
        s = torch.sigmoid(lin(x))
        return ((1 - s) * x + s * x).sum(-1)

    x = torch.randn(3, 4, dtype=torch.float64)
    out, (rx,), mode = relevance_of(gated, x)
    torch.testing.assert_close(rx, x)
    torch.testing.assert_close(rx.sum(-1), out.detach())
    assert mode.tally.total(mode.tally.absorbed) == pytest.approx(0.0, abs=1e-12)


def test_a_softmax_used_as_a_value_is_not_counted_as_a_bias():
    """AttnLRP's softmax rule does not conserve; what it does not pass on is left out of the tally
    (the explainer reports it as relevance_residual, with a warning), not hidden among the biases."""
    x = torch.randn(2, 5, dtype=torch.float64)
    out, (rx,), mode = relevance_of(lambda t: torch.softmax(t, -1)[:, 0], x)
    s = torch.softmax(x, -1)
    R = torch.zeros_like(x)
    R[:, 0] = s[:, 0]
    torch.testing.assert_close(rx, x * (R - s * R.sum(-1, keepdim=True)))
    assert mode.tally.absorbed == {}
