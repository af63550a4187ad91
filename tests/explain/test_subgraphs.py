"""per_index=True subgraphs: pruning the edges into the outermost hop, and chunks sized by memory.

Pruned subgraphs must give the relevance of unpruned ones (float64, 1e-9) for GCN, GIN, GAT and
SAGE: GCN, whose normalisation reads the senders' degrees, is not pruned, and when pruning is
forced on it its outputs differ, so the chunk is explained again with the edges kept.  Chunks
sized by a small memory budget must give the result of one chunk of all targets.
"""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch_geometric.nn import GATConv, GCNConv, GINConv, SAGEConv

from lrp_lib.explain import subgraphs
from lrp_lib.explain.explainer import Explainer, LRPExplainer


class Net(nn.Module):
    def __init__(self, conv, features=5, hidden=6, classes=3, layers=3):
        super().__init__()
        dims = [features] + [hidden] * layers
        self.convs = nn.ModuleList(conv(a, b) for a, b in zip(dims[:-1], dims[1:]))
        self.lin = nn.Linear(hidden, classes)

    def forward(self, x, edge_index):
        for conv in self.convs:
            x = F.relu(conv(x, edge_index))
        return self.lin(x)


CONVS = {
    "gcn": GCNConv,
    "gin": lambda a, b: GINConv(nn.Sequential(nn.Linear(a, b), nn.ReLU(), nn.Linear(b, b))),
    "gat": lambda a, b: GATConv(a, b, heads=1),
    "sage": lambda a, b: SAGEConv(a, b, aggr="mean"),
}


def setup(conv, n=60, e=240, seed=0):
    torch.manual_seed(seed)
    model = Net(CONVS[conv]).double().eval()
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 5, generator=g, dtype=torch.float64)
    edge_index = torch.randint(0, n, (2, e), generator=g)
    return model, x, edge_index, torch.tensor([0, 7, 7, 13, 59, 21, 2, 33])


def explain(model, x, edge_index, index, chunk_size=1_000):
    explainer = Explainer(model, algorithm=LRPExplainer(rule="epsilon", per_index=True, chunk_size=chunk_size),
                          explanation_type="model", node_mask_type="attributes", edge_mask_type="object",
                          model_config=dict(mode="multiclass_classification", task_level="node",
                                            return_type="raw"))
    e = explainer(x, edge_index, index=index)
    return (e.node_relevance_per_index.to_dense(), e.edge_relevance_per_index.to_dense(),
            e.node_relevance, e.edge_relevance)


def spy_on_union_graph(monkeypatch):
    """Record the border of every union_graph call ("none", "counted", "all") and its number of edges."""
    calls, original = [], subgraphs.union_graph

    def spy(*args, **kwargs):
        out = original(*args, **kwargs)
        calls.append((args[9], out.edge_index.shape[1]))
        return out

    monkeypatch.setattr(subgraphs, "union_graph", spy)
    return calls


def assert_same(a, b):
    for u, v in zip(a, b):
        torch.testing.assert_close(u, v, rtol=1e-9, atol=1e-9)


def test_which_models_are_pruned():
    assert not subgraphs.prunable(Net(GCNConv))
    assert subgraphs.prunable(Net(lambda a, b: GCNConv(a, b, normalize=False)))
    for conv in ("gin", "gat", "sage"):
        assert subgraphs.prunable(Net(CONVS[conv]))

    class MyGIN(GINConv):  # a subclass may change the message: not pruned
        pass

    assert not subgraphs.prunable(Net(lambda a, b: MyGIN(nn.Linear(a, b))))


@pytest.mark.parametrize("conv", sorted(CONVS))
def test_pruned_equals_unpruned(conv, monkeypatch):
    model, x, edge_index, index = setup(conv)
    monkeypatch.setattr(subgraphs, "prunable", lambda m: False)
    monkeypatch.setattr(subgraphs, "countable", lambda m: False)
    kept_calls = spy_on_union_graph(monkeypatch)
    unpruned = explain(model, x, edge_index, index)
    assert [border for border, _ in kept_calls] == ["all"]
    monkeypatch.undo()
    monkeypatch.setattr(subgraphs, "prunable", lambda m: False)  # the border counted, also on GIN, GAT, SAGE
    counted_calls = spy_on_union_graph(monkeypatch)
    counted = explain(model, x, edge_index, index)
    assert [border for border, _ in counted_calls] == ["counted"]
    assert counted_calls[0][1] < kept_calls[0][1]
    for a, b in zip(counted, unpruned):  # the same degrees: the same relevance, to the bit
        assert torch.equal(a, b)
    monkeypatch.setattr(subgraphs, "prunable", lambda m: True)  # forced, also on GCN
    calls = spy_on_union_graph(monkeypatch)
    pruned = explain(model, x, edge_index, index)
    assert_same(pruned, unpruned)
    if conv == "gcn":  # the degrees at the border change the outputs: explained again with them counted
        assert [border for border, _ in calls] == ["none", "counted"]
    else:
        assert [border for border, _ in calls] == ["none"]
        assert calls[0][1] < counted_calls[0][1]  # fewer edges in the pruned union


@pytest.mark.parametrize("conv", ["gcn", "gin"])
def test_chunks_by_memory_equal_one_chunk(conv, monkeypatch):
    model, x, edge_index, index = setup(conv)
    calls = spy_on_union_graph(monkeypatch)
    one = explain(model, x, edge_index, index)
    assert len(calls) == 1
    per_node, per_message, widest = subgraphs.chunk_bytes(model, x.shape[0], lambda: model(x, edge_index))[1:]
    assert widest == 6 * 8  # the hidden width, float64
    assert per_node > 0 and len(per_message) == 3 and all(m > 0 for m in per_message)
    calls.clear()
    # a budget of about two targets' subgraphs
    union = subgraphs.k_hop_union(index[:2], 3, edge_index[0], *_csr(edge_index, 60), 60)
    border_edges = int((union.depth == 3).sum()) if conv == "gcn" else None  # GCN's border: counted
    budget = int(subgraphs.pass_bytes(per_node, per_message, union, 2, 3, border_edges=border_edges, layered=True))
    monkeypatch.setattr(subgraphs, "memory_budget", lambda device: budget)
    chunked = explain(model, x, edge_index, index)
    assert len(calls) > 2
    assert_same(chunked, one)


def _csr(edge_index, n):
    dst = edge_index[1]
    counts = torch.bincount(dst, minlength=n)
    return torch.argsort(dst, stable=True), torch.cumsum(counts, 0) - counts, counts


def test_max_memory_must_be_a_positive_int():
    for bad in (0, -5, 1.5, True):
        with pytest.raises(ValueError, match="max_memory"):
            LRPExplainer(per_index=True, max_memory=bad)


@pytest.mark.parametrize("conv", ["gin", "gcn"])
def test_the_explainer_passes_max_memory_and_prune_on(conv, monkeypatch):
    """LRPExplainer(max_memory=, prune=) reach the subgraphs: a budget of one node's bytes gives one
    target per chunk, prune=False keeps the border edges of a prunable model, and both give the
    relevance of the defaults."""
    model, x, edge_index, index = setup(conv)

    def run(**kw):
        calls = spy_on_union_graph(monkeypatch)
        explainer = Explainer(model, algorithm=LRPExplainer(rule="epsilon", per_index=True, **kw),
                              explanation_type="model", node_mask_type="attributes", edge_mask_type="object",
                              model_config=dict(mode="multiclass_classification", task_level="node",
                                                return_type="raw"))
        e = explainer(x, edge_index, index=index)
        monkeypatch.undo()
        return calls, (e.node_relevance_per_index.to_dense(), e.edge_relevance_per_index.to_dense())

    default_calls, default = run()
    tiny_calls, tiny = run(max_memory=1)
    kept_calls, kept = run(prune=False)
    assert len(default_calls) == 1 and len(tiny_calls) == len(index)  # one chunk / one target per chunk
    assert all(border == "all" for border, _ in kept_calls)
    assert [border for border, _ in default_calls] == ["counted" if conv == "gcn" else "none"]
    assert_same(default, tiny)
    assert_same(default, kept)
    with pytest.raises(ValueError, match="prune"):
        LRPExplainer(per_index=True, prune="yes")


@pytest.mark.parametrize("conv", sorted(CONVS))
def test_the_prediction_pass_serves_as_the_full_output_and_a_few_subgraphs_give_the_estimate(conv, monkeypatch):
    """Through Explainer the model runs once on the full graph (PyG's prediction pass, which the subgraphs'
    outputs are compared with) and the memory estimate is measured on the first targets' subgraphs, equal
    to the full graph's; the algorithm called directly runs the full graph itself."""
    model, x, edge_index, index = setup(conv)
    full = subgraphs.chunk_bytes(model, x.shape[0], lambda: model(x, edge_index))[1:]
    seen, original = [], subgraphs.chunk_bytes

    def spy(model_, n, forward):
        out = original(model_, n, forward)
        seen.append((n, out[1:]))
        return out

    monkeypatch.setattr(subgraphs, "chunk_bytes", spy)
    runs = []
    handle = model.register_forward_pre_hook(lambda m, args: runs.append(args[0].shape[0]))
    try:
        via_explainer = explain(model, x, edge_index, index)
        assert runs.count(x.shape[0]) == 1  # the prediction pass only
        assert len(seen) == 1 and seen[0][1] == full
        runs.clear(), seen.clear()
        algorithm = LRPExplainer(rule="epsilon", per_index=True)
        Explainer(model, algorithm=algorithm, explanation_type="phenomenon", node_mask_type="attributes",
                  edge_mask_type="object", model_config=dict(mode="multiclass_classification", task_level="node",
                                                              return_type="raw"))
        with torch.no_grad():
            target = model(x, edge_index).argmax(-1)
        runs.clear()
        direct = algorithm(model, x, edge_index, target=target, index=index)
        assert runs.count(x.shape[0]) == 1 and [n for n, _ in seen] == [x.shape[0]]
    finally:
        handle.remove()
    assert torch.equal(direct.node_relevance_per_index.to_dense(), via_explainer[0])


@pytest.mark.parametrize("conv", ["gcn", "gin"])
def test_on_the_cpu_the_largest_tensor_bounds_the_chunks(conv, monkeypatch):
    """CPU_TENSOR_BYTES caps the largest tensor of a pass (the widest row times the union's nodes or
    first-step edges): a cap of about two targets' largest tensor gives chunks of about two targets,
    with the relevance of one chunk."""
    model, x, edge_index, index = setup(conv)
    calls = spy_on_union_graph(monkeypatch)
    one = explain(model, x, edge_index, index)
    assert len(calls) == 1
    widest = subgraphs.chunk_bytes(model, x.shape[0], lambda: model(x, edge_index))[3]
    union = subgraphs.k_hop_union(index[:2], 3, edge_index[0], *_csr(edge_index, 60), 60, border=False)
    border_edges = int((union.depth == 3).sum()) if conv == "gcn" else None
    largest = subgraphs.largest_tensor(widest, union, 2, border_edges=border_edges, layered=True)
    rows = union.keys.numel() + (2 if conv == "gcn" else 0)
    assert largest == widest * max(rows, union.edge_id.numel())
    unlayered = subgraphs.largest_tensor(widest, union, 2, border_edges=100_000, layered=False)
    assert unlayered == widest * (union.edge_id.numel() + 100_000)
    monkeypatch.setattr(subgraphs, "CPU_TENSOR_BYTES", largest)
    calls.clear()
    capped = explain(model, x, edge_index, index)
    assert len(calls) > 2
    assert_same(capped, one)


def test_without_a_tensor_cap_the_memory_budget_alone_sizes_the_chunks(monkeypatch):
    """Off the CPU there is no cap on the largest tensor (``inf``): the chunks after the first are then
    sized by the memory budget alone (``inf // n`` is NaN in Python, which must not reach ``int``)."""
    import math
    model, x, edge_index, index = setup("gcn")
    one = explain(model, x, edge_index, index)
    monkeypatch.setattr(subgraphs, "CPU_TENSOR_BYTES", math.inf)
    calls = spy_on_union_graph(monkeypatch)
    explainer = Explainer(model, algorithm=LRPExplainer(rule="epsilon", per_index=True, chunk_size=None,
                                                        max_memory=100_000),
                          explanation_type="model", node_mask_type="attributes", edge_mask_type="object",
                          model_config=dict(mode="multiclass_classification", task_level="node",
                                            return_type="raw"))
    e = explainer(x, edge_index, index=index)
    assert len(calls) > 2
    assert_same((e.node_relevance_per_index.to_dense(), e.edge_relevance_per_index.to_dense(),
                 e.node_relevance, e.edge_relevance), one)
