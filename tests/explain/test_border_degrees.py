"""GCN's degrees at the border from counted edges (:mod:`lrp_lib.explain.subgraphs.border_degrees`).

A union built with ``border="counted"`` and weighed by the hook must give each GCN layer the
normalisation of the union with every border edge, to the bit, and ``per_index=True`` the same
relevance; a layer the hook cannot weigh (other edges, its own weights, ``improved``, a cache)
must send the chunk back to the whole border, with the same result.
"""
from __future__ import annotations

import threading

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch_geometric.nn import GCNConv, GINConv
from torch_geometric.nn.conv.gcn_conv import gcn_norm

from lrp_lib.explain import subgraphs
from lrp_lib.explain.subgraphs.border_degrees import CountedBorder, counted_border
from lrp_lib.explain.explainer import Explainer, LRPExplainer
from lrp_lib.explain.subgraphs.unions import k_hop_union, union_graph


def graph(n=50, e=200, loops=12, seed=0):
    g = torch.Generator().manual_seed(seed)
    edge_index = torch.randint(0, n, (2, e), generator=g)
    edge_index[1, :loops] = edge_index[0, :loops]  # self-loops, several at the border
    edge_index[:, loops:loops + 3] = edge_index[:, :1]  # a node with three loops
    x = torch.randn(n, 4, generator=g, dtype=torch.float64)
    return x, edge_index


def unions(x, edge_index, index, hops):
    n = x.shape[0]
    src, dst = edge_index
    counts = torch.bincount(dst, minlength=n)
    perm = torch.argsort(dst, stable=True)
    u = k_hop_union(index, hops, src, perm, torch.cumsum(counts, 0) - counts, counts, n)
    own = torch.bincount(dst[src == dst], minlength=n)
    every = union_graph(x, {}, None, index, 0, u, src, dst, n, "all")
    counted = union_graph(x, {}, None, index, 0, u, src, dst, n, "counted", hops=hops, loops=own, counts=counts)
    return u, every, counted


@pytest.mark.parametrize("add_self_loops", [True, False])
def test_the_weighed_layer_normalises_as_with_the_whole_border(add_self_loops):
    x, edge_index = graph()
    index = torch.tensor([0, 3, 3, 17, 41])
    u, every, counted = unions(x, edge_index, index, 2)
    m = u.keys.numel()
    conv = GCNConv(4, 3, add_self_loops=add_self_loops).double()
    with counted_border(conv, counted.edge_index, counted.multiplicity) as state:
        mine = conv(counted.x, counted.edge_index)
    assert state.calls == state.weighed == 1 and state.complete
    theirs = conv(every.x, every.edge_index)
    closer = u.depth < 2  # the nodes whose in-edges both unions hold (the outermost ones' loops are summed)
    assert torch.equal(mine[:m][closer], theirs[:m][closer])
    # the degrees themselves: the normalisation of the edges both unions share
    inner = u.edge_id.numel()
    w = state.weights(conv, torch.float64)
    _, norm_mine = gcn_norm(counted.edge_index, w, counted.x.shape[0], add_self_loops=add_self_loops)
    _, norm_theirs = gcn_norm(every.edge_index, None, every.x.shape[0], add_self_loops=add_self_loops,
                              dtype=torch.float64)
    if add_self_loops:  # the edges that are not loops first, in order, then one loop per node
        shared = int((counted.edge_index[0, :inner] != counted.edge_index[1, :inner]).sum())
        assert torch.equal(norm_mine[:shared], norm_theirs[:shared])
        assert torch.equal(norm_mine[-counted.x.shape[0]:][:m], norm_theirs[-every.x.shape[0]:][:m])
    else:
        assert torch.equal(norm_mine[:inner], norm_theirs[:inner])


def test_the_hook_is_inert_outside_the_block_and_in_other_threads():
    x, edge_index = graph()
    _, _, counted = unions(x, edge_index, torch.tensor([1, 2]), 2)
    conv = GCNConv(4, 3).double()
    plain = conv(counted.x, counted.edge_index)  # unweighted: the stand-in edges count once
    seen = {}
    with counted_border(conv, counted.edge_index, counted.multiplicity) as state:
        worker = threading.Thread(target=lambda: seen.update(out=conv(counted.x, counted.edge_index)))
        worker.start(), worker.join()
        weighed = conv(counted.x, counted.edge_index)
    assert state.weighed == 1  # the other thread's call was not weighed
    assert torch.equal(seen["out"], plain) and not torch.equal(weighed, plain)
    assert torch.equal(conv(counted.x, counted.edge_index), plain)  # after the block


def test_what_the_hook_cannot_weigh_is_reported():
    x, edge_index = graph()
    _, _, counted = unions(x, edge_index, torch.tensor([4, 9]), 2)
    ei, w = counted.edge_index, counted.multiplicity
    cases = [
        (GCNConv(4, 3), lambda c: c(counted.x.float(), ei, None), True),  # None given positionally: weighed
        (GCNConv(4, 3), lambda c: c(counted.x.float(), ei.clone()), False),  # other edges
        (GCNConv(4, 3), lambda c: c(counted.x.float(), ei, torch.ones(ei.shape[1])), False),  # its own weights
        (GCNConv(4, 3, improved=True), lambda c: c(counted.x.float(), ei), False),
        (GCNConv(4, 3, cached=True), lambda c: c(counted.x.float(), ei), False),
        (GCNConv(4, 3, normalize=False), lambda c: c(counted.x.float(), ei), None),  # no degrees: not counted
    ]
    for conv, call, weighed in cases:
        with counted_border(conv, ei, w) as state:
            call(conv)
        assert (state.calls, state.complete) == ((0, True) if weighed is None else (1, weighed)), conv
    with pytest.raises(ValueError, match="multiplicity"):
        CountedBorder(ei, w[:-1])


class Net(nn.Module):
    def __init__(self, convs, flip=False):
        super().__init__()
        self.convs = nn.ModuleList(convs)
        self.lin = nn.Linear(6, 3)
        self.flip = flip

    def forward(self, x, edge_index):
        if self.flip:  # the model's own edges: the hook cannot weigh them
            edge_index = edge_index.flip(0).flip(0)
        for conv in self.convs:
            x = F.relu(conv(x, edge_index))
        return self.lin(x)


def gin(a, b):
    return GINConv(nn.Sequential(nn.Linear(a, b), nn.ReLU(), nn.Linear(b, b)))


MODELS = {
    "gcn": lambda: Net([GCNConv(4, 6), GCNConv(6, 6), GCNConv(6, 6)]),
    "gcn_without_self_loops": lambda: Net([GCNConv(4, 6, add_self_loops=False), GCNConv(6, 6), GCNConv(6, 6)]),
    "gcn_gin": lambda: Net([GCNConv(4, 6), gin(6, 6), GCNConv(6, 6)]),
    "gcn_improved": lambda: Net([GCNConv(4, 6), GCNConv(6, 6, improved=True), GCNConv(6, 6)]),
    "gcn_own_edges": lambda: Net([GCNConv(4, 6), GCNConv(6, 6), GCNConv(6, 6)], flip=True),
}


@pytest.mark.parametrize("name", sorted(MODELS))
@pytest.mark.parametrize("rule", ["epsilon", "zplus"])
def test_per_index_with_the_border_counted_equals_the_whole_border(name, rule, monkeypatch):
    torch.manual_seed(0)
    model = MODELS[name]().double().eval()
    x, edge_index = graph(n=60, e=300)
    index = torch.tensor([0, 7, 7, 13, 59, 21, 2, 33])

    def explain():
        borders = []

        def spy(*args, **kwargs):
            borders.append(args[9])
            return union_graph(*args, **kwargs)

        monkeypatch.setattr(subgraphs, "union_graph", spy)
        explainer = Explainer(model, algorithm=LRPExplainer(rule=rule, per_index=True),
                              explanation_type="model", node_mask_type="attributes", edge_mask_type="object",
                              model_config=dict(mode="multiclass_classification", task_level="node",
                                                return_type="raw"))
        e = explainer(x, edge_index, index=index)
        return borders, e

    borders, counted = explain()
    monkeypatch.setattr(subgraphs, "countable", lambda m: False)
    every_borders, every = explain()
    assert every_borders == ["all"]
    weighable = name in ("gcn", "gcn_without_self_loops", "gcn_gin")
    assert borders == (["counted"] if weighable else ["counted", "all"])
    for key in ("node_relevance_per_index", "edge_relevance_per_index"):
        assert torch.equal(counted[key].to_dense(), every[key].to_dense()), key
    for key in ("node_relevance", "edge_relevance", "bias_relevance", "relevance_residual"):
        assert torch.equal(counted[key], every[key]), key
    assert float(counted.node_relevance.abs().sum()) > 0


def test_which_models_are_counted():
    assert subgraphs.countable(MODELS["gcn_gin"]())
    assert not subgraphs.countable(nn.Linear(2, 2))

    class MyGCN(GCNConv):  # a subclass may read the degrees elsewhere: not counted
        pass

    assert not subgraphs.countable(Net([MyGCN(4, 6)]))
