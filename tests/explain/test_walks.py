"""lrp_lib.explain.walks against slow enumeration references written from the definitions.

(The gamma rule of the walks is the product's, LRPExplainer's: tests/explain/test_walk_exact.py
checks the walks' marginals against it; Schnake et al.'s one-denominator-per-layer reference below
is kept for LRP-0, where both agree.)

Two references, both dense and independent of lrp_lib.explain.walks (they only read the modules' weights):

* LRP-0: a walk's contribution in the network linearised at its ReLU gates, the product along the
  walk of the layers' Jacobian blocks (message coefficient x weight x gate), times x_{j_0};
* the gamma rule: Schnake et al.'s nested relevance, R_J = h_J * (sum_tau c_KJ W'_tau (R_K / z'_K)),
  with z'_K all modified contributions to the unit (bias included), node-wise layers by the same
  rule, the pool by proportion.

Every walk is enumerated (itertools.product over nodes, kept if each step has a message).
"""
from __future__ import annotations

import itertools

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from torch import nn
from torch_geometric.nn import GCNConv, GINConv, GraphConv, SAGEConv, global_add_pool, global_max_pool, global_mean_pool

from lrp_lib.explain.explainer import Explainer, LRPExplainer
from lrp_lib.core.rules import Epsilon, Gamma
from lrp_lib.explain.walks import (GreedySubgraph, WalkModel, all_walks, gamma_schedule, greedy_subgraph, subgraph_relevance,
                            top_walks, walk_relevance, walk_scores)

N, F_IN, HID, C, L = 6, 3, 4, 2, 3
EDGES = [(0, 1), (1, 2), (2, 3), (3, 0), (2, 4), (4, 5), (1, 4)]
EDGE_INDEX = torch.tensor([[a for a, b in EDGES] + [b for a, b in EDGES] + [5],
                           [b for a, b in EDGES] + [a for a, b in EDGES] + [0]])  # 5 -> 0 one way


class Net(nn.Module):
    def __init__(self, kind: str, node_level: bool = False, bias: bool = False, pool=global_add_pool):
        super().__init__()
        dims = [F_IN] + [HID] * L
        self.convs = nn.ModuleList(_conv(kind, dims[i], dims[i + 1], bias) for i in range(L))
        self.head = nn.Linear(HID, C, bias=bias)
        self.node_level, self.pool = node_level, pool

    def forward(self, x, edge_index, batch=None):
        for conv in self.convs:
            x = conv(x, edge_index).relu()
        if not self.node_level:
            x = self.pool(x, batch)
        return self.head(x)


def _conv(kind, i, o, bias):
    if kind == "gcn":
        return GCNConv(i, o, bias=bias)
    if kind == "graphconv":
        return GraphConv(i, o, bias=bias)
    if kind == "sage":
        return SAGEConv(i, o, bias=bias)
    if kind == "gin":
        return GINConv(nn.Sequential(nn.Linear(i, o, bias=bias), nn.ReLU(), nn.Linear(o, o, bias=bias)), eps=0.3)
    raise ValueError(kind)


def make(kind, node_level=False, bias=False, seed=0, pool=global_add_pool):
    torch.manual_seed(seed)
    model = Net(kind, node_level, bias, pool).double().eval()
    x = torch.randn(N, F_IN, dtype=torch.float64)
    return model, x


# ------------------------------------------------------------ the references
def _layer_spec(conv):
    """(terms [(C (N x N) with C[K, J], W (in x out) or None)], bias, node-wise ops after z)."""
    A = torch.zeros(N, N, dtype=torch.float64)
    A.index_put_((EDGE_INDEX[1], EDGE_INDEX[0]), torch.ones(EDGE_INDEX.shape[1], dtype=torch.float64), accumulate=True)
    eye = torch.eye(N, dtype=torch.float64)
    if isinstance(conv, GCNConv):
        At = A + eye
        d = At.sum(1).pow(-0.5)
        return [(d[:, None] * At * d[None, :], conv.lin.weight.T)], conv.bias, []
    if isinstance(conv, GraphConv):
        return [(eye, conv.lin_root.weight.T), (A, conv.lin_rel.weight.T)], conv.lin_rel.bias, []
    if isinstance(conv, SAGEConv):
        return [(eye, conv.lin_r.weight.T), (A / A.sum(1).clamp(min=1)[:, None], conv.lin_l.weight.T)], conv.lin_l.bias, []
    if isinstance(conv, GINConv):
        ops = [("lin", m.weight, m.bias) if isinstance(m, nn.Linear) else ("relu",) for m in conv.nn]
        return [(A + (1 + float(conv.eps)) * eye, None)], None, ops
    raise TypeError(conv)


def _div(a, b):
    """a / b, 0 where b = 0 (a unit or a pooled feature without any contribution passes nothing)."""
    return torch.where(b == 0, torch.zeros_like(a), a / torch.where(b == 0, torch.ones_like(b), b))


def _mod(w, gamma):
    return None if w is None else w + gamma * w.clamp(min=0)


class Reference:
    """Dense forward of Net recording what both references need."""

    def __init__(self, model: Net, x, gamma=0.0, index=None, target=1):
        """gamma: one value for every layer, or one per message-passing layer (layer t's applies to its
        conv and the Linears after it: GIN's nn, the head after the last layer)."""
        gammas = list(gamma) if isinstance(gamma, (list, tuple)) else [gamma] * L
        self.gamma, self.index, self.target = gammas[-1], index, target
        self.x = x
        self.layers = []
        h = x
        with torch.no_grad():
            for conv, gamma in zip(model.convs, gammas):
                terms, bias, ops = _layer_spec(conv)
                z = sum(Cm @ h @ (W if W is not None else torch.eye(h.shape[1], dtype=h.dtype)) for Cm, W in terms)
                zmod = sum(Cm @ h @ (_mod(W, gamma) if W is not None else torch.eye(h.shape[1], dtype=h.dtype))
                           for Cm, W in terms)
                if bias is not None:
                    z, zmod = z + bias, zmod + _mod(bias, gamma)
                rec = dict(h_in=h, terms=terms, z=z, zmod=zmod, ops=[], gamma=gamma)
                a = z
                for op in ops + [("relu",)]:  # the model's own ReLU after the conv
                    if op[0] == "relu":
                        rec["ops"].append(("relu", a))
                        a = a.clamp(min=0)
                    else:
                        _, W, b = op
                        out = a @ W.T + (0 if b is None else b)
                        outmod = a @ _mod(W, gamma).T + (0 if b is None else _mod(b, gamma))
                        rec["ops"].append(("lin", a, W, outmod))
                        a = out
                self.layers.append(rec)
                h = a
            self.h = h
            Wo, bo = model.head.weight, model.head.bias
            self.Wo, self.bo = Wo, bo
            if model.node_level:
                self.inp = h[index]
                self.pooled = None
            else:
                self.pooled = h.sum(0) if model.pool is global_add_pool else h.mean(0)
                self.inp = self.pooled
            self.y = (self.inp @ Wo.T + (0 if bo is None else bo))[target]
            self.mean = model.pool is global_mean_pool
            self.node_level = model.node_level

    def walks(self):
        """Every walk, from the definition: each step J -> K has a message (some C[K, J] != 0)."""
        end = [self.index] if self.node_level else range(N)
        out = []
        for w in itertools.product(range(N), repeat=L + 1):
            if w[-1] not in end:
                continue
            if all(any(Cm[w[t + 1], w[t]] != 0 for Cm, _ in self.layers[t]["terms"]) for t in range(L)):
                out.append(w)
        return torch.tensor(out)

    # LRP-0: path products of the linearised network
    def contribution(self, walk) -> float:
        c = self.target
        v = self.Wo[c].clone()                                   # d y / d (head input)
        if not self.node_level and self.mean:
            v = v / N
        for t in range(L, 0, -1):
            rec, K, J = self.layers[t - 1], walk[t], walk[t - 1]
            for op in reversed(rec["ops"]):
                if op[0] == "relu":
                    v = v * (op[1][K] > 0)
                else:
                    v = op[2].T @ v
            v = sum(Cm[K, J] * (W @ v if W is not None else v) for Cm, W in rec["terms"])
        return float(self.x[walk[0]] @ v.detach())

    # gamma: Schnake et al.'s nested relevance
    def gamma_relevance(self, walk) -> float:
        c, g = self.target, self.gamma
        Wm = _mod(self.Wo, g)
        zc = self.inp @ Wm[c] + (0 if self.bo is None else _mod(self.bo, g)[c])
        r_inp = self.inp * Wm[c] * _div(self.y, zc)
        K = walk[L]
        r = r_inp if self.node_level else _div(self.h[K], self.pooled * (N if self.mean else 1)) * r_inp
        for t in range(L, 0, -1):
            rec, K, J = self.layers[t - 1], walk[t], walk[t - 1]
            g = rec["gamma"]
            for op in reversed(rec["ops"]):
                if op[0] == "lin":
                    _, a, W, outmod = op
                    r = a[K] * (_mod(W, g).T @ _div(r, outmod[K]))
            s = _div(r, rec["zmod"][K])
            r = rec["h_in"][J] * sum(Cm[K, J] * (_mod(W, g) @ s if W is not None else s) for Cm, W in rec["terms"])
        return float(r.detach().sum())


KINDS = ["gcn", "gin", "graphconv", "sage"]
LEVELS = [None, 2]  # graph-level, node-level at node 2


# ------------------------------------------------------------------- LRP-0
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("index", LEVELS)
def test_lrp0_walks_are_exact_contributions_and_sum_to_output(kind, index):
    model, x = make(kind, node_level=index is not None)
    ref = Reference(model, x, index=index)
    walks = ref.walks()
    expected = torch.tensor([ref.contribution(w.tolist()) for w in walks], dtype=torch.float64)
    got = walk_relevance(model, x, EDGE_INDEX, walks, "z", index=index, target=1)
    assert got.dtype == torch.float64
    torch.testing.assert_close(got, expected, atol=1e-12, rtol=1e-9)
    out = model(x, EDGE_INDEX)
    y = float(out[index if index is not None else 0, 1])
    assert abs(float(got.sum()) - y) < 1e-9 * max(1.0, abs(y))
    assert abs(float(expected.sum()) - y) < 1e-9 * max(1.0, abs(y))  # the reference conserves too
    # all_walks enumerates the same walks
    wm = WalkModel(model, x, EDGE_INDEX, "z", index=index, target=1)
    assert sorted(map(tuple, all_walks(wm).tolist())) == sorted(map(tuple, walks.tolist()))


@pytest.mark.parametrize("kind", ["gcn", "graphconv"])
def test_lrp0_mean_pool(kind):
    model, x = make(kind, pool=global_mean_pool)
    ref = Reference(model, x)
    walks = ref.walks()
    expected = torch.tensor([ref.contribution(w.tolist()) for w in walks], dtype=torch.float64)
    got = walk_relevance(model, x, EDGE_INDEX, walks, "z", target=1)
    torch.testing.assert_close(got, expected, atol=1e-12, rtol=1e-9)
    assert abs(float(got.sum()) - float(model(x, EDGE_INDEX)[0, 1])) < 1e-9


def test_gamma_zero_reference_is_the_path_product():
    """The two references agree where they must: gamma = 0 is LRP-0 (bias-free)."""
    model, x = make("gin")
    ref = Reference(model, x, gamma=0.0)
    for w in ref.walks()[:40].tolist():
        assert abs(ref.gamma_relevance(w) - ref.contribution(w)) < 1e-12


# ------------------------------------------------------------------- top-k
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("index", LEVELS)
@pytest.mark.parametrize("rule", ["z", "gamma"])
def test_top_walks_are_the_k_largest_of_the_enumeration(kind, index, rule):
    model, x = make(kind, node_level=index is not None, seed=3)
    wm = WalkModel(model, x, EDGE_INDEX, rule, index=index, target=1)
    walks = all_walks(wm)
    rel = walk_relevance(model, x, EDGE_INDEX, walks, rule, index=index, target=1)
    for k in (1, 5, 17):
        top, top_rel = top_walks(model, x, EDGE_INDEX, k, rule, index=index, target=1, beam=2)
        assert top.shape == (min(k, len(walks)), L + 1)
        expected = rel.abs().sort(descending=True).values[:k]
        torch.testing.assert_close(top_rel.abs(), expected, atol=1e-12, rtol=1e-9)
        # the walks are walks of the graph, each with its own relevance, and distinct
        torch.testing.assert_close(walk_relevance(model, x, EDGE_INDEX, top, rule, index=index, target=1), top_rel)
        assert len(set(map(tuple, top.tolist()))) == len(top)
        # the k-th value separates: every walk outside has |R| <= the smallest returned
        assert float(rel.abs().sort(descending=True).values[len(top):][:1].sum()) <= float(top_rel.abs().min()) + 1e-12


def test_top_walks_k_beyond_the_number_of_walks_returns_all():
    model, x = make("gcn", node_level=True)
    wm = WalkModel(model, x, EDGE_INDEX, "z", index=2, target=1)
    n_walks = len(all_walks(wm))
    top, rel = top_walks(model, x, EDGE_INDEX, n_walks + 10, "z", index=2, target=1)
    assert len(top) == n_walks
    assert abs(float(rel.sum()) - float(model(x, EDGE_INDEX)[2, 1])) < 1e-9


# ---------------------------------------------------------------- subgraphs
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("index", LEVELS)
@pytest.mark.parametrize("rule", ["z", "gamma"])
def test_subgraph_relevance_is_the_sum_over_walks_inside(kind, index, rule):
    model, x = make(kind, node_level=index is not None, seed=4)
    ref = Reference(model, x, gamma=0.25 if rule == "gamma" else 0.0, index=index)
    walks = ref.walks()
    rule_obj = Gamma(0.25, eps=0.0) if rule == "gamma" else "z"
    # gamma: the walks' own relevance under the rule (test_walk_exact checks it against LRPExplainer)
    per_walk = walk_relevance(model, x, EDGE_INDEX, walks, rule_obj, index=index, target=1) if rule == "gamma" else \
        torch.tensor([ref.contribution(w.tolist()) for w in walks], dtype=torch.float64)
    sets = [[0, 1, 2], [1, 2, 4, 5], [2], [0, 3, 5], list(range(N))]
    masks = torch.zeros(len(sets), N, dtype=torch.bool)
    for i, s in enumerate(sets):
        inside = torch.isin(walks, torch.tensor(s)).all(1)
        expected = float(per_walk[inside].sum())
        got = subgraph_relevance(model, x, EDGE_INDEX, s, rule_obj, index=index, target=1)
        assert got.dim() == 0
        assert abs(float(got) - expected) < 1e-10, (s, float(got), expected)
        masks[i, s] = True
    batched = subgraph_relevance(model, x, EDGE_INDEX, masks, rule_obj, index=index, target=1)
    for i, s in enumerate(sets):
        assert abs(float(batched[i]) - float(subgraph_relevance(model, x, EDGE_INDEX, s, rule_obj, index=index,
                                                                    target=1))) < 1e-12
    if rule == "z":
        y = float(model(x, EDGE_INDEX)[index if index is not None else 0, 1])
        assert abs(float(batched[-1]) - y) < 1e-9


# ------------------------------------------------------------- other inputs
def test_batch_of_graphs_through_model_kwargs():
    """Two graphs in one batch: walks stay in their graph, pooled per graph (target picks graph 1's)."""
    model, x = make("gcn")
    x2 = torch.cat([x, x.flip(0)])
    ei2 = torch.cat([EDGE_INDEX, EDGE_INDEX + N], 1)
    batch = torch.tensor([0] * N + [1] * N)

    class Second(nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, x, edge_index, batch):
            return self.inner(x, edge_index, batch)[1]

    wrapped = Second(model)
    wm = WalkModel(wrapped, x2, ei2, "z", target=1, batch=batch)
    walks = all_walks(wm)
    rel = walk_relevance(wrapped, x2, ei2, walks, "z", target=1, batch=batch)
    assert abs(float(rel.sum()) - float(model(x2, ei2, batch)[1, 1])) < 1e-9
    assert float(rel[walks[:, 0] < N].abs().max()) == 0.0  # graph 0's walks carry nothing to graph 1's output


@pytest.mark.parametrize("kind", ["gcn", "graphconv"])
def test_edge_weight_and_max_pool(kind):
    """Weighted edges (edge_weight= to the model and its convs) and a max pool: under LRP-0 the walks
    still sum to the output and their marginals are LRPExplainer's node relevance."""
    class Weighted(nn.Module):
        def __init__(self):
            super().__init__()
            self.convs = nn.ModuleList([_conv(kind, F_IN, HID, False), _conv(kind, HID, HID, False)])
            self.head = nn.Linear(HID, 1, bias=False)

        def forward(self, x, edge_index, edge_weight):
            for conv in self.convs:
                x = conv(x, edge_index, edge_weight).relu()
            return self.head(global_max_pool(x, None))

    torch.manual_seed(7)
    model = Weighted().double().eval()
    x = torch.randn(N, F_IN, dtype=torch.float64)
    weight = torch.rand(EDGE_INDEX.shape[1], dtype=torch.float64) + 0.1
    wm = WalkModel(model, x, EDGE_INDEX, "z", edge_weight=weight)
    walks = all_walks(wm)
    rel = wm.walk_relevance(walks)
    y = float(model(x, EDGE_INDEX, weight))
    assert abs(float(wm.output) - y) < 1e-12
    assert abs(float(rel.sum()) - y) < 1e-9
    # the weights matter: without them the walks differ
    unweighted = walk_relevance(model, x, EDGE_INDEX, walks, "z", edge_weight=torch.ones_like(weight))
    assert not torch.allclose(rel, unweighted)
    explainer = Explainer(model, algorithm=LRPExplainer(rule=Epsilon(0.0)), explanation_type="model",
                          node_mask_type="object",
                          model_config=dict(mode="regression", task_level="graph", return_type="raw"))
    node = explainer(x, EDGE_INDEX, edge_weight=weight).node_relevance.view(-1)
    torch.testing.assert_close(torch.zeros(N, dtype=torch.float64).index_add_(0, walks[:, 0], rel), node,
                               atol=1e-10, rtol=1e-8)


def test_float32_close_to_float64():
    model, x = make("graphconv")
    walks = Reference(model, x).walks()
    r64 = walk_relevance(model, x, EDGE_INDEX, walks, "gamma", target=1)
    r32 = walk_relevance(model.float(), x.float(), EDGE_INDEX, walks, "gamma", target=1)
    assert r32.dtype == torch.float32
    torch.testing.assert_close(r32.double(), r64, atol=1e-5, rtol=1e-4)


# ---------------------------------------------------------------- bad input
def test_bad_walks_give_errors_naming_the_argument():
    model, x = make("gcn")
    with pytest.raises(ValueError, match=r"walks must have shape \(W, 4\)"):
        walk_relevance(model, x, EDGE_INDEX, torch.tensor([[0, 1, 2]]), "z", target=1)
    with pytest.raises(ValueError, match=r"walks\[1\] steps from node 0 to node 2 at step 1"):
        walk_relevance(model, x, EDGE_INDEX, torch.tensor([[0, 1, 2, 3], [0, 2, 3, 2]]), "z", target=1)
    with pytest.raises(ValueError, match=r"walks\[0, 2\] = 9 is not a node id"):
        walk_relevance(model, x, EDGE_INDEX, torch.tensor([[0, 1, 9, 3]]), "z", target=1)
    with pytest.raises(ValueError, match=r"walks\[0, 0\] = -1 is not a node id"):
        walk_relevance(model, x, EDGE_INDEX, torch.tensor([[-1, 1, 2, 3]]), "z", target=1)
    with pytest.raises(TypeError, match="walks must be an integer tensor"):
        walk_relevance(model, x, EDGE_INDEX, torch.tensor([[0.0, 1, 2, 3]]), "z", target=1)
    # GraphConv has no self-loop term at 0 -> 5 (and the graph no such edge); GCN's self-loops are steps
    walk_relevance(model, x, EDGE_INDEX, torch.tensor([[0, 0, 0, 0]]), "z", target=1)
    gc, _ = make("graphconv")
    with pytest.raises(ValueError, match=r"walks\[0\] steps from node 0 to node 5 at step 1"):
        walk_relevance(gc, x, EDGE_INDEX, torch.tensor([[0, 5, 4, 2]]), "z", target=1)


def test_node_level_walk_must_end_at_index():
    model, x = make("gcn", node_level=True)
    with pytest.raises(ValueError, match=r"walks\[0\] ends at node 1, but the explained node is index=2"):
        walk_relevance(model, x, EDGE_INDEX, torch.tensor([[0, 1, 2, 1]]), "z", index=2, target=1)
    with pytest.raises(ValueError, match="index must be a node id in 0..5, got 6"):
        walk_relevance(model, x, EDGE_INDEX, torch.tensor([[0, 1, 2, 2]]), "z", index=6, target=1)
    with pytest.raises(ValueError, match="pass index= .* and/or target="):
        walk_relevance(model, x, EDGE_INDEX, torch.tensor([[0, 1, 2, 2]]), "z", target=1)


def test_bad_k_rule_nodes_target():
    model, x = make("gcn")
    for k in (0, -3, 2.5, True):
        with pytest.raises(ValueError, match="k must be an int >= 1"):
            top_walks(model, x, EDGE_INDEX, k, "z", target=1)
    with pytest.raises(ValueError, match="beam must be an int >= 1"):
        top_walks(model, x, EDGE_INDEX, 3, "z", target=1, beam=0)
    with pytest.raises(ValueError, match="nodes contains 7, not a node id"):
        subgraph_relevance(model, x, EDGE_INDEX, [0, 7], "z", target=1)
    with pytest.raises(ValueError, match="target=5 is not a column"):
        subgraph_relevance(model, x, EDGE_INDEX, [0, 1], "z", target=5)
    with pytest.raises(ValueError, match="the explained output must be one number"):
        subgraph_relevance(model, x, EDGE_INDEX, [0, 1], "z")
    with pytest.raises((ValueError, IndexError), match="edge_index"):
        subgraph_relevance(model, x, torch.tensor([[0, 9], [1, 0]]), [0, 1], "z", target=1)


def test_model_is_restored_after_explaining():
    model, x = make("gin")
    before = model(x, EDGE_INDEX)
    model.train()
    subgraph_relevance(model, x, EDGE_INDEX, [0, 1, 2], "gamma", target=1)
    assert model.training
    assert all("forward" not in m.__dict__ for m in model.modules())
    torch.testing.assert_close(model.eval()(x, EDGE_INDEX), before)


@pytest.mark.parametrize("rule", ["z", "gamma", "epsilon"])
def test_top_walks_on_a_larger_graph_with_biases(rule):
    """40 nodes, 3 GCN layers with biases, a mean pool: the bounds prune, the result is still exact."""
    torch.manual_seed(5)
    n = 40
    src = torch.randint(0, n, (120,))
    dst = torch.randint(0, n, (120,))
    edge_index = torch.cat([torch.stack([src, dst]), torch.stack([dst, src])], 1)

    class Gcn(nn.Module):
        def __init__(self):
            super().__init__()
            self.convs = nn.ModuleList([GCNConv(5, 8), GCNConv(8, 8), GCNConv(8, 8)])
            self.head = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 3))

        def forward(self, x, edge_index):
            for conv in self.convs:
                x = conv(x, edge_index).relu()
            return self.head(global_mean_pool(x, None))

    model = Gcn().double().eval()
    x = torch.randn(n, 5, dtype=torch.float64)
    wm = WalkModel(model, x, edge_index, rule, target=2)
    walks = all_walks(wm)
    rel = walk_relevance(model, x, edge_index, walks, rule, target=2)
    top, top_rel = top_walks(model, x, edge_index, 10, rule, target=2)
    torch.testing.assert_close(top_rel.abs(), rel.abs().sort(descending=True).values[:10], atol=1e-14, rtol=1e-9)
    torch.testing.assert_close(walk_relevance(model, x, edge_index, top, rule, target=2), top_rel)
    top, top_rel = wm.top_walks(10, signed=True)
    torch.testing.assert_close(top_rel, rel.sort(descending=True).values[:10], atol=1e-14, rtol=1e-9)
    torch.testing.assert_close(wm.walk_relevance(top), top_rel)


def test_gamma_schedule_is_xiongs_linspace():
    rules = gamma_schedule(3)
    assert [type(r).__name__ for r in rules] == ["Gamma", "Gamma", "Epsilon"]
    assert [r.gamma for r in rules[:2]] == [3.0, 1.5] and rules[2].eps == 0.0 and rules[0].eps == 1e-6
    assert [r.gamma for r in gamma_schedule(5, 4.0, 0.0)[:4]] == [4.0, 3.0, 2.0, 1.0]
    assert len(gamma_schedule(1)) == 1
    with pytest.raises(ValueError, match="depth must be an int >= 1"):
        gamma_schedule(0)


def test_rule_list_errors_name_the_argument():
    model, x = make("gcn")
    for rules in (["z", "z"], ["z"] * 4):
        with pytest.raises(ValueError, match=rf"rule is a list of {len(rules)} rule\(s\), one per message-passing "
                                             r"module, but the model has 3 message-passing module\(s\)"):
            subgraph_relevance(model, x, EDGE_INDEX, [0, 1], rules, target=1)
    with pytest.raises(ValueError, match=r"rule\[1\]: "):
        subgraph_relevance(model, x, EDGE_INDEX, [0, 1], ["z", "no-such-rule", "z"], target=1)
    with pytest.raises(ValueError, match="rule is an empty list"):
        subgraph_relevance(model, x, EDGE_INDEX, [0, 1], [], target=1)


# ------------------------------------------------------------ signed top walks
@pytest.mark.parametrize("kind", ["gin", "gcn"])
@pytest.mark.parametrize("index", LEVELS)
def test_signed_top_walks_are_the_k_most_positive(kind, index):
    model, x = make(kind, node_level=index is not None, seed=5)
    wm = WalkModel(model, x, EDGE_INDEX, "gamma", index=index, target=1)
    rel = wm.walk_relevance(all_walks(wm))
    assert bool((rel < 0).any()) and bool((rel > 0).any())  # signed and |R| rankings differ here
    for k in (1, 4, 30, 10_000):
        top, top_rel = top_walks(model, x, EDGE_INDEX, k, "gamma", index=index, target=1, beam=2, signed=True)
        expected = rel.sort(descending=True).values[:k]
        torch.testing.assert_close(top_rel, expected, atol=1e-12, rtol=1e-9)
        torch.testing.assert_close(wm.walk_relevance(top), top_rel)


# ------------------------------------------------------------ walk scores
def _brute_scores(walks, rel, edge_index, k, signed):
    """From the definition: sort all walks, take k, loop over positions and steps."""
    key = rel if signed else rel.abs()
    order = sorted(range(len(rel)), key=lambda i: -float(key[i]))[:k]
    node = [0.0] * N
    edge = [0.0] * edge_index.shape[1]
    pairs = [tuple(e) for e in edge_index.T.tolist()]
    for i in order:
        w, v = walks[i].tolist(), float(key[i])
        for j in w:
            node[j] += v
        for t in range(len(w) - 1):
            copies = [e for e, p in enumerate(pairs) if p == (w[t], w[t + 1])]
            for e in copies:
                edge[e] += v / len(copies)
    return torch.tensor(node, dtype=torch.float64), torch.tensor(edge, dtype=torch.float64)


def _untied_k(key, k):
    """The smallest k' >= k whose k'-th and (k'+1)-th largest values differ (a unique top set)."""
    v = key.sort(descending=True).values
    while k < len(v) and abs(float(v[k - 1] - v[k])) < 1e-12:
        k += 1
    return k


# a graph with a self-loop edge (2, 2) and two parallel copies of 0 -> 1
EDGE_INDEX_LOOPS = torch.cat([EDGE_INDEX, torch.tensor([[2, 0], [2, 1]])], 1)


@pytest.mark.parametrize("kind", ["gin", "gcn", "graphconv"])
@pytest.mark.parametrize("index", LEVELS)
@pytest.mark.parametrize("signed", [True, False])
@pytest.mark.parametrize("edge_index", [EDGE_INDEX, EDGE_INDEX_LOOPS], ids=["plain", "loops"])
def test_walk_scores_match_brute_force(kind, index, signed, edge_index):
    model, x = make(kind, node_level=index is not None, seed=3)
    rule = gamma_schedule(L)
    wm = WalkModel(model, x, edge_index, rule, index=index, target=1)
    walks = all_walks(wm)
    rel = wm.walk_relevance(walks)
    key = rel if signed else rel.abs()
    for k in (1, 7, 25):
        k = _untied_k(key, k)
        node, edge = walk_scores(model, x, edge_index, k, rule, index=index, target=1, signed=signed, beam=3)
        exp_node, exp_edge = _brute_scores(walks, rel, edge_index, k, signed)
        assert node.shape == (N,) and edge.shape == (edge_index.shape[1],) and node.dtype == torch.float64
        torch.testing.assert_close(node, exp_node, atol=1e-13, rtol=1e-9)
        torch.testing.assert_close(edge, exp_edge, atol=1e-13, rtol=1e-9)
    if edge_index is EDGE_INDEX_LOOPS and index is None:
        node, edge = walk_scores(model, x, edge_index, 10**6, rule, target=1, signed=signed)
        assert float(edge[-2]) != 0 and float(edge[-1]) != 0          # the self-loop edge gets steps 2 -> 2
        assert abs(float(edge[0] - edge[-1])) < 1e-15                # parallel copies share equally


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("index", LEVELS)
def test_walk_scores_of_all_walks_conserve(kind, index):
    """LRP-0, bias-free: k = all walks gives node scores summing to (L+1) x the output (each walk adds its R
    once per position), node scores = the walks' marginals per position, edge scores = the step marginals
    (WalkModel.step_relevance) summed over layers on the input's edges."""
    model, x = make(kind, node_level=index is not None, seed=1)
    y = float(model(x, EDGE_INDEX)[index if index is not None else 0, 1])
    wm = WalkModel(model, x, EDGE_INDEX, "z", index=index, target=1)
    walks = all_walks(wm)
    rel = wm.walk_relevance(walks)
    node, edge = walk_scores(model, x, EDGE_INDEX, len(walks), "z", index=index, target=1)
    assert abs(float(node.sum()) - (L + 1) * y) < 1e-9 * max(1.0, abs(y))
    positions = sum(torch.zeros(N, dtype=torch.float64).index_add_(0, walks[:, t], rel) for t in range(L + 1))
    torch.testing.assert_close(node, positions, atol=1e-12, rtol=1e-9)
    assert float(node.sum()) != 0
    edge_id = {(int(a), int(b)): e for e, (a, b) in enumerate(EDGE_INDEX.T.tolist())}
    steps_on_edges = torch.zeros(EDGE_INDEX.shape[1], dtype=torch.float64)
    for steps, step_rel, *_ in wm.step_relevance():
        for (j, k), r in zip(steps.tolist(), step_rel.tolist()):
            if (j, k) in edge_id:
                steps_on_edges[edge_id[(j, k)]] += r
    torch.testing.assert_close(edge, steps_on_edges, atol=1e-12, rtol=1e-9)
    non_self_steps = (walks[:, 1:] != walks[:, :-1]).sum(1).to(rel.dtype)  # EDGE_INDEX has no self-loop
    assert abs(float(edge.sum()) - float((rel * non_self_steps).sum())) < 1e-12
    # absolute: the same with |R|
    node_abs, _ = walk_scores(model, x, EDGE_INDEX, len(walks), "z", index=index, target=1, signed=False)
    assert abs(float(node_abs.sum()) - (L + 1) * float(rel.abs().sum())) < 1e-12


# ------------------------------------------------------------ alpha subgraph relevance
@pytest.mark.parametrize("kind", ["gin", "gcn"])
@pytest.mark.parametrize("index", LEVELS)
def test_alpha_subgraph_relevance_is_the_weighted_sum_over_walks(kind, index):
    model, x = make(kind, node_level=index is not None, seed=4)
    rule = gamma_schedule(L)
    wm = WalkModel(model, x, EDGE_INDEX, rule, index=index, target=1)
    walks = all_walks(wm)
    rel = wm.walk_relevance(walks)
    sets = [[0, 1, 2], [1, 2, 4, 5], [2], [0, 3, 5], list(range(N))]
    for alpha in (0.0, 0.05, 0.5, 1.0):
        masks = torch.zeros(len(sets), N, dtype=torch.bool)
        for i, s in enumerate(sets):
            inside = torch.isin(walks, torch.tensor(s))
            weight = torch.tensor(alpha, dtype=torch.float64) ** (~inside).sum(1)
            expected = float((rel * weight * inside.any(1)).sum())
            got = subgraph_relevance(model, x, EDGE_INDEX, s, rule, index=index, target=1, alpha=alpha)
            assert abs(float(got) - expected) < 1e-12, (alpha, s, float(got), expected)
            masks[i, s] = True
        batched = wm.subgraph_relevance(masks, alpha)
        for i, s in enumerate(sets):
            assert abs(float(batched[i]) - float(wm.subgraph_relevance(s, alpha))) < 1e-13
    # alpha = 1: every walk through S
    through = torch.isin(walks, torch.tensor([2])).any(1)
    assert abs(float(wm.subgraph_relevance([2], 1.0)) - float(rel[through].sum())) < 1e-12


# ------------------------------------------------------------ greedy subgraph search
def _slow_greedy(model, x, edge_index, size, rule, alpha, index):
    """The greedy loop of Xiong et al.'s get_feat_order_local_best_guess, one subgraph_relevance call per
    candidate, candidates in ascending order, strict > (first maximum kept)."""
    order, rels = [], []
    while len(order) < size:
        best, best_rel = None, -float("inf")
        for v in range(N):
            if v in order:
                continue
            r = float(subgraph_relevance(model, x, edge_index, order + [v], rule, index=index, target=1, alpha=alpha))
            if r > best_rel:
                best, best_rel = v, r
        order.append(best)
        rels.append(best_rel)
    return order, rels


@pytest.mark.parametrize("kind,rule", [("gin", "schedule"), ("gcn", "z"), ("graphconv", "gamma")])
@pytest.mark.parametrize("index", LEVELS)
@pytest.mark.parametrize("alpha", [0.0, 0.3])
def test_greedy_subgraph_matches_a_slow_greedy_loop(kind, rule, index, alpha):
    model, x = make(kind, node_level=index is not None, seed=3)
    rule = gamma_schedule(L) if rule == "schedule" else rule
    res = greedy_subgraph(model, x, EDGE_INDEX, rule=rule, alpha=alpha, index=index, target=1)
    assert isinstance(res, GreedySubgraph)
    order, rels = _slow_greedy(model, x, EDGE_INDEX, N, rule, alpha, index)
    assert res.order.tolist() == order
    torch.testing.assert_close(res.relevance, torch.tensor(rels, dtype=torch.float64), atol=1e-13, rtol=1e-10)
    # the scores are the ranks: N for the first node added, 1 for the last
    assert res.scores.tolist() == [float(N - order.index(v)) for v in range(N)]
    # a shorter search is the prefix, the rest scores 0
    part = greedy_subgraph(model, x, EDGE_INDEX, 3, rule=rule, alpha=alpha, index=index, target=1)
    assert part.order.tolist() == order[:3]
    assert sorted(part.scores.tolist()) == [0.0] * (N - 3) + [N - 2.0, N - 1.0, float(N)]


@pytest.mark.parametrize("kind", ["gin", "gcn"])
def test_greedy_subgraph_against_exhaustive_search_over_enumerated_walks(kind):
    """Subset relevance from the walk enumeration (sum of R over walks inside S), every subset of size 1 and
    2: the greedy first node is the best singleton, its pair is the best pair containing it (never better
    than the exhaustive best pair), and each prefix's relevance is the sum over the walks inside it."""
    model, x = make(kind, seed=2)
    rule = gamma_schedule(L)
    wm = WalkModel(model, x, EDGE_INDEX, rule, target=1)
    walks = all_walks(wm)
    rel = wm.walk_relevance(walks)

    def inside(s):
        return float(rel[torch.isin(walks, torch.tensor(list(s))).all(1)].sum())

    res = greedy_subgraph(model, x, EDGE_INDEX, rule=rule, target=1)
    single = {v: inside([v]) for v in range(N)}
    best = max(single.values())
    assert int(res.order[0]) == min(v for v in range(N) if single[v] == best)
    pairs = {s: inside(s) for s in itertools.combinations(range(N), 2)}
    first = int(res.order[0])
    best_with_first = max(r for s, r in pairs.items() if first in s)
    assert abs(float(res.relevance[1]) - best_with_first) < 1e-13
    assert float(res.relevance[1]) <= max(pairs.values()) + 1e-13
    for i in range(N):
        assert abs(float(res.relevance[i]) - inside(res.order[: i + 1].tolist())) < 1e-13
    # all nodes: every walk; under LRP-0 bias-free, the output
    res0 = greedy_subgraph(model, x, EDGE_INDEX, rule="z", target=1)
    assert abs(float(res0.relevance[-1]) - float(model(x, EDGE_INDEX)[0, 1])) < 1e-12


def test_walk_scores_and_greedy_bad_input_name_the_argument():
    model, x = make("gcn")
    for k in (0, -1, 1.5, None):
        with pytest.raises(ValueError, match="k must be an int >= 1"):
            walk_scores(model, x, EDGE_INDEX, k, "z", target=1)
    with pytest.raises(TypeError, match="signed must be True or False"):
        walk_scores(model, x, EDGE_INDEX, 3, "z", target=1, signed="yes")
    for size in (0, N + 1, 2.5, True):
        with pytest.raises(ValueError, match=rf"size must be an int in 1..{N}"):
            greedy_subgraph(model, x, EDGE_INDEX, size, "z", target=1)
    for alpha in (-0.1, 1.5, "0.1", float("nan")):
        with pytest.raises(ValueError, match=r"alpha must be a number in \[0, 1\]"):
            greedy_subgraph(model, x, EDGE_INDEX, 2, "z", target=1, alpha=alpha)
        with pytest.raises(ValueError, match=r"alpha must be a number in \[0, 1\]"):
            subgraph_relevance(model, x, EDGE_INDEX, [0], "z", target=1, alpha=alpha)
    with pytest.raises(ValueError, match="index must be a node id in 0..5, got 9"):
        walk_scores(model, x, EDGE_INDEX, 3, "z", index=9, target=1)
    with pytest.raises(ValueError, match="index must be a node id in 0..5, got -1"):
        greedy_subgraph(model, x, EDGE_INDEX, 2, "z", index=-1, target=1)
    with pytest.raises(ValueError, match="target=7 is not a column"):
        greedy_subgraph(model, x, EDGE_INDEX, 2, "z", target=7)


# ------------------------------------------------------------ BA-2Motifs-like GIN
class XiongGIN(nn.Module):
    """Xiong et al.'s BA-2Motifs GIN in PyG terms: 3 GIN layers (sum aggregation with the node itself;
    2-layer MLPs with biases and ReLUs in the first two, one Linear to the 2 classes in the last), node
    logits summed over the graph; ``head=True``: a Linear head after the pool instead."""

    def __init__(self, features=10, hidden=20, head=False):
        super().__init__()
        def mlp(i, o):
            return nn.Sequential(nn.Linear(i, o), nn.ReLU(), nn.Linear(o, o), nn.ReLU())
        last = nn.Sequential(nn.Linear(hidden, hidden), nn.ReLU()) if head else nn.Linear(hidden, 2)
        self.convs = nn.ModuleList([GINConv(mlp(features, hidden)), GINConv(mlp(hidden, hidden)), GINConv(last)])
        self.head = nn.Linear(hidden, 2) if head else None

    def forward(self, x, edge_index, batch=None):
        for conv in self.convs:
            x = conv(x, edge_index)
        x = global_add_pool(x, batch)
        return x if self.head is None else self.head(x)


def ba_house(seed=0, n=20):
    """A 20-node Barabasi-Albert tree (one edge per new node) with a house on nodes 20..24 attached to node 0."""
    g = torch.Generator().manual_seed(seed)
    edges = [(1, 0)]
    for v in range(2, n):
        edges.append((v, int(torch.randint(0, v, (1,), generator=g))))
    edges += [(20, 21), (21, 22), (22, 23), (23, 20), (20, 24), (21, 24), (20, 0)]
    ei = torch.tensor(edges).T
    return torch.cat([ei, ei.flip(0)], 1), n + 5


@pytest.mark.parametrize("head", [False, True])
def test_ba_2motifs_gin_greedy_and_walk_scores(head):
    torch.manual_seed(0)
    model = XiongGIN(head=head).double().eval()
    edge_index, n = ba_house()
    x = torch.full((n, 10), 0.1, dtype=torch.float64)
    rule = gamma_schedule(3)
    wm = WalkModel(model, x, edge_index, rule, target=0)
    assert wm.depth == 3
    res = wm.greedy_subgraph(alpha=0.05)
    assert sorted(res.order.tolist()) == list(range(n))
    assert sorted(res.scores.tolist()) == [float(v) for v in range(1, n + 1)]
    torch.testing.assert_close(res.relevance[-1], wm.subgraph_relevance(torch.ones(n, dtype=torch.bool), 0.05))
    # the first three steps against the slow loop
    for i in range(3):
        cand = [v for v in range(n) if v not in res.order[:i].tolist()]
        r = torch.stack([wm.subgraph_relevance(res.order[:i].tolist() + [v], 0.05) for v in cand])
        chosen = cand.index(int(res.order[i]))
        assert float(r[chosen]) >= float(r.max()) - 1e-15          # a maximum (symmetric nodes tie)
        assert chosen == min(j for j in range(len(cand)) if float(r[j]) >= float(r.max()) - 1e-15)
    node, edge = wm.walk_scores(50)
    assert node.shape == (n,) and edge.shape == (edge_index.shape[1],)
    _, top_rel = wm.top_walks(50, signed=True)
    assert abs(float(node.sum()) - 4 * float(top_rel.sum())) < 1e-12
    # conservation under LRP-0 (biases kept out of the walks: all walks + bias share = output, so compare
    # the sum over walks with the subgraph relevance of all nodes, computed without enumeration)
    wm0 = WalkModel(model, x, edge_index, "z", target=0)
    walks = all_walks(wm0)
    node_all, _ = wm0.walk_scores(len(walks))
    assert abs(float(node_all.sum()) - 4 * float(wm0.subgraph_relevance(list(range(n))))) < 1e-9


# ------------------------------------------------------------ a property over random graphs
@st.composite
def _random_graph(draw):
    n = draw(st.integers(2, 6))
    edges = draw(st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)), min_size=1, max_size=12))
    kind = draw(st.sampled_from(KINDS))
    seed = draw(st.integers(0, 2**16))
    return n, torch.tensor(edges, dtype=torch.long).T, kind, seed


@given(_random_graph())
def test_property_walk_scores_and_greedy_conserve_on_random_graphs(case):
    """Any graph (self-loops and parallel edges included), any supported conv, LRP-0 bias-free: the node
    scores of all walks sum to (L+1) x the output, their edge scores are the sum over walks of R x the steps
    along input edges, the greedy search's full set carries the output, its first node is the best
    singleton, and the signed top walk is the largest walk relevance."""
    n, edge_index, kind, seed = case
    torch.manual_seed(seed)
    model = Net(kind).double().eval()
    x = torch.randn(n, F_IN, dtype=torch.float64)
    y = float(model(x, edge_index)[0, 1])
    wm = WalkModel(model, x, edge_index, "z", target=1)
    walks = all_walks(wm)
    rel = wm.walk_relevance(walks)
    tol = 1e-9 * max(1.0, float(rel.abs().sum()))
    node, edge = wm.walk_scores(len(walks))
    assert abs(float(node.sum()) - (L + 1) * y) < (L + 1) * tol
    edge_set = set(map(tuple, edge_index.T.tolist()))
    along = torch.tensor([sum((a, b) in edge_set for a, b in zip(w[:-1], w[1:])) for w in walks.tolist()],
                         dtype=torch.float64)
    assert abs(float(edge.sum()) - float((rel * along).sum())) < L * tol
    res = wm.greedy_subgraph()
    assert abs(float(res.relevance[-1]) - y) < tol
    assert sorted(res.scores.tolist()) == [float(v) for v in range(1, n + 1)]
    singles = wm.subgraph_relevance(torch.eye(n, dtype=torch.bool))
    assert abs(float(res.relevance[0]) - float(singles.max())) < 1e-12
    _, top = wm.top_walks(1, signed=True)
    assert abs(float(top[0]) - float(rel.max())) < 1e-12


@pytest.mark.parametrize("index, target, entry", [(2, 1, (2, 0, 1)), (2, 0, (2, 0, 0)), (None, 2, (0, 0, 2))])
def test_the_explained_entry_is_one_number_of_any_output_shape(index, target, entry):
    """The walks start from the one entry (row ``index``, column ``target``) with its value, also where the output
    has a middle dimension (N, 1, C) or is one graph's (1, 1, C)."""
    from lrp_lib.explain.walks.model import explained_start
    out = torch.arange(5 * 3, dtype=torch.float64).view(5, 1, 3) + 1.0
    if index is None:
        out = out[:1]
    start = explained_start(out, index, target)
    want = torch.zeros_like(out)
    want[entry] = out[entry]
    assert torch.equal(start, want)


def test_relevance_lost_at_a_detach_is_reported_with_its_amount():
    """A GCN whose second layer reads half its features through a detach: the walks carry only what reaches x, and
    the rest is reported by a LostRelevanceWarning with its amount (LRP-0 of a bias-free ReLU network: input times
    gradient is what reaches x)."""
    from lrp_lib.explain.accounting import LostRelevanceWarning

    class Half(nn.Module):
        def __init__(self):
            super().__init__()
            self.c1, self.c2 = GCNConv(3, 4, bias=False), GCNConv(4, 2, bias=False)

        def forward(self, x, edge_index):
            h = self.c1(x, edge_index).relu()
            return self.c2(torch.cat([h[:, :2], h.detach()[:, 2:]], 1), edge_index)

    torch.manual_seed(0)
    model, x = Half().double().eval(), torch.rand(N, 3, dtype=torch.float64)
    leaf = x.clone().requires_grad_(True)
    out = model(leaf, EDGE_INDEX)[0, 1]
    out.backward()
    reached = float((leaf * leaf.grad).sum())
    assert abs(float(out) - reached) > 1e-3
    with pytest.warns(LostRelevanceWarning, match=rf"relevance {float(out) - reached:.4g} "):
        wm = WalkModel(model, x, EDGE_INDEX, "z", index=0, target=1)
    assert wm.total == pytest.approx(reached, rel=1e-9)
    assert float(wm.walk_relevance(all_walks(wm)).sum()) == pytest.approx(reached, rel=1e-9)


def test_the_model_inputs_are_checked_as_the_explainer_checks_them():
    """WalkModel checks the model's other inputs (check_inputs) before its forward: a NaN or short edge_weight
    and node features of another dtype than the weights get errors naming them, not NaN walks or torch's errors."""
    class Weighted(nn.Module):
        def __init__(self):
            super().__init__()
            self.c1, self.c2 = GCNConv(3, 4), GCNConv(4, 2)

        def forward(self, x, edge_index, edge_weight=None):
            return self.c2(self.c1(x, edge_index, edge_weight).relu(), edge_index, edge_weight)

    torch.manual_seed(0)
    model, x = Weighted().eval(), torch.rand(N, 3)
    weight = torch.ones(EDGE_INDEX.shape[1])
    with pytest.raises(ValueError, match=r"edge_weight contains 1 NaN and 0 Inf value\(s\) \(the first at \(2,\)\)"):
        WalkModel(model, x, EDGE_INDEX, "z", index=0, target=1, edge_weight=weight.index_fill(0, torch.tensor([2]),
                                                                                                 float("nan")))
    with pytest.raises(ValueError, match=rf"edge_weight has 3 rows but edge_index has {EDGE_INDEX.shape[1]} edges"):
        WalkModel(model, x, EDGE_INDEX, "z", index=0, target=1, edge_weight=weight[:3])
    with pytest.raises(TypeError, match=r"x is torch.float64 but the model's weights are torch.float32"):
        WalkModel(model, x.double(), EDGE_INDEX, "z", index=0, target=1)
    assert WalkModel(model, x, EDGE_INDEX, "z", index=0, target=1, edge_weight=weight).total == pytest.approx(
        WalkModel(model, x, EDGE_INDEX, "z", index=0, target=1).total, rel=1e-6)
