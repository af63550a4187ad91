"""LRPExplainer on stock PyG models: the forward is unchanged, relevance matches a slow reference
written from the rules' definitions, conservation, batched == one by one, agreement with the
lrp_lib.teach.graph layers, and a clear error for what is not supported."""
import warnings

import pytest
import torch
import torch.nn.functional as F
import torch_geometric
from torch import nn
from torch_geometric.data import Batch, Data
from torch_geometric.explain import Explainer
from torch_geometric.nn import (GATConv, GCNConv, GINConv, GraphConv, HeteroConv, SAGEConv, global_add_pool,
                                global_max_pool, global_mean_pool)
from torch_geometric.nn import MLP

from lrp_lib.teach import graph as G
from lrp_lib.explain.explainer import LostRelevanceWarning, LRPExplainer, UnsupportedModelError
from lrp_lib.explain.mode.forward import ForwardMode
from lrp_lib.teach.mode import relevance
from lrp_lib.core.rules import Epsilon, Gamma

POOLS = {"add": global_add_pool, "mean": global_mean_pool, "max": global_max_pool}


class Net(nn.Module):
    """conv -> ReLU -> conv -> ReLU -> pool -> Linear -> ReLU -> Linear, written as users write it."""

    def __init__(self, conv, hidden=6, in_features=4, out=1, pool="mean", bias=True):
        super().__init__()
        self.conv1 = conv(in_features, hidden, bias)
        self.conv2 = conv(hidden, hidden, bias)
        self.lin1 = nn.Linear(hidden, hidden, bias=bias)
        self.lin2 = nn.Linear(hidden, out, bias=bias)
        self.act = nn.ReLU()
        self.drop = nn.Dropout(0.5)
        self.pool = POOLS[pool]

    def forward(self, x, edge_index, batch=None):
        x = F.relu(self.conv1(x, edge_index))
        x = self.conv2(x, edge_index).relu()
        x = self.pool(x, batch)
        x = self.drop(self.act(self.lin1(x)))
        return self.lin2(x)


CONVS = {
    "gcn": lambda i, o, b: GCNConv(i, o, bias=b),
    "gcn-no-loops": lambda i, o, b: GCNConv(i, o, bias=b, add_self_loops=False),
    "gcn-improved": lambda i, o, b: GCNConv(i, o, bias=b, improved=True),
    "graphconv-add": lambda i, o, b: GraphConv(i, o, aggr="add", bias=b),
    "graphconv-mean": lambda i, o, b: GraphConv(i, o, aggr="mean", bias=b),
    "graphconv-max": lambda i, o, b: GraphConv(i, o, aggr="max", bias=b),
    "sage-mean": lambda i, o, b: SAGEConv(i, o, aggr="mean", bias=b),
    "gin-seq": lambda i, o, b: GINConv(nn.Sequential(nn.Linear(i, o, bias=b), nn.ReLU(), nn.Linear(o, o, bias=b)),
                                       train_eps=True),
    "gin-mlp": lambda i, o, b: GINConv(MLP([i, o, o], norm=None, bias=b), eps=0.3),
}


def random_graphs(count=3, seed=0, features=4, dtype=torch.float64):
    """Small random undirected graphs (with one self-loop), non-negative features."""
    g = torch.Generator().manual_seed(seed)
    graphs = []
    for k in range(count):
        n = 4 + k
        src = torch.randint(0, n, (2 * n,), generator=g)
        dst = torch.randint(0, n, (2 * n,), generator=g)
        keep = src != dst
        ei = torch.stack([torch.cat([src[keep], dst[keep]]), torch.cat([dst[keep], src[keep]])])
        ei = torch.cat([ei, torch.tensor([[0], [0]])], dim=1)  # a self-loop, as some data sets have
        graphs.append(Data(x=torch.rand(n, features, generator=g, dtype=dtype), edge_index=torch_geometric.utils.coalesce(ei)))
    return graphs


def make(conv, seed=0, **kw):
    torch.manual_seed(seed)
    model = Net(CONVS[conv], **kw).double().eval()
    if conv.startswith("gin"):  # make the GIN eps non-trivial
        with torch.no_grad():
            for m in model.modules():
                if isinstance(m, GINConv):
                    m.eps.fill_(0.3)
    return model


def explainer(model, mode="regression", node_mask_type="attributes", rule="epsilon"):
    """PyG's Explainer with LRPExplainer (epsilon = 1e-6 by default; rule="z" conserves exactly)."""
    return Explainer(model, algorithm=LRPExplainer(rule=rule), explanation_type="model",
                     node_mask_type=node_mask_type, edge_mask_type="object",
                     model_config=dict(mode=mode, task_level="graph", return_type="raw"))


# ------------------------------------------------------------------ forward
@pytest.mark.parametrize("pool", list(POOLS))
@pytest.mark.parametrize("conv", list(CONVS))
def test_the_relevance_mode_computes_the_same_values(conv, pool):
    model = make(conv, pool=pool)
    batch = Batch.from_data_list(random_graphs())
    expected = model(batch.x, batch.edge_index, batch.batch)
    leaf = batch.x.clone().requires_grad_(True)
    with ForwardMode("epsilon", model) as mode:
        mode.mark(leaf)
        got = model(leaf, batch.edge_index, batch.batch)
    torch.testing.assert_close(got, expected)
    assert mode.is_marked(got)
    # outside the block the model runs on ordinary ops again, and nothing was patched
    again = model(batch.x.requires_grad_(True), batch.edge_index, batch.batch)
    assert not mode.is_marked(again)
    assert F.relu is torch.nn.functional.relu and torch_geometric.nn.global_mean_pool is global_mean_pool


# ------------------------------------------------------------ conservation
@pytest.mark.parametrize("conv", ["gcn", "graphconv-add", "graphconv-mean", "sage-mean", "gin-seq", "gin-mlp"])
@pytest.mark.parametrize("mode", ["regression", "binary_classification"])
def test_bias_free_models_conserve_the_output(conv, mode):
    model = make(conv, bias=False, pool="add")
    batch = Batch.from_data_list(random_graphs(seed=3))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a dead unit may lose relevance; not this test's concern
        explanation = explainer(model, mode, rule="z")(batch.x, batch.edge_index, batch=batch.batch)
    out = model(batch.x, batch.edge_index, batch.batch).detach().view(-1)
    if mode == "binary_classification":  # the log-odds of the target class: +z for 1, -z for 0
        out = torch.where(out > 0, out, -out)
    per_graph = torch.zeros_like(out).index_add_(0, batch.batch, explanation.node_relevance.sum(-1))
    torch.testing.assert_close(per_graph, out, rtol=1e-5, atol=1e-8)


def test_multiclass_starts_from_the_target_logit():
    model = make("gcn", bias=False, out=3, pool="add")
    batch = Batch.from_data_list(random_graphs(seed=4))
    exp = Explainer(model, algorithm=LRPExplainer("z"), explanation_type="model", node_mask_type="object",
                    edge_mask_type="object", model_config=dict(mode="multiclass_classification",
                                                               task_level="graph", return_type="raw"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        e = exp(batch.x, batch.edge_index, batch=batch.batch)
    logits = model(batch.x, batch.edge_index, batch.batch).detach()
    expected = logits.gather(1, logits.argmax(1, keepdim=True)).view(-1)
    per_graph = torch.zeros(3, dtype=torch.float64).index_add_(0, batch.batch, e.node_relevance.view(-1))
    torch.testing.assert_close(per_graph, expected)


# ---------------------------------------------------------- slow reference
def reference_gcn_lrp(x, edge_index, conv, lin, gamma=0.0):
    """One GCNConv -> ReLU -> sum pool -> Linear(., 1), bias-free, from the rules' definitions, in
    PyG's order of operations (h = x W, messages a_ij h_j, their sum z_i): the head and the conv's
    weight W get the gamma rule (w' = w + gamma w+), the sums split in proportion:
    R_m(e,k) = a_e h_sk / z_dk R_z(d,k);  R_h(j,k) = sum over the messages of j;
    R_x(j,f) = sum_k x_jf W'_kf / h'_jk R_h(j,k);  edge e gets sum_k R_m(e,k)."""
    n, feats = x.shape
    W = conv.lin.weight.detach()
    v = lin.weight.detach()[0]
    Wg, vg = W + gamma * W.clamp(min=0), v + gamma * v.clamp(min=0)
    # normalised adjacency with self-loops, entry by entry
    pairs = [(int(s), int(d)) for s, d in edge_index.t()] + [(i, i) for i in range(n)]
    deg = [sum(1.0 for s, d in pairs if d == i) for i in range(n)]
    a = {e: 1.0 / (deg[s] ** 0.5 * deg[d] ** 0.5) for e, (s, d) in enumerate(pairs)}
    out_f = W.shape[0]
    h = [[sum(float(x[j, f]) * float(W[k, f]) for f in range(feats)) for k in range(out_f)] for j in range(n)]
    hg = [[sum(float(x[j, f]) * float(Wg[k, f]) for f in range(feats)) for k in range(out_f)] for j in range(n)]
    z = [[sum(a[e] * h[s][k] for e, (s, d) in enumerate(pairs) if d == i) for k in range(out_f)] for i in range(n)]
    r = [[max(zik, 0.0) for zik in zi] for zi in z]
    p = [sum(r[i][k] for i in range(n)) for k in range(out_f)]
    y = sum(float(v[k]) * p[k] for k in range(out_f))
    yg = sum(float(vg[k]) * p[k] for k in range(out_f))
    R_p = [float(vg[k]) * p[k] / yg * y for k in range(out_f)]
    R_z = [[0.0 if p[k] == 0 else r[i][k] / p[k] * R_p[k] for k in range(out_f)] for i in range(n)]
    R_h = [[0.0] * out_f for _ in range(n)]
    R_edge = torch.zeros(len(pairs), dtype=torch.float64)
    for e, (s, d) in enumerate(pairs):
        for k in range(out_f):
            if R_z[d][k] == 0:
                continue
            share = a[e] * h[s][k] / z[d][k] * R_z[d][k]
            R_h[s][k] += share
            R_edge[e] += share
    R_x = torch.zeros(n, feats, dtype=torch.float64)
    for j in range(n):
        for f in range(feats):
            R_x[j, f] = sum(float(x[j, f]) * float(Wg[k, f]) / hg[j][k] * R_h[j][k] for k in range(out_f))
    return y, R_x, R_edge[: edge_index.shape[1]]


class OneGCN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = GCNConv(4, 5, bias=False)
        self.lin = nn.Linear(5, 1, bias=False)

    def forward(self, x, edge_index, batch=None):
        return self.lin(global_add_pool(F.relu(self.conv(x, edge_index)), batch))


@pytest.mark.parametrize("rule,gamma", [(Epsilon(0.0), 0.0), (Gamma(0.5, eps=0.0), 0.5)])
def test_gcn_relevance_matches_the_slow_reference(rule, gamma):
    torch.manual_seed(1)
    model = OneGCN().double().eval()
    data = random_graphs(1, seed=5)[0]
    data.edge_index = torch_geometric.utils.remove_self_loops(data.edge_index)[0]
    y, R_x, R_edge = reference_gcn_lrp(data.x, data.edge_index, model.conv, model.lin, gamma)
    e = explainer(model, rule=rule)(data.x, data.edge_index)
    assert float(e.prediction) == pytest.approx(y)
    torch.testing.assert_close(e.node_relevance, R_x)
    torch.testing.assert_close(e.edge_relevance, R_edge)
    if gamma == 0.0:
        assert float(e.node_relevance.sum()) == pytest.approx(y)


# ------------------------------------------------------------------ batches
def max_pool_gap(model, g) -> float:
    """The smallest gap between the largest and the second largest positive entry of a feature over the
    nodes, at the input of the model's pool."""
    with torch.no_grad():
        h = model.conv2(F.relu(model.conv1(g.x, g.edge_index)), g.edge_index).relu()
    top = h.topk(2, dim=0).values
    gap = top[0] - top[1]
    return float(gap[top[0] > 0].min())


@pytest.mark.parametrize("conv", ["gcn", "graphconv-max", "sage-mean", "gin-mlp"])
@pytest.mark.parametrize("pool", ["mean", "max"])
def test_batched_equals_one_by_one(conv, pool):
    model = make(conv, pool=pool)
    graphs = random_graphs(4, seed=7)
    if pool == "max":  # a max with two entries within rounding of each other (symmetric nodes) is decided
        # by rounding, which differs between the batch and one graph (MKL blocks its products by shape)
        graphs = [g for g in random_graphs(8, seed=7) if max_pool_gap(model, g) > 1e-9][:4]
        assert len(graphs) == 4
    batch = Batch.from_data_list(graphs)
    exp = explainer(model, "binary_classification")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        together = exp(batch.x, batch.edge_index, batch=batch.batch)
        singles = [exp(g.x, g.edge_index) for g in graphs]
    torch.testing.assert_close(together.node_relevance, torch.cat([s.node_relevance for s in singles]))
    torch.testing.assert_close(together.edge_relevance, torch.cat([s.edge_relevance for s in singles]))
    assert together.edge_relevance.abs().sum() > 0


# ------------------------------------------------------- lrp_lib.teach.graph twin
def graph_twin(model):
    """The GraphConv(add) model of `make('graphconv-add', pool='add')` as lrp_lib.teach.graph layers:
    edges copy their sender (identity weight), nodes add W_root x + W_rel sum(edges) + b.  All with
    eps = 0: lrp_lib.teach.graph applies epsilon once per layer (on z), the explainer once per term, and
    the two definitions coincide at eps = 0 (compare with rule="z")."""
    layers = []
    for conv in (model.conv1, model.conv2):
        f_in, f_out = conv.lin_rel.weight.shape[1], conv.lin_rel.weight.shape[0]
        copy = G.EdgeLinear(f_in, sender_features=f_in, bias=False, eps=0.0)
        node = G.NodeLinear(f_out, node_features=f_in, incoming_features=f_in, aggregation="sum", eps=0.0)
        with torch.no_grad():
            copy.W_sender.copy_(torch.eye(f_in))
            node.W_node.copy_(conv.lin_root.weight)
            node.W_incoming.copy_(conv.lin_rel.weight)
            node.bias.copy_(conv.lin_rel.bias)
        layers += [copy, node, G.NodeReLU()]
    pool = G.GlobalLinear(model.lin1.out_features, node_features=model.lin1.in_features, aggregation="sum",
                          eps=0.0)
    head = G.GlobalLinear(1, global_features=model.lin2.in_features, eps=0.0)
    with torch.no_grad():
        pool.W_node.copy_(model.lin1.weight)
        pool.bias.copy_(model.lin1.bias)
        head.W_global.copy_(model.lin2.weight)
        head.bias.copy_(model.lin2.bias)
    return nn.Sequential(*layers, pool, G.GlobalReLU(), head).double()


def test_matches_the_lrp_lib_graph_layers():
    model = make("graphconv-add", pool="add")
    batch = Batch.from_data_list(random_graphs(3, seed=11))
    twin = graph_twin(model)
    data = G.relevance_inputs(Data(x=batch.x, edge_index=batch.edge_index, batch=batch.batch))
    intermediate = []
    with relevance():
        h = data
        for layer in twin:
            h = layer(h)
            if isinstance(layer, G.EdgeLinear):
                h.edge_attr.retain_grad()
                intermediate.append(h.edge_attr)
    torch.testing.assert_close(h.u, model(batch.x, batch.edge_index, batch.batch))
    h.u.backward(h.u.detach())
    e = explainer(model, rule="z")(batch.x, batch.edge_index, batch=batch.batch)
    torch.testing.assert_close(e.node_relevance, data.x.grad)
    torch.testing.assert_close(e.edge_relevance, sum(t.grad.sum(-1) for t in intermediate))


# -------------------------------------------------------------- bad input
class WithGAT(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = GATConv(4, 3)
        self.lin = nn.Linear(3, 1)

    def forward(self, x, edge_index, batch=None):
        return self.lin(global_mean_pool(self.conv(x, edge_index), batch))


class WithNorm(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = GCNConv(4, 3)
        self.norm = nn.BatchNorm1d(3)
        self.lin = nn.Linear(3, 1)

    def forward(self, x, edge_index, batch=None):
        return self.lin(global_mean_pool(self.norm(self.conv(x, edge_index)), batch))


class WithSigmoid(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = GCNConv(4, 3)
        self.lin = nn.Linear(3, 1)

    def forward(self, x, edge_index, batch=None):
        return self.lin(global_mean_pool(torch.sigmoid(self.conv(x, edge_index)), batch))


class WithProjectedSAGE(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = SAGEConv(4, 3, project=True)
        self.lin = nn.Linear(3, 1)

    def forward(self, x, edge_index, batch=None):
        return self.lin(global_mean_pool(F.relu(self.conv(x, edge_index)), batch))


class WithNormMLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = GINConv(MLP([4, 5, 3]))  # batch norm inside
        self.lin = nn.Linear(3, 1)

    def forward(self, x, edge_index, batch=None):
        return self.lin(global_add_pool(self.conv(x, edge_index), batch))


def _with_running_stats(model):
    """Non-trivial batch-norm statistics, as after training."""
    g = torch.Generator().manual_seed(3)
    for m in model.modules():
        if isinstance(m, nn.BatchNorm1d):
            m.running_mean.copy_(torch.rand(m.num_features, generator=g, dtype=m.running_mean.dtype) - 0.5)
            m.running_var.copy_(torch.rand(m.num_features, generator=g, dtype=m.running_var.dtype) + 0.5)
    return model


@pytest.mark.parametrize("model", [WithGAT, WithNorm, WithSigmoid, WithProjectedSAGE, WithNormMLP, "WithGRU"])
def test_models_the_old_per_layer_rewrites_refused_are_explained(model):
    """Relevance accounts for the whole output: the node relevance plus what the biases and the
    stabiliser kept (``bias_relevance``) is the explained logit; and the masks are finite."""
    torch.manual_seed(4)
    model = globals()[model] if isinstance(model, str) else model
    model = _with_running_stats(model().double().eval())
    data = random_graphs(1)[0]
    e = explainer(model, rule="z")(data.x, data.edge_index)
    out = float(model(data.x, data.edge_index))
    assert float(e.node_relevance.sum() + e.bias_relevance) == pytest.approx(out, rel=1e-9, abs=1e-12)
    assert abs(float(e.relevance_residual)) < 1e-9
    assert torch.isfinite(e.edge_relevance).all() and e.edge_relevance.abs().sum() > 0


class Doubling(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return 2 * x

    @staticmethod
    def backward(ctx, g):
        return 2 * g


class WithCustomFunction(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = GCNConv(4, 3)
        self.lin = nn.Linear(3, 1)

    def forward(self, x, edge_index, batch=None):
        return self.lin(global_mean_pool(Doubling.apply(self.conv(x, edge_index)), batch))


class WithLogSoftmax(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = GCNConv(4, 3)
        self.lin = nn.Linear(3, 2)

    def forward(self, x, edge_index, batch=None):
        # log_softmax inside the model (not as its output head) has no rule
        return self.lin(global_mean_pool(F.log_softmax(self.conv(x, edge_index), dim=-1), batch))


class WithAttentionModule(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = GCNConv(4, 4)
        self.attn = nn.MultiheadAttention(4, 2, batch_first=True, add_bias_kv=True)  # learnt extra keys: no rule
        self.lin = nn.Linear(4, 2)

    def forward(self, x, edge_index, batch=None):
        h = self.conv(x, edge_index).unsqueeze(0)
        return self.lin(global_mean_pool(self.attn(h, h, h)[0].squeeze(0), batch))


class WithGRU(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch_geometric.nn.GatedGraphConv(4, num_layers=2)
        self.lin = nn.Linear(4, 1)

    def forward(self, x, edge_index, batch=None):
        return self.lin(global_mean_pool(self.conv(x, edge_index), batch))


@pytest.mark.parametrize("model,named", [(WithCustomFunction, "through Doubling"),
                                         (WithLogSoftmax, "log_softmax in the model's own forward"),
                                         (WithAttentionModule, "multi_head_attention_forward with bias_k, bias_v in module 'attn'")])
def test_unsupported_operations_raise_a_clear_error(model, named):
    model = model().double().eval()
    data = random_graphs(1)[0]
    with pytest.raises(UnsupportedModelError, match=named):
        Explainer(model, algorithm=LRPExplainer("epsilon"), explanation_type="model", node_mask_type="attributes",
                  edge_mask_type="object", model_config=dict(mode="multiclass_classification", task_level="graph",
                                                             return_type="raw"))(data.x, data.edge_index,
                                                                                 target=torch.tensor([0]))
    # nothing stays patched after the error
    assert F.relu is torch.nn.functional.relu and global_mean_pool is torch_geometric.nn.global_mean_pool
    assert "forward" not in model.conv.__dict__


def test_unsupported_configurations_raise():
    model = make("gcn")
    data = random_graphs(1)[0]
    with pytest.raises(ValueError, match="not computed by a final softmax, log_softmax or sigmoid"):
        Explainer(model, algorithm=LRPExplainer(), explanation_type="model", edge_mask_type="object",
                  model_config=dict(mode="binary_classification", task_level="graph", return_type="probs"))(
            data.x, data.edge_index)
    with pytest.raises(ValueError, match="rule 'nope' is not known"):
        LRPExplainer(rule="nope")
    with pytest.raises(TypeError, match="composite must be a lrp_lib.core.composites.Composite"):
        LRPExplainer(composite="gamma")


class NodeRegressor(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = GCNConv(4, 5, bias=False)
        self.conv2 = GraphConv(5, 1, bias=False)

    def forward(self, x, edge_index):
        return self.conv2(F.relu(self.conv1(x, edge_index)), edge_index)


def test_node_level_explanation_starts_from_the_indexed_nodes():
    torch.manual_seed(2)
    model = NodeRegressor().double().eval()
    data = random_graphs(1, seed=9)[0]
    exp = Explainer(model, algorithm=LRPExplainer("z"), explanation_type="model", node_mask_type="attributes",
                    edge_mask_type="object", model_config=dict(mode="regression", task_level="node", return_type="raw"))
    out = model(data.x, data.edge_index).detach().view(-1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        one = exp(data.x, data.edge_index, index=2)
        two = exp(data.x, data.edge_index, index=torch.tensor([0, 2]))
        zero = exp(data.x, data.edge_index, index=0)
    assert float(one.node_relevance.sum()) == pytest.approx(float(out[2]))
    torch.testing.assert_close(two.node_relevance, one.node_relevance + zero.node_relevance)  # relevance is linear in R_out
    torch.testing.assert_close(two.edge_relevance, one.edge_relevance + zero.edge_relevance)


# ------------------------------------------------------------------ heterogeneous graphs
def test_a_heterogeneous_model_is_explained_per_node_and_edge_type():
    """to_hetero(GraphSAGE), bias-free, LRP-0: the node masks of all types sum to the explained output
    and equal input x gradient (piecewise linear); each edge type gets its own edge mask."""
    from torch_geometric.explain import HeteroExplanation
    from torch_geometric.nn import to_hetero

    torch.manual_seed(0)
    x = {"a": torch.rand(5, 3, dtype=torch.float64), "b": torch.rand(4, 2, dtype=torch.float64)}
    ei = {("a", "to", "b"): torch.tensor([[0, 1, 2, 3, 4], [0, 1, 2, 3, 0]]),
          ("b", "rev", "a"): torch.tensor([[0, 1, 2, 3], [1, 2, 3, 4]]),
          ("a", "self", "a"): torch.tensor([[0, 1, 2], [1, 2, 3]])}

    class Body(nn.Module):
        def __init__(self):
            super().__init__()
            self.c1 = SAGEConv((-1, -1), 4, bias=False)
            self.c2 = SAGEConv((-1, -1), 1, bias=False)

        def forward(self, x, edge_index):
            return self.c2(self.c1(x, edge_index).relu(), edge_index)

    hetero = to_hetero(Body(), (["a", "b"], list(ei)), aggr="sum").double()

    class Head(nn.Module):
        def __init__(self):
            super().__init__()
            self.body = hetero

        def forward(self, x, edge_index):
            return self.body(x, edge_index)["b"]

    model = Head().eval()
    model(x, ei)  # initialise the lazy layers
    e = Explainer(model, algorithm=LRPExplainer("z"), explanation_type="model", node_mask_type="attributes",
                  edge_mask_type="object", model_config=dict(mode="regression", task_level="node",
                                                             return_type="raw"))(x, ei, index=1)
    assert isinstance(e, HeteroExplanation)
    out = float(model(x, ei)[1])
    assert sum(float(e[t].node_relevance.sum()) for t in x) == pytest.approx(out, rel=1e-9)
    leaves = {k: v.clone().requires_grad_(True) for k, v in x.items()}
    model(leaves, ei)[1].sum().backward()
    for t in x:
        torch.testing.assert_close(e[t].node_relevance, leaves[t] * leaves[t].grad)
    assert all(e[k].edge_relevance.shape == (v.shape[1],) for k, v in ei.items())
    assert float(e[("a", "to", "b")].edge_relevance.abs().sum()) > 0
    from lrp_lib.explain.explainer import Explainer as CheckingExplainer
    with pytest.raises(ValueError, match="edge types must be"):
        CheckingExplainer(model, algorithm=LRPExplainer("z"), explanation_type="model", node_mask_type="attributes",
                  model_config=dict(mode="regression", task_level="node", return_type="raw"))(
            x, {("a", "to", "c"): ei[("a", "to", "b")]}, index=1)


HETERO_EI = {("a", "to", "b"): torch.tensor([[0, 1, 2, 3, 4, 4], [0, 1, 2, 3, 0, 2]]),
             ("b", "rev", "a"): torch.tensor([[0, 1, 2, 3, 3], [1, 2, 3, 4, 0]]),
             ("a", "self", "a"): torch.tensor([[0, 1, 2, 2], [1, 2, 3, 2]])}  # (one self-loop of its own)


def _hetero_x():
    g = torch.Generator().manual_seed(3)
    return {"a": torch.rand(5, 3, generator=g, dtype=torch.float64),
            "b": torch.rand(4, 2, generator=g, dtype=torch.float64)}


def _hetero_explain(model, x, ei, rule="z", **kwargs):
    return Explainer(model, algorithm=LRPExplainer(rule), explanation_type="model",
                     node_mask_type="attributes", edge_mask_type="object",
                     model_config=dict(mode="regression", task_level="node", return_type="raw"))(x, ei, index=1, **kwargs)


def test_heteroconv_whose_gcn_adds_self_loops_gets_edge_relevance():
    """HeteroConv {a->b: SAGE, b->a: GraphConv, a->a: GCN}: the GCN passes messages along its edge type's edges
    with self-loops added; each edge's relevance is the gradient of a mask of ones on its messages (PyG's
    set_hetero_masks), as LRP-0 of a bias-free ReLU network is input times gradient."""
    from torch_geometric.explain.algorithm.utils import clear_masks, set_hetero_masks
    from torch_geometric.nn import HeteroConv

    torch.manual_seed(0)

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = HeteroConv({("a", "to", "b"): SAGEConv((-1, -1), 4, bias=False),
                                    ("b", "rev", "a"): GraphConv((-1, -1), 4, bias=False),
                                    ("a", "self", "a"): GCNConv(-1, 4, bias=False)}, aggr="sum")
            self.head = nn.Linear(4, 1, bias=False)

        def forward(self, x, edge_index):
            return self.head(self.conv(x, edge_index)["a"].relu())

    x, ei = _hetero_x(), HETERO_EI
    model = Net().double().eval()
    model(x, ei)  # the lazy layers
    e = _hetero_explain(model, x, ei)
    masks = {k: torch.ones(v.shape[1], dtype=torch.float64, requires_grad=True) for k, v in ei.items()}
    set_hetero_masks(model, masks, ei, apply_sigmoid=False)
    try:
        model(x, ei)[1].sum().backward()
    finally:
        clear_masks(model)
    for k in ei:  # (a->b does not reach the explained node of type a: no gradient, no relevance)
        want = masks[k].grad if masks[k].grad is not None else torch.zeros_like(masks[k])
        torch.testing.assert_close(e[k].edge_relevance, want, rtol=1e-10, atol=1e-12)
    assert float(e[("a", "self", "a")].edge_relevance.abs().sum()) > 0


class _HeteroJoinsADetachedHalf(nn.Module):
    """HeteroConv, then a head that reads half of the features of type a through a detach."""

    def __init__(self):
        super().__init__()
        self.conv = HeteroConv({("a", "to", "b"): SAGEConv((-1, -1), 4, bias=False),
                                ("b", "rev", "a"): GraphConv((-1, -1), 4, bias=False),
                                ("a", "self", "a"): SAGEConv(-1, 4, bias=False)}, aggr="sum")
        self.head = nn.Linear(4, 1, bias=False)

    def forward(self, x, edge_index):
        h = self.conv(x, edge_index)["a"].relu()
        return self.head(torch.cat([h[:, :2], h.detach()[:, 2:]], 1))


def test_a_heterogeneous_model_reports_the_relevance_it_loses_and_refuses_nan():
    """What a detach keeps from the inputs of a heterogeneous graph is the residual, with a LostRelevanceWarning
    giving its amount (as on a homogeneous graph); NaN weights are refused, not explained as NaN."""
    torch.manual_seed(0)
    x, ei = _hetero_x(), HETERO_EI
    model = _HeteroJoinsADetachedHalf().double().eval()
    model(x, ei)  # the lazy layers
    leaves = {k: v.clone().requires_grad_(True) for k, v in x.items()}
    h = model.conv(leaves, ei)["a"].relu()
    kept = float(h[1, :2] @ model.head.weight[0, :2])  # LRP-0 of a bias-free ReLU network: what reaches x
    out = float(model(x, ei)[1])
    assert abs(out - kept) > 1e-3  # the detached half carries a part worth reporting
    with pytest.warns(LostRelevanceWarning, match=rf"relevance {out - kept:.4g} "):
        e = _hetero_explain(model, x, ei)
    assert float(e.relevance_residual) == pytest.approx(out - kept, rel=1e-9)
    assert sum(float(e[t].node_relevance.sum()) for t in x) == pytest.approx(kept, rel=1e-9)
    with torch.no_grad():
        model.head.weight[0, 0] = float("nan")
    with pytest.raises(ValueError, match="the relevance is NaN or Inf"):
        _hetero_explain(model, x, ei)


def test_a_heterogeneous_graph_gets_edge_attr_relevance_per_edge_type():
    """GINEConv reads one edge type's features: they are inputs as the node features are, with their relevance on
    the explanation per edge type; a bias-free ReLU network under LRP-0 gives input times gradient for both, and the
    output is accounted for.  Edge features of the wrong length are refused naming the edge type, node features of
    another dtype than the weights naming the node type."""
    from torch_geometric.explain import HeteroExplanation
    from torch_geometric.nn import GINEConv

    torch.manual_seed(0)

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = HeteroConv({("a", "to", "b"): SAGEConv((-1, -1), 3, bias=False),
                                    ("b", "rev", "a"): GraphConv((-1, -1), 3, bias=False),
                                    ("a", "self", "a"): GINEConv(nn.Linear(3, 3, bias=False), edge_dim=2)})
            self.head = nn.Linear(3, 1, bias=False)

        def forward(self, x, edge_index, edge_attr):
            return self.head(self.conv(x, edge_index, edge_attr_dict=edge_attr)["a"].relu())

    x, ei = _hetero_x(), HETERO_EI
    g = torch.Generator().manual_seed(1)
    attr = {("a", "self", "a"): torch.rand(ei[("a", "self", "a")].shape[1], 2, generator=g, dtype=torch.float64)}
    model = Net().double().eval()
    model(x, ei, attr)  # the lazy layers
    with torch.no_grad():
        model.conv.convs["<a___self___a>"].lin.bias.zero_()  # (GINE's edge map has a bias by default)
    e = _hetero_explain(model, x, ei, edge_attr=attr)
    assert isinstance(e, HeteroExplanation)
    leaves = {k: v.clone().requires_grad_(True) for k, v in x.items()}
    attr_leaf = {k: v.clone().requires_grad_(True) for k, v in attr.items()}
    out = model(leaves, ei, attr_leaf)[1].sum()
    out.backward()
    for t in x:
        torch.testing.assert_close(e[t].node_relevance, leaves[t] * leaves[t].grad)
    k = ("a", "self", "a")
    torch.testing.assert_close(e[k].edge_attr_relevance, attr_leaf[k] * attr_leaf[k].grad)
    assert float(e[k].edge_attr_relevance.abs().sum()) > 1e-3
    assert abs(float(e.bias_relevance)) < 1e-12 and abs(float(e.relevance_residual)) < 1e-12
    total = sum(float(e[t].node_relevance.sum()) for t in x) + float(e[k].edge_attr_relevance.sum())
    assert total == pytest.approx(float(out), rel=1e-12)
    from lrp_lib.explain.explainer import Explainer as CheckingExplainer  # (checks before PyG's prediction pass)
    checking = CheckingExplainer(model, algorithm=LRPExplainer("z"), explanation_type="model",
                                 node_mask_type="attributes", model_config=dict(mode="regression", task_level="node",
                                                                                return_type="raw"))
    with pytest.raises(ValueError, match=r"edge_attr\[\('a', 'self', 'a'\)\] has 3 rows but edge_index has 4"):
        checking(x, ei, index=1, edge_attr={k: attr[k][:3]})
    with pytest.raises(ValueError, match="edge_attr has the key"):
        checking(x, ei, index=1, edge_attr={("a", "self", "b"): attr[k]})
    with pytest.raises(TypeError, match=r"x\['b'\] is torch.float32 but the model's weights are torch.float64"):
        checking({"a": x["a"], "b": x["b"].float()}, ei, index=1, edge_attr=attr)


def test_hgt_joins_all_edge_types_into_one_index():
    """HGTConv passes its messages along every edge type's edges joined in the input's order, each shifted by its
    node types' offsets: each edge's relevance lands on its own type, as PyG's own mask on the joined messages
    finds it."""
    from torch_geometric.nn import HGTConv

    torch.manual_seed(0)
    meta = (["a", "b"], list(HETERO_EI))

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1, self.conv2 = HGTConv(-1, 4, meta, heads=2), HGTConv(4, 4, meta, heads=2)
            self.head = nn.Linear(4, 1)

        def forward(self, x, edge_index):
            h = {k: v.relu() for k, v in self.conv1(x, edge_index).items()}
            return self.head(self.conv2(h, edge_index)["a"].relu())

    x = _hetero_x()
    model = Net().double().eval()
    model(x, HETERO_EI)
    e = _hetero_explain(model, x, HETERO_EI, rule="epsilon")
    # PyG's own injection, independent of how the explainer places messages: a mask of ones over the joined edges
    # on every layer's messages; under the forward rules its gradient is each edge's relevance
    from torch_geometric.explain.algorithm.utils import clear_masks, set_masks
    from lrp_lib.core.composites import get_composite
    from lrp_lib.explain.mode.forward import ForwardMode
    mask = torch.ones(sum(v.shape[1] for v in HETERO_EI.values()), dtype=torch.float64, requires_grad=True)
    set_masks(model, mask, torch.cat(list(HETERO_EI.values()), 1), apply_sigmoid=False)
    leaves = {k: v.clone().requires_grad_(True) for k, v in x.items()}
    try:
        mode = ForwardMode(get_composite("epsilon"), model)
        with torch.enable_grad(), mode:
            for t in leaves.values():
                mode.mark(t)
            out = model(leaves, HETERO_EI)
        out[1].sum().backward()  # the explained output's relevance is itself: gradient 1
    finally:
        clear_masks(model)
    want = dict(zip(HETERO_EI, mask.grad.split([v.shape[1] for v in HETERO_EI.values()])))
    for k in HETERO_EI:
        torch.testing.assert_close(e[k].edge_relevance, want[k], rtol=1e-10, atol=1e-12)
        assert float(e[k].edge_relevance.abs().sum()) > 0
    # an edge whose messages cannot reach the explained node (a of index 1) in two steps gets none
    reach = {1} | {int(s) for s, t in HETERO_EI[("a", "self", "a")].t().tolist() if t == 1}
    into_a = HETERO_EI[("a", "self", "a")]
    far = torch.tensor([int(t) not in reach for t in into_a[1]])
    assert far.any() and float(e[("a", "self", "a")].edge_relevance[far].abs().sum()) == 0


class NodeNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1, self.conv2, self.head = GCNConv(4, 6), GCNConv(6, 6), nn.Linear(6, 1)

    def forward(self, x, edge_index):
        return self.head(torch.relu(self.conv2(torch.relu(self.conv1(x, edge_index)), edge_index)))


@pytest.mark.parametrize("per_index", [False, True])
@pytest.mark.parametrize("context", ["no_grad", "inference_mode", "inference_tensors"])
def test_explaining_under_no_grad_or_inference_mode_gives_the_same_relevance(context, per_index):
    """An evaluation loop under torch.no_grad() / inference_mode() (even with inference tensors as
    input) gets the relevance it gets with autograd on."""
    torch.manual_seed(0)
    model = NodeNet().double().eval()
    g = random_graphs(seed=5)[0]
    ex = Explainer(model, algorithm=LRPExplainer(per_index=per_index), explanation_type="model",
                   node_mask_type="attributes", edge_mask_type="object",
                   model_config=dict(mode="regression", task_level="node", return_type="raw"))
    index = torch.tensor([1, 3])
    want = ex(g.x, g.edge_index, index=index)
    if context == "no_grad":
        with torch.no_grad():
            got = ex(g.x, g.edge_index, index=index)
    else:
        with torch.inference_mode():
            x, ei = (g.x.clone(), g.edge_index.clone()) if context == "inference_tensors" else (g.x, g.edge_index)
            got = ex(x, ei, index=index)
    torch.testing.assert_close(got.node_relevance, want.node_relevance, rtol=0, atol=0)
    torch.testing.assert_close(got.edge_relevance, want.edge_relevance, rtol=0, atol=0)
    assert float(want.node_relevance.abs().sum()) > 0


class Headed(nn.Module):
    """A GCN classifier whose forward ends in ``head`` (as most PyG examples end in log_softmax)."""

    def __init__(self, head, classes=3):
        super().__init__()
        self.conv1, self.conv2, self.lin = GCNConv(4, 6), GCNConv(6, 6), nn.Linear(6, classes)
        self.head = head

    def forward(self, x, edge_index, batch=None):
        h = torch.relu(self.conv2(torch.relu(self.conv1(x, edge_index)), edge_index))
        return self.head(self.lin(global_mean_pool(h, batch)))


HEADS = {"log_softmax": (lambda z: F.log_softmax(z, dim=-1), "log_probs"),
         "softmax": (lambda z: torch.softmax(z, -1), "probs"),
         "log_softmax as raw": (lambda z: z.log_softmax(-1), "raw")}


@pytest.mark.parametrize("head", list(HEADS))
def test_a_probability_head_is_explained_from_its_logits(head):
    fn, return_type = HEADS[head]
    batch = Batch.from_data_list(random_graphs(seed=2))

    def explain(model, rt):
        torch.manual_seed(0)
        return Explainer(model, algorithm=LRPExplainer("z"), explanation_type="model", node_mask_type="attributes",
                         edge_mask_type="object", model_config=dict(mode="multiclass_classification",
                                                                    task_level="graph", return_type=rt))(
            batch.x, batch.edge_index, batch=batch.batch)

    torch.manual_seed(1)
    logits = Headed(lambda z: z).double().eval()
    headed = Headed(fn).double().eval()
    headed.load_state_dict(logits.state_dict())
    want, got = explain(logits, "raw"), explain(headed, return_type)
    torch.testing.assert_close(got.node_relevance, want.node_relevance, rtol=0, atol=0)
    torch.testing.assert_close(got.edge_relevance, want.edge_relevance, rtol=0, atol=0)
    z = logits(batch.x, batch.edge_index, batch.batch).detach()
    graphs = z.shape[0]
    nodes = torch.zeros(graphs, dtype=z.dtype).index_add_(0, batch.batch, got.node_relevance.sum(-1))
    torch.testing.assert_close(nodes + got.bias_relevance, z.max(-1).values, rtol=0, atol=1e-9)  # the logits
    torch.testing.assert_close(got.bias_relevance, want.bias_relevance, rtol=0, atol=0)
    assert got.explained_output == f"the input of the model's final {head.split()[0]}"
    assert want.get("explained_output") is None


@pytest.mark.parametrize("target", [0, 1])
def test_a_sigmoid_head_of_a_binary_classifier_is_explained_from_its_log_odds(target):
    torch.manual_seed(3)
    logit = Headed(lambda z: z, classes=1).double().eval()
    prob = Headed(torch.sigmoid, classes=1).double().eval()
    prob.load_state_dict(logit.state_dict())
    g = random_graphs(1, seed=4)[0]
    explain = [Explainer(m, algorithm=LRPExplainer("z"), explanation_type="phenomenon", node_mask_type="object",
                         model_config=dict(mode="binary_classification", task_level="graph", return_type=rt))
               for m, rt in ((logit, "raw"), (prob, "probs"))]
    t = torch.tensor([target])
    want, got = (ex(g.x, g.edge_index, target=t) for ex in explain)
    torch.testing.assert_close(got.node_relevance, want.node_relevance, rtol=0, atol=0)
    z = float(logit(g.x, g.edge_index))
    assert float(got.node_relevance.sum() + got.bias_relevance) == pytest.approx(z if target else -z, rel=1e-9)


def test_a_regression_ending_in_a_sigmoid_is_explained_as_its_output():
    torch.manual_seed(5)
    model = Headed(torch.sigmoid, classes=1).double().eval()
    g = random_graphs(1, seed=6)[0]
    e = Explainer(model, algorithm=LRPExplainer("z"), explanation_type="model", node_mask_type="object",
                  model_config=dict(mode="regression", task_level="graph", return_type="raw"))(g.x, g.edge_index)
    y = float(model(g.x, g.edge_index))
    assert float(e.node_relevance.sum() + e.bias_relevance) == pytest.approx(y, rel=1e-9)  # sigmoid: identity rule
    assert e.get("explained_output") is None


@pytest.mark.parametrize("per_index", [False, True])
def test_common_attributes_is_each_features_relevance_summed_over_the_nodes(per_index):
    torch.manual_seed(0)
    model = NodeNet().double().eval()
    g = random_graphs(seed=7)[0]

    def explain(node_type):
        return Explainer(model, algorithm=LRPExplainer(per_index=per_index), explanation_type="model",
                         node_mask_type=node_type, model_config=dict(mode="regression", task_level="node",
                                                                     return_type="raw"))(
            g.x, g.edge_index, index=torch.tensor([0, 2]))

    full, common = explain("attributes"), explain("common_attributes")
    torch.testing.assert_close(common.node_relevance, full.node_relevance.sum(0, keepdim=True))
    assert common.node_mask.shape == (1, g.x.shape[1])
    torch.testing.assert_close(common.node_mask, common.node_relevance.abs() / common.node_relevance.abs().max())


def test_the_checked_explainer_is_the_top_level_entry_point():
    import lrp_lib
    from lrp_lib.core import composites
    from lrp_lib.explain import explainer as explain
    assert lrp_lib.Explainer is explain.Explainer and lrp_lib.LRPExplainer is explain.LRPExplainer
    assert lrp_lib.Composite is composites.Composite
    with pytest.raises(AttributeError, match="has no attribute 'Explainers'"):
        lrp_lib.Explainers  # noqa: B018


class LinkPredictor(nn.Module):
    """A GCN encoder with a dot-product decoder or an MLP decoder on the concatenated end points
    (PyG's link_pred examples), bias-free: one score per column of ``edge_label_index``."""

    def __init__(self, decoder="dot"):
        super().__init__()
        self.conv1, self.conv2 = GCNConv(4, 8, bias=False), GCNConv(8, 8, bias=False)
        self.decoder = decoder
        self.mlp = nn.Sequential(nn.Linear(16, 8, bias=False), nn.ReLU(), nn.Linear(8, 1, bias=False))

    def forward(self, x, edge_index, edge_label_index):
        z = self.conv2(torch.relu(self.conv1(x, edge_index)), edge_index)
        src, dst = z[edge_label_index[0]], z[edge_label_index[1]]
        if self.decoder == "dot":
            return (src * dst).sum(-1)
        return self.mlp(torch.cat([src, dst], -1)).view(-1)


@pytest.mark.parametrize("decoder, share", [("dot", 0.5), ("mlp", 1.0)])
@pytest.mark.parametrize("index", [1, [0, 2]])
def test_link_prediction_explains_each_scored_edge(device, decoder, share, index):
    """task_level='edge': the score of the explained columns of edge_label_index, conserved onto the
    features; a bias-free piecewise-linear encoder under LRP-0 gives x * grad times the decoder's
    degree share (the dot product of two embeddings splits uniformly: half to each end point)."""
    torch.manual_seed(2)
    model = LinkPredictor(decoder).double().to(device).eval()
    g = random_graphs(seed=8)[0].to(device)
    eli = torch.tensor([[0, 1, 3], [2, 3, 0]], device=device)
    ex = Explainer(model, algorithm=LRPExplainer("z"), explanation_type="model", node_mask_type="attributes",
                   edge_mask_type="object",
                   model_config=dict(mode="binary_classification", task_level="edge", return_type="raw"))
    score = model(g.x, g.edge_index, eli).detach()
    target = (score > 0).long()
    e = ex(g.x, g.edge_index, edge_label_index=eli, index=index, target=target)
    rows = torch.tensor(index, device=device).view(-1)
    explained = (score[rows] * (2 * target[rows] - 1)).sum()  # the log-odds of each edge's predicted class
    assert float(e.node_relevance.sum()) == pytest.approx(float(explained), rel=1e-9)
    assert e.bias_relevance.shape == () and e.bias_relevance.device == e.node_relevance.device
    assert abs(float(e.bias_relevance)) < 1e-9 and abs(float(e.relevance_residual)) < 1e-9  # bias-free
    leaf = g.x.clone().requires_grad_(True)
    (model(leaf, g.edge_index, eli)[rows] * (2 * target[rows] - 1)).sum().backward()
    torch.testing.assert_close(e.node_relevance, share * leaf * leaf.grad)
    assert e.edge_mask.shape == (g.edge_index.shape[1],) and float(e.edge_mask.max()) == pytest.approx(1.0)


def test_link_prediction_refuses_bad_edge_label_index_and_per_index():
    model = LinkPredictor().double().eval()
    g = random_graphs(seed=8)[0]
    cfg = dict(mode="regression", task_level="edge", return_type="raw")
    from lrp_lib import Explainer as CheckedExplainer# checks the inputs before PyG's prediction pass
    ex = CheckedExplainer(model, algorithm=LRPExplainer(), explanation_type="model", node_mask_type="object",
                          model_config=cfg)
    with pytest.raises(IndexError, match="edge_label_index refers to nodes 0..99 but the graph has 4 nodes"):
        ex(g.x, g.edge_index, edge_label_index=torch.tensor([[0, 99], [1, 2]]), index=0)
    with pytest.raises(ValueError, match="per_index=True explains node-level tasks"):
        Explainer(model, algorithm=LRPExplainer(per_index=True), explanation_type="model", node_mask_type="object",
                  model_config=cfg)


def test_a_deep_copy_of_an_explained_model_gets_the_same_edge_relevance():
    """The message hooks travel with copy.deepcopy; the copy must not get a second set (it doubled
    the edge relevance)."""
    import copy
    torch.manual_seed(0)
    model = NodeNet().double().eval()
    g = random_graphs(seed=9)[0]

    def explain(m):
        return Explainer(m, algorithm=LRPExplainer(), explanation_type="model", node_mask_type="object",
                         edge_mask_type="object",
                         model_config=dict(mode="regression", task_level="node", return_type="raw"))(
            g.x, g.edge_index, index=1)

    first = explain(model)
    again = explain(copy.deepcopy(model))
    torch.testing.assert_close(again.edge_relevance, first.edge_relevance, rtol=0, atol=0)
    assert float(first.edge_relevance.abs().sum()) > 0


@pytest.mark.parametrize("level", ["node", "graph", "edge"])
def test_the_defaults_hold_at_every_task_level_and_what_is_given_wins(level):
    from lrp_lib.core.composites import get_composite
    from lrp_lib.explain.explainer import DEFAULTS as want
    algorithm = LRPExplainer()
    Explainer(NodeNet().double(), algorithm=algorithm, explanation_type="model", node_mask_type="object",
              model_config=dict(mode="regression", task_level=level, return_type="raw"))
    assert algorithm.rule == get_composite(want["rule"]).linear
    assert repr(algorithm.composite) == repr(get_composite(want["rule"]))
    assert (algorithm.explained, algorithm.mask) == (want["explained"], want["mask"])
    given = LRPExplainer(rule="zplus", explained="contrast", mask="positive")
    Explainer(NodeNet().double(), algorithm=given, explanation_type="model", node_mask_type="object",
              model_config=dict(mode="regression", task_level=level, return_type="raw"))
    assert (repr(given.rule), given.explained, given.mask) == ("ZPlus()", "contrast", "positive")
    with pytest.raises(ValueError, match="pass either rule or composite, not both"):
        LRPExplainer(rule="zplus", composite=get_composite("gamma"))


# ------------------------------------------------------------------ per-graph accounting
class _Pooled(nn.Module):
    """Two message-passing layers with biases, a sum pool and a linear head: one logit per class."""

    def __init__(self, conv, detach=0.0):
        super().__init__()
        make = {"gcn": lambda i, o: GCNConv(i, o), "gat": lambda i, o: GATConv(i, o, heads=2, concat=False),
                "gin": lambda i, o: GINConv(nn.Sequential(nn.Linear(i, o), nn.ReLU(), nn.Linear(o, o)))}[conv]
        self.conv1, self.conv2 = make(3, 6), make(12 if detach else 6, 6)
        self.head = nn.Linear(6, 2)
        self.detach = detach

    def forward(self, x, edge_index, batch=None):
        h = torch.relu(self.conv1(x, edge_index))
        if self.detach:  # features that the relevance cannot follow: what reaches them is lost
            h = torch.cat([h, self.detach * h.detach()], -1)
        h = torch.relu(self.conv2(h, edge_index))
        return self.head(global_add_pool(h, batch))


def _graphs(device, sizes=(3, 7, 5, 9), seed=0):
    gen = torch.Generator().manual_seed(seed)
    graphs = []
    for n in sizes:
        src = torch.randint(0, n, (3 * n,), generator=gen)
        dst = torch.randint(0, n, (3 * n,), generator=gen)
        graphs.append(Data(x=torch.randn(n, 3, generator=gen, dtype=torch.float64),
                           edge_index=torch.stack([src, dst])).to(device))
    return graphs


def _graph_explainer(model, rule="epsilon", mode="multiclass_classification", edge_mask_type="object"):
    from lrp_lib.explain.explainer import Explainer as CheckingExplainer
    return CheckingExplainer(model, algorithm=LRPExplainer(rule=rule), explanation_type="phenomenon",
                             node_mask_type="attributes", edge_mask_type=edge_mask_type,
                             model_config=dict(mode=mode, task_level="graph", return_type="raw"))


def _per_graph(values, batch, graphs):
    return torch.zeros(graphs, dtype=values.dtype, device=values.device).index_add_(0, batch, values)


@pytest.mark.parametrize("conv", ["gcn", "gin", "gat"])
@pytest.mark.parametrize("rule", ["epsilon", "zplus", "z"])
@pytest.mark.parametrize("edges", ["object", None])
def test_bias_and_residual_are_accounted_per_graph(device, conv, rule, edges):
    """A batch of graphs of different sizes: one bias_relevance and one relevance_residual per graph
    (on the explanation's device), with node relevance of graph g + bias[g] + residual[g] = the
    logit of graph g's target, and each graph's values those of the graph explained alone (with
    and without edge relevance: the amounts kept are then split by graph as the backward runs)."""
    torch.manual_seed(3)
    model = _Pooled(conv).double().to(device).eval()
    graphs = _graphs(device)
    data = Batch.from_data_list(graphs)
    target = torch.tensor([0, 1, 1, 0], device=device)
    ex = _graph_explainer(model, rule, edge_mask_type=edges)
    e = ex(data.x, data.edge_index, batch=data.batch, target=target)
    logits = model(data.x, data.edge_index, data.batch).detach()
    want = logits.gather(1, target.view(-1, 1)).view(-1)
    assert e.bias_relevance.shape == (4,) and e.relevance_residual.shape == (4,)
    assert e.bias_relevance.device == e.node_relevance.device == data.x.device
    nodes = _per_graph(e.node_relevance.sum(-1), data.batch, 4)
    torch.testing.assert_close(nodes + e.bias_relevance + e.relevance_residual, want, rtol=0, atol=1e-9)
    assert float(e.bias_relevance.abs().min()) > 1e-6  # the biases keep a share in every graph
    for g, graph in enumerate(graphs):
        alone = ex(graph.x, graph.edge_index, target=target[g:g + 1])
        assert alone.bias_relevance.shape == (1,)
        torch.testing.assert_close(alone.node_relevance, e.node_relevance[data.batch == g], rtol=0, atol=1e-9)
        torch.testing.assert_close(alone.bias_relevance[0], e.bias_relevance[g], rtol=0, atol=1e-9)
        torch.testing.assert_close(alone.relevance_residual[0], e.relevance_residual[g], rtol=0, atol=1e-9)


def test_a_batch_explained_in_one_backward_equals_each_graph_alone(device):
    """Explainer(...)(batch): every graph explained from its own output in one call (index=None, and
    index selecting some graphs); the masks' signed relevance equals each graph explained alone."""
    torch.manual_seed(5)
    model = _Pooled("gin").double().to(device).eval()
    graphs = _graphs(device, sizes=(4, 2, 8, 6, 5), seed=2)
    data = Batch.from_data_list(graphs)
    ex = _graph_explainer(model, "zplus")
    target = torch.tensor([1, 0, 0, 1, 1], device=device)
    e = ex(data.x, data.edge_index, batch=data.batch, target=target)
    edge_graph = data.batch[data.edge_index[0]]
    for g, graph in enumerate(graphs):
        alone = ex(graph.x, graph.edge_index, target=target[g:g + 1])
        torch.testing.assert_close(alone.node_relevance, e.node_relevance[data.batch == g], rtol=0, atol=1e-9)
        torch.testing.assert_close(alone.edge_relevance, e.edge_relevance[edge_graph == g], rtol=0, atol=1e-9)
    some = ex(data.x, data.edge_index, batch=data.batch, target=target, index=torch.tensor([1, 3], device=device))
    keep = (data.batch == 1) | (data.batch == 3)
    torch.testing.assert_close(some.node_relevance[keep], e.node_relevance[keep], rtol=0, atol=1e-9)
    assert float(some.node_relevance[~keep].abs().max()) == 0.0
    assert float(some.bias_relevance[[0, 2, 4]].abs().max()) == 0.0
    torch.testing.assert_close(some.bias_relevance[[1, 3]], e.bias_relevance[[1, 3]], rtol=0, atol=1e-9)


@pytest.mark.parametrize("edges", ["object", None])
def test_losses_that_cancel_over_the_batch_are_still_placed_per_graph(device, edges):
    """The same graph twice, explained for class 1 and for class 0 of a binary model that detaches
    part of its signal: the two graphs lose opposite amounts, so the total residual is zero, but
    each graph's residual (and bias) is its own, as when explained alone."""
    from lrp_lib.explain.explainer import LostRelevanceWarning
    torch.manual_seed(11)
    model = _Pooled("gcn", detach=0.5).double().to(device).eval()
    model.head = nn.Linear(6, 1).double().to(device)
    graph = _graphs(device, sizes=(6,), seed=4)[0]
    data = Batch.from_data_list([graph, graph])
    ex = _graph_explainer(model, "epsilon", mode="binary_classification", edge_mask_type=edges)
    target = torch.tensor([1, 0], device=device)
    e = ex(data.x, data.edge_index, batch=data.batch, target=target)  # no warning: the total is kept
    assert abs(float(e.relevance_residual.sum())) < 1e-9 < abs(float(e.relevance_residual[0]))
    logit = model(graph.x, graph.edge_index).detach().view(-1)[0]
    nodes = _per_graph(e.node_relevance.sum(-1), data.batch, 2)
    torch.testing.assert_close(nodes + e.bias_relevance + e.relevance_residual,
                               torch.stack([logit, -logit]), rtol=0, atol=1e-9)
    with pytest.warns(LostRelevanceWarning):
        alone = ex(graph.x, graph.edge_index, target=target[:1])
    torch.testing.assert_close(alone.bias_relevance[0], e.bias_relevance[0], rtol=0, atol=1e-9)
    torch.testing.assert_close(alone.relevance_residual[0], e.relevance_residual[0], rtol=0, atol=1e-9)
    torch.testing.assert_close(e.bias_relevance[1], -e.bias_relevance[0], rtol=0, atol=1e-9)


def test_single_graph_accounting_is_one_value(device):
    """One graph (no batch): bias_relevance and relevance_residual have one entry, and node
    relevance + bias + residual is the explained logit, as before."""
    torch.manual_seed(2)
    model = _Pooled("gcn").double().to(device).eval()
    graph = _graphs(device, sizes=(7,))[0]
    e = _graph_explainer(model, "zplus")(graph.x, graph.edge_index, target=torch.tensor([1], device=device))
    assert e.bias_relevance.shape == (1,) and e.relevance_residual.shape == (1,)
    logit = float(model(graph.x, graph.edge_index).detach()[0, 1])
    assert float(e.node_relevance.sum() + e.bias_relevance + e.relevance_residual) == pytest.approx(logit, abs=1e-9)
    assert float(e.relevance_residual) == pytest.approx(0.0, abs=1e-9)


def test_per_graph_accounting_costs_no_more_backward_unless_relevance_is_lost(monkeypatch):
    """The amounts each row kept are read from probes per row and summed by graph as the backward runs: no
    more backward where those sums show that no graph lost relevance, with or without edge relevance, and one
    per graph but the last where one did."""
    from lrp_lib.explain import accounting
    calls = []
    rerun = accounting._rerun
    monkeypatch.setattr(accounting, "_rerun", lambda *a: calls.append(1) or rerun(*a))
    torch.manual_seed(3)
    graphs = _graphs(torch.device("cpu"))
    data = Batch.from_data_list(graphs)
    target = torch.tensor([0, 1, 1, 0])
    _graph_explainer(_Pooled("gcn").double().eval())(data.x, data.edge_index, batch=data.batch, target=target)
    assert len(calls) == 0
    calls.clear()
    lossy = _Pooled("gcn", detach=0.5).double().eval()
    with pytest.warns(UserWarning, match="did not reach x"):
        _graph_explainer(lossy)(data.x, data.edge_index, batch=data.batch, target=target)
    assert len(calls) == 3
    for model, backward in ((_Pooled("gcn").double().eval(), 0), (lossy, 3)):
        calls.clear()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            e = _graph_explainer(model, edge_mask_type=None)(data.x, data.edge_index, batch=data.batch,
                                                             target=target)
        assert e.bias_relevance.shape == (4,) and len(calls) == backward


@pytest.mark.parametrize("conv", ["gcn", "gin", "gat"])
def test_node_level_explanation_conserves_with_biases(device, conv):
    """task_level='node', per_index=False: one explanation of the sum of the explained nodes' logits;
    node relevance + bias_relevance + relevance_residual (0-dimensional, on the explanation's device)
    is that sum, under biases and the default z+ rule."""
    torch.manual_seed(6)
    model = _Pooled(conv).double().to(device).eval()
    model.forward = lambda x, edge_index: model.head(torch.relu(model.conv2(torch.relu(model.conv1(x, edge_index)),
                                                                            edge_index)))
    graph = _graphs(device, sizes=(12,), seed=5)[0]
    ex = Explainer(model, algorithm=LRPExplainer(), explanation_type="model", node_mask_type="attributes",
                   edge_mask_type="object",
                   model_config=dict(mode="multiclass_classification", task_level="node", return_type="raw"))
    index = torch.tensor([1, 4, 9], device=device)
    e = ex(graph.x, graph.edge_index, index=index)
    logits = model(graph.x, graph.edge_index).detach()[index]
    want = float(logits.max(-1).values.sum())
    assert e.bias_relevance.shape == () and e.bias_relevance.device == graph.x.device
    assert abs(float(e.bias_relevance)) > 1e-6
    total = float(e.node_relevance.sum() + e.bias_relevance + e.relevance_residual)
    assert total == pytest.approx(want, abs=1e-9)


def test_accounts_total_is_one_number_for_the_call(device):
    """accounts="total": one backward, bias_relevance and relevance_residual 0-dimensional, the sums
    of the per-graph (and per-target) values; a wrong value is refused, naming the argument."""
    torch.manual_seed(3)
    model = _Pooled("gcn").double().to(device).eval()
    data = Batch.from_data_list(_graphs(device))
    target = torch.tensor([0, 1, 1, 0], device=device)
    each = _graph_explainer(model)(data.x, data.edge_index, batch=data.batch, target=target)
    ex = Explainer(model, algorithm=LRPExplainer(rule="epsilon", accounts="total"), explanation_type="phenomenon",
                   node_mask_type="attributes", edge_mask_type="object",
                   model_config=dict(mode="multiclass_classification", task_level="graph", return_type="raw"))
    total = ex(data.x, data.edge_index, batch=data.batch, target=target)
    assert total.bias_relevance.shape == () == total.relevance_residual.shape
    torch.testing.assert_close(total.bias_relevance, each.bias_relevance.sum(), rtol=0, atol=1e-9)
    # the same relevance: bit for bit on the CPU; on a GPU, whose scatter sums add in no fixed order,
    # to float64 rounding
    torch.testing.assert_close(total.node_relevance, each.node_relevance, rtol=0,
                               atol=0 if device.type == "cpu" else 1e-13)
    nodes = Explainer(GCNConv(3, 1).double().to(device), algorithm=LRPExplainer(per_index=True, chunk_size=2, accounts="total"),
                      explanation_type="model", node_mask_type="object",
                      model_config=dict(mode="regression", task_level="node", return_type="raw"))
    e = nodes(data.x, data.edge_index, index=torch.tensor([0, 3, 5], device=device))
    assert e.bias_relevance.shape == ()
    with pytest.raises(ValueError, match="accounts must be"):
        LRPExplainer(accounts="per_graph")


@pytest.mark.parametrize("index, error, match", [
    (6, IndexError, r"index selects rows 6..6 but the model gives 6 output row\(s\)"),
    (-7, IndexError, r"index selects rows -7..-7"),
    (torch.tensor([0, 9]), IndexError, r"index selects rows 0..9"),
    (torch.tensor([0.0, 1.0]), TypeError, "index must hold integer row numbers"),
    (torch.ones(4, dtype=torch.bool), ValueError, "boolean mask of 4 entries but the model gives 6"),
    ("0", TypeError, "index must be an int, a slice, a list of ints or a tensor"),
    ([0, 7], IndexError, r"index selects rows 0..7"),
])
def test_an_index_out_of_the_outputs_rows_is_named(index, error, match):
    """An explained row that the output does not have gives an error naming ``index``, never a bare
    IndexError from inside the explanation."""
    from lrp_lib.explain.explainer import Explainer as CheckingExplainer
    torch.manual_seed(0)
    conv_model = _IndexNet().eval()
    ex = CheckingExplainer(conv_model, algorithm=LRPExplainer(), explanation_type="model",
                           node_mask_type="attributes", model_config=dict(mode="multiclass_classification",
                                                                          task_level="node", return_type="raw"))
    x, ei = torch.randn(6, 3), torch.tensor([[0, 1, 2, 3, 4], [1, 2, 3, 4, 5]])
    with pytest.raises(error, match=match):
        ex(x, ei, index=index)
    ok = ex(x, ei, index=torch.tensor([0, 5, -1]))  # in range, negative from the end
    assert ok.node_mask.shape == (6, 3)


class _IndexNet(nn.Module):
    def __init__(self):
        super().__init__()
        from torch_geometric.nn import GCNConv as _GCN
        self.conv, self.lin = _GCN(3, 4), nn.Linear(4, 2)

    def forward(self, x, edge_index):
        return self.lin(self.conv(x, edge_index).relu())


@pytest.mark.parametrize("replay", [False, True])
@pytest.mark.parametrize("conv", [GCNConv, lambda a, b: GATConv(a, b, heads=1), SAGEConv], ids=["gcn", "gat", "sage"])
def test_a_graph_without_edges_gets_an_empty_edge_mask(conv, replay):
    """A graph of isolated nodes (a molecule of one atom, a salt's ions) with edge masks: an edge mask of shape (0,),
    the self-loops' relevance left with their nodes, and the whole logit accounted for; also captured, from the
    second call."""
    torch.manual_seed(0)

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.c1, self.c2 = conv(4, 8), conv(8, 3)

        def forward(self, x, edge_index):
            return self.c2(self.c1(x, edge_index).relu(), edge_index)

    model = Net().double().eval()
    x, edge_index = torch.randn(3, 4, dtype=torch.float64), torch.zeros(2, 0, dtype=torch.long)
    explainer = Explainer(model, algorithm=LRPExplainer(replay=replay), explanation_type="model",
                          node_mask_type="attributes", edge_mask_type="object",
                          model_config=dict(mode="multiclass_classification", task_level="node", return_type="raw"))
    for _ in range(2):
        e = explainer(x, edge_index, index=1)
    assert e.edge_mask.shape == (0,) and e.edge_relevance.shape == (0,)
    assert not replay or e.replayed, e.replay_reason
    logit = float(model(x, edge_index)[1].max())
    assert float(e.node_relevance.sum() + e.bias_relevance) == pytest.approx(logit, rel=1e-12, abs=1e-14)
    assert abs(float(e.relevance_residual)) < 1e-14
