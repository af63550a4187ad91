"""Where GNN-LRP's walks are not defined, WalkModel refuses (lrp_lib.explain.walks.defined): relevance
moving between nodes outside message passing, relevance leaving the explained node after the last
layer, a propagate over another node set.  Where they are defined (row-wise norms, a graph-level head
with attention, ARMAConv's stacks, GCN2Conv's in-place update and initial residual), the walks summed
by start node are LRPExplainer's node relevance (LRP-0, float64) and sum to the output."""
from __future__ import annotations

import pytest
import torch
from torch import nn
from torch_geometric.nn import (ARMAConv, GCN2Conv, GCNConv, GINConv, GPSConv, GraphNorm, LayerNorm,
                                MessagePassing, global_add_pool)
from torch_geometric.nn.models import GCN, AttentiveFP, GraphUNet

from lrp_lib.core.rules import Epsilon
from lrp_lib.explain.explainer import Explainer, LRPExplainer
from lrp_lib.explain.walks import WalkModel, WalksUndefinedError, all_walks

N, F_IN, HID = 6, 3, 4
EDGES = [(0, 1), (1, 2), (2, 3), (3, 0), (2, 4), (4, 5), (1, 4)]
EDGE_INDEX = torch.tensor([[a for a, b in EDGES] + [b for a, b in EDGES],
                           [b for a, b in EDGES] + [a for a, b in EDGES]])


def _attention(h):
    return torch.softmax(h @ h.T, dim=-1) @ h


class Between(nn.Module):
    """GCNConv -> ``mid`` -> relu -> GCNConv -> (pool) -> Linear, bias-free."""

    def __init__(self, mid, node_level: bool):
        super().__init__()
        self.c1, self.c2 = GCNConv(F_IN, HID, bias=False), GCNConv(HID, HID, bias=False)
        self.mid, self.node_level = mid, node_level
        self.head = nn.Linear(HID, 1, bias=False)

    def forward(self, x, edge_index):
        h = self.mid(self.c1(x, edge_index)).relu()
        h = self.c2(h, edge_index).relu()
        return self.head(h if self.node_level else global_add_pool(h, None))


class Head(nn.Module):
    """GCNConv -> relu -> attention over all nodes -> (pool) -> Linear: the mixing after the last layer."""

    def __init__(self, node_level: bool):
        super().__init__()
        self.c1, self.node_level = GCNConv(F_IN, HID, bias=False), node_level
        self.head = nn.Linear(HID, 1, bias=False)

    def forward(self, x, edge_index):
        h = _attention(self.c1(x, edge_index).relu())
        return self.head(h if self.node_level else global_add_pool(h, None))


class _Fn(nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, h):
        return self.fn(h)


def _x(seed=0):
    torch.manual_seed(seed)
    return torch.randn(N, F_IN, dtype=torch.float64)


def _lrp_nodes(model, x, edge_index, level, index=None, **kwargs):
    explainer = Explainer(model, algorithm=LRPExplainer(rule=Epsilon(0.0), mask="relevance"),
                          explanation_type="model",
                          node_mask_type="attributes",
                          model_config=dict(mode="regression", task_level=level, return_type="raw"))
    return explainer(x, edge_index, index=index, **kwargs).node_mask.sum(-1)


def _check_marginals(model, x, edge_index, level, index=None, conserve=True, **kwargs):
    """Walks summed by start node == LRPExplainer's node relevance; all walks sum to the relevance that
    reaches x, and (``conserve``: bias-free ReLU networks under LRP-0) to the output."""
    wm = WalkModel(model, x, edge_index, Epsilon(0.0), index=index, **kwargs)
    walks = all_walks(wm)
    rel = wm.walk_relevance(walks)
    marginal = torch.zeros(N, dtype=torch.float64).index_add_(0, walks[:, 0], rel)
    torch.testing.assert_close(marginal, _lrp_nodes(model, x, edge_index, level, index, **kwargs),
                               atol=1e-10, rtol=1e-8)
    assert abs(float(rel.sum()) - wm.total) <= 1e-10 * max(1.0, abs(wm.total))
    out = model(x, edge_index, **kwargs)
    y = float(out[index].sum() if index is not None else out.sum())
    assert not conserve or abs(float(rel.sum()) - y) <= 1e-9 * max(1.0, abs(y))
    return wm


MIXING = {
    "GraphNorm": lambda: GraphNorm(HID),
    "LayerNorm(mode='graph')": lambda: LayerNorm(HID),
    "mean over nodes": lambda: _Fn(lambda h: h + h.mean(0, keepdim=True)),
    "self-attention": lambda: _Fn(_attention),
}


@pytest.mark.parametrize("node_level", [False, True])
@pytest.mark.parametrize("mid", list(MIXING))
def test_mixing_between_layers_is_refused_naming_the_layers(mid, node_level):
    torch.manual_seed(1)
    model = Between(MIXING[mid](), node_level).double().eval()
    with pytest.raises(WalksUndefinedError, match="between message-passing steps") as info:
        WalkModel(model, _x(), EDGE_INDEX, Epsilon(0.0), index=2 if node_level else None)
    assert "'c2'" in str(info.value) and "'c1'" in str(info.value) and "belongs to no walk" in str(info.value)
    assert isinstance(info.value, ValueError)


@pytest.mark.parametrize("norm", ["batch_norm", "layer_norm", "graph_norm"])
def test_pyg_basic_gnn_norms(norm):
    """PyG's GCN with a norm between its layers: batch_norm (running statistics in eval) acts row by row,
    layer_norm (mode 'graph') and graph_norm normalise over the nodes of a graph: refused."""
    torch.manual_seed(3)
    model = GCN(F_IN, HID, 2, out_channels=1, norm=norm).double().eval()
    for m in model.modules():
        if isinstance(m, nn.BatchNorm1d):  # running statistics that are not the identity
            m.running_mean.uniform_(-0.5, 0.5)
            m.running_var.uniform_(0.5, 2.0)
    if norm == "batch_norm":
        _check_marginals(model, _x(), EDGE_INDEX, "node", index=1, conserve=False)  # the norm's shift
    else:
        with pytest.raises(WalksUndefinedError, match="conv"):
            WalkModel(model, _x(), EDGE_INDEX, Epsilon(0.0), index=1)


def test_row_wise_layer_norm_is_not_refused():
    torch.manual_seed(4)
    model = Between(LayerNorm(HID, mode="node"), node_level=False).double().eval()
    _check_marginals(model, _x(), EDGE_INDEX, "graph")


def test_attention_in_the_head():
    """After the last layer: free for a graph-level output (the readout is the walks' last factor),
    refused for a node-level one (a walk ends at the explained node)."""
    torch.manual_seed(5)
    _check_marginals(Head(node_level=False).double().eval(), _x(), EDGE_INDEX, "graph")
    with pytest.raises(WalksUndefinedError, match="head .* explained node 3"):
        WalkModel(Head(node_level=True).double().eval(), _x(), EDGE_INDEX, Epsilon(0.0), index=3)


class MeanUpdate(MessagePassing):
    """A propagate whose update adds the mean over all nodes (``mix``): relevance leaves the edges inside it."""

    def __init__(self, mix: bool):
        super().__init__(aggr="add")
        self.lin, self.mix = nn.Linear(HID, HID, bias=False), mix

    def forward(self, x, edge_index):
        return self.propagate(edge_index, x=self.lin(x))

    def message(self, x_j):
        return x_j

    def update(self, aggr_out):
        return aggr_out + aggr_out.mean(0, keepdim=True) if self.mix else aggr_out


@pytest.mark.parametrize("node_level", [False, True])
def test_mixing_inside_a_propagate_is_refused(node_level):
    index, level = (2, "node") if node_level else (None, "graph")
    for mix in (True, False):
        torch.manual_seed(9)
        model = Between(_Fn(lambda h: h), node_level)
        model.c2 = MeanUpdate(mix)
        model = model.double().eval()
        if mix:
            with pytest.raises(WalksUndefinedError, match="'c2''s propagate .* not a sender"):
                WalkModel(model, _x(), EDGE_INDEX, Epsilon(0.0), index=index)
        else:  # the same layer without the mean has walks
            _check_marginals(model, _x(), EDGE_INDEX, level, index=index)


class GPS(nn.Module):
    def __init__(self, node_level: bool):
        super().__init__()
        self.lin = nn.Linear(F_IN, HID, bias=False)
        mlp = nn.Sequential(nn.Linear(HID, HID), nn.ReLU(), nn.Linear(HID, HID))
        self.gps, self.node_level = GPSConv(HID, GINConv(mlp), heads=1, norm=None), node_level
        self.head = nn.Linear(HID, 1, bias=False)

    def forward(self, x, edge_index):
        h = self.gps(self.lin(x), edge_index)
        return self.head(h if self.node_level else global_add_pool(h, None))


def test_gps_global_attention():
    torch.manual_seed(6)
    with pytest.raises(WalksUndefinedError, match="head"):
        WalkModel(GPS(True).double().eval(), _x(), EDGE_INDEX, Epsilon(0.0), index=0)
    _check_marginals(GPS(False).double().eval(), _x(), EDGE_INDEX, "graph", conserve=False)  # softmax, biases


def test_pooling_and_readout_nodes_are_refused():
    torch.manual_seed(7)
    unet = GraphUNet(F_IN, HID, 1, depth=1, pool_ratios=0.5).double().eval()
    with pytest.raises(WalksUndefinedError, match="another node set"):
        WalkModel(unet, _x(), EDGE_INDEX, Epsilon(0.0), index=0)

    class FP(nn.Module):
        def __init__(self):
            super().__init__()
            self.fp = AttentiveFP(F_IN, HID, 1, edge_dim=2, num_layers=2, num_timesteps=1)

        def forward(self, x, edge_index, edge_attr):
            return self.fp(x, edge_index, edge_attr, torch.zeros(x.shape[0], dtype=torch.long))

    attr = torch.rand(EDGE_INDEX.shape[1], 2, dtype=torch.float64)
    with pytest.raises(WalksUndefinedError, match="'fp.mol_conv' propagates over another node set"):
        WalkModel(FP().double().eval(), _x(), EDGE_INDEX, Epsilon(0.0), edge_attr=attr)


class Arma(nn.Module):
    """ARMAConv propagates (K, N, C) stacks (node_dim -2)."""

    def __init__(self):
        super().__init__()
        self.conv = ARMAConv(F_IN, HID, num_stacks=2, num_layers=2, bias=False)
        self.head = nn.Linear(HID, 1, bias=False)

    def forward(self, x, edge_index):
        return self.head(global_add_pool(self.conv(x, edge_index).relu(), None))


class GCN2(nn.Module):
    """GCN2Conv changes its propagate output in place (x.mul_) and reads x_0 two layers later."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(F_IN, HID, bias=False)
        self.c1, self.c2 = GCN2Conv(HID, alpha=0.2, theta=0.5, layer=1), GCN2Conv(HID, alpha=0.2, theta=0.5, layer=2)
        self.head = nn.Linear(HID, 1, bias=False)

    def forward(self, x, edge_index):
        x0 = self.lin(x)
        h = self.c1(x0, x0, edge_index).relu()
        return self.head(self.c2(h, x0, edge_index).relu())


@pytest.mark.parametrize("build,level", [(Arma, "graph"), (GCN2, "node")])
def test_formerly_crashing_convs_have_exact_walks(build, level):
    torch.manual_seed(8)
    model = build().double().eval()
    wm = _check_marginals(model, _x(), EDGE_INDEX, level, index=4 if level == "node" else None)
    assert wm.depth == 2
    # the walks inside a node set, enumerated and summed, against one masked backward (sGNN-LRP)
    walks = all_walks(wm)
    rel = wm.walk_relevance(walks)
    for nodes in ([0, 1, 2, 4], [1, 4, 5], list(range(N))):
        inside = torch.isin(walks, torch.tensor(nodes)).all(1)
        torch.testing.assert_close(wm.subgraph_relevance(nodes), rel[inside].sum(), atol=1e-12, rtol=1e-9)
