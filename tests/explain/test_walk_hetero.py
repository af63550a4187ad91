"""Walks on heterogeneous graphs: exact against an enumeration reference written from the definition
(float64, LRP-0, bias-free), marginals against LRPExplainer per node type and edge type, top walks
against brute force, refusals.

The reference reads only the modules' weights: each layer is, per target node type tau and node k,
``h_tau[k] = sum_sigma sum_j B[(sigma, tau)][k, j] @ in_sigma[j]`` (the messages of every edge type
sigma -> tau and the root weights, a block from (tau, k) to (tau, k)); a walk's LRP-0 relevance in a
bias-free ReLU network is its contribution in the network linearised at its ReLU gates: the product
along the walk of the blocks and the gates, times x_{j_0}.  Its forward is checked against the model.
"""
from __future__ import annotations

import itertools

import pytest
import torch
from torch import nn
from torch_geometric.nn import GCNConv, GraphConv, HeteroConv, HGTConv, SAGEConv, to_hetero
from torch_geometric.nn.conv.gcn_conv import gcn_norm

from lrp_lib.core.rules import Epsilon
from lrp_lib.explain.explainer import Explainer, LRPExplainer
from lrp_lib.explain.mode.function_mode import UnsupportedModelError
from lrp_lib.explain.walks import (HeteroWalkModel, WalksUndefinedError, all_walks, subgraph_relevance, top_walks,
                                   walk_relevance, walk_scores)

HID = 3
X = {"a": torch.randn(5, 3, generator=torch.Generator().manual_seed(1), dtype=torch.float64),
     "b": torch.randn(4, 2, generator=torch.Generator().manual_seed(2), dtype=torch.float64)}
EI = {("a", "to", "b"): torch.tensor([[0, 1, 2, 3, 4, 0], [0, 1, 2, 3, 0, 2]]),
      ("b", "rev", "a"): torch.tensor([[0, 1, 2, 3, 2], [1, 2, 3, 4, 0]]),
      ("a", "near", "a"): torch.tensor([[0, 1, 2, 3, 2], [1, 2, 3, 4, 2]])}   # (2, 2): a loop
TYPES = ["a", "b"]
OFF = {"a": 0, "b": 5}
N = 9


class Body(nn.Module):
    def __init__(self, depth=2):
        super().__init__()
        self.convs = nn.ModuleList([SAGEConv((-1, -1), HID, bias=False) for _ in range(depth)])

    def forward(self, x, edge_index):
        for i, conv in enumerate(self.convs):
            x = conv(x.relu() if i else x, edge_index)
        return x


class HeteroStack(nn.Module):
    """HeteroConv layers {a->b: SAGE, b->a: GraphConv, a->a: GCN (or GraphConv)}, ReLU between."""

    def __init__(self, depth=2, gcn=True):
        super().__init__()
        self.layers = nn.ModuleList([HeteroConv({
            ("a", "to", "b"): SAGEConv((-1, -1), HID, bias=False),
            ("b", "rev", "a"): GraphConv((-1, -1), HID, bias=False),
            ("a", "near", "a"): GCNConv(-1, HID, bias=False) if gcn else GraphConv(-1, HID, bias=False)},
            aggr="sum") for _ in range(depth)])

    def forward(self, x, edge_index):
        for i, layer in enumerate(self.layers):
            x = layer({k: v.relu() for k, v in x.items()} if i else x, edge_index)
        return x


class Model(nn.Module):
    """encoder, then ReLU and Linear(HID, 1): node type 'a' (node level) or a sum over all nodes."""

    def __init__(self, encoder, level):
        super().__init__()
        self.encoder, self.level = encoder, level
        self.head = nn.ModuleDict({k: nn.Linear(HID, 1, bias=False) for k in TYPES})

    def forward(self, x, edge_index):
        h = self.encoder(x, edge_index)
        if self.level == "node":
            return self.head["a"](h["a"].relu())
        return sum(self.head[k](h[k].relu()).sum(0) for k in sorted(h))


def make(kind, level, depth=2, seed=0):
    torch.manual_seed(seed)
    enc = to_hetero(Body(depth), (TYPES, list(EI)), aggr="sum") if kind == "to_hetero" else \
        HeteroStack(depth, gcn=kind == "heteroconv_gcn")
    with torch.no_grad():
        enc({k: v.float() for k, v in X.items()}, EI)
    model = Model(enc.double(), level).double().eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "bias" in name:
                p.zero_()
    return model


# ---------------------------------------------------------------- the reference
def _layer_blocks(model, kind, layer):
    """{(sigma, tau): (n_tau, n_sigma, out, in)} of one layer, from the weights."""
    n = {k: v.shape[0] for k, v in X.items()}
    blocks = {}

    def add(s, t, k, j, m):
        key = (s, t)
        if key not in blocks:
            blocks[key] = torch.zeros(n[t], n[s], *m.shape, dtype=torch.float64)
        blocks[key][k, j] += m

    for et, ei in EI.items():
        s, _, t = et
        if kind == "to_hetero":
            conv = model.encoder.convs[layer]["__".join(et)]
        else:
            conv = model.encoder.layers[layer].convs[et]
        if isinstance(conv, SAGEConv):
            deg = torch.bincount(ei[1], minlength=n[t])
            for j, k in ei.t().tolist():
                add(s, t, k, j, conv.lin_l.weight / deg[k])
            for k in range(n[t]):
                add(t, t, k, k, conv.lin_r.weight)
        elif isinstance(conv, GraphConv):
            for j, k in ei.t().tolist():
                add(s, t, k, j, conv.lin_rel.weight)
            for k in range(n[t]):
                add(t, t, k, k, conv.lin_root.weight)
        else:  # GCN: D^-1/2 (A + I) D^-1/2 x W
            e, w = gcn_norm(ei, None, n[t], add_self_loops=True, dtype=torch.float64)
            for (j, k), c in zip(e.t().tolist(), w.tolist()):
                add(s, t, k, j, c * conv.lin.weight)
    return blocks


class Reference:
    def __init__(self, model, kind, level, depth=2, index=None):
        self.blocks = [_layer_blocks(model, kind, i) for i in range(depth)]
        h = X
        self.gates = []
        for i, blocks in enumerate(self.blocks):
            inp = {k: v.relu() for k, v in h.items()} if i else h
            self.gates.append({k: (v > 0).to(torch.float64) for k, v in h.items()} if i else None)
            h = {}
            for (s, t), b in blocks.items():
                h[t] = h.get(t, 0) + torch.einsum("kjoi,ji->ko", b, inp[s])
        self.h = h
        self.top = {k: (v > 0).to(torch.float64) * model.head[k].weight[0] for k, v in h.items()}
        if level == "node":
            self.top = {k: v * (torch.arange(v.shape[0]) == index).unsqueeze(1) if k == "a" else 0 * v
                        for k, v in self.top.items()}
        self.depth = depth

    def output(self, model, level, index):
        y = {k: model.head[k](v.relu()).detach() for k, v in self.h.items()}
        return float(y["a"][index]) if level == "node" else float(sum(v.sum() for v in y.values()))

    def walk(self, typed):
        """LRP-0 relevance of one typed walk, from the blocks (0 where a step has no block)."""
        (tL, jL) = typed[-1]
        v = self.top[tL][jL]
        for t in range(self.depth, 0, -1):
            (s, j), (d, k) = typed[t - 1], typed[t]
            b = self.blocks[t - 1].get((s, d))
            if b is None:
                return 0.0
            v = b[k, j].t() @ v
            if t > 1:
                v = v * self.gates[t - 1][s][j]
        return float(X[typed[0][0]][typed[0][1]] @ v)


def _typed(g):
    return ("a", g) if g < 5 else ("b", g - 5)


def _explain(model, level, index):
    return Explainer(model, algorithm=LRPExplainer(rule=Epsilon(0.0)), explanation_type="model",
                     node_mask_type="attributes", edge_mask_type="object",
                     model_config=dict(mode="regression", task_level=level, return_type="raw"))(
        X, EI, index=index if level == "node" else None)


CASES = [("to_hetero", "node", 1), ("to_hetero", "graph", None), ("heteroconv_gcn", "node", 2),
         ("heteroconv_gcn", "graph", None)]


# ---------------------------------------------------------------- exact walks
@pytest.mark.parametrize("kind,level,index", CASES)
def test_every_walk_equals_the_reference_and_no_walk_is_missing(kind, level, index):
    model = make(kind, level)
    ref = Reference(model, kind, level, index=index)
    with torch.no_grad():
        y = float(model(X, EI)[index] if level == "node" else model(X, EI))
    assert ref.output(model, level, index) == pytest.approx(y, rel=1e-12)   # the reference is the model
    wm = HeteroWalkModel(model, X, EI, Epsilon(0.0), index=index)
    assert wm.depth == 2 and wm.num_nodes == N
    walks = all_walks(wm)
    got = wm.walk_relevance(walks)
    scale = max(1.0, abs(y))
    listed = {tuple(w) for w in walks.tolist()}
    for seq in itertools.product(range(N), repeat=3):
        r = ref.walk(tuple(_typed(g) for g in seq))
        if seq not in listed:
            assert abs(r) <= 1e-12 * scale, (seq, r)
    want = torch.tensor([ref.walk(tuple(_typed(g) for g in w)) for w in walks.tolist()], dtype=torch.float64)
    assert float((got - want).abs().max()) <= 1e-9 * scale
    assert float(want.abs().max()) > 1e-3 * scale
    assert float(got.sum()) == pytest.approx(y, rel=1e-9, abs=1e-12)        # LRP-0, bias-free: conservation
    # typed walks give the same numbers
    typed = [tuple(_typed(g) for g in w) for w in walks[:20].tolist()]
    torch.testing.assert_close(walk_relevance(model, X, EI, typed, Epsilon(0.0), index=index), got[:20],
                               rtol=0, atol=1e-12)
    assert wm.typed_walks(walks[:20]) == typed


@pytest.mark.parametrize("kind,level,index", CASES)
def test_walks_summed_by_start_node_are_lrpexplainers_node_relevance(kind, level, index):
    model = make(kind, level)
    wm = HeteroWalkModel(model, X, EI, Epsilon(0.0), index=index)
    walks = all_walks(wm)
    marg = torch.zeros(N, dtype=torch.float64).index_add_(0, walks[:, 0], wm.walk_relevance(walks))
    e = _explain(model, level, index) if kind == "to_hetero" else None
    for t in TYPES:
        got = marg[OFF[t]:OFF[t] + X[t].shape[0]]
        torch.testing.assert_close(got, wm.node_relevance()[t], rtol=0, atol=1e-12)
        if e is not None:
            torch.testing.assert_close(got, e[t].node_relevance.sum(-1), rtol=0, atol=1e-12)
        else:  # LRPExplainer refuses GCN's added loops for edge relevance: node relevance alone
            node_only = Explainer(model, algorithm=LRPExplainer(rule=Epsilon(0.0)), explanation_type="model",
                                  node_mask_type="attributes",
                                  model_config=dict(mode="regression", task_level=level, return_type="raw"))(
                X, EI, index=index if level == "node" else None)
            torch.testing.assert_close(got, node_only[t].node_relevance.sum(-1), rtol=0, atol=1e-12)


@pytest.mark.parametrize("kind", ["to_hetero", "heteroconv"])
@pytest.mark.parametrize("level,index", [("node", 1), ("graph", None)])
def test_step_marginals_are_lrpexplainers_edge_relevance_per_edge_type(kind, level, index):
    model = make(kind, level)
    wm = HeteroWalkModel(model, X, EI, Epsilon(0.0), index=index)
    e = _explain(model, level, index)
    carried = wm.edge_relevance("carried")
    for et, ei in EI.items():
        torch.testing.assert_close(carried[et], e[et].edge_relevance, rtol=0, atol=1e-12)
    assert any(float(v.abs().sum()) > 1e-3 for v in carried.values())
    # bias-free: what a step carries along j -> k is the walks through it (j != k)
    walks = all_walks(wm)
    rel = wm.walk_relevance(walks)
    through = wm.edge_relevance("walks")
    for et, ei in EI.items():
        want = torch.zeros(ei.shape[1], dtype=torch.float64)
        for t in range(1, wm.depth + 1):
            for m, (j, k) in enumerate(ei.t().tolist()):
                g = (walks[:, t - 1] == OFF[et[0]] + j) & (walks[:, t] == OFF[et[2]] + k)
                want[m] += float(rel[g].sum())
        loop = (ei[0] == ei[1]) & (et[0] == et[2])
        torch.testing.assert_close(through[et], want, rtol=0, atol=1e-12)
        torch.testing.assert_close(carried[et][~loop], want[~loop], rtol=0, atol=1e-12)


def test_subgraph_relevance_is_the_sum_over_the_walks_inside():
    model = make("to_hetero", "graph")
    wm = HeteroWalkModel(model, X, EI, Epsilon(0.0))
    walks = all_walks(wm)
    rel = wm.walk_relevance(walks)
    inside = torch.tensor([0, 1, 2, 5, 6, 7])
    want = float(rel[torch.isin(walks, inside).all(1)].sum())
    got = subgraph_relevance(model, X, EI, inside, Epsilon(0.0))
    assert float(got) == pytest.approx(want, rel=1e-9, abs=1e-12)


# ---------------------------------------------------------------- top walks
@pytest.mark.parametrize("signed", [False, True])
@pytest.mark.parametrize("kind,level,index", [("to_hetero", "graph", None), ("heteroconv_gcn", "node", 2)])
def test_top_walks_are_the_brute_force_top(kind, level, index, signed):
    model = make(kind, level)
    ref = Reference(model, kind, level, index=index)
    # every walk: the sequences with a step along an edge or a self step at each step (the other
    # sequences have relevance 0 by the reference, test_every_walk_...), ending at the explained node
    wm = HeteroWalkModel(model, X, EI, Epsilon(0.0), index=index)
    every = [tuple(_typed(g) for g in seq) for seq in itertools.product(range(N), repeat=3)
             if (index is None or seq[-1] == index)
             and all(s == d or any(OFF[et[0]] + j == s and OFF[et[2]] + k == d for et, ei in EI.items()
                                   for j, k in ei.t().tolist()) for s, d in zip(seq, seq[1:]))]
    assert len(every) == all_walks(wm).shape[0]
    scored = sorted(((ref.walk(w), w) for w in every), key=lambda p: -(p[0] if signed else abs(p[0])))
    walks, rel = top_walks(model, X, EI, 6, Epsilon(0.0), index=index, signed=signed)
    assert len(walks) == 6 and all(isinstance(w[0], tuple) for w in walks)
    want = torch.tensor([r for r, _ in scored[:6]], dtype=torch.float64)
    torch.testing.assert_close(rel, want, rtol=0, atol=1e-9)
    for w, r in zip(walks, rel):
        assert ref.walk(w) == pytest.approx(float(r), abs=1e-9)


def test_walk_scores_are_per_node_type_and_edge_type():
    model = make("to_hetero", "graph")
    walks, rel = top_walks(model, X, EI, 8, Epsilon(0.0), signed=True)
    node, edge = walk_scores(model, X, EI, 8, Epsilon(0.0), signed=True)
    want_node = {t: torch.zeros(X[t].shape[0], dtype=torch.float64) for t in TYPES}
    want_edge = {et: torch.zeros(ei.shape[1], dtype=torch.float64) for et, ei in EI.items()}
    for w, r in zip(walks, rel.tolist()):
        for t, j in w:
            want_node[t][j] += r
        for (s, j), (d, k) in zip(w, w[1:]):
            for et, ei in EI.items():
                hit = (ei[0] == j) & (ei[1] == k) if (et[0], et[2]) == (s, d) else torch.zeros(ei.shape[1], dtype=bool)
                want_edge[et][hit] += r / max(int(hit.sum()), 1)
    for t in TYPES:
        torch.testing.assert_close(node[t], want_node[t], rtol=0, atol=1e-12)
    for et in EI:
        torch.testing.assert_close(edge[et], want_edge[et], rtol=0, atol=1e-12)
    assert any(float(v.abs().sum()) > 0 for v in edge.values())


# ---------------------------------------------------------------- refusals and bad input
class Mixing(nn.Module):
    """Two to_hetero SAGE layers; between them type b's rows get type a's mean: relevance moves between
    nodes (and node types) without a message."""

    def __init__(self):
        super().__init__()
        self.one = to_hetero(Body(1), (TYPES, list(EI)), aggr="sum")
        self.two = to_hetero(Body(1), (TYPES, list(EI)), aggr="sum")

    def forward(self, x, edge_index):
        h = {k: v.relu() for k, v in self.one(x, edge_index).items()}
        h = {"a": h["a"], "b": h["b"] + h["a"].mean(0, keepdim=True)}
        return self.two(h, edge_index)["b"].relu().sum()[None]


def test_relevance_moving_between_node_types_without_a_message_is_refused():
    model = Mixing()
    with torch.no_grad():
        model({k: v.float() for k, v in X.items()}, EI)
    model = model.double().eval()
    with pytest.raises(WalksUndefinedError, match="without a message") as err:
        HeteroWalkModel(model, X, EI, Epsilon(0.0))
    assert "two.convs" in str(err.value)


def test_hgtconv_is_refused_as_unsupported_not_as_undefined():
    class HGT(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = HGTConv(-1, 4, (TYPES, list(EI)), heads=2)

        def forward(self, x, edge_index):
            return self.conv(x, edge_index)["a"].sum(0, keepdim=True)

    model = HGT()
    with torch.no_grad():
        model({k: v.float() for k, v in X.items()}, EI)
    with pytest.raises(UnsupportedModelError, match="concatenates node types") as err:
        HeteroWalkModel(model.double().eval(), X, EI, Epsilon(0.0))
    assert not isinstance(err.value, WalksUndefinedError)


def test_bad_input_names_the_argument():
    model = make("to_hetero", "node")
    wm = HeteroWalkModel(model, X, EI, Epsilon(0.0), index=("a", 1))
    assert wm.index == 1
    with pytest.raises(ValueError, match=r"walks\[0\]\[1\]"):
        wm.walk_relevance([(("a", 0), ("c", 0), ("a", 1))])
    with pytest.raises(ValueError, match=r"walks\[0\]\[2\]"):
        wm.walk_relevance([(("a", 0), ("a", 1), ("a", 7))])
    with pytest.raises(ValueError, match="not an edge of that step"):
        wm.walk_relevance([(("a", 0), ("b", 3), ("a", 1))])
    with pytest.raises(ValueError, match="explained node"):
        wm.walk_relevance([(("a", 0), ("a", 0), ("a", 0))])
    with pytest.raises(ValueError, match="index"):
        HeteroWalkModel(model, X, EI, Epsilon(0.0), index=9)
    with pytest.raises(ValueError, match="index"):
        HeteroWalkModel(model, X, EI, Epsilon(0.0), index=("b", 1))
    with pytest.raises(ValueError, match="edge types must be"):
        HeteroWalkModel(model, X, {("a", "to", "c"): EI[("a", "to", "b")]}, Epsilon(0.0), index=1)
    with pytest.raises(ValueError, match="one per message-passing module"):
        HeteroWalkModel(model, X, EI, [Epsilon(0.0)] * 2, index=1)   # to_hetero: 3 edge types x 2 layers
