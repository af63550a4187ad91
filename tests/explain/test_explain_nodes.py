"""LRPExplainer(per_index=True): many target nodes of a graph in one call, each explained on its own.

The batched result (the targets' k-hop subgraphs, explained together) must equal node-by-node
explanations on the full graph (float64, 1e-9), for GCN (whose normalisation needs the degrees of
the full graph at the subgraphs' borders), GraphConv with edge weights and SAGEConv (mean).
"""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch_geometric.nn import GATConv, GCNConv, GINConv, GraphConv, SAGEConv

from lrp_lib.explain.explainer import Explainer, LRPExplainer


class Net(nn.Module):
    def __init__(self, conv, features=5, hidden=6, classes=3, layers=3):
        super().__init__()
        dims = [features] + [hidden] * layers
        self.convs = nn.ModuleList(conv(a, b) for a, b in zip(dims[:-1], dims[1:]))
        self.lin = nn.Linear(hidden, classes)

    def forward(self, x, edge_index, edge_weight=None):
        for conv in self.convs:
            x = F.relu(conv(x, edge_index, edge_weight) if edge_weight is not None else conv(x, edge_index))
        return self.lin(x)


CONVS = {
    "gcn": GCNConv,
    "graphconv": lambda a, b: GraphConv(a, b, aggr="add"),
    "sage": lambda a, b: SAGEConv(a, b, aggr="mean"),
}


def graph(n=40, e=160, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 5, generator=g, dtype=torch.float64)
    edge_index = torch.randint(0, n, (2, e), generator=g)
    edge_weight = torch.rand(e, generator=g, dtype=torch.float64) + 0.1
    return x, edge_index, edge_weight


def explainer(model, per_index, node_mask_type="attributes", **kw):
    kw = {"rule": "epsilon", **kw}  # the mechanics of per_index, under the rule whose relevance reaches every node
    return Explainer(model, algorithm=LRPExplainer(per_index=per_index, **kw), explanation_type="model",
                     node_mask_type=node_mask_type, edge_mask_type="object",
                     model_config=dict(mode="multiclass_classification", task_level="node", return_type="raw"))


@pytest.mark.parametrize("conv", sorted(CONVS))
@pytest.mark.parametrize("node_mask_type", ["attributes", "object"])
def test_batched_equals_node_by_node(conv, node_mask_type):
    torch.manual_seed(1)
    model = Net(CONVS[conv]).double().eval()
    x, edge_index, edge_weight = graph()
    kwargs = {"edge_weight": edge_weight} if conv != "sage" else {}
    index = torch.tensor([0, 7, 7, 13, 39, 21, 2])  # a repeated target is explained twice
    batched = explainer(model, True, node_mask_type, chunk_size=3)(x, edge_index, index=index, **kwargs)
    assert batched.node_relevance_per_index.shape[:2] == (index.numel(), x.shape[0])
    nodes = batched.node_relevance_per_index.to_dense()
    edges = batched.edge_relevance_per_index.to_dense()
    single = explainer(model, False, node_mask_type)
    for i, t in enumerate(index.tolist()):
        one = single(x, edge_index, index=t, **kwargs)
        torch.testing.assert_close(nodes[i], one.node_relevance, rtol=0, atol=1e-9)
        torch.testing.assert_close(edges[i], one.edge_relevance, rtol=0, atol=1e-9)
        assert float(one.node_relevance.abs().sum()) > 0  # the comparison is not between zeros
    # the masks are the sums over the targets: without repeats, the explanation of the sum of their outputs
    distinct = index.unique()
    batched = explainer(model, True, node_mask_type, chunk_size=3)(x, edge_index, index=distinct, **kwargs)
    together = single(x, edge_index, index=distinct, **kwargs)
    torch.testing.assert_close(batched.node_relevance, together.node_relevance, rtol=0, atol=1e-9)
    torch.testing.assert_close(batched.edge_relevance, together.edge_relevance, rtol=0, atol=1e-9)


def test_a_target_whose_border_nodes_have_many_edges_outside():
    """GCN: a node on the border of the subgraph sends messages normalised by its full degree."""
    torch.manual_seed(2)
    model = Net(GCNConv, layers=2).double().eval()
    # path 0 <- 1 <- 2, and node 2 receives from 3..9 (outside the 2-hop subgraph of node 0)
    edge_index = torch.tensor([[1, 2] + list(range(3, 10)), [0, 1] + [2] * 7])
    x = torch.randn(10, 5, dtype=torch.float64)
    batched = explainer(model, True)(x, edge_index, index=torch.tensor([0]))
    one = explainer(model, False)(x, edge_index, index=0)
    torch.testing.assert_close(batched.node_relevance_per_index.to_dense()[0], one.node_relevance, rtol=0, atol=1e-9)


def test_too_few_hops_is_an_error():
    torch.manual_seed(3)
    model = Net(GCNConv).double().eval()
    x, edge_index, _ = graph()
    with pytest.raises(ValueError, match="num_hops"):
        explainer(model, True, num_hops=1)(x, edge_index, index=torch.tensor([0, 1]))


def test_bad_arguments():
    with pytest.raises(ValueError, match="num_hops"):
        LRPExplainer(per_index=True, num_hops=-1)
    with pytest.raises(ValueError, match="chunk_size"):
        LRPExplainer(per_index=True, chunk_size=0)
    with pytest.raises(TypeError, match="per_index"):
        LRPExplainer(per_index="yes")
    model = Net(GCNConv).double().eval()
    x, edge_index, _ = graph()
    with pytest.raises(ValueError, match="index"):
        explainer(model, True)(x, edge_index, index=torch.tensor([0, 40]))


ACCOUNTED = {
    "gcn": GCNConv,
    "gin": lambda a, b: GINConv(nn.Sequential(nn.Linear(a, b), nn.ReLU(), nn.Linear(b, b))),
    "gat": lambda a, b: GATConv(a, b, heads=2, concat=False),
}


@pytest.mark.parametrize("conv", sorted(ACCOUNTED))
@pytest.mark.parametrize("rule", ["epsilon", "zplus"])
def test_bias_and_residual_are_accounted_per_index(device, conv, rule):
    """per_index=True: one bias_relevance and one relevance_residual per entry of ``index`` (chunks
    of 3 targets), on the explanation's device; target i's node relevance + bias[i] + residual[i]
    is its explained logit, and its bias is the bias of the target explained alone."""
    torch.manual_seed(4)
    model = Net(ACCOUNTED[conv], layers=2).double().to(device).eval()
    x, edge_index, _ = graph(n=30, e=90, seed=3)
    x, edge_index = x.to(device), edge_index.to(device)
    index = torch.tensor([0, 7, 7, 13, 29, 21, 2], device=device)
    e = explainer(model, True, rule=rule, chunk_size=3)(x, edge_index, index=index)
    assert e.bias_relevance.shape == (index.numel(),) == e.relevance_residual.shape
    assert e.bias_relevance.device == x.device
    logits = model(x, edge_index).detach()[index]
    want = logits.gather(1, logits.argmax(-1, keepdim=True)).view(-1)
    nodes = e.node_relevance_per_index.to_dense().sum((1, 2))
    torch.testing.assert_close(nodes + e.bias_relevance + e.relevance_residual, want, rtol=0, atol=1e-9)
    assert float(e.bias_relevance.abs().min()) > 1e-6
    single = explainer(model, False, rule=rule)
    for i, t in enumerate(index.tolist()):
        one = single(x, edge_index, index=t)
        torch.testing.assert_close(one.bias_relevance, e.bias_relevance[i], rtol=0, atol=1e-9)
        torch.testing.assert_close(one.relevance_residual, e.relevance_residual[i], rtol=0, atol=1e-9)
