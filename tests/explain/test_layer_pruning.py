"""Per-layer pruning of ``per_index=True`` (:mod:`lrp_lib.explain.subgraphs.layer_pruning`).

The pruned pass (each message-passing step along the edges into the nodes that the targets'
outputs read) must give the relevance of the unpruned one (``prune=False``), value for value
(float64, to 12 digits; mostly bit for bit): node and edge relevance per target, and the accounts, for GCN
(edge weights), GAT, GIN, SAGE, GraphConv, GINE with ``edge_attr``, a residual and a
jumping-knowledge model.  The edges it removes carry no relevance in the unpruned explanation.
A model where the schedule does not hold (more message-passing steps than ``num_hops``), or a
pass whose targets' outputs differ from the full graph's, is explained again without it, to the
unpruned result.
"""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn
from torch_geometric.nn import GATConv, GCNConv, GINConv, GINEConv, GraphConv, SAGEConv

from lrp_lib.explain import subgraphs
from lrp_lib.explain.subgraphs import layer_pruning
from lrp_lib.explain.explainer import Explainer, LRPExplainer
from lrp_lib.explain.subgraphs.layer_pruning import LayerPlan, pruned_layers


class Net(nn.Module):
    def __init__(self, conv, features=5, hidden=6, classes=3, layers=3, residual=False, jk=False):
        super().__init__()
        dims = [features] + [hidden] * layers
        self.convs = nn.ModuleList(conv(a, b) for a, b in zip(dims[:-1], dims[1:]))
        self.residual, self.jk = residual, jk
        self.skip = nn.Linear(features, hidden) if residual else None
        self.lin = nn.Linear(hidden * (layers if jk else 1), classes)

    def forward(self, x, edge_index, edge_weight=None, edge_attr=None):
        seen = []
        for i, conv in enumerate(self.convs):
            extra = (edge_weight,) if edge_weight is not None else (edge_attr,) if edge_attr is not None else ()
            h = F.relu(conv(x, edge_index, *extra))
            if self.residual:
                h = h + (self.skip(x) if i == 0 else x)
            x = h
            seen.append(x)
        return self.lin(torch.cat(seen, -1) if self.jk else x)


def gine(a, b):
    return GINEConv(nn.Sequential(nn.Linear(a, b), nn.ReLU(), nn.Linear(b, b)), edge_dim=2)


MODELS = {
    "gcn": (lambda: Net(GCNConv), "edge_weight"),
    "gat": (lambda: Net(lambda a, b: GATConv(a, b, heads=2, concat=False)), None),
    "gin": (lambda: Net(lambda a, b: GINConv(nn.Sequential(nn.Linear(a, b), nn.ReLU(), nn.Linear(b, b)))), None),
    "sage": (lambda: Net(lambda a, b: SAGEConv(a, b, aggr="mean")), None),
    "graphconv": (lambda: Net(lambda a, b: GraphConv(a, b, aggr="add")), "edge_weight"),
    "gine": (lambda: Net(gine), "edge_attr"),
    "residual_gcn": (lambda: Net(GCNConv, residual=True), None),
    "jk_sage": (lambda: Net(lambda a, b: SAGEConv(a, b, aggr="max"), jk=True), None),
}


def inputs(kind, n=50, e=200, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 5, generator=g, dtype=torch.float64)
    edge_index = torch.randint(0, n, (2, e), generator=g)
    kwargs = {}
    if kind == "edge_weight":
        kwargs["edge_weight"] = torch.rand(e, generator=g, dtype=torch.float64) + 0.1
    elif kind == "edge_attr":
        kwargs["edge_attr"] = torch.randn(e, 2, generator=g, dtype=torch.float64)
    return x, edge_index, kwargs


def model_of(name, seed=0):
    torch.manual_seed(seed)
    model = MODELS[name][0]().double().eval()
    with torch.no_grad():
        for p in model.parameters():  # non-zero biases: their shares are kept and accounted per target
            if p.dim() == 1:
                p.uniform_(-0.3, 0.3)
    return model


def explain(model, x, edge_index, index, rule="epsilon", **kw):
    options = {k: kw.pop(k) for k in ("prune", "num_hops", "chunk_size") if k in kw}
    explainer = Explainer(model, algorithm=LRPExplainer(rule=rule, per_index=True, **options),
                          explanation_type="model", node_mask_type="attributes", edge_mask_type="object",
                          model_config=dict(mode="multiclass_classification", task_level="node", return_type="raw"))
    e = explainer(x, edge_index, index=index, **kw)
    out = {"nodes": e.node_relevance_per_index.to_dense(), "edges": e.edge_relevance_per_index.to_dense(),
           "bias": e.bias_relevance, "residual": e.relevance_residual}
    return out


def spy_on_plans(monkeypatch):
    """Record the LayerPlan of every pruned pass."""
    plans, original = [], layer_pruning.LayerPlan.__init__

    def init(self, *args):
        original(self, *args)
        plans.append(self)

    monkeypatch.setattr(layer_pruning.LayerPlan, "__init__", init)
    return plans


def assert_same(pruned, unpruned):
    """Equal up to rounding (most cases bit for bit; GAT's two heads differ in the last bit)."""
    assert pruned.keys() == unpruned.keys()
    for key in ("nodes", "edges", "bias", "residual"):
        scale = float(unpruned[key].abs().max()) if unpruned[key].numel() else 0.0
        torch.testing.assert_close(pruned[key], unpruned[key], rtol=1e-12, atol=1e-12 * max(scale, 1e-3), msg=key)


INDEX = torch.tensor([0, 7, 7, 13, 49, 21, 2, 33])


@pytest.mark.parametrize("rule", ["epsilon", "zplus"])
@pytest.mark.parametrize("name", sorted(MODELS))
def test_pruned_layers_give_the_unpruned_relevance(name, rule, monkeypatch):
    model = model_of(name)
    x, edge_index, kwargs = inputs(MODELS[name][1])
    unpruned = explain(model, x, edge_index, INDEX, rule, prune=False, **kwargs)
    plans = spy_on_plans(monkeypatch)
    pruned = explain(model, x, edge_index, INDEX, rule, **kwargs)
    assert_same(pruned, unpruned)
    assert len(plans) == 1 and plans[0].exact and plans[0].calls == 3
    kept = plans[0].kept  # each step passes fewer edges than the one before
    assert all(isinstance(k, int) for k in kept) and kept[0] > kept[1] > kept[2] > 0


def test_the_edges_a_step_leaves_out_carry_no_relevance_through_it(monkeypatch):
    """Unpruned, the messages of step ``l`` along the edges into nodes farther than ``hops - 1 - l``
    from their target (those that the pruned step leaves out) get no relevance."""
    model = model_of("gin")  # no self-loops added: each step's messages are the union's edges
    x, edge_index, _ = inputs(None, n=120, e=300)
    index = torch.tensor([3, 50, 77])
    graphs, original = [], subgraphs.union_graph
    monkeypatch.setattr(subgraphs, "union_graph", lambda *a, **k: graphs.append(original(*a, **k)) or graphs[-1])
    per_step = []

    def on_messages(module, args, out):
        if out.requires_grad:  # the explanation's forward (not the prediction pass)
            per_step.append(None)
            out.register_hook(lambda g, s=len(per_step) - 1: per_step.__setitem__(s, g.sum(-1)))

    handles = [conv.register_message_forward_hook(on_messages) for conv in model.convs]
    try:
        unpruned = explain(model, x, edge_index, index, prune=False)
    finally:
        for h in handles:
            h.remove()
    depth, receivers = graphs[0][8], graphs[0][1][1]
    assert len(per_step) == 3
    for step, rel in enumerate(per_step):
        left_out = depth[receivers] > 3 - 1 - step
        assert bool(left_out.any()) and bool((rel[~left_out] != 0).any())
        assert torch.equal(rel[left_out], torch.zeros_like(rel[left_out]))
    assert_same(explain(model, x, edge_index, index), unpruned)


class Parallel(nn.Module):
    """Two message-passing steps side by side, then one: two steps deep, three propagate calls."""

    def __init__(self):
        super().__init__()
        self.a, self.b, self.c = GCNConv(5, 6), GCNConv(5, 6), GCNConv(6, 3)

    def forward(self, x, edge_index):
        return self.c(F.relu(self.a(x, edge_index) + self.b(x, edge_index)), edge_index)


def test_more_steps_than_hops_are_explained_unpruned(monkeypatch):
    torch.manual_seed(0)
    model = Parallel().double().eval()
    x, edge_index, _ = inputs(None)
    unpruned = explain(model, x, edge_index, INDEX, prune=False, num_hops=2)
    plans = spy_on_plans(monkeypatch)
    calls, original = [], subgraphs.union_graph
    monkeypatch.setattr(subgraphs, "union_graph", lambda *a, **k: calls.append(a[9]) or original(*a, **k))
    again = explain(model, x, edge_index, INDEX, chunk_size=3, num_hops=2)
    assert_same(again, unpruned)
    assert len(plans) == 1  # the first chunk only: the later ones are not pruned per layer
    assert not plans[0].exact and plans[0].calls == 3 and plans[0].kept[2] is None
    # GCN counts the border's degrees from the start; the inexact schedule sends the chunk to the whole border
    assert calls == ["counted", "all", "all", "all"]


@pytest.mark.parametrize("name", ["gcn", "gin"])
def test_a_pruned_pass_whose_outputs_differ_is_explained_again_unpruned(name, monkeypatch):
    """The targets' outputs are compared with the full graph's: a schedule that prunes what they
    read (here: every node taken one hop farther than it is) is caught, and the chunk explained
    again without per-layer pruning."""
    model = model_of(name)
    x, edge_index, _ = inputs(None)
    unpruned = explain(model, x, edge_index, INDEX, prune=False)
    plans = spy_on_plans(monkeypatch)
    too_far = subgraphs.pruned_layers
    monkeypatch.setattr(subgraphs, "pruned_layers", lambda m, depth, hops, groups: too_far(m, depth + 1, hops, groups))
    again = explain(model, x, edge_index, INDEX, chunk_size=3)
    assert_same(again, unpruned)
    # pruned per layer with the border counted, then kept whole, then not per layer (GIN: the border left out
    # first)
    assert len(plans) == (2 if name == "gcn" else 3) and all(p.exact for p in plans)


def test_a_call_on_other_nodes_or_a_sparse_adjacency_passes_every_edge():
    conv = GCNConv(5, 6).double()
    x, edge_index, _ = inputs(None)
    depth = torch.zeros(x.shape[0], dtype=torch.long)
    with pruned_layers(conv, depth, 1) as plan:
        conv(x[:30], edge_index[:, (edge_index < 30).all(0)])  # 30 nodes, not the plan's 50
    assert plan.kept == [None] and plan.exact
    with pruned_layers(conv, depth, 1) as plan:
        conv(x, edge_index)
    loops = int((edge_index[0] == edge_index[1]).sum())  # replaced by the layer's own
    assert plan.kept[0] == edge_index.shape[1] - loops + x.shape[0]  # every edge into depth 0, and the loops
    with pytest.raises(TypeError, match="depth"):
        LayerPlan(depth.float(), 1)
    with pytest.raises(ValueError, match="hops"):
        with pruned_layers(conv, depth, -1):
            pass


def test_the_hooks_do_nothing_outside_the_block():
    conv = GCNConv(5, 6).double()
    x, edge_index, _ = inputs(None)
    full = conv(x, edge_index)
    depth = torch.full((x.shape[0],), 5, dtype=torch.long)
    with pruned_layers(conv, depth, 1) as plan:
        pruned = conv(x, edge_index)  # every node too far: only the bias
    assert torch.equal(pruned, conv.bias.expand_as(pruned).detach())
    assert plan.kept == [0]
    assert torch.equal(conv(x, edge_index), full)


@settings(max_examples=12, deadline=None)
@given(name=st.sampled_from(["gcn", "gat", "gin", "sage", "gine"]), n=st.integers(2, 40), per_node=st.integers(0, 5),
       targets=st.integers(1, 6), seed=st.integers(0, 2**16), chunk=st.sampled_from([None, 2]))
def test_pruned_equals_unpruned_on_random_graphs(name, n, per_node, targets, seed, chunk):
    model = model_of(name, seed)
    x, edge_index, kwargs = inputs(MODELS[name][1], n=n, e=n * per_node, seed=seed)
    index = torch.randint(0, n, (targets,), generator=torch.Generator().manual_seed(seed))
    unpruned = explain(model, x, edge_index, index, prune=False, chunk_size=chunk, **kwargs)
    pruned = explain(model, x, edge_index, index, chunk_size=chunk, **kwargs)
    assert_same(pruned, unpruned)


def test_the_accounts_need_no_second_backward(monkeypatch):
    """With the rows of every tensor grouped (``LayerPlan.row_groups``), the biases are split by
    target from the one backward; the unpruned pass (no plan) splits them with one more."""
    from lrp_lib.explain import accounting

    reruns, original = [], accounting._rerun
    monkeypatch.setattr(accounting, "_rerun", lambda *a: reruns.append(1) or original(*a))
    for name in ("gcn", "gat"):  # (GAT: also amounts on its attention weights' rows, all zero)
        reruns.clear()
        model = model_of(name)
        x, edge_index, kwargs = inputs(MODELS[name][1])
        unpruned = explain(model, x, edge_index, INDEX, "zplus", prune=False, **kwargs)
        assert len(reruns) == 1
        pruned = explain(model, x, edge_index, INDEX, "zplus", **kwargs)
        assert len(reruns) == 1
        assert_same(pruned, unpruned)
        assert bool((pruned["bias"] != 0).all())


def test_a_tally_splits_by_rows_or_says_it_cannot():
    """What each row kept (``Tally.rows``, by row count: +what node rows received less what they passed on, -what
    edge rows did) summed by the group of each row; None where a row that kept something has no group, or where
    an amount came without its rows."""
    from lrp_lib.explain.mode.tally import Tally

    tally = Tally()
    nodes, edges = torch.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]), torch.tensor([0.5, 0.25])
    tally.rows, tally.unsplit = {3: nodes.sum(1).double(), 2: -edges.double()}, False
    tally.absorb("a", nodes.sum() - edges.sum())
    groups = {3: torch.tensor([0, 1, 1]), 2: torch.tensor([1, 0])}
    torch.testing.assert_close(tally.split(groups, 2), torch.tensor([3.0 - 0.25, 18.0 - 0.5], dtype=torch.float64))
    assert tally.total(tally.absorbed) == 21.0 - 0.75
    assert tally.split({3: groups[3]}, 2) is None  # the edges' rows have no groups
    assert tally.split({3: groups[3], 2: None}, 2) is None
    tally.rows[5] = torch.zeros(5, dtype=torch.float64)  # rows without groups, but nothing kept on them
    torch.testing.assert_close(tally.split(groups, 2), torch.tensor([3.0 - 0.25, 18.0 - 0.5], dtype=torch.float64))
    tally.unsplit = True  # an amount without rows
    assert tally.split(groups, 2) is None
