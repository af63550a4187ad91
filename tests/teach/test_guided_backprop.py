"""Guided backprop: the op against its definition, a graph network against a slow reference
written node by node, an MLP against Captum's GuidedBackprop, and the mode's restore and errors."""
import warnings

import pytest
import torch
from torch import nn
from torch_geometric.data import Data

from lrp_lib.teach import graph
from lrp_lib.teach.guided_backprop import guided_backprop, guided_relu


def test_guided_relu_definition():
    x = torch.tensor([-1.0, 2.0, 3.0, 0.0, 4.0], requires_grad=True)
    y = guided_relu(x)
    assert y.tolist() == [0, 2, 3, 0, 4]
    y.backward(torch.tensor([5.0, -1.0, 2.0, 7.0, 0.5]))
    # [x > 0] * max(g, 0): inactive units and negative signals are both dropped
    assert x.grad.tolist() == [0, 0, 2, 0, 0.5]


class SmallGN(nn.Module):
    """EdgeLinear(edge, sender) -> ReLU -> NodeLinear(node, incoming) -> ReLU -> NodeLinear(1)."""

    def __init__(self, aggregation):
        super().__init__()
        self.edge = graph.EdgeLinear(5, edge_features=2, sender_features=3)
        self.edge_relu = graph.EdgeReLU()
        self.node = graph.NodeLinear(4, node_features=3, incoming_features=5, aggregation=aggregation)
        self.node_relu = graph.NodeReLU()
        self.readout = graph.NodeLinear(1, node_features=4)

    def forward(self, data):
        return self.readout(self.node_relu(self.node(self.edge_relu(self.edge(data))))).x


def guided_reference(model, x, edge_attr, edge_index, target, aggregation):
    """Forward and guided backward of SmallGN, edge by edge and node by node, from the definition."""
    W_e, W_s, b1 = model.edge.W_edge, model.edge.W_sender, model.edge.bias
    W_x, W_in, b2 = model.node.W_node, model.node.W_incoming, model.node.bias
    W_o = model.readout.W_node
    n, m = x.shape[0], edge_attr.shape[0]
    pre = [W_e @ edge_attr[k] + W_s @ x[edge_index[0, k]] + b1 for k in range(m)]
    h = [p.clamp(min=0) for p in pre]
    agg, winner = [torch.zeros(5, dtype=x.dtype) for _ in range(n)], [[None] * 5 for _ in range(n)]
    for i in range(n):
        incoming = [k for k in range(m) if edge_index[1, k] == i]
        for f in range(5):
            vals = [float(h[k][f]) for k in incoming]
            if not incoming:
                continue
            if aggregation == "sum":
                agg[i][f] = sum(vals)
            else:
                best = max(vals)
                agg[i][f] = best
                winner[i][f] = max(k for k in incoming if float(h[k][f]) == best)
    z = [W_x @ x[i] + W_in @ agg[i] + b2 for i in range(n)]
    # backward from out[target]
    dx, de = torch.zeros_like(x), torch.zeros_like(edge_attr)
    dn = W_o[0]  # d out / d n_target
    dz = (z[target] > 0) * dn.clamp(min=0)
    dx[target] += W_x.T @ dz
    dagg = W_in.T @ dz
    for k in range(m):
        if edge_index[1, k] != target:
            continue
        dh = dagg.clone() if aggregation == "sum" else torch.tensor(
            [float(dagg[f]) if winner[target][f] == k else 0.0 for f in range(5)], dtype=x.dtype)
        dpre = (pre[k] > 0) * dh.clamp(min=0)
        de[k] += W_e.T @ dpre
        dx[edge_index[0, k]] += W_s.T @ dpre
    return dx, de


@pytest.mark.parametrize("aggregation", ["sum", "max"])
def test_graph_model_against_slow_reference(aggregation):
    torch.manual_seed(0)
    model = SmallGN(aggregation).double()
    g = torch.Generator().manual_seed(1)
    x = torch.randn(7, 3, generator=g, dtype=torch.float64)
    edge_index = torch.tensor([[0, 1, 2, 3, 4, 5, 6, 1, 3, 5, 0], [1, 2, 3, 4, 5, 6, 0, 0, 0, 0, 3]])
    edge_attr = torch.randn(edge_index.shape[1], 2, generator=g, dtype=torch.float64)
    data = graph.relevance_inputs(Data(x=x, edge_attr=edge_attr, edge_index=edge_index), ("x", "edge_attr"))
    with guided_backprop(model):
        out = model(data)
    for target in (0, 3):
        data.x.grad = data.edge_attr.grad = None
        out[target, 0].backward(retain_graph=True)
        with torch.no_grad():
            ref_x, ref_e = guided_reference(model, x, edge_attr, edge_index, target, aggregation)
        torch.testing.assert_close(data.x.grad, ref_x)
        torch.testing.assert_close(data.edge_attr.grad, ref_e)
    # and it differs from the plain gradient (negative signals were dropped somewhere)
    plain = graph.relevance_inputs(Data(x=x, edge_attr=edge_attr, edge_index=edge_index), ("x", "edge_attr"))
    model(plain)[0, 0].backward()
    data.x.grad = None
    out[0, 0].backward(retain_graph=True)
    assert not torch.allclose(plain.x.grad, data.x.grad)


def test_mlp_against_captum_and_by_hand():
    captum_attr = pytest.importorskip("captum.attr")
    torch.manual_seed(0)
    mlp = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 3)).double()
    x = torch.randn(5, 6, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # captum's notes about hooks and requires_grad
        expected = captum_attr.GuidedBackprop(mlp).attribute(x.clone().requires_grad_(True), target=1)
    inputs = x.clone().requires_grad_(True)
    with guided_backprop(mlp):
        mlp(inputs)[:, 1].sum().backward()
    torch.testing.assert_close(inputs.grad, expected)
    # by hand: delta <- W^T delta, then [z > 0] max(delta, 0) at each ReLU
    W1, W2, W3 = mlp[0].weight, mlp[2].weight, mlp[4].weight
    z1 = x @ W1.T + mlp[0].bias
    z2 = z1.clamp(min=0) @ W2.T + mlp[2].bias
    d = W3[1].expand(5, 8)
    d = (z2 > 0) * d.clamp(min=0)
    d = (z1 > 0) * (d @ W2).clamp(min=0)
    torch.testing.assert_close(inputs.grad, (d @ W1).detach())


def test_mode_restores_the_model_and_leaves_values_alone():
    model = SmallGN("max")
    data = Data(x=torch.randn(4, 3), edge_attr=torch.randn(3, 2), edge_index=torch.tensor([[0, 1, 2], [1, 2, 3]]))
    before = model(data)
    with guided_backprop(model):
        assert len(model.edge_relu._forward_hooks) == len(model.node_relu._forward_hooks) == 1
        torch.testing.assert_close(model(data), before)  # same forward values
    assert model.edge_relu.fn is torch.relu and model.node_relu.fn is torch.relu  # never swapped
    assert not model.edge_relu._forward_hooks and not model.node_relu._forward_hooks
    relu = nn.ReLU()
    with pytest.raises(RuntimeError, match="boom"):
        with guided_backprop(nn.Sequential(relu)):
            raise RuntimeError("boom")
    assert "forward" not in vars(relu) and not relu._forward_hooks  # removed after an exception too


def test_errors():
    with pytest.raises(ValueError, match=r"model \(Linear\) has no ReLU layer"):
        with guided_backprop(nn.Linear(2, 2)):
            pass
    with pytest.raises(TypeError, match="model must be a torch.nn.Module"):
        with guided_backprop(lambda t: t):
            pass
    with pytest.raises(TypeError, match="x must be a floating point tensor"):
        guided_relu(torch.tensor([1, 2]))
    with pytest.raises(TypeError, match="x must be a torch.Tensor"):
        guided_relu([1.0])
