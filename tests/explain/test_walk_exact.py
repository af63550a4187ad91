"""Walks on the generic mechanism: exact against an enumeration reference written from the
definition (float64, LRP-0, bias-free), for many conv types; marginals against LRPExplainer.

The reference reads only the modules' weights (and, for attention, the attention weights the conv
returns, held constant as CP-LRP does): each layer is ``z_K = sum_tau sum_J C_tau[K, J] h_J W_tau``;
a walk's LRP-0 relevance in a bias-free ReLU network is its contribution in the network linearised
at its ReLU gates, the product along the walk of ``C[K, J] W`` and the gates, times x_{j_0}.
"""
from __future__ import annotations

import itertools

import pytest
import torch
from torch import nn
from torch_geometric.nn import (ChebConv, ClusterGCNConv, GATConv, GATv2Conv, GCNConv, GINConv, GraphConv,
                                SAGEConv, SGConv, TAGConv, TransformerConv, global_add_pool, JumpingKnowledge)
from torch_geometric.nn import GINEConv

from lrp_lib.explain.explainer import Explainer, LRPExplainer
from lrp_lib.explain.walks import WalkModel, all_walks, subgraph_relevance, walk_relevance

N, F_IN, HID = 6, 3, 4
EDGES = [(0, 1), (1, 2), (2, 3), (3, 0), (2, 4), (4, 5), (1, 4)]
EDGE_INDEX = torch.tensor([[a for a, b in EDGES] + [b for a, b in EDGES] + [5],
                           [b for a, b in EDGES] + [a for a, b in EDGES] + [0]])


def _conv(kind, i, o, bias=False):
    return {
        "gcn": lambda: GCNConv(i, o, bias=bias),
        "graphconv": lambda: GraphConv(i, o, bias=bias),
        "graphconv_mean": lambda: GraphConv(i, o, aggr="mean", bias=bias),
        "sage": lambda: SAGEConv(i, o, bias=bias),
        "gin": lambda: GINConv(nn.Linear(i, o, bias=bias), eps=0.3),
        "gat": lambda: GATConv(i, o, bias=bias),
        "gatv2": lambda: GATv2Conv(i, o, bias=bias),
        "transformer": lambda: TransformerConv(i, o, bias=bias),
        "cheb": lambda: ChebConv(i, o, K=2, bias=bias),
        "tag": lambda: TAGConv(i, o, K=1, bias=bias),
        "sg": lambda: SGConv(i, o, K=1, bias=bias),
        "clustergcn": lambda: ClusterGCNConv(i, o, bias=bias),
    }[kind]()


KINDS = ["gcn", "graphconv", "graphconv_mean", "sage", "gin", "gat", "gatv2", "transformer", "tag",
         "sg", "clustergcn"]


class Net(nn.Module):
    def __init__(self, kind, node_level=False, bias=False):
        super().__init__()
        self.convs = nn.ModuleList([_conv(kind, F_IN, HID, bias), _conv(kind, HID, HID, bias)])
        self.head = nn.Linear(HID, 2, bias=bias)
        self.node_level = node_level

    def forward(self, x, edge_index, batch=None):
        for conv in self.convs:
            x = conv(x, edge_index).relu()
        if not self.node_level:
            x = global_add_pool(x, batch)
        return self.head(x)


def make(kind, node_level=False, bias=False, seed=0):
    torch.manual_seed(seed)
    model = Net(kind, node_level, bias).double().eval()
    with torch.no_grad():  # attention parameters away from zero, so that attention varies
        for name, p in model.named_parameters():
            if "att" in name:
                p.mul_(3)
    return model, torch.randn(N, F_IN, dtype=torch.float64)


def _dense(ei, w=None):
    A = torch.zeros(N, N, dtype=torch.float64)
    A.index_put_((ei[1], ei[0]), torch.ones(ei.shape[1], dtype=torch.float64) if w is None else w.double(),
                 accumulate=True)
    return A


def _spec(conv, h):
    """[(C (N x N) with C[K, J], W (in x out))]: the layer z = sum C h W, from the definitions."""
    A, eye = _dense(EDGE_INDEX), torch.eye(N, dtype=torch.float64)
    if isinstance(conv, GCNConv):
        At = A + eye
        d = At.sum(1).pow(-0.5)
        return [(d[:, None] * At * d[None, :], conv.lin.weight.T)]
    if isinstance(conv, ClusterGCNConv):  # diag_lambda = 0: D^-1 (A + I) x W_out + x W_root
        At = A + eye                        # (PyG computes 1 / deg in float32: so does the reference)
        return [(At * (1.0 / At.sum(1, keepdim=True).float()).double(), conv.lin_out.weight.T),
                (eye, conv.lin_root.weight.T)]
    if isinstance(conv, GraphConv):
        Am = A / A.sum(1).clamp(min=1)[:, None] if conv.aggr == "mean" else A
        return [(eye, conv.lin_root.weight.T), (Am, conv.lin_rel.weight.T)]
    if isinstance(conv, SAGEConv):
        return [(eye, conv.lin_r.weight.T), (A / A.sum(1).clamp(min=1)[:, None], conv.lin_l.weight.T)]
    if isinstance(conv, GINConv):
        return [(A + (1 + float(conv.eps)) * eye, conv.nn.weight.T)]
    if isinstance(conv, (GATConv, GATv2Conv, TransformerConv)):
        with torch.no_grad():
            _, (ei, alpha) = conv(h, EDGE_INDEX, return_attention_weights=True)
        C = _dense(ei, alpha.view(-1))
        if isinstance(conv, GATConv):
            return [(C, conv.lin.weight.T)]
        if isinstance(conv, GATv2Conv):
            return [(C, conv.lin_l.weight.T)]
        return [(C, conv.lin_value.weight.T), (eye, conv.lin_skip.weight.T)]
    if isinstance(conv, ChebConv):  # sym, lambda_max 2: T1 = -D^-1/2 A D^-1/2
        d = A.sum(1).pow(-0.5)
        d[torch.isinf(d)] = 0
        return [(eye, conv.lins[0].weight.T), (-(d[:, None] * A * d[None, :]), conv.lins[1].weight.T)]
    if isinstance(conv, TAGConv):  # gcn_norm without self-loops
        d = A.sum(1).pow(-0.5)
        d[torch.isinf(d)] = 0
        return [(eye, conv.lins[0].weight.T), (d[:, None] * A * d[None, :], conv.lins[1].weight.T)]
    if isinstance(conv, SGConv):
        At = A + eye
        d = At.sum(1).pow(-0.5)
        return [(d[:, None] * At * d[None, :], conv.lin.weight.T)]
    raise TypeError(conv)


def reference(model, x, index=None, target=1):
    """Every walk (enumerated: each step has some C[K, J] != 0) and its LRP-0 relevance."""
    layers, h = [], x
    with torch.no_grad():
        for conv in model.convs:
            terms = _spec(conv, h)
            z = sum(Cm @ h @ W for Cm, W in terms)
            assert torch.allclose(z, conv(h, EDGE_INDEX), rtol=0, atol=1e-12)  # the spec is the layer
            layers.append((terms, z > 0))
            h = z.clamp(min=0)
    v_out = model.head.weight[target].detach()
    ends = [index] if index is not None else range(N)
    walks, rel = [], []
    for w in itertools.product(range(N), repeat=len(layers) + 1):
        if w[-1] not in ends or not all(any(Cm[w[t + 1], w[t]] != 0 for Cm, _ in layers[t][0])
                                        for t in range(len(layers))):
            continue
        v = v_out.clone()
        for t in range(len(layers), 0, -1):
            terms, gate = layers[t - 1]
            v = v * gate[w[t]]
            v = sum(Cm[w[t], w[t - 1]] * (W @ v) for Cm, W in terms)
        walks.append(w)
        rel.append(float(x[w[0]] @ v.detach()))
    return torch.tensor(walks), torch.tensor(rel, dtype=torch.float64)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("index", [None, 2])
def test_lrp0_walk_relevance_is_the_reference(kind, index):
    model, x = make(kind, node_level=index is not None)
    walks, expected = reference(model, x, index)
    wm = WalkModel(model, x, EDGE_INDEX, "z", index=index, target=1)
    got = wm.walk_relevance(walks)
    assert torch.allclose(got, expected, rtol=0, atol=1e-9), float((got - expected).abs().max())
    # every other walk of the model's steps carries nothing, and all walks sum to the output
    every = all_walks(wm)
    total = wm.walk_relevance(every)
    assert float(total.sum()) == pytest.approx(float(expected.sum()), abs=1e-9)
    assert float(total.sum()) == pytest.approx(float(wm.output), abs=1e-9)


def _explain(model, x, edge_index, rule, index=None, **kwargs):
    explainer = Explainer(model, algorithm=LRPExplainer(rule=rule), explanation_type="phenomenon",
                          node_mask_type="attributes", edge_mask_type="object",
                          model_config=dict(mode="multiclass_classification",
                                            task_level="node" if index is not None else "graph", return_type="raw"))
    target = torch.ones(N if index is not None else 1, dtype=torch.long)
    return explainer(x, edge_index, target=target, index=index, **kwargs)


def _edge_marginal(wm, edge_index, attr=None):
    """Per input edge: the relevance its messages carry over all steps (LRPExplainer's edge relevance)."""
    n, edge = wm.num_nodes, torch.zeros(edge_index.shape[1], dtype=torch.float64)
    key = (edge_index[0] * n + edge_index[1]).tolist()
    for pairs, walks, carried, attrs in wm.step_relevance():
        for p, (a, b) in enumerate(pairs.tolist()):
            ids = [i for i, kk in enumerate(key) if kk == a * n + b]
            for i in ids:
                edge[i] += carried[p] / len(ids)
                if attrs is not None:
                    edge[i] += attrs[p] / len(ids)
    return edge


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("rule", ["epsilon", "gamma", "zplus"])
@pytest.mark.parametrize("index", [None, 2])
def test_marginals_are_lrp_explainer_relevance_with_biases(kind, rule, index):
    model, x = make(kind, node_level=index is not None, bias=True)
    wm = WalkModel(model, x, EDGE_INDEX, rule, index=index, target=1)
    walks = all_walks(wm)
    rel = wm.walk_relevance(walks)
    explanation = _explain(model, x, EDGE_INDEX, rule, index)
    node = torch.zeros(N, dtype=torch.float64).index_add_(0, walks[:, 0], rel)
    assert torch.allclose(node, explanation.node_relevance.sum(-1), atol=1e-9)
    assert torch.allclose(wm.node_relevance(), node, atol=1e-9)
    # the walks, the biases and the stabilisers account for the whole output
    assert float(rel.sum()) + wm.bias_relevance == pytest.approx(float(wm.output), abs=1e-9)
    assert wm.bias_relevance == pytest.approx(float(explanation.bias_relevance), abs=1e-9)
    # per step: the walks through it plus what the earlier biases keep of it; summed, the edge relevance
    for t, (pairs, through, carried, _) in enumerate(wm.step_relevance(), 1):
        for p in range(0, pairs.shape[0], 5):
            a, b = pairs[p].tolist()
            mine = walks[(walks[:, t - 1] == a) & (walks[:, t] == b)]
            assert float(through[p]) == pytest.approx(float(rel[(walks[:, t - 1] == a) & (walks[:, t] == b)].sum()),
                                                      abs=1e-9), (t, a, b, mine.shape)
    no_loop = EDGE_INDEX[0] != EDGE_INDEX[1]
    assert torch.allclose(_edge_marginal(wm, EDGE_INDEX)[no_loop], explanation.edge_relevance[no_loop], atol=1e-9)


class GINE(nn.Module):
    def __init__(self):
        super().__init__()
        self.c1 = GINEConv(nn.Linear(F_IN, HID), edge_dim=2)
        self.c2 = GINEConv(nn.Linear(HID, HID), edge_dim=2)
        self.head = nn.Linear(HID, 2)

    def forward(self, x, edge_index, edge_attr, batch=None):
        x = self.c1(x, edge_index, edge_attr).relu()
        x = self.c2(x, edge_index, edge_attr).relu()
        return self.head(global_add_pool(x, batch))


class JKResidual(nn.Module):
    """GAT layers with a residual connection, layer norm, and a jumping-knowledge head."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(F_IN, HID)
        self.convs = nn.ModuleList(GATConv(HID, HID, heads=2, concat=False) for _ in range(3))
        self.norm = nn.LayerNorm(HID)
        self.jk = JumpingKnowledge("cat")
        self.head = nn.Linear(3 * HID, 2)

    def forward(self, x, edge_index, batch=None):
        h, hs = self.lin(x), []
        for conv in self.convs:
            h = self.norm(h + conv(h, edge_index)).relu()
            hs.append(h)
        return self.head(global_add_pool(self.jk(hs), batch))


@pytest.mark.parametrize("build", ["gine", "jk_residual"])
def test_edge_attr_residual_and_jumping_knowledge(build):
    torch.manual_seed(1)
    x = torch.randn(N, F_IN, dtype=torch.float64)
    kwargs = {}
    if build == "gine":
        model = GINE().double().eval()
        with torch.no_grad():  # a bias inside the messages keeps part of each edge's relevance that no walk
            model.c1.lin.bias.zero_()  # and no edge_attr entry holds; LRPExplainer counts it in the edge's
            model.c2.lin.bias.zero_()
        kwargs["edge_attr"] = torch.randn(EDGE_INDEX.shape[1], 2, dtype=torch.float64)
    else:
        model = JKResidual().double().eval()
    rule = "z" if build == "gine" else "epsilon"
    wm = WalkModel(model, x, EDGE_INDEX, rule, target=1, **kwargs)
    walks = all_walks(wm)
    rel = wm.walk_relevance(walks)
    explanation = _explain(model, x, EDGE_INDEX, rule, **kwargs)
    node = torch.zeros(N, dtype=torch.float64).index_add_(0, walks[:, 0], rel)
    assert torch.allclose(node, explanation.node_relevance.sum(-1), atol=1e-9)
    attr = 0.0 if wm.edge_attr_relevance is None else float(wm.edge_attr_relevance.sum())
    assert float(rel.sum()) + wm.bias_relevance + attr == pytest.approx(float(wm.output), abs=1e-8)
    if build == "gine":
        assert torch.allclose(wm.edge_attr_relevance, explanation.edge_attr_relevance, atol=1e-9)
        assert torch.allclose(_edge_marginal(wm, EDGE_INDEX), explanation.edge_relevance, atol=1e-9)
    # subgraph relevance is the sum over the walks inside
    s = torch.tensor([0, 1, 2, 4])
    inside = torch.isin(walks, s).all(1)
    got = subgraph_relevance(model, x, EDGE_INDEX, s, rule, target=1, **kwargs)
    assert float(got) == pytest.approx(float(rel[inside].sum()), abs=1e-9)
